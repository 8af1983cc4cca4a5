/*
 * server — the one context that owns everything a running server has.
 * No other mutable state exists outside it. Only the loop thread touches it
 * (core/threads.h says what the other threads may reach, and how).
 * A declaration only: putting it together is gateway.h's, running it
 * runloop.h's, so that every layer can see the context and none of them
 * depends on the layers above it through it.
 * A context header: every layer may read it.
 */
#ifndef LEASEGATE_SERVER_H
#define LEASEGATE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/audit.h"
#include "core/fence.h"
#include "core/leaseid.h"
#include "core/locktab.h"
#include "core/metrics.h"
#include "core/revoked.h"
#include "core/threads.h"
#include "leasegate/config.h"
#include "leasegate/dlist.h"
#include "net/auth.h"
#include "net/hostcheck.h"
#include "net/tls.h"
#include "store/commit.h"
#include "store/election.h"
#include "store/store.h"

struct MHD_Daemon;
struct HttpApp;
typedef struct Loop Loop;
typedef struct Request Request;
typedef struct Proxy Proxy;
typedef struct Guard Guard;

typedef struct Server {
    ThreadOwner owner; /* the loop (threads.h): the handlers and each turn assert it */
    Config cfg;
    Store *store;
    Election *election; /* --store etcd://: this gateway's leadership; NULL with SQLite */
    struct EtcdAuth *etcd_auth; /* --etcd-auth-file's user (owned; cfg.etcd.auth borrows it), or NULL */
    EtcdStats etcd_stats; /* what this gateway's etcd clients met (its election's and its store's) */
    Commit *commit;
    Locktab *locks;
    Fence *fence;
    Fence *guard_marks; /* per lock: the highest token the guard has let through */
    Revoked *revoked;   /* tokens of force-released leases: refused at /v1/fence */
    struct AuditLog *audit; /* the audit trail's newest rows, per key (--audit-keep, auditlog.h) */
    struct Events *events; /* what happens to locks, and its long-polls (events.h) */
    struct EventStreams *streams; /* GET /v1/events/stream (event_stream.h) */
    struct Watches *watches; /* requests waiting for a lock to change (watch.h) */
    struct Observed *observed; /* each election's state as its published events have it (observe.h) */
    /* The audit trail's row for a write the guard refused (the API's trail,
     * handed down so that the guard need not include a layer above it): the
     * lock, the token and owner of the lease presented (0 and "" when none or
     * unknown), and why (a short code: guardq.h). */
    void (*guard_refused)(Request *req, const char *lock, uint64_t token, const char *owner, const char *reason);
    struct Smap *key_use; /* API key name -> what it uses of its shares (quota.h), or NULL */
    struct Smap *peer_use; /* peer address -> what it uses of its shares (quota.h), or NULL */
    DList keyed;        /* Request.access.link: requests with a key that wait or are held open (quota.h);
                         * a dormant waiter's is off the list while it dozes (dormant.h) */
    struct Peers *peers; /* each peer's connections and half-sent requests (peers.h) */
    Proxy *proxy;       /* the guard's upstream calls */
    Guard *guard;       /* the guard's write queues */
    struct MHD_Daemon *daemon;
    int listen_fd;      /* a listening socket not yet handed to MHD (the standby's), or -1 */
    const struct HttpApp *app; /* the layers above HTTP (http.h) */
    Loop *loop;
    Metrics metrics;
    AuthTable *auth;   /* --auth-file's keys (a reference; SIGHUP swaps it), or NULL: no keys needed */
    LeaseIds lease_ids;
    FILE *access_log;  /* --access-log, or NULL */
    Tls tls;           /* HTTPS (--tls-cert) and the CAs of outbound https calls (--cacert) */
    HostCheck hosts;   /* the Host names answered for, and the Origins that may write */
    DList waiting;     /* Request.wait.link: requests in a long-poll */
    DList suspended;   /* Request.slink: connections suspended now (waiting, held, proxied) */
    DList parked;      /* Request.park.link: waiters whose socket is ours (park.h) */
    DList dormant;     /* Dormant.link: parked waiters kept as compact records (dormant.h) */
    DList dormant_doomed; /* Dormant.link: ones to close, once a Request can be made for them */
    DList dormant_woken;  /* Dormant.link: made Requests again, freed after the loop's batch */
    DList park_ready;  /* Request.park.rlink: parked requests whose answer can be written */
    DList park_writing; /* Request.park.rlink: parked answers waiting for room, by deadline */
    bool stopping;
    /* A planned stop (SIGTERM) with --drain-seconds: not ready (/readyz 503)
     * while still serving, until drain_until_ms (monotonic), then stopping. */
    bool draining;
    int64_t drain_until_ms;
    /* "" or why --auth-file did not load at the last reload: requests that
     * need a key get 503 and /readyz says so until a reload succeeds (the
     * keys loaded before are not trusted: they may hold a revoked key). */
    char auth_error[512];
    bool storage_failed;
    bool adding_back;  /* park.c hands a connection back to libmicrohttpd: not a new one */
    /* Over etcd: this gateway no longer leads, or cannot know that it does (a
     * fence failed, its lease is gone, its store gave up). Every request it
     * still holds gets 503, then the process exits 1 (runloop.c). */
    bool deposed;
    int deposed_fd; /* eventfd: the election's thread says leadership is lost (gateway.c); -1 with SQLite */
    int reload_fd;  /* eventfd: the election's thread says another gateway reloaded its keys; -1 with SQLite */
    /* Over etcd: etcd refuses writes for an alarm and the commit writer
     * stalls (commit.h): changes get 503 naming the alarm, reads of what is
     * committed are answered, no lease expires (runloop.c). */
    bool stalled;
    char stall_why[256]; /* the store's refusal, while stalled */
    int64_t stalled_since_ms; /* monotonic */
} Server;

#endif
