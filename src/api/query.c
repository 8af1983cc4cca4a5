/* query — query-parameter checks; see query.h. */
#include "api/query.h"

#include <errno.h>
#include <stdlib.h>

bool query_int(Request *req, const char *name, long long min, long long max, long long def, long long *out)
{
    const char *v = http_query(req, name);
    *out = def;
    if (!v)
        return true;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < min || n > max) {
        http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", name),
                         "query parameter '%s' must be an integer in %lld..%lld", name, min, max);
        return false;
    }
    *out = n;
    return true;
}
