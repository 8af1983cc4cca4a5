/*
 * http — libmicrohttpd glue; see http.h.
 *
 * Life of a request: the first callback routes it (router_match) and checks
 * Content-Length; the next ones gather the body (bounded by HTTP_MAX_BODY);
 * the last one runs the handler. A handler replies at once, or its reply is
 * held until the pending commit is durable, or it waits (long-poll). A held or
 * waiting request's connection is suspended; it is resumed only by the loop,
 * only while suspended, and its stored response is queued on the callback that
 * follows the resume.
 */
#include "net/http.h"

#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "net/accesslog.h"
#include "net/dormant.h"
#include "net/httphead.h"
#include "net/listener.h"
#include "net/park.h"
#include "net/peers.h"
#include "net/stallreply.h"
#include "net/tls.h"

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* What --access-log writes of a request, kept only with one. */
typedef struct RequestLog {
    int64_t started_us; /* monotonic */
    char method[16];
} RequestLog;

static void request_free(Request *req)
{
    if (req->response)
        MHD_destroy_response(req->response);
    free(req->raw_uri);
    free(req->arg);
    free(req->body);
    free(req->grant.lock);
    free(req->park.out);
    sharedtext_unref(req->park.shared);
    free(req->poll);
    free(req->log);
    free(req);
}

void http_suspend(Request *req)
{
    if (req->suspended)
        return;
    Server *s = req->srv;
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    dlist_append(&s->suspended, &req->slink);
}

void http_resume(Request *req)
{
    if (!req->suspended)
        return;
    req->suspended = false;
    dlist_remove(&req->srv->suspended, &req->slink);
    MHD_resume_connection(req->conn);
}

void http_close_suspended(Server *s)
{
    dormant_close_all(s); /* woken (or let go of): parked requests now */
    park_close_all(s);
    dormant_flush(s);     /* the records of the woken */
    while (s->suspended.head)
        http_close(DLIST_ITEM(s->suspended.head, Request, slink));
}

static void count_status(Server *s, unsigned status)
{
    unsigned cls = status / 100;
    if (cls < 6)
        s->metrics.responses[cls]++;
}

/* Queues the stored response. Only inside the access callback. */
static enum MHD_Result queue_stored(Request *req)
{
    struct MHD_Response *resp = req->response;
    req->response = NULL;
    count_status(req->srv, req->status);
    enum MHD_Result r = MHD_queue_response(req->conn, req->status, resp);
    MHD_destroy_response(resp);
    return r;
}

static void deliver(Request *req)
{
    /* Outside the callback: if the connection is suspended, resume it and the
     * callback that follows queues the response; if it is still receiving a
     * body, its last callback queues it. */
    if (!req->in_handler)
        http_resume(req);
}

static void unwatch(Request *req)
{
    if (req->wait.watch_fd >= 0) {
        loop_unwatch(req->srv->loop, req->wait.watch_fd);
        req->wait.watch_fd = -1;
    }
}

/* Suspended connections are invisible to MHD: watch the socket ourselves for
 * the client hanging up (FIN or RST). */
static void watch_hangup(Request *req)
{
    if (req->wait.watch_fd >= 0 || !req->conn)
        return;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info && loop_watch(req->srv->loop, info->connect_fd, EPOLLRDHUP, &req->source))
        req->wait.watch_fd = info->connect_fd;
}

/* Has the client hung up (FIN or RST)? The kernel's state of the connection
 * says so in one call, also when unread bytes are queued before the FIN. */
static bool peer_gone(Request *req)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    return info && getsockopt(info->connect_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
           ti.tcpi_state != TCP_ESTABLISHED;
}

static void hold_ready(CommitHold *hold)
{
    Request *req = CONTAINER_OF(hold, Request, hold);
    /* A grant whose client hung up (even half-closed) while its answer waited
     * for the commit is not delivered: the connection is dropped and the grant
     * released at once (the request's end), as a waiter that hangs up leaves
     * the queue. Checked here, once, rather than watched throughout. */
    if (req->grant.pending && req->conn && peer_gone(req))
        req->close = true;
    unwatch(req);
    deliver(req);
}

/* What a deposed gateway answers to every request it still holds, whatever
 * was made for it: nothing from its memory (http.h). NULL when out of memory. */
static struct MHD_Response *deposed_response(void)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(ERRORS_DEPOSED_BODY),
                                                                (void *)ERRORS_DEPOSED_BODY, MHD_RESPMEM_PERSISTENT);
    if (resp && !httphead_add_answer_fields(resp, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json")) {
        MHD_destroy_response(resp);
        resp = NULL;
    }
    return resp;
}

static struct MHD_Response *stalled_response(const Server *s, bool queued)
{
    size_t len;
    char *text = stallreply_body(s, queued, &len);
    struct MHD_Response *resp = text ? MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!resp)
        free(text);
    else if (!httphead_add_answer_fields(resp, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json")) {
        MHD_destroy_response(resp);
        resp = NULL;
    }
    return resp;
}

static void send_response(Request *req, unsigned status, struct MHD_Response *resp, bool held);

/* The hold of an answer whose batch or barrier will never be made: the
 * gateway is deposed (or its store failed); it gets 503 instead. While the
 * store stalls, that 503 names the alarm, and a grant it carried is
 * undelivered: released at once (its batch applies once etcd takes writes
 * again, and the release after it). Any other change that answer confirmed
 * (a 2xx of a request that changes) is in that batch too, and applies then
 * if this gateway still leads: the 503 says it is queued, and that a retry is
 * safe (stallreply.h). */
static void hold_failed(CommitHold *hold)
{
    Request *req = CONTAINER_OF(hold, Request, hold);
    if (req->response)
        MHD_destroy_response(req->response);
    req->response = NULL;
    unwatch(req);
    bool stalled = req->srv->stalled && !req->srv->deposed;
    bool queued = stalled && req->changes && !req->grant.pending && req->status >= 200 && req->status < 300;
    req->grant.refused |= stalled;
    send_response(req, MHD_HTTP_SERVICE_UNAVAILABLE,
                  stalled ? stalled_response(req->srv, queued) : deposed_response(), false);
}

/* Every response goes through here. One that may reveal state (`held`, and
 * not marked http_reveals_nothing) leaves only once every change recorded
 * before it is durable and, on a store with barriers (etcd), a fenced
 * transaction made after it was decided has committed (commit.h): a request
 * is decided when it is complete, so no answer of a deposed leader leaves.
 * Once the gateway is deposed, every answer is 503. Takes ownership of resp. */
static void send_response(Request *req, unsigned status, struct MHD_Response *resp, bool held)
{
    if (req->srv->deposed && req->park.fd < 0) {
        if (resp)
            MHD_destroy_response(resp);
        resp = deposed_response();
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        held = false;
    }
    if (req->park.fd >= 0) {
        /* Parked answers are text (park_reply); only a failure to build one
         * ends up here: the client gets no answer. */
        if (resp)
            MHD_destroy_response(resp);
        park_drop(req);
        return;
    }
    if (!resp) {
        req->close = true;
        deliver(req);
        return;
    }
    if (req->srv->stalled && held && !req->reveals_nothing && !req->stall_ok) {
        /* It may reveal a change etcd has not taken (http.h). */
        MHD_destroy_response(resp);
        resp = stalled_response(req->srv, false);
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        held = false;
        if (!resp) {
            req->close = true;
            deliver(req);
            return;
        }
    }
    req->status = status;
    req->response = resp;
    req->hold.ready = hold_ready;
    req->hold.failed = hold_failed;
    if (held && !req->reveals_nothing && req->srv->stalled) {
        commit_stall_hold(req->srv->commit, &req->hold);
        if (req->in_handler)
            http_suspend(req);
        return;
    }
    if (held && !req->reveals_nothing && commit_barrier_hold(req->srv->commit, &req->hold)) {
        if (req->in_handler)
            http_suspend(req);
        return;
    }
    deliver(req);
}

void http_reveals_nothing(Request *req) { req->reveals_nothing = true; }

void http_stall_ok(Request *req) { req->stall_ok = true; }

void http_reply_stalled(Request *req)
{
    req->reveals_nothing = true;
    size_t len = 0;
    char *text = stallreply_body(req->srv, false, &len);
    http_reply_json_text(req, MHD_HTTP_SERVICE_UNAVAILABLE, text, len); /* parked or not */
}


void http_reply_response(Request *req, unsigned status, struct MHD_Response *resp)
{
    send_response(req, status, resp, true);
}

void http_reply_passthrough(Request *req, unsigned status, struct MHD_Response *resp)
{
    send_response(req, status, resp, false);
}

void http_suspend_watched(Request *req)
{
    http_suspend(req);
    watch_hangup(req);
}

bool http_closing(const Request *req) { return req->close; }

void http_hold(Request *req)
{
    /* Never parked under TLS: see http_wait. */
    if (!tls_on(&req->srv->tls) && park_take(req))
        return;
    http_suspend_watched(req);
}

void http_close(Request *req)
{
    /* A deposed gateway answers 503 to every whole request it holds (a
     * guarded call cut off: its end never left), rather than closing. */
    if (req->srv->deposed && req->complete && !req->response && req->conn && req->park.fd < 0) {
        send_response(req, MHD_HTTP_SERVICE_UNAVAILABLE, deposed_response(), false);
        return;
    }
    req->close = true;
    http_resume(req);
}

void http_reply_static(Request *req, unsigned status, const char *content_type, const void *data,
                       size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    if (resp && !httphead_add_answer_fields(resp, status, content_type)) {
        MHD_destroy_response(resp);
        resp = NULL;
    }
    send_response(req, status, resp, true);
}

void http_reply_text(Request *req, unsigned status, const char *content_type, char *text_new,
                     size_t len)
{
    if (req->park.fd >= 0) {
        count_status(req->srv, status);
        req->status = status;
        park_reply(req, status, content_type, text_new, len);
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text_new, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text_new);
    } else if (!httphead_add_answer_fields(resp, status, content_type)) {
        MHD_destroy_response(resp); /* frees text_new */
        resp = NULL;
    }
    send_response(req, status, resp, true);
}

/* What an unread socket can hold of a shared answer: see http_reply_shared. A
 * socket whose buffer could not be cut keeps the kernel's own bound. */
static void bound_send_buffer(Request *req, size_t len)
{
    if (len <= HTTP_SHARED_SNDBUF)
        return;
    int fd = req->park.fd;
    if (fd < 0 && req->conn) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        fd = info ? info->connect_fd : -1;
    }
    int size = HTTP_SHARED_SNDBUF;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

static void unref_text(void *cls) { sharedtext_unref(cls); }

void http_reply_shared(Request *req, unsigned status, const char *content_type, SharedText *text)
{
    bound_send_buffer(req, text->len);
    if (req->park.fd >= 0) {
        count_status(req->srv, status);
        req->status = status;
        park_reply_shared(req, status, content_type, sharedtext_ref(text));
        return;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer_with_free_callback_cls(text->len, text->text, unref_text, text);
    if (resp) {
        sharedtext_ref(text); /* the response's, let go of when libmicrohttpd destroys it */
        if (!httphead_add_answer_fields(resp, status, content_type)) {
            MHD_destroy_response(resp);
            resp = NULL;
        }
    }
    send_response(req, status, resp, true);
}

void http_reply_json_new(Request *req, unsigned status, json_t *body) { http_reply_json_raw_new(req, status, body, NULL); }

void http_reply_json_text(Request *req, unsigned status, char *text_new, size_t len)
{
    if (!text_new)
        send_response(req, status, NULL, true);
    else
        http_reply_text(req, status, "application/json", text_new, len);
}

void http_reply_json_raw_new(Request *req, unsigned status, json_t *body, const RawRefs *refs)
{
    char *text = body ? rawjson_dumps(body, refs) : NULL;
    json_decref(body);
    http_reply_json_text(req, status, text, text ? strlen(text) : 0);
}

static json_t *error_body_new(ErrCode code, json_t *extra, const char *fmt, va_list ap)
{
    char message[512];
    vsnprintf(message, sizeof message, fmt, ap);
    json_t *body = json_pack("{s:s, s:s}", "error", error_code(code), "message", message);
    if (!body) {
        /* The message echoes client bytes that are not UTF-8: answer anyway,
         * with those bytes shown as '?'. */
        for (char *p = message; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        body = json_pack("{s:s, s:s}", "error", error_code(code), "message", message);
    }
    if (body && extra)
        json_object_update(body, extra);
    json_decref(extra);
    return body;
}

/* A request whose layer above writes its errors itself (an S3 route's, in
 * S3's XML): true when it did. Takes over extra then. */
static bool reply_error_elsewhere(Request *req, ErrCode code, json_t *extra, const char *fmt, va_list ap)
{
    if (!req->guard || !req->guard->reply_error)
        return false;
    char message[512];
    vsnprintf(message, sizeof message, fmt, ap);
    req->guard->reply_error(req, (int)code, extra, message);
    return true;
}

void http_reply_error(Request *req, ErrCode code, json_t *extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool done = reply_error_elsewhere(req, code, extra, fmt, ap);
    va_end(ap);
    if (done)
        return;
    va_start(ap, fmt);
    json_t *body = error_body_new(code, extra, fmt, ap);
    va_end(ap);
    http_reply_json_new(req, error_status(code), body);
}

void http_reply_invalid(Request *req, ErrCode code, json_t *extra, const char *fmt, ...)
{
    req->reveals_nothing = true;
    va_list ap;
    va_start(ap, fmt);
    bool done = reply_error_elsewhere(req, code, extra, fmt, ap);
    va_end(ap);
    if (done)
        return;
    va_start(ap, fmt);
    json_t *body = error_body_new(code, extra, fmt, ap);
    va_end(ap);
    http_reply_json_new(req, error_status(code), body);
}

void http_reply_error_raw(Request *req, ErrCode code, json_t *extra, const RawRefs *refs, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool done = reply_error_elsewhere(req, code, extra, fmt, ap);
    va_end(ap);
    if (done)
        return;
    va_start(ap, fmt);
    json_t *body = error_body_new(code, extra, fmt, ap);
    va_end(ap);
    http_reply_json_raw_new(req, error_status(code), body, refs);
}

void http_note_grant(Request *req, LockKind kind, const char *lock, const uint8_t *lease)
{
    req->grant.kind = (uint8_t)kind;
    free(req->grant.lock);
    req->grant.lock = strdup(lock);
    req->grant.pending = req->grant.lock != NULL;
    memcpy(req->grant.lease, lease, LEASE_ID_BYTES);
}

const char *http_query(Request *req, const char *key)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *http_header(Request *req, const char *name)
{
    return req->conn ? MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name) : NULL;
}

void http_add_header(Request *req, const char *name, const char *value)
{
    if (!req->response)
        return;
    /* Retry-After holds one value: the caller's replaces the "1" every 503 gets
     * (httphead_answer_fields), so that a client never sees two that differ. */
    const char *had = strcasecmp(name, MHD_HTTP_HEADER_RETRY_AFTER) ? NULL
                                                                      : MHD_get_response_header(req->response, name);
    if (had)
        MHD_del_response_header(req->response, name, had);
    MHD_add_response_header(req->response, name, value);
}

/* libmicrohttpd 0.9.75 keeps, for each header, argument, cookie and trailer of
 * a request, a record of 56 bytes (64 in its pool, aligned); the trailers as
 * read and a copy of the Cookie header (its cookies, '=' and "; " between them). */
static enum MHD_Result count_kept(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    size_t *used = cls;
    *used += 64;
    if (kind == MHD_FOOTER_KIND || kind == MHD_COOKIE_KIND)
        *used += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

size_t http_answer_head_room(Request *req)
{
    if (!req->conn)
        return 0;
    /* The head as read stays in the pool: its lines are parsed in place. 128
     * more for the pool's alignment and the blank lines a request may start with. */
    const union MHD_ConnectionInfo *head = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    size_t used = (head ? head->header_size : HTTP_MAX_HEAD) + 128;
    MHD_get_connection_values(req->conn,
                              (enum MHD_ValueKind)(MHD_HEADER_KIND | MHD_COOKIE_KIND | MHD_GET_ARGUMENT_KIND |
                                                   MHD_FOOTER_KIND),
                              count_kept, &used);
    return used < HTTP_CONNECTION_MEMORY ? HTTP_CONNECTION_MEMORY - used : 0;
}

/* A waiter's client may vanish without a FIN or RST (a dead host, a dropped
 * network): TCP keepalive probes find out, and the socket then reports an
 * error, which takes the waiter out of the queue within --dead-client-after
 * seconds, so that FIFO does not stall behind it. */
static void probe_liveness(Server *s, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info)
        return;
    int t = (int)s->cfg.dead_client_s;
    int idle = t / 2 > 0 ? t / 2 : 1, interval = t / 6 > 0 ? t / 6 : 1;
    int count = (t - idle) / interval > 0 ? (t - idle) / interval : 1;
    int one = 1;
    setsockopt(info->connect_fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(info->connect_fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(info->connect_fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(info->connect_fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

void http_wait(Request *req, Waiter *w)
{
    Server *s = req->srv;
    probe_liveness(s, req->conn);
    req->wait.waiter = w;
    dlist_append(&s->waiting, &req->wait.link);
    req->wait.listed = true;
    /* Under TLS a waiter is never parked: park.c answers on the raw socket,
     * where only GnuTLS's records may go. It stays suspended in
     * libmicrohttpd, which encrypts its answer. */
    if (!tls_on(&s->tls) && park_take(req))
        return;
    http_suspend(req);
    /* A client that hangs up leaves the queue now, not at its deadline. */
    watch_hangup(req);
}

/* The waiter is leaving the queue (granted, timed out, gone). */
static void stop_waiting(Request *req)
{
    unwatch(req);
    if (req->wait.listed) {
        dlist_remove(&req->srv->waiting, &req->wait.link);
        req->wait.listed = false;
    }
    req->wait.waiter = NULL;
}

static void hangup(Request *req)
{
    if (req->wait.waiter)
        req->srv->app->left(req);
    stop_waiting(req);
    req->close = true;
    http_resume(req);
}

/* The loop saw readiness on a waiting client's socket: it hung up, or (parked)
 * its answer can be written. */
static int socket_ready(LoopSource *src, uint32_t events)
{
    Request *req = CONTAINER_OF(src, Request, source);
    if (req->park.fd >= 0)
        park_event(req, events);
    else
        hangup(req);
    return 0;
}

void http_cancel_waiters(Server *s)
{
    dormant_wake_all(s); /* those that cannot be are closed once they can (dormant.h) */
    while (s->waiting.head) {
        Request *req = DLIST_ITEM(s->waiting.head, Request, wait.link);
        s->app->left(req);
        stop_waiting(req);
        http_reply_error(req, ERR_OVERLOADED, NULL, "server is shutting down; retry");
    }
}

void http_stall_waiters(Server *s)
{
    dormant_wake_all(s);
    while (s->waiting.head) {
        Request *req = DLIST_ITEM(s->waiting.head, Request, wait.link);
        s->app->left(req);
        stop_waiting(req);
        http_reply_stalled(req);
    }
}

void http_waiter_done(Request *req) { stop_waiting(req); }

static bool content_length_too_big(struct MHD_Connection *conn)
{
    uint64_t n;
    return !httphead_content_length(conn, &n) || n > HTTP_MAX_BODY;
}

/* A body a refused request may still send is read and dropped up to this, so
 * that a client that writes its whole request before reading the answer gets
 * the answer rather than a reset; a larger one (or one of unknown length) is
 * not read, and the connection closes after the answer. */
#define HTTP_MAX_DISCARD (1024 * 1024)

/* The idle time left to a request begun past its peer's half-sent share. */
#define HTTP_OVER_SHARE_TIMEOUT_S 2

static bool body_worth_discarding(struct MHD_Connection *conn)
{
    uint64_t n;
    return !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) &&
           httphead_content_length(conn, &n) && n <= HTTP_MAX_DISCARD;
}

/* An answer queued at once, from the first callback, before any handler
 * ran, with the fields of extra (taken over; NULL for none); with `close`,
 * the connection closes after the answer. */
static enum MHD_Result reply_now_with(Request *req, ErrCode code, json_t *extra, const char *message, bool close)
{
    struct MHD_Connection *conn = req->conn;
    Server *s = req->srv;
    req->status = error_status(code);
    json_t *body = json_pack("{s:s, s:s}", "error", error_code(code), "message", message);
    if (body && extra && json_object_update(body, extra)) {
        json_decref(body);
        body = NULL;
    }
    json_decref(extra);
    char *text = body ? rawjson_dumps(body, NULL) : NULL;
    json_decref(body);
    if (!text)
        return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    /* The fields every answer has (httphead_answer_fields), as on the handlers' path. */
    if (!httphead_add_answer_fields(resp, error_status(code), "application/json") ||
        (close && MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    count_status(s, error_status(code));
    enum MHD_Result r = MHD_queue_response(conn, error_status(code), resp);
    MHD_destroy_response(resp);
    return r;
}

/* With `field`, the body names it and the connection closes after the
 * answer (the request's framing cannot be trusted). */
static enum MHD_Result reply_now_field(Request *req, ErrCode code, const char *message, const char *field)
{
    return reply_now_with(req, code, field ? json_pack("{s:s}", "field", field) : NULL, message, field != NULL);
}

static enum MHD_Result reply_now(Request *req, ErrCode code, const char *message)
{
    return reply_now_with(req, code, NULL, message, false);
}

/* The stall's 503 at once (http_reply_stalled), for a request that has changed nothing. */
static enum MHD_Result reply_stalled_now(Request *req)
{
    Server *s = req->srv;
    return reply_now_with(req, ERR_OVERLOADED, stallreply_fields_new(s), stallreply_message(s), false);
}

/* The Host check (hostcheck.h): true after queueing the refusal (*answer). */
static bool refused_host(Request *req, const char *method, enum MHD_Result *answer)
{
    struct MHD_Connection *conn = req->conn;
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    char msg[400];
    switch (hostcheck_request(&req->srv->hosts, method, host, origin)) {
    case HOST_OK:
        return false;
    case HOST_MISDIRECTED:
        snprintf(msg, sizeof msg,
                 "this server does not answer for Host '%.120s' (against DNS rebinding): use its address, "
                 "or start it with --allowed-host NAME",
                 host);
        *answer = reply_now_with(req, ERR_MISDIRECTED_REQUEST, json_pack("{s:s}", "field", "host"), msg, false);
        return true;
    case HOST_BAD_ORIGIN:
    default:
        snprintf(msg, sizeof msg,
                 "a %.16s from a page on '%.120s' is refused: its Origin is not a host this server answers for", method,
                 origin);
        *answer = reply_now_with(req, ERR_FORBIDDEN, json_pack("{s:s}", "reason", "origin"), msg, false);
        return true;
    }
}

static HttpConn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ctx = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ctx ? ctx->socket_context : NULL;
}

/* The connection's request is in, or over: it is no longer half-sent. */
static void conn_sent(Server *s, HttpConn *hc)
{
    if (hc && hc->sending) {
        hc->sending = false;
        peers_request_done(s->peers, hc->peer);
    }
}

static void http_request_end(Request *req, bool delivered);

/* MHD calls this first, with the request target as sent; what it returns is
 * the request's context from then on (freed in on_completed). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    Request *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    req->raw_uri = strdup(uri);
    if (!req->raw_uri) {
        free(req);
        return NULL;
    }
    req->source.ready = socket_ready;
    req->end = http_request_end;
    req->srv = cls;
    req->conn = conn;
    req->wait.watch_fd = -1;
    req->park.fd = -1;
    if (req->srv->access_log && (req->log = calloc(1, sizeof *req->log)))
        req->log->started_us = mono_us();
    /* A request on a connection that had its last one: half-sent again
     * until it is in. Past its peer's share it gets 429 once its head is in,
     * and meanwhile only a short idle time (a slow sender holds nothing long). */
    HttpConn *hc = conn_of(conn);
    if (hc && !hc->sending && hc->peer) {
        hc->sending = true;
        if (!peers_request_begins(req->srv->peers, hc->peer)) {
            req->over_half_sent = true;
            MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)HTTP_OVER_SHARE_TIMEOUT_S);
        }
    }
    return req;
}

static void gather(Request *req, const char *data, size_t size)
{
    if (req->response)
        return; /* already answered (a rejection): the rest is dropped */
    if (req->body_too_large || req->body_len + size > HTTP_MAX_BODY) {
        req->body_too_large = true;
        return;
    }
    if (req->body_nomem)
        return;
    char *body = realloc(req->body, req->body_len + size + 1);
    if (!body) {
        req->body_nomem = true; /* the rest is dropped; the answer is 503 */
        return;
    }
    memcpy(body + req->body_len, data, size);
    req->body = body;
    req->body_len += size;
    req->body[req->body_len] = '\0';
}

/* Liveness and readiness: answered at once from what the server knows of
 * itself (no barrier), also while it stops or cannot reach etcd, so that they
 * say so rather than refuse. */
static bool is_probe(const char *method, const char *url)
{
    return (!strcmp(method, "GET") || !strcmp(method, "HEAD")) && (!strcmp(url, "/healthz") || !strcmp(url, "/readyz"));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    Server *s = cls;
    Request *req = *con_cls;
    assert(thread_owns(&s->owner)); /* the serving daemon's callbacks are the loop's (threads.h) */
    if (!req)
        return MHD_NO; /* on_uri ran out of memory */
    if (!req->routed) {
        req->routed = true;
        req->http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
        s->metrics.requests++;
        if (req->log)
            snprintf(req->log->method, sizeof req->log->method, "%s", method);
        /* Stopping: no new work, so what is held or waiting drains and no
         * connection is left suspended when MHD stops. Nothing has changed
         * for this request, so the answer needs no commit. */
        bool probe = is_probe(method, url);
        if (s->stopping && !probe)
            return reply_now(req, ERR_OVERLOADED, "server is shutting down; retry");
        /* Over etcd, nothing here decides whether this gateway still leads:
         * every answer that reveals state waits for a barrier made after the
         * request is complete (send_response), however long the gateway is
         * paused between here and there. Once it knows it is deposed it
         * takes nothing more, and while its lease went unrenewed for a TTL
         * (cut off from etcd, or etcd without a leader that long) it refuses
         * new requests at once rather than hold them: another may lead. */
        if (s->deposed)
            return reply_now(req, ERR_OVERLOADED, ERRORS_DEPOSED_MESSAGE);
        req->changes = strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "OPTIONS");
        if (s->stalled && req->changes)
            return reply_stalled_now(req);
        if (s->election && !election_renewed(s->election) && !probe)
            return reply_now(req, ERR_OVERLOADED, "this gateway's etcd lease went unrenewed for its TTL: another "
                                                  "gateway may lead; retry");
        if (strlen(req->raw_uri) > HTTP_MAX_TARGET)
            return reply_now(req, ERR_URI_TOO_LONG, "the request target is longer than 8192 bytes");
        const union MHD_ConnectionInfo *head = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        if (head && head->header_size > HTTP_MAX_HEAD)
            return reply_now(req, ERR_HEADERS_TOO_LARGE, "the request line and headers are larger than 12288 bytes");
        if (!httphead_names_are_tokens(conn))
            return reply_now(req, ERR_BAD_REQUEST, HTTPHEAD_NAME_NOT_TOKEN);
        enum MHD_Result refused;
        if (refused_host(req, method, &refused))
            return refused;
        const char *field, *framing = httphead_framing_problem(conn, req->http11, &field);
        if (framing)
            return reply_now_field(req, ERR_BAD_REQUEST, framing, field);
        if (req->over_half_sent) {
            char peer[HTTP_PEER_MAX], msg[300];
            http_peer_address(req, peer, sizeof peer);
            s->metrics.share_refused[1][SHARE_HALF_SENT]++;
            snprintf(msg, sizeof msg,
                     "this client (%s) has %zu requests begun and not complete (--peer-max-half-sent): finish "
                     "those first",
                     peer, s->cfg.peer_max_half_sent);
            return reply_now_with(req, ERR_PEER_LIMIT,
                                  json_pack("{s:s, s:s, s:I}", "peer", peer, "limit", share_limit_name(SHARE_HALF_SENT),
                                            "value", (json_int_t)s->cfg.peer_max_half_sent),
                                  msg, false);
        }
        req->in_handler = true;
        s->app->begin(req, method, url);
        req->in_handler = false;
        if (req->stream) {
            if (req->response && !req->suspended)
                return queue_stored(req);
            return req->close ? MHD_NO : MHD_YES;
        }
        /* Refused from its headers alone (401, 403, 415): answered once a
         * small body is read and dropped, at once otherwise. */
        if (req->response)
            return body_worth_discarding(conn) ? MHD_YES : queue_stored(req);
        if (content_length_too_big(conn))
            return reply_now(req, ERR_PAYLOAD_TOO_LARGE, "request body is larger than 65536 bytes");
        return MHD_YES;
    }
    if (req->close)
        return MHD_NO;
    if (*upload_data_size) {
        if (req->stream) {
            req->stream->upload(req, upload_data, upload_data_size);
            return MHD_YES;
        }
        if (!req->response) /* else refused already: the body is dropped */
            gather(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->response) {
        /* Built outside the callback but still held for its commit: park until then. */
        if (commit_held(&req->hold)) {
            http_suspend(req);
            return MHD_YES;
        }
        return queue_stored(req);
    }
    /* The last callback: the whole request has been read. */
    if (!req->complete && s->stalled && req->changes && !s->stopping && !s->deposed) {
        /* Begun before the store stalled: refused before it changes anything. */
        if (req->stream)
            req->stream->abort(req);
        return reply_stalled_now(req);
    }
    if (!req->complete && ((s->stopping && !is_probe(method, url)) || s->deposed)) {
        /* Its handler has not run, so nothing changed for it: refuse at once,
         * without a commit to wait for, so that no connection is suspended
         * when libmicrohttpd stops. A guarded call never sent its whole
         * request (the end is held back until here): cut it off. */
        if (req->stream)
            req->stream->abort(req);
        return reply_now(req, ERR_OVERLOADED, s->deposed ? ERRORS_DEPOSED_MESSAGE : "server is shutting down; retry");
    }
    req->complete = true;
    conn_sent(s, conn_of(conn));
    req->wire_bytes = park_request_bytes(conn);
    req->in_handler = true;
    if (req->stream) {
        bool keep = req->stream->complete(req);
        req->in_handler = false;
        if (req->response && !req->suspended)
            return queue_stored(req);
        /* A response stored while the connection is suspended leaves on its resume. */
        return keep || req->response ? MHD_YES : MHD_NO;
    }
    if (req->body_too_large)
        http_reply_invalid(req, ERR_PAYLOAD_TOO_LARGE, NULL, "request body is larger than 65536 bytes");
    else if (req->body_nomem)
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory while reading the request body; retry");
    else if (req->handler)
        req->handler(req);
    else if (req->allow) {
        http_reply_invalid(req, ERR_METHOD_NOT_ALLOWED, NULL, "%s is not allowed on %s (allowed: %s)", method, url,
                         req->allow);
        if (req->response)
            MHD_add_response_header(req->response, MHD_HTTP_HEADER_ALLOW, req->allow);
    } else
        http_reply_error(req, ERR_NOT_FOUND, NULL, "no such endpoint: %s %s", method, url);
    req->in_handler = false;
    if (req->park.fd >= 0) {
        /* Parked: libmicrohttpd closes its descriptor and forgets the request;
         * a waiter keeps only its compact record while it waits. */
        req->conn = NULL;
        *con_cls = NULL;
        if (dormant_doze(req))
            request_free(req);
        return MHD_NO;
    }
    if (req->response && !req->suspended)
        return queue_stored(req);
    if (req->close)
        return MHD_NO;
    return MHD_YES;
}

void http_peer_address(Request *req, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    const struct sockaddr *sa = NULL;
    socklen_t len = sizeof ss;
    if (req->park.fd >= 0) {
        if (getpeername(req->park.fd, (struct sockaddr *)&ss, &len) == 0)
            sa = (const struct sockaddr *)&ss;
    } else if (req->conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        sa = ci ? ci->client_addr : NULL;
    }
    char name[PEERS_ADDR_MAX];
    peers_addr(sa, name);
    snprintf(out, outlen, "%s", name);
}

/* Writes v in decimal at p; returns the end. */
static char *put_decimal(char *p, unsigned v)
{
    char digits[10];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = digits[--n];
    return p;
}

/* "a.b.c.d:port", the text getnameinfo gives an IPv4 peer with NI_NUMERICHOST |
 * NI_NUMERICSERV, written directly: it is made twice per acquire+release pair
 * (the audit trail's peer), and getnameinfo's or inet_ntop's way through
 * stdio cost more than parsing the request's body. */
static void ipv4_peer(const struct sockaddr_in *in, char *out, size_t outlen)
{
    char text[sizeof "255.255.255.255:65535"], *p = text;
    const unsigned char *a = (const unsigned char *)&in->sin_addr.s_addr; /* network order: a[0] first */
    for (int i = 0; i < 4; i++) {
        p = put_decimal(p, a[i]);
        *p++ = i < 3 ? '.' : ':';
    }
    p = put_decimal(p, ntohs(in->sin_port));
    size_t n = (size_t)(p - text);
    if (!outlen)
        return;
    n = n < outlen ? n : outlen - 1;
    memcpy(out, text, n);
    out[n] = '\0';
}

void http_peer(Request *req, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    const struct sockaddr *sa = NULL;
    socklen_t len = sizeof ss;
    if (req->park.fd >= 0) {
        if (getpeername(req->park.fd, (struct sockaddr *)&ss, &len) == 0)
            sa = (const struct sockaddr *)&ss;
    } else if (req->conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            sa = ci->client_addr;
            len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        }
    }
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (sa && sa->sa_family == AF_INET)
        ipv4_peer((const struct sockaddr_in *)(const void *)sa, out, outlen);
    else if (!sa || getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV))
        snprintf(out, outlen, "-");
    else
        snprintf(out, outlen, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

static void log_request(Request *req, bool delivered)
{
    if (!req->log)
        return; /* out of memory when it began: no line */
    char peer[NI_MAXHOST + NI_MAXSERV + 4];
    http_peer(req, peer, sizeof peer);
    accesslog_write(req->srv->access_log, peer, req->log->method[0] ? req->log->method : "-",
                    req->raw_uri ? req->raw_uri : "-", req->status, delivered, mono_us() - req->log->started_us);
}

void http_flush_log(Server *s)
{
    if (s->access_log)
        fflush(s->access_log);
}

/* The request is over (answer sent if `delivered`): leaves every queue, the
 * layers above let go of it, and req is freed. */
static void http_request_end(Request *req, bool delivered)
{
    Server *s = req->srv;
    if (s->access_log)
        log_request(req, delivered);
    if (req->wait.waiter)
        s->app->left(req);
    stop_waiting(req);
    /* A reply held for a commit that this connection will never send. */
    commit_unhold(s->commit, &req->hold);
    if (req->suspended)
        dlist_remove(&s->suspended, &req->slink);
    s->app->end(req, delivered);
    request_free(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    Request *req = *con_cls;
    bool ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    assert(thread_owns(&((Server *)cls)->owner));
    HttpConn *hc = conn_of(conn);
    if (hc) {
        park_conn_request_done(hc->park, ok && req ? req->wire_bytes : 0);
        conn_sent(cls, hc);
    }
    if (!req)
        return;
    *con_cls = NULL;
    http_request_end(req, ok);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    Server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        HttpConn *hc = calloc(1, sizeof *hc);
        *socket_context = hc;
        if (!hc)
            return; /* neither parked nor counted */
        /* Under TLS nothing is parked (http_wait): no byte counts to keep. */
        const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        hc->park = fdi && !tls_on(&s->tls) ? park_conn_new(fdi->connect_fd) : NULL;
        /* A new connection is a request being sent until its first request is
         * in; one handed back by park.c has just had its answer. */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        hc->sending = !s->adding_back;
        hc->peer = peers_open(s->peers, ci ? ci->client_addr : NULL, hc->sending);
        if (!hc->peer)
            hc->sending = false;
    } else {
        HttpConn *hc = *socket_context;
        if (hc) {
            peers_close(s->peers, hc->peer, hc->sending);
            park_conn_free(hc->park);
            free(hc);
        }
        *socket_context = NULL;
    }
}

/* Parked waiters are not libmicrohttpd's connections but still count
 * against --max-connections, and against their peer's share (peers.h). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    Server *s = cls;
    if (s->adding_back)
        return MHD_YES;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    size_t open = (info ? info->num_connections : 0) + park_connections(s);
    return open < s->cfg.max_connections && peers_admit(s->peers, addr) ? MHD_YES : MHD_NO;
}

/* Decodes %XX as MHD does, except that a decoded NUL would silently cut a
 * name short ("a%00b" read as "a"): it becomes DEL, which no name allows. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    size_t n = MHD_http_unescape(s);
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\0')
            s[i] = 0x7f;
    return n;
}

int http_start(Server *s)
{
    char err[512];
    int fd = s->listen_fd >= 0 ? s->listen_fd : listener_open(s->cfg.listen_host, s->cfg.listen_port, 1024, err, sizeof err);
    s->listen_fd = -1; /* this function's from here on: MHD's, or closed below */
    if (fd < 0) {
        log_line(LEVEL_ERROR, "%s", err);
        return -1;
    }
    struct MHD_OptionItem tls[TLS_MHD_OPTIONS];
    tls_mhd_options(&s->tls, tls);
    s->daemon = MHD_start_daemon(
        /* TURBO: closing a connection does not shutdown() its socket, which
         * parking relies on (park.h); so no connection gets a shutdown(SHUT_WR)
         * before its close. It also reads and accepts eagerly. */
        MHD_USE_EPOLL | MHD_USE_TURBO | MHD_ALLOW_SUSPEND_RESUME | tls_mhd_flags(&s->tls), 0, on_accept, s,
        on_request, s,
        MHD_OPTION_ARRAY, tls, /* first: its logger sees why TLS set-up fails */
        MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)s->cfg.max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)s->cfg.idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_END);
    const char *why = tls_mhd_started(&s->tls);
    if (!s->daemon) {
        /* The socket is bound and listening, so what failed is libmicrohttpd's own set-up. */
        log_line(LEVEL_ERROR, "cannot start the %s server on %s:%u: %s", tls_on(&s->tls) ? "HTTPS" : "HTTP",
                 s->cfg.listen_host, s->cfg.listen_port, *why ? why : "libmicrohttpd refused its options");
        close(fd);
        return -1;
    }
    return 0;
}

void http_stop(Server *s)
{
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}

void http_address(const Server *s, char *out, size_t outlen)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_LISTEN_FD);
    if (info)
        listener_name(info->listen_fd, out, outlen);
    else
        snprintf(out, outlen, "?");
}
