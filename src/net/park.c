/*
 * park — waiters held outside libmicrohttpd; see park.h.
 *
 * Life of a parked request: park_take (socket duplicated, watched for
 * hang-up) -> park_reply (answer formatted, held for its commit) -> ready
 * list -> park_flush writes it -> the connection goes back to libmicrohttpd,
 * or is closed when the answer did not get out. A write the socket cannot
 * take at once waits for EPOLLOUT on the writing list, then rejoins the ready
 * list (every write goes through park_flush and its budget), and is given up
 * after --idle-timeout without progress, as libmicrohttpd does with its own.
 *
 * Every end goes through finish(), which hands the Request to
 * req->end (the HTTP layer's, which frees it). finish() runs only from the loop's own steps
 * (a socket event for that request, park_flush, park_tick, shutdown), never
 * from inside lock-table callbacks: a failure there queues the request on the
 * ready list with no answer, and park_flush ends it.
 */
#include "net/park.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "net/errors.h"
#include "net/httphead.h"
#include "net/peers.h"
#include "net/stallreply.h"

typedef struct ConnBytes {
    int64_t origin; /* counted_read when libmicrohttpd had read nothing yet */
    uint64_t taken; /* bytes the requests seen so far took from the socket */
    bool unknown;   /* some request's size is unknown: never park */
} ConnBytes;

/* Bytes read from the socket so far: the kernel's count of bytes received in
 * order minus those still queued. The two come from two calls, and bytes may
 * arrive between them; as nothing reads the socket meanwhile, the queue only
 * grows, so an unchanged queue around the count proves a consistent pair. A
 * socket handed back to libmicrohttpd has been read before: callers count
 * from ConnBytes.origin. */
static bool counted_read(int fd, int64_t *out)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        struct tcp_info ti;
        socklen_t len = sizeof ti;
        int before, after;
        if (ioctl(fd, FIONREAD, &before) != 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
            len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received ||
            ioctl(fd, FIONREAD, &after) != 0 || ti.tcpi_bytes_received > INT64_MAX)
            return false;
        if (before == after) {
            *out = (int64_t)ti.tcpi_bytes_received - after;
            return true;
        }
    }
    return false;
}

void *park_conn_new(int fd)
{
    ConnBytes *cb = calloc(1, sizeof *cb);
    if (cb && !counted_read(fd, &cb->origin))
        cb->unknown = true;
    return cb;
}

void park_conn_free(void *conn_ctx) { free(conn_ctx); }

void park_conn_request_done(void *conn_ctx, uint64_t wire_bytes)
{
    ConnBytes *cb = conn_ctx;
    if (!cb)
        return;
    if (wire_bytes == 0)
        cb->unknown = true;
    cb->taken += wire_bytes;
}

uint64_t park_request_bytes(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *hs = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (!hs || MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return 0;
    uint64_t body;
    if (!httphead_content_length(conn, &body))
        return 0;
    return (uint64_t)hs->header_size + body;
}

/* Header iterator: clears *cls when a Connection header has the token "close". */
static enum MHD_Result no_close_token(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    bool *keep = cls;
    if (value && strcasecmp(key, MHD_HTTP_HEADER_CONNECTION) == 0 && httphead_has_token(value, "close"))
        *keep = false;
    return MHD_YES;
}

/* An HTTP/1.1 connection outlives the answer unless some Connection header
 * says "close" (libmicrohttpd's own rule). */
static bool keeps_alive(struct MHD_Connection *conn)
{
    bool keep = true;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, no_close_token, &keep);
    return keep;
}

bool park_take(Request *req)
{
    Server *s = req->srv;
    struct MHD_Connection *conn = req->conn;
    if (!req->http11 || !keeps_alive(conn))
        return false;
    const union MHD_ConnectionInfo *ctx = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const HttpConn *hc = ctx ? ctx->socket_context : NULL;
    const ConnBytes *cb = hc ? hc->park : NULL;
    uint64_t size = req->wire_bytes;
    int64_t now;
    if (!cb || cb->unknown || !fdi || size == 0 || !counted_read(fdi->connect_fd, &now) ||
        now - cb->origin != (int64_t)(cb->taken + size))
        return false; /* libmicrohttpd may hold bytes of a later request */
    int fd = fcntl(fdi->connect_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return false;
    if (!loop_watch(s->loop, fd, EPOLLRDHUP, &req->source)) {
        close(fd);
        return false;
    }
    /* The answer goes out in one send(); nothing to gain from Nagle. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    req->park.fd = fd;
    dlist_append(&s->parked, &req->park.link);
    /* Still its peer's connection while parked (libmicrohttpd's count ends now). */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    req->park.peer = peers_open(s->peers, ci ? ci->client_addr : NULL, false);
    /* What routed and parsed the request is not needed while it waits (the
     * path only for the access log). */
    if (!s->access_log) {
        free(req->raw_uri);
        req->raw_uri = NULL;
    }
    free(req->body);
    free(req->arg);
    req->body = req->arg = NULL;
    req->body_len = 0;
    return true;
}

static void finish(Request *req, bool delivered)
{
    Server *s = req->srv;
    int fd = req->park.fd;
    loop_unwatch(s->loop, fd);
    dlist_remove(&s->parked, &req->park.link);
    if (req->park.ready)
        dlist_remove(&s->park_ready, &req->park.rlink);
    if (req->park.writing)
        dlist_remove(&s->park_writing, &req->park.rlink);
    peers_close(s->peers, req->park.peer, false);
    req->park.peer = NULL;
    req->end(req, delivered);
    if (!delivered) {
        close(fd);
        return;
    }
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0) {
        close(fd);
        return;
    }
    /* libmicrohttpd owns fd from here, and closes it if it cannot take it.
     * Not a new connection: no share refuses it, and no request on it is
     * half-sent yet (http.c). */
    s->adding_back = true;
    MHD_add_connection(s->daemon, fd, (struct sockaddr *)&peer, len);
    s->adding_back = false;
}

static void make_ready(Request *req)
{
    req->park.ready = true;
    dlist_append(&req->srv->park_ready, &req->park.rlink);
}

void park_drop(Request *req)
{
    /* park_flush ends it: no answer, so the connection is closed there. */
    free(req->park.out);
    req->park.out = NULL;
    sharedtext_unref(req->park.shared);
    req->park.shared = NULL;
    make_ready(req);
}

static void hold_ready(CommitHold *hold) { make_ready(CONTAINER_OF(hold, Request, hold)); }

static void stalled_reply(Request *req);

/* Its batch or barrier will never be made (the gateway is deposed): the
 * answer written is replaced by 503 (park_reply, deposed). While the store
 * stalls, by the 503 naming the alarm, and a grant it carried is undelivered
 * (http.c's hold_failed says why). */
static void hold_failed(CommitHold *hold)
{
    Request *req = CONTAINER_OF(hold, Request, hold);
    if (req->srv->stalled && !req->srv->deposed) {
        req->grant.refused = true;
        stalled_reply(req);
        return;
    }
    park_reply(req, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json", NULL, 0);
}

/* The head libmicrohttpd writes for our other answers, for a body of
 * body_len bytes, at the start of a new buffer with room for `room` bytes
 * after it; NULL when out of memory. The connection stays open, as it would
 * there (also while stopping: the client may still release on it until the
 * server exits). */
static char *answer_head(unsigned status, const char *content_type, size_t body_len, size_t room, size_t *head_len)
{
    char date[64];
    time_t t = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&t, &tm));
    const char *reason = MHD_get_reason_phrase_for(status);
    char head[512];
    HeadField f[HTTPHEAD_ANSWER_FIELDS];
    size_t nf = httphead_answer_fields(status, content_type, f);
    int hl = snprintf(head, sizeof head, "HTTP/1.1 %u %s\r\nDate: %s\r\n", status, reason, date);
    for (size_t i = 0; i < nf && hl > 0 && (size_t)hl < sizeof head; i++) {
        int n = snprintf(head + hl, sizeof head - (size_t)hl, "%s: %s\r\n", f[i].name, f[i].value);
        hl = n < 0 ? -1 : hl + n;
    }
    if (hl > 0 && (size_t)hl < sizeof head) {
        int n = snprintf(head + hl, sizeof head - (size_t)hl, "Content-Length: %zu\r\n\r\n", body_len);
        hl = n < 0 ? -1 : hl + n;
    }
    char *out = hl > 0 && (size_t)hl < sizeof head ? malloc((size_t)hl + room) : NULL;
    if (out) {
        memcpy(out, head, (size_t)hl);
        *head_len = (size_t)hl;
    }
    return out;
}

/* The answer is written (out: its bytes, or its head before `shared`): it
 * leaves once every change recorded before it is durable. */
static void answer_made(Request *req, char *out, size_t out_len, SharedText *shared)
{
    Server *s = req->srv;
    free(req->park.out);
    sharedtext_unref(req->park.shared);
    req->park.out = out;
    req->park.out_len = out_len;
    req->park.shared = shared;
    req->park.out_off = 0;
    req->hold.ready = hold_ready;
    req->hold.failed = hold_failed;
    if (!s->deposed && !req->reveals_nothing && s->stalled) {
        commit_stall_hold(s->commit, &req->hold);
        return;
    }
    if (!s->deposed && !req->reveals_nothing && commit_barrier_hold(s->commit, &req->hold))
        return;
    make_ready(req);
}

/* The stall's 503 (http.h), which reveals nothing: written at once. */
static void stalled_reply(Request *req)
{
    size_t len = 0;
    char *text = stallreply_body(req->srv, false, &len); /* a grant: released, not queued */
    if (!text) {
        park_drop(req);
        return;
    }
    req->reveals_nothing = true;
    park_reply(req, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json", text, len);
}

void park_reply(Request *req, unsigned status, const char *content_type, char *text_new, size_t len)
{
    Server *s = req->srv;
    if (s->stalled && !s->deposed && !req->reveals_nothing && !req->stall_ok) {
        /* A parked answer (a waiter's) may reveal a change etcd has not taken. */
        free(text_new);
        stalled_reply(req);
        return;
    }
    if (s->deposed) {
        /* Whatever was decided from memory, a deposed gateway answers 503 (http.h). */
        free(text_new);
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        content_type = "application/json";
        len = strlen(ERRORS_DEPOSED_BODY);
        if (!(text_new = strdup(ERRORS_DEPOSED_BODY))) {
            park_drop(req);
            return;
        }
    }
    size_t hl;
    char *out = answer_head(status, content_type, len, len, &hl);
    if (!out) {
        free(text_new);
        park_drop(req);
        return;
    }
    memcpy(out + hl, text_new, len);
    free(text_new);
    answer_made(req, out, hl + len, NULL);
}

void park_reply_shared(Request *req, unsigned status, const char *content_type, SharedText *text)
{
    if (req->srv->stalled && !req->srv->deposed && !req->stall_ok) {
        /* A watch's view may show a change etcd has not taken (http.h). */
        sharedtext_unref(text);
        stalled_reply(req);
        return;
    }
    if (req->srv->deposed) {
        sharedtext_unref(text);
        park_reply(req, status, content_type, NULL, 0); /* 503 */
        return;
    }
    size_t hl;
    char *out = answer_head(status, content_type, text->len, 0, &hl);
    if (!out) {
        sharedtext_unref(text);
        park_drop(req);
        return;
    }
    answer_made(req, out, hl, text);
}

/* The socket took part of the answer, or none: wait for room (and only for
 * that: a client that half-closes may still read), at most --idle-timeout
 * from now. The writing list stays in deadline order: every entry gets the
 * same timeout, counted from its last progress. */
static void wait_for_room(Request *req)
{
    Server *s = req->srv;
    if (!req->park.writing) {
        if (!loop_rewatch(s->loop, req->park.fd, EPOLLOUT, &req->source)) {
            finish(req, false);
            return;
        }
        req->park.writing = true;
    } else {
        dlist_remove(&s->park_writing, &req->park.rlink);
    }
    req->park.write_deadline_ms = clock_now().mono_ms + (int64_t)s->cfg.idle_timeout_s * 1000;
    dlist_append(&s->park_writing, &req->park.rlink);
}

/* Sends what is left of the answer: the rest of out, then of the shared
 * body after it, in one call. */
static ssize_t send_rest(Request *req)
{
    RequestPark *p = &req->park;
    struct iovec iov[2];
    size_t n = 0, off = p->out_off;
    if (off < p->out_len) {
        iov[n++] = (struct iovec){p->out + off, p->out_len - off};
        off = p->out_len;
    }
    if (p->shared && off - p->out_len < p->shared->len)
        iov[n++] = (struct iovec){p->shared->text + (off - p->out_len), p->shared->len - (off - p->out_len)};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = n};
    return sendmsg(p->fd, &msg, MSG_NOSIGNAL);
}

/* Writes what is left of the answer; finishes the request when all is out.
 * Returns the bytes written. */
static size_t write_out(Request *req)
{
    if (!req->park.out) {
        finish(req, false); /* dropped (park_drop) */
        return 0;
    }
    size_t start = req->park.out_off;
    size_t total = req->park.out_len + (req->park.shared ? req->park.shared->len : 0);
    while (req->park.out_off < total) {
        ssize_t n = send_rest(req);
        if (n > 0) {
            req->park.out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            size_t written = req->park.out_off - start;
            if (!req->park.writing || written > 0)
                wait_for_room(req);
            return written;
        } else {
            size_t written = req->park.out_off - start;
            finish(req, false);
            return written;
        }
    }
    size_t written = req->park.out_off - start;
    finish(req, true);
    return written;
}

void park_event(Request *req, uint32_t events)
{
    Server *s = req->srv;
    if (req->park.writing && !(events & (EPOLLERR | EPOLLHUP))) {
        /* Room to write: the rest goes out with the next flush, within its
         * budget of bytes (thousands of sockets a change woke all have room
         * at once), and the socket is not watched for room meanwhile. */
        dlist_remove(&s->park_writing, &req->park.rlink);
        req->park.writing = false;
        if (!loop_rewatch(s->loop, req->park.fd, 0, &req->source)) {
            finish(req, false);
            return;
        }
        make_ready(req);
        return;
    }
    /* Waiting, holding an answer for its commit, or ready to write it: the
     * client is gone. */
    finish(req, false);
}

void park_flush(Server *s)
{
    size_t written = 0;
    while (s->park_ready.head && written < PARK_FLUSH_BYTES) {
        Request *req = DLIST_ITEM(s->park_ready.head, Request, park.rlink);
        dlist_remove(&s->park_ready, &req->park.rlink);
        req->park.ready = false;
        written += write_out(req);
    }
}

int64_t park_next_timeout_ms(const Server *s, const Now *now)
{
    if (s->park_ready.head)
        return 0; /* past a flush's bytes: the rest goes out on the next turn */
    if (!s->park_writing.head)
        return -1;
    const Request *req = DLIST_ITEM(s->park_writing.head, Request, park.rlink);
    return req->park.write_deadline_ms > now->mono_ms ? req->park.write_deadline_ms - now->mono_ms : 0;
}

void park_tick(Server *s, const Now *now)
{
    while (s->park_writing.head) {
        Request *req = DLIST_ITEM(s->park_writing.head, Request, park.rlink);
        if (req->park.write_deadline_ms > now->mono_ms)
            return;
        finish(req, false); /* the client stopped reading */
    }
}

void park_close_all(Server *s)
{
    while (s->parked.head)
        finish(DLIST_ITEM(s->parked.head, Request, park.link), false);
}

size_t park_connections(const Server *s)
{
    return s->parked.len + s->dormant.len + s->dormant_doomed.len; /* dormant.h's, waiting or doomed */
}
