/* httphead — header helpers; see httphead.h. */
#include "net/httphead.h"

#include <curl/curl.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/names.h"

/* Is the token of n bytes one of list's (any case)? */
static bool lists_token(const char *list, const char *token, size_t n)
{
    for (const char *p = list; *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, ",");
        size_t end = len;
        while (end && (p[end - 1] == ' ' || p[end - 1] == '\t'))
            end--;
        if (end == n && strncasecmp(p, token, n) == 0)
            return true;
        p += len;
    }
    return false;
}

bool httphead_has_token(const char *list, const char *token) { return lists_token(list, token, strlen(token)); }

bool httphead_hop_by_hop(const char *name, size_t len)
{
    static const char *const HOP[] = {
        "Connection", "Keep-Alive",          "Proxy-Connection",  "TE", "Trailer", "Transfer-Encoding",
        "Upgrade",    "Proxy-Authorization", "Proxy-Authenticate"};
    for (size_t i = 0; i < sizeof HOP / sizeof HOP[0]; i++)
        if (strlen(HOP[i]) == len && !strncasecmp(name, HOP[i], len))
            return true;
    return false;
}

typedef struct NamedBy {
    const char *name;
    size_t len;
    bool found;
} NamedBy;

/* Header iterator: does this Connection header name the header sought? */
static enum MHD_Result find_named(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    NamedBy *nb = cls;
    if (value && !strcasecmp(key, MHD_HTTP_HEADER_CONNECTION) && lists_token(value, nb->name, nb->len)) {
        nb->found = true;
        return MHD_NO;
    }
    return MHD_YES;
}

/* Is `name` (len bytes) hop-by-hop in this request: above, or named by one
 * of the request's Connection headers? */
static bool request_hop(struct MHD_Connection *conn, const char *name, size_t len)
{
    if (httphead_hop_by_hop(name, len))
        return true;
    NamedBy nb = {name, len, false};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, find_named, &nb);
    return nb.found;
}

bool httphead_answer_hop(const struct curl_slist *lines, const char *name, size_t len)
{
    static const char CONN[] = MHD_HTTP_HEADER_CONNECTION ":";
    if (httphead_hop_by_hop(name, len))
        return true;
    for (const struct curl_slist *l = lines; l; l = l->next)
        if (!strncasecmp(l->data, CONN, sizeof CONN - 1) && lists_token(l->data + sizeof CONN - 1, name, len))
            return true;
    return false;
}

/* Is `name` (len bytes, any case) one of the NULL-terminated `names`? */
static bool named_in(const char *const *names, const char *name, size_t len)
{
    for (const char *const *p = names; p && *p; p++)
        if (strlen(*p) == len && !strncasecmp(name, *p, len))
            return true;
    return false;
}

typedef struct RequestCopy {
    struct MHD_Connection *conn;
    const char *const *own, *const *drop;
    bool (*keep)(const char *name, size_t len);
    struct curl_slist *lines;
    bool failed;
} RequestCopy;

static enum MHD_Result copy_request_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    RequestCopy *rc = cls;
    size_t len = strlen(key);
    /* libmicrohttpd 0.9.75 keeps a name as it came, whitespace before the
     * colon included ("Transfer-Encoding : chunked"): the checks of framing,
     * which go by exact names, never see such a field, and a backend that
     * reads it otherwise would frame the body otherwise. */
    if (!name_is_http_token(key, len) || request_hop(rc->conn, key, len) || named_in(rc->own, key, len) ||
        named_in(rc->drop, key, len) || (rc->keep && !rc->keep(key, len)))
        return MHD_YES;
    char *line;
    /* libcurl reads "Name:" as "do not send Name"; "Name;" sends it empty. */
    if (asprintf(&line, value && *value ? "%s: %s" : "%s;", key, value ? value : "") < 0) {
        rc->failed = true;
        return MHD_NO;
    }
    struct curl_slist *l = curl_slist_append(rc->lines, line);
    free(line);
    if (!l) {
        rc->failed = true;
        return MHD_NO;
    }
    rc->lines = l;
    return MHD_YES;
}

bool httphead_pass_request(struct MHD_Connection *conn, const char *const *own, const char *const *drop,
                           struct curl_slist **lines)
{
    return httphead_pass_request_kept(conn, own, drop, NULL, lines);
}

bool httphead_pass_request_kept(struct MHD_Connection *conn, const char *const *own, const char *const *drop,
                                bool (*keep)(const char *name, size_t len), struct curl_slist **lines)
{
    RequestCopy rc = {conn, own, drop, keep, *lines, false};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, copy_request_header, &rc);
    *lines = rc.lines; /* what was appended before a failure is the caller's to free too */
    return !rc.failed;
}

HeadKept httphead_keep_line(struct curl_slist **lines, const char *line, size_t len, HeadLimits limits)
{
    struct curl_slist *prev = NULL, *last = NULL;
    size_t fields = 0, bytes = 0;
    for (struct curl_slist *l = *lines; l; l = l->next) {
        prev = last;
        last = l;
        fields++;
        bytes += strlen(l->data);
    }
    if (len && (line[0] == ' ' || line[0] == '\t')) {
        /* An obs-fold (RFC 9112 5.2): the field goes on. A proxy replaces the
         * fold with a space, so the last line is replaced by the joined one;
         * kept apart, a header its Connection fold names would pass on, and
         * the value would be cut. A fold before any field is dropped. */
        if (!last)
            return HEAD_KEPT;
        size_t skip = 1;
        while (skip < len && (line[skip] == ' ' || line[skip] == '\t'))
            skip++;
        if (bytes + 1 + (len - skip) > limits.bytes)
            return HEAD_TOO_BIG;
        char *joined;
        if (asprintf(&joined, "%s %.*s", last->data, (int)(len - skip), line + skip) < 0)
            return HEAD_NOMEM;
        struct curl_slist *l = curl_slist_append(NULL, joined);
        free(joined);
        if (!l)
            return HEAD_NOMEM;
        *(prev ? &prev->next : lines) = l;
        curl_slist_free_all(last);
        return HEAD_KEPT;
    }
    if (fields >= limits.fields || bytes + len > limits.bytes)
        return HEAD_TOO_BIG;
    char *copy = strndup(line, len);
    struct curl_slist *l = copy ? curl_slist_append(*lines, copy) : NULL;
    free(copy);
    if (!l)
        return HEAD_NOMEM;
    *lines = l;
    return HEAD_KEPT;
}

/* Can the field go into a libmicrohttpd response? Its name must be a token
 * and its value have no CR, LF or NUL (the line ends at the NUL): a
 * malformed field is not passed on (RFC 9110 5.5 lets a proxy drop it).
 * libmicrohttpd 0.9.75 cannot send an empty value either
 * (MHD_add_response_header refuses it), so such a field is dropped too. */
static bool passable(const char *name, size_t len, const char *value)
{
    return name_is_http_token(name, len) && *value && !strpbrk(value, "\r\n");
}

bool httphead_pass_answer(const struct curl_slist *lines, const char *const *own, struct MHD_Response *resp)
{
    for (const struct curl_slist *h = lines; h; h = h->next) {
        const char *colon = strchr(h->data, ':');
        size_t len = colon ? (size_t)(colon - h->data) : 0;
        const char *value = colon ? colon + 1 + strspn(colon + 1, " \t") : NULL;
        /* libmicrohttpd refuses exactly the fields that are not passable, so
         * its refusal of another can only mean it ran out of memory. */
        if (!colon || !passable(h->data, len, value) || httphead_answer_hop(lines, h->data, len) ||
            named_in(own, h->data, len))
            continue;
        char *name = strndup(h->data, len);
        bool ok = name && MHD_add_response_header(resp, name, value) == MHD_YES;
        free(name);
        if (!ok)
            return false;
    }
    return true;
}

static enum MHD_Result check_name(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    (void)kind;
    (void)value;
    (void)value_size;
    bool *ok = cls;
    *ok = name_is_http_token(key, key_size);
    return *ok ? MHD_YES : MHD_NO;
}

bool httphead_names_are_tokens(struct MHD_Connection *conn)
{
    bool ok = true;
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, check_name, &ok);
    return ok;
}

typedef struct Framing {
    unsigned te, cl;
    bool te_chunked; /* the one Transfer-Encoding seen is "chunked" */
} Framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                     const char *value, size_t value_size)
{
    (void)kind;
    (void)key_size;
    Framing *f = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        f->cl++;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->te++;
        /* libmicrohttpd has trimmed the value's surrounding whitespace. */
        f->te_chunked = value && value_size == 7 && !strncasecmp(value, "chunked", 7);
    }
    return MHD_YES;
}

const char *httphead_framing_problem(struct MHD_Connection *conn, bool http11, const char **field)
{
    Framing f = {0, 0, false};
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, count_framing, &f);
    *field = MHD_HTTP_HEADER_TRANSFER_ENCODING;
    if (f.te && !http11)
        return "Transfer-Encoding is not HTTP/1.0 framing: a request with it must be HTTP/1.1";
    if (f.te > 1 || (f.te == 1 && !f.te_chunked))
        return "Transfer-Encoding must be exactly 'chunked' (no other coding, in one header field)";
    if (f.te && f.cl)
        return "a request may not have both Content-Length and Transfer-Encoding";
    *field = MHD_HTTP_HEADER_CONTENT_LENGTH;
    if (f.cl > 1)
        return "a request may have only one Content-Length";
    return NULL;
}

size_t httphead_answer_head_size(const struct curl_slist *lines)
{
    /* "HTTP/1.1 NNN " and the longest reason phrase, "Date: " and 29 bytes,
     * "Connection: Keep-Alive", "Content-Length: " and 20 digits, each with CRLF. */
    size_t n = 64 + 37 + 24 + 38 + 2;
    for (const struct curl_slist *l = lines; l; l = l->next)
        n += strlen(l->data) + 3; /* ": " for ':' at most, and CRLF */
    return n;
}

bool httphead_content_length(struct MHD_Connection *conn, uint64_t *n)
{
    *n = 0;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return true;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (!*cl || *end || errno)
        return false;
    *n = v;
    return true;
}

size_t httphead_answer_fields(unsigned status, const char *content_type, HeadField out[HTTPHEAD_ANSWER_FIELDS])
{
    size_t n = 0;
    out[n++] = (HeadField){MHD_HTTP_HEADER_CONTENT_TYPE, content_type};
    out[n++] = (HeadField){MHD_HTTP_HEADER_CACHE_CONTROL, "no-store"};
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        out[n++] = (HeadField){MHD_HTTP_HEADER_RETRY_AFTER, "1"};
    else if (status == MHD_HTTP_UNAUTHORIZED)
        out[n++] = (HeadField){MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"leasegate\""};
    return n;
}

bool httphead_add_answer_fields(struct MHD_Response *resp, unsigned status, const char *content_type)
{
    HeadField f[HTTPHEAD_ANSWER_FIELDS];
    size_t n = httphead_answer_fields(status, content_type, f);
    for (size_t i = 0; i < n; i++)
        if (MHD_add_response_header(resp, f[i].name, f[i].value) != MHD_YES)
            return false;
    return true;
}
