/* guardroute — --guard specs; see include/leasegate/guardroute.h. */
#include "leasegate/guardroute.h"

#include <stdio.h>
#include <string.h>

#include "leasegate/names.h"

static const char *const DEFAULT_METHODS[] = {"GET", "HEAD", "OPTIONS", "PUT", "POST", "PATCH", "DELETE"};

/* The route's options, in the order a spec may give them after UPSTREAM. */
static const char *const OPTIONS[] = {"lock", "methods"};

bool guardroute_is_read(const char *method)
{
    return !strcmp(method, "GET") || !strcmp(method, "HEAD") || !strcmp(method, "OPTIONS");
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
    if ((strncmp(up, "http://", 7) && strncmp(up, "https://", 8)) || ulen >= sizeof r->upstream || ulen <= 8) {
        snprintf(err, errlen, "--guard: upstream '%.*s' must be an http:// or https:// URL", (int)(ulen > 300 ? 300 : ulen),
                 up);
        return false;
    }
    memcpy(r->upstream, up, ulen);
    bool seen[sizeof OPTIONS / sizeof OPTIONS[0]] = {false};
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
            snprintf(err, errlen, "--guard: unknown option '%.60s' (known: lock=NAME, methods=M1+M2)", p + 1);
            return false;
        }
        if (!strcmp(OPTIONS[opt], "lock")) {
            const char *problem = name_lock_problem(v);
            if (problem) {
                snprintf(err, errlen, "--guard: lock name '%s' %s", v, problem);
                return false;
            }
            memcpy(r->lock, v, strlen(v) + 1); /* a valid name fits */
        } else if (!parse_methods(r, v, err, errlen)) {
            return false;
        }
    }
    if (!seen[1])
        for (size_t i = 0; i < sizeof DEFAULT_METHODS / sizeof DEFAULT_METHODS[0]; i++)
            snprintf(r->methods[r->nmethods++], sizeof r->methods[0], "%s", DEFAULT_METHODS[i]);
    write_allow(r);
    return true;
}
