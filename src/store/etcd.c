/* etcd — the JSON gateway client; see include/leasegate/etcd.h. */
#include "leasegate/etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A dead member on a reachable machine refuses at once; one whose machine is
 * gone does not answer the SYN: this bounds the wait for it. */
#define CONNECT_TIMEOUT_MS 1000L
/* When every endpoint failed at once (refused, 5xx): the pause before the next round. */
#define ROUND_PAUSE_MS 100

struct EtcdClient {
    EtcdUrl url;
    CURL *curl;
    size_t current; /* the endpoint that answered last: tried first */
    long timeout_ms;
    long first_timeout_ms; /* etcd_client_retry: the first attempt's bound; 0: timeout_ms */
    long budget_ms;        /* etcd_client_retry: rounds go on until this has passed; 0: one round */
    bool (*cancelled)(void *ud);
    void *cancel_ud;
};

bool etcd_url_parse(const char *url, EtcdUrl *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    bool tls = !strncmp(url, "etcds://", 8);
    if (!tls && strncmp(url, "etcd://", 7) != 0) {
        snprintf(err, errlen, "--store: '%s' is not etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcds:// over TLS)", url);
        return false;
    }
    const char *hosts = url + (tls ? 8 : 7);
    const char *slash = strchr(hosts, '/');
    const char *prefix = slash ? slash + 1 : "";
    size_t plen = strlen(prefix);
    while (plen && prefix[plen - 1] == '/')
        plen--;
    if (!slash || plen == 0 || plen >= sizeof out->prefix) {
        snprintf(err, errlen, "--store: '%s' needs a key prefix of 1..%zu bytes after the hosts (etcd://HOST:PORT/PREFIX)",
                 url, sizeof out->prefix - 1);
        return false;
    }
    memcpy(out->prefix, prefix, plen);
    const char *p = hosts;
    while (p < slash) {
        const char *comma = memchr(p, ',', (size_t)(slash - p));
        const char *end = comma ? comma : slash;
        size_t len = (size_t)(end - p);
        const char *colon = memchr(p, ':', len);
        if (len == 0 || !colon || colon == p || colon + 1 == end || out->nendpoints == ETCD_MAX_ENDPOINTS ||
            len + sizeof "https://" > sizeof out->endpoints[0]) {
            snprintf(err, errlen, "--store: '%.*s' is not HOST:PORT (at most %d endpoints)", (int)len, p,
                     ETCD_MAX_ENDPOINTS);
            return false;
        }
        snprintf(out->endpoints[out->nendpoints++], sizeof out->endpoints[0], "%s://%.*s", tls ? "https" : "http",
                 (int)len, p);
        p = comma ? comma + 1 : slash;
    }
    if (out->nendpoints == 0) {
        snprintf(err, errlen, "--store: '%s' names no etcd endpoint", url);
        return false;
    }
    return true;
}

EtcdClient *etcd_client_new(const EtcdUrl *url, long timeout_ms)
{
    /* Once per process, before any thread uses libcurl; the guard's proxy
     * initialises it too, and the calls are counted. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return NULL;
    EtcdClient *c = calloc(1, sizeof *c);
    if (!c || !(c->curl = curl_easy_init())) {
        free(c);
        curl_global_cleanup();
        return NULL;
    }
    c->url = *url;
    c->timeout_ms = timeout_ms;
    return c;
}

void etcd_client_free(EtcdClient *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    free(c);
    curl_global_cleanup();
}

void etcd_client_cancel_when(EtcdClient *c, bool (*cancelled)(void *ud), void *ud)
{
    c->cancelled = cancelled;
    c->cancel_ud = ud;
}

typedef struct Buf {
    char *data;
    size_t len, cap;
    bool nomem;
} Buf;

/* etcd answers are small (a page of a range is bounded by its limit). */
static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    Buf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->nomem = true;
            return 0; /* aborts the transfer */
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    EtcdClient *c = ud;
    return c->cancelled && c->cancelled(c->cancel_ud) ? 1 : 0;
}

void etcd_client_retry(EtcdClient *c, long first_timeout_ms, long budget_ms)
{
    c->first_timeout_ms = first_timeout_ms;
    c->budget_ms = budget_ms;
}

static long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* One attempt on one endpoint, bounded by timeout_ms (0: none): 1 when the
 * next endpoint should be tried (*timed_out says whether for lack of an
 * answer in time), 0 on an answer (parsed into *resp), -1 on an error not
 * worth retrying. */
static int attempt(EtcdClient *c, const char *endpoint, const char *path, const char *text, long timeout_ms,
                   bool *timed_out, json_t **resp, char *err, size_t errlen)
{
    *timed_out = false;
    char target[512];
    snprintf(target, sizeof target, "%s%s", endpoint, path);
    Buf b = {0};
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!headers) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    CURL *h = c->curl;
    curl_easy_reset(h);
    /* libcurl verifies an https endpoint's certificate and name by default;
     * --cacert only says which CAs to trust. */
    if (c->url.cacert && curl_easy_setopt(h, CURLOPT_CAINFO, c->url.cacert) != CURLE_OK) {
        curl_slist_free_all(headers);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    curl_easy_setopt(h, CURLOPT_URL, target);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->cancelled) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    int result = -1;
    if (b.nomem) {
        snprintf(err, errlen, "out of memory reading etcd's answer");
    } else if (rc == CURLE_ABORTED_BY_CALLBACK) {
        snprintf(err, errlen, "cancelled");
    } else if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", endpoint, curl_easy_strerror(rc));
        *timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        result = 1;
    } else {
        json_error_t jerr;
        json_t *j = b.data ? json_loadb(b.data, b.len, 0, &jerr) : NULL;
        const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
        if (status == 200 && json_is_object(j)) {
            *resp = j;
            j = NULL;
            result = 0;
        } else {
            snprintf(err, errlen, "%s%s: HTTP %ld: %.200s", endpoint, path, status,
                     msg ? msg : b.data ? b.data : "(no body)");
            /* 5xx and 429 (etcd's "too many requests", refused before
             * the proposal): the next member may answer. Others are final. */
            result = status >= 500 || status == 429 ? 1 : -1;
        }
        json_decref(j);
    }
    free(b.data);
    return result;
}

int etcd_call(EtcdClient *c, const char *path, json_t *body, json_t **resp, char *err, size_t errlen)
{
    *resp = NULL;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 1;
    long start = mono_ms();
    long timeout = c->first_timeout_ms && c->timeout_ms ? c->first_timeout_ms : c->timeout_ms;
    size_t n = c->url.nendpoints, from = c->current;
    bool round_timed_out = false; /* some attempt of this round took its whole bound */
    for (size_t i = 0; rc == 1; i++) {
        long spent = mono_ms() - start;
        if (i >= n && (!c->budget_ms || spent >= c->budget_ms))
            break;
        if (i && i % n == 0) {
            /* A new round. When a member took its whole bound it may be slow
             * rather than cut off: every attempt of this round waits twice as
             * long, up to timeout_ms. (Not sooner: right after the Raft
             * leader died, the next member may still forward to it for up
             * to etcd's election timeout, and the one after it has a leader
             * by then.) When all failed at once, pause a little instead. */
            if (round_timed_out && timeout < c->timeout_ms)
                timeout = timeout * 2 < c->timeout_ms ? timeout * 2 : c->timeout_ms;
            else {
                struct timespec pause = {0, ROUND_PAUSE_MS * 1000000L};
                nanosleep(&pause, NULL);
            }
            round_timed_out = false;
        }
        /* Within the budget, the last attempt may not outlast it by much. */
        long bound = timeout;
        if (c->budget_ms && i >= n && bound > c->budget_ms - spent)
            bound = c->budget_ms - spent > 100 ? c->budget_ms - spent : 100;
        size_t at = (from + i) % n;
        bool timed_out;
        rc = attempt(c, c->url.endpoints[at], path, text, bound, &timed_out, resp, err, errlen);
        if (rc == 0)
            c->current = at;
        else if (rc == 1)
            c->current = (at + 1) % n; /* the next call starts where this one goes on */
        round_timed_out |= timed_out;
    }
    free(text);
    return rc == 0 ? 0 : -1;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *etcd_b64_encode(const void *data, size_t len)
{
    const unsigned char *in = data;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    char *o = out;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        *o++ = B64[(v >> 18) & 63];
        *o++ = B64[(v >> 12) & 63];
        *o++ = i + 1 < len ? B64[(v >> 6) & 63] : '=';
        *o++ = i + 2 < len ? B64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_value(char ch)
{
    const char *p = ch ? strchr(B64, ch) : NULL;
    return p ? (int)(p - B64) : -1;
}

char *etcd_b64_decode(const char *text, size_t *len)
{
    size_t n = strlen(text);
    if (n % 4)
        return NULL;
    char *out = malloc(n / 4 * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++)
            v[k] = text[i + k] == '=' && i + 4 == n && k >= 2 ? 0 : b64_value(text[i + k]);
        bool pad2 = text[i + 2] == '=', pad3 = text[i + 3] == '=';
        if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0 || (pad2 && !pad3)) {
            free(out);
            return NULL;
        }
        unsigned w = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        out[o++] = (char)(w >> 16);
        if (!pad2)
            out[o++] = (char)(w >> 8 & 255);
        if (!pad3)
            out[o++] = (char)(w & 255);
    }
    out[o] = '\0';
    *len = o;
    return out;
}

bool etcd_int_field(const json_t *obj, const char *key, long long *out)
{
    const json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v)
        return true;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    const char *s = json_string_value(v);
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    *out = strtoll(s, &end, 10);
    return errno == 0 && *end == '\0';
}
