/*
 * proxy — upstream calls over libcurl multi; see proxy.h.
 *
 * Who waits for whom (each wait has exactly one waker):
 *   client body -> `up` buffer -> curl read callback
 *     full:  the client connection is suspended (upload_waiting); the read
 *            callback resumes it once it has taken bytes out.
 *     empty: the curl transfer is paused (read_paused); the next upload or
 *            the end of the body un-pauses it.
 *   curl write callback -> `down` buffer -> MHD content reader
 *     full:  the transfer is paused (write_paused); the reader un-pauses it.
 *     empty: the client connection is suspended (reader_waiting); the write
 *            callback or the end of the transfer resumes it.
 * curl_easy_pause is never called from inside a curl callback.
 */
#include "guard/proxy.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/heap.h"
#include "leasegate/dlist.h"
#include "net/http.h"
#include "net/httphead.h"

typedef struct Buf {
    char *data;
    size_t start, len;
} Buf;

struct ProxyCall {
    HeapEntry idle;      /* queued while the transfer runs; first member */
    int64_t active_ms;   /* the last time a byte moved, either way (monotonic) */
    Proxy *proxy;
    Request *req;        /* NULL once detached */
    CURL *easy;
    struct curl_slist *req_headers;
    struct curl_slist *resp_headers; /* "Name: value" lines of the final response */
    DLink link; /* in Proxy.calls */
    Buf up, down;
    long status;
    CURLcode result;
    bool has_body;
    bool started, done;
    bool ever_started;   /* handed to curl at some point (started is cleared when it is taken back) */
    bool body_done;      /* the client's body is fully in `up` */
    bool headers_done;   /* the upstream's final status and headers are in */
    bool final_seen;     /* MHD made its last call; waiting to queue */
    bool queued;
    bool read_paused, write_paused;
    bool broken; /* going on after a pause failed: every callback refuses, so curl ends the call as failed */
    const char *refused; /* why the upstream's answer was refused (static text), or NULL */
    bool upload_waiting, reader_waiting;
    /* The end of the body is held back until released (see proxy.h). */
    bool hold_end, released;
    int64_t body_length; /* the client's Content-Length, -1 when unknown */
    uint64_t sent;       /* body bytes handed to curl */
    ProxyAnswered on_answered;
    void *answered_ud;
    ProxyResult result_fn; /* an internal call's report (answered_ud is its ud) */
    /* The caller looks at the answer's head first (proxy_call_on_answer). */
    ProxyAnswerHead answer_head;
    ProxyAnswerGathered answer_gathered;
    void *answer_ud;
    bool gathering;      /* the answer's body goes to `gathered`, then to answer_gathered */
    char *gathered;      /* owned */
    size_t gathered_len, gathered_cap;
    ProxyOutcome outcome; /* set with `answered` */
    bool answered;       /* on_answered is due or done */
    bool in_answered;    /* alink is in Proxy.answered */
    DLink alink;
};

typedef struct CurlSock {
    LoopSource src;
    Proxy *p;
    int fd;         /* -1 once curl is done with it */
    struct CurlSock *next_dead;
} CurlSock;

struct Proxy {
    CURLM *multi;
    Loop *loop;
    unsigned timeout_s;
    const char *cacert; /* CURLOPT_CAINFO for https upstreams; NULL: the system's bundle */
    int64_t timer_ms; /* monotonic deadline of curl's timer, or -1 */
    Heap idle;        /* running calls by their inactivity deadline */
    DList calls; /* ProxyCall.link */
    size_t live; /* calls not done yet (started or waiting to start) */
    /* Sockets curl has let go of in this turn: events for them may still be in
     * the loop's current batch, so they are freed at the next tick. */
    CurlSock *dead;
    DList answered; /* ProxyCall.alink: answers to report outside curl callbacks */
    bool closing;   /* shutting down: no call starts any more */
    ProxyStats stats;
};

/* Buffers. */

/* Buffers are allocated on first use: false when that fails. */
static bool buf_ready(Buf *b)
{
    if (!b->data)
        b->data = malloc(PROXY_BUFFER);
    return b->data != NULL;
}

static size_t buf_room(const Buf *b) { return PROXY_BUFFER - b->len; }

static void buf_put(Buf *b, const char *p, size_t n)
{
    if (b->start + b->len + n > PROXY_BUFFER) {
        memmove(b->data, b->data + b->start, b->len);
        b->start = 0;
    }
    memcpy(b->data + b->start + b->len, p, n);
    b->len += n;
}

static size_t buf_take(Buf *b, char *out, size_t max)
{
    if (!b->data)
        return 0;
    size_t n = b->len < max ? b->len : max;
    memcpy(out, b->data + b->start, n);
    b->start += n;
    b->len -= n;
    if (b->len == 0)
        b->start = 0;
    return n;
}

static void answer_due(ProxyCall *c);

/* libcurl callbacks. */

/* Something moved: the inactivity deadline is checked lazily against this. */
static void touch(ProxyCall *c) { c->active_ms = clock_now().mono_ms; }

/* How many buffered body bytes may go now: all, unless the end is held back. */
static size_t sendable(const ProxyCall *c)
{
    size_t n = c->up.len;
    if (!c->hold_end || c->released || n == 0)
        return n;
    if (c->body_length >= 0) {
        uint64_t before_last = (uint64_t)c->body_length - 1;
        return c->sent >= before_last ? 0 : (size_t)(before_last - c->sent < n ? before_last - c->sent : n);
    }
    return n - 1; /* unknown length: the last buffered byte may be the last one */
}

static size_t on_read(char *out, size_t size, size_t nitems, void *ud)
{
    ProxyCall *c = ud;
    if (c->broken)
        return CURL_READFUNC_ABORT;
    size_t max = size * nitems, can = sendable(c);
    size_t n = buf_take(&c->up, out, can < max ? can : max);
    c->sent += n;
    if (n) {
        touch(c);
        if (c->upload_waiting) {
            c->upload_waiting = false;
            http_resume(c->req);
        }
        return n;
    }
    if (c->body_done && c->up.len == 0 && (!c->hold_end || c->released))
        return 0;
    c->read_paused = true;
    return CURL_READFUNC_PAUSE;
}

/* Appends to the gathered answer; false past PROXY_GATHER_MAX or out of memory. */
static bool gather(ProxyCall *c, const char *data, size_t n)
{
    if (c->gathered_len + n > PROXY_GATHER_MAX)
        return false;
    if (c->gathered_len + n > c->gathered_cap) {
        size_t cap = c->gathered_cap ? c->gathered_cap : 16384;
        while (cap < c->gathered_len + n)
            cap *= 2;
        char *g = realloc(c->gathered, cap + 1);
        if (!g)
            return false;
        c->gathered = g;
        c->gathered_cap = cap;
    }
    memcpy(c->gathered + c->gathered_len, data, n);
    c->gathered_len += n;
    c->gathered[c->gathered_len] = '\0';
    return true;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud)
{
    ProxyCall *c = ud;
    size_t n = size * nmemb;
    if (!c->req)
        return n; /* detached: nobody reads the answer */
    if (c->gathering) {
        touch(c);
        return gather(c, data, n) ? n : 0;
    }
    if (c->broken || !buf_ready(&c->down))
        return 0; /* aborts the transfer: 502 or a cut-off body */
    if (n > buf_room(&c->down)) {
        c->write_paused = true;
        return CURL_WRITEFUNC_PAUSE; /* curl offers the same bytes again later */
    }
    buf_put(&c->down, data, n);
    touch(c);
    if (c->reader_waiting) {
        c->reader_waiting = false;
        http_resume(c->req);
    }
    return n;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud)
{
    ProxyCall *c = ud;
    size_t n = size * nitems;
    if (c->broken)
        return 0;
    touch(c);
    if (c->headers_done)
        return n; /* trailers */
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        /* A new response (after a 1xx): forget earlier header lines. */
        curl_slist_free_all(c->resp_headers);
        c->resp_headers = NULL;
        return n;
    }
    size_t len = n;
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    if (len == 0) {
        long code = 0;
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200) {
            c->status = code;
            c->headers_done = true;
            answer_due(c);
            if (c->final_seen && c->req)
                http_resume(c->req);
        }
        return n;
    }
    HeadKept kept = httphead_keep_line(&c->resp_headers, line, len, HTTPHEAD_UPSTREAM_LIMITS);
    if (kept == HEAD_TOO_BIG)
        c->refused = HTTPHEAD_TOO_BIG;
    return kept == HEAD_KEPT ? n : 0; /* 0 aborts the transfer */
}

/* Queues the on_answered report: curl callbacks may not start other
 * transfers, which the report may do. */
static void answer_due(ProxyCall *c)
{
    if (c->answered || (c->result_fn && !c->done))
        return; /* an internal call reports once curl is done with it */
    c->answered = true;
    /* A refused connection or name sent nothing; any other failure may have
     * come after the whole request left. */
    bool unsent = !c->ever_started || c->result == CURLE_COULDNT_CONNECT || c->result == CURLE_COULDNT_RESOLVE_HOST ||
                  c->result == CURLE_COULDNT_RESOLVE_PROXY;
    c->outcome = c->headers_done ? PROXY_ANSWERED : unsent ? PROXY_NOT_SENT : PROXY_UNKNOWN;
    if (c->on_answered || c->result_fn) {
        dlist_append(&c->proxy->answered, &c->alink);
        c->in_answered = true;
    }
}

static void call_destroy(ProxyCall *c);

/* Runs the reports queued since the last time; a detached call ends here. */
static void report_answers(Proxy *p)
{
    while (p->answered.head) {
        ProxyCall *c = DLIST_ITEM(p->answered.head, ProxyCall, alink);
        dlist_remove(&p->answered, &c->alink);
        c->in_answered = false;
        if (c->result_fn) {
            /* An internal call: its whole answer is in once curl is done with it. */
            ProxyResult fn = c->result_fn;
            c->result_fn = NULL;
            fn(c->answered_ud, c->outcome == PROXY_ANSWERED ? c->status : 0, c->resp_headers);
            call_destroy(c);
            continue;
        }
        ProxyAnswered fn = c->on_answered;
        void *ud = c->answered_ud;
        ProxyOutcome outcome = c->outcome;
        c->on_answered = NULL;
        if (!c->req)
            call_destroy(c);
        fn(ud, outcome);
    }
}


/* The multi handle. */

static int curl_ready(LoopSource *src, uint32_t ev);

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    Proxy *p = userp;
    CurlSock *cs = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (cs) {
            loop_unwatch(p->loop, fd);
            curl_multi_assign(p->multi, fd, NULL);
            cs->fd = -1;
            cs->next_dead = p->dead;
            p->dead = cs;
        }
        return 0;
    }
    uint32_t events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs)
            return -1;
        cs->src.ready = curl_ready;
        cs->p = p;
        cs->fd = fd;
        if (!loop_watch(p->loop, fd, events, &cs->src)) {
            free(cs);
            return -1;
        }
        curl_multi_assign(p->multi, fd, cs);
        return 0;
    }
    return loop_rewatch(p->loop, fd, events, &cs->src) ? 0 : -1;
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    Proxy *p = userp;
    p->timer_ms = timeout_ms < 0 ? -1 : clock_now().mono_ms + timeout_ms;
    return 0;
}

static void finished(ProxyCall *c, CURLcode result)
{
    heap_remove(&c->proxy->idle, &c->idle);
    if (!c->done)
        c->proxy->live--;
    c->done = true;
    c->result = result;
    if (result != CURLE_OK && result != CURLE_ABORTED_BY_CALLBACK)
        c->proxy->stats.upstream_errors++;
    answer_due(c);
    if (!c->req)
        return; /* detached: report_answers frees it */
    if (c->gathering && result != CURLE_ABORTED_BY_CALLBACK) {
        c->gathering = false;
        c->answer_gathered(c->answer_ud, c->req, c->status, c->resp_headers, c->gathered ? c->gathered : "",
                           c->gathered_len, result == CURLE_OK);
        return;
    }
    /* Wake whichever side is waiting: it now sees the end. */
    if (c->upload_waiting) {
        c->upload_waiting = false;
        http_resume(c->req);
    }
    if (c->reader_waiting) {
        c->reader_waiting = false;
        http_resume(c->req);
    }
    if (c->final_seen && !c->queued)
        http_resume(c->req);
}

static void collect_done(Proxy *p)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(p->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        ProxyCall *c;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        finished(c, msg->data.result);
    }
}

/* The loop saw readiness on a socket of curl's. */
static int curl_ready(LoopSource *src, uint32_t ev)
{
    CurlSock *cs = CONTAINER_OF(src, CurlSock, src);
    Proxy *p = cs->p;
    if (cs->fd < 0)
        return 0; /* curl let go of it earlier in this batch */
    int flags = (ev & EPOLLIN ? CURL_CSELECT_IN : 0) | (ev & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                (ev & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
    int running;
    curl_multi_socket_action(p->multi, cs->fd, flags, &running);
    collect_done(p);
    report_answers(p);
    return 0;
}

static void free_dead(Proxy *p)
{
    while (p->dead) {
        CurlSock *next = p->dead->next_dead;
        free(p->dead);
        p->dead = next;
    }
}

Proxy *proxy_new(Loop *loop, unsigned timeout_s, const char *cacert)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return NULL;
    Proxy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->loop = loop;
    p->timeout_s = timeout_s;
    p->cacert = cacert;
    p->timer_ms = -1;
    heap_init(&p->idle);
    p->multi = curl_multi_init();
    if (!p->multi) {
        free(p);
        return NULL;
    }
    curl_multi_setopt(p->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(p->multi, CURLMOPT_SOCKETDATA, p);
    curl_multi_setopt(p->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(p->multi, CURLMOPT_TIMERDATA, p);
    return p;
}

void proxy_free(Proxy *p)
{
    if (!p)
        return;
    while (p->calls.head)
        proxy_call_free(DLIST_ITEM(p->calls.head, ProxyCall, link));
    curl_multi_cleanup(p->multi);
    free_dead(p);
    heap_clear(&p->idle);
    free(p);
    curl_global_cleanup();
}


int64_t proxy_next_timeout_ms(const Proxy *p, const Now *now)
{
    int64_t t = p->timer_ms;
    const HeapEntry *idle = heap_peek(&p->idle);
    if (idle && (t < 0 || idle->deadline_ms < t))
        t = idle->deadline_ms;
    if (t < 0)
        return -1;
    return t > now->mono_ms ? t - now->mono_ms : 0;
}

/* Calls with nothing moving either way for timeout_s end as timed out. The
 * heap holds a deadline that may be stale (bytes moved since): such an entry
 * is pushed back to active_ms + timeout instead. */
static void expire_idle(Proxy *p, const Now *now)
{
    HeapEntry *e;
    int64_t limit_ms = (int64_t)p->timeout_s * 1000;
    while ((e = heap_peek(&p->idle)) && e->deadline_ms <= now->mono_ms) {
        ProxyCall *c = (ProxyCall *)e;
        if (c->active_ms + limit_ms > now->mono_ms) {
            heap_set(&p->idle, e, c->active_ms + limit_ms);
            continue;
        }
        curl_multi_remove_handle(p->multi, c->easy);
        c->started = false;
        finished(c, CURLE_OPERATION_TIMEDOUT);
    }
}

void proxy_tick(Proxy *p, const Now *now)
{
    free_dead(p);
    expire_idle(p, now);
    report_answers(p);
    if (p->timer_ms < 0 || p->timer_ms > now->mono_ms)
        return;
    p->timer_ms = -1;
    int running;
    curl_multi_socket_action(p->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    collect_done(p);
    report_answers(p);
}

void proxy_abort_all(Proxy *p)
{
    p->closing = true;
    /* The calls stay owned by their requests, which free them when MHD
     * completes the closed connections. */
    for (DLink *l = p->calls.head; l; l = l->next) {
        ProxyCall *c = DLIST_ITEM(l, ProxyCall, link);
        if (c->done)
            continue;
        if (c->started)
            curl_multi_remove_handle(p->multi, c->easy);
        c->started = false;
        finished(c, CURLE_ABORTED_BY_CALLBACK);
        if (c->req)
            http_close(c->req);
    }
    /* Detached calls end here; the reports tell their owners. */
    report_answers(p);
}

const ProxyStats *proxy_stats(const Proxy *p) { return &p->stats; }

/* Calls. */

/* Headers the call to the upstream has of its own: curl writes Host and
 * Content-Length from the URL and the body, and Expect is left out (libmicrohttpd
 * has already answered the client's). */
static const char *const SET_BY_CURL[] = {"Host", "Content-Length", "Expect", NULL};

/* Appends line to *list; false when out of memory (*list unchanged). */
static bool append_line(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = curl_slist_append(*list, line);
    if (l)
        *list = l;
    return l != NULL;
}

size_t proxy_calls(const Proxy *p) { return p->live; }

ProxyCall *proxy_call_new(Proxy *p, Request *req, const char *method, const char *url, bool has_body,
                          int64_t content_length, const ProxyHeaders *headers)
{
    ProxyCall *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    heap_entry_init(&c->idle);
    c->proxy = p;
    c->req = req;
    c->has_body = has_body;
    c->body_length = has_body ? content_length : 0;
    bool ok = !req || httphead_pass_request_kept(req->conn, SET_BY_CURL, headers->drop, headers->keep, &c->req_headers);
    for (const char *const *a = headers->add; a && *a && ok; a++)
        ok = append_line(&c->req_headers, *a);
    ok = ok && append_line(&c->req_headers, "Expect:");
    c->easy = curl_easy_init();
    /* libcurl verifies an https upstream's certificate and name by default;
     * --cacert only says which CAs to trust. */
    if (!ok || !c->easy || (p->cacert && curl_easy_setopt(c->easy, CURLOPT_CAINFO, p->cacert) != CURLE_OK)) {
        curl_slist_free_all(c->req_headers);
        curl_easy_cleanup(c->easy);
        free(c);
        return NULL;
    }
    CURL *e = c->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L); /* the guard vetted the path; curl must not rewrite it */
    curl_easy_setopt(e, CURLOPT_PRIVATE, c);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->req_headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, (long)p->timeout_s);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (has_body) {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, c);
        if (content_length >= 0)
            curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)content_length);
    }
    dlist_append(&p->calls, &c->link);
    p->live++;
    return c;
}

void proxy_call_start(ProxyCall *c)
{
    if (c->proxy->closing) {
        finished(c, CURLE_ABORTED_BY_CALLBACK);
        return;
    }
    if (curl_multi_add_handle(c->proxy->multi, c->easy) != CURLM_OK) {
        finished(c, CURLE_FAILED_INIT);
        return;
    }
    c->started = c->ever_started = true;
    c->proxy->stats.forwarded++;
    /* "Too slow" means no byte moved either way for timeout_s. */
    touch(c);
    if (!heap_set(&c->proxy->idle, &c->idle, c->active_ms + (int64_t)c->proxy->timeout_s * 1000)) {
        curl_multi_remove_handle(c->proxy->multi, c->easy);
        c->started = false;
        finished(c, CURLE_OUT_OF_MEMORY);
    }
}


ProxyCall *proxy_internal_new(Proxy *p, const char *method, const char *url, ProxyResult fn, void *ud)
{
    ProxyHeaders none = {NULL, NULL, NULL};
    ProxyCall *c = proxy_call_new(p, NULL, method, url, false, 0, &none);
    if (c) {
        c->result_fn = fn;
        c->answered_ud = ud;
    }
    return c;
}

bool proxy_call_configure(ProxyCall *c, ProxyConfigure fn, void *ud)
{
    struct curl_slist *before = c->req_headers;
    bool ok = fn(ud, c->easy, &c->req_headers);
    if (c->req_headers != before)
        curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->req_headers);
    return ok;
}

bool proxy_call_add_header(ProxyCall *c, const char *line)
{
    if (!append_line(&c->req_headers, line))
        return false;
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->req_headers);
    return true;
}

long proxy_call_status(const ProxyCall *c) { return c->headers_done ? c->status : 0; }

bool proxy_call_fixed_body(ProxyCall *c, const char *data, size_t len)
{
    if (len > PROXY_BUFFER || !buf_ready(&c->up))
        return false;
    buf_put(&c->up, data, len);
    c->body_done = true;
    return true;
}

void proxy_call_on_answer(ProxyCall *c, ProxyAnswerHead head, ProxyAnswerGathered gathered, void *ud)
{
    c->answer_head = head;
    c->answer_gathered = gathered;
    c->answer_ud = ud;
}

void proxy_call_hold_end(ProxyCall *c) { c->hold_end = true; }

void proxy_call_on_answered(ProxyCall *c, ProxyAnswered fn, void *ud)
{
    c->on_answered = fn;
    c->answered_ud = ud;
}

/* Flags first: the callbacks curl makes from inside curl_easy_pause may set
 * them again. When going on fails (out of memory for what curl held back),
 * the call must not go on with bytes missing: it is broken, and curl ends it
 * at its next callback, or the idle timeout does. */
static void unpause(ProxyCall *c)
{
    c->read_paused = false;
    c->write_paused = false;
    if (curl_easy_pause(c->easy, CURLPAUSE_CONT) != CURLE_OK)
        c->broken = true;
}

void proxy_call_release(ProxyCall *c)
{
    c->released = true;
    if (c->read_paused && c->started)
        unpause(c);
}

void proxy_call_abort(ProxyCall *c)
{
    if (c->done)
        return;
    c->on_answered = NULL; /* the caller knows */
    if (c->started)
        curl_multi_remove_handle(c->proxy->multi, c->easy);
    c->started = false;
    finished(c, CURLE_ABORTED_BY_CALLBACK);
}

void proxy_call_upload(ProxyCall *c, const char *data, size_t *size)
{
    if (c->done || c->req->response) {
        *size = 0; /* nobody will read it: drop it */
        return;
    }
    if (!buf_ready(&c->up)) {
        *size = 0;
        proxy_call_abort(c);
        c->result = CURLE_OUT_OF_MEMORY;
        return;
    }
    size_t n = *size < buf_room(&c->up) ? *size : buf_room(&c->up);
    buf_put(&c->up, data, n);
    touch(c);
    *size -= n;
    if (*size) {
        c->upload_waiting = true;
        http_suspend_watched(c->req);
    }
    if (c->read_paused && c->started)
        unpause(c);
}

static ssize_t read_body(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    ProxyCall *c = cls;
    size_t n = buf_take(&c->down, out, max);
    if (n) {
        touch(c);
        if (c->write_paused && buf_room(&c->down) >= PROXY_BUFFER / 2)
            unpause(c);
        return (ssize_t)n;
    }
    if (c->done)
        return c->result == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    /* Nothing yet: park the connection; on_write or finished resumes it. */
    c->reader_waiting = true;
    http_suspend_watched(c->req);
    return 0;
}

static void queue_upstream(ProxyCall *c)
{
    /* libmicrohttpd writes the head into what the request (complete now,
     * trailers included) left of the connection's memory, or closes the
     * connection without a word: 502 instead, and the upstream's connection
     * is closed, its answer cut. */
    if (httphead_answer_head_size(c->resp_headers) > http_answer_head_room(c->req)) {
        c->queued = true;
        if (c->done) {
            c->proxy->stats.upstream_errors++;
        } else {
            curl_multi_remove_handle(c->proxy->multi, c->easy);
            c->started = false;
            finished(c, CURLE_WRITE_ERROR); /* counted as an upstream error */
        }
        http_reply_error(c->req, ERR_BAD_GATEWAY, NULL, "upstream failed: %s", HTTPHEAD_NO_ROOM);
        return;
    }
    if (c->answer_head && c->answer_head(c->answer_ud, c->status, c->resp_headers) == PROXY_GATHER) {
        c->queued = true;
        c->gathering = true;
        /* What came before is the start of the body. */
        bool ok = !c->down.data || gather(c, c->down.data + c->down.start, c->down.len);
        c->down.len = c->down.start = 0;
        if (c->write_paused && c->started)
            unpause(c);
        if (!ok) {
            proxy_call_abort(c);
            c->gathering = false;
            c->answer_gathered(c->answer_ud, c->req, c->status, c->resp_headers, "", 0, false);
        } else if (c->done) {
            c->gathering = false;
            c->answer_gathered(c->answer_ud, c->req, c->status, c->resp_headers, c->gathered ? c->gathered : "",
                               c->gathered_len, c->result == CURLE_OK);
        } else {
            http_suspend_watched(c->req);
        }
        return;
    }
    curl_off_t cl = -1;
    curl_easy_getinfo(c->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        cl >= 0 ? (uint64_t)cl : MHD_SIZE_UNKNOWN, 32 * 1024, read_body, c, NULL);
    /* libmicrohttpd writes Content-Length from the size the response is made with. */
    static const char *const SET_BY_MHD[] = {MHD_HTTP_HEADER_CONTENT_LENGTH, NULL};
    if (resp && !httphead_pass_answer(c->resp_headers, SET_BY_MHD, resp)) {
        MHD_destroy_response(resp);
        resp = NULL; /* out of memory: the client's connection is closed */
    }
    c->queued = true;
    http_reply_passthrough(c->req, (unsigned)c->status, resp);
}

enum MHD_Result proxy_call_final(ProxyCall *c)
{
    Request *req = c->req;
    if (!c->body_done) {
        c->body_done = true;
        if (c->read_paused && c->started)
            unpause(c); /* lets curl see the end of the body */
    }
    if (c->headers_done) {
        queue_upstream(c);
    } else if (c->done) {
        bool timeout = c->result == CURLE_OPERATION_TIMEDOUT;
        c->queued = true;
        http_reply_error(req, timeout ? ERR_GATEWAY_TIMEOUT : ERR_BAD_GATEWAY, NULL, "upstream %s: %s",
                         timeout ? "timed out" : "failed", c->refused ? c->refused : curl_easy_strerror(c->result));
    } else {
        c->final_seen = true;
        http_suspend_watched(req);
    }
    return MHD_YES;
}

bool proxy_call_detach(ProxyCall *c)
{
    /* The whole request is with curl and may reach the upstream: see it through. */
    bool may_apply = c->started && !c->done && !c->answered && c->on_answered && c->body_done &&
                     (!c->hold_end || c->released);
    if (!may_apply) {
        proxy_call_free(c);
        return false;
    }
    c->req = NULL;
    c->upload_waiting = c->reader_waiting = c->final_seen = false;
    if (c->write_paused)
        unpause(c); /* the answer is discarded from now on */
    return true;
}

void proxy_call_free(ProxyCall *c)
{
    if (c->in_answered)
        dlist_remove(&c->proxy->answered, &c->alink);
    call_destroy(c);
}

static void call_destroy(ProxyCall *c)
{
    Proxy *p = c->proxy;
    heap_remove(&p->idle, &c->idle);
    if (c->started)
        curl_multi_remove_handle(p->multi, c->easy);
    curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->req_headers);
    curl_slist_free_all(c->resp_headers);
    free(c->gathered);
    free(c->up.data);
    free(c->down.data);
    dlist_remove(&p->calls, &c->link);
    if (!c->done)
        p->live--;
    free(c);
}
