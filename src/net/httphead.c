/* httphead — header helpers; see include/leasegate/httphead.h. */
#include "leasegate/httphead.h"

#include <curl/curl.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

bool httphead_request_hop(struct MHD_Connection *conn, const char *name, size_t len)
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
