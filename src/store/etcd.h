/*
 * etcd — a small client of etcd v3.4, shared by the etcd store and the etcd
 * election: its JSON gateway (grpc-gateway over HTTP/1.1) for most calls,
 * and gRPC itself (protobuf over HTTP/2, pb.h) for the store's transactions,
 * where the gateway's work cost etcd more than the write (etcd_txn.h). No
 * etcd client library in C exists in Debian; this is the one place that
 * speaks etcd's protocols.
 *
 * Keys and values are base64 in JSON; int64 fields (lease ids, revisions) are
 * JSON strings on the wire, and are sent as strings too.
 *
 * An EtcdClient holds its libcurl handles, so it belongs to one thread. A call
 * tries each endpoint at most once, starting with the last one that answered,
 * and moves to the next on a transport failure (refused, reset, timed out;
 * connecting gives up after 1 s) or a 5xx answer; with etcd_client_retry it
 * goes on round after round, within a time budget. A call that timed out
 * after it was sent may have been applied, even later than its copy sent
 * next: callers only send requests that are safe to apply twice and late (a
 * store txn fenced on the leader key and ordered by its commit mark,
 * store_etcd.c; a keepalive; a candidate's put of its own key,
 * election_etcd.c).
 */
#ifndef LEASEGATE_ETCD_H
#define LEASEGATE_ETCD_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/pb.h"

#define ETCD_MAX_ENDPOINTS 8

/* Why an attempt of a call got no usable answer, for /metrics. */
typedef enum EtcdErrKind {
    ETCD_ERR_UNREACHABLE, /* nothing answered: refused, reset, no route, name not found */
    ETCD_ERR_TIMEOUT,     /* no answer within the attempt's bound */
    ETCD_ERR_TLS,         /* a certificate was refused, ours or etcd's */
    ETCD_ERR_UNAVAILABLE, /* etcd answered that it cannot now: no leader, too many requests, stopping */
    ETCD_ERR_NOSPACE,     /* etcd's quota alarm: "database space exceeded" */
    ETCD_ERR_REFUSED,     /* any other final refusal: permission, authentication, a bad request */
    ETCD_ERR_KINDS
} EtcdErrKind;

/* What this gateway's etcd clients met, counted for /metrics. One per gateway
 * (the server context owns it), shared by every client of it on any thread:
 * counters only, each updated on its own. */
typedef struct EtcdStats {
    _Atomic uint64_t errors[ETCD_ERR_KINDS]; /* attempts that failed, by kind */
    _Atomic uint64_t retries;            /* attempts after a call's first (the next member, a new round) */
    _Atomic uint64_t keepalive_failures; /* keepalives of the leadership lease that renewed nothing */
    _Atomic uint64_t elections_won;      /* campaigns this gateway won, and re-leads under a new lease */
    _Atomic uint64_t leader_changes;     /* times this gateway saw another leader (or none) take over */
    /* Kept by the compaction and quota code (leasegate_etcd_compactions_total,
     * leasegate_etcd_alarm): the history compactions this gateway made, and 1
     * while etcd raises an alarm that refuses writes (NOSPACE), else 0. */
    _Atomic uint64_t compactions;
    _Atomic uint64_t alarm;
} EtcdStats;

const char *etcd_err_kind_name(EtcdErrKind k);

/* --store etcd://HOST:PORT[,HOST:PORT...]/PREFIX, or etcds://... for etcd
 * over TLS (its certificate verified against cacert, always). */
typedef struct EtcdUrl {
    char endpoints[ETCD_MAX_ENDPOINTS][300]; /* "http://HOST:PORT" or "https://HOST:PORT" */
    size_t nendpoints;
    char prefix[256]; /* without leading or trailing '/' or an empty segment, never empty */
    const char *cacert; /* borrowed: the CAs etcd's certificate must be signed by; NULL: the system's */
    const char *cert, *key; /* borrowed: the client certificate and key shown to etcd (PEM); NULL: none */
    struct EtcdAuth *auth; /* borrowed: an etcd user's name and password (etcd_auth.h); NULL: none */
    EtcdStats *stats;   /* borrowed: where every client of this URL counts; NULL: nowhere */
} EtcdUrl;

/* false with the reason in err when url is not etcd(s)://HOST:PORT[,...]/PREFIX.
 * Sets no cacert and no stats. */
bool etcd_url_parse(const char *url, EtcdUrl *out, char *err, size_t errlen);

typedef struct EtcdClient EtcdClient;

/* timeout_ms bounds each attempt (0: none). NULL when out of
 * memory or libcurl cannot start. The url is copied. */
EtcdClient *etcd_client_new(const EtcdUrl *url, long timeout_ms);
void etcd_client_free(EtcdClient *c);
/* Fast failover for a client whose calls must get through (the store's): the
 * attempts of a call's first round of endpoints wait first_timeout_ms each,
 * and the call goes round the endpoints again until budget_ms has passed,
 * each round after one with a timeout waiting twice as long per attempt (up
 * to timeout_ms), after a round that failed at once pausing briefly.
 * A member that lost its Raft leader (the proposal forwarded to a dead
 * leader is never answered) then costs first_timeout_ms, not timeout_ms. */
void etcd_client_retry(EtcdClient *c, long first_timeout_ms, long budget_ms);
/* A call is given up when cancelled(ud) returns true (a candidate's, when the
 * gateway is asked to stop); it is asked about once a second while it waits. */
void etcd_client_cancel_when(EtcdClient *c, bool (*cancelled)(void *ud), void *ud);

/* Why the last call's last failed attempt failed (an EtcdErrKind); -1 when
 * none of its attempts failed that way (it succeeded at once, was cancelled,
 * ran out of memory). */
int etcd_client_last_error(const EtcdClient *c);

/* The next call starts at the next endpoint: after an answer another member
 * may give differently (a keepalive's TTL 0 from a member that lost track of
 * the lease, an error etcd's gateway wrote into a stream's answer). */
void etcd_client_next(EtcdClient *c);

/* POSTs body to path ("/v3/kv/txn"), taking body over (jansson's "_new"
 * rule: a caller builds it and hands it on); NULL, when building it ran out
 * of memory, fails the call. 0 with *resp the answer (owned by the caller),
 * or -1 with the reason in err. */
int etcd_call(EtcdClient *c, const char *path, json_t *body, json_t **resp, char *err, size_t errlen);

/* A unary gRPC call: method is its path ("/etcdserverpb.KV/Txn"), request
 * the serialized message (one with nomem set fails the call). 0 with
 * *answer the answer's message (the caller frees it with pb_free), or -1
 * with the reason in err and *answer empty. Endpoints, attempts and their
 * bounds as for etcd_call; gRPC codes that etcd's gateway turns into 5xx or
 * 429 move on to the next member, as those answers do. */
int etcd_grpc_call(EtcdClient *c, const char *method, const PbBuf *request, PbBuf *answer, char *err,
                   size_t errlen);

/* What etcd says when it refuses a write for one of its alarms: its quota
 * is full (NOSPACE: until an operator frees space and disarms it) or its
 * members' data differ (CORRUPT). Such a call fails at once, on the first
 * member: every member shares the alarm. */
#define ETCD_NOSPACE_TEXT "database space exceeded"
#define ETCD_CORRUPT_TEXT "corrupt cluster"
/* "NOSPACE" or "CORRUPT" when an error (its text) is such a refusal, else NULL. */
const char *etcd_alarm_name(const char *err);

/* Base64 (RFC 4648, with padding). encode: a new NUL-terminated string;
 * decode: a new buffer of *len bytes plus a NUL, or NULL when text is not
 * base64. NULL also when out of memory. */
char *etcd_b64_encode(const void *data, size_t len);
char *etcd_b64_decode(const char *text, size_t *len);

/* An int64 field as etcd's gateway writes it (a string, or absent for 0).
 * false when present but not a number. */
bool etcd_int_field(const json_t *obj, const char *key, long long *out);

#endif
