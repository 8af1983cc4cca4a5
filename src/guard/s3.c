/* s3 — credentials and the precondition probe of S3 routes; see s3.h. */
#include "guard/s3.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"

struct S3 {
    const Config *cfg;
    pthread_mutex_t mu; /* guards creds, stop */
    pthread_cond_t cv;
    AwsCreds creds;
    bool stop;
    bool thread_started;
    pthread_t thread;
    atomic_bool ok[CONFIG_MAX_GUARDS]; /* the probe's last word per route */
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
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (size_t i = 0; i < CONFIG_MAX_GUARDS; i++)
        atomic_init(&s->ok[i], false);
    return s;
}

void s3_free(S3 *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
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
        return awscred_load_file(cfg->s3_credentials, profile && *profile ? profile : "default", out, err, errlen);
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
    if (!s->cfg->s3_credentials || !any_s3(s->cfg))
        return true;
    AwsCreds fresh;
    if (!load_creds(s->cfg, &fresh, err, errlen))
        return false;
    pthread_mutex_lock(&s->mu);
    s->creds = fresh;
    pthread_mutex_unlock(&s->mu);
    explicit_bzero(&fresh, sizeof fresh);
    return true;
}

bool s3_route_ok(const S3 *s, size_t route) { return route < CONFIG_MAX_GUARDS && atomic_load(&s->ok[route]); }

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
static size_t encode_path(char *out, const char *in)
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

char *s3_object_url(const GuardRoute *route, const char *rest)
{
    while (*rest == '/')
        rest++;
    size_t cap = strlen(route->endpoint) + strlen(route->bucket) + 3 * (strlen(route->keyprefix) + strlen(rest)) + 8;
    char *url = malloc(cap);
    if (!url)
        return NULL;
    size_t n = (size_t)snprintf(url, cap, "%s/%s/", route->endpoint, route->bucket);
    if (route->keyprefix[0]) {
        n += encode_path(url + n, route->keyprefix);
        url[n++] = '/';
    }
    encode_path(url + n, rest);
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

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* One signed PUT of the probe key with one precondition: its status, or 0
 * with the transport's error in err. */
static long probe_put(const GuardRoute *route, const AwsCreds *creds, const char *url, const char *cond,
                      unsigned timeout_s, const char *cacert, char *err, size_t errlen)
{
    CURL *e = curl_easy_init();
    struct curl_slist *headers = NULL;
    static const char BODY[] = "leasegate checks that this store honours If-Match and If-None-Match\n";
    ProbeBody body = {BODY, sizeof BODY - 1, 0};
    long status = 0;
    if (!e || !append(&headers, cond) || !s3_sign_easy(e, route, creds, &headers) ||
        (cacert && curl_easy_setopt(e, CURLOPT_CAINFO, cacert) != CURLE_OK)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, probe_read);
    curl_easy_setopt(e, CURLOPT_READDATA, &body);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body.len);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, (long)timeout_s);
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

/* Does the route's store honour preconditions? False with the reason in err. */
static bool probe(const Config *cfg, const GuardRoute *route, const AwsCreds *creds, char *err, size_t errlen)
{
    char *url = s3_object_url(route, S3_PROBE_KEY);
    if (!url) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    char why[256] = "";
    bool ok = false;
    long st = probe_put(route, creds, url, "If-None-Match: *", cfg->guard_timeout_s, cfg->cacert, why, sizeof why);
    if (st != 200 && st != 201 && st != 412) {
        snprintf(err, errlen, "creating the probe key %s with If-None-Match: * got %s%ld%s", url, st ? "HTTP " : "",
                 st, st ? "" : why);
        goto out;
    }
    static const struct {
        const char *cond, *name;
    } MUST_FAIL[] = {{"If-Match: \"leasegate-never-an-etag\"", "a wrong If-Match"},
                     {"If-None-Match: *", "If-None-Match: * on a key that exists"}};
    for (size_t i = 0; i < sizeof MUST_FAIL / sizeof MUST_FAIL[0]; i++) {
        st = probe_put(route, creds, url, MUST_FAIL[i].cond, cfg->guard_timeout_s, cfg->cacert, why, sizeof why);
        if (st != 412) {
            if (st >= 200 && st < 300)
                snprintf(err, errlen,
                         "the store wrote %s despite %s (HTTP %ld): it ignores preconditions, and a stale write "
                         "could land",
                         url, MUST_FAIL[i].name, st);
            else
                snprintf(err, errlen, "a PUT of %s with %s got %s%ld%s, not 412", url, MUST_FAIL[i].name,
                         st ? "HTTP " : "", st, st ? "" : why);
            goto out;
        }
    }
    ok = true;
out:
    free(url);
    return ok;
}

static bool probe_route(S3 *s, size_t i, char *err, size_t errlen)
{
    AwsCreds creds;
    s3_credentials(s, &creds);
    bool ok = probe(s->cfg, &s->cfg->guards[i], &creds, err, errlen);
    explicit_bzero(&creds, sizeof creds);
    bool was = atomic_exchange(&s->ok[i], ok);
    if (was != ok)
        log_line(ok ? LEVEL_INFO : LEVEL_WARN, "guard %s: %s%s", s->cfg->guards[i].prefix,
                 ok ? "the store honours preconditions again: writes go through" : "writes refused (502): ",
                 ok ? "" : err);
    return ok;
}

static void *prober(void *ud)
{
    S3 *s = ud;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)s->cfg->s3_probe_interval_s;
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
            ;
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->mu);
        for (size_t i = 0; i < s->cfg->nguards; i++) {
            char err[512];
            if (s->cfg->guards[i].kind == GUARD_S3)
                probe_route(s, i, err, sizeof err);
        }
        pthread_mutex_lock(&s->mu);
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
    for (size_t i = 0; i < s->cfg->nguards; i++) {
        const GuardRoute *r = &s->cfg->guards[i];
        if (r->kind != GUARD_S3)
            continue;
        if (!probe_route(s, i, why, sizeof why)) {
            snprintf(err, errlen, "--guard %s=%s: %s", r->prefix, r->upstream, why);
            return false;
        }
        log_line(LEVEL_INFO, "guard %s -> %s/%s/%s (region %s): the store honours preconditions", r->prefix,
                 r->endpoint, r->bucket, r->keyprefix, r->region);
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_destroy(&s->cv);
    pthread_cond_init(&s->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&s->thread, NULL, prober, s) != 0) {
        snprintf(err, errlen, "cannot start the S3 probe thread");
        return false;
    }
    s->thread_started = true;
    return true;
}
