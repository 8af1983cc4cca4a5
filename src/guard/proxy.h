/*
 * proxy — forwarding one HTTP request to an upstream and streaming the answer
 * back, with libcurl's multi-socket interface driven by the loop's epoll.
 *
 * Nothing is buffered whole: the client's body flows to the upstream through
 * a bounded buffer, and the upstream's body flows back through another. When
 * a buffer is full the producer waits (the client connection is suspended, or
 * the curl transfer is paused); when it is empty the consumer waits. So a
 * 50 MiB PUT or GET costs at most two buffers of PROXY_BUFFER bytes, each
 * allocated only once bytes flow that way.
 *
 * A call may hold back the end of its body (proxy_call_hold_end): the last
 * byte, or for a body of unknown length its end, is not handed to the
 * upstream until proxy_call_release, so the upstream cannot apply a write
 * that its sender may still lose the right to make. A call that has released
 * its end can outlive its client (proxy_call_detach): it runs until the
 * upstream answers, and only then reports that it was answered.
 *
 * All of it runs on the loop thread.
 */
#ifndef LEASEGATE_PROXY_H
#define LEASEGATE_PROXY_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"
#include "net/loop.h"

#define PROXY_BUFFER (256 * 1024)

typedef struct Proxy Proxy;
typedef struct ProxyCall ProxyCall;
struct curl_slist;
typedef struct Request Request;

typedef struct ProxyStats {
    uint64_t forwarded;       /* requests sent upstream */
    uint64_t upstream_errors; /* 502/504 answers and transfers broken midway */
} ProxyStats;

/* How a call ended, as far as the upstream's applying the request goes. */
typedef enum ProxyOutcome {
    PROXY_ANSWERED, /* the upstream's final status line came */
    PROXY_NOT_SENT, /* no connection was made: the upstream has none of it */
    PROXY_UNKNOWN,  /* ended without an answer after the request (maybe whole) was sent */
} ProxyOutcome;

/* Called on the loop thread, never inside a libcurl callback, once the
 * upstream's final status line is in, or the transfer ended without one. */
typedef void (*ProxyAnswered)(void *ud, ProxyOutcome outcome);

/* timeout_s: a call with no byte moving either way for this long ends: 504
 * before the upstream's answer started, a cut-off body after. https
 * upstreams must present a certificate for their name signed by a CA in the
 * PEM bundle cacert (borrowed), or by the system's when NULL; else 502. */
Proxy *proxy_new(Loop *loop, unsigned timeout_s, const char *cacert); /* NULL on failure */
void proxy_free(Proxy *p);
/* Loop plumbing: the timer (curl's sockets are watched in the loop). */
int64_t proxy_next_timeout_ms(const Proxy *p, const Now *now); /* -1: none */
void proxy_tick(Proxy *p, const Now *now);
/* Shutdown: drops every call and resumes its client connection to close it. */
void proxy_abort_all(Proxy *p);
const ProxyStats *proxy_stats(const Proxy *p);

/* Calls not done yet (started or not), for the cap on concurrent calls. */
size_t proxy_calls(const Proxy *p);

/* Which of the client's headers a call sends: all but hop-by-hop ones (also
 * those named in its Connection header), the names in `drop`, and (with
 * `keep`) those keep says no to; plus the "Name: value" lines in `add`
 * (lists NULL-terminated, may be NULL). */
typedef struct ProxyHeaders {
    const char *const *drop;
    const char *const *add;
    bool (*keep)(const char *name, size_t len);
} ProxyHeaders;

/* A call for req to `url`. Not started yet. content_length is -1 when
 * unknown. NULL on failure. */
ProxyCall *proxy_call_new(Proxy *p, Request *req, const char *method, const char *url, bool has_body,
                          int64_t content_length, const ProxyHeaders *headers);

/* The outcome of a call the server makes of its own (no client): the
 * upstream's final status and header lines ("Name: value"), or status 0 when
 * the call failed or timed out. The call is freed once this returns. */
typedef void (*ProxyResult)(void *ud, long status, const struct curl_slist *headers);
/* A call with no client and no body (a HEAD, say), reported to fn. Not
 * started yet; proxy_call_free cancels it (fn is then never called). */
ProxyCall *proxy_internal_new(Proxy *p, const char *method, const char *url, ProxyResult fn, void *ud);

/* Lets the caller set libcurl options on the call's handle (signing, say)
 * and append header lines to *headers, before the call starts. False when
 * fn says so (it failed: the call must not start). */
typedef bool (*ProxyConfigure)(void *ud, void *curl_easy, struct curl_slist **headers);
bool proxy_call_configure(ProxyCall *c, ProxyConfigure fn, void *ud);
/* One more header line, before the call starts. False when out of memory. */
bool proxy_call_add_header(ProxyCall *c, const char *line);
/* What the caller does with a client's call's answer once its head is in:
 * pass it on as it comes, or gather its whole body (at most
 * PROXY_GATHER_MAX bytes) and answer the client itself. */
#define PROXY_GATHER_MAX (8 * 1024 * 1024)
typedef enum ProxyAnswerAction { PROXY_PASS, PROXY_GATHER } ProxyAnswerAction;
typedef ProxyAnswerAction (*ProxyAnswerHead)(void *ud, long status, const struct curl_slist *headers);
/* The gathered answer: `complete` is false when the transfer failed or the
 * body was too large (body then holds what came). fn must answer req. */
typedef void (*ProxyAnswerGathered)(void *ud, Request *req, long status, const struct curl_slist *headers,
                                    const char *body, size_t len, bool complete);
void proxy_call_on_answer(ProxyCall *c, ProxyAnswerHead head, ProxyAnswerGathered gathered, void *ud);
/* The call's body is `data` (at most PROXY_BUFFER bytes, copied), not the
 * client's (which has none): made with has_body and its length. False when
 * out of memory. */
bool proxy_call_fixed_body(ProxyCall *c, const char *data, size_t len);
/* The upstream's final status, once it came; else 0. */
long proxy_call_status(const ProxyCall *c);
void proxy_call_start(ProxyCall *c);
/* Hold back the end of the body until proxy_call_release (before start). */
void proxy_call_hold_end(ProxyCall *c);
void proxy_call_release(ProxyCall *c);
/* Tell `fn` once the upstream answered (or failed); see ProxyAnswered. */
void proxy_call_on_answered(ProxyCall *c, ProxyAnswered fn, void *ud);
/* Stops the transfer now (the upstream sees the connection close before the
 * request is complete); the call stays owned by its request. */
void proxy_call_abort(ProxyCall *c);
/* The client is gone. A call whose whole request is with curl (started, end
 * released, no answer yet) goes on alone: its answer is discarded, it frees
 * itself after on_answered, and this returns true. Any other call is freed
 * now (false). Either way the request no longer owns it. */
bool proxy_call_detach(ProxyCall *c);
/* The access callback's upload data: takes what fits, leaves the rest in
 * *size and suspends the connection until there is room. */
void proxy_call_upload(ProxyCall *c, const char *data, size_t *size);
/* The access callback's last call (body complete): queues the upstream's
 * answer when its headers are in, else suspends until they are. */
enum MHD_Result proxy_call_final(ProxyCall *c);
/* The client's request is over (delivered or not): stops the transfer. */
void proxy_call_free(ProxyCall *c);

#endif
