/* httphead — header helpers; see include/leasegate/httphead.h. */
#include "leasegate/httphead.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool httphead_has_token(const char *list, const char *token)
{
    size_t n = strlen(token);
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
