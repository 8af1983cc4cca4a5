/* guard — token checks in front of the proxy; see include/leasegate/guard.h. */
#include "leasegate/guard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leasegate/names.h"
#include "leasegate/proxy.h"

#define CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Prefixes match whole path segments: "/store" covers "/store/x" and
 * "/store?q", not "/storefront". */
const GuardRoute *guard_match(const Server *s, const char *raw_uri)
{
    for (size_t i = 0; i < s->cfg.nguards; i++) {
        const GuardRoute *g = &s->cfg.guards[i];
        size_t n = strlen(g->prefix);
        if (strncmp(raw_uri, g->prefix, n) != 0)
            continue;
        char next = raw_uri[n];
        if (g->prefix[n - 1] == '/' || next == '\0' || next == '/' || next == '?')
            return g;
    }
    return NULL;
}

/* Is this raw segment "." or "..", also when spelled %2e? */
static bool dot_segment(const char *seg, size_t len)
{
    size_t dots = 0;
    for (size_t i = 0; i < len; dots++) {
        if (seg[i] == '.')
            i++;
        else if (len - i >= 3 && seg[i] == '%' && seg[i + 1] == '2' && (seg[i + 2] == 'e' || seg[i + 2] == 'E'))
            i += 3;
        else
            return false;
    }
    return dots == 1 || dots == 2;
}

/* The path after the prefix may not climb out of the upstream's base path
 * (curl would resolve "..", and so may the upstream). */
static bool path_escapes(const char *rest)
{
    const char *end = rest + strcspn(rest, "?#");
    for (const char *seg = rest; seg <= end;) {
        size_t len = strcspn(seg, "/?#");
        if (seg + len > end)
            len = (size_t)(end - seg);
        if (dot_segment(seg, len))
            return true;
        seg += len + 1;
    }
    return false;
}

static bool safe_method(const char *method)
{
    return !strcmp(method, "GET") || !strcmp(method, "HEAD") || !strcmp(method, "OPTIONS");
}

/* A token is a decimal integer in 1..2^63-1, nothing else. */
static bool parse_token(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > INT64_MAX)
        return false;
    *out = v;
    return true;
}

/* The token of the lock's current, unexpired holder, or 0. */
static uint64_t holder_token(const Server *s, const char *lock)
{
    const Lock *l = locktab_get(s->locks, lock);
    Now now = clock_now();
    if (!l || !l->held || l->holder.expires_at_ms <= now.wall_ms)
        return 0;
    return l->holder.token;
}

static void reply_stale(Request *req, const char *lock, uint64_t token, const char *why)
{
    Server *s = req->srv;
    uint64_t holder = holder_token(s, lock);
    s->metrics.guard_rejected_stale++;
    json_t *extra = json_pack("{s:s, s:I, s:I, s:o}", "lock", lock, "token", (json_int_t)token, "max_token",
                              (json_int_t)fence_max(s->guard_marks, lock), "holder_token",
                              holder ? json_integer((json_int_t)holder) : json_null());
    http_reply_error(req, ERR_STALE_TOKEN, extra, "fencing token %llu may not write under lock '%s': %s",
                     (unsigned long long)token, lock, why);
}

/* Both checks: the holder's token, and no larger token let through before. */
static const char *stale_reason(const Server *s, const char *lock, uint64_t token)
{
    uint64_t holder = holder_token(s, lock);
    if (holder == 0)
        return "the lock is not held";
    if (holder != token)
        return "it is not the current holder's token";
    if (fence_max(s->guard_marks, lock) > token)
        return "a write with a larger token was let through";
    return NULL;
}

/* The raised mark is durable: check again (things may have moved while the
 * commit ran) and forward, or reject. */
static void mark_durable(CommitHold *hold)
{
    Request *req = CONTAINER_OF(hold, Request, hold);
    if (req->close)
        return; /* dropped meanwhile (shutdown): nothing goes upstream */
    const char *why = stale_reason(req->srv, req->guard_lock, req->guard_token);
    if (why)
        reply_stale(req, req->guard_lock, req->guard_token, why);
    else
        proxy_call_start(req->call);
}

static char *upstream_url(const GuardRoute *g, const char *raw_uri)
{
    const char *rest = raw_uri + strlen(g->prefix);
    size_t ulen = strlen(g->upstream);
    /* "/store/" + "a" -> "http://up/" + "a": exactly one slash between them. */
    bool up_slash = ulen && g->upstream[ulen - 1] == '/';
    if (up_slash && *rest == '/')
        rest++;
    char *url;
    if (asprintf(&url, "%s%s%s", g->upstream, !up_slash && *rest && *rest != '/' && *rest != '?' ? "/" : "",
                 rest) < 0)
        return NULL;
    return url;
}

static bool request_body(Request *req, int64_t *content_length)
{
    const char *cl = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    *content_length = cl ? strtoll(cl, NULL, 10) : -1;
    return cl || te;
}

void guard_begin(Request *req, const GuardRoute *g, const char *method)
{
    Server *s = req->srv;
    bool write = !safe_method(method);
    int64_t content_length;
    bool has_body = request_body(req, &content_length);
    if (path_escapes(req->raw_uri + strlen(g->prefix))) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL, "'.' and '..' path segments are not allowed under %s",
                         g->prefix);
        return;
    }
    /* A body on a method that passes unchecked would be a write without a token. */
    if (!write && has_body && content_length != 0) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL, "%s may not carry a body through the guard", method);
        return;
    }
    if (write) {
        const char *token_s = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Fencing-Token");
        const char *lock = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Fencing-Lock");
        uint64_t token;
        if (!parse_token(token_s, &req->guard_token) || !lock || name_problem(lock)) {
            s->metrics.guard_rejected_missing++;
            http_reply_error(req, ERR_TOKEN_REQUIRED, NULL,
                             "%s needs headers Fencing-Token (a token from acquire) and Fencing-Lock (the "
                             "lock's name)%s",
                             method, token_s || lock ? "; the ones sent are malformed" : "");
            return;
        }
        token = req->guard_token;
        const char *why = stale_reason(s, lock, token);
        if (why) {
            reply_stale(req, lock, token, why);
            return;
        }
        uint64_t max;
        bool raised;
        FenceResult r = fence_check(s->guard_marks, lock, token, &max, &raised);
        if (r == FENCE_ACCEPTED && raised && !commit_guard_mark(s->commit, lock, token))
            r = FENCE_NOMEM;
        if (r != FENCE_ACCEPTED) {
            http_reply_error(req, ERR_OVERLOADED, NULL, "cannot track fencing marks now; retry later");
            return;
        }
        req->guard_lock = strdup(lock);
        if (!req->guard_lock) {
            http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory");
            return;
        }
    }
    char *url = upstream_url(g, req->raw_uri);
    req->call = url ? proxy_call_new(s->proxy, req, method, url, write && has_body, content_length) : NULL;
    free(url);
    if (!req->call) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory");
        return;
    }
    /* A write goes upstream only once its mark is durable. The connection is
     * not suspended meanwhile: the body starts to fill the proxy's buffer. */
    if (write && commit_pending(s->commit)) {
        req->hold.ready = mark_durable;
        commit_hold(s->commit, &req->hold);
        return;
    }
    proxy_call_start(req->call);
}
