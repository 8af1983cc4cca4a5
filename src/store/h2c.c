/* h2c — unary gRPC calls over a kept HTTP/2 connection, cleartext or TLS; see h2c.h. */
#include "store/h2c.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "store/resolve.h"
#include "store/tlsconn.h"

/* An answer larger than this is refused (etcd's own limit on a request is
 * 1.5 MiB; the store's answers are a few hundred bytes). */
#define H2C_MAX_ANSWER (64u << 20)
/* How often a waiting call asks whether it is cancelled. */
#define CANCEL_POLL_MS 1000
/* How many 16 KiB reads read_in makes before the caller's loop sends what
 * nghttp2 answered and checks its bounds again. */
#define READ_CHUNKS 16
/* What a server may make us queue (nghttp2's options; its defaults are 1000,
 * 32, 8 and 200): acknowledgements of PING and SETTINGS not yet sent (etcd
 * sends a PING now and then, and one SETTINGS at a time: a burst of more is
 * a flood, and the connection is dropped), entries in one SETTINGS frame
 * (HTTP/2 defines 8), CONTINUATION frames after one HEADERS (etcd's headers
 * and trailers fit in one frame each) and pushed streams (push is refused). */
#define MAX_OUTBOUND_ACK 100
#define MAX_SETTINGS 16
#define MAX_CONTINUATIONS 4

struct H2c {
    const TlsFiles *tls; /* NULL: cleartext */
    int fd;              /* -1: no connection */
    TlsConn *conn;       /* the connection's TLS session (with tls), NULL before its handshake */
    nghttp2_session *session;
    char host[256], port[16]; /* the connection's endpoint */
    /* Owned: a name lookup given up on and still running, waited for again by
     * the next connect (resolve.h), so that a hung resolver holds one thread. */
    ResolvePending *lookup;
    unsigned char *out;       /* what nghttp2 has to send, gathered for one write */
    size_t out_len, out_cap;
    /* The call in progress. */
    int32_t stream;
    H2cAnswer *answer;
    const unsigned char *body;
    size_t body_len, body_sent;
    bool done, too_large, nomem;
    uint32_t reset_code; /* the stream's error code when it closed (0: none) */
};

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

H2c *h2c_new(const TlsFiles *tls)
{
    H2c *h = calloc(1, sizeof *h);
    if (h) {
        h->fd = -1;
        h->tls = tls;
    }
    return h;
}

void h2c_close(H2c *h)
{
    if (h->session)
        nghttp2_session_del(h->session);
    h->session = NULL;
    tlsconn_free(h->conn);
    h->conn = NULL;
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    h->out_len = 0;
}

void h2c_free(H2c *h)
{
    if (!h)
        return;
    h2c_close(h);
    resolve_pending_free(h->lookup);
    free(h->out);
    free(h);
}

/* nghttp2's callbacks: the call's stream only. */

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)s, (void)flags;
    H2c *h = ud;
    if (frame->hd.stream_id != h->stream || !h->answer)
        return 0;
    H2cAnswer *a = h->answer;
    if (namelen == 7 && !memcmp(name, ":status", 7)) {
        int v = 0;
        for (size_t i = 0; i < valuelen && i < 3 && value[i] >= '0' && value[i] <= '9'; i++)
            v = v * 10 + (value[i] - '0');
        a->http_status = v;
    } else if (namelen == 11 && !memcmp(name, "grpc-status", 11)) {
        int v = 0;
        size_t i = 0;
        for (; i < valuelen && i < 3 && value[i] >= '0' && value[i] <= '9'; i++)
            v = v * 10 + (value[i] - '0');
        a->grpc_status = i && i == valuelen ? v : 2; /* not a number: UNKNOWN */
    } else if (namelen == 12 && !memcmp(name, "grpc-message", 12)) {
        snprintf(a->message, sizeof a->message, "%.*s", (int)valuelen, (const char *)value);
    }
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data, size_t len, void *ud)
{
    (void)s, (void)flags;
    H2c *h = ud;
    if (stream != h->stream || !h->answer)
        return 0;
    H2cAnswer *a = h->answer;
    if (a->len + len > H2C_MAX_ANSWER) {
        h->too_large = true;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    char *grown = realloc(a->body, a->len + len + 1);
    if (!grown) {
        h->nomem = true;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    memcpy(grown + a->len, data, len);
    a->body = grown;
    a->len += len;
    a->body[a->len] = '\0';
    return 0;
}

static int on_close(nghttp2_session *s, int32_t stream, uint32_t code, void *ud)
{
    (void)s;
    H2c *h = ud;
    if (stream == h->stream) {
        h->done = true;
        h->reset_code = code;
    }
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    (void)s, (void)stream, (void)src;
    H2c *h = ud;
    size_t n = h->body_len - h->body_sent;
    if (n > len)
        n = len;
    memcpy(buf, h->body + h->body_sent, n);
    h->body_sent += n;
    if (h->body_sent == h->body_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* Waits for fd to be ready for events until deadline (-1: none), asking
 * cancelled every CANCEL_POLL_MS: 1 ready, 0 timed out, -1 cancelled, -2
 * poll failed. */
static int wait_fd(int fd, short events, int64_t deadline, bool (*cancelled)(void *), void *ud)
{
    for (;;) {
        int64_t left = deadline < 0 ? CANCEL_POLL_MS : deadline - mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, (int)(left < CANCEL_POLL_MS ? left : CANCEL_POLL_MS));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -2;
        if (cancelled && cancelled(ud))
            return -1;
    }
}

/* What a failed step of the connection's I/O (TLSCONN_*) means for the call. */
static H2cFailure failure_of(ssize_t step)
{
    return step == TLSCONN_NOMEM ? H2C_NOMEM : step == TLSCONN_REFUSED ? H2C_TLS : H2C_UNREACHABLE;
}

/* send(2) on the connection, through its TLS session when it has one: the
 * bytes taken, or TLSCONN_AGAIN, or a failure with err. */
static ssize_t send_some(H2c *h, const void *data, size_t len, char *err, size_t errlen)
{
    if (h->conn)
        return tlsconn_send(h->conn, data, len, err, errlen);
    for (;;) {
        ssize_t n = send(h->fd, data, len, MSG_NOSIGNAL);
        if (n >= 0)
            return n;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return TLSCONN_AGAIN;
        if (errno != EINTR) {
            snprintf(err, errlen, "send: %s", strerror(errno));
            return TLSCONN_BROKEN;
        }
    }
}

/* recv(2) likewise: the bytes read, 0 when the server closed, or
 * TLSCONN_AGAIN, or a failure with err. */
static ssize_t recv_some(H2c *h, void *buf, size_t len, char *err, size_t errlen)
{
    if (h->conn)
        return tlsconn_recv(h->conn, buf, len, err, errlen);
    for (;;) {
        ssize_t n = recv(h->fd, buf, len, 0);
        if (n >= 0)
            return n;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return TLSCONN_AGAIN;
        if (errno != EINTR) {
            snprintf(err, errlen, "recv: %s", strerror(errno));
            return TLSCONN_BROKEN;
        }
    }
}

/* Gathers everything nghttp2 has to send and writes it (one write unless
 * the socket's buffer is full). H2C_OK, or why not with err. */
static H2cFailure flush_out(H2c *h, int64_t deadline, bool (*cancelled)(void *), void *ud, char *err,
                            size_t errlen)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(h->session, &data);
        if (n < 0) {
            snprintf(err, errlen, "HTTP/2: %s", nghttp2_strerror((int)n));
            return n == NGHTTP2_ERR_NOMEM || h->nomem ? H2C_NOMEM : H2C_UNREACHABLE;
        }
        if (n == 0)
            break;
        if (h->out_len + (size_t)n > h->out_cap) {
            size_t cap = (h->out_len + (size_t)n) * 2;
            unsigned char *grown = realloc(h->out, cap);
            if (!grown) {
                snprintf(err, errlen, "out of memory");
                return H2C_NOMEM;
            }
            h->out = grown;
            h->out_cap = cap;
        }
        memcpy(h->out + h->out_len, data, (size_t)n);
        h->out_len += (size_t)n;
    }
    size_t sent = 0;
    while (sent < h->out_len) {
        /* After TLSCONN_AGAIN, the same bytes again (as GnuTLS asks). */
        ssize_t n = send_some(h, h->out + sent, h->out_len - sent, err, errlen);
        if (n > 0) {
            sent += (size_t)n;
            continue;
        }
        if (n == TLSCONN_AGAIN) {
            int w = wait_fd(h->fd, h->conn ? tlsconn_wants(h->conn) : POLLOUT, deadline, cancelled, ud);
            if (w == 1)
                continue;
            snprintf(err, errlen, w == 0 ? "timed out sending" : w == -1 ? "cancelled" : "poll: %s", strerror(errno));
            return w == 0 ? H2C_TIMEOUT : w == -1 ? H2C_CANCELLED : H2C_UNREACHABLE;
        }
        if (n == 0)
            snprintf(err, errlen, "send: nothing taken");
        return failure_of(n);
    }
    h->out_len = 0;
    return H2C_OK;
}

/* Reads what the socket has (without waiting) into nghttp2, at most
 * READ_CHUNKS reads of 16 KiB a time: a peer can keep the socket readable
 * for ever (a flood of WINDOW_UPDATE or PING frames, an endless answer),
 * and the caller must get to send what nghttp2 answered, to ask whether it
 * is cancelled and to see its deadline. *more says the socket or the TLS
 * session may hold more (poll() would not show what the session holds).
 * H2C_OK; H2C_TIMEOUT once deadline (-1: none) has passed, checked after
 * every read; else why the connection is no longer usable. */
static H2cFailure read_in(H2c *h, int64_t deadline, bool *more, char *err, size_t errlen)
{
    uint8_t buf[16384];
    *more = false;
    for (int chunk = 0; chunk < READ_CHUNKS; chunk++) {
        ssize_t n = recv_some(h, buf, sizeof buf, err, errlen);
        if (n == TLSCONN_AGAIN)
            return H2C_OK;
        if (n == 0)
            snprintf(err, errlen, "the connection was closed");
        if (n <= 0)
            return failure_of(n);
        ssize_t used = nghttp2_session_mem_recv(h->session, buf, (size_t)n);
        if (used < 0) {
            if (h->nomem)
                snprintf(err, errlen, "out of memory reading the answer");
            else if (h->too_large)
                snprintf(err, errlen, "an answer larger than %u bytes", H2C_MAX_ANSWER);
            else if (used == NGHTTP2_ERR_FLOODED)
                snprintf(err, errlen, "HTTP/2: the server flooded the connection (more than %d PING or SETTINGS "
                                      "frames to acknowledge at once, or a header block in more than %d frames)",
                         MAX_OUTBOUND_ACK, MAX_CONTINUATIONS + 1);
            else
                snprintf(err, errlen, "HTTP/2: %s (not HTTP/2: is this etcd's client URL?)",
                         nghttp2_strerror((int)used));
            return h->nomem || used == NGHTTP2_ERR_NOMEM ? H2C_NOMEM : H2C_UNREACHABLE;
        }
        /* A short read emptied the socket; not always the TLS session,
         * which may hold more records, decrypted. */
        *more = (size_t)n == sizeof buf || (h->conn && tlsconn_pending(h->conn));
        if (!*more || (h->answer && h->done))
            return H2C_OK;
        if (deadline >= 0 && mono_ms() >= deadline) {
            snprintf(err, errlen, "no answer in time (the server kept sending frames of no answer)");
            return H2C_TIMEOUT;
        }
    }
    return H2C_OK;
}

/* TLS on the connection just made, by until (the connect's deadline). */
static H2cFailure tls_handshake(H2c *h, const char *host, int64_t until, bool (*cancelled)(void *), void *ud,
                                char *err, size_t errlen)
{
    int why;
    if (!(h->conn = tlsconn_new(h->fd, host, h->tls, &why, err, errlen)))
        return failure_of(why);
    for (;;) {
        int rc = tlsconn_handshake(h->conn, err, errlen);
        if (rc == 1)
            return H2C_OK;
        if (rc != TLSCONN_AGAIN)
            return failure_of(rc);
        int w = wait_fd(h->fd, tlsconn_wants(h->conn), until, cancelled, ud);
        if (w != 1) {
            snprintf(err, errlen, w == 0 ? "no TLS handshake in time" : w == -1 ? "cancelled" : "poll: %s",
                     strerror(errno));
            return w == 0 ? H2C_TIMEOUT : w == -1 ? H2C_CANCELLED : H2C_UNREACHABLE;
        }
    }
}

/* A new connection to host:port and its session, the client preface queued.
 * One deadline for the whole connect, connect_ms from now and never past
 * the call's: the name's lookup, every address tried, the TLS handshake. */
static H2cFailure open_connection(H2c *h, const char *host, const char *port, int64_t deadline, long connect_ms,
                                  bool (*cancelled)(void *), void *ud, char *err, size_t errlen)
{
    int64_t until = mono_ms() + connect_ms;
    if (deadline >= 0 && deadline < until)
        until = deadline;
    struct addrinfo *res;
    ResolveResult found = resolve_tcp(host, port, until, CANCEL_POLL_MS, cancelled, ud, &h->lookup, &res, err, errlen);
    if (found != RESOLVE_OK)
        return found == RESOLVE_NOMEM       ? H2C_NOMEM
               : found == RESOLVE_TIMEOUT   ? H2C_TIMEOUT
               : found == RESOLVE_CANCELLED ? H2C_CANCELLED
                                            : H2C_UNREACHABLE;
    H2cFailure why = H2C_UNREACHABLE;
    snprintf(err, errlen, "no address of %s", host);
    for (struct addrinfo *ai = res; ai && h->fd < 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* each write is a whole message */
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc < 0 && errno == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, until, cancelled, ud);
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                rc = 0;
            else if (w == 1)
                errno = soerr ? soerr : errno;
            else {
                why = w == 0 ? H2C_TIMEOUT : w == -1 ? H2C_CANCELLED : H2C_UNREACHABLE;
                errno = w == 0 ? ETIMEDOUT : w == -1 ? ECANCELED : errno;
            }
        }
        if (rc < 0) {
            snprintf(err, errlen, "connect to %s port %s: %s", host, port, strerror(errno));
            close(fd);
            if (why == H2C_CANCELLED || why == H2C_TIMEOUT) /* the connect's time is up: no address left has any */
                break;
            continue;
        }
        h->fd = fd;
    }
    freeaddrinfo(res);
    if (h->fd < 0)
        return why;
    if (h->tls && (why = tls_handshake(h, host, until, cancelled, ud, err, errlen)) != H2C_OK) {
        h2c_close(h);
        return why;
    }
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb)) {
        h2c_close(h);
        snprintf(err, errlen, "out of memory");
        return H2C_NOMEM;
    }
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    nghttp2_option *opt;
    int rc = nghttp2_option_new(&opt);
    if (!rc) {
        nghttp2_option_set_max_outbound_ack(opt, MAX_OUTBOUND_ACK);
        nghttp2_option_set_max_settings(opt, MAX_SETTINGS);
        nghttp2_option_set_max_continuations(opt, MAX_CONTINUATIONS);
        nghttp2_option_set_max_reserved_remote_streams(opt, 0);
        rc = nghttp2_session_client_new2(&h->session, cb, h, opt);
        nghttp2_option_del(opt);
    }
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry no_push = {NGHTTP2_SETTINGS_ENABLE_PUSH, 0};
    if (rc || nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, &no_push, 1)) {
        h2c_close(h);
        snprintf(err, errlen, "out of memory");
        return H2C_NOMEM;
    }
    snprintf(h->host, sizeof h->host, "%s", host);
    snprintf(h->port, sizeof h->port, "%s", port);
    return H2C_OK;
}

/* The call on the connection as it is (open_connection's, or kept). */
static H2cFailure call_once(H2c *h, const char *path, const char *token, int64_t deadline,
                            bool (*cancelled)(void *), void *ud, char *err, size_t errlen)
{
    char authority[300];
    bool v6 = strchr(h->host, ':') != NULL;
    snprintf(authority, sizeof authority, "%s%s%s:%s", v6 ? "[" : "", h->host, v6 ? "]" : "", h->port);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nva[] = {NV(":method", "POST"), NV(":scheme", h->tls ? "https" : "http"), NV(":authority", authority),
                        NV(":path", path), NV("content-type", "application/grpc"), NV("te", "trailers"),
                        NV("token", token ? token : "")};
#undef NV
    nghttp2_data_provider body = {.read_callback = read_body};
    h->done = h->too_large = h->nomem = false;
    h->reset_code = 0;
    h->body_sent = 0;
    int32_t stream = nghttp2_submit_request(h->session, NULL, nva, token ? 7 : 6, &body, NULL);
    if (stream < 0) {
        snprintf(err, errlen, "HTTP/2: %s", nghttp2_strerror(stream));
        return stream == NGHTTP2_ERR_NOMEM ? H2C_NOMEM : H2C_UNREACHABLE;
    }
    h->stream = stream;
    H2cFailure f = flush_out(h, deadline, cancelled, ud, err, errlen);
    bool more = false;
    int64_t ask_at = mono_ms() + CANCEL_POLL_MS;
    while (f == H2C_OK && !h->done) {
        int w = more ? 1 : wait_fd(h->fd, POLLIN, deadline, cancelled, ud);
        if (w != 1) {
            snprintf(err, errlen, w == 0 ? "no answer in time" : w == -1 ? "cancelled" : "poll: %s",
                     strerror(errno));
            return w == 0 ? H2C_TIMEOUT : w == -1 ? H2C_CANCELLED : H2C_UNREACHABLE;
        }
        /* Asked also while the server keeps the socket readable. */
        if (cancelled && mono_ms() >= ask_at) {
            if (cancelled(ud)) {
                snprintf(err, errlen, "cancelled");
                return H2C_CANCELLED;
            }
            ask_at = mono_ms() + CANCEL_POLL_MS;
        }
        f = read_in(h, deadline, &more, err, errlen);
        if (f == H2C_OK) /* acknowledgements, window updates: at once */
            f = flush_out(h, deadline, cancelled, ud, err, errlen);
    }
    /* A stream ended without an answer's header (RST_STREAM, even with
     * NO_ERROR, which a server may send only after a whole answer) is a
     * call that got no answer: as a broken connection, not "HTTP 0". */
    if (f == H2C_OK && (h->reset_code || !h->answer->http_status)) {
        snprintf(err, errlen, "the stream was reset %s(HTTP/2 error %u: %s)",
                 h->answer->http_status ? "" : "before an answer ", h->reset_code,
                 nghttp2_http2_strerror(h->reset_code));
        f = H2C_UNREACHABLE;
    }
    return f;
}

H2cFailure h2c_call(H2c *h, const char *host, const char *port, const char *path, const char *token,
                    const void *body, size_t len, long connect_ms, long timeout_ms, bool (*cancelled)(void *ud),
                    void *ud, H2cAnswer *a, char *err, size_t errlen)
{
    *a = (H2cAnswer){.grpc_status = -1};
    int64_t deadline = timeout_ms > 0 ? mono_ms() + timeout_ms : -1;
    if (h->fd >= 0 && (strcmp(h->host, host) || strcmp(h->port, port)))
        h2c_close(h);
    /* What a kept connection received while idle (a GOAWAY, its end, a
     * PING): a connection the server is done with is not used. */
    bool more;
    if (h->fd >= 0 && (read_in(h, deadline, &more, err, errlen) != H2C_OK ||
                       flush_out(h, deadline, cancelled, ud, err, errlen) != H2C_OK ||
                       !nghttp2_session_want_read(h->session) ||
                       nghttp2_session_get_next_stream_id(h->session) > (uint32_t)INT32_MAX - 2))
        h2c_close(h);
    bool kept = h->fd >= 0;
    H2cFailure f = H2C_OK;
    h->answer = a;
    h->body = body;
    h->body_len = len;
    for (int tries = 0; tries < 2; tries++) {
        if (h->fd < 0)
            f = open_connection(h, host, port, deadline, connect_ms, cancelled, ud, err, errlen);
        if (f == H2C_OK)
            f = call_once(h, path, token, deadline, cancelled, ud, err, errlen);
        if (f == H2C_OK)
            break;
        h2c_close(h);
        /* A kept connection that broke before any answer came (the server
         * closed it as the request went): once more on a new one. */
        if (!(kept && f == H2C_UNREACHABLE && !a->http_status && !a->len))
            break;
        kept = false;
    }
    h->answer = NULL;
    h->body = NULL;
    if (f != H2C_OK) {
        free(a->body);
        a->body = NULL;
        a->len = 0;
    }
    return f;
}
