/* guardroute — --guard specs; see guardroute.h. */
#include "guard/guardroute.h"

#include <stdio.h>
#include <string.h>

#include "core/names.h"

static const char *const DEFAULT_METHODS[] = {"GET", "HEAD", "OPTIONS", "PUT", "POST", "PATCH", "DELETE"};

static const char *const S3_METHODS[] = {"GET", "HEAD", "PUT", "POST", "DELETE"};

/* The route's options, which a spec may give after UPSTREAM. */
enum { OPT_LOCK, OPT_METHODS, OPT_REGION, OPT_ENDPOINT, OPT_ELECTION, OPT_COUNT };
static const char *const OPTIONS[OPT_COUNT] = {"lock", "methods", "region", "endpoint", "election"};

bool guardroute_is_read(const char *method)
{
    return !strcmp(method, "GET") || !strcmp(method, "HEAD") || !strcmp(method, "OPTIONS");
}

const GuardRoute *guardroute_match(const GuardRoute *routes, size_t n, const char *raw_uri)
{
    for (size_t i = 0; i < n; i++) {
        const GuardRoute *g = &routes[i];
        size_t len = strlen(g->prefix);
        if (strncmp(raw_uri, g->prefix, len) != 0) {
            /* An S3 route's prefix without its slash is the bucket itself (a listing). */
            if (g->kind == GUARD_S3 && len > 1 && g->prefix[len - 1] == '/' && !strncmp(raw_uri, g->prefix, len - 1) &&
                (raw_uri[len - 1] == '\0' || raw_uri[len - 1] == '?'))
                return g;
            continue;
        }
        char next = raw_uri[len];
        if (g->prefix[len - 1] == '/' || next == '\0' || next == '/' || next == '?')
            return g;
    }
    return NULL;
}

bool guardroute_allows(const GuardRoute *r, const char *method)
{
    for (size_t i = 0; i < r->nmethods; i++)
        if (!strcmp(r->methods[i], method))
            return true;
    return false;
}

static bool add_method(GuardRoute *r, const char *m, size_t len, char *err, size_t errlen)
{
    if (len == 0 || len > GUARD_METHOD_MAX || !name_is_http_token(m, len)) {
        snprintf(err, errlen, "--guard: methods=: '%.*s' is not a method name (a token of at most %d bytes)",
                 (int)(len > 40 ? 40 : len), m, GUARD_METHOD_MAX);
        return false;
    }
    char name[GUARD_METHOD_MAX + 1];
    memcpy(name, m, len);
    name[len] = '\0';
    /* Methods are case-sensitive (RFC 9110 9.1): "put" would never match a PUT. */
    for (size_t i = 0; i < len; i++) {
        if (name[i] >= 'a' && name[i] <= 'z') {
            snprintf(err, errlen, "--guard: methods=: '%s' is not upper case (methods are case-sensitive)", name);
            return false;
        }
    }
    if (!strcmp(name, "CONNECT") || !strcmp(name, "TRACE")) {
        snprintf(err, errlen, "--guard: methods=: %s is never forwarded (%s)", name,
                 !strcmp(name, "CONNECT") ? "it opens a tunnel past every check" : "it echoes the request back");
        return false;
    }
    if (guardroute_allows(r, name)) {
        snprintf(err, errlen, "--guard: methods=: %s is listed twice", name);
        return false;
    }
    if (r->nmethods == GUARD_MAX_METHODS) {
        snprintf(err, errlen, "--guard: methods=: at most %d methods", GUARD_MAX_METHODS);
        return false;
    }
    snprintf(r->methods[r->nmethods++], sizeof r->methods[0], "%s", name);
    return true;
}

static bool parse_methods(GuardRoute *r, const char *list, char *err, size_t errlen)
{
    r->nmethods = 0;
    for (const char *p = list;;) {
        size_t len = strcspn(p, "+");
        if (!add_method(r, p, len, err, errlen))
            return false;
        if (!p[len])
            return true;
        p += len + 1;
    }
}

static void write_allow(GuardRoute *r)
{
    size_t off = 0;
    r->allow[0] = '\0';
    for (size_t i = 0; i < r->nmethods; i++)
        off += (size_t)snprintf(r->allow + off, sizeof r->allow - off, "%s%s", i ? ", " : "", r->methods[i]);
}

/* A region name: lower-case letters, digits and '-'. */
static bool region_ok(const char *v)
{
    if (!*v)
        return false;
    for (const char *p = v; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
            return false;
    return true;
}

/* s3://BUCKET[/KEYPREFIX]: a bucket name as S3 allows it (3..63 of [a-z0-9.-]),
 * a key prefix of lock-name characters, without empty or dot segments. */
static bool parse_bucket(GuardRoute *r, char *err, size_t errlen)
{
    const char *b = r->upstream + 5;
    size_t blen = strcspn(b, "/");
    bool ok = blen >= 3 && blen < sizeof r->bucket;
    for (size_t i = 0; ok && i < blen; i++)
        ok = (b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' || b[i] == '-';
    if (!ok) {
        snprintf(err, errlen, "--guard: '%.300s': the bucket name must be 3 to 63 of a-z, 0-9, '.' and '-'",
                 r->upstream);
        return false;
    }
    memcpy(r->bucket, b, blen);
    const char *kp = b + blen;
    if (*kp == '/')
        kp++;
    size_t klen = strlen(kp);
    while (klen && kp[klen - 1] == '/')
        klen--;
    if (klen >= sizeof r->keyprefix) {
        snprintf(err, errlen, "--guard: the key prefix of '%.60s...' is too long", r->upstream);
        return false;
    }
    memcpy(r->keyprefix, kp, klen);
    if (klen && (name_problem(r->keyprefix) || strstr(r->keyprefix, "//") || r->keyprefix[0] == '/' ||
                 !strcmp(r->keyprefix, ".") || !strncmp(r->keyprefix, "./", 2) || strstr(r->keyprefix, "/./") ||
                 strstr(r->keyprefix, "..") )) {
        snprintf(err, errlen, "--guard: key prefix '%s' must be of [A-Za-z0-9._~:/-], without empty, '.' or '..' "
                              "segments", r->keyprefix);
        return false;
    }
    return true;
}

/* endpoint=scheme://host[:port][/]: where path-style requests go. */
static bool parse_endpoint(GuardRoute *r, const char *v, char *err, size_t errlen)
{
    size_t n = strlen(v);
    while (n && v[n - 1] == '/')
        n--;
    size_t scheme = !strncmp(v, "http://", 7) ? 7 : !strncmp(v, "https://", 8) ? 8 : 0;
    if (!scheme || n <= scheme || n >= sizeof r->endpoint || memchr(v + scheme, '/', n - scheme) ||
        memchr(v, '?', n) || memchr(v, '@', n)) {
        snprintf(err, errlen, "--guard: endpoint '%.300s' must be http(s)://HOST[:PORT], without a path", v);
        return false;
    }
    memcpy(r->endpoint, v, n);
    r->endpoint[n] = '\0';
    return true;
}

/* The option that starts at p (",NAME=..."), or -1. */
static int option_at(const char *p)
{
    if (*p != ',')
        return -1;
    for (size_t i = 0; i < sizeof OPTIONS / sizeof OPTIONS[0]; i++) {
        size_t n = strlen(OPTIONS[i]);
        if (!strncmp(p + 1, OPTIONS[i], n) && p[1 + n] == '=')
            return (int)i;
    }
    return -1;
}

bool guardroute_parse(const char *spec, GuardRoute *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    const char *eq = strchr(spec, '=');
    size_t plen = eq ? (size_t)(eq - spec) : 0;
    if (!eq || plen == 0 || spec[0] != '/' || plen >= sizeof r->prefix) {
        snprintf(err, errlen,
                 "--guard: '%.300s' is not PREFIX=UPSTREAM with PREFIX starting with / (e.g. "
                 "/store/=http://127.0.0.1:9000/)",
                 spec);
        return false;
    }
    memcpy(r->prefix, spec, plen);
    /* The upstream URL ends where the first known option starts. */
    const char *up = eq + 1, *end = up;
    while (*end && option_at(end) < 0)
        end++;
    size_t ulen = (size_t)(end - up);
    r->kind = !strncmp(up, "s3://", 5) ? GUARD_S3 : GUARD_HTTP;
    if ((r->kind == GUARD_HTTP && strncmp(up, "http://", 7) && strncmp(up, "https://", 8)) ||
        ulen >= sizeof r->upstream || ulen <= 5 || (r->kind == GUARD_HTTP && ulen <= 8)) {
        snprintf(err, errlen, "--guard: upstream '%.*s' must be an http://, https:// or s3:// URL",
                 (int)(ulen > 300 ? 300 : ulen), up);
        return false;
    }
    memcpy(r->upstream, up, ulen);
    if (r->kind == GUARD_S3 && !parse_bucket(r, err, errlen))
        return false;
    bool seen[OPT_COUNT] = {false};
    for (const char *p = end; *p;) {
        int opt = option_at(p);
        const char *val = p + 2 + strlen(OPTIONS[opt]);
        size_t vlen = strcspn(val, ",");
        char v[1024];
        if (seen[opt] || vlen >= sizeof v) {
            snprintf(err, errlen, "--guard: %s= %s", OPTIONS[opt], seen[opt] ? "is given twice" : "is too long");
            return false;
        }
        seen[opt] = true;
        memcpy(v, val, vlen);
        v[vlen] = '\0';
        p = val + vlen;
        if (*p && option_at(p) < 0) {
            snprintf(err, errlen, "--guard: unknown option '%.60s' (known: lock=NAME, election=NAME, methods=M1+M2, and for s3:// region=R, endpoint=URL)", p + 1);
            return false;
        }
        if ((opt == OPT_LOCK && seen[OPT_ELECTION]) || (opt == OPT_ELECTION && seen[OPT_LOCK])) {
            snprintf(err, errlen, "--guard: lock= and election= exclude each other (a route binds to one of them)");
            return false;
        }
        if (opt == OPT_ELECTION && r->kind != GUARD_HTTP) {
            snprintf(err, errlen, "--guard: election= is for http(s):// routes only");
            return false;
        }
        if (opt == OPT_ELECTION) {
            const char *problem = name_election_problem(v);
            if (problem) {
                snprintf(err, errlen, "--guard: election name '%s' %s", v, problem);
                return false;
            }
            r->lock[0] = GUARD_ELECTION_MARK;
            memcpy(r->lock + 1, v, strlen(v) + 1); /* a valid name fits */
            continue;
        }
        if ((opt == OPT_REGION || opt == OPT_ENDPOINT) && r->kind != GUARD_S3) {
            snprintf(err, errlen, "--guard: %s= is for s3:// routes only", OPTIONS[opt]);
            return false;
        }
        if (opt == OPT_LOCK) {
            const char *problem = name_lock_problem(v);
            if (problem) {
                snprintf(err, errlen, "--guard: lock name '%s' %s", v, problem);
                return false;
            }
            memcpy(r->lock, v, strlen(v) + 1); /* a valid name fits */
        } else if (opt == OPT_METHODS) {
            if (!parse_methods(r, v, err, errlen))
                return false;
        } else if (opt == OPT_REGION) {
            if (!region_ok(v) || strlen(v) >= sizeof r->region) {
                snprintf(err, errlen, "--guard: region '%.60s' is not a region name (such as eu-west-1)", v);
                return false;
            }
            memcpy(r->region, v, strlen(v) + 1);
        } else if (!parse_endpoint(r, v, err, errlen)) {
            return false;
        }
    }
    if (!seen[OPT_METHODS]) {
        const char *const *list = r->kind == GUARD_S3 ? S3_METHODS : DEFAULT_METHODS;
        size_t n = r->kind == GUARD_S3 ? sizeof S3_METHODS / sizeof S3_METHODS[0]
                                       : sizeof DEFAULT_METHODS / sizeof DEFAULT_METHODS[0];
        for (size_t i = 0; i < n; i++)
            snprintf(r->methods[r->nmethods++], sizeof r->methods[0], "%s", list[i]);
    } else if (r->kind == GUARD_S3) {
        for (size_t i = 0; i < r->nmethods; i++) {
            if (strcmp(r->methods[i], "GET") && strcmp(r->methods[i], "HEAD") && strcmp(r->methods[i], "PUT") &&
                strcmp(r->methods[i], "POST") && strcmp(r->methods[i], "DELETE")) {
                snprintf(err, errlen,
                         "--guard: an s3:// route forwards GET, HEAD, PUT, POST and DELETE only; methods= may not "
                         "list %s",
                         r->methods[i]);
                return false;
            }
        }
    }
    write_allow(r);
    return true;
}

/* Where a route's objects live, as a string that another route's covers or
 * not by prefix: scheme and authority in lower case, the path ending in '/'. */
static void space_of(const GuardRoute *r, char *out, size_t outlen)
{
    if (r->kind == GUARD_S3) {
        snprintf(out, outlen, "%s/%s/%s%s", r->endpoint, r->bucket, r->keyprefix, r->keyprefix[0] ? "/" : "");
    } else {
        const char *path = strchr(strstr(r->upstream, "://") + 3, '/');
        size_t auth = path ? (size_t)(path - r->upstream) : strlen(r->upstream);
        snprintf(out, outlen, "%.*s%s%s", (int)auth, r->upstream, path ? path : "/",
                 !path || path[strlen(path) - 1] == '/' ? "" : "/");
    }
    size_t auth_end = strcspn(strstr(out, "://") + 3, "/") + (size_t)(strstr(out, "://") + 3 - out);
    for (size_t i = 0; i < auth_end; i++)
        if (out[i] >= 'A' && out[i] <= 'Z')
            out[i] = (char)(out[i] - 'A' + 'a');
}

bool guardroute_compatible(const GuardRoute *a, const GuardRoute *b, char *err, size_t errlen)
{
    size_t n = strlen(a->prefix);
    if (!strncmp(b->prefix, a->prefix, n) && (a->prefix[n - 1] == '/' || b->prefix[n] == '\0' || b->prefix[n] == '/')) {
        snprintf(err, errlen, "--guard %s is never reached: --guard %s, given before it, takes every path under it "
                              "(give the longer prefix first)", b->prefix, a->prefix);
        return false;
    }
    char sa[2048], sb[2048];
    space_of(a, sa, sizeof sa);
    space_of(b, sb, sizeof sb);
    size_t la = strlen(sa), lb = strlen(sb);
    bool overlap = !strncmp(sa, sb, la < lb ? la : lb);
    if (overlap && !(a->lock[0] && !strcmp(a->lock, b->lock))) {
        snprintf(err, errlen,
                 "--guard %s and --guard %s reach the same objects upstream (%.300s, %.300s): an object must be "
                 "bound to one lock, by one route (bind both to one lock=NAME, or give each an upstream path of "
                 "its own)", a->prefix, b->prefix, sa, sb);
        return false;
    }
    return true;
}

bool guardroute_finish_s3(GuardRoute *r, const char *env_region, char *err, size_t errlen)
{
    if (r->kind != GUARD_S3)
        return true;
    if (!r->region[0]) {
        if (!env_region || !region_ok(env_region) || strlen(env_region) >= sizeof r->region) {
            snprintf(err, errlen, "--guard %s: no region (add ,region=R or set AWS_REGION)", r->prefix);
            return false;
        }
        memcpy(r->region, env_region, strlen(env_region) + 1);
    }
    if (!r->endpoint[0])
        snprintf(r->endpoint, sizeof r->endpoint, "https://s3.%s.amazonaws.com", r->region);
    return true;
}

const char *guardroute_rest(const GuardRoute *route, const char *raw_uri)
{
    size_t n = strlen(route->prefix);
    return strncmp(raw_uri, route->prefix, n) ? raw_uri + n - 1 : raw_uri + n;
}
