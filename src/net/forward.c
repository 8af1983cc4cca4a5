/* forward — a follower's request sent on to the leader; see include/leasegate/forward.h. */
#include "leasegate/forward.h"

#include <curl/curl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONNECT_TIMEOUT_MS 2000L

struct Forward {
    char *uri;  /* owned */
    char *body; /* owned; the request body so far */
    size_t len, cap;
    bool too_big;
    bool called;
};

/* What the leader answered: its end-to-end headers and body. */
typedef struct Answer {
    struct curl_slist *headers; /* "Name: value", owned */
    char *body;                 /* owned */
    size_t len;
    bool too_big, failed;
} Answer;

typedef struct Watch {
    struct MHD_Connection *conn;
    bool (*should_stop)(void *ud);
    void *ud;
    bool stopped;
} Watch;

Forward *forward_new(const char *uri)
{
    Forward *f = calloc(1, sizeof *f);
    if (f && !(f->uri = strdup(uri ? uri : "/"))) {
        free(f);
        return NULL;
    }
    return f;
}

void forward_free(Forward *f)
{
    if (!f)
        return;
    free(f->uri);
    free(f->body);
    free(f);
}

const char *forward_uri(const Forward *f) { return f->uri; }

bool forward_first_call(Forward *f)
{
    bool first = !f->called;
    f->called = true;
    return first;
}

bool forward_add_body(Forward *f, const char *data, size_t n)
{
    if (f->too_big || n > FORWARD_MAX_BODY - f->len) {
        f->too_big = true;
        return false;
    }
    if (f->len + n > f->cap) {
        size_t cap = f->cap ? f->cap : 4096;
        while (cap < f->len + n)
            cap *= 2;
        char *b = realloc(f->body, cap);
        if (!b) {
            f->too_big = true; /* answered as too large: nothing better to say */
            return false;
        }
        f->body = b;
        f->cap = cap;
    }
    memcpy(f->body + f->len, data, n);
    f->len += n;
    return true;
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
    char *line;
    if (asprintf(&line, "%s: %s", key, value) < 0) {
        c->failed = true;
        return MHD_NO;
    }
    struct curl_slist *l = curl_slist_append(c->list, line);
    free(line);
    if (!l) {
        c->failed = true;
        return MHD_NO;
    }
    c->list = l;
    return MHD_YES;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    Answer *a = ud;
    size_t len = size * n;
    if (len >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new answer (after 100 Continue): start over */
        curl_slist_free_all(a->headers);
        a->headers = NULL;
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon || hop_by_hop(p, (size_t)(colon - p)))
        return len;
    size_t end = len;
    while (end > 0 && (p[end - 1] == '\r' || p[end - 1] == '\n'))
        end--;
    char *line = strndup(p, end);
    struct curl_slist *l = line ? curl_slist_append(a->headers, line) : NULL;
    free(line);
    if (!l) {
        a->failed = true;
        return 0;
    }
    a->headers = l;
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    Answer *a = ud;
    size_t add = size * n;
    if (add > FORWARD_MAX_REPLY - a->len) {
        a->too_big = true;
        return 0;
    }
    char *b = realloc(a->body, a->len + add + 1);
    if (!b) {
        a->failed = true;
        return 0;
    }
    memcpy(b + a->len, p, add);
    a->body = b;
    a->len += add;
    return add;
}

/* Called by libcurl at least once a second: gives up when the standby says
 * so or the client has hung up (its waiter on the leader must go too). */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    Watch *w = ud;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(w->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) {
        struct pollfd p = {ci->connect_fd, POLLRDHUP, 0};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            w->stopped = true;
            return 1;
        }
    }
    if (w->should_stop(w->ud)) {
        w->stopped = true;
        return 1;
    }
    return 0;
}

static struct MHD_Response *too_large(unsigned *status)
{
    static const char TEXT[] = "{\"error\":\"payload_too_large\",\"message\":\"a request forwarded to the leader "
                               "may carry at most 64 MiB\"}";
    struct MHD_Response *r = MHD_create_response_from_buffer(sizeof TEXT - 1, (void *)TEXT, MHD_RESPMEM_PERSISTENT);
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    *status = MHD_HTTP_CONTENT_TOO_LARGE;
    return r;
}

struct MHD_Response *forward_run(Forward *f, struct MHD_Connection *conn, const char *method, const char *leader_url,
                                 bool (*should_stop)(void *ud), void *ud, unsigned *status, const char **why)
{
    *why = "out of memory";
    if (f->too_big)
        return too_large(status);
    size_t base = strlen(leader_url);
    while (base && leader_url[base - 1] == '/')
        base--;
    char *url = NULL;
    if (asprintf(&url, "%.*s%s", (int)base, leader_url, f->uri) < 0)
        return NULL;
    HeaderCopy hc = {NULL, false};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, copy_request_header, &hc);
    struct curl_slist *l = hc.failed ? NULL : curl_slist_append(hc.list, FORWARD_HEADER ": 1");
    if (l)
        hc.list = l;
    l = l ? curl_slist_append(hc.list, "Expect:") : NULL; /* no 100-continue round trip */
    if (l)
        hc.list = l;
    CURL *e = curl_easy_init();
    Answer a = {0};
    Watch w = {conn, should_stop, ud, false};
    struct MHD_Response *resp = NULL;
    if (!e || !l)
        goto out;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hc.list);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, &w);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (f->len || !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH")) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, f->body ? f->body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f->len);
    }
    CURLcode cc = curl_easy_perform(e);
    if (cc != CURLE_OK || a.failed) {
        *why = w.stopped ? "the leader changed, or the client or this gateway went away"
               : a.too_big ? "the leader's answer was over 64 MiB"
                           : curl_easy_strerror(cc);
        goto out;
    }
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    resp = a.len ? MHD_create_response_from_buffer(a.len, a.body, MHD_RESPMEM_MUST_FREE)
                 : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        goto out;
    if (a.len)
        a.body = NULL; /* the response owns it now */
    for (struct curl_slist *h = a.headers; h; h = h->next) {
        char *colon = strchr(h->data, ':');
        if (!colon)
            continue;
        *colon = '\0';
        const char *value = colon + 1;
        while (*value == ' ' || *value == '\t')
            value++;
        MHD_add_response_header(resp, h->data, value);
    }
    *status = (unsigned)code;
out:
    curl_easy_cleanup(e);
    curl_slist_free_all(hc.list);
    curl_slist_free_all(a.headers);
    free(a.body);
    free(url);
    return resp;
}
