/*
 * guard — storage backends behind leasegate: requests under a --guard prefix
 * are forwarded upstream; a write only when it proves that it holds every
 * lock of the resources it names.
 *
 * Methods: each route forwards the methods it lists (guardroute.h); GET,
 * HEAD and OPTIONS are reads and pass, never with a body; any other listed
 * method is a write; a method not listed gets 405 with Allow.
 *
 * Binding: a path under PREFIX is bound to the lock its path below PREFIX
 * names (/store/reports/q3.csv -> reports/q3.csv), or to the route's one lock
 * (--guard PREFIX=UPSTREAM,lock=NAME). A COPY or MOVE also names its
 * Destination, which must be under the same prefix (or an absolute URI with
 * the request's Host), and one that a request sent to it would reach through
 * the same route (not a longer prefix listed before it, whose own binding
 * protects that path), and is bound to its own lock: the write carries that
 * lock's lease in Fencing-Destination-Lease too (one lease covers both on a
 * lock=NAME route), and the upstream gets the Destination rewritten to its
 * own URL, with Fencing-Destination-Token and Fencing-Destination-Lock.
 * Only canonical targets pass (guardpath.h); header values with control
 * bytes are refused. (libmicrohttpd 0.9.75 cuts a value at a NUL and reads an
 * obs-folded line into the header's name before we see them; either way the
 * upstream gets exactly the headers checked here, as well-formed lines.)
 *
 * No write reaches more than its resources: headers that make a backend act
 * on another resource or with another method (X-HTTP-Method-Override,
 * X-HTTP-Method, X-Method-Override, X-Original-URL, X-Rewrite-URL; and
 * Destination on anything but COPY and MOVE) are refused on writes; where
 * each path has its own lock, so are collection targets (a trailing '/'),
 * Depth, Slug and an If header that names a resource (in any of its lines:
 * they are one list, and all go upstream). Reads lose all of
 * them before they go upstream.
 *
 * A write must carry the lease that holds its bound lock in Fencing-Lease
 * (else 428); its token must not be below the highest token that arrived for
 * that lock (else 409). The lease is never forwarded; the token and the lock
 * are (Fencing-Token, Fencing-Lock), so a backend may check them too.
 *
 * The promise is about what the backend applies, assuming a backend applies a
 * write before it answers it, never applies a request it did not receive
 * whole, and applies one it did receive within --guard-settle seconds of its
 * last byte or never (guardq.h has the order of writes):
 *  - a write's mark and the time it was let through are durable before its
 *    end goes upstream;
 *  - writes for one lock go upstream one at a time, in arrival order: the
 *    next starts once the previous one was answered, or failed before it was
 *    sent whole, or --guard-settle after its connection closed unanswered;
 *  - the end of a write's body is held back until the whole body has arrived
 *    and the check has passed again.
 * So a backend applies the writes of a lock in token order, and never one
 * from a lease that had ended when its last byte left.
 *
 * Shares: calls are bounded globally (--guard-max-calls, 503), per API key
 * (429 key_limit) and per peer address (429 peer_limit) (guardshare.h), and
 * per lock (--guard-lock-max-calls, 503).
 */
#ifndef LEASEGATE_GUARD_H
#define LEASEGATE_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/names.h"
#include "guard/guardroute.h"
#include "net/http.h"

typedef struct Guard Guard;
typedef struct GuardWrite GuardWrite;

Guard *guard_new(Server *s); /* NULL on allocation failure */
void guard_free(Guard *g);
/* After the proxy exists, before serving: S3 routes load their credentials
 * and start probing their stores (s3.h); a store that fails closes its route
 * only. False with one line in err when the credentials do not load (the
 * start stops). */
bool guard_open(Guard *g, char *err, size_t errlen);
/* SIGHUP: S3 credentials are read again, and S3 routes probed again. False
 * with one line in err (the old credentials stay). */
bool guard_reload(Guard *g, char *err, size_t errlen);
/* What a route's probe last found (s3.h), for /healthz and /metrics: http
 * routes are not probed. detail says why, without any URL of the store's. */
typedef enum GuardRouteUp { GUARD_ROUTE_UNPROBED, GUARD_ROUTE_OPEN, GUARD_ROUTE_CLOSED, GUARD_ROUTE_REFUSED } GuardRouteUp;
GuardRouteUp guard_route_state(Guard *g, size_t route, char *detail, size_t detail_len);
const char *guard_route_state_name(GuardRouteUp st);
/* At start, for each stored guard mark: the time its lock's last write was
 * let through (guardq.h). False when out of memory. */
bool guard_restore(Guard *g, const char *lock, int64_t at_ms, const Now *now);
/* The guard whose prefix raw_uri starts with, or NULL. */
const GuardRoute *guard_match(const Server *s, const char *raw_uri);
/* Before the access check: the request is the route's, and on an S3 route
 * its errors are S3's (s3err.h). False when out of memory (answered). */
bool guard_prepare(Request *req, const GuardRoute *route);
/* The locks a request under `route` is bound to, for the access check that
 * comes before guard_begin: its path's ("" when the path names none), and a
 * COPY's or MOVE's Destination's when that parses. Returns how many (1 or 2). */
size_t guard_bound_locks(Request *req, const GuardRoute *route, const char *method,
                         char locks[2][GUARD_BINDING_MAX + 1]);
/* Runs at the request's first callback (headers only): the guard takes the
 * body as it arrives (req->stream, also when it refuses the request), and
 * either rejects it or sets up its upstream call (req->guard->call), which
 * starts when its turn comes. The body's end may still refuse a write. `key`
 * is the name of the API key the request came with (NULL: none). */
void guard_begin(Request *req, const GuardRoute *route, const char *method, const char *key);
/* The request is over: its write leaves the lock's queue, unless its whole
 * request is already with the upstream (then its call runs on until the
 * upstream answers, and the next write waits for that); the call is freed. */
void guard_request_end(Request *req);
/* Loop plumbing: settle times and the waits of queued writes. */
int64_t guard_next_timeout_ms(const Guard *g, const Now *now); /* -1: none */
void guard_tick(Guard *g, const Now *now);

#endif
