/*
 * guard — storage backends behind leasegate: requests under a --guard prefix
 * are forwarded upstream; a write only when it proves that it holds the lock
 * the path is bound to.
 *
 * Binding: a path under PREFIX is bound to the lock its path below PREFIX
 * names (/store/reports/q3.csv -> reports/q3.csv), or to the route's one lock
 * (--guard PREFIX=UPSTREAM,lock=NAME). Only canonical targets pass
 * (guardpath.h); header values with control bytes are refused. (libmicrohttpd
 * 0.9.75 cuts a value at a NUL and reads an obs-folded line into the header's
 * name before we see them; either way the upstream gets exactly the headers
 * checked here, as well-formed lines.)
 *
 * GET, HEAD and OPTIONS pass, never with a body. Any other method must carry
 * the lease that holds the bound lock in Fencing-Lease (else 428); its token
 * must not be below the highest token let through for that lock (else 409).
 * The lease is never forwarded; the token and the lock are (Fencing-Token,
 * Fencing-Lock), so a backend may check them too.
 *
 * The promise is about what the backend applies, assuming a backend applies a
 * write before it answers it and never applies a request it did not receive
 * whole:
 *  - a write's mark is durable before any of it goes upstream;
 *  - writes for one lock go upstream one at a time, in arrival order: the
 *    next starts once the previous one was answered (or failed, or timed out);
 *  - the end of a write's body is held back until the whole body has arrived
 *    and the check has passed again: a write whose lease ended or that was
 *    overtaken by a larger token meanwhile is cut off before its end (the
 *    upstream sees an incomplete request) and answered 409. A write overtaken
 *    while it waits or streams is refused at once, so the newer one need not
 *    wait for it.
 * So a backend sees the writes of a lock in token order, and never one from a
 * lease that had ended when its last byte left.
 */
#ifndef LEASEGATE_GUARD_H
#define LEASEGATE_GUARD_H

#include "leasegate/config.h"
#include "leasegate/http.h"

typedef struct Guard Guard;
typedef struct GuardWrite GuardWrite;

Guard *guard_new(Server *s); /* NULL on allocation failure */
void guard_free(Guard *g);
/* The guard whose prefix raw_uri starts with, or NULL. */
const GuardRoute *guard_match(const Server *s, const char *raw_uri);
/* Runs at the request's first callback (headers only): the guard takes the
 * body as it arrives (req->stream, also when it refuses the request), and
 * either rejects it or sets up its upstream call (req->call), which starts
 * when its turn comes. The body's end may still refuse a write. */
void guard_begin(Request *req, const GuardRoute *route, const char *method);
/* The request is over: its write leaves the lock's queue, unless its whole
 * request is already with the upstream (then its call runs on until the
 * upstream answers, and the next write waits for that); the call is freed. */
void guard_request_end(Request *req);

#endif
