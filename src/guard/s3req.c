/* s3req — requests through S3 routes; see s3req.h. */
#include "guard/s3req.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/http.h"

#define FENCE_META "x-amz-meta-fencing-token"

struct S3Write {
    S3 *s3;
    Proxy *proxy;
    Request *req;
    const GuardRoute *route;
    GuardWrite *gw;    /* while its prepare step runs */
    ProxyCall *head;   /* the HEAD in flight, or NULL */
    bool rechecking;   /* the store refused the precondition: reading the object again */
    uint64_t token;
    char *url;         /* owned */
    char lock[NAME_MAX_BYTES + 1];
};

/* Is `name` (len bytes) one of `names`, case aside? */
static bool one_of(const char *const *names, const char *name, size_t len)
{
    for (const char *const *p = names; *p; p++)
        if (strlen(*p) == len && !strncasecmp(*p, name, len))
            return true;
    return false;
}

static bool user_metadata(const char *name, size_t len)
{
    static const char META[] = "x-amz-meta-";
    return len > sizeof META - 1 && !strncasecmp(name, META, sizeof META - 1) &&
           !(len == sizeof FENCE_META - 1 && !strncasecmp(name, FENCE_META, len));
}

bool s3req_keep_read(const char *name, size_t len)
{
    static const char *const READ[] = {"Range", "If-Match", "If-None-Match", "If-Modified-Since",
                                       "If-Unmodified-Since", "Accept", NULL};
    return one_of(READ, name, len);
}

bool s3req_keep_write(const char *name, size_t len)
{
    static const char *const WRITE[] = {"Content-Type",     "Content-MD5",      "Cache-Control", "Content-Disposition",
                                        "Content-Encoding", "Content-Language", "Expires",       NULL};
    return one_of(WRITE, name, len) || user_metadata(name, len);
}

typedef struct AmzCheck {
    const char *bad; /* the first header the route refuses, or NULL */
} AmzCheck;

static enum MHD_Result find_amz(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    (void)value;
    AmzCheck *c = cls;
    size_t len = strlen(key);
    if (len >= 6 && !strncasecmp(key, "x-amz-", 6) && !user_metadata(key, len) &&
        !(len == sizeof FENCE_META - 1 && !strncasecmp(key, FENCE_META, len))) {
        c->bad = key;
        return MHD_NO;
    }
    return MHD_YES;
}

static void bad(Request *req, const char *field, const char *fmt, const char *detail)
{
    req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
    http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", field), fmt, detail);
}

bool s3req_acceptable(Request *req, const GuardRoute *route, const char *method, bool keys)
{
    const char *rest = req->raw_uri + strlen(route->prefix);
    while (*rest == '/')
        rest++;
    if (strchr(rest, '?')) {
        bad(req, "path", "an s3:// route takes no query string (%s): objects are read and written whole", req->raw_uri);
        return false;
    }
    if (!strcmp(rest, S3_PROBE_KEY)) {
        bad(req, "path", "%s is the key the guard checks the store with, not for clients", S3_PROBE_KEY);
        return false;
    }
    if (http_header(req, "x-amz-copy-source")) {
        bad(req, "x-amz-copy-source", "%s is not forwarded: a copy source could be any object the gateway may read",
            "x-amz-copy-source");
        return false;
    }
    if (!keys && http_header(req, "Authorization")) {
        bad(req, "Authorization", "%s", "the guard signs S3 requests itself: send your lease, not S3 credentials");
        return false;
    }
    AmzCheck amz = {NULL};
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, find_amz, &amz);
    if (amz.bad) {
        bad(req, amz.bad, "header %s is not forwarded to S3 (the guard signs what it sends; only user metadata, "
                          "x-amz-meta-*, passes)",
            amz.bad);
        return false;
    }
    if (strcmp(method, "PUT") != 0)
        return true;
    static const char *const CONDITIONS[] = {"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"};
    for (size_t i = 0; i < sizeof CONDITIONS / sizeof CONDITIONS[0]; i++) {
        if (http_header(req, CONDITIONS[i])) {
            bad(req, CONDITIONS[i], "a PUT through the guard may not carry %s: the guard sets the precondition "
                                    "itself, from the object's fence",
                CONDITIONS[i]);
            return false;
        }
    }
    if (!http_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_LENGTH_REQUIRED, json_pack("{s:s}", "field", "Content-Length"),
                         "a PUT to S3 needs Content-Length (S3 takes no chunked upload without signing each chunk)");
        return false;
    }
    return true;
}

bool s3req_sign(void *ud, void *curl_easy, struct curl_slist **headers)
{
    S3Sign *sign = ud;
    AwsCreds creds;
    s3_credentials(sign->s3, &creds);
    bool ok = s3_sign_easy(curl_easy, sign->route, &creds, headers);
    explicit_bzero(&creds, sizeof creds);
    return ok;
}

S3Write *s3req_write_new(S3 *s3, Proxy *proxy, Request *req, const GuardRoute *route, const char *url,
                         const char *lock, uint64_t token)
{
    S3Write *w = calloc(1, sizeof *w);
    if (!w || !(w->url = strdup(url))) {
        free(w);
        return NULL;
    }
    w->s3 = s3;
    w->proxy = proxy;
    w->req = req;
    w->route = route;
    w->token = token;
    snprintf(w->lock, sizeof w->lock, "%s", lock);
    return w;
}

void s3req_write_free(S3Write *w)
{
    if (!w)
        return;
    if (w->head)
        proxy_call_free(w->head); /* its report never comes */
    free(w->url);
    free(w);
}

/* The value of header `name` among "Name: value" lines, into out; false when absent. */
static bool header_value(const struct curl_slist *lines, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    for (const struct curl_slist *l = lines; l; l = l->next) {
        if (strncasecmp(l->data, name, n) || l->data[n] != ':')
            continue;
        const char *v = l->data + n + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(out, outlen, "%s", v);
        return true;
    }
    return false;
}

/* The object's fence from its HEAD: 0 when it has none; false when it is
 * not a number (the object was written by something else than a token). */
static bool fence_of(const struct curl_slist *lines, uint64_t *fence)
{
    char v[32];
    *fence = 0;
    if (!header_value(lines, FENCE_META, v, sizeof v))
        return true;
    char *end;
    errno = 0;
    unsigned long long f = strtoull(v, &end, 10);
    if (errno || end == v || *end)
        return false;
    *fence = f;
    return true;
}

static void reply_store_failed(S3Write *w, long status, const char *when)
{
    if (status)
        http_reply_error(w->req, ERR_BAD_GATEWAY, json_pack("{s:s, s:I}", "lock", w->lock, "status", (json_int_t)status),
                         "the store answered %ld to the HEAD of %s %s", status, w->url, when);
    else
        http_reply_error(w->req, ERR_BAD_GATEWAY, json_pack("{s:s}", "lock", w->lock),
                         "the store could not be reached for the HEAD of %s %s", w->url, when);
}

static void reply_fence_above(S3Write *w, uint64_t fence)
{
    Server *s = w->req->srv;
    s->metrics.guard_rejected_stale++;
    s->metrics.guard_refused[GUARD_REFUSED_STALE]++;
    const Lock *l = locktab_get(s->locks, KIND_LOCK, w->lock);
    const Holder *first = l ? locktab_holder(l) : NULL;
    json_t *holder = first ? json_integer((json_int_t)first->token) : json_null();
    http_reply_error(w->req, ERR_STALE_TOKEN,
                     json_pack("{s:s, s:I, s:I, s:o, s:I, s:s}", "lock", w->lock, "token", (json_int_t)w->token,
                               "max_token", (json_int_t)fence, "holder_token", holder, "fence", (json_int_t)fence,
                               "reason", "store_fence"),
                     "the object %s was written with fencing-token %llu, above this write's token %llu: it may not "
                     "go through",
                     w->url, (unsigned long long)fence, (unsigned long long)w->token);
}

static bool start_head(S3Write *w, ProxyResult fn);

/* The HEAD before the PUT is in: the precondition, or a refusal. */
static void prepared(void *ud, long status, const struct curl_slist *headers)
{
    S3Write *w = ud;
    w->head = NULL; /* freed by the proxy after this */
    if (!guardq_preparing(w->gw))
        return; /* refused meanwhile */
    uint64_t fence;
    char etag[256], line[300];
    bool ok = false;
    if (status == 404) {
        ok = proxy_call_add_header(w->req->guard->call, "If-None-Match: *");
    } else if (status == 200 && header_value(headers, "ETag", etag, sizeof etag) && fence_of(headers, &fence)) {
        if (fence > w->token) {
            reply_fence_above(w, fence);
            guardq_prepared(w->gw, false);
            return;
        }
        snprintf(line, sizeof line, "If-Match: %s", etag);
        ok = proxy_call_add_header(w->req->guard->call, line);
    } else {
        reply_store_failed(w, status, status == 200 ? "before the write (its answer had no ETag, or a fencing-token "
                                                      "that is not a number)"
                                                    : "before the write");
        guardq_prepared(w->gw, false);
        return;
    }
    if (!ok)
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
    guardq_prepared(w->gw, ok);
}

static bool start_head(S3Write *w, ProxyResult fn)
{
    S3Sign sign = {w->s3, w->route};
    w->head = proxy_internal_new(w->proxy, "HEAD", w->url, fn, w);
    if (!w->head || !proxy_call_configure(w->head, s3req_sign, &sign)) {
        if (w->head)
            proxy_call_free(w->head);
        w->head = NULL;
        return false;
    }
    proxy_call_start(w->head);
    return true;
}

bool s3req_prepare(void *ud, GuardWrite *gw)
{
    S3Write *w = ud;
    w->gw = gw;
    if (!start_head(w, prepared)) {
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return false;
    }
    return true;
}

/* The object read again after the store refused the precondition. */
static void rechecked(void *ud, long status, const struct curl_slist *headers)
{
    S3Write *w = ud;
    w->head = NULL;
    uint64_t fence = 0;
    if ((status == 200 && fence_of(headers, &fence) && fence > w->token)) {
        reply_fence_above(w, fence);
        return;
    }
    if (status != 200 && status != 404) {
        reply_store_failed(w, status, "after it refused the write's precondition");
        return;
    }
    http_reply_error(w->req, ERR_WRITE_CONFLICT,
                     json_pack("{s:s, s:I, s:I}", "lock", w->lock, "token", (json_int_t)w->token, "fence",
                               (json_int_t)fence),
                     "the object %s changed between the guard's read and its write (another writer, not through "
                     "this gateway?); nothing was written: send the write again with the same lease",
                     w->url);
}

bool s3req_final(S3Write *w)
{
    if (w->rechecking) {
        http_suspend_watched(w->req); /* woken early by the finished call: go on waiting */
        return true;
    }
    long status = proxy_call_status(w->req->guard->call);
    if (status != 412 && status != 409)
        return false;
    w->rechecking = true;
    if (!start_head(w, rechecked)) {
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return true;
    }
    http_suspend_watched(w->req);
    return true;
}
