/* cli_http — the CLI's blocking HTTP client (libcurl easy) and small helpers. */
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <uuid/uuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "store/jsondump.h"

#define MAX_REPLY (4 * 1024 * 1024)

/* The digits of s from *p on as a number (at most max), advancing *p past them;
 * -1 when there is none or it is larger than max. */
static int64_t digits(const char **p, int64_t max)
{
    const char *start = *p;
    int64_t v = 0;
    for (; **p >= '0' && **p <= '9'; (*p)++) {
        if (v > (max - (**p - '0')) / 10)
            return -1;
        v = v * 10 + (**p - '0');
    }
    return *p == start ? -1 : v;
}

bool cli_parse_duration(const char *s, int64_t *ms)
{
    if (!s)
        return false;
    const char *p = s;
    int64_t whole = digits(&p, CLI_DURATION_MAX_MS);
    if (whole < 0)
        return false;
    /* The fraction without its trailing zeros: with a last digit other than 0 it can be
     * a whole number of ms only within 7 digits (an hour is 2^7 * 3^2 * 5^5 ms). */
    const char *frac = "", *frac_end = frac;
    if (*p == '.') {
        frac = ++p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == frac)
            return false;
        frac_end = p;
        while (frac_end > frac && frac_end[-1] == '0')
            frac_end--;
    }
    int64_t unit;
    if (!strcmp(p, "ms"))
        unit = 1;
    else if (!strcmp(p, "s"))
        unit = 1000;
    else if (!strcmp(p, "m"))
        unit = 60 * 1000;
    else if (!strcmp(p, "h"))
        unit = 3600 * 1000;
    else
        return false;
    if (frac_end - frac > 7 || whole > CLI_DURATION_MAX_MS / unit)
        return false;
    int64_t f = 0, scale = 1;
    for (const char *c = frac; c < frac_end; c++)
        f = f * 10 + (*c - '0'), scale *= 10;
    if (f * unit % scale) /* a fraction of a millisecond */
        return false;
    int64_t total = whole * unit + f * unit / scale;
    if (total > CLI_DURATION_MAX_MS)
        return false;
    *ms = total;
    return true;
}

bool cli_duration_arg(const char *cmd, const char *flag, const char *value, int64_t *ms)
{
    if (cli_parse_duration(value, ms))
        return true;
    /* A bare number (15, 1.5) gets the units spelled out. */
    size_t n = strspn(value, "0123456789");
    if (n && value[n] == '.')
        n += 1 + strspn(value + n + 1, "0123456789");
    bool bare = n && value[n] == '\0';
    if (bare)
        fprintf(stderr,
                "leasegate %s: %s '%s' needs a unit: %sms, %ss, %sm or %sh (a bare number is not read as a duration)\n",
                cmd, flag, value, value, value, value, value);
    else
        fprintf(stderr,
                "leasegate %s: %s '%s' is not a duration like 250ms, 15s, 2m, 1h or 1.5s (whole milliseconds)\n", cmd,
                flag, value);
    return false;
}

void cli_new_request_id(char out[CLI_REQUEST_ID_LEN])
{
    uuid_t id;
    uuid_generate_random(id);
    uuid_unparse_lower(id, out);
}

const char *cli_default_server(void)
{
    const char *env = getenv("LEASEGATE_SERVER");
    return env && *env ? env : "http://127.0.0.1:7400";
}

void cli_default_owner(char out[CLI_OWNER_MAX])
{
    char host[64] = "host";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    snprintf(out, CLI_OWNER_MAX, "%s:%ld", host, (long)getpid());
}

const char *cli_key(char buf[CLI_KEY_MAX])
{
    const char *key = getenv("LEASEGATE_KEY");
    if (key && *key)
        return key;
    const char *path = getenv("LEASEGATE_KEY_FILE");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f)
        return NULL; /* a 401 then says why (cli_key_hint) */
    size_t n = fread(buf, 1, CLI_KEY_MAX - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, " \t\r\n")] = '\0'; /* the first word of the file: the key */
    return *buf ? buf : NULL;
}

const char *cli_key_hint(void)
{
    const char *key = getenv("LEASEGATE_KEY"), *path = getenv("LEASEGATE_KEY_FILE");
    if (key && *key)
        return " (the key in $LEASEGATE_KEY)";
    if (!path || !*path)
        return " (set $LEASEGATE_KEY, or $LEASEGATE_KEY_FILE to a file holding the key)";
    FILE *f = fopen(path, "r");
    if (!f)
        return " ($LEASEGATE_KEY_FILE names a file that cannot be read)";
    fclose(f);
    return " (the key in $LEASEGATE_KEY_FILE)";
}

static const char *cacert_flag; /* --cacert, for every request of this process */
static int64_t first_byte_flag; /* --first-byte-timeout in ms, for every request of this process; 0: not given */

/* A server that has not begun its answer this long after the request (or not
 * even accepted the connection) is asked GET /readyz: see http_one. */
#define FIRST_BYTE_DEFAULT_MS 2000
#define FIRST_BYTE_MIN_MS 100

bool cli_first_byte_arg(const char *cmd, const char *value)
{
    int64_t ms;
    if (!cli_duration_arg(cmd, "--first-byte-timeout", value, &ms))
        return false;
    if (ms < FIRST_BYTE_MIN_MS) {
        fprintf(stderr, "leasegate %s: --first-byte-timeout %s is below %dms\n", cmd, value, FIRST_BYTE_MIN_MS);
        return false;
    }
    first_byte_flag = ms;
    return true;
}

/* --first-byte-timeout, else $LEASEGATE_FIRST_BYTE_TIMEOUT (ignored, with a
 * warning, when it is not a duration of at least 100ms), else 2s. */
long cli_first_byte_ms(void)
{
    if (first_byte_flag)
        return (long)first_byte_flag;
    const char *env = getenv("LEASEGATE_FIRST_BYTE_TIMEOUT");
    int64_t ms;
    if (env && *env) {
        if (cli_parse_duration(env, &ms) && ms >= FIRST_BYTE_MIN_MS)
            return (long)ms;
        fprintf(stderr, "leasegate: $LEASEGATE_FIRST_BYTE_TIMEOUT '%s' is not a duration of at least %dms; using %dms\n",
                env, FIRST_BYTE_MIN_MS, FIRST_BYTE_DEFAULT_MS);
    }
    return FIRST_BYTE_DEFAULT_MS;
}

bool cli_cacert_arg(const char *cmd, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "leasegate %s: --cacert %s: %s\n", cmd, path, strerror(errno));
        return false;
    }
    fclose(f);
    cacert_flag = path;
    return true;
}

const char *cli_cacert(void)
{
    const char *env = getenv("LEASEGATE_CACERT");
    return cacert_flag ? cacert_flag : env && *env ? env : NULL;
}

typedef struct Sink {
    char *data;
    size_t len;
    bool too_big;
    CURL *e;
    FILE *file;       /* a 200's body goes here (cli_http_download), else NULL */
    int file_errno;   /* writing it failed: why (else 0) */
    /* The first-byte watch (http_one): */
    bool interruptible; /* a pending stop signal ends the request */
    const char *server; /* the base URL (server_len bytes), for its /readyz */
    size_t server_len;
    long first_byte_ms;
    int64_t asked_ms;   /* monotonic: the request started, or the server last said it is ready */
    bool answering;     /* a byte of the answer (its status line) came */
    bool stalled;       /* given up: no answer, and /readyz did not say ready */
    char stall_why[300];
} Sink;

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    Sink *s = ud;
    size_t add = size * n;
    long code = 0;
    if (s->file && curl_easy_getinfo(s->e, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200) {
        if (fwrite(p, 1, add, s->file) != add) {
            s->file_errno = errno ? errno : EIO;
            return 0;
        }
        return add;
    }
    if (s->len + add > MAX_REPLY) {
        s->too_big = true;
        return 0;
    }
    char *d = realloc(s->data, s->len + add + 1);
    if (!d)
        return 0;
    memcpy(d + s->len, p, add);
    s->data = d;
    s->len += add;
    s->data[s->len] = '\0';
    return add;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    ((Sink *)ud)->answering = true;
    return size * n;
}

static size_t drop(char *p, size_t size, size_t n, void *ud)
{
    (void)p, (void)ud;
    return size * n;
}

/* GET /readyz of the server, within timeout_ms: true unless it does not
 * answer or answers 503 (not ready: why says so). A server too old to have
 * /readyz (404) counts as ready: it answers. */
static bool says_ready(const char *server, size_t slen, long timeout_ms, char *why, size_t whylen)
{
    char *url = NULL;
    CURL *e = curl_easy_init();
    if (!e || asprintf(&url, "%.*s/readyz", (int)slen, server) < 0) {
        curl_easy_cleanup(e);
        return true; /* no memory to ask: keep waiting rather than drop a live request */
    }
    if (cli_cacert())
        curl_easy_setopt(e, CURLOPT_CAINFO, cli_cacert());
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, drop);
    CURLcode cc = curl_easy_perform(e);
    long status = 0;
    if (cc == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    free(url);
    if (cc != CURLE_OK)
        snprintf(why, whylen, "and /readyz gave no answer either (%s)", curl_easy_strerror(cc));
    else if (status == 503)
        snprintf(why, whylen, "and /readyz says it is not ready");
    return cc == CURLE_OK && status != 503;
}

/* Called by libcurl about once a second while a request runs. A server that
 * accepted the connection but has not begun its answer within the first-byte
 * timeout is asked GET /readyz: ready, it is working on the request (a
 * long-poll waits for its grant, a commit is slow) and the wait goes on, to
 * be asked again a timeout later; not ready or silent (paused, stopped,
 * cut off), the request is given up for the next server. A termination
 * signal blocked and pending also ends the request: `run` blocks them while
 * it waits for a lock, and must not wait on for the whole --wait. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    Sink *s = ud;
    if (!s->answering && now_ms() - s->asked_ms >= s->first_byte_ms) {
        char why[200] = "";
        if (!says_ready(s->server, s->server_len, s->first_byte_ms, why, sizeof why)) {
            snprintf(s->stall_why, sizeof s->stall_why, "no answer within %ldms %s", s->first_byte_ms, why);
            s->stalled = true;
            return 1;
        }
        s->asked_ms = now_ms();
    }
    if (!s->interruptible)
        return 0;
    sigset_t p;
    sigpending(&p);
    return sigismember(&p, SIGINT) || sigismember(&p, SIGTERM) || sigismember(&p, SIGHUP) ||
           sigismember(&p, SIGQUIT);
}

/* One request to the server whose base URL is the first slen bytes of server. */
static int http_one(const char *server, size_t slen, bool interruptible, const char *method, const char *path,
                    json_t *body, FILE *to, long timeout_ms, long *status, json_t **reply_new, char *err,
                    size_t errlen)
{
    *reply_new = NULL;
    /* What an earlier server sent before it failed is not kept. */
    if (to && (fflush(to) != 0 || ftruncate(fileno(to), 0) != 0 || fseek(to, 0, SEEK_SET) != 0)) {
        snprintf(err, errlen, "cannot write the download: %s", strerror(errno));
        return -1;
    }
    while (slen && server[slen - 1] == '/')
        slen--;
    char *url = NULL, *text = NULL;
    if (asprintf(&url, "%.*s%s", (int)slen, server, path) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    CURL *e = curl_easy_init();
    /* The API key from the environment or a file it names, never from argv
     * (which ps shows): sent with every request, a GET's too. */
    char keybuf[CLI_KEY_MAX];
    const char *key = cli_key(keybuf);
    struct curl_slist *headers = NULL;
    bool nomem = false;
    if (key && *key) {
        char *auth = NULL;
        struct curl_slist *h = asprintf(&auth, "Authorization: Bearer %s", key) < 0 ? NULL : curl_slist_append(NULL, auth);
        free(auth);
        nomem = !h;
        headers = h;
    }
    if (body && !nomem) {
        struct curl_slist *h = curl_slist_append(headers, "Content-Type: application/json");
        nomem = !h;
        headers = h ? h : headers;
    }
    long first_byte = cli_first_byte_ms();
    Sink sink = {.e = e, .file = to, .interruptible = interruptible, .server = server, .server_len = slen,
                 .first_byte_ms = first_byte, .asked_ms = now_ms()};
    int rc = -1;
    if (!e || nomem) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    /* libcurl verifies an https server's certificate and name by default;
     * --cacert only says which CAs to trust. */
    char curl_err[CURL_ERROR_SIZE] = "";
    if (cli_cacert() && curl_easy_setopt(e, CURLOPT_CAINFO, cli_cacert()) != CURLE_OK) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms > 0 && timeout_ms < first_byte ? timeout_ms : first_byte);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &sink);
    if (headers)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, &sink);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    if (body) {
        text = jsondump_whole(body, JSON_COMPACT); /* never a body with parts missing */
        if (!text) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, text);
    }
    CURLcode cc = curl_easy_perform(e);
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "%.*s%s: %s%s", (int)slen, server, path,
                 sink.file_errno  ? strerror(sink.file_errno)
                 : sink.stalled   ? sink.stall_why
                 : sink.too_big   ? "reply too large"
                 : curl_err[0]    ? curl_err
                                  : curl_easy_strerror(cc),
                 cc == CURLE_PEER_FAILED_VERIFICATION
                     ? " (a server whose certificate a private CA signed needs --cacert PEM or $LEASEGATE_CACERT)"
                     : "");
        goto out;
    }
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    if (sink.data)
        *reply_new = json_loadb(sink.data, sink.len, 0, NULL);
    rc = 0;
out:
    free(sink.data);
    free(text);
    free(url);
    curl_slist_free_all(headers);
    curl_easy_cleanup(e);
    return rc;
}

/* Tries the servers in order. With share, each gets an equal part of the
 * time left, so that one that accepts connections but never answers (stopped,
 * paused) cannot use up the time the next one needs; and a pending signal does
 * not end the request (run's renewals must go on while it passes signals). */
static int http_servers(const char *servers, bool share, const char *method, const char *path, json_t *body,
                        FILE *to, long timeout_ms, long *status, json_t **reply_new, char *err, size_t errlen)
{
    int64_t deadline = now_ms() + timeout_ms;
    const char *url = servers;
    for (;;) {
        size_t len = strcspn(url, ",");
        const char *next = url[len] == ',' ? url + len + 1 : NULL;
        int64_t left = deadline - now_ms();
        if (share && next) {
            size_t after = 1;
            for (const char *c = next; *c; c++)
                after += *c == ',';
            left /= (int64_t)after + 1;
        }
        int rc = http_one(url, len, !share, method, path, body, to, left > 1 ? (long)left : 1L, status, reply_new,
                          err, errlen);
        /* The next server, if any, when this one could not be reached or is
         * not serving (restarting, shutting down, overloaded). */
        if (!next || (rc == 0 && *status != 503) || now_ms() >= deadline)
            return rc;
        if (rc == 0) {
            json_decref(*reply_new);
            *reply_new = NULL;
        }
        url = next;
    }
}

int cli_http(const char *servers, const char *method, const char *path, json_t *body, long timeout_ms,
             long *status, json_t **reply_new, char *err, size_t errlen)
{
    return http_servers(servers, false, method, path, body, NULL, timeout_ms, status, reply_new, err, errlen);
}

int cli_http_download(const char *servers, const char *path, FILE *to, long timeout_ms, long *status,
                      json_t **reply_new, char *err, size_t errlen)
{
    return http_servers(servers, false, "GET", path, NULL, to, timeout_ms, status, reply_new, err, errlen);
}

int cli_http_shared(const char *servers, const char *method, const char *path, json_t *body, long timeout_ms,
                    long *status, json_t **reply_new, char *err, size_t errlen)
{
    return http_servers(servers, true, method, path, body, NULL, timeout_ms, status, reply_new, err, errlen);
}
