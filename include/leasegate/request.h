/*
 * request — one HTTP request as every layer sees it: the HTTP layer (http.h)
 * creates and ends it, park.h may hold its socket, the endpoints answer it,
 * and a guarded one carries its upstream call. A declaration only, so that
 * the layers that keep a part of it need not include each other.
 * A context header: every layer may read it.
 */
#ifndef LEASEGATE_REQUEST_H
#define LEASEGATE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/locktab.h"
#include "core/prefixidx.h"
#include "leasegate/dlist.h"
#include "leasegate/server.h"
#include "net/auth.h"
#include "net/loop.h"
#include "store/commit.h"

struct MHD_Connection;
struct MHD_Response;
typedef struct ProxyCall ProxyCall;
typedef struct GuardWrite GuardWrite;

typedef void (*Handler)(Request *req);

struct Peer;

/* What the HTTP layer keeps per connection (libmicrohttpd's socket context):
 * the HTTP layer's, read by park.h. */
typedef struct HttpConn {
    void *park;        /* park.h's byte accounting, or NULL (TLS, out of memory) */
    struct Peer *peer; /* peers.h: its peer's counts, or NULL when not counted */
    bool sending;      /* counted as one of its peer's half-sent requests */
} HttpConn;

/* A request whose body the layer above takes as it arrives (a guarded call
 * streams it upstream) instead of the HTTP layer gathering it. */
typedef struct RequestStream {
    /* Takes what fits of the body, leaving the rest in *size (the connection
     * is then suspended until there is room). */
    void (*upload)(Request *req, const char *data, size_t *size);
    /* The whole request is read. False: drop the connection. */
    bool (*complete)(Request *req);
    /* Stopping before the request was complete: cut the call off. */
    void (*abort)(Request *req);
} RequestStream;

/* A long-polling acquire's place in the queue: the HTTP layer's (http_wait). */
typedef struct RequestWait {
    Waiter *waiter;     /* while queued in the lock table */
    int watch_fd;       /* socket watched by the loop for a hang-up, or -1 */
    bool listed;        /* in Server.waiting (through link) */
    DLink link;
} RequestWait;

/* A parked request (park.h): the socket is park's, conn is NULL. */
typedef struct RequestPark {
    int fd;             /* owned; -1 unless parked */
    DLink link;         /* in Server.parked */
    bool ready;         /* in Server.park_ready (through rlink) */
    DLink rlink;
    bool writing;       /* in Server.park_writing (through rlink): waiting for EPOLLOUT */
    int64_t write_deadline_ms; /* while writing: given up then (monotonic ms) */
    char *out;          /* owned: the answer's bytes, or its head before `shared` */
    size_t out_len;     /* bytes in out */
    size_t out_off;     /* written so far, of out and then of shared */
    struct SharedText *shared; /* a reference (sharedtext.h): the answer's body, shared with other
                                * requests (a watch's), or NULL */
    struct Peer *peer;  /* its peer's count of connections while parked (peers.h) */
} RequestPark;

/* What one guarded call holds of the guard's shares (guardshare.h); zeroed
 * when it holds nothing. */
typedef struct ShareUse ShareUse;
typedef struct GuardTicket {
    ShareUse *key, *peer, *route;
} GuardTicket;

/* Under a guard prefix (guard.h): the upstream call, for a write its place
 * in the guard, and the call's share of the guard (a write's moves to the
 * write). The guard's, made for a guarded request only (a waiting acquire
 * does not carry it). */
typedef struct RequestGuard {
    ProxyCall *call;
    ProxyCall *pre; /* a read's HEAD before its call (GetObjectTagging: is it a tombstone?), or NULL */
    GuardWrite *write;
    GuardTicket ticket;
    struct S3Write *s3; /* an S3 route's write: its steps (s3req.h) */
    struct FormScan *form; /* owned: a write's form body, scanned for a method override (formscan.h) */
    /* Set on an S3 route: every error answer of the request (the guard's and
     * the layers' before it) is written in S3's XML by this (s3err.h), which
     * takes over extra (an ErrCode, a json_t *). NULL: the JSON error. */
    void (*reply_error)(Request *req, int code, void *extra, const char *message);
    const void *route;  /* the GuardRoute, once matched */
    struct S3Auth *auth; /* an S3 route's signed request: its body's checks (s3auth.h) */
    bool write_checked;  /* the signed body's last checks were made */
    uint64_t s3_token;   /* an S3 write's token, for its answer (a multipart upload's record) */
    char s3_lock[258];   /* its lock (a binding: guardroute.h GUARD_BINDING_MAX + 1; an S3 route binds locks) */
} RequestGuard;

/* A grant this request's answer reveals, released if it is not delivered:
 * the API's (api.h). */
typedef struct RequestGrant {
    bool pending;
    bool refused;       /* its answer became a 503 (a stall, http.c): undelivered, whatever the socket took */
    uint8_t kind;       /* LockKind: of a lock or of a semaphore */
    char *lock;         /* owned */
    uint8_t lease[LEASE_ID_BYTES];
    int64_t asked_us;   /* boot clock: when the acquire was handled; its wait runs from here */
} RequestGrant;

/* The API key a request was let in with (access.h): the API's. The table is
 * held until the request ends, so a reload cannot free the key under it. */
typedef struct RequestAccess {
    AuthTable *table; /* a reference, or NULL (no --auth-file, or no key needed) */
    const AuthKey *key; /* in table */
    unsigned secret;    /* which of key's secrets the request presented (auth.h) */
    bool waiting;       /* counted as one of its key's waiters (quota.h) */
    bool polling;       /* held open: counted in its key's and peer's max_polls (quota.h) */
    void *key_use, *peer_use; /* while polling: the entries counted (quota.c's) */
    uint64_t watch_bytes; /* while polling: counted in their max_watch_bytes (a watch's answer) */
    bool listed;        /* with a key, waiting or polling: in Server.keyed (through link) */
    DLink link;
} RequestAccess;

/* A reader of the events that follows the lock names starting with one
 * prefix: a long-poll or a stream (events.h). Kept by prefix, so that an
 * event reaches only the readers it concerns. */
typedef struct EventsReader {
    PrefixSub sub;      /* in the events' index while open */
    DLink link;         /* in the events' list of open readers */
    bool open;
    /* The seq of the first event published for this reader that it has not
     * taken yet; 0: none. Every event between what it took and `first` was
     * for other readers. */
    uint64_t first;
    bool woken_pending; /* in the list of readers a publish wakes (through wlink) */
    DLink wlink;
    /* Once per publish that gives it events (after all of them are in the
     * ring), and when the server starts stopping. */
    void (*woken)(struct EventsReader *r);
} EventsReader;

/* A GET /v1/events long-poll waiting for events (events.h): the API's. */
typedef struct RequestEvents {
    bool waiting;       /* reader open, deadline queued */
    EventsReader reader;
    HeapEntry deadline;
    size_t limit;
    char *prefix;       /* owned: a copy of the query's, or NULL */
    struct Stream *stream; /* GET /v1/events/stream: its answer's state, owned by the response (event_stream.h) */
} RequestEvents;

/* A GET /v1/locks/NAME?index= waiting for the lock to change (watch.h): the API's. */
typedef struct RequestWatch {
    void *on;           /* the watch's entry for its lock while waiting, else NULL */
    DLink link;
    HeapEntry deadline;
    const struct WatchCalls *calls;
    const char *name;   /* the lock's name, the watch's (req->arg may be freed while it waits) */
    uint64_t index;     /* answer once the lock's index is past this */
} RequestWatch;

/* What a long-poll of the API keeps while it waits (an events long-poll or
 * stream, a watch): allocated by the handler that makes the request one
 * (request_poll), so that every other request, a waiting acquire above all,
 * does not carry its 200 bytes. The API's; freed with the request. */
typedef struct RequestPoll {
    Request *req;
    RequestEvents events;
    RequestWatch watch;
} RequestPoll;

/* The HTTP layer creates, answers and ends a request; each part below it
 * names is written by one layer only. */
struct Request {
    LoopSource source;  /* for socket watches while waiting or parked */
    Server *srv;
    struct MHD_Connection *conn;
    char *raw_uri;      /* owned: the request target as sent, still %-encoded */
    bool routed;        /* the first access callback has run */
    bool complete;      /* the last access callback has run (the handler, or the proxy's end) */
    Handler handler;    /* NULL when no route matched */
    const char *allow;  /* for a 405: the methods the path allows */
    char *arg;          /* owned: the path's name/resource part, or NULL */
    char *body;         /* owned: the gathered body */
    size_t body_len;
    bool body_too_large;
    bool body_nomem;    /* the body could not be held: 503, not 413 */
    bool in_handler;    /* inside the access callback: may queue directly */
    bool suspended;
    bool over_half_sent; /* begun while its peer was at its share of half-sent requests: 429 */
    DLink slink;        /* in Server.suspended while suspended */
    bool close;         /* on resume, drop the connection */
    unsigned status;
    bool reveals_nothing; /* its answer needs no commit or barrier (http_reveals_nothing) */
    bool changes;       /* not GET, HEAD or OPTIONS: refused while the store stalls */
    bool stall_ok;      /* its answer reveals nothing of a batch not yet durable (http_stall_ok) */
    struct MHD_Response *response; /* owned: built, waiting to be queued */
    CommitHold hold;
    /* How the request ends (the HTTP layer's): also for a parked request,
     * whose end park.c reports. */
    void (*end)(Request *req, bool delivered);
    /* Set by the layer above when it takes the body as it arrives. */
    const RequestStream *stream;
    /* What this request took from the socket (park.h); 0 when unknown. */
    bool http11;
    uint64_t wire_bytes;
    struct RequestLog *log; /* owned; what --access-log writes of it; NULL without one */
    RequestWait wait;
    RequestPark park;
    RequestGuard *guard; /* owned by the guard; NULL unless guarded */
    RequestGrant grant;
    RequestAccess access;
    RequestPoll *poll;  /* owned; NULL unless the request is a long-poll (request_poll) */
};

/* req's long-poll part, made on first use; NULL when out of memory. */
static inline RequestPoll *request_poll(Request *req)
{
    if (!req->poll && (req->poll = calloc(1, sizeof *req->poll)))
        req->poll->req = req;
    return req->poll;
}

#endif
