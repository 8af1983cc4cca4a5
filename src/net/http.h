/*
 * http — libmicrohttpd glue: one Request per HTTP request, body gathering with
 * limits, the route dispatch, and every way a response leaves.
 *
 * A response that reveals state never leaves before the changes made ahead of
 * it are durable: http_reply* hold it (suspending the connection) until the
 * pending commit batch is written, and only then queue it. On etcd it also
 * waits for a barrier (commit.h): a transaction fenced on this gateway's
 * leader key that committed after the request was complete, so a leader that
 * was deposed while it held a request (paused, cut off) never answers it
 * from memory. Exempt, because they reveal nothing of the lock space: the
 * answers a handler marks with http_reveals_nothing (health, metrics, the
 * dashboard's files) and errors decided from the request alone
 * (http_reply_invalid: 400, 401, 403, 405, 413, 415; 414 and 431 never
 * reach a handler). Once the gateway knows it is deposed (Server.deposed),
 * every answer it still gives is 503 overloaded with Retry-After: 1.
 *
 * A long-polling acquire holds no thread (http_wait): it is parked outside
 * libmicrohttpd when that is safe (park.h), else its connection is suspended.
 * While it waits, the loop watches its socket, so a client that goes away
 * leaves the queue at once.
 */
#ifndef LEASEGATE_HTTP_H
#define LEASEGATE_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/locktab.h"
#include "leasegate/request.h"
#include "leasegate/server.h"
#include "net/errors.h"
#include "net/loop.h"
#include "net/rawjson.h"
#include "net/sharedtext.h"
#include "store/commit.h"

#define HTTP_MAX_BODY (64 * 1024)
/* Limits on a request's target and head, below libmicrohttpd's own (its
 * 16 KiB connection pool), so that our JSON error answers them: beyond the
 * pool libmicrohttpd answers 414/431 itself, in HTML. */
#define HTTP_MAX_TARGET (8 * 1024)
#define HTTP_MAX_HEAD (12 * 1024)
/* libmicrohttpd's memory for one connection: the request's head stays in it
 * while the answer's head is written into what is left. */
#define HTTP_CONNECTION_MEMORY (16 * 1024)

struct MHD_Connection;
struct MHD_Response;

/* What the HTTP layer asks of the layers above (the endpoints, the guard, the
 * lock rules), set by the gateway. Called on the loop thread. */
typedef struct HttpApp {
    /* A new request, after the HTTP layer's own checks (stopping, target and
     * head sizes): route it. It may answer at once (http_reply_*), set
     * req->handler (run once the body is in), req->allow (405), or take the
     * body itself (req->stream). */
    void (*begin)(Request *req, const char *method, const char *url);
    /* A waiting request leaves the lock's queue without its answer: its
     * client hung up, or the server is stopping. */
    void (*left)(Request *req);
    /* The request is over, its answer delivered or not: undo what an
     * undelivered answer granted, and let go of what the layer above holds. */
    void (*end)(Request *req, bool delivered);
} HttpApp;

/* Starts the MHD daemon on s->listen_fd when open (it is taken over), else
 * on cfg's address. -1 on failure (message on stderr). */
int http_start(Server *s);
void http_stop(Server *s);
/* The address actually bound, as HOST:PORT ("[::1]:7400" for IPv6; the port
 * is the one picked for --listen ...:0). */
void http_address(const Server *s, char *out, size_t outlen);

/* Replies; each takes ownership of what it is given. NULL resp closes the connection.
 * A parked waiter (park.h) can only be answered with text (json/error/text). */
void http_reply_response(Request *req, unsigned status, struct MHD_Response *resp);
/* An answer that reveals nothing of the server's state (an upstream's, passed
 * through by the guard, whose write was forwarded only once its mark was
 * durable): it need not wait for the pending commit. */
void http_reply_passthrough(Request *req, unsigned status, struct MHD_Response *resp);
void http_reply_json_new(Request *req, unsigned status, json_t *body);
/* The same, with raw JSON texts in place of rawjson_ref placeholders (rawjson.h). */
void http_reply_json_raw_new(Request *req, unsigned status, json_t *body, const RawRefs *refs);
void http_reply_text(Request *req, unsigned status, const char *content_type, char *text_new,
                     size_t len);
/* A body that many requests send (a watch's answer), in place of a copy for
 * each: req takes a reference of its own (the caller keeps its). Such an
 * answer may go to sockets that are never read: when it is larger than
 * HTTP_SHARED_SNDBUF, the socket's send buffer is cut to that, so that the
 * kernel holds at most that much of it per socket (twice that, with its
 * bookkeeping), and the rest stays in the one shared copy until the client
 * reads. The connection keeps the smaller buffer for its later requests. */
#define HTTP_SHARED_SNDBUF (16 * 1024)
void http_reply_shared(Request *req, unsigned status, const char *content_type, SharedText *text);
/* JSON text written already (jsonw.h), len bytes; NULL (it could not be written) closes the connection. */
void http_reply_json_text(Request *req, unsigned status, char *text_new, size_t len);
void http_reply_static(Request *req, unsigned status, const char *content_type, const void *data,
                       size_t len);
/* {"error": code, "message": ...} plus the fields of `extra` (taken over, may be NULL). */
void http_reply_error(Request *req, ErrCode code, json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void http_reply_error_raw(Request *req, ErrCode code, json_t *extra, const RawRefs *refs, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An error decided from the request alone (a malformed body or query, a
 * missing or refused key, a wrong method or media type, a body too large):
 * it reveals nothing of the lock space, so it leaves without waiting for a
 * commit or a barrier. Never for an error that looked at state. */
void http_reply_invalid(Request *req, ErrCode code, json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The answer about to be made reveals nothing of the lock space (/healthz,
 * /metrics, the dashboard's files): it leaves at once. */
void http_reveals_nothing(Request *req);
/* While the store stalls (Server.stalled: etcd refuses writes), an answer
 * that may reveal state leaves only when its handler said it reveals nothing
 * of a batch not yet durable (http_stall_ok; commit_touches decides), after
 * a fenced read of its own (commit_stall_hold); any other gets 503
 * overloaded naming the alarm (http_reply_stalled), and so does every
 * request that is not GET, HEAD or OPTIONS, before it changes anything. */
void http_stall_ok(Request *req);
void http_reply_stalled(Request *req);
/* The stall began: every waiter is answered 503 naming the alarm. */
void http_stall_waiters(Server *s);
/* Remembers that the reply about to be sent grants `lease` on `lock`. */
void http_note_grant(Request *req, LockKind kind, const char *lock, const uint8_t *lease);

/* Flow control for the proxy: park the connection / let MHD run it again. */
void http_suspend(Request *req);
void http_resume(Request *req);
/* Suspends req, watching its socket meanwhile (for requests that wait long:
 * watches, event long-polls and streams): a client that hangs up has its
 * connection dropped at once, and the request ends. */
void http_suspend_watched(Request *req);
/* Holds req, whose request is complete, until it is answered (watches and
 * event long-polls): parked outside libmicrohttpd when that is safe, as a
 * waiting acquire (park.h), else suspended with its socket watched. Either
 * way a client that hangs up ends the request at once. Parking frees what
 * routed the request: req->arg and the query are gone after this, so the
 * caller keeps copies of what its answer needs. */
void http_hold(Request *req);
/* The HTTP layer is dropping req's connection: a content reader should end. */
bool http_closing(const Request *req);
/* Drops the connection (resuming it if suspended) without a response; once
 * the gateway is deposed, a whole request without an answer yet gets 503. */
void http_close(Request *req);

/* Makes the request a waiter of the lock table: parked, or suspended. */
void http_wait(Request *req, Waiter *w);
/* The lock table granted the waiter or timed it out: it leaves the waiting list. */
void http_waiter_done(Request *req);
/* Shutdown: answers every waiter with 503. */
void http_cancel_waiters(Server *s);
/* Shutdown, last step before MHD stops: drops every connection still suspended
 * or parked. */
void http_close_suspended(Server *s);

const char *http_query(Request *req, const char *key);
/* The client's address, "ADDR:PORT" ("[ADDR]:PORT" for IPv6), or "-". */
void http_peer(Request *req, char *out, size_t outlen);
/* The client as a peer of the shares (peers.h): its address alone ("ADDR",
 * IPv6 without brackets, an IPv6 address by its /64 as "2001:db8:1:2::/64",
 * an IPv4 client of a dual-stack socket as IPv4, any of 127.0.0.0/8 as
 * "127.0.0.0/8"), or "-". */
#define HTTP_PEER_MAX 64
void http_peer_address(Request *req, char *out, size_t outlen);
/* A request header's value (the first of that name), or NULL. */
const char *http_header(Request *req, const char *name);
/* Adds a header to the answer already made (no-op without one); a
 * Retry-After replaces the one the answer had. */
void http_add_header(Request *req, const char *name, const char *value);
/* How many bytes of answer head (status line, fields and their CRLFs) still
 * fit in the connection's memory beside what libmicrohttpd keeps of the
 * request (estimated from below): a larger head is not sent at all, the
 * connection is closed without an answer. */
size_t http_answer_head_room(Request *req);
/* Writes out the access log lines buffered so far (once per loop turn). */
void http_flush_log(Server *s);

#endif
