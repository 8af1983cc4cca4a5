/* forward — a follower's request streamed on to the leader; see forward.h. */
#include "net/forward.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "net/httphead.h"

#define CONNECT_TIMEOUT_MS 2000L
#define WAIT_STEP_MS 100        /* how often a waiting forward looks at its client and the leader */
/* A kept connection to the leader is used again only while it has been idle
 * for less than REUSE_IDLE_MAX_MS, well below the shortest --idle-timeout a
 * leader may have (1 s), after which it closes it, perhaps just as a request
 * is sent on it (the request then meets a reset and fails with 503: libcurl
 * does not send it again). libcurl's own limit (CURLOPT_MAXAGE_CONN) counts
 * whole seconds and lets a connection idle for 1.9 s through with 1; 0 keeps
 * it below 1 s, and the agent's own clock below REUSE_IDLE_MAX_MS. */
#define REUSE_IDLE_MAX_MS 500
#define READ_BLOCK (16u * 1024) /* bytes asked of the answer's reader at a time */
#define AGENTS_KEPT 64          /* idle agents (each with its connection to the leader) kept for reuse */

/* A libcurl multi handle and easy handle, kept between forwards with the
 * connection to the leader that the multi handle caches: making them anew
 * for each forward (the multi handle makes a socketpair, the connection a
 * TCP handshake) cost as much CPU as the leader spends on the request. */
typedef struct Agent {
    CURLM *multi;
    CURL *easy;
    int64_t done_ms;    /* when its last transfer ended well (its connection kept); 0: never */
    struct Agent *next; /* in ForwardPool.idle */
} Agent;

struct ForwardPool {
    const char *cacert; /* CURLOPT_CAINFO for an https leader; NULL: the system's bundle */
    pthread_mutex_t agents_mu; /* guards idle and nidle */
    Agent *idle;
    size_t nidle;
};

ForwardPool *forward_pool_new(const char *cacert)
{
    ForwardPool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->cacert = cacert;
    pthread_mutex_init(&p->agents_mu, NULL);
    return p;
}

static void agent_free(Agent *a)
{
    curl_easy_cleanup(a->easy);
    curl_multi_cleanup(a->multi);
    free(a);
}

void forward_pool_free(ForwardPool *p)
{
    if (!p)
        return;
    while (p->idle) {
        Agent *a = p->idle;
        p->idle = a->next;
        agent_free(a);
    }
    pthread_mutex_destroy(&p->agents_mu);
    free(p);
}

/* An idle agent, or a new one; NULL when out of memory. */
static Agent *agent_take(ForwardPool *p)
{
    pthread_mutex_lock(&p->agents_mu);
    Agent *a = p->idle;
    if (a) {
        p->idle = a->next;
        p->nidle--;
    }
    pthread_mutex_unlock(&p->agents_mu);
    if (a)
        return a;
    if (!(a = calloc(1, sizeof *a)))
        return NULL;
    if (!(a->multi = curl_multi_init()) || !(a->easy = curl_easy_init()) ||
        curl_multi_setopt(a->multi, CURLMOPT_MAXCONNECTS, 1L) != CURLM_OK) {
        agent_free(a);
        return NULL;
    }
    return a;
}

/* Back to the pool, its easy handle out of its multi handle (a transfer not
 * finished is abandoned: libcurl closes that connection) and reset (which
 * keeps the cached connection). */
static void agent_give_back(ForwardPool *p, Agent *a, bool added)
{
    if (added)
        curl_multi_remove_handle(a->multi, a->easy);
    curl_easy_reset(a->easy);
    pthread_mutex_lock(&p->agents_mu);
    bool keep = p->nidle < AGENTS_KEPT;
    if (keep) {
        a->next = p->idle;
        p->idle = a;
        p->nidle++;
    }
    pthread_mutex_unlock(&p->agents_mu);
    if (!keep)
        agent_free(a);
}

/* Bytes on their way from one side to the other: FORWARD_BUFFER at most. */
typedef struct Ring {
    char *buf; /* owned */
    size_t head, len;
} Ring;

static size_t ring_put(Ring *r, const char *p, size_t n)
{
    size_t done = 0;
    while (done < n && r->len < FORWARD_BUFFER) {
        size_t tail = (r->head + r->len) % FORWARD_BUFFER;
        size_t room = tail >= r->head ? FORWARD_BUFFER - tail : r->head - tail; /* contiguous free bytes */
        size_t k = n - done < room ? n - done : room;
        memcpy(r->buf + tail, p + done, k);
        r->len += k;
        done += k;
    }
    return done;
}

static size_t ring_get(Ring *r, char *p, size_t n)
{
    size_t done = 0;
    while (done < n && r->len) {
        size_t run = FORWARD_BUFFER - r->head < r->len ? FORWARD_BUFFER - r->head : r->len;
        size_t k = n - done < run ? n - done : run;
        memcpy(p + done, r->buf + r->head, k);
        r->head = (r->head + k) % FORWARD_BUFFER;
        r->len -= k;
        done += k;
    }
    return done;
}

enum { BODY_NONE, BODY_UPLOAD, BODY_HEAD };

/* Everything here is used by the connection's thread only (libmicrohttpd's
 * thread per connection): the transfer runs on it, driven by the call that
 * waits for it (forward_add_body, forward_answer, the answer's reader). */
struct Forward {
    char *uri; /* owned */
    bool called, started;
    atomic_int refs; /* the request's, and the answer's response once made */

    ForwardPool *pool;
    Agent *agent;                /* while started; back to the pool with the last reference */
    struct curl_slist *headers;  /* owned: the request's headers for the leader */
    char *url, *leader;          /* owned */
    int body;                    /* BODY_*: how the request's body goes out */
    int client_fd;
    ForwardStop should_stop;
    void *ud;
    int64_t next_check_ms;       /* when the client and the leader are next looked at */

    Ring up, down;      /* client -> leader, leader -> client */
    bool up_done;       /* the whole request body is in `up` */
    bool up_paused;     /* libcurl waits for request body bytes (CURL_READFUNC_PAUSE) */
    bool down_paused;   /* libcurl holds answer bytes `down` had no room for */
    bool stopped;       /* given up: should_stop, or the client hung up */
    bool headers_ready; /* the answer's status and headers are complete */
    bool finished;      /* the transfer has ended (result) */
    bool oom;
    const char *refused; /* why the leader's answer was refused (static text), or NULL */
    CURLcode result;
    char error[CURL_ERROR_SIZE]; /* libcurl's words for result */
    long status;
    curl_off_t answer_len;            /* its Content-Length; -1 when none */
    curl_off_t passed;                /* answer body bytes handed to libmicrohttpd */
    struct curl_slist *answer_headers; /* owned: "Name: value", all of them (filtered when passed on) */
};

Forward *forward_new(const char *uri)
{
    Forward *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    if (!(f->uri = strdup(uri ? uri : "/"))) {
        free(f);
        return NULL;
    }
    atomic_init(&f->refs, 1);
    f->answer_len = -1;
    f->client_fd = -1;
    return f;
}

static void forward_unref(Forward *f)
{
    if (atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    if (f->agent)
        agent_give_back(f->pool, f->agent, f->started);
    curl_slist_free_all(f->headers);
    curl_slist_free_all(f->answer_headers);
    free(f->up.buf);
    free(f->down.buf);
    free(f->url);
    free(f->leader);
    free(f->uri);
    free(f);
}

void forward_release(Forward *f)
{
    if (f)
        forward_unref(f);
}

const char *forward_uri(const Forward *f) { return f->uri; }
bool forward_started(const Forward *f) { return f->started; }

bool forward_first_call(Forward *f)
{
    bool first = !f->called;
    f->called = true;
    return first;
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Whether to give up (and remember that it did): the client hung up, or the
 * leader changed. Looked at every WAIT_STEP_MS while the forward waits. */
static bool give_up(Forward *f)
{
    int64_t now = mono_ms();
    if (now < f->next_check_ms)
        return false;
    f->next_check_ms = now + WAIT_STEP_MS;
    bool quit = false;
    if (f->client_fd >= 0) {
        struct pollfd p = {f->client_fd, POLLRDHUP, 0};
        quit = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
    }
    if (quit || f->should_stop(f->ud, f->leader))
        f->stopped = true;
    return f->stopped;
}

/* One run of the transfer, without waiting: what is ready is sent and taken. */
static void run_once(Forward *f)
{
    CURLM *multi = f->agent->multi;
    int running;
    CURLMcode mc = curl_multi_perform(multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left)))
        if (m->msg == CURLMSG_DONE) {
            f->result = m->data.result;
            f->finished = true;
            if (f->result == CURLE_OK)
                f->agent->done_ms = mono_ms();
        }
    if (mc != CURLM_OK && !f->finished) {
        snprintf(f->error, sizeof f->error, "%s", curl_multi_strerror(mc));
        f->result = CURLE_FAILED_INIT;
        f->finished = true;
    }
}

/* Runs the transfer until until(f) holds or it ends. A forward given up ends
 * as a failed transfer. */
static void drive(Forward *f, bool (*until)(const Forward *f))
{
    CURLM *multi = f->agent->multi;
    while (!f->finished && !until(f)) {
        run_once(f);
        if (f->finished || until(f))
            return;
        if (give_up(f)) {
            f->result = CURLE_ABORTED_BY_CALLBACK;
            f->finished = true;
            return;
        }
        int64_t wait = f->next_check_ms - mono_ms();
        curl_multi_poll(multi, NULL, 0, wait < 1 ? 1 : (int)wait, NULL);
    }
}

/* Headers each side of a forward sets itself, dropped both ways besides the
 * hop-by-hop ones: libcurl and libmicrohttpd write Host, Content-Length,
 * Expect and Date for their own hop, and FORWARD_HEADER is the follower's.
 * Origin was the follower's to check (hostcheck.h): the page's origin is the
 * follower's name, which the leader need not answer for. */
static const char *const SET_BY_US[] = {"Host", "Content-Length", "Expect", "Date", FORWARD_HEADER, "Origin", NULL};

/* libcurl asks for request body bytes: what `up` has, the end, or a pause
 * until forward_add_body or forward_answer brings more. */
static size_t on_read(char *p, size_t size, size_t n, void *ud)
{
    Forward *f = ud;
    if (f->up.len)
        return ring_get(&f->up, p, size * n);
    if (f->up_done)
        return 0; /* the end of the body */
    f->up_paused = true;
    return CURL_READFUNC_PAUSE;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    Forward *f = ud;
    size_t len = size * n, end = len;
    while (end > 0 && (p[end - 1] == '\r' || p[end - 1] == '\n'))
        end--;
    if (f->headers_ready)
        return len; /* what follows the body (trailers) is not passed on */
    if (len >= 5 && !strncmp(p, "HTTP/", 5)) { /* a status line: a new answer (after 1xx) starts */
        const char *sp = memchr(p, ' ', end);
        f->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        f->answer_len = -1;
        curl_slist_free_all(f->answer_headers);
        f->answer_headers = NULL;
        return len;
    }
    if (end == 0) { /* the blank line: the headers of this answer are complete */
        if (f->status >= 200)
            f->headers_ready = true;
        return len;
    }
    const char *colon = memchr(p, ':', end);
    if (!colon)
        return len;
    size_t name_len = (size_t)(colon - p);
    const char *value = colon + 1;
    while (value < p + end && (*value == ' ' || *value == '\t'))
        value++;
    if (name_len == 14 && !strncasecmp(p, "Content-Length", 14)) {
        char num[24] = "";
        size_t vlen = (size_t)(p + end - value);
        if (vlen < sizeof num) {
            memcpy(num, value, vlen);
            char *stop;
            errno = 0;
            long long v = strtoll(num, &stop, 10);
            if (!errno && stop != num && !*stop && v >= 0)
                f->answer_len = v;
        }
    }
    HeadKept kept = httphead_keep_line(&f->answer_headers, p, end, HTTPHEAD_LEADER_LIMITS);
    if (kept == HEAD_NOMEM)
        f->oom = true;
    else if (kept == HEAD_TOO_BIG)
        f->refused = HTTPHEAD_LEADER_TOO_BIG;
    return kept == HEAD_KEPT ? len : 0;
}

/* libcurl brings answer body bytes: all into `down`, or none and a pause
 * (libcurl keeps them) until the client has read enough to make room. */
static size_t on_write(char *p, size_t size, size_t n, void *ud)
{
    Forward *f = ud;
    size_t total = size * n;
    if (FORWARD_BUFFER - f->down.len < total) {
        f->down_paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    ring_put(&f->down, p, total);
    return total;
}

/* How the request's body goes out: none, of a known length, or chunked
 * (length -1). */
static curl_off_t choose_body(Forward *f, struct MHD_Connection *conn, const char *method)
{
    if (!strcmp(method, "HEAD")) {
        f->body = BODY_HEAD;
        return 0;
    }
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    bool sends = !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH");
    f->body = te || cl || sends ? BODY_UPLOAD : BODY_NONE;
    return te ? -1 : cl ? (curl_off_t)strtoull(cl, NULL, 10) /* libmicrohttpd has checked it */ : 0;
}

/* The forward's options on the agent's easy handle (reset since its last forward). */
static CURLcode set_options(Forward *f, const char *method, curl_off_t body_len)
{
    CURL *e = f->agent->easy;
    CURLcode cc = CURLE_OK;
#define OPT(o, v)                                                                                                      \
    do {                                                                                                               \
        if (cc == CURLE_OK)                                                                                            \
            cc = curl_easy_setopt(e, o, v);                                                                            \
    } while (0)
    if (f->pool->cacert)
        OPT(CURLOPT_CAINFO, f->pool->cacert);
    OPT(CURLOPT_URL, f->url);
    OPT(CURLOPT_CUSTOMREQUEST, method); /* copied by libcurl */
    OPT(CURLOPT_NOSIGNAL, 1L);
    OPT(CURLOPT_MAXAGE_CONN, 0L); /* idle below 1 s; and below REUSE_IDLE_MAX_MS: */
    if (f->agent->done_ms && mono_ms() - f->agent->done_ms > REUSE_IDLE_MAX_MS)
        OPT(CURLOPT_FRESH_CONNECT, 1L); /* the one cached connection then goes as this one is kept */
    OPT(CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    OPT(CURLOPT_HTTPHEADER, f->headers);
    OPT(CURLOPT_HEADERFUNCTION, on_header);
    OPT(CURLOPT_HEADERDATA, f);
    OPT(CURLOPT_WRITEFUNCTION, on_write);
    OPT(CURLOPT_WRITEDATA, f);
    OPT(CURLOPT_READFUNCTION, on_read);
    OPT(CURLOPT_READDATA, f);
    OPT(CURLOPT_ERRORBUFFER, f->error);
    if (f->body == BODY_HEAD)
        OPT(CURLOPT_NOBODY, 1L);
    if (f->body == BODY_UPLOAD) {
        OPT(CURLOPT_UPLOAD, 1L);
        OPT(CURLOPT_INFILESIZE_LARGE, body_len);
    }
#undef OPT
    return cc;
}

bool forward_start(Forward *f, ForwardPool *pool, struct MHD_Connection *conn, const char *method,
                   const char *leader_url, ForwardStop should_stop, void *ud, const char **why)
{
    *why = "out of memory";
    size_t base = strlen(leader_url);
    while (base && leader_url[base - 1] == '/')
        base--;
    if (!httphead_pass_request(conn, SET_BY_US, NULL, &f->headers))
        return false;
    struct curl_slist *mark = curl_slist_append(f->headers, FORWARD_HEADER ": 1");
    if (!mark)
        return false;
    f->headers = mark;
    /* A body larger than the buffers (or of unknown length) waits for the
     * leader's 100 Continue: the leader refuses some requests from their
     * headers alone (401, 403, 415, 413, the guard's 428 and 409) and closes;
     * sent blind, the body meets a reset and the client gets 503 "retry"
     * instead of the leader's answer. Smaller bodies go at once. */
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    bool large = te || (cl && strtoull(cl, NULL, 10) > FORWARD_BUFFER);
    struct curl_slist *l = curl_slist_append(f->headers, large ? "Expect: 100-continue" : "Expect:");
    if (!l)
        return false;
    f->headers = l;
    if (asprintf(&f->url, "%.*s%s", (int)base, leader_url, f->uri) < 0) {
        f->url = NULL;
        return false;
    }
    if (!(f->leader = strdup(leader_url)) || !(f->up.buf = malloc(FORWARD_BUFFER)) ||
        !(f->down.buf = malloc(FORWARD_BUFFER)) || !(f->agent = agent_take(pool)))
        return false;
    f->pool = pool;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    f->client_fd = ci ? ci->connect_fd : -1;
    f->should_stop = should_stop;
    f->ud = ud;
    f->next_check_ms = mono_ms() + WAIT_STEP_MS;
    curl_off_t body_len = choose_body(f, conn, method);
    if (set_options(f, method, body_len) != CURLE_OK ||
        curl_multi_add_handle(f->agent->multi, f->agent->easy) != CURLM_OK) {
        agent_give_back(pool, f->agent, false);
        f->agent = NULL;
        return false;
    }
    f->started = true;
    return true;
}

/* Lets libcurl go on after a pause, once what it waited for is there. Its
 * callbacks may run inside curl_easy_pause. When going on fails (out of
 * memory for what libcurl held back), the transfer ends there, failed: its
 * connection is closed when the agent goes back (agent_give_back). */
static void unpause(Forward *f)
{
    if (!f->finished && (f->up_paused || f->down_paused)) {
        f->up_paused = f->down_paused = false;
        CURLcode rc = curl_easy_pause(f->agent->easy, CURLPAUSE_CONT);
        if (rc != CURLE_OK && !f->finished) {
            f->result = rc;
            f->finished = true;
        }
    }
}

static bool up_has_room(const Forward *f) { return f->up.len < FORWARD_BUFFER; }

void forward_add_body(Forward *f, const char *data, size_t n)
{
    while (n && !f->finished) {
        size_t put = ring_put(&f->up, data, n);
        data += put;
        n -= put;
        if (put && f->up_paused)
            unpause(f);
        if (n)
            drive(f, up_has_room); /* the leader takes the body slower than the client sends */
    }
}

static bool has_headers(const Forward *f) { return f->headers_ready; }
static bool has_answer_bytes(const Forward *f) { return f->down.len > 0; }

/* libmicrohttpd's reader of the answer body, on the connection's thread
 * (which may block: one thread per connection). */
static ssize_t read_answer(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    Forward *f = cls;
    drive(f, has_answer_bytes);
    if (!f->down.len)
        return f->result == CURLE_OK && !f->oom ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    ssize_t r = (ssize_t)ring_get(&f->down, buf, max);
    if (f->down_paused && FORWARD_BUFFER - f->down.len >= CURL_MAX_WRITE_SIZE)
        unpause(f);
    f->passed += r;
    /* libmicrohttpd asks no more once it has Content-Length bytes. When the
     * last of them came out of a pause, libcurl ends the transfer only when it
     * runs again: run it once (it has all it needs), or its end is never seen
     * and the connection to the leader is closed as abandoned, not kept. */
    if (f->answer_len >= 0 && f->passed == f->answer_len && !f->finished)
        run_once(f);
    return r;
}

static void answer_freed(void *cls) { forward_unref(cls); }

struct MHD_Response *forward_answer(Forward *f, unsigned *status, const char **why)
{
    f->up_done = true;
    if (f->up_paused)
        unpause(f);
    drive(f, has_headers);
    if (!f->headers_ready) {
        *why = f->stopped ? "the leader changed, or the client or this gateway went away"
               : f->refused ? f->refused
               : f->oom   ? "out of memory"
               : f->error[0] ? f->error
                          : curl_easy_strerror(f->result);
        return NULL;
    }
    uint64_t size = f->answer_len >= 0 ? (uint64_t)f->answer_len
                    : f->status == 204 || f->status == 304 ? 0
                                                            : MHD_SIZE_UNKNOWN;
    struct MHD_Response *resp = MHD_create_response_from_callback(size, READ_BLOCK, read_answer, f, answer_freed);
    if (!resp) {
        *why = "out of memory";
        return NULL;
    }
    atomic_fetch_add(&f->refs, 1); /* the response's, dropped by answer_freed */
    /* All the leader's lines are in: a Connection header may come after a header it names. */
    if (!httphead_pass_answer(f->answer_headers, SET_BY_US, resp)) {
        MHD_destroy_response(resp); /* answer_freed drops the response's reference */
        *why = "out of memory";
        return NULL;
    }
    *status = (unsigned)f->status;
    return resp;
}
