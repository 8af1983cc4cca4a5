/* etcd — the etcd client (JSON gateway and gRPC); see etcd.h. */
#include "store/etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/log.h"
#include "store/etcd_auth.h"
#include "store/h2c.h"
#include "store/jsondump.h"

/* A dead member on a reachable machine refuses at once; one whose machine is
 * gone does not answer the SYN: this bounds the wait for it. */
#define CONNECT_TIMEOUT_MS 1000L
/* An attempt to log in waits at least this long for its member (etcd checks
 * the password with bcrypt, tens of milliseconds of its CPU). */
#define LOGIN_TIMEOUT_MS 5000L
/* When every endpoint failed at once (refused, 5xx): the pause before the next round. */
#define ROUND_PAUSE_MS 100

struct EtcdClient {
    EtcdUrl url;
    CURL *curl;      /* JSON calls (HTTP/1.1) */
    H2c *h2c;        /* gRPC calls (HTTP/2), made at the first; NULL before */
    TlsFiles tls;    /* h2c's TLS files (etcds://) */
    size_t current; /* the endpoint that answered last: tried first */
    long timeout_ms;
    long first_timeout_ms; /* etcd_client_retry: the first attempt's bound; 0: timeout_ms */
    long budget_ms;        /* etcd_client_retry: rounds go on until this has passed; 0: one round */
    bool (*cancelled)(void *ud);
    void *cancel_ud;
    char token[2048];   /* etcd's auth token (etcd_auth.h); "" before a login */
    bool auth_off;      /* etcd said its authentication is not enabled: no login until a call needs one */
    char errbuf[CURL_ERROR_SIZE]; /* libcurl's detail of the last transfer's failure */
    int failed_as;  /* the EtcdErrKind of the attempt that just failed, or -1 (set by attempts) */
    int last_error; /* etcd_client_last_error */
};

const char *etcd_err_kind_name(EtcdErrKind k)
{
    static const char *const NAMES[ETCD_ERR_KINDS] = {
        [ETCD_ERR_UNREACHABLE] = "unreachable", [ETCD_ERR_TIMEOUT] = "timeout", [ETCD_ERR_TLS] = "tls",
        [ETCD_ERR_UNAVAILABLE] = "unavailable", [ETCD_ERR_NOSPACE] = "nospace", [ETCD_ERR_REFUSED] = "refused"};
    return NAMES[k];
}

/* A transfer that failed in libcurl: nothing, or nothing in time, answered;
 * or a certificate was refused (ours, etcd's), which no retry mends. */
static EtcdErrKind kind_of_transfer(CURLcode rc)
{
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        return ETCD_ERR_TIMEOUT;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_USE_SSL_FAILED:
        return ETCD_ERR_TLS;
    default:
        return ETCD_ERR_UNREACHABLE;
    }
}

/* An answer that is a refusal: etcd's quota alarm by its message, one the
 * next member may answer differently (retryable), or a final one. */
/* etcd's election API, asked who leads while no candidate has a key. */
#define ELECTION_NO_LEADER "election: no leader"

static EtcdErrKind kind_of_refusal(bool retryable, const char *message)
{
    if (message && strstr(message, "database space exceeded"))
        return ETCD_ERR_NOSPACE;
    return retryable ? ETCD_ERR_UNAVAILABLE : ETCD_ERR_REFUSED;
}

int etcd_client_last_error(const EtcdClient *c) { return c->last_error; }

static void grpc_forget_connections(EtcdClient *c);

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
    /* etcd takes keys as written: "/lg" or "lg//x" would be a lock space of
     * its own beside "lg" or "lg/x", so a doubled '/' (a typo) is refused
     * rather than read as another prefix. Trailing ones were dropped above. */
    if (out->prefix[0] == '/' || strstr(out->prefix, "//")) {
        snprintf(err, errlen, "--store: the prefix '%s' of '%s' has an empty segment (a leading '/' or '//'): etcd "
                 "keeps keys as written, so it would be another lock space than the one without it",
                 out->prefix, url);
        return false;
    }
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
    c->tls = (TlsFiles){c->url.cacert, c->url.cert, c->url.key};
    c->timeout_ms = timeout_ms;
    c->failed_as = c->last_error = -1;
    return c;
}

void etcd_client_free(EtcdClient *c)
{
    if (!c)
        return;
    memset(c->token, 0, sizeof c->token);
    curl_easy_cleanup(c->curl);
    grpc_forget_connections(c);
    h2c_free(c->h2c);
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

void etcd_client_next(EtcdClient *c) { c->current = (c->current + 1) % c->url.nendpoints; }

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

/* One attempt of a call on one endpoint (c->url.endpoints[at]), bounded by
 * timeout_ms (0: none): 1 when the next endpoint should be tried
 * (*timed_out says whether for lack of an answer in time), 0 on an answer,
 * -1 on an error not worth retrying. */
typedef int (*AttemptFn)(EtcdClient *c, size_t at, long timeout_ms, bool *timed_out, void *call, char *err,
                         size_t errlen);

/* The options every attempt sets, JSON or gRPC: false when out of memory. */
static bool common_options(EtcdClient *c, CURL *h, const char *target, long timeout_ms)
{
    /* libcurl verifies an https endpoint's certificate and name by default;
     * --cacert only says which CAs to trust. */
    if (c->url.cacert && curl_easy_setopt(h, CURLOPT_CAINFO, c->url.cacert) != CURLE_OK)
        return false;
    /* The client certificate etcd's --client-cert-auth asks for (PEM files,
     * read by libcurl at each new connection). */
    if (c->url.cert && (curl_easy_setopt(h, CURLOPT_SSLCERT, c->url.cert) != CURLE_OK ||
                        curl_easy_setopt(h, CURLOPT_SSLKEY, c->url.key) != CURLE_OK))
        return false;
    c->errbuf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(h, CURLOPT_URL, target);
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
    return true;
}

/* What to do when etcd refused the TLS handshake (alert) for want of a
 * client certificate, or refused the one shown, or may have (closed: with
 * TLS 1.3 a client's certificate is checked after the client has finished
 * its handshake, so etcd's refusal may come as an alert, or as the
 * connection closed under the first request): "" when neither. */
static const char *certificate_hint(const EtcdClient *c, bool alert, bool closed)
{
    if (!alert && !closed)
        return "";
    if (c->url.cert)
        return alert ? ": etcd refuses this gateway's client certificate (--etcd-cert): is it signed by a CA in "
                       "etcd's --trusted-ca-file, and for client authentication?"
                     : ": if this persists, etcd refuses this gateway's client certificate (--etcd-cert: signed by a "
                       "CA in etcd's --trusted-ca-file, for client authentication?)";
    return alert ? ": etcd asks for a client certificate (its --client-cert-auth): give --etcd-cert and --etcd-key"
                 : ": if this persists, etcd may ask for a client certificate (its --client-cert-auth): give "
                   "--etcd-cert and --etcd-key";
}

/* A transfer that failed before an answer, in err: libcurl's summary, its
 * detail, and what to do about a certificate (certificate_hint). */
static void transport_error(const EtcdClient *c, const char *endpoint, CURLcode rc, char *err, size_t errlen)
{
    const char *detail = c->errbuf;
    bool alert = strstr(detail, "certificate required") || strstr(detail, "handshake failure") ||
                 strstr(detail, "bad certificate") || strstr(detail, "unknown ca") ||
                 strstr(detail, "certificate unknown");
    bool closed = !strncmp(endpoint, "https:", 6) &&
                  (rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_HTTP2 ||
                   rc == CURLE_GOT_NOTHING || rc == CURLE_SSL_CONNECT_ERROR);
    const char *hint = rc == CURLE_SSL_CERTPROBLEM ? ": check --etcd-cert and --etcd-key"
                                                   : certificate_hint(c, alert, closed);
    snprintf(err, errlen, "%s: %s%s%s%s%s", endpoint, curl_easy_strerror(rc), detail[0] ? " (" : "", detail,
             detail[0] ? ")" : "", hint);
}

const char *etcd_alarm_name(const char *err)
{
    return strstr(err, ETCD_NOSPACE_TEXT) ? "NOSPACE" : strstr(err, ETCD_CORRUPT_TEXT) ? "CORRUPT" : NULL;
}

/* etcd refuses writes while one of its alarms stands: a call that met one is
 * not repeated on other members, which share the alarm (etcd.h). */
static bool alarm_refusal(const char *text) { return etcd_alarm_name(text) != NULL; }

typedef struct JsonCall {
    const char *path, *text;
    json_t **resp;
} JsonCall;

static int json_attempt(EtcdClient *c, size_t at, long timeout_ms, bool *timed_out, void *call, char *err,
                        size_t errlen)
{
    const JsonCall *jc = call;
    const char *endpoint = c->url.endpoints[at], *path = jc->path;
    json_t **resp = jc->resp;
    *timed_out = false;
    char target[512];
    snprintf(target, sizeof target, "%s%s", endpoint, path);
    Buf b = {0};
    char auth[sizeof c->token + 32];
    snprintf(auth, sizeof auth, "Authorization: %s", c->token);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *more = headers && c->token[0] ? curl_slist_append(headers, auth) : headers;
    if (!more) {
        curl_slist_free_all(headers);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    headers = more;
    CURL *h = c->curl;
    curl_easy_reset(h);
    if (!common_options(c, h, target, timeout_ms)) {
        curl_slist_free_all(headers);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, jc->text);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
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
        transport_error(c, endpoint, rc, err, errlen);
        *timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        c->failed_as = (int)kind_of_transfer(rc);
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
            /* etcd's own HTTP errors end in a newline */
            const char *text = msg ? msg : b.data ? b.data : "(no body)";
            int len = (int)strnlen(text, 300);
            while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
                len--;
            snprintf(err, errlen, "%s%s: HTTP %ld: %.*s", endpoint, path, status, len, text);
            /* 5xx and 429 (etcd's "too many requests", refused before
             * the proposal): the next member may answer. Others are final,
             * and so is an alarm's refusal (429 too, for NOSPACE). */
            result = (status >= 500 || status == 429) && !alarm_refusal(err) ? 1 : -1;
            c->failed_as = (int)kind_of_refusal(result == 1, msg ? msg : b.data);
            /* The election API says "no leader" (a 500) while no candidate
             * holds a key: an answer, the same from every member, not a
             * failure of etcd; neither asked again nor counted. */
            if (msg && !strcmp(msg, ELECTION_NO_LEADER)) {
                result = -1;
                c->failed_as = -1;
            }
        }
        json_decref(j);
    }
    free(b.data);
    return result;
}

/* One attempt of a call (the i-th) and how it ended, in the stats and in
 * last_error. */
static void count_attempt(EtcdClient *c, size_t i, int rc)
{
    EtcdStats *st = c->url.stats;
    if (st && i > 0)
        atomic_fetch_add(&st->retries, 1);
    if (rc == 0 || c->failed_as < 0)
        return;
    c->last_error = c->failed_as;
    if (st)
        atomic_fetch_add(&st->errors[c->failed_as], 1);
}

/* A call's attempts, endpoint after endpoint and round after round (etcd.h):
 * 0 once one answered, -1 with the last reason in err. */
static int call_with_retry(EtcdClient *c, AttemptFn attempt, void *call, char *err, size_t errlen)
{
    int rc = 1;
    long start = mono_ms();
    long timeout = c->first_timeout_ms && c->timeout_ms ? c->first_timeout_ms : c->timeout_ms;
    size_t n = c->url.nendpoints, from = c->current;
    bool round_timed_out = false; /* some attempt of this round took its whole bound */
    c->last_error = -1;
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
        c->failed_as = -1;
        rc = attempt(c, at, bound, &timed_out, call, err, errlen);
        count_attempt(c, i, rc);
        if (rc == 0)
            c->current = at;
        else if (rc == 1)
            c->current = (at + 1) % n; /* the next call starts where this one goes on */
        round_timed_out |= timed_out;
    }
    return rc == 0 ? 0 : -1;
}

/* Logs in as --etcd-auth-file's user (etcd_auth.h): 0 with c->token, or
 * with c->auth_off when etcd's authentication is not enabled; -1 with err
 * naming the user when etcd refused the login or did not answer. */
static int log_in(EtcdClient *c, char *err, size_t errlen)
{
    EtcdAuth *a = c->url.auth;
    json_t *body = json_pack("{s:s, s:s}", "name", a->user, "password", a->password);
    char *text = jsondump_whole(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    json_t *resp = NULL;
    char why[700];
    JsonCall call = {"/v3/auth/authenticate", text, &resp};
    c->token[0] = '\0';
    /* etcd checks the password with bcrypt: give a login longer than a
     * keepalive's bound (etcd.h), then restore the client's. */
    long timeout = c->timeout_ms, first = c->first_timeout_ms;
    if (c->timeout_ms && c->timeout_ms < LOGIN_TIMEOUT_MS)
        c->timeout_ms = c->first_timeout_ms = LOGIN_TIMEOUT_MS;
    int rc = call_with_retry(c, json_attempt, &call, why, sizeof why);
    c->timeout_ms = timeout;
    c->first_timeout_ms = first;
    memset(text, 0, strlen(text)); /* the password */
    free(text);
    if (rc && etcd_auth_off(why)) {
        c->auth_off = true;
        if (!atomic_exchange(&a->warned_off, true))
            log_line(LEVEL_WARN, "note: etcd's authentication is not enabled: the user of %s is not used (until "
                                 "etcd asks for one)",
                     a->path);
        return 0;
    }
    const char *token = rc ? NULL : json_string_value(json_object_get(resp, "token"));
    if (!rc && (!token || strlen(token) >= sizeof c->token))
        snprintf(why, sizeof why, "no token (or one longer than %zu bytes) in etcd's answer", sizeof c->token - 1);
    else if (!rc)
        snprintf(c->token, sizeof c->token, "%s", token);
    json_decref(resp);
    if (!c->token[0]) {
        snprintf(err, errlen, "%s the login of user '%s' (--etcd-auth-file %s): %s",
                 strstr(why, ": HTTP ") ? "etcd refused" : "etcd did not answer", a->user, a->path, why);
        return -1;
    }
    c->auth_off = false;
    return 0;
}

/* A call with its attempts (call_with_retry), logged in first when a user
 * is given; when etcd says the call needs a new token (it expired, etcd's
 * users or roles changed, or etcd turned authentication on), the client logs
 * in again and makes the call once more: etcd refused it unapplied. Without
 * a user, an etcd that asks for one is named in err. */
static int authed_call(EtcdClient *c, AttemptFn attempt, void *call, char *err, size_t errlen)
{
    for (int round = 0;; round++) {
        int rc = c->url.auth && !c->token[0] && !c->auth_off ? log_in(c, err, errlen) : 0;
        if (rc == 0)
            rc = call_with_retry(c, attempt, call, err, errlen);
        if (rc && strstr(err, "CommonName of client sending a request against gateway")) {
            /* etcd's words say what it ignores, not what to do. */
            snprintf(err, errlen, "etcd refuses a client certificate with a CommonName on its JSON gateway while its "
                                  "authentication is on: make the client certificate without a CommonName (subject "
                                  "/O=leasegate) and log in with --etcd-auth-file");
            return -1;
        }
        if (rc == 0 || !etcd_auth_retry(err))
            return rc;
        if (!c->url.auth || round) {
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, "%s", c->url.auth ? " (after a new login)"
                                                            : ": etcd has authentication enabled: give --etcd-auth-file");
            return -1;
        }
        c->token[0] = '\0';
        c->auth_off = false;
    }
}

int etcd_call(EtcdClient *c, const char *path, json_t *body, json_t **resp, char *err, size_t errlen)
{
    *resp = NULL;
    char *text = jsondump_whole(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    JsonCall call = {path, text, resp};
    int rc = authed_call(c, json_attempt, &call, err, errlen);
    free(text);
    return rc;
}

/* gRPC: etcd's own protocol, HTTP/2 frames of protobuf messages. */

typedef struct GrpcAnswer {
    Buf body;          /* the length-prefixed message */
    int status;        /* grpc-status; -1 while none came */
    char message[200]; /* grpc-message as sent (percent-encoded), NUL-terminated */
} GrpcAnswer;

/* The gRPC codes after which another member may answer: those etcd's JSON
 * gateway turns into 5xx or 429 (etcd_call retries those). UNKNOWN 2,
 * DEADLINE_EXCEEDED 4, RESOURCE_EXHAUSTED 8, UNIMPLEMENTED 12, INTERNAL 13,
 * UNAVAILABLE 14 (no leader, leader changed, request timed out), DATA_LOSS 15. */
static bool grpc_retryable(int status)
{
    return status == 2 || status == 4 || status == 8 || status == 12 || status == 13 || status == 14 ||
           status == 15;
}

typedef struct GrpcCall {
    const char *method;  /* "/etcdserverpb.KV/Txn" */
    const PbBuf *frame;  /* the request with gRPC's 5-byte prefix */
    PbBuf *answer;       /* the answer's message, without the prefix */
} GrpcCall;

/* An answer's body is one uncompressed message with its 5-byte prefix
 * (a unary call's): false when it is anything else. */
static bool grpc_unframe(const Buf *body, PbBuf *answer)
{
    const unsigned char *p = (const unsigned char *)body->data;
    if (body->len < 5 || p[0] != 0)
        return false;
    size_t len = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
    if (len != body->len - 5)
        return false;
    pb_raw(answer, p + 5, len);
    return true;
}

/* Closes the connection the gRPC calls kept. */
static void grpc_forget_connections(EtcdClient *c)
{
    if (c->h2c)
        h2c_close(c->h2c);
}

/* How a gRPC attempt's transfer ended, whichever way it went. */
typedef enum GrpcTransfer {
    GRPC_ANSWERED,  /* an HTTP/2 answer came: status and a are set */
    GRPC_FAILED,    /* no answer: err, *timed_out and c->failed_as are set */
    GRPC_CANCELLED,
    GRPC_NOMEM
} GrpcTransfer;

/* HTTP/2 on a connection h2c.h keeps, over TLS (etcds://: HTTP/2 agreed in
 * the handshake, ALPN) or spoken at once on plain TCP ("prior knowledge"),
 * each call's frames in one write (libcurl's cost per call was most of what
 * the gateway added to a commit: docs/BENCHMARKS.md, round 4). */
static GrpcTransfer grpc_h2(EtcdClient *c, const char *endpoint, long timeout_ms, bool *timed_out,
                            const GrpcCall *gc, GrpcAnswer *a, long *status, char *err, size_t errlen)
{
    bool tls = !strncmp(endpoint, "https://", 8);
    if (!c->h2c && !(c->h2c = h2c_new(tls ? &c->tls : NULL)))
        return GRPC_NOMEM;
    /* "http[s]://HOST:PORT", HOST perhaps an IPv6 address in brackets. */
    const char *hostport = endpoint + (tls ? strlen("https://") : strlen("http://")), *colon = strrchr(hostport, ':');
    char host[300];
    size_t hlen = (size_t)(colon - hostport);
    if (hlen >= 2 && hostport[0] == '[' && hostport[hlen - 1] == ']')
        snprintf(host, sizeof host, "%.*s", (int)(hlen - 2), hostport + 1);
    else
        snprintf(host, sizeof host, "%.*s", (int)hlen, hostport);
    H2cAnswer h2;
    char why[400];
    H2cFailure f = h2c_call(c->h2c, host, colon + 1, gc->method, c->token[0] ? c->token : NULL, gc->frame->data,
                            gc->frame->len, CONNECT_TIMEOUT_MS, timeout_ms, c->cancelled, c->cancel_ud, &h2, why,
                            sizeof why);
    if (f == H2C_NOMEM)
        return GRPC_NOMEM;
    if (f == H2C_CANCELLED)
        return GRPC_CANCELLED;
    if (f != H2C_OK) {
        /* etcd's refusal of our certificate (or of its lack) is an alert,
         * or with TLS 1.3 perhaps the connection closed under the call. */
        bool alert = f == H2C_TLS && strstr(why, "TLS alert");
        bool closed = tls && f == H2C_UNREACHABLE && strstr(why, "closed");
        snprintf(err, errlen, "%s: %s%s", endpoint, why, certificate_hint(c, alert, closed));
        *timed_out = f == H2C_TIMEOUT;
        c->failed_as = f == H2C_TIMEOUT ? ETCD_ERR_TIMEOUT : f == H2C_TLS ? ETCD_ERR_TLS : ETCD_ERR_UNREACHABLE;
        return GRPC_FAILED;
    }
    *status = h2.http_status;
    a->status = h2.grpc_status;
    snprintf(a->message, sizeof a->message, "%s", h2.message);
    a->body = (Buf){h2.body, h2.len, h2.len, false};
    return GRPC_ANSWERED;
}

/* One gRPC attempt (AttemptFn). */
static int grpc_attempt(EtcdClient *c, size_t at, long timeout_ms, bool *timed_out, void *call, char *err,
                        size_t errlen)
{
    const GrpcCall *gc = call;
    const char *endpoint = c->url.endpoints[at];
    *timed_out = false;
    GrpcAnswer a = {.status = -1};
    long status = 0;
    GrpcTransfer t = grpc_h2(c, endpoint, timeout_ms, timed_out, gc, &a, &status, err, errlen);
    int result = -1;
    if (t == GRPC_NOMEM || a.body.nomem) {
        snprintf(err, errlen, "out of memory");
    } else if (t == GRPC_CANCELLED) {
        snprintf(err, errlen, "cancelled");
    } else if (t == GRPC_FAILED) {
        result = 1;
    } else if (status != 200) {
        snprintf(err, errlen, "%s%s: HTTP %ld", endpoint, gc->method, status);
        result = status >= 500 || status == 429 ? 1 : -1;
        c->failed_as = (int)kind_of_refusal(result == 1, NULL);
    } else if (a.status < 0) {
        snprintf(err, errlen, "%s%s: no gRPC status in the answer", endpoint, gc->method);
        c->failed_as = ETCD_ERR_UNAVAILABLE;
        result = 1;
    } else if (a.status != 0) {
        snprintf(err, errlen, "%s%s: gRPC status %d: %s", endpoint, gc->method, a.status, a.message);
        result = grpc_retryable(a.status) && !alarm_refusal(a.message) ? 1 : -1;
        c->failed_as = (int)kind_of_refusal(result == 1, a.message);
    } else if (!grpc_unframe(&a.body, gc->answer)) {
        snprintf(err, errlen, "%s%s: the answer is not one gRPC message", endpoint, gc->method);
        c->failed_as = ETCD_ERR_UNAVAILABLE;
        result = 1;
    } else if (gc->answer->nomem) {
        snprintf(err, errlen, "out of memory reading etcd's answer");
    } else {
        result = 0;
    }
    free(a.body.data);
    return result;
}

int etcd_grpc_call(EtcdClient *c, const char *method, const PbBuf *request, PbBuf *answer, char *err, size_t errlen)
{
    *answer = (PbBuf){0};
    PbBuf frame = {0};
    size_t len = request->len;
    unsigned char prefix[5] = {0, (unsigned char)(len >> 24), (unsigned char)(len >> 16), (unsigned char)(len >> 8),
                               (unsigned char)len};
    pb_raw(&frame, prefix, sizeof prefix);
    pb_raw(&frame, request->data, request->len);
    if (request->nomem || frame.nomem || len > UINT32_MAX) {
        pb_free(&frame);
        snprintf(err, errlen, request->nomem || frame.nomem ? "out of memory" : "the request is too large");
        return -1;
    }
    GrpcCall call = {method, &frame, answer};
    int rc = authed_call(c, grpc_attempt, &call, err, errlen);
    if (rc)
        pb_free(answer); /* an answer that ran out of memory half-way */
    pb_free(&frame);
    return rc;
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
