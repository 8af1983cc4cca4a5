/* s3 — credentials and the precondition probe of S3 routes; see s3.h. */
#include "guard/s3.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/log.h"
#include "guard/s3sign.h"
#include "guard/sigv4.h"

struct S3 {
    const Config *cfg;
    pthread_mutex_t mu; /* guards creds, reprobe, probed, first_left, detail */
    pthread_cond_t cv;  /* the probe threads wait on it; so does s3_open for the first round */
    AwsCreds creds;
    atomic_bool stop;   /* read by a probe's transfer too, which it cuts short */
    bool reprobe[CONFIG_MAX_GUARDS]; /* probe the route now (SIGHUP) */
    bool probed[CONFIG_MAX_GUARDS];  /* the route has been probed once */
    size_t first_left;  /* S3 routes not probed once yet */
    size_t nthreads;
    /* One probe thread per S3 route: a store that takes --guard-timeout to
     * fail holds up no other route's probe. */
    struct ProbeThread {
        S3 *s;
        size_t route;
        pthread_t thread;
    } threads[CONFIG_MAX_GUARDS];
    atomic_int state[CONFIG_MAX_GUARDS]; /* S3RouteState: the probe's last word per route */
    atomic_bool mpu_if_match[CONFIG_MAX_GUARDS]; /* the store honours If-Match on CompleteMultipartUpload */
    atomic_bool copy_if_match[CONFIG_MAX_GUARDS]; /* ... and If-Match, If-None-Match on CopyObject */
    char detail[CONFIG_MAX_GUARDS][256]; /* why, for /healthz: never the store's URL */
};

static bool any_s3(const Config *cfg)
{
    for (size_t i = 0; i < cfg->nguards; i++)
        if (cfg->guards[i].kind == GUARD_S3)
            return true;
    return false;
}

S3 *s3_new(const Config *cfg)
{
    S3 *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = cfg;
    atomic_init(&s->stop, false);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (size_t i = 0; i < CONFIG_MAX_GUARDS; i++) {
        atomic_init(&s->state[i], S3_ROUTE_CLOSED);
        atomic_init(&s->mpu_if_match[i], false);
        atomic_init(&s->copy_if_match[i], false);
        snprintf(s->detail[i], sizeof s->detail[i], "not probed yet");
    }
    return s;
}

void s3_free(S3 *s)
{
    if (!s)
        return;
    if (s->nthreads) {
        pthread_mutex_lock(&s->mu);
        atomic_store(&s->stop, true); /* a probe's transfer in flight ends within a second */
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        for (size_t i = 0; i < s->nthreads; i++)
            pthread_join(s->threads[i].thread, NULL);
    }
    explicit_bzero(&s->creds, sizeof s->creds);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static bool load_creds(const Config *cfg, AwsCreds *out, char *err, size_t errlen)
{
    if (cfg->s3_credentials) {
        const char *profile = getenv("AWS_PROFILE");
        char warn[512];
        bool ok = awscred_load_file(cfg->s3_credentials, profile && *profile ? profile : "default", out, err, errlen,
                                    warn, sizeof warn);
        if (ok && warn[0])
            log_line(LEVEL_WARN, "--s3-credentials %s", warn);
        return ok;
    }
    return awscred_from_env(getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN"),
                            out, err, errlen);
}

void s3_credentials(S3 *s, AwsCreds *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->creds;
    pthread_mutex_unlock(&s->mu);
}

bool s3_reload(S3 *s, char *err, size_t errlen)
{
    if (!any_s3(s->cfg))
        return true;
    if (!s->cfg->s3_credentials) {
        s3_reprobe(s);
        return true;
    }
    AwsCreds fresh;
    if (!load_creds(s->cfg, &fresh, err, errlen))
        return false;
    pthread_mutex_lock(&s->mu);
    s->creds = fresh;
    pthread_mutex_unlock(&s->mu);
    explicit_bzero(&fresh, sizeof fresh);
    s3_reprobe(s);
    return true;
}

void s3_reprobe(S3 *s)
{
    if (!s->nthreads)
        return;
    for (size_t i = 0; i < s->cfg->nguards; i++)
        atomic_compare_exchange_strong(&s->state[i], &(int){S3_ROUTE_REFUSED}, S3_ROUTE_CLOSED);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < CONFIG_MAX_GUARDS; i++)
        s->reprobe[i] = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

S3RouteState s3_route_state(S3 *s, size_t route, char *detail, size_t detail_len)
{
    if (route >= CONFIG_MAX_GUARDS)
        return S3_ROUTE_CLOSED;
    if (detail_len) {
        pthread_mutex_lock(&s->mu);
        snprintf(detail, detail_len, "%s", s->detail[route]);
        pthread_mutex_unlock(&s->mu);
    }
    return (S3RouteState)atomic_load(&s->state[route]);
}

bool s3_route_mpu_if_match(const S3 *s, size_t route)
{
    return route < CONFIG_MAX_GUARDS && atomic_load(&s->mpu_if_match[route]);
}

bool s3_route_copy_if_match(const S3 *s, size_t route)
{
    return route < CONFIG_MAX_GUARDS && atomic_load(&s->copy_if_match[route]);
}

unsigned s3_retry_s(const S3 *s) { return s->cfg->s3_probe_interval_s < S3_RETRY_S ? s->cfg->s3_probe_interval_s : S3_RETRY_S; }

/* Appends line to *list; false when out of memory. */
static bool append(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = curl_slist_append(*list, line);
    if (l)
        *list = l;
    return l != NULL;
}

/* Takes the "Name:" lines (libcurl's "do not send Name") out of *headers:
 * libcurl 7.88 lists such a header among the signed ones although it does not
 * send it, and the store then finds the signature wrong. */
static void drop_removals(struct curl_slist **headers)
{
    for (struct curl_slist **l = headers; *l;) {
        const char *colon = strchr((*l)->data, ':');
        if (colon && colon[1] == '\0') {
            struct curl_slist *gone = *l;
            *l = gone->next;
            gone->next = NULL;
            curl_slist_free_all(gone);
        } else {
            l = &(*l)->next;
        }
    }
}

bool s3_sign_easy(void *curl_easy, const GuardRoute *route, const AwsCreds *creds, struct curl_slist **headers)
{
    CURL *e = curl_easy;
    drop_removals(headers);
    char provider[128];
    snprintf(provider, sizeof provider, "aws:amz:%s:s3", route->region);
    if (curl_easy_setopt(e, CURLOPT_AWS_SIGV4, provider) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_USERNAME, creds->access_key) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PASSWORD, creds->secret_key) != CURLE_OK)
        return false;
    if (!append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD"))
        return false;
    if (creds->session_token[0]) {
        char line[sizeof creds->session_token + 32];
        snprintf(line, sizeof line, "x-amz-security-token: %s", creds->session_token);
        if (!append(headers, line))
            return false;
    }
    return true;
}

static bool unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

static int hexval(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Appends `in` to out as SigV4 wants a path: every byte but the unreserved
 * ones and '/' as %XX (upper case), after decoding the %XX already there. */
size_t s3_encode_path(char *out, const char *in)
{
    static const char HEX[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const char *p = in; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '%' && hexval((unsigned char)p[1]) >= 0 && hexval((unsigned char)p[2]) >= 0) {
            c = (unsigned char)(hexval((unsigned char)p[1]) * 16 + hexval((unsigned char)p[2]));
            p += 2;
        }
        if (unreserved(c) || c == '/') {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = HEX[c >> 4];
            out[n++] = HEX[c & 15];
        }
    }
    out[n] = '\0';
    return n;
}

char *s3_object_path(const GuardRoute *route, const char *rest)
{
    while (*rest == '/')
        rest++;
    size_t plen = strcspn(rest, "?"); /* the query is the caller's to add */
    size_t cap = strlen(route->bucket) + 3 * (strlen(route->keyprefix) + plen) + 8;
    char *out = malloc(cap);
    char *path = malloc(plen + 1);
    if (!out || !path) {
        free(out);
        free(path);
        return NULL;
    }
    memcpy(path, rest, plen);
    path[plen] = '\0';
    size_t n = (size_t)snprintf(out, cap, "/%s/", route->bucket);
    if (route->keyprefix[0]) {
        n += s3_encode_path(out + n, route->keyprefix);
        out[n++] = '/';
    }
    s3_encode_path(out + n, path);
    free(path);
    return out;
}

char *s3_object_url(const GuardRoute *route, const char *rest)
{
    char *path = s3_object_path(route, rest);
    char *url = NULL;
    if (path && asprintf(&url, "%s%s", route->endpoint, path) < 0)
        url = NULL;
    free(path);
    return url;
}

/* The probe ---------------------------------------------------------------- */

typedef struct ProbeBody {
    const char *data;
    size_t len, off;
} ProbeBody;

static size_t probe_read(char *out, size_t size, size_t nitems, void *ud)
{
    ProbeBody *b = ud;
    size_t n = b->len - b->off < size * nitems ? b->len - b->off : size * nitems;
    memcpy(out, b->data + b->off, n);
    b->off += n;
    return n;
}

/* What a probe request brings back: the answer's body (cut to its buffer)
 * and its ETag. */
typedef struct ProbeAnswer {
    char body[4096];
    size_t len;
    char etag[256];
} ProbeAnswer;

static size_t keep_body(char *p, size_t size, size_t n, void *ud)
{
    ProbeAnswer *a = ud;
    size_t take = size * n;
    if (a && a->len + take < sizeof a->body) {
        memcpy(a->body + a->len, p, take);
        a->len += take;
        a->body[a->len] = '\0';
    }
    return size * n;
}

static size_t keep_etag(char *p, size_t size, size_t n, void *ud)
{
    ProbeAnswer *a = ud;
    size_t len = size * n;
    if (a && len > 5 && !strncasecmp(p, "ETag:", 5)) {
        const char *v = p + 5;
        size_t vl = len - 5;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        snprintf(a->etag, sizeof a->etag, "%.*s", (int)vl, v);
    }
    return len;
}

/* libcurl's progress callback: a nonzero answer ends the transfer (the
 * server is stopping). */
static int stop_asked(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return atomic_load((const atomic_bool *)ud) ? 1 : 0;
}

/* Appends each of the '\n'-separated lines of `lines`; false when out of memory. */
static bool append_lines(struct curl_slist **list, const char *lines)
{
    char line[1200];
    for (const char *p = lines; *p;) {
        size_t n = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)n, p);
        if (!append(list, line))
            return false;
        p += n;
        if (*p == '\n')
            p++;
    }
    return true;
}

/* One signed request of the probe (method, url, header lines separated by
 * '\n' or NULL, a body or NULL): its status, or 0 with the transport's error in err.
 * It ends within a second once *stop is set. */
static long probe_request(const atomic_bool *stop, const GuardRoute *route, const AwsCreds *creds, const char *method, const char *url,
                          const char *cond, const char *data, unsigned timeout_s, const char *cacert, char *err,
                          size_t errlen, ProbeAnswer *answer)
{
    CURL *e = curl_easy_init();
    struct curl_slist *headers = NULL;
    ProbeBody body = {data ? data : "", data ? strlen(data) : 0, 0};
    long status = 0;
    if (answer)
        memset(answer, 0, sizeof *answer);
    /* A copy is signed by s3sign (libcurl 7.88 sorts x-amz-copy-source-if-match
     * before x-amz-copy-source: s3sign.h), anything else by libcurl. */
    bool copy = cond && strstr(cond, "x-amz-copy-source:");
    if (!e || (cond && !append_lines(&headers, cond)) ||
        !(copy ? s3sign_lines(route, creds, method, url, time(NULL), &headers)
               : s3_sign_easy(e, route, creds, &headers)) ||
        (cacert && curl_easy_setopt(e, CURLOPT_CAINFO, cacert) != CURLE_OK)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (!strcmp(method, "PUT") || data) {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, probe_read);
        curl_easy_setopt(e, CURLOPT_READDATA, &body);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body.len);
    }
    if (strcmp(method, "PUT") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, answer);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, keep_etag);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, answer);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, (long)timeout_s);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, stop_asked);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, (void *)stop);
    CURLcode rc = curl_easy_perform(e);
    if (rc != CURLE_OK)
        snprintf(err, errlen, "%s", curl_easy_strerror(rc));
    else
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
out:
    curl_slist_free_all(headers);
    curl_easy_cleanup(e);
    return status;
}

static long probe_put(const atomic_bool *stop, const GuardRoute *route, const AwsCreds *creds, const char *url, const char *cond,
                      unsigned timeout_s, const char *cacert, char *err, size_t errlen)
{
    static const char BODY[] = "leasegate checks that this store honours If-Match and If-None-Match\n";
    return probe_request(stop, route, creds, "PUT", url, cond, BODY, timeout_s, cacert, err, errlen, NULL);
}

/* Does the store honour If-Match on CompleteMultipartUpload? An upload of
 * the probe key completed with a wrong If-Match must get 412 (S3 may say
 * so in a 200's body). False when it does not, or multipart fails. */
static bool probe_multipart(const atomic_bool *stop, const Config *cfg, const GuardRoute *route, const AwsCreds *creds, const char *url)
{
    char err[256], u[2048], id[512] = "";
    ProbeAnswer a;
    snprintf(u, sizeof u, "%s?uploads=", url);
    if (probe_request(stop, route, creds, "POST", u, NULL, NULL, cfg->guard_timeout_s, cfg->cacert, err, sizeof err, &a) !=
        200)
        return false;
    const char *s = strstr(a.body, "<UploadId>"), *e = s ? strstr(s, "</UploadId>") : NULL;
    if (!s || !e || (size_t)(e - s - 10) >= sizeof id)
        return false;
    snprintf(id, sizeof id, "%.*s", (int)(e - s - 10), s + 10);
    char enc[3 * sizeof id]; /* encoded as SigV4 canonicalizes it: sigv4.h */
    sigv4_encode(enc, id, strlen(id));
    snprintf(u, sizeof u, "%s?partNumber=1&uploadId=%s", url, enc);
    bool honoured = false;
    if (probe_request(stop, route, creds, "PUT", u, NULL, "p", cfg->guard_timeout_s, cfg->cacert, err, sizeof err, &a) ==
            200 &&
        a.etag[0]) {
        char done[1024];
        snprintf(done, sizeof done,
                 "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>%s</ETag></Part>"
                 "</CompleteMultipartUpload>",
                 a.etag);
        snprintf(u, sizeof u, "%s?uploadId=%s", url, enc);
        long st = probe_request(stop, route, creds, "POST", u, "If-Match: \"leasegate-never-an-etag\"", done,
                                cfg->guard_timeout_s, cfg->cacert, err, sizeof err, &a);
        honoured = st == 412 || (st == 200 && strstr(a.body, "<Code>PreconditionFailed</Code>"));
    }
    snprintf(u, sizeof u, "%s?uploadId=%s", url, enc);
    probe_request(stop, route, creds, "DELETE", u, NULL, NULL, cfg->guard_timeout_s, cfg->cacert, err, sizeof err, NULL);
    return honoured;
}

/* Does the store honour If-Match and If-None-Match on CopyObject's
 * destination, and x-amz-copy-source-if-match on its source (the pin to the
 * version the guard read: without it a copy may take a tombstone written
 * meanwhile)? The probe key copied onto itself (metadata REPLACE, which S3
 * takes for a copy onto itself) with a wrong If-Match, with If-None-Match: *,
 * then with a wrong source If-Match, must get 412 each time (S3 may say so
 * in a 200's body). */
static bool probe_copy(const atomic_bool *stop, const Config *cfg, const GuardRoute *route, const AwsCreds *creds,
                       const char *url)
{
    char *source = s3_object_path(route, S3_PROBE_KEY);
    if (!source)
        return false;
    static const char *const MUST_FAIL[] = {"If-Match: \"leasegate-never-an-etag\"", "If-None-Match: *",
                                            "x-amz-copy-source-if-match: \"leasegate-never-an-etag\""};
    bool honoured = true;
    for (size_t i = 0; honoured && i < sizeof MUST_FAIL / sizeof MUST_FAIL[0]; i++) {
        char lines[1500], err[256];
        ProbeAnswer a;
        snprintf(lines, sizeof lines, "x-amz-copy-source: %s\nx-amz-metadata-directive: REPLACE\n%s", source,
                 MUST_FAIL[i]);
        long st = probe_request(stop, route, creds, "PUT", url, lines, "", cfg->guard_timeout_s, cfg->cacert, err,
                                sizeof err, &a);
        honoured = st == 412 || (st == 200 && strstr(a.body, "<Code>PreconditionFailed</Code>"));
    }
    free(source);
    return honoured;
}

/* What a probe found; why (for anyone: no URL) says more. */
typedef enum ProbeResult { PROBE_OK, PROBE_DOWN, PROBE_IGNORES } ProbeResult;

/* Does the route's store honour preconditions? */
static ProbeResult probe(const atomic_bool *stop, const Config *cfg, const GuardRoute *route, const AwsCreds *creds, char *why,
                         size_t whylen, bool *mpu_if_match, bool *copy_if_match)
{
    char *url = s3_object_url(route, S3_PROBE_KEY);
    if (!url) {
        snprintf(why, whylen, "out of memory");
        return PROBE_DOWN;
    }
    char err[256] = "";
    ProbeResult r = PROBE_DOWN;
    long st = probe_put(stop, route, creds, url, "If-None-Match: *", cfg->guard_timeout_s, cfg->cacert, err, sizeof err);
    if (st != 200 && st != 201 && st != 412) {
        if (st == 0)
            snprintf(why, whylen, "the store cannot be reached (%s)", err);
        else
            snprintf(why, whylen,
                     "the store answered HTTP %ld to the creation of the probe key (%s)", st,
                     st == 403 ? "wrong credentials, or no right to write the key prefix"
                     : st == 404 ? "no such bucket"
                                 : "not 200 or 412");
        goto out;
    }
    static const struct {
        const char *cond, *name;
    } MUST_FAIL[] = {{"If-Match: \"leasegate-never-an-etag\"", "a wrong If-Match"},
                     {"If-None-Match: *", "If-None-Match: * on a key that exists"}};
    for (size_t i = 0; i < sizeof MUST_FAIL / sizeof MUST_FAIL[0]; i++) {
        st = probe_put(stop, route, creds, url, MUST_FAIL[i].cond, cfg->guard_timeout_s, cfg->cacert, err, sizeof err);
        if (st == 412)
            continue;
        if (st >= 200 && st < 300) {
            snprintf(why, whylen,
                     "the store wrote the probe key despite %s (HTTP %ld): it ignores preconditions, and a stale "
                     "write could land",
                     MUST_FAIL[i].name, st);
            r = PROBE_IGNORES;
        } else if (st == 0) {
            snprintf(why, whylen, "the store cannot be reached (%s)", err);
        } else {
            snprintf(why, whylen, "a PUT of the probe key with %s got HTTP %ld, not 412", MUST_FAIL[i].name, st);
        }
        goto out;
    }
    snprintf(why, whylen, "the store honours preconditions");
    r = PROBE_OK;
    *mpu_if_match = probe_multipart(stop, cfg, route, creds, url);
    *copy_if_match = probe_copy(stop, cfg, route, creds, url);
    if (!*mpu_if_match || !*copy_if_match)
        snprintf(why, whylen, "the store honours preconditions, but not %s%s%s",
                 *mpu_if_match ? "" : "If-Match on CompleteMultipartUpload (a multipart upload may only create an object)",
                 !*mpu_if_match && !*copy_if_match ? ", nor " : "",
                 *copy_if_match ? "" : "x-amz-copy-source-if-match, or If-Match and If-None-Match on CopyObject (copies are refused)");
out:
    free(url);
    return r;
}

/* Probes route i and records what it found; says so on stderr when the
 * route's state changes (the first time too). */
static void probe_route(S3 *s, size_t i)
{
    const GuardRoute *r = &s->cfg->guards[i];
    AwsCreds creds;
    s3_credentials(s, &creds);
    char why[256];
    bool mpu = false, copy = false;
    ProbeResult res = probe(&s->stop, s->cfg, r, &creds, why, sizeof why, &mpu, &copy);
    explicit_bzero(&creds, sizeof creds);
    if (atomic_load(&s->stop))
        return; /* cut short by the stop: it found nothing */
    atomic_store(&s->mpu_if_match[i], mpu);
    atomic_store(&s->copy_if_match[i], copy);
    S3RouteState now = res == PROBE_OK ? S3_ROUTE_OPEN : res == PROBE_IGNORES ? S3_ROUTE_REFUSED : S3_ROUTE_CLOSED;
    pthread_mutex_lock(&s->mu);
    bool first = !s->probed[i];
    bool changed = strcmp(s->detail[i], why) != 0;
    snprintf(s->detail[i], sizeof s->detail[i], "%s", why);
    pthread_mutex_unlock(&s->mu);
    S3RouteState was = (S3RouteState)atomic_exchange(&s->state[i], now);
    if (!first && was == now && !changed)
        return;
    char where[1200];
    snprintf(where, sizeof where, "%s/%s/%s (region %s)", r->endpoint, r->bucket, r->keyprefix, r->region);
    if (now == S3_ROUTE_OPEN)
        log_line(LEVEL_INFO, "guard %s -> %s: %s: the route is open", r->prefix, where, why);
    else if (now == S3_ROUTE_REFUSED)
        log_line(LEVEL_ERROR,
                 "guard %s -> %s is closed for good: %s. No write goes through it until the store honours "
                 "them and leasegate is reloaded (SIGHUP) or restarted; reads still pass",
                 r->prefix, where, why);
    else
        log_line(LEVEL_WARN,
                 "guard %s -> %s is closed: %s. Writes get 503 and reads 502 until the store answers; "
                 "it is probed again every %u s",
                 r->prefix, where, why, s3_retry_s(s));
}

/* One route's probe thread: at start, then every --s3-probe-interval while
 * the route is open, every S3_RETRY_S while it is closed, never while it is
 * refused (until a reload asks), and at once when a reload asks. */
static void *prober(void *ud)
{
    const struct ProbeThread *t = ud;
    S3 *s = t->s;
    size_t i = t->route;
    pthread_mutex_lock(&s->mu);
    while (!atomic_load(&s->stop)) {
        s->reprobe[i] = false;
        pthread_mutex_unlock(&s->mu);
        /* A store that ignores preconditions is not asked again: only a reload does. */
        if ((S3RouteState)atomic_load(&s->state[i]) != S3_ROUTE_REFUSED)
            probe_route(s, i);
        S3RouteState st = (S3RouteState)atomic_load(&s->state[i]);
        struct timespec next;
        clock_gettime(CLOCK_MONOTONIC, &next);
        next.tv_sec += (time_t)(st == S3_ROUTE_CLOSED ? s3_retry_s(s) : s->cfg->s3_probe_interval_s);
        pthread_mutex_lock(&s->mu);
        if (!s->probed[i]) {
            s->probed[i] = true;
            s->first_left--;
            pthread_cond_broadcast(&s->cv);
        }
        while (!atomic_load(&s->stop) && !s->reprobe[i]) {
            if ((S3RouteState)atomic_load(&s->state[i]) == S3_ROUTE_REFUSED)
                pthread_cond_wait(&s->cv, &s->mu); /* until a reload or the stop */
            else if (pthread_cond_timedwait(&s->cv, &s->mu, &next) != 0)
                break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

bool s3_open(S3 *s, char *err, size_t errlen)
{
    if (!any_s3(s->cfg))
        return true;
    char why[512];
    if (!load_creds(s->cfg, &s->creds, why, sizeof why)) {
        snprintf(err, errlen, "s3:// routes: no credentials: %s", why);
        return false;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_destroy(&s->cv);
    pthread_cond_init(&s->cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->cfg->nguards; i++)
        s->first_left += s->cfg->guards[i].kind == GUARD_S3;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < s->cfg->nguards; i++) {
        if (s->cfg->guards[i].kind != GUARD_S3)
            continue;
        struct ProbeThread *t = &s->threads[s->nthreads];
        t->s = s;
        t->route = i;
        if (pthread_create(&t->thread, NULL, prober, t) != 0) {
            snprintf(err, errlen, "cannot start the S3 probe thread of route %s", s->cfg->guards[i].prefix);
            return false; /* s3_free stops the ones started */
        }
        s->nthreads++;
    }
    /* A store that answers at once opens its route before the first request;
     * one that does not never holds the lock service up longer than this. */
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += S3_FIRST_WAIT_S;
    pthread_mutex_lock(&s->mu);
    while (s->first_left && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
        ;
    pthread_mutex_unlock(&s->mu);
    return true;
}
