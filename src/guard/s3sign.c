/* s3sign — SigV4 signed by the guard itself; see s3sign.h. */
#include "guard/s3sign.h"

#include <curl/curl.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "guard/sigv4.h"

typedef struct Signed {
    const char *name; /* as sent: compared and written in lower case */
    size_t name_len;
    const char *value;
    size_t len; /* of the value, trimmed */
    size_t pos; /* the line's place in the list: one name's values keep their order */
} Signed;

/* SigV4's order: by lower-case name, a name before the names it begins. */
static int by_name(const void *pa, const void *pb)
{
    const Signed *a = pa, *b = pb;
    size_t n = a->name_len < b->name_len ? a->name_len : b->name_len;
    for (size_t i = 0; i < n; i++) {
        int ca = tolower((unsigned char)a->name[i]), cb = tolower((unsigned char)b->name[i]);
        if (ca != cb)
            return ca - cb;
    }
    return (a->name_len > b->name_len) - (a->name_len < b->name_len);
}

/* by_name, then the lines' order: qsort is not stable, and a repeated
 * header's values are signed (and sent) in the order they are listed. */
static int by_name_then_place(const void *pa, const void *pb)
{
    const Signed *a = pa, *b = pb;
    int c = by_name(a, b);
    return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}

/* Appends the lower-case name of h to out; returns its length. */
static size_t put_name(char *out, const Signed *h)
{
    for (size_t i = 0; i < h->name_len; i++)
        out[i] = (char)tolower((unsigned char)h->name[i]);
    return h->name_len;
}

static bool append(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = curl_slist_append(*list, line);
    if (l)
        *list = l;
    return l != NULL;
}

/* The header line as a signed header; false when libcurl does not send it:
 * "Name:" with no value is libcurl's "do not send", and "Name;" its form of
 * a header with an empty value, sent as "Name:" (so signed, empty). */
static bool signed_of(const char *line, Signed *out)
{
    size_t n = strcspn(line, ":");
    out->name = line;
    out->name_len = n;
    if (!line[n]) {
        size_t semi = strcspn(line, ";");
        if (semi == 0 || line[semi] != ';' || line[semi + 1] != '\0')
            return false;
        out->name_len = semi;
        out->value = line + semi + 1;
        out->len = 0;
        return true;
    }
    if (n == 0)
        return false;
    const char *v = line + n + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t len = strlen(v);
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    out->value = v;
    out->len = len;
    return len > 0;
}

/* Appends value (len bytes) to the buffer with runs of blanks as one space, as SigV4 trims a value. */
static size_t put_trimmed(char *out, const char *value, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (value[i] == ' ' || value[i] == '\t') {
            if (o && out[o - 1] == ' ')
                continue;
            out[o++] = ' ';
        } else {
            out[o++] = value[i];
        }
    }
    return o;
}

bool s3sign_lines(const GuardRoute *route, const AwsCreds *creds, const char *method, const char *url, time_t now,
                  struct curl_slist **headers)
{
    size_t elen = strlen(route->endpoint);
    const char *scheme_end = strstr(route->endpoint, "://");
    if (strncmp(url, route->endpoint, elen) || url[elen] != '/' || !scheme_end)
        return false;
    /* The path and query as written are their canonical forms (s3_object_url, sigv4_encode). */
    size_t plen = strcspn(url + elen, "?");
    const char *query = url[elen + plen] == '?' ? url + elen + plen + 1 : "";
    char *path = strndup(url + elen, plen);
    if (!path)
        return false;
    /* Host as libcurl would send it: without the scheme's default port. */
    char host[600];
    snprintf(host, sizeof host, "Host: %s", scheme_end + 3);
    size_t hl = strlen(host);
    bool https = !strncasecmp(route->endpoint, "https", 5);
    if ((https && hl > 4 && !strcmp(host + hl - 4, ":443")) || (!https && hl > 3 && !strcmp(host + hl - 3, ":80")))
        host[hl - (https ? 4 : 3)] = '\0';
    struct tm tm;
    char amz_date[17], date_line[40];
    gmtime_r(&now, &tm);
    strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(date_line, sizeof date_line, "x-amz-date: %s", amz_date);
    char token_line[sizeof creds->session_token + 32] = "";
    if (creds->session_token[0])
        snprintf(token_line, sizeof token_line, "x-amz-security-token: %s", creds->session_token);
    if (!append(headers, host) || !append(headers, date_line) ||
        !append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD") || (token_line[0] && !append(headers, token_line))) {
        free(path);
        return false;
    }

    size_t lines = 0;
    for (const struct curl_slist *l = *headers; l; l = l->next)
        lines++;
    Signed *hs = calloc(lines, sizeof *hs);
    if (!hs) {
        free(path);
        return false;
    }
    size_t n = 0, size = 0;
    size_t pos = 0;
    for (const struct curl_slist *l = *headers; l; l = l->next, pos++) {
        hs[n].pos = pos;
        if (signed_of(l->data, &hs[n])) {
            size += hs[n].name_len * 2 + hs[n].len + 3;
            n++;
        }
    }
    qsort(hs, n, sizeof hs[0], by_name_then_place);
    size_t cap = strlen(method) + strlen(path) + strlen(query) + 2 * size + 128;
    char *canonical = malloc(cap);
    char *names = malloc(size + 1); /* the names joined by ';': within size */
    if (!canonical || !names) {
        free(path);
        free(hs);
        free(canonical);
        free(names);
        return false;
    }
    size_t o = (size_t)snprintf(canonical, cap, "%s\n%s\n%s\n", method, path, query);
    free(path);
    size_t no = 0;
    names[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        bool merged = i && !by_name(&hs[i], &hs[i - 1]); /* one name's lines: values joined by ',' */
        if (merged) {
            canonical[o - 1] = ',';
        } else {
            o += put_name(canonical + o, &hs[i]);
            canonical[o++] = ':';
            if (no)
                names[no++] = ';';
            no += put_name(names + no, &hs[i]);
            names[no] = '\0';
        }
        o += put_trimmed(canonical + o, hs[i].value, hs[i].len);
        canonical[o++] = '\n';
    }
    snprintf(canonical + o, cap - o, "\n%s\nUNSIGNED-PAYLOAD", names);
    free(hs);

    SigV4Auth a;
    memset(&a, 0, sizeof a);
    snprintf(a.date, sizeof a.date, "%.8s", amz_date);
    snprintf(a.region, sizeof a.region, "%s", route->region);
    snprintf(a.service, sizeof a.service, "s3");
    snprintf(a.scope, sizeof a.scope, "%s/%s/s3/aws4_request", a.date, a.region);
    char *to_sign = sigv4_string_to_sign(amz_date, &a, canonical);
    free(canonical);
    if (!to_sign) {
        free(names);
        return false;
    }
    uint8_t key[32];
    char signature[SIGV4_HEX];
    sigv4_key(creds->secret_key, &a, key);
    sigv4_hmac_hex(key, to_sign, strlen(to_sign), signature);
    free(to_sign);
    explicit_bzero(key, sizeof key);
    char *line;
    if (asprintf(&line, "Authorization: AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                 creds->access_key, a.scope, names, signature) < 0) {
        free(names);
        return false;
    }
    free(names);
    bool ok = append(headers, line);
    free(line);
    return ok;
}
