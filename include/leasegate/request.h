/*
 * request — one HTTP request as every layer sees it: the HTTP layer (http.h)
 * creates and ends it, park.h may hold its socket, the endpoints answer it,
 * and a guarded one carries its upstream call. A declaration only, so that
 * the layers that keep a part of it need not include each other.
 */
#ifndef LEASEGATE_REQUEST_H
#define LEASEGATE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leasegate/commit.h"
#include "leasegate/dlist.h"
#include "leasegate/locktab.h"
#include "leasegate/loop.h"
#include "leasegate/server.h"

struct MHD_Connection;
struct MHD_Response;
typedef struct ProxyCall ProxyCall;
typedef struct GuardWrite GuardWrite;

typedef void (*Handler)(Request *req);

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

struct Request {
    LoopSource source;  /* for socket watches while waiting; first member */
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
    DLink slink;        /* in Server.suspended while suspended */
    bool close;         /* on resume, drop the connection */
    unsigned status;
    struct MHD_Response *response; /* owned: built, waiting to be queued */
    CommitHold hold;
    Waiter *waiter;     /* while queued in the lock table */
    int watch_fd;       /* socket watched by the loop, or -1 */
    bool in_waiting;    /* in Server.waiting (through wlink) */
    DLink wlink;
    /* How the request ends (the HTTP layer's http_request_end): also for a
     * parked request, whose end park.c reports. */
    void (*end)(Request *req, bool delivered);
    /* Under a guard prefix: how its body is taken, the upstream call, and for
     * a write its place in the guard (guard.h). */
    const RequestStream *stream;
    ProxyCall *call;
    GuardWrite *guard_write;
    /* A grant this request's response reveals; released if it is not delivered. */
    bool grant_pending;
    char *grant_lock;   /* owned */
    uint8_t grant_lease[LEASE_ID_BYTES];
    /* What this request took from the socket (park.h); 0 when unknown. */
    bool http11;
    uint64_t wire_bytes;
    /* Parked (park.h): the socket is ours, conn is NULL. */
    int own_fd;         /* owned; -1 unless parked */
    DLink plink;        /* in Server.parked */
    bool in_ready;      /* in Server.park_ready (through rlink) */
    DLink rlink;
    bool writing;       /* in Server.park_writing (through rlink): waiting for EPOLLOUT */
    int64_t write_deadline_ms; /* while writing: given up then (monotonic ms) */
    char *out;          /* owned: the answer's bytes */
    size_t out_len, out_off;
    /* For --access-log only (unset without it). */
    int64_t started_us; /* monotonic */
    char method[16];
};

#endif
