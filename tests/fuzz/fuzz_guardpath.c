/*
 * fuzz_guardpath — the guard's canonical-target, path-bound lock and header
 * rules (src/guard/guardpath.h, src/core/names.h) on
 * arbitrary bytes:
 *
 *  - guardpath_problem agrees with a reference written from guardpath.h: a
 *    target is canonical exactly when it has no '#', its path (before '?')
 *    has no dot segment, no empty segment (but the one before a leading '/'
 *    and the one after a trailing '/'), no backslash, no ';', no encoded '/',
 *    '\', ';', '%', NUL or control byte, no needlessly encoded unreserved
 *    character, and only RFC 3986 path characters; its query only query
 *    characters and well-formed %XX;
 *  - and, spelled out, for every accepted target: no "."/".." segment, raw or
 *    after percent-decoding; decoding does not add or split segments; no
 *    "%2f", "%5c", "%00", "%25", "%3b" in any case; no backslash or ';';
 *  - guardpath_lock: a name it returns passes name_lock_problem (and a
 *    reference of it), is the path without its query and one leading '/'
 *    (each %3A read as ':'), fits outlen (the buffer is exactly outlen bytes,
 *    so ASan sees any overflow); it returns NULL exactly when it sets a
 *    problem; it binds every path whose name so decoded is a lock name that
 *    fits outlen (the limit is the decoded name's, not the path's);
 *  - guardpath_header_problem refuses exactly the values with a byte < 0x20
 *    other than TAB, or 0x7f, and reads no byte past len;
 *  - name_is_http_token (names.h; http.c refuses a request with any other
 *    header name) accepts exactly the non-empty names made of RFC 9110
 *    token characters, and reads no byte past len;
 *  - guardpath_rest_problem is guardpath_problem but for a leading '/' after
 *    a prefix that ends in one;
 *  - guardpath_destination, the same bytes as a COPY's or MOVE's Destination
 *    under one of several prefixes and Hosts (the first byte picks them, and
 *    the buffer's size): it agrees with a reference written from guardpath.h;
 *    an accepted Destination's rest is canonical by guardpath_problem and has
 *    the spelled-out properties above, has no '?' or '#', fits the buffer, and
 *    is exactly what follows the prefix in the Destination's path, the prefix
 *    matched by whole segments, with no "//" where they meet; an absolute URI is accepted only with an http
 *    or https scheme and an authority equal to the Host (any case); a refusal
 *    always says why, and nothing is written past the buffer;
 *  - guardpath_if_names_resource, the same bytes as an If header: false only
 *    for one or more untagged lists, checked by a tokenizer of its own (lists
 *    of state tokens "<...>", entity tags "[...]" and other bytes, no nesting,
 *    only whitespace between them); a tagged list put before or after any
 *    value names a resource, and an untagged list put before one that names
 *    none names none.
 */
#include <stdbool.h>
#include <strings.h>

#include "core/names.h"
#include "fuzz.h"
#include "guard/guardpath.h"

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)

static bool is_unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

/* RFC 3986: pchar = unreserved / pct-encoded / sub-delims / ":" / "@" */
static bool is_sub_delim(unsigned char c) { return c && strchr("!$&'()*+,;=", c) != NULL; }

static int hex(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The reference: is this segment of the path acceptable? */
static bool ref_segment(const char *s, size_t len)
{
    size_t chars = 0, dots = 0;
    for (size_t i = 0; i < len; chars++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= len)
                return false;
            int hi = hex((unsigned char)s[i + 1]), lo = hex((unsigned char)s[i + 2]);
            if (hi < 0 || lo < 0)
                return false;
            int v = hi * 16 + lo;
            if (v == '/' || v == '\\' || v == ';' || v == '%' || v < 0x20 || v == 0x7f || is_unreserved((unsigned char)v))
                return false;
            i += 3;
            continue;
        }
        if (c == '\\' || c == ';')
            return false;
        if (!(is_unreserved(c) || (is_sub_delim(c) && c != ';') || c == ':' || c == '@'))
            return false;
        dots += c == '.';
        i++;
    }
    return !(dots == chars && (chars == 1 || chars == 2));
}

static bool ref_canonical(const char *rest)
{
    if (strchr(rest, '#'))
        return false;
    size_t plen = strcspn(rest, "?");
    /* segments of rest[0, plen) */
    size_t start = 0;
    for (;;) {
        size_t end = start;
        while (end < plen && rest[end] != '/')
            end++;
        bool first = start == 0, last = end == plen;
        size_t len = end - start;
        if (len == 0) {
            if (!first && !last)
                return false;
        } else if (!ref_segment(rest + start, len)) {
            return false;
        }
        if (last)
            break;
        start = end + 1;
    }
    if (rest[plen] == '?') {
        for (const char *q = rest + plen + 1; *q;) {
            unsigned char c = (unsigned char)*q;
            if (c == '%') {
                if (hex((unsigned char)q[1]) < 0 || hex((unsigned char)q[2]) < 0)
                    return false;
                q += 3;
                continue;
            }
            if (!(is_unreserved(c) || is_sub_delim(c) || c == ':' || c == '@' || c == '/' || c == '?'))
                return false;
            q++;
        }
    }
    return true;
}

static bool ref_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 256)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("._~:/-", c))))
            return false;
    }
    const char *slash = strrchr(name, '/');
    const char *last = slash ? slash + 1 : name;
    return strcmp(last, "acquire") && strcmp(last, "renew") && strcmp(last, "release") && strcmp(last, "history") &&
           strcmp(last, "value");
}

/* The spelled-out properties of an accepted target's path. */
static void check_accepted(const char *rest)
{
    size_t plen = strcspn(rest, "?");
    CHECK(!strchr(rest, '#'), "accepted a target with a fragment: '%s'", rest);
    for (size_t i = 0; i < plen; i++) {
        CHECK(rest[i] != '\\' && rest[i] != ';', "accepted a path with '\\' or ';': '%s'", rest);
        CHECK((unsigned char)rest[i] > 0x20 && (unsigned char)rest[i] < 0x7f, "accepted a raw byte 0x%02x: '%s'",
              (unsigned char)rest[i], rest);
        if (rest[i] == '%') {
            CHECK(i + 2 < plen, "accepted a truncated %%-encoding: '%s'", rest);
            static const char *const BAD[] = {"%2f", "%5c", "%00", "%25", "%3b", "%2e", "%0a", "%0d", "%7f"};
            for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++)
                CHECK(strncasecmp(rest + i, BAD[k], 3) != 0, "accepted '%s' in the path: '%s'", BAD[k], rest);
        }
    }
    /* Decode every %XX: the segments must stay the same and none may be a dot segment. */
    char decoded[4096];
    size_t dn = 0;
    int raw_slashes = 0, dec_slashes = 0;
    for (size_t i = 0; i < plen && dn + 1 < sizeof decoded;) {
        if (rest[i] == '%') {
            decoded[dn++] = (char)(hex((unsigned char)rest[i + 1]) * 16 + hex((unsigned char)rest[i + 2]));
            i += 3;
        } else {
            raw_slashes += rest[i] == '/';
            decoded[dn++] = rest[i++];
        }
    }
    decoded[dn] = '\0';
    for (size_t i = 0; i < dn; i++) {
        dec_slashes += decoded[i] == '/';
        CHECK(decoded[i] != '\\' && decoded[i] != ';' && decoded[i] != '\0' && (unsigned char)decoded[i] >= 0x20 &&
                  decoded[i] != 0x7f,
              "accepted a path that decodes to byte 0x%02x: '%s'", (unsigned char)decoded[i], rest);
    }
    CHECK(raw_slashes == dec_slashes, "decoding '%s' adds a '/'", rest);
    for (char *seg = decoded;;) {
        char *slash = strchr(seg, '/');
        size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
        CHECK(!(len == 1 && seg[0] == '.') && !(len == 2 && seg[0] == '.' && seg[1] == '.'),
              "accepted a dot segment: '%s'", rest);
        CHECK(len > 0 || seg == decoded || !slash, "accepted an empty segment: '%s'", rest);
        if (!slash)
            break;
        seg = slash + 1;
    }
}

static void check_lock(const char *rest, size_t outlen, bool canonical)
{
    char *out = malloc(outlen);
    CHECK(out != NULL, "out of memory");
    /* Its path, each %3A (either case) read as ':' (guardpath.h). */
    const char *p = rest[0] == '/' ? rest + 1 : rest;
    size_t plen = strcspn(p, "?"), n = 0;
    char *want = malloc(plen + 1);
    CHECK(want != NULL, "out of memory");
    for (size_t i = 0; i < plen; i++) {
        bool colon = i + 2 < plen && p[i] == '%' && p[i + 1] == '3' && (p[i + 2] == 'A' || p[i + 2] == 'a');
        want[n++] = colon ? ':' : p[i];
        i += colon ? 2 : 0;
    }
    want[n] = '\0';
    const char *problem = (const char *)1;
    const char *name = guardpath_lock(rest, out, outlen, &problem);
    CHECK(!name == !!problem, "guardpath_lock returned %s with problem %s", name ? "a name" : "NULL",
          problem ? "set" : "NULL");
    /* The limit is the decoded name's: a lock name that fits out is bound,
     * however long its %3A make the path. */
    CHECK(name || n >= outlen || !ref_name_ok(want) || name_lock_problem(want) != NULL,
          "guardpath_lock refused '%s', whose lock '%s' fits %zu bytes: %s", rest, want, outlen, problem);
    if (name) {
        CHECK(name == out, "guardpath_lock returned a name outside out");
        CHECK(strlen(name) < outlen, "the name does not fit outlen");
        CHECK(name_lock_problem(name) == NULL, "guardpath_lock gave '%s', which name_lock_problem refuses", name);
        CHECK(ref_name_ok(name), "guardpath_lock gave '%s', which is not a lock name", name);
        CHECK(!strcmp(name, want), "guardpath_lock('%s') = '%s', not its path", rest, name);
        if (canonical) {
            /* a lock bound by a canonical path: no dot or empty inner segment */
            for (const char *seg = name;;) {
                const char *slash = strchr(seg, '/');
                size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
                CHECK(!(len == 1 && seg[0] == '.') && !(len == 2 && !strncmp(seg, "..", 2)),
                      "canonical '%s' binds lock '%s' with a dot segment", rest, name);
                CHECK(len > 0 || !slash, "canonical '%s' binds lock '%s' with an empty segment", rest, name);
                if (!slash)
                    break;
                seg = slash + 1;
            }
        }
    }
    free(want);
    free(out);
}

static const char *const PREFIXES[] = {"/store/", "/store", "/s", "/a/b/"};
static const char *const HOSTS[] = {"gw:8080", "GW.example", "", NULL};

static bool starts_ci(const char *s, const char *with) { return strncasecmp(s, with, strlen(with)) == 0; }

/* The reference: the rest guardpath_destination must give for dest, or NULL. */
static const char *ref_destination(const char *dest, const char *host, const char *prefix, size_t restlen)
{
    const char *path = dest;
    if (dest[0] != '/') {
        const char *auth = starts_ci(dest, "http://") ? dest + 7 : starts_ci(dest, "https://") ? dest + 8 : NULL;
        if (!auth || !host || !host[0])
            return NULL;
        size_t alen = 0;
        while (auth[alen] && auth[alen] != '/' && auth[alen] != '?' && auth[alen] != '#')
            alen++;
        if (alen != strlen(host) || strncasecmp(auth, host, alen) != 0 || auth[alen] != '/')
            return NULL;
        path = auth + alen;
    }
    if (strchr(path, '?') || strchr(path, '#'))
        return NULL;
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n) != 0)
        return NULL;
    const char *below = path + n;
    if (prefix[n - 1] != '/' && below[0] != '\0' && below[0] != '/')
        return NULL;
    if (prefix[n - 1] == '/' && below[0] == '/')
        return NULL; /* "//": an empty segment */
    if (!ref_canonical(below) || strlen(below) >= restlen)
        return NULL;
    return below;
}

static void check_destination(const char *dest, const uint8_t pick)
{
    const char *prefix = PREFIXES[(pick >> 2) % 4];
    const char *host = HOSTS[(pick >> 4) % 4];
    size_t restlen = pick % 4 == 0 ? 4096 : 1 + (size_t)(pick >> 2);
    char *out = malloc(restlen);
    CHECK(out != NULL, "out of memory");
    const char *rp = guardpath_rest_problem(prefix, dest);
    CHECK(!rp == (!(prefix[strlen(prefix) - 1] == '/' && dest[0] == '/') && !guardpath_problem(dest)),
          "guardpath_rest_problem('%s', '%s') %s it", prefix, dest, rp ? "refuses" : "accepts");
    const char *problem = NULL;
    const char *rest = guardpath_destination(dest, host, prefix, out, restlen, &problem);
    const char *ref = ref_destination(dest, host, prefix, restlen);
    CHECK(!rest == !ref, "guardpath_destination('%s', host '%s', prefix '%s', %zu bytes) %s it (%s), the reference %s it",
          dest, host ? host : "(none)", prefix, restlen, rest ? "accepts" : "refuses", problem ? problem : "-",
          ref ? "accepts" : "refuses");
    if (!rest) {
        CHECK(problem != NULL && problem[0], "a refused Destination '%s' with no reason", dest);
        free(out);
        return;
    }
    CHECK(rest == out, "the rest of '%s' is not in the buffer", dest);
    CHECK(!strcmp(rest, ref), "the rest of '%s' is '%s', not '%s'", dest, rest, ref);
    CHECK(strlen(rest) < restlen, "the rest of '%s' does not fit %zu bytes", dest, restlen);
    CHECK(guardpath_problem(rest) == NULL, "the rest '%s' of '%s' is not canonical", rest, dest);
    CHECK(!strchr(rest, '?') && !strchr(rest, '#'), "the rest '%s' of '%s' has a query or fragment", rest, dest);
    check_accepted(rest);
    /* The Destination's path is the prefix followed by the rest, by whole segments. */
    size_t dn = strlen(dest), rn = strlen(rest), pn = strlen(prefix);
    CHECK(dn >= rn + pn && !strcmp(dest + dn - rn, rest) && !strncmp(dest + dn - rn - pn, prefix, pn),
          "'%s' is not '%s' + '%s' at its end", dest, prefix, rest);
    CHECK(prefix[pn - 1] == '/' || rest[0] == '\0' || rest[0] == '/', "'%s' is under '%s' by part of a segment", dest,
          prefix);
    CHECK(!strstr(dest + dn - rn - pn, "//"), "the path of '%s' has an empty segment", dest);
    if (dest[0] != '/') {
        CHECK(host && host[0], "the absolute URI '%s' was taken without a Host", dest);
        const char *auth = starts_ci(dest, "http://") ? dest + 7 : starts_ci(dest, "https://") ? dest + 8 : NULL;
        CHECK(auth != NULL, "'%s' has no http(s) scheme", dest);
        size_t hn = strlen(host);
        CHECK(!strncasecmp(auth, host, hn) && auth + hn == dest + dn - rn - pn,
              "the authority of '%s' is not the Host '%s'", dest, host);
    } else {
        CHECK(dn == rn + pn, "the path '%s' has more than the prefix and the rest", dest);
    }
    free(out);
}

/* A tokenizer of If headers of its own: true when value is one or more
 * untagged lists "( ... )" separated by whitespace, each holding state tokens
 * "<...>", entity tags "[...]" and other bytes but no "(" or ")" outside them. */
static bool only_untagged_lists(const char *value)
{
    const char *p = value;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            return true;
        if (*p != '(')
            return false;
        for (p++; *p != ')'; p++) {
            if (!*p || *p == '(')
                return false;
            if (*p == '<' || *p == '[') {
                const char *end = strchr(p + 1, *p == '<' ? '>' : ']');
                if (!end)
                    return false;
                p = end;
            }
        }
        p++;
    }
}

static void check_if(const char *value)
{
    bool names = guardpath_if_names_resource(value);
    CHECK(names == !only_untagged_lists(value), "guardpath_if_names_resource('%s') = %d, the tokenizer says %d", value,
          names, !only_untagged_lists(value));
    size_t n = strlen(value);
    char *v = malloc(n + 64);
    CHECK(v != NULL, "out of memory");
    snprintf(v, n + 64, "<http://x/other> %s", value);
    CHECK(guardpath_if_names_resource(v), "a tagged list before '%s' names nothing", value);
    snprintf(v, n + 64, "%s <http://x/other> (<urn:a>)", value);
    CHECK(guardpath_if_names_resource(v), "a tagged list after '%s' names nothing", value);
    snprintf(v, n + 64, "(<urn:a> [\"e\"]) %s", value);
    CHECK(guardpath_if_names_resource(v) == names, "an untagged list before '%s' changes the answer", value);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* Header values: every byte, with NULs, in a buffer of exactly len bytes. */
    size_t hlen = size - 1;
    char *value = malloc(hlen ? hlen : 1);
    CHECK(value != NULL, "out of memory");
    memcpy(value, data + 1, hlen);
    bool want_ok = true;
    for (size_t i = 0; i < hlen; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            want_ok = false;
    }
    const char *hp = guardpath_header_problem(value, hlen);
    CHECK(!hp == want_ok, "guardpath_header_problem says %s for a value that %s a control byte", hp ? "no" : "yes",
          want_ok ? "has no" : "has");
    bool token = hlen > 0;
    for (size_t i = 0; i < hlen; i++) {
        unsigned char c = (unsigned char)value[i];
        bool alnum = ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9');
        token = token && (alnum || (c && strchr("!#$%&'*+-.^_`|~", c)));
    }
    bool ok = name_is_http_token(value, hlen);
    CHECK(ok == token, "name_is_http_token says %s for a name that %s a token", ok ? "yes" : "no",
          token ? "is" : "is not");
    free(value);

    /* Targets: the bytes after the first, up to a NUL. */
    char *rest = malloc(size);
    CHECK(rest != NULL, "out of memory");
    memcpy(rest, data + 1, size - 1);
    rest[size - 1] = '\0';
    const char *problem = guardpath_problem(rest);
    bool ref = ref_canonical(rest);
    CHECK(!problem == ref, "guardpath_problem('%s') %s it (%s), the reference %s it", rest,
          problem ? "refuses" : "accepts", problem ? problem : "-", ref ? "accepts" : "refuses");
    if (!problem)
        check_accepted(rest);
    size_t outlen = data[0] % 4 == 0 ? NAME_MAX_BYTES + 1 : 1 + (size_t)data[0];
    check_lock(rest, outlen, !problem);
    check_destination(rest, data[0]);
    check_if(rest);
    free(rest);
    return 0;
}
