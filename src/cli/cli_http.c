/* cli_http — the CLI's blocking HTTP client (libcurl easy) and small helpers. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leasegate/cli.h"

#define MAX_REPLY (4 * 1024 * 1024)

bool cli_parse_duration(const char *s, int64_t *ms)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE) /* strtoll saturates: never take that for the value given */
        return false;
    long long unit;
    if (!strcmp(end, "ms"))
        unit = 1;
    else if (!strcmp(end, "s"))
        unit = 1000;
    else if (!strcmp(end, "m"))
        unit = 60 * 1000;
    else if (!strcmp(end, "h"))
        unit = 3600 * 1000;
    else
        return false;
    if (v > INT64_MAX / unit)
        return false;
    *ms = v * unit;
    return true;
}

bool cli_duration_arg(const char *cmd, const char *flag, const char *value, int64_t *ms)
{
    if (cli_parse_duration(value, ms))
        return true;
    if (*value && strspn(value, "0123456789") == strlen(value))
        fprintf(stderr, "leasegate %s: %s '%s' needs a unit: %sms, %ss, %sm or %sh\n", cmd, flag, value, value, value,
                value, value);
    else
        fprintf(stderr, "leasegate %s: %s '%s' is not a duration like 250ms, 15s, 2m or 1h\n", cmd, flag, value);
    return false;
}

const char *cli_default_server(void)
{
    const char *env = getenv("LEASEGATE_SERVER");
    return env && *env ? env : "http://127.0.0.1:7400";
}

typedef struct Sink {
    char *data;
    size_t len;
    bool too_big;
} Sink;

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    Sink *s = ud;
    size_t add = size * n;
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

int cli_http(const char *server, const char *method, const char *path, json_t *body, long timeout_ms,
             long *status, json_t **reply_new, char *err, size_t errlen)
{
    *reply_new = NULL;
    size_t slen = strlen(server);
    while (slen && server[slen - 1] == '/')
        slen--;
    char *url = NULL, *text = NULL;
    if (asprintf(&url, "%.*s%s", (int)slen, server, path) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    CURL *e = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    Sink sink = {NULL, 0, false};
    int rc = -1;
    if (!e || !headers) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms > 0 && timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &sink);
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        if (!text) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, text);
    }
    CURLcode cc = curl_easy_perform(e);
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "%s%s: %s", server, path, sink.too_big ? "reply too large" : curl_easy_strerror(cc));
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
