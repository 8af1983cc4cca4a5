/*
 * forward — a follower's request sent on to the leader gateway, and the
 * leader's answer given back as it comes (status, end-to-end headers, body).
 *
 * Streamed both ways: the request goes out once its body is complete or
 * fills the buffer, the rest of its body follows as the client sends it, and
 * the answer's body is passed on as the leader sends it. Memory per forward is two buffers of
 * FORWARD_BUFFER bytes whatever the sizes, so guarded writes of any length go
 * through a follower, and a slow side slows the other (backpressure) rather
 * than filling memory.
 *
 * Used by the standby's libmicrohttpd, one thread per connection: the
 * transfer runs on the connection's own thread (libcurl's multi interface),
 * driven by whichever call waits for it: feeding the body, waiting for the
 * answer's headers (long-polls included), reading the answer's body. No
 * other thread is involved, so a forward costs no hand-off between threads.
 * libcurl handles, each with its connection to the leader, are kept and
 * reused between forwards (a ForwardPool).
 *
 * Every forwarded request carries `Leasegate-Forwarded`; a gateway that gets
 * one and does not lead answers 503 instead of forwarding again, so two
 * followers that each think the other leads cannot bounce a request between
 * them.
 *
 * The forward is abandoned when the leader cannot be reached, when
 * should_stop says so (the leader changed, the standby stops), or when the
 * client hangs up, so that the leader drops a forwarded waiter as soon as its
 * real client has gone. Before the answer's headers arrive, the client then
 * gets 503 with Retry-After (acquires carry a request_id, so a retry is
 * safe); after them, the connection is closed mid-answer, as any proxy does
 * when its upstream fails.
 */
#ifndef LEASEGATE_FORWARD_H
#define LEASEGATE_FORWARD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FORWARD_HEADER "Leasegate-Forwarded"
#define FORWARD_BUFFER (64u * 1024)

/* libcurl handles and their connections to the leader, taken in turn by the
 * forwards of a standby (thread-safe). An https leader's certificate is
 * verified against the PEM bundle cacert (borrowed), or the system's when
 * NULL. */
typedef struct ForwardPool ForwardPool;
/* NULL when out of memory. */
ForwardPool *forward_pool_new(const char *cacert);
/* Call only once no forward runs. */
void forward_pool_free(ForwardPool *p);

typedef struct Forward Forward;

/* A request whose raw target (path and query, as the client sent it) is uri.
 * NULL when out of memory. The caller holds one reference. */
Forward *forward_new(const char *uri);
/* Drops the caller's reference: the request is over (libmicrohttpd's
 * completion). With the last reference a transfer still running is
 * abandoned (its connection closed) and its handle goes back to the pool. */
void forward_release(Forward *f);
const char *forward_uri(const Forward *f);
/* True on the first call for the request only (libmicrohttpd's first call
 * has the headers, never body bytes). */
bool forward_first_call(Forward *f);

/* Is asked, while the forward waits, a few times a second whether to give
 * up; leader is the URL this forward went to. */
typedef bool (*ForwardStop)(void *ud, const char *leader);

/* Prepares the request (method and headers of conn) for leader_url; it goes
 * out as the next calls drive it. false (with *why) when it could not start. */
bool forward_start(Forward *f, ForwardPool *pool, struct MHD_Connection *conn, const char *method,
                   const char *leader_url, ForwardStop should_stop, void *ud, const char **why);
/* True after a successful forward_start. */
bool forward_started(const Forward *f);
/* Passes request body bytes on; blocks while the leader takes them slower
 * than the client sends. Bytes the leader no longer wants (it answered, or
 * the forward failed) are dropped. */
void forward_add_body(Forward *f, const char *data, size_t n);
/* The request body is complete: waits for the leader's answer to begin and
 * returns a response that streams it (the caller queues and destroys it),
 * with *status; NULL (with *why) when the leader gave no answer. */
struct MHD_Response *forward_answer(Forward *f, unsigned *status, const char **why);

#endif
