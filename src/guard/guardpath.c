/* guardpath — canonical targets and path-bound locks; see guardpath.h. */
#include "guard/guardpath.h"

#include <string.h>
#include <strings.h>

#include "core/names.h"

static bool unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

/* RFC 3986 pchar without ";" and "%" (those are judged separately). */
static bool path_char(unsigned char c)
{
    return unreserved(c) || strchr("!$&'()*+,=:@", c) != NULL;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A %XX at p: its byte, or -1 when malformed. */
static int decoded(const char *p)
{
    int hi = hexval((unsigned char)p[1]), lo = hi < 0 ? -1 : hexval((unsigned char)p[2]);
    return lo < 0 ? -1 : hi * 16 + lo;
}

static const char *segment_problem(const char *seg, size_t len, bool last)
{
    if (len == 0)
        return last ? NULL : "empty path segments ('//') are not allowed";
    size_t dots = 0, bytes = 0;
    for (size_t i = 0; i < len; bytes++) {
        unsigned char c = (unsigned char)seg[i];
        if (c == '%') {
            int v = decoded(seg + i);
            if (v < 0)
                return "a malformed percent-encoding";
            if (v == '/' || v == '\\' || v == ';' || v == '%' || v < 0x20 || v == 0x7f)
                return "an encoded '/', '\\', ';', '%' or control byte";
            if (unreserved((unsigned char)v))
                return "a needlessly percent-encoded character (such as %2e for '.')";
            i += 3;
            continue;
        }
        if (c == '\\')
            return "a backslash";
        if (c == ';')
            return "a ';' path parameter";
        if (!path_char(c))
            return "a character that must be percent-encoded";
        dots += c == '.';
        i++;
    }
    if (dots == bytes && (dots == 1 || dots == 2))
        return "a '.' or '..' segment";
    return NULL;
}

const char *guardpath_problem(const char *rest)
{
    size_t plen = strcspn(rest, "?#");
    if (rest[plen] == '#')
        return "a fragment ('#')";
    for (const char *seg = rest; seg <= rest + plen;) {
        size_t len = strcspn(seg, "/?#");
        if (seg + len > rest + plen)
            len = (size_t)(rest + plen - seg);
        bool first = seg == rest;
        bool last = seg + len >= rest + plen;
        /* The segment before a leading "/" is the prefix's, and a trailing
         * "/" names a collection: both may be empty. */
        const char *why = first && len == 0 ? NULL : segment_problem(seg, len, last);
        if (why)
            return why;
        seg += len + 1;
    }
    if (rest[plen] == '?') {
        for (const char *q = rest + plen + 1; *q; q++) {
            unsigned char c = (unsigned char)*q;
            if (c == '%') {
                int v = decoded(q);
                if (v < 0)
                    return "a malformed percent-encoding in the query";
                q += 2;
            } else if (!path_char(c) && c != '/' && c != '?' && c != ';') {
                return "a character in the query that must be percent-encoded";
            }
        }
    }
    return NULL;
}

const char *guardpath_rest_problem(const char *prefix, const char *rest)
{
    size_t n = strlen(prefix);
    if (n && prefix[n - 1] == '/' && rest[0] == '/')
        return "empty path segments ('//') are not allowed";
    return guardpath_problem(rest);
}

bool guardpath_colons(const char *in, size_t n, char *out, size_t outlen, size_t *len)
{
    /* ':' is the one character of a lock name that a client may send either
     * bare or percent-encoded (boto3 sends %3A; curl sends it bare): both name
     * one object to the upstream (S3 and nginx decode it), so both must name
     * one lock, and one object to the guard's own records. Every other escape
     * stays, and is no lock name's ('%'). */
    if (outlen == 0)
        return false;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + 1 >= outlen) /* no room for this byte and the NUL */
            return false;
        if (in[i] == '%' && i + 2 < n && in[i + 1] == '3' && (in[i + 2] == 'A' || in[i + 2] == 'a')) {
            out[o++] = ':';
            i += 2;
        } else {
            out[o++] = in[i];
        }
    }
    out[o] = '\0';
    *len = o;
    return true;
}

const char *guardpath_lock(const char *rest, char *out, size_t outlen, const char **problem)
{
    size_t plen = strcspn(rest, "?");
    const char *p = rest;
    if (*p == '/') {
        p++;
        plen--;
    }
    if (plen == 0) {
        *problem = "the path below the prefix is empty";
        return NULL;
    }
    /* The limit is the name's, after %3A is read as ':' (boto3's 254-byte key
     * with two ':' is 258 bytes on the wire). */
    size_t len = 0;
    if (!guardpath_colons(p, plen, out, outlen, &len) || len > NAME_MAX_BYTES) {
        *problem = "the path below the prefix is longer than a lock name (256 bytes)";
        return NULL;
    }
    *problem = name_lock_problem(out);
    return *problem ? NULL : out;
}

const char *guardpath_header_problem(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return "a header value holds a control character (CR, LF, NUL, ...)";
    }
    return NULL;
}

/* Does `path` lie under `prefix`, by whole segments? Then where the rest starts. */
static const char *below_prefix(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n) != 0)
        return NULL;
    char next = path[n];
    return prefix[n - 1] == '/' || next == '\0' || next == '/' ? path + n : NULL;
}

const char *guardpath_destination(const char *dest, const char *host, const char *prefix, char *rest,
                                  size_t restlen, const char **problem)
{
    const char *path = dest;
    if (*dest != '/') {
        size_t scheme = !strncasecmp(dest, "http://", 7) ? 7 : !strncasecmp(dest, "https://", 8) ? 8 : 0;
        if (!scheme) {
            *problem = "it must be an absolute path or an absolute http(s) URI of this server";
            return NULL;
        }
        const char *auth = dest + scheme;
        size_t alen = strcspn(auth, "/?#");
        if (!host || !*host || alen != strlen(host) || strncasecmp(auth, host, alen) != 0) {
            *problem = "its host is not the one this request was sent to (Host)";
            return NULL;
        }
        path = auth + alen;
        if (*path != '/') {
            *problem = "it has no path";
            return NULL;
        }
    }
    if (strpbrk(path, "?#")) {
        *problem = "it has a query or a fragment";
        return NULL;
    }
    const char *below = below_prefix(path, prefix);
    if (!below) {
        *problem = "it is not under this guard's prefix";
        return NULL;
    }
    const char *why = guardpath_rest_problem(prefix, below);
    if (why) {
        *problem = why;
        return NULL;
    }
    size_t n = strlen(below);
    if (n >= restlen) {
        *problem = "it is too long";
        return NULL;
    }
    memcpy(rest, below, n + 1);
    return rest;
}

/* The byte of the path at *p, decoded, and *p moved past it; -1 at its end. */
static int next_path_byte(const char **p)
{
    const char *c = *p;
    if (!*c || *c == '?')
        return -1;
    int v = *c == '%' ? decoded(c) : -1;
    *p = c + (v < 0 ? 1 : 3);
    return v < 0 ? (unsigned char)*c : v;
}

bool guardpath_same_resource(const char *a, const char *b)
{
    for (;;) {
        int x = next_path_byte(&a), y = next_path_byte(&b);
        if (x != y)
            return false;
        if (x < 0)
            return true;
    }
}

bool guardpath_if_names_resource(const char *value)
{
    /* Outside parentheses, only whitespace may stand (No-tag-list); a "<"
     * there opens a Resource-Tag. Inside, "<...>" are state tokens and
     * "[...]" entity tags: skipped whole, so a ")" in them closes nothing. */
    int depth = 0;
    for (const char *p = value; *p; p++) {
        char c = *p;
        if (c == '<' || c == '[') {
            if (depth == 0)
                return true;
            const char *close = strchr(p, c == '<' ? '>' : ']');
            if (!close)
                return true;
            p = close;
        } else if (c == '(') {
            if (depth++)
                return true;
        } else if (c == ')') {
            if (depth-- == 0)
                return true;
        } else if (depth == 0 && c != ' ' && c != '\t') {
            return true;
        }
    }
    return depth != 0;
}
