/* s3copy — a CopyObject's source; see s3copy.h. */
#include "guard/s3copy.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

S3CopySource s3copy_source(const char *value, char *path, size_t pathlen)
{
    while (*value == ' ' || *value == '\t')
        value++;
    if (*value == '/')
        value++;
    size_t n = strcspn(value, "?");
    const char *query = value[n] == '?' ? value + n + 1 : NULL;
    if (query && !strncmp(query, "versionId=", 10))
        return S3COPY_VERSION;
    /* A bucket, a '/' and a key that is not empty; no other query. */
    const char *slash = memchr(value, '/', n);
    if (query || !slash || slash == value || slash + 1 == value + n || n + 2 > pathlen)
        return S3COPY_MALFORMED;
    snprintf(path, pathlen, "/%.*s", (int)n, value);
    return S3COPY_PATH;
}

/* One ETag without its quotes (and a weak one's W/). */
static void bare(const char *s, size_t n, const char **out, size_t *outn)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n >= 2 && !strncmp(s, "W/", 2))
        s += 2, n -= 2;
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"')
        s++, n -= 2;
    *out = s;
    *outn = n;
}

bool s3copy_etag_matches(const char *list, const char *etag)
{
    const char *e;
    size_t en;
    bare(etag, strlen(etag), &e, &en);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        const char *t;
        size_t tn;
        bare(p, n, &t, &tn);
        if ((tn == 1 && *t == '*') || (tn == en && !memcmp(t, e, en)))
            return true;
        p += n;
        if (*p == ',')
            p++;
    }
    return false;
}

bool s3copy_carried(const char *name, size_t len)
{
    static const char *const CONTENT[] = {"Content-Type",     "Cache-Control",    "Content-Disposition",
                                          "Content-Encoding", "Content-Language", "Expires",
                                          NULL};
    for (const char *const *c = CONTENT; *c; c++)
        if (strlen(*c) == len && !strncasecmp(*c, name, len))
            return true;
    static const char META[] = "x-amz-meta-", FENCE[] = "x-amz-meta-fencing-token", OWN[] = "x-amz-meta-leasegate-";
    return len > sizeof META - 1 && !strncasecmp(name, META, sizeof META - 1) &&
           !(len == sizeof FENCE - 1 && !strncasecmp(name, FENCE, len)) &&
           !(len >= sizeof OWN - 1 && !strncasecmp(name, OWN, sizeof OWN - 1));
}
