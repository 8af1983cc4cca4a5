/* forward — a follower's request streamed on to the leader; see include/leasegate/forward.h. */
#include "leasegate/forward.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CONNECT_TIMEOUT_MS 2000L
#define WAIT_STEP_MS 100        /* how often a blocked side looks again (stop, hang-up) */
#define KEPT_CONNECTIONS 64L    /* idle connections to the leader kept for reuse */
#define REUSE_IDLE_MAX_S 1L     /* far below any --idle-timeout of the leader (>= 1 s) that would close them */
#define READ_BLOCK (16u * 1024) /* bytes asked of the answer's reader at a time */

struct ForwardPool {
    CURLSH *share;
    const char *cacert; /* CURLOPT_CAINFO for an https leader; NULL: the system's bundle */
    pthread_mutex_t mu[CURL_LOCK_DATA_LAST];
};

static void pool_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h, (void)access;
    pthread_mutex_lock(&((ForwardPool *)ud)->mu[data]);
}

static void pool_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    pthread_mutex_unlock(&((ForwardPool *)ud)->mu[data]);
}

ForwardPool *forward_pool_new(const char *cacert)
{
    ForwardPool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->cacert = cacert;
    if (!(p->share = curl_share_init())) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&p->mu[i], NULL);
    curl_share_setopt(p->share, CURLSHOPT_LOCKFUNC, pool_lock);
    curl_share_setopt(p->share, CURLSHOPT_UNLOCKFUNC, pool_unlock);
    curl_share_setopt(p->share, CURLSHOPT_USERDATA, p);
    curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    return p;
}

void forward_pool_free(ForwardPool *p)
{
    if (!p)
        return;
    curl_share_cleanup(p->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&p->mu[i]);
    free(p);
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

struct Forward {
    char *uri; /* owned */
    bool called, started;

    /* Set up by forward_start, then the worker's (and read-only for the rest). */
    pthread_t worker;
    CURL *easy;                  /* owned */
    struct curl_slist *headers;  /* owned: the request's headers for the leader */
    char *url, *leader;          /* owned */
    int client_fd;
    ForwardStop should_stop;
    void *ud;

    pthread_mutex_t mu; /* guards the rest, with cv (broadcast on every change) */
    pthread_cond_t cv;
    int refs;           /* the request's, and the answer's response once made */
    Ring up, down;      /* client -> leader, leader -> client */
    bool up_done;       /* the whole request body is in `up` */
    bool aborting;      /* the request is over: the worker must end */
    bool stopped;       /* given up: should_stop, or the client hung up */
    bool headers_ready; /* the answer's status and headers are complete */
    bool finished;      /* the worker's transfer has ended (result) */
    bool oom;
    CURLcode result;
    long status;
    curl_off_t answer_len;            /* its Content-Length; -1 when none */
    struct curl_slist *answer_headers; /* owned: "Name: value", end-to-end only */
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
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    f->refs = 1;
    f->answer_len = -1;
    f->client_fd = -1;
    return f;
}

static void forward_unref(Forward *f)
{
    pthread_mutex_lock(&f->mu);
    int left = --f->refs;
    pthread_mutex_unlock(&f->mu);
    if (left)
        return;
    curl_easy_cleanup(f->easy);
    curl_slist_free_all(f->headers);
    curl_slist_free_all(f->answer_headers);
    free(f->up.buf);
    free(f->down.buf);
    free(f->url);
    free(f->leader);
    free(f->uri);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void forward_release(Forward *f)
{
    if (!f)
        return;
    if (f->started) {
        pthread_mutex_lock(&f->mu);
        f->aborting = true;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->worker, NULL); /* it looks at `aborting` every WAIT_STEP_MS */
    }
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

/* Waits on cv for at most WAIT_STEP_MS; mu is held. */
static void wait_step(Forward *f)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += WAIT_STEP_MS * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&f->cv, &f->mu, &t);
}

/* On the worker, without mu: whether to give up (and remember that it did). */
static bool give_up(Forward *f)
{
    bool quit = false;
    if (f->client_fd >= 0) {
        struct pollfd p = {f->client_fd, POLLRDHUP, 0};
        quit = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
    }
    quit = quit || f->should_stop(f->ud, f->leader);
    pthread_mutex_lock(&f->mu);
    quit = quit || f->aborting;
    if (quit)
        f->stopped = true;
    pthread_mutex_unlock(&f->mu);
    return quit;
}

/* Headers of one hop only (RFC 9110 7.6.1), and those each side sets itself. */
static bool hop_by_hop(const char *name, size_t len)
{
    static const char *const NAMES[] = {"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
                                        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
                                        "Expect", "Date", FORWARD_HEADER};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strlen(NAMES[i]) == len && !strncasecmp(name, NAMES[i], len))
            return true;
    return false;
}

/* Appends "name: value" (name len bytes) to *list; false when out of memory. */
static bool append_header(struct curl_slist **list, const char *name, size_t len, const char *value, size_t vlen)
{
    char *line;
    if (asprintf(&line, "%.*s: %.*s", (int)len, name, (int)vlen, value) < 0)
        return false;
    struct curl_slist *l = curl_slist_append(*list, line);
    free(line);
    if (!l)
        return false;
    *list = l;
    return true;
}

typedef struct HeaderCopy {
    struct curl_slist *list;
    bool failed;
} HeaderCopy;

static enum MHD_Result copy_request_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    HeaderCopy *c = cls;
    if (!key || !value || hop_by_hop(key, strlen(key)))
        return MHD_YES;
    if (!append_header(&c->list, key, strlen(key), value, strlen(value))) {
        c->failed = true;
        return MHD_NO;
    }
    return MHD_YES;
}

/* The worker's end of the request body. */
static size_t on_read(char *p, size_t size, size_t n, void *ud)
{
    Forward *f = ud;
    size_t want = size * n, got = 0;
    for (;;) {
        pthread_mutex_lock(&f->mu);
        bool over = f->aborting;
        if (!over && (f->up.len || f->up_done)) {
            got = ring_get(&f->up, p, want);
            pthread_cond_broadcast(&f->cv);
            pthread_mutex_unlock(&f->mu);
            return got; /* 0: the end of the body */
        }
        if (!over)
            wait_step(f);
        pthread_mutex_unlock(&f->mu);
        if (over || give_up(f))
            return CURL_READFUNC_ABORT;
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    Forward *f = ud;
    size_t len = size * n, end = len;
    while (end > 0 && (p[end - 1] == '\r' || p[end - 1] == '\n'))
        end--;
    pthread_mutex_lock(&f->mu);
    bool done = f->headers_ready; /* what follows the body (trailers) is not passed on */
    pthread_mutex_unlock(&f->mu);
    if (done)
        return len;
    if (len >= 5 && !strncmp(p, "HTTP/", 5)) { /* a status line: a new answer (after 1xx) starts */
        const char *sp = memchr(p, ' ', end);
        f->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        f->answer_len = -1;
        curl_slist_free_all(f->answer_headers);
        f->answer_headers = NULL;
        return len;
    }
    if (end == 0) { /* the blank line: the headers of this answer are complete */
        if (f->status >= 200) {
            pthread_mutex_lock(&f->mu);
            f->headers_ready = true;
            pthread_cond_broadcast(&f->cv);
            pthread_mutex_unlock(&f->mu);
        }
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
    if (hop_by_hop(p, name_len))
        return len;
    if (!append_header(&f->answer_headers, p, name_len, value, (size_t)(p + end - value))) {
        pthread_mutex_lock(&f->mu);
        f->oom = true;
        pthread_mutex_unlock(&f->mu);
        return 0;
    }
    return len;
}

/* The worker's end of the answer body: waits while the client reads slower. */
static size_t on_write(char *p, size_t size, size_t n, void *ud)
{
    Forward *f = ud;
    size_t total = size * n, done = 0;
    pthread_mutex_lock(&f->mu);
    while (done < total && !f->aborting) {
        size_t put = ring_put(&f->down, p + done, total - done);
        done += put;
        if (put)
            pthread_cond_broadcast(&f->cv);
        else
            wait_step(f);
    }
    pthread_mutex_unlock(&f->mu);
    return done == total ? total : 0;
}

/* Called by libcurl at least once a second while it waits on the leader. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return give_up(ud) ? 1 : 0;
}

static void *worker_main(void *arg)
{
    Forward *f = arg;
    CURLcode cc = curl_easy_perform(f->easy);
    pthread_mutex_lock(&f->mu);
    f->result = cc;
    f->finished = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* How the request's body goes out: none, of a known length, or chunked
 * (length -1). */
static void set_body(CURL *e, struct MHD_Connection *conn, const char *method)
{
    if (!strcmp(method, "HEAD")) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        return;
    }
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    bool sends = !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH");
    curl_off_t len = 0;
    if (te)
        len = -1;
    else if (cl)
        len = (curl_off_t)strtoull(cl, NULL, 10); /* libmicrohttpd has checked it */
    if (!te && !cl && !sends)
        return;
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, len);
}

bool forward_start(Forward *f, ForwardPool *pool, struct MHD_Connection *conn, const char *method,
                   const char *leader_url, ForwardStop should_stop, void *ud, const char **why)
{
    *why = "out of memory";
    size_t base = strlen(leader_url);
    while (base && leader_url[base - 1] == '/')
        base--;
    HeaderCopy hc = {NULL, false};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, copy_request_header, &hc);
    f->headers = hc.list;
    if (hc.failed || !append_header(&f->headers, FORWARD_HEADER, strlen(FORWARD_HEADER), "1", 1))
        return false;
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
        !(f->down.buf = malloc(FORWARD_BUFFER)) || !(f->easy = curl_easy_init()) ||
        (pool->cacert && curl_easy_setopt(f->easy, CURLOPT_CAINFO, pool->cacert) != CURLE_OK))
        return false;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    f->client_fd = ci ? ci->connect_fd : -1;
    f->should_stop = should_stop;
    f->ud = ud;
    CURL *e = f->easy;
    curl_easy_setopt(e, CURLOPT_URL, f->url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_SHARE, pool->share);
    curl_easy_setopt(e, CURLOPT_MAXCONNECTS, KEPT_CONNECTIONS);
    curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, REUSE_IDLE_MAX_S);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, f->headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, f);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, f);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    set_body(e, conn, method);
    if (pthread_create(&f->worker, NULL, worker_main, f)) {
        *why = "no thread for the forward";
        return false;
    }
    f->started = true;
    return true;
}

void forward_add_body(Forward *f, const char *data, size_t n)
{
    pthread_mutex_lock(&f->mu);
    while (n && !f->finished && !f->aborting) {
        size_t put = ring_put(&f->up, data, n);
        data += put;
        n -= put;
        if (put)
            pthread_cond_broadcast(&f->cv);
        else
            wait_step(f);
    }
    pthread_mutex_unlock(&f->mu);
}

/* libmicrohttpd's reader of the answer body, on the connection's thread
 * (which may block: one thread per connection). */
static ssize_t read_answer(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    Forward *f = cls;
    pthread_mutex_lock(&f->mu);
    while (!f->down.len && !f->finished && !f->aborting)
        wait_step(f);
    ssize_t r;
    if (f->down.len) {
        r = (ssize_t)ring_get(&f->down, buf, max);
        pthread_cond_broadcast(&f->cv);
    } else {
        r = f->finished && f->result == CURLE_OK && !f->oom ? MHD_CONTENT_READER_END_OF_STREAM
                                                             : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pthread_mutex_unlock(&f->mu);
    return r;
}

static void answer_freed(void *cls) { forward_unref(cls); }

struct MHD_Response *forward_answer(Forward *f, unsigned *status, const char **why)
{
    pthread_mutex_lock(&f->mu);
    f->up_done = true;
    pthread_cond_broadcast(&f->cv);
    while (!f->headers_ready && !f->finished)
        wait_step(f);
    if (!f->headers_ready) {
        *why = f->stopped ? "the leader changed, or the client or this gateway went away"
               : f->oom   ? "out of memory"
                          : curl_easy_strerror(f->result);
        pthread_mutex_unlock(&f->mu);
        return NULL;
    }
    pthread_mutex_unlock(&f->mu);
    /* headers_ready: the worker no longer touches status, answer_len or answer_headers. */
    uint64_t size = f->answer_len >= 0 ? (uint64_t)f->answer_len
                    : f->status == 204 || f->status == 304 ? 0
                                                            : MHD_SIZE_UNKNOWN;
    struct MHD_Response *resp = MHD_create_response_from_callback(size, READ_BLOCK, read_answer, f, answer_freed);
    if (!resp) {
        *why = "out of memory";
        return NULL;
    }
    pthread_mutex_lock(&f->mu);
    f->refs++; /* the response's, dropped by answer_freed */
    pthread_mutex_unlock(&f->mu);
    for (struct curl_slist *h = f->answer_headers; h; h = h->next) {
        char *colon = strchr(h->data, ':');
        if (!colon)
            continue;
        *colon = '\0';
        const char *value = colon + 1;
        while (*value == ' ')
            value++;
        MHD_add_response_header(resp, h->data, value);
    }
    *status = (unsigned)f->status;
    return resp;
}
