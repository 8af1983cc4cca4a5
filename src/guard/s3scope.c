/* s3scope — a key's listing of an S3 route; see s3scope.h. */
#include "guard/s3scope.h"

#include <stdio.h>
#include <string.h>

static bool starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

bool s3scope_common(const char *key_prefix, const char *prefix, const char *delimiter, char *out, size_t outlen)
{
    if (!*delimiter || !starts_with(key_prefix, prefix))
        return false;
    const char *d = strstr(key_prefix + strlen(prefix), delimiter);
    if (!d)
        return false;
    size_t n = (size_t)(d - key_prefix) + strlen(delimiter);
    if (n >= outlen)
        return false;
    snprintf(out, outlen, "%.*s", (int)n, key_prefix);
    return true;
}

S3ScopeKind s3scope_plan(char *const *prefixes, size_t n, const char *prefix, const char *delimiter, size_t *which)
{
    size_t under = 0, rolled = 0;
    *which = 0;
    for (size_t i = 0; i < n; i++) {
        if (starts_with(prefix, prefixes[i]))
            return S3SCOPE_ALL;
        if (!starts_with(prefixes[i], prefix))
            continue;
        under++;
        *which = i;
        if (*delimiter && strstr(prefixes[i] + strlen(prefix), delimiter))
            rolled++;
    }
    if (!under)
        return S3SCOPE_NOTHING;
    if (rolled == under)
        return S3SCOPE_PREFIXES;
    /* One key prefix, which the delimiter does not cut: the store's roll-up
     * below it is the one below the client's prefix, unless a delimiter of
     * several characters could begin inside it and end after it. */
    if (under == 1 && strlen(delimiter) <= 1)
        return S3SCOPE_NARROW;
    return S3SCOPE_REFUSED;
}
