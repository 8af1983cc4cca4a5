/*
 * dormant — a parked waiting acquire kept as a compact record while it
 * waits, in place of its whole Request.
 *
 * Why: a waiter may wait for minutes, and ten thousand of them are a normal
 * load; its Request (472 bytes) is mostly what routing, a body, an answer
 * and its commit need, none of which a waiter uses until its wait ends. A
 * Dormant keeps what the wait and the answer need (the socket, its place in
 * the lock table, its peer, its API key and when it asked: 168 bytes), and
 * is made into a Request again (woken) the moment its wait ends: before the
 * lock table grants it or times it out (LocktabHooks.waking), when its
 * client hangs up, when the server stops or stalls, when its key is
 * reloaded. Only a parked waiter dozes (park.h: its socket is ours); a
 * suspended one keeps its Request, as does one whose Dormant could not be
 * allocated.
 *
 * Invariants:
 *  - a dormant waiter is in exactly one of Server.dormant (waiting),
 *    Server.dormant_doomed (its end is due but no Request could be made for
 *    it yet: out of memory; dormant_flush tries again and ends it, closing
 *    its connection) and Server.dormant_woken (it became `woken`, and is freed
 *    once no batch of the loop can still hold its socket's old source);
 *  - the lock table's context of a dormant waiter is its Dormant (a woken
 *    one's is its Request): Dormant and Request both begin with their
 *    LoopSource, whose callback tells them apart (dormant_request);
 *  - while it dozes its access part is off Server.keyed (rekey.c checks the
 *    dormant through Server.dormant); a woken one's is listed again if it
 *    was (access.listed);
 *  - nothing is granted to a waiter that could not be woken: the lock table
 *    drops it from its queue instead (LocktabHooks.waking), and its
 *    connection is closed without an answer, as if its client had gone.
 *
 * Only the loop thread calls these.
 */
#ifndef LEASEGATE_DORMANT_H
#define LEASEGATE_DORMANT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/locktab.h"
#include "leasegate/dlist.h"
#include "leasegate/request.h"
#include "leasegate/server.h"
#include "net/loop.h"

struct Peer;
struct RequestLog;

typedef struct Dormant {
    LoopSource source;     /* first, as in Request (see above): its socket's hang-up */
    int fd;                /* the parked socket, owned */
    bool changes, stall_ok; /* the Request's flags of the same names */
    Server *srv;
    DLink link;            /* in `list`: one of the Server's three lists (above), or a caller's for a moment */
    DList *list;
    union {
        Waiter *waiter;    /* until woken: in the lock table's queue; NULL once it left it */
        Request *woken;    /* once woken (list is Server.dormant_woken): what it became */
    };
    void (*end)(Request *req, bool delivered); /* its Request's (request.h) */
    struct Peer *peer;     /* its peer's count of connections (peers.h) */
    char *raw_uri;         /* owned: kept for --access-log only, else NULL */
    struct RequestLog *log; /* owned: the same */
    int64_t asked_us;      /* RequestGrant.asked_us */
    RequestAccess access;  /* its API key and what it counts against it (quota.h) */
} Dormant;

/* Inside libmicrohttpd's access callback, after the handler: a parked
 * request that waits in the lock table and holds nothing else (no answer,
 * no long-poll, no guarded call) becomes a Dormant. True: it did, and has
 * taken over what it keeps (raw_uri, log); the caller frees the rest of req.
 * False (out of memory, or it is not such a request): req stays as it is. */
bool dormant_doze(Request *req);
/* The Request a waiter's lock-table context stands for (LocktabHooks.waking):
 * a Request as it is, a Dormant woken. NULL when a Dormant could not be
 * woken (out of memory): it no longer has a waiter, and its connection is
 * closed once a Request can be made for it. */
Request *dormant_request(void *waiter_ctx);
/* Wakes d (dormant_request); NULL when out of memory, d then is doomed: its
 * connection is closed, and its waiter leaves the queue, once a Request can
 * be made for it. */
Request *dormant_wake(Dormant *d);
/* Wakes every dormant waiter (the server stops or stalls: each is answered). */
void dormant_wake_all(Server *s);
/* Outside the loop's batch, before park_flush (which then ends them): frees
 * the records of the woken, and ends the doomed for which a Request can now
 * be made. */
void dormant_flush(Server *s);
/* When the loop must turn again for the doomed (0 or a short retry), or -1. */
int64_t dormant_next_timeout_ms(const Server *s);
/* Shutdown, last step, before park_close_all: wakes every dormant waiter
 * (park_close_all then closes it), or lets go of it without a Request. */
void dormant_close_all(Server *s);
/* Connections held as Dormants (counted against --max-connections). */
static inline size_t dormant_count(const Server *s) { return s->dormant.len + s->dormant_doomed.len; }

#endif
