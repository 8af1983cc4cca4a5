/*
 * watch — requests waiting for one lock (or election) to change (Consul's
 * blocking query): GET /v1/locks/NAME?index=N&wait_ms=MS (GET
 * /v1/elections/NAME?index=...) answers once the name's index
 * (locktab_index) has moved past N, or at wait_ms.
 *
 * The API says when something happened to a lock (watch_note, from every
 * place that reports an event); the watchers of that name are then asked
 * again, from the loop's tick and never from inside a lock-table call, so
 * each sees the lock between operations, not halfway through one. Their
 * answers wait for the pending commit like every other answer, so a watcher
 * never sees a change a crash could take back. A waiting watch holds no
 * thread: it is held as a waiting acquire is (http_hold: parked outside
 * libmicrohttpd when that is safe, else suspended).
 *
 * One change, one answer: the watchers of a name that a change wakes all
 * get the same answer, built once and shared (sharedtext.h), never a copy
 * each; what each unread socket holds of it is bounded by its send buffer
 * (http_reply_shared), and what a tenant's watches may make the server hold
 * by its share (quota_watch_start: each counts its answer's size). They are
 * answered WATCH_SLICE at a time per turn of the loop, so that waking
 * thousands of them never keeps the loop from everyone else's requests.
 */
#ifndef LEASEGATE_WATCH_H
#define LEASEGATE_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"
#include "leasegate/request.h"
#include "net/errors.h"
#include "net/sharedtext.h"

typedef struct Watches Watches;

/* Watchers answered per turn of the loop (watch_tick). */
#define WATCH_SLICE 64

/* What a watch asks of the endpoint that made it. Every watch of one name
 * has the same calls. */
typedef struct WatchCalls {
    bool (*due)(Request *req);     /* has what it waits for happened? */
    /* Moves with every change to the answer of `name` (a lock's index). */
    uint64_t (*version)(const Server *s, const char *name);
    /* The answer (200, JSON) for `name` now, with one reference; NULL when
     * out of memory. */
    SharedText *(*build)(Server *s, const char *name);
} WatchCalls;

/* NULL when out of memory. */
Watches *watches_new(void);
void watches_free(Watches *w);
/* req (let in by quota_poll_start) waits on the name req->arg of kind for at
 * most wait_ms: due is asked after each watch_note of that name, and the
 * answer of the name's version then sent once it says yes or at the
 * deadline. due reads the name from req->watch.name: req->arg is gone once
 * the request is held (http_hold). calls must outlive the watch. When the
 * answer would take req's key or peer past max_watch_bytes it is answered
 * 429 instead, and 503 when out of memory. */
void watch_start(Request *req, LockKind kind, int64_t wait_ms, const WatchCalls *calls);
/* Something happened to `name` of kind: its watchers are asked again on the next tick. */
void watch_note(Server *s, LockKind kind, const char *name);
/* The loop's: the next deadline (-1: none, 0: watchers to ask now); asking them. */
int64_t watch_next_timeout_ms(const Server *s, const Now *now);
void watch_tick(Server *s, const Now *now);
/* The server is stopping: every watch answers now. */
void watch_drain(Server *s);
/* The watch ends with an error answer (its key was removed or narrowed). */
void watch_end(Request *req, ErrCode code, const char *why);
/* The request is over: it stops watching. */
void watch_request_end(Request *req);
size_t watch_count(const Server *s);
/* Turns of the loop that stopped at WATCH_SLICE with woken watchers left. */
uint64_t watch_slices_deferred(const Server *s);

#endif
