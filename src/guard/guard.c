/*
 * guard — what a guarded request must be to go upstream; see
 * guard.h. The order of writes is guardq's.
 *
 * A request is checked from its head alone, in this order: the route
 * forwards its method (405); its target is canonical and its header values
 * and framing are plain (400); it names no resource but its own (400); there
 * is a call slot for it, globally and in its key's and its peer's shares
 * (503, 429); for a write, each lock it is bound to is held by the lease it
 * presents (428, 409), and that lock's queue has room (503).
 */
#include "guard/guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uuid/uuid.h>

#include "core/fence.h"
#include "core/log.h"
#include "core/names.h"
#include "guard/formscan.h"
#include "guard/guardpath.h"
#include "guard/guardq.h"
#include "guard/guardshare.h"
#include "guard/proxy.h"
#include "guard/s3.h"
#include "guard/s3auth.h"
#include "guard/s3copy.h"
#include "guard/s3err.h"
#include "guard/s3list.h"
#include "guard/s3mpu.h"
#include "guard/s3req.h"
#include "guard/sigv4.h"
#include "net/httphead.h"

struct Guard {
    Server *srv;
    GuardShares *shares;
    GuardQueues *queues;
    S3 *s3;
    S3Uploads *uploads; /* multipart uploads begun through the guard */
};

Guard *guard_new(Server *s)
{
    Guard *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->srv = s;
    g->shares = guardshare_new();
    g->queues = g->shares ? guardq_new(s, g->shares) : NULL;
    g->s3 = s3_new(&s->cfg);
    g->uploads = s3mpu_new();
    if (!g->queues || !g->s3 || !g->uploads) {
        guard_free(g);
        return NULL;
    }
    return g;
}

void guard_free(Guard *g)
{
    if (!g)
        return;
    s3_free(g->s3);
    s3mpu_free(g->uploads);
    guardq_free(g->queues);
    guardshare_free(g->shares);
    free(g);
}

bool guard_open(Guard *g, char *err, size_t errlen) { return s3_open(g->s3, err, errlen); }

bool guard_reload(Guard *g, char *err, size_t errlen) { return s3_reload(g->s3, err, errlen); }

GuardRouteUp guard_route_state(Guard *g, size_t route, char *detail, size_t detail_len)
{
    const GuardRoute *r = &g->srv->cfg.guards[route];
    if (r->kind != GUARD_S3) {
        snprintf(detail, detail_len, "forwarded; its upstream is not probed");
        return GUARD_ROUTE_UNPROBED;
    }
    switch (s3_route_state(g->s3, route, detail, detail_len)) {
    case S3_ROUTE_OPEN:
        return GUARD_ROUTE_OPEN;
    case S3_ROUTE_REFUSED:
        return GUARD_ROUTE_REFUSED;
    case S3_ROUTE_CLOSED:
    default:
        return GUARD_ROUTE_CLOSED;
    }
}

const char *guard_route_state_name(GuardRouteUp st)
{
    static const char *const NAMES[] = {[GUARD_ROUTE_UNPROBED] = "forwarding", [GUARD_ROUTE_OPEN] = "open",
                                        [GUARD_ROUTE_CLOSED] = "closed", [GUARD_ROUTE_REFUSED] = "refused"};
    return NAMES[st];
}

bool guard_restore(Guard *g, const char *lock, int64_t at_ms, const Now *now)
{
    return guardq_restore(g->queues, lock, at_ms, now);
}

int64_t guard_next_timeout_ms(const Guard *g, const Now *now) { return guardq_next_timeout_ms(g->queues, now); }

void guard_tick(Guard *g, const Now *now) { guardq_tick(g->queues, now); }

/* Prefixes match whole path segments: "/store" covers "/store/x" and
 * "/store?q", not "/storefront". An S3 route's prefix is the bucket its
 * clients name: "/reports/" also takes "/reports" and "/reports?list-type=2". */
const GuardRoute *guard_match(const Server *s, const char *raw_uri)
{
    return guardroute_match(s->cfg.guards, s->cfg.nguards, raw_uri);
}


static bool names_destination(const char *method) { return !strcmp(method, "COPY") || !strcmp(method, "MOVE"); }

/* Headers that make a backend act on a resource, or with a method, other
 * than the request's own: a write carrying one is refused on every route (a
 * method override could make the backend apply a method the route does not
 * list; a rewritten URL could reach past the route's prefix). Reads lose them. */
static const char *const OVERRIDES[] = {"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override",
                                        "X-Original-URL", "X-Rewrite-URL", NULL};
/* Headers by which one write reaches the members of a collection or another
 * resource: refused on writes where each path has a lock of its own, allowed
 * where the route's one lock covers the whole subtree (lock=NAME). */
static const char *const SUBTREE[] = {"Depth", "Slug", NULL};

/* Never forwarded: the lease is the secret, the guard sets the others
 * itself; with API keys (--auth-file) the key is leasegate's, not the
 * upstream's, so Authorization stops here too. A write's Destination is
 * replaced by the upstream's URL of it. A read loses whatever could turn
 * it into a write (OVERRIDES, SUBTREE, If, Destination). */
#define GUARD_OWN "Fencing-Lease", "Fencing-Token", "Fencing-Lock", "Fencing-Destination-Lease", \
                  "Fencing-Destination-Token", "Fencing-Destination-Lock", "Destination"
#define READ_ONLY "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X-Original-URL", \
                  "X-Rewrite-URL", "Depth", "Slug", "If"
static const char *const DROP_WRITE[] = {GUARD_OWN, NULL};
static const char *const DROP_WRITE_KEYS[] = {GUARD_OWN, "Authorization", NULL};
static const char *const DROP_READ[] = {GUARD_OWN, READ_ONLY, NULL};
static const char *const DROP_READ_KEYS[] = {GUARD_OWN, READ_ONLY, "Authorization", NULL};

static const char *header(Request *req, const char *name) { return http_header(req, name); }

static void refused(Request *req, GuardRefusal why) { req->srv->metrics.guard_refused[why]++; }

/* 400 naming the field at fault ("path" or a header's name). */
static void bad(Request *req, const char *field, const char *fmt, const char *detail)
{
    refused(req, GUARD_REFUSED_REQUEST);
    http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", field), fmt, detail);
}

/* Names a backend may read as one of the headers the guard checks, sets or
 * drops: CGI and WSGI servers turn '-' and '_' alike into '_' (HTTP_X_Y), so
 * "Fencing_Token" would reach such a backend as the guard's Fencing-Token,
 * "X_HTTP_Method_Override" as the override the guard refuses. */
static const char *const WATCHED[] = {"Fencing-Lease", "Fencing-Token", "Fencing-Lock", "Fencing-Destination-Lease",
                                      "Fencing-Destination-Token", "Fencing-Destination-Lock", "Destination",
                                      "Depth", "Slug", "If", "Authorization", "Host", "Content-Length",
                                      "Transfer-Encoding", "X-HTTP-Method-Override", "X-HTTP-Method",
                                      "X-Method-Override", "X-Original-URL", "X-Rewrite-URL", NULL};

/* Is `name` one of WATCHED spelt with '_' in place of a '-'? */
static bool underscore_alias(const char *name)
{
    if (!strchr(name, '_'))
        return false;
    for (const char *const *w = WATCHED; *w; w++) {
        size_t n = strlen(*w);
        if (strlen(name) != n)
            continue;
        size_t i = 0;
        while (i < n && ((name[i] == '_' && (*w)[i] == '-') ||
                         ((name[i] | 0x20) == ((*w)[i] | 0x20) && name[i] != '_')))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

typedef struct BadHeader {
    const char *name, *problem;
} BadHeader;

/* Header iterator: the first header whose value may not be forwarded (a
 * name that is not a token never gets here: http.c refuses the request).
 * Lengths, not C strings: a NUL inside a value must be seen. */
static enum MHD_Result find_bad_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                       const char *value, size_t value_size)
{
    (void)kind;
    (void)key_size;
    BadHeader *bad = cls;
    bad->problem = value ? guardpath_header_problem(value, value_size) : NULL;
    if (!bad->problem && underscore_alias(key))
        bad->problem = "a name with '_' that a backend may read as the guard's header of the same name with '-'";
    if (bad->problem) {
        bad->name = key;
        return MHD_NO;
    }
    return MHD_YES;
}

/* What a request under this route must be, whatever its method. *framed:
 * it declares a body (Content-Length, even 0, or Transfer-Encoding), which
 * the upstream call must declare too; *has_body: it may have bytes. */
static bool acceptable(Request *req, const GuardRoute *route, const char *method, bool *framed, bool *has_body,
                       int64_t *content_length)
{
    const char *problem = guardpath_rest_problem(route->prefix, guardroute_rest(route, req->raw_uri));
    if (problem) {
        bad(req, "path", "only canonical paths go through the guard; this one has %s", problem);
        return false;
    }
    BadHeader badh = {NULL, NULL};
    MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, find_bad_header, &badh);
    if (badh.problem) {
        refused(req, GUARD_REFUSED_REQUEST);
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", badh.name), "header '%.100s': %s",
                         badh.name, badh.problem);
        return false;
    }
    const char *cl = header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = header(req, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    uint64_t n = 0;
    if (cl && (!httphead_content_length(req->conn, &n) || n > INT64_MAX)) {
        bad(req, "Content-Length", "Content-Length is not a number%s", "");
        return false;
    }
    *framed = cl || te;
    *has_body = te || n > 0;
    *content_length = te ? -1 : (int64_t)n;
    /* A body on a method that passes unchecked would be a write without a lease. */
    if (guardroute_is_read(method) && *has_body) {
        bad(req, te ? "Transfer-Encoding" : "Content-Length", "%s may not carry a body through the guard", method);
        return false;
    }
    return true;
}

/* Header iterator: sets *cls when an If line names a resource. Every line
 * counts: the lines of one field are one list (RFC 9110 5.3), and the
 * upstream gets them all. */
static enum MHD_Result find_tagged_if(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    bool *tagged = cls;
    if (strcasecmp(key, "If") != 0 || !guardpath_if_names_resource(value ? value : ""))
        return MHD_YES;
    *tagged = true;
    return MHD_NO;
}

/* A write reaches no resource but the ones it is bound to. */
static bool reaches_only_its_own(Request *req, const GuardRoute *route, const char *method)
{
    for (const char *const *h = OVERRIDES; *h; h++) {
        if (header(req, *h)) {
            bad(req, *h, "header %s is not forwarded on writes: a backend that honours it would act on another "
                         "resource or with another method than the guard checked",
                *h);
            return false;
        }
    }
    if (!names_destination(method) && header(req, "Destination")) {
        bad(req, "Destination", "header Destination is only forwarded on COPY and MOVE, not on %s", method);
        return false;
    }
    if (route->lock[0])
        return true; /* one lock covers the whole subtree */
    const char *rest = guardroute_rest(route, req->raw_uri);
    size_t plen = strcspn(rest, "?");
    if (plen && rest[plen - 1] == '/') {
        bad(req, "path",
            "a write may not go to a collection ('%s' ends in '/'): on this route each path has its own lock, and a "
            "collection holds paths that other locks protect (bind the route to one lock with lock=NAME)",
            req->raw_uri);
        return false;
    }
    for (const char *const *h = SUBTREE; *h; h++) {
        if (header(req, *h)) {
            bad(req, *h, "header %s is not forwarded on writes where each path has its own lock: it reaches other "
                         "resources than the one the lease holds (bind the route to one lock with lock=NAME)",
                *h);
            return false;
        }
    }
    bool tagged = false;
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, find_tagged_if, &tagged);
    if (tagged) {
        bad(req, "If", "header If names a resource of its own (a tagged list)%s; only untagged lists pass", "");
        return false;
    }
    return true;
}

/* The part below the route's prefix of an S3 copy's source (x-amz-copy-source
 * read as the path a GET of it would have: s3copy.h), into rest; NULL when
 * there is none, or it is not under this route. */
static const char *copy_source_rest(Request *req, const GuardRoute *route, char *rest, size_t restlen)
{
    const char *value = header(req, "x-amz-copy-source");
    char path[HTTP_MAX_TARGET + 1];
    if (!value || s3copy_source(value, path, sizeof path) != S3COPY_PATH || guard_match(req->srv, path) != route ||
        strncmp(path, route->prefix, strlen(route->prefix)))
        return NULL;
    snprintf(rest, restlen, "%s", guardroute_rest(route, path));
    return rest;
}

/* The lock `rest` (below the route's prefix) is bound to, into lock. */
static const char *bound_lock(const GuardRoute *route, const char *rest, char *lock, size_t locklen,
                              const char **problem)
{
    if (route->lock[0]) {
        snprintf(lock, locklen, "%s", route->lock);
        return lock;
    }
    return guardpath_lock(rest, lock, locklen, problem);
}

/* The part of the request's Destination below the route's prefix, or NULL
 * with *problem set. The Destination must be bound as a request sent to it
 * would be: a path that another route takes (a longer prefix listed before
 * this one) is protected by that route's binding, not by this one's. */
static const char *route_destination(Request *req, const GuardRoute *route, char *rest, size_t restlen,
                                     const char **problem)
{
    const char *dest = header(req, "Destination");
    *problem = "it is missing";
    if (!dest ||
        !guardpath_destination(dest, header(req, MHD_HTTP_HEADER_HOST), route->prefix, rest, restlen, problem))
        return NULL;
    char path[sizeof route->prefix + HTTP_MAX_TARGET + 1];
    int n = snprintf(path, sizeof path, "%s%s", route->prefix, rest);
    if (n < 0 || (size_t)n >= sizeof path || guard_match(req->srv, path) != route) {
        *problem = "it is under another guard route, whose binding protects it";
        return NULL;
    }
    return rest;
}

/* The part of the Destination below the route's prefix; answers 400 otherwise. */
static const char *destination_rest(Request *req, const GuardRoute *route, char *rest, size_t restlen)
{
    const char *problem;
    if (route_destination(req, route, rest, restlen, &problem))
        return rest;
    bad(req, "Destination",
        "the Destination of a COPY or MOVE must be an absolute path under this guard's prefix, or an absolute URI "
        "with the Host of this request, in canonical form: %s",
        problem);
    return NULL;
}

size_t guard_bound_locks(Request *req, const GuardRoute *route, const char *method,
                         char locks[2][GUARD_BINDING_MAX + 1])
{
    const char *problem;
    size_t n = 0;
    if (bound_lock(route, guardroute_rest(route, req->raw_uri), locks[n], sizeof locks[n], &problem))
        n++;
    else
        locks[n++][0] = '\0';
    char rest[HTTP_MAX_TARGET + 1];
    if (names_destination(method) && route_destination(req, route, rest, sizeof rest, &problem) &&
        bound_lock(route, rest, locks[n], sizeof locks[n], &problem))
        n++;
    /* An S3 copy reads its source: a key must be allowed that lock too. */
    const char *source;
    if (route->kind == GUARD_S3 && !strcmp(method, "PUT") && (source = copy_source_rest(req, route, rest, sizeof rest)) &&
        bound_lock(route, source, locks[n], sizeof locks[n], &problem) && strcmp(locks[n], locks[0]))
        n++;
    return n;
}

/* The lease in header `lease_field` holds b->lock: fills b's lease and token.
 * Answers 428 or 409 otherwise. */
static bool holds(Request *req, const char *method, const char *lease_field, GuardBinding *b)
{
    Server *s = req->srv;
    const char *lease_s = header(req, lease_field);
    if (!lease_s || strlen(lease_s) != 36 || uuid_parse(lease_s, b->lease) != 0) {
        s->metrics.guard_rejected_missing++;
        refused(req, GUARD_REFUSED_LEASE_MISSING);
        s->guard_refused(req, b->lock, 0, "", lease_s ? "not_a_lease" : "lease_missing");
        http_reply_error(req, ERR_TOKEN_REQUIRED, json_pack("{s:s, s:s}", "lock", b->lock, "field", lease_field),
                         "%s needs header %s: the lease (from acquire) that holds lock '%s'%s", method, lease_field,
                         b->lock, lease_s ? "; the one sent is not a lease id" : "");
        return false;
    }
    Now now = clock_now();
    const Holder *h = locktab_held_by(s->locks, guard_binding_kind(b->lock), guard_binding_name(b->lock), b->lease, &now);
    b->token = h ? h->token : 0;
    const GuardStale *why = guardq_stale_reason(s, b);
    if (why) {
        refused(req, GUARD_REFUSED_STALE);
        guardq_reply_stale(req, b, why);
        return false;
    }
    return true;
}

/* A client may say which lock and token it means: they must be the binding's. */
static bool claims_match(Request *req, const GuardBinding *b)
{
    const char *named = header(req, "Fencing-Lock");
    if (named && strcmp(named, b->lock) != 0) {
        refused(req, GUARD_REFUSED_REQUEST);
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s, s:s}", "lock", b->lock, "field", "Fencing-Lock"),
                         "Fencing-Lock '%.300s' is not the lock this path is bound to ('%s')", named, b->lock);
        return false;
    }
    const char *token_s = header(req, "Fencing-Token");
    uint64_t sent;
    if (token_s && !fence_parse_token(token_s, &sent)) {
        refused(req, GUARD_REFUSED_REQUEST);
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s, s:s}", "lock", b->lock, "field", "Fencing-Token"),
                         "Fencing-Token '%.40s' is not a token", token_s);
        return false;
    }
    return true;
}

static bool token_claim_matches(Request *req, const GuardBinding *b)
{
    const char *token_s = header(req, "Fencing-Token");
    uint64_t sent;
    if (token_s && fence_parse_token(token_s, &sent) && sent != b->token) {
        refused(req, GUARD_REFUSED_REQUEST);
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s, s:s}", "lock", b->lock, "field", "Fencing-Token"),
                         "Fencing-Token '%.40s' is not the token of the lease in Fencing-Lease", token_s);
        return false;
    }
    return true;
}

static char *upstream_url(const GuardRoute *g, const char *rest)
{
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

/* 429: the key's or the peer's (`who`, named `name`) share of calls is used up. */
static void over_share(Request *req, GuardRefusal why, ErrCode code, const char *who, const char *name, size_t share,
                       const char *flag)
{
    refused(req, why);
    http_reply_error(req, code,
                     json_pack("{s:s, s:s, s:I}", who, name, "limit", "guard_calls", "value", (json_int_t)share),
                     "%s '%s' has %zu upstream calls in flight, its share (%s); retry when one is over", who, name,
                     share, flag);
}

/* One route's share of --guard-max-calls: three quarters of them when there
 * are other routes, so that a backend slow enough for its calls to pile up
 * (each waits up to --guard-timeout) leaves the others a quarter. */
static size_t guard_route_max_calls(const Config *cfg)
{
    size_t share = cfg->guard_max_calls * 3 / 4;
    return cfg->nguards > 1 && share ? share : cfg->guard_max_calls;
}

/* The client's share of the guard's calls, into req->guard->ticket. Answers
 * 503 or 429 when there is none. */
static bool take_share(Request *req, Guard *g, const char *key)
{
    Server *s = req->srv;
    if (proxy_calls(s->proxy) >= s->cfg.guard_max_calls) {
        refused(req, GUARD_REFUSED_CALLS);
        http_reply_error(req, ERR_OVERLOADED, json_pack("{s:s}", "limit", "guard_calls"),
                         "%zu upstream calls are in flight (--guard-max-calls); retry", s->cfg.guard_max_calls);
        return false;
    }
    char peer[HTTP_PEER_MAX];
    http_peer_address(req, peer, sizeof peer);
    const GuardRoute *route = req->guard->route;
    size_t route_max = guard_route_max_calls(&s->cfg);
    switch (guardshare_take(g->shares, key, s->cfg.guard_key_max_calls, peer, s->cfg.guard_peer_max_calls,
                            route->prefix, route_max, &req->guard->ticket)) {
    case SHARE_OK:
        return true;
    case SHARE_ROUTE_FULL:
        refused(req, GUARD_REFUSED_CALLS);
        http_reply_error(req, ERR_OVERLOADED,
                         json_pack("{s:s, s:s, s:I}", "limit", "guard_route_calls", "route", route->prefix, "value",
                                   (json_int_t)route_max),
                         "%zu upstream calls of %s are in flight, its share of --guard-max-calls (its backend is "
                         "slow?); retry",
                         route_max, route->prefix);
        return false;
    case SHARE_KEY_FULL:
        over_share(req, GUARD_REFUSED_KEY_CALLS, ERR_KEY_LIMIT, "key", key, s->cfg.guard_key_max_calls,
                   "--guard-key-max-calls");
        return false;
    case SHARE_PEER_FULL:
        over_share(req, GUARD_REFUSED_PEER_CALLS, ERR_PEER_LIMIT, "peer", peer, s->cfg.guard_peer_max_calls,
                   "--guard-peer-max-calls");
        return false;
    case SHARE_NOMEM:
    default:
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return false;
    }
}

#define OVERRIDE_WHY                                                                                           \
    "a backend that honours it (Rails, Laravel, Symfony, method-override) would apply another method than the " \
    "guard checked"

/* A query that names a method override (?_method=DELETE) is refused on
 * every request of a plain HTTP route, reads included (a read passes
 * without a lease), as the override headers are on writes. */
static bool query_names_no_override(Request *req)
{
    const char *q = strchr(req->raw_uri, '?');
    FormScan f;
    formscan_init(&f, FORM_URLENCODED);
    if (q)
        formscan_feed(&f, q + 1, strlen(q + 1));
    if (!q || !formscan_finish(&f))
        return true;
    bad(req, "_method", "query parameter _method (or X-HTTP-Method-Override) is not forwarded: %s", OVERRIDE_WHY);
    return false;
}

/* The write's form body carries a method override: refused, its call cut
 * off before the upstream has the whole request. */
static void refuse_body_override(Request *req)
{
    guardq_refuse(req);
    /* A released write's call has the request but its end: the end never leaves. */
    if (req->guard->call)
        proxy_call_abort(req->guard->call);
    bad(req, "_method", "a form body with a field _method (or X-HTTP-Method-Override) is not forwarded: %s",
        OVERRIDE_WHY);
}

/* The body, as it arrives, goes to the upstream call, a form's scanned as
 * it goes; a refused request has none, and its body is dropped. */
static void stream_upload(Request *req, const char *data, size_t *size)
{
    if (!req->guard->call || req->response) {
        *size = 0;
        return;
    }
    if (req->guard->auth) {
        /* Decoded and checked on the way; a refused body never ends at the store. */
        if (!s3auth_upload(req->guard->auth, req, req->guard->call, data, size)) {
            *size = 0;
            proxy_call_abort(req->guard->call);
        }
        return;
    }
    size_t offered = *size;
    proxy_call_upload(req->guard->call, data, size);
    FormScan *form = req->guard->form;
    if (form) {
        formscan_feed(form, data, offered - *size);
        if (formscan_found(form))
            refuse_body_override(req);
    }
}

static bool stream_complete(Request *req)
{
    if (req->guard->pre) {
        http_suspend_watched(req); /* resumed by its report */
        return true;
    }
    if (req->guard->form && !req->response && formscan_finish(req->guard->form)) {
        refuse_body_override(req);
        return true; /* answered: the 400 leaves once the connection is resumed, if it waits */
    }
    if (!req->guard->call)
        return false;
    /* A signed body's last checks come before its end may leave. */
    if (req->guard->auth && !req->guard->write_checked) {
        req->guard->write_checked = true;
        if (!s3auth_body_done(req->guard->auth, req)) {
            proxy_call_abort(req->guard->call);
            return true;
        }
    }
    /* The guard may refuse the write now that its body is complete. */
    guardq_body_done(req);
    if (req->response)
        return true;
    if (req->guard->s3 && s3req_final(req->guard->s3))
        return true;
    return req->guard->call ? proxy_call_final(req->guard->call) == MHD_YES : false;
}

static void stream_abort(Request *req)
{
    if (req->guard->call)
        proxy_call_abort(req->guard->call);
}

static const RequestStream guarded = {stream_upload, stream_complete, stream_abort};

static void begin_read(Request *req, const GuardRoute *route, const char *method)
{
    Server *s = req->srv;
    char *url = upstream_url(route, guardroute_rest(route, req->raw_uri));
    /* A read passes with no body (acceptable() saw to that): declaring one,
     * even of 0 bytes, would make curl send it as an upload (a PUT). */
    ProxyHeaders h = {s->auth ? DROP_READ_KEYS : DROP_READ, NULL, NULL};
    req->guard->call = url ? proxy_call_new(s->proxy, req, method, url, false, 0, &h) : NULL;
    free(url);
    if (!req->guard->call) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    proxy_call_start(req->guard->call);
}

/* Each lock takes a write now: it does not settle, and its queue has room.
 * Answers 503 otherwise. */
static bool locks_take_writes(Request *req, const GuardBinding *b, size_t nb)
{
    Server *s = req->srv;
    Now now = clock_now();
    for (size_t i = 0; i < nb; i++) {
        int64_t settling = guardq_settling_ms(s->guard->queues, b[i].lock, &now);
        if (settling) {
            guardq_reply_settling(req, b[i].lock, settling);
            return false;
        }
        if (guardq_writes(s->guard->queues, b[i].lock) >= s->cfg.guard_lock_max_calls) {
            refused(req, GUARD_REFUSED_LOCK_CALLS);
            http_reply_error(req, ERR_OVERLOADED, json_pack("{s:s, s:s}", "lock", b[i].lock, "limit", "guard_lock_calls"),
                             "lock '%s' has %zu writes queued or in flight at the guard (--guard-lock-max-calls); "
                             "retry",
                             b[i].lock, s->cfg.guard_lock_max_calls);
            return false;
        }
    }
    return true;
}

static void begin_write(Request *req, const GuardRoute *route, const char *method, bool framed, bool has_body,
                        int64_t content_length)
{
    Server *s = req->srv;
    GuardBinding b[2];
    memset(b, 0, sizeof b);
    size_t nb = 1;
    const char *problem = NULL;
    if (!bound_lock(route, guardroute_rest(route, req->raw_uri), b[0].lock, sizeof b[0].lock, &problem)) {
        bad(req, "path",
            "a write must go to a path that names its lock ([A-Za-z0-9._~:/-], at most 256 bytes, not ending in "
            "acquire, renew, release, history or value): %s",
            problem);
        return;
    }
    char dest_rest[HTTP_MAX_TARGET + 1];
    char *dest_url = NULL;
    if (names_destination(method)) {
        char dest_lock[GUARD_BINDING_MAX + 1];
        if (!destination_rest(req, route, dest_rest, sizeof dest_rest))
            return;
        size_t dl = strcspn(dest_rest, "?");
        if (!route->lock[0] && dl && dest_rest[dl - 1] == '/') {
            bad(req, "Destination",
                "a COPY or MOVE may not write a collection ('%s' ends in '/') where each path has its own lock",
                dest_rest);
            return;
        }
        if (!bound_lock(route, dest_rest, dest_lock, sizeof dest_lock, &problem)) {
            bad(req, "Destination", "the Destination's path does not name a lock: %s", problem);
            return;
        }
        if (guardpath_same_resource(guardroute_rest(route, req->raw_uri), dest_rest)) {
            bad(req, "Destination", "a COPY or MOVE onto its own path (%s) is refused: some backends truncate it",
                dest_rest);
            return;
        }
        if (strcmp(dest_lock, b[0].lock) != 0)
            snprintf(b[nb++].lock, sizeof b[0].lock, "%s", dest_lock);
    }
    if (!claims_match(req, &b[0]) || !holds(req, method, "Fencing-Lease", &b[0]) || !token_claim_matches(req, &b[0]))
        return;
    if (nb == 2 && !holds(req, method, "Fencing-Destination-Lease", &b[1]))
        return;
    if (!locks_take_writes(req, b, nb))
        return;
    /* The upstream is told the token and the lock of each binding. */
    char lines[5][NAME_MAX_BYTES + 64];
    const char *add[7] = {NULL};
    size_t na = 0;
    snprintf(lines[0], sizeof lines[0], "Fencing-Token: %llu", (unsigned long long)b[0].token);
    snprintf(lines[1], sizeof lines[1], "Fencing-Lock: %s", b[0].lock);
    add[na++] = lines[0];
    add[na++] = lines[1];
    const GuardBinding *db = nb == 2 ? &b[1] : &b[0];
    char *dest_line = NULL;
    if (names_destination(method)) {
        dest_url = upstream_url(route, dest_rest);
        if (!dest_url || asprintf(&dest_line, "Destination: %s", dest_url) < 0) {
            free(dest_url);
            http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
            return;
        }
        free(dest_url);
        snprintf(lines[2], sizeof lines[2], "Fencing-Destination-Token: %llu", (unsigned long long)db->token);
        snprintf(lines[3], sizeof lines[3], "Fencing-Destination-Lock: %s", db->lock);
        add[na++] = dest_line;
        add[na++] = lines[2];
        add[na++] = lines[3];
    }
    char *url = upstream_url(route, guardroute_rest(route, req->raw_uri));
    ProxyHeaders h = {s->auth ? DROP_WRITE_KEYS : DROP_WRITE, add, NULL};
    req->guard->call = url ? proxy_call_new(s->proxy, req, method, url, framed, content_length, &h) : NULL;
    free(url);
    free(dest_line);
    /* A form body is scanned for a method override as it streams. */
    FormKind form = has_body ? formscan_kind(header(req, MHD_HTTP_HEADER_CONTENT_TYPE)) : FORM_NONE;
    if (form != FORM_NONE && (req->guard->form = malloc(sizeof *req->guard->form)))
        formscan_init(req->guard->form, form);
    if (!req->guard->call || (form != FORM_NONE && !req->guard->form) ||
        !guardq_add(s->guard->queues, req, req->guard->call, has_body, b, nb, &req->guard->ticket, NULL, NULL))
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
}

/* Is the route's store known to answer and honour preconditions? Answers
 * otherwise: a write 503 with Retry-After while the store is unreached, 502
 * when it ignores preconditions; a read 502 while it is unreached. */
static bool route_open(Request *req, const GuardRoute *route, bool read)
{
    Server *s = req->srv;
    S3 *s3 = s->guard->s3;
    char detail[256];
    S3RouteState st = s3_route_state(s3, (size_t)(route - s->cfg.guards), detail, sizeof detail);
    if (st == S3_ROUTE_OPEN || (read && st == S3_ROUTE_REFUSED))
        return true;
    refused(req, GUARD_REFUSED_ROUTE_CLOSED);
    if (st == S3_ROUTE_REFUSED) {
        http_reply_error(req, ERR_BAD_GATEWAY, json_pack("{s:s, s:s}", "route", route->prefix, "state", "refused"),
                         "the store behind %s is not trusted with writes: %s", route->prefix, detail);
        return false;
    }
    if (read) {
        http_reply_error(req, ERR_BAD_GATEWAY, json_pack("{s:s, s:s}", "route", route->prefix, "state", "closed"),
                         "the store behind %s does not answer (%s); reads go again once it does", route->prefix,
                         detail);
        return false;
    }
    unsigned retry = s3_retry_s(s3);
    http_reply_error(req, ERR_OVERLOADED,
                     json_pack("{s:s, s:s, s:I, s:s}", "route", route->prefix, "state", "closed", "retry_after_ms",
                               (json_int_t)retry * 1000, "s3_code", "ServiceUnavailable"),
                     "the store behind %s does not answer (%s): no write goes until it does; retry in %u s",
                     route->prefix, detail, retry);
    char secs[16];
    snprintf(secs, sizeof secs, "%u", retry);
    http_add_header(req, MHD_HTTP_HEADER_RETRY_AFTER, secs);
    return false;
}

/* A signed call of an S3 route for req, to `url`; started, or answered. */
static void s3_call(Request *req, const GuardRoute *route, const char *method, char *url_owned, ProxyAnswerHead head,
                    ProxyAnswerGathered gathered)
{
    Server *s = req->srv;
    static const char *const NONE[] = {NULL};
    ProxyHeaders h = {NONE, NULL, s3req_keep_read};
    S3Sign sign = {s->guard->s3, route, method, url_owned};
    req->guard->call = url_owned ? proxy_call_new(s->proxy, req, method, url_owned, false, 0, &h) : NULL;
    bool signed_ok = req->guard->call && proxy_call_configure(req->guard->call, s3req_sign, &sign);
    free(url_owned);
    if (!signed_ok) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    proxy_call_on_answer(req->guard->call, head, gathered, (void *)route);
    proxy_call_start(req->guard->call);
}

/* The object's store URL with a query of the request's own parameters
 * (each once, sorted as SigV4 sorts them, encoded as it canonicalizes them:
 * sigv4_encode). Owned; NULL when out of memory. */
static char *s3_url_with(Request *req, const GuardRoute *route, const char *const *params)
{
    char *base = s3_object_url(route, guardroute_rest(route, req->raw_uri));
    if (!base)
        return NULL;
    size_t cap = strlen(base) + 8;
    for (const char *const *p = params; *p; p++) {
        const char *v = http_query(req, *p);
        cap += strlen(*p) + 2 + 3 * (v ? strlen(v) : 0);
    }
    char *url = realloc(base, cap);
    if (!url) {
        free(base);
        return NULL;
    }
    size_t n = strlen(url);
    char sep = '?';
    for (const char *const *p = params; *p; p++) {
        const char *v = http_query(req, *p);
        if (!v)
            continue;
        n += (size_t)snprintf(url + n, cap - n, "%c%s=", sep, *p);
        sep = '&';
        n += sigv4_encode(url + n, v, strlen(v));
    }
    return url;
}

/* A signed read: checked with the lease when its token holds the object's
 * lock. Without --auth-file reads are open, so one whose token holds
 * another lock passes unchecked (but not a presigned URL past its time);
 * with it, an SDK's read is signed with a lease of the object's lock (a
 * reader's will do), which its key was allowed to take: no weaker than the
 * API's rule. A signature on the bucket itself (a listing, HeadBucket,
 * its location) names no lock: with --auth-file, those take an API key. */
static bool s3_read_allowed(Request *req, const GuardRoute *route, const char *method)
{
    if (!s3req_signed(req))
        return true;
    if (!s3auth_form_valid(req))
        return false;
    char lock[GUARD_BINDING_MAX + 1] = "";
    const char *problem;
    bool object = bound_lock(route, guardroute_rest(route, req->raw_uri), lock, sizeof lock, &problem) != NULL;
    if (object && s3auth_token_holds(req, lock)) {
        uint8_t lease[LEASE_ID_BYTES];
        uint64_t token;
        return s3auth_check(req, method, lock, true, lease, &token, &req->guard->auth) == S3AUTH_OK;
    }
    if (!req->srv->auth)
        return true;
    req->srv->metrics.guard_refused[GUARD_REFUSED_LEASE_MISSING]++;
    http_reply_error(req, ERR_FORBIDDEN, NULL,
                     object ? "with API keys, a signed read must be signed with a lease of the object's lock (a read "
                              "lease will do: acquire it with mode read)"
                            : "with API keys, a request on the bucket itself (a listing, its location) takes an "
                              "API key (Authorization: Bearer KEY), not a signature");
    return false;
}

/* The GetObjectTagging's object, read first: a tombstone (or none) is 404
 * NoSuchKey, as its GET and HEAD are; else its tags are asked for. */
static void tagged_object_read(void *ud, long status, const struct curl_slist *headers)
{
    Request *req = ud; /* alive: its end frees this HEAD, whose report then never comes */
    req->guard->pre = NULL; /* freed by the proxy after this */
    const GuardRoute *route = req->guard->route;
    char *base = NULL, *url = NULL;
    if (status == 404 || (status == 200 && s3req_tombstone(headers))) {
        http_reply_error(req, ERR_NOT_FOUND, NULL, "The specified key does not exist.");
    } else {
        /* Any other answer: the store answers the tagging read itself (its own error, if any). */
        base = s3_object_url(route, guardroute_rest(route, req->raw_uri));
        if (base && asprintf(&url, "%s?tagging=", base) < 0)
            url = NULL;
        s3_call(req, route, "GET", url, s3req_read_head, s3req_read_gathered);
    }
    free(base);
    http_resume(req); /* its answer leaves, or its call is final (stream_complete) */
}

/* A read through an S3 route: signed, with the allowed headers only. A
 * GetObjectTagging (tags: true) asks for the object's tags alone, once a
 * HEAD found the object there (its answer has no metadata to tell a
 * tombstone by). */
static void begin_s3_read(Request *req, const GuardRoute *route, const char *method, bool tags)
{
    if (!route_open(req, route, true) || !s3_read_allowed(req, route, method) ||
        !s3req_overrides_allowed(req, req->guard->auth != NULL))
        return;
    if (tags) {
        char *url = s3_object_url(route, guardroute_rest(route, req->raw_uri));
        S3Sign sign = {req->srv->guard->s3, route, NULL, NULL};
        ProxyCall *head = url ? proxy_internal_new(req->srv->proxy, "HEAD", url, tagged_object_read, req) : NULL;
        free(url);
        if (!head || !proxy_call_configure(head, s3req_sign, &sign)) {
            if (head)
                proxy_call_free(head);
            http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
            return;
        }
        req->guard->pre = head;
        proxy_call_start(head);
        return;
    }
    s3_call(req, route, method, s3_url_with(req, route, S3REQ_READ_QUERY), s3req_read_head, s3req_read_gathered);
}

static ProxyAnswerAction gather_all(void *ud, long status, const struct curl_slist *headers)
{
    (void)ud;
    (void)status;
    (void)headers;
    return PROXY_GATHER;
}

static void list_v1_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                             size_t len, bool complete)
{
    (void)headers;
    s3list_reply(req, ud, false, status, body, len, complete);
}

static void list_v2_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                             size_t len, bool complete)
{
    (void)headers;
    s3list_reply(req, ud, true, status, body, len, complete);
}

/* The route's prefix and the object's path: the object a multipart upload
 * is of, in one form however the client spells a ':' (boto3 %3A, curl bare),
 * as the lock is (guardpath_colons). outlen exceeds the prefix and the
 * longest target, so it fits. */
static void upload_object(Request *req, const GuardRoute *route, char *out, size_t outlen)
{
    const char *rest = guardroute_rest(route, req->raw_uri);
    size_t n = (size_t)snprintf(out, outlen, "%s", route->prefix), len = 0;
    if (n >= outlen || !guardpath_colons(rest, strcspn(rest, "?"), out + n, outlen - n, &len))
        out[0] = '\0'; /* unreachable (see above); no path names "" */
}

/* Is the holder that began an upload still the lock's (for pruning)? */
static bool upload_still_held(const char *lock, uint64_t token, void *ud)
{
    Server *s = ud;
    const Lock *l = locktab_get(s->locks, KIND_LOCK, lock);
    for (const Holder *h = l ? locktab_holder(l) : NULL; h; h = locktab_next_holder(h))
        if (h->token == token)
            return true;
    return false;
}

static void s3_created(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                       size_t len, bool complete)
{
    (void)headers;
    const GuardRoute *route = ud;
    char id[S3MPU_ID_MAX + 1] = "";
    if (!s3list_rewrite(req, route, status, body, len, complete, id, sizeof id))
        return;
    char object[HTTP_MAX_TARGET + 300];
    upload_object(req, route, object, sizeof object);
    if (!id[0] || !s3mpu_add(req->srv->guard->uploads, id, object, req->guard->s3_lock, req->guard->s3_token))
        log_line(LEVEL_WARN, "guard %s: multipart upload of %s not recorded (%s): its Complete will be refused",
                 route->prefix, object, id[0] ? "the guard's table is full" : "the store named no upload id");
}

/* The request's upload is over (completed or aborted): forgotten, when it is one of this object. */
static void forget_upload(Request *req, const GuardRoute *route)
{
    const char *id = http_query(req, "uploadId");
    char object[HTTP_MAX_TARGET + 300];
    upload_object(req, route, object, sizeof object);
    if (id)
        s3mpu_remove(req->srv->guard->uploads, id, object);
}

static void s3_completed(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                         size_t len, bool complete)
{
    (void)headers;
    const GuardRoute *route = ud;
    if (s3list_rewrite(req, route, status, body, len, complete, NULL, 0) && status == 200)
        forget_upload(req, route);
}

static void s3_aborted(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                       size_t len, bool complete)
{
    (void)headers;
    if (status >= 200 && status < 300) {
        forget_upload(req, ud);
        http_reply_text(req, 204, "application/xml", NULL, 0);
    } else {
        s3list_rewrite(req, ud, status, body, len, complete, NULL, 0);
    }
}

static void s3_listed_parts(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                            size_t len, bool complete)
{
    (void)headers;
    s3list_rewrite(req, ud, status, body, len, complete, NULL, 0);
}

/* A listing of the bucket: the store's, within the route's key prefix, rewritten (s3list.h). */
static void begin_s3_list(Request *req, const GuardRoute *route, bool v2)
{
    char prefix[HTTP_MAX_TARGET + 1];
    if (!route_open(req, route, true) || !s3_read_allowed(req, route, "GET") ||
        !s3list_scope(req, route, v2, prefix, sizeof prefix))
        return;
    s3_call(req, route, "GET", s3list_url(req, route, v2, prefix), gather_all,
            v2 ? list_v2_gathered : list_v1_gathered);
}

/* The checks every write of an S3 route makes from its head: the route is
 * open, the path names a lock, and the request proves that it holds it (a
 * SigV4 signature made with the lease, or Fencing-Lease) with a token that
 * is not stale. Fills b; answers otherwise. */
static bool s3_write_allowed(Request *req, const GuardRoute *route, const char *method, GuardBinding *b)
{
    Server *s = req->srv;
    if (!route_open(req, route, false))
        return false;
    memset(b, 0, sizeof *b);
    const char *problem = NULL;
    if (!bound_lock(route, guardroute_rest(route, req->raw_uri), b->lock, sizeof b->lock, &problem)) {
        bad(req, "path", "a write must go to a path that names its lock: %s", problem);
        return false;
    }
    if (!claims_match(req, b))
        return false;
    if (s3req_signed(req)) {
        if (s3auth_check(req, method, b->lock, false, b->lease, &b->token, &req->guard->auth) != S3AUTH_OK)
            return false;
        const GuardStale *why = guardq_stale_reason(s, b);
        if (why) {
            refused(req, GUARD_REFUSED_STALE);
            guardq_reply_stale(req, b, why);
            return false;
        }
    } else if (!holds(req, method, "Fencing-Lease", b)) {
        return false;
    }
    return token_claim_matches(req, b);
}

/* "Content-Encoding: ..." without aws-chunked (the guard's to take off;
 * another coding stays the object's), or "" when none is left. */
static void encoding_line(Request *req, char *line, size_t linelen)
{
    line[0] = '\0';
    const char *ce = header(req, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (!ce || !s3auth_chunked(req->guard->auth))
        return;
    char rest[96] = "";
    for (const char *p = ce; *p;) {
        size_t n = strcspn(p, ",");
        const char *t = p;
        size_t tn = n;
        while (tn && (*t == ' ' || *t == '\t'))
            t++, tn--;
        while (tn && (t[tn - 1] == ' ' || t[tn - 1] == '\t'))
            tn--;
        if (tn && !(tn == 11 && !strncasecmp(t, "aws-chunked", 11)) && strlen(rest) + tn + 2 < sizeof rest)
            snprintf(rest + strlen(rest), sizeof rest - strlen(rest), "%s%.*s", rest[0] ? "," : "", (int)tn, t);
        p += n;
        if (*p == ',')
            p++;
    }
    if (rest[0])
        snprintf(line, linelen, "Content-Encoding: %s", rest);
}

/* An UploadPart or a Complete must come with the token its upload was begun
 * with: a stale holder's upload cannot be finished by anyone, nor one begun
 * before a restart. Answers 409 otherwise. */
static bool upload_is_the_tokens(Request *req, const GuardRoute *route, const GuardBinding *b)
{
    char object[HTTP_MAX_TARGET + 300];
    upload_object(req, route, object, sizeof object);
    const char *id = http_query(req, "uploadId");
    uint64_t began = id ? s3mpu_token(req->srv->guard->uploads, id, object) : 0;
    if (began == b->token)
        return true;
    refused(req, GUARD_REFUSED_STALE);
    req->srv->metrics.guard_rejected_stale++;
    if (!began)
        http_reply_error(req, ERR_STALE_TOKEN,
                         json_pack("{s:s, s:I, s:s}", "lock", b->lock, "token", (json_int_t)b->token, "s3_code",
                                   "NoSuchUpload"),
                         "upload %.200s of this object was not begun through this gateway since it started (or "
                         "was completed or aborted): begin the upload again",
                         id ? id : "");
    else
        http_reply_error(req, ERR_STALE_TOKEN,
                         json_pack("{s:s, s:I, s:I}", "lock", b->lock, "token", (json_int_t)b->token, "fence",
                                   (json_int_t)began),
                         "fencing token %llu did not begin this upload (token %llu did): an upload is finished "
                         "by the lease that began it, while it holds the lock",
                         (unsigned long long)b->token, (unsigned long long)began);
    return false;
}

/* Does the route's store honour a copy's preconditions, on its destination
 * and on its source (the pin), as the probe found? 501 otherwise, for a
 * CopyObject and an UploadPartCopy alike: never an unconditional copy, nor
 * one of a source the guard did not read. */
static bool copy_conditional(Request *req, const GuardRoute *route)
{
    if (s3_route_copy_if_match(req->srv->guard->s3, (size_t)(route - req->srv->cfg.guards)))
        return true;
    refused(req, GUARD_REFUSED_REQUEST);
    http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s, s:i}", "s3_code", "NotImplemented", "s3_status", 501),
                     "%s", "this store ignores If-Match and If-None-Match on a copy's destination, or "
                           "x-amz-copy-source-if-match on its source (the guard's probe found), so a copy could not "
                           "be fenced: it is not forwarded; GET the source and PUT it instead");
    return false;
}

/* Is req's copy source one the same client could GET through this route
 * (s3copy.h)? Its part below the prefix into rest; answers otherwise: the
 * store is never asked to copy what the client could not read. */
static bool copy_source_readable(Request *req, const GuardRoute *route, char *rest, size_t restlen)
{
    /* A copy reads its source: on a route that does not forward GET (a drop
     * box) it is refused as a GET there is, before the store is asked. */
    if (!guardroute_allows(route, "GET")) {
        refused(req, GUARD_REFUSED_METHOD);
        http_reply_error(req, ERR_METHOD_NOT_ALLOWED, json_pack("{s:s, s:s}", "allow", route->allow, "field",
                                                                "x-amz-copy-source"),
                         "a copy reads its source as a GET would, and GET is not forwarded under %s (this route "
                         "forwards: %s)",
                         route->prefix, route->allow);
        http_add_header(req, MHD_HTTP_HEADER_ALLOW, route->allow);
        return false;
    }
    char path[HTTP_MAX_TARGET + 1];
    switch (s3copy_source(header(req, "x-amz-copy-source"), path, sizeof path)) {
    case S3COPY_VERSION:
        refused(req, GUARD_REFUSED_REQUEST);
        http_reply_error(req, ERR_BAD_REQUEST,
                         json_pack("{s:s, s:s, s:i}", "field", "x-amz-copy-source", "s3_code", "NotImplemented",
                                   "s3_status", 501),
                         "%s", "a copy source with ?versionId is not forwarded by the guard (nor is a GET of a "
                               "version): copy the current version");
        return false;
    case S3COPY_MALFORMED:
        bad(req, "x-amz-copy-source", "%s",
            "x-amz-copy-source must name BUCKET/KEY (the key URL-encoded), as S3 takes it");
        return false;
    case S3COPY_PATH:
        break;
    }
    if (guard_match(req->srv, path) != route || strncmp(path, route->prefix, strlen(route->prefix))) {
        refused(req, GUARD_REFUSED_REQUEST);
        http_reply_error(req, ERR_FORBIDDEN, json_pack("{s:s}", "field", "x-amz-copy-source"),
                         "the copy source must be an object of this bucket (%s): through the guard a copy reads only "
                         "what a GET through the same route could",
                         route->prefix);
        return false;
    }
    snprintf(rest, restlen, "%s", guardroute_rest(route, path));
    const char *problem = guardpath_rest_problem(route->prefix, rest);
    const char *key = rest + strspn(rest, "/");
    if (problem) {
        bad(req, "x-amz-copy-source", "only canonical keys go through the guard; the copy source's has %s", problem);
        return false;
    }
    if (!strcmp(key, S3_PROBE_KEY)) {
        bad(req, "x-amz-copy-source", "%s is the key the guard checks the store with, not for clients", S3_PROBE_KEY);
        return false;
    }
    if (!req->srv->auth)
        return true; /* reads are open: any object of the route */
    /* With API keys, a signed GET of the source would need a lease of its
     * lock (s3_read_allowed); an unsigned one a key allowed that lock, which
     * dispatch checked (guard_bound_locks). */
    char lock[GUARD_BINDING_MAX + 1];
    bool bound = bound_lock(route, rest, lock, sizeof lock, &problem) != NULL;
    if (bound && (!s3req_signed(req) || s3auth_token_holds(req, lock)))
        return true;
    refused(req, GUARD_REFUSED_LEASE_MISSING);
    http_reply_error(req, ERR_FORBIDDEN, json_pack("{s:s}", "field", "x-amz-copy-source"),
                     bound ? "with API keys, a signed copy reads its source as a signed GET would: its lease must "
                             "hold the source's lock too (copy within one lock, a route with lock=NAME, or send the "
                             "API key and Fencing-Lease instead of a signature)"
                           : "the copy source's key names no lock, which an API key could be allowed to read");
    return false;
}

/* A CopyObject of its own destination with directive COPY and nothing else
 * changed (storage class, encryption) is S3's 400 InvalidRequest: the guard
 * always sends REPLACE (to set the fence), which would let it through. */
static bool copy_changes_something(Request *req, const GuardRoute *route, const char *source)
{
    const char *directive = header(req, "x-amz-metadata-directive");
    if ((directive && !strcmp(directive, "REPLACE")) || header(req, "x-amz-storage-class") ||
        header(req, "x-amz-server-side-encryption") || header(req, "x-amz-server-side-encryption-aws-kms-key-id"))
        return true;
    char *from = s3_object_url(route, source);
    char *to = s3_object_url(route, guardroute_rest(route, req->raw_uri));
    bool same = from && to && !strcmp(from, to);
    free(from);
    free(to);
    if (!same)
        return true;
    refused(req, GUARD_REFUSED_REQUEST);
    http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s, s:i}", "s3_code", "InvalidRequest", "s3_status", 400),
                     "%s", "This copy request is illegal because it is trying to copy an object to itself without "
                           "changing the object's metadata, storage class, website redirect location or encryption "
                           "attributes.");
    return false;
}

/* A write through an S3 route, queued: the lease's token becomes the
 * object's precondition (s3req.h). A PUT writes the object, a DELETE a
 * tombstone, a Complete the upload's parts (each with the prepare and
 * confirm steps); an UploadPart writes a part only, with neither; a
 * CopyObject is a PUT of a source's bytes, an UploadPartCopy an UploadPart
 * of them (its prepare step reads the source). */
static void begin_s3_write(Request *req, const GuardRoute *route, const char *method, S3Op op, int64_t content_length)
{
    Server *s = req->srv;
    Guard *g = s->guard;
    bool del = op == S3_OP_DELETE, part = op == S3_OP_MP_PART, complete = op == S3_OP_MP_COMPLETE;
    bool copy = op == S3_OP_COPY, part_copy = op == S3_OP_MP_PART_COPY, any_copy = copy || part_copy;
    GuardBinding b;
    char source[HTTP_MAX_TARGET + 1];
    source[0] = '\0';
    if (!s3_write_allowed(req, route, method, &b) ||
        ((part || part_copy || complete) && !upload_is_the_tokens(req, route, &b)) ||
        (any_copy && !copy_source_readable(req, route, source, sizeof source)) ||
        (any_copy && !copy_conditional(req, route)) || (copy && !copy_changes_something(req, route, source)) ||
        !locks_take_writes(req, &b, 1))
        return;
    if (!del && !complete && !any_copy && !s3auth_header_checksum(req, &req->guard->auth))
        return;
    if (s3auth_chunked(req->guard->auth))
        content_length = s3auth_store_length(req, req->guard->auth, content_length);
    char encoding[128], fence[64];
    encoding_line(req, encoding, sizeof encoding);
    snprintf(fence, sizeof fence, "x-amz-meta-fencing-token: %llu", (unsigned long long)b.token);
    const char *add_put[] = {fence, encoding[0] ? encoding : NULL, NULL};
    char *source_path = any_copy ? s3_object_path(route, source) : NULL;
    char *source_line = NULL;
    if (source_path && asprintf(&source_line, "x-amz-copy-source: %s", source_path) < 0)
        source_line = NULL;
    const char *add_copy[] = {fence, "x-amz-metadata-directive: REPLACE", source_line, NULL};
    const char *add_part_copy[] = {source_line, NULL};
    const char *directive = header(req, "x-amz-metadata-directive");
    bool carry = !directive || strcmp(directive, "REPLACE") != 0;
    const char *add_del[] = {fence, S3_TOMBSTONE_META ": 1", "Content-Type: text/plain", NULL};
    const char *add_part[] = {encoding[0] ? encoding : NULL, NULL};
    static const char *const NONE[] = {NULL};
    ProxyHeaders h = {NONE,
                      del         ? add_del
                      : part_copy ? add_part_copy
                      : part || complete ? add_part
                      : copy      ? add_copy
                                  : add_put,
                      del         ? s3req_keep_none
                      : complete  ? s3req_keep_complete
                      : part_copy ? s3req_keep_part_copy
                      : copy      ? (carry ? s3req_keep_copy : s3req_keep_copy_replace)
                      : s3auth_chunked(req->guard->auth) ? s3req_keep_write_unencoded
                                                         : s3req_keep_write};
    static const char *const PART_Q[] = {"partNumber", "uploadId", NULL};
    static const char *const DONE_Q[] = {"uploadId", NULL};
    char *url = part || part_copy ? s3_url_with(req, route, PART_Q)
                : complete ? s3_url_with(req, route, DONE_Q)
                           : s3_object_url(route, guardroute_rest(route, req->raw_uri));
    int64_t length = del ? (int64_t)(sizeof S3_TOMBSTONE_BODY - 1) : any_copy ? 0 : content_length;
    const char *call_method = complete ? "POST" : "PUT";
    S3Sign sign = {g->s3, route, call_method, url};
    req->guard->call = url ? proxy_call_new(s->proxy, req, call_method, url, true, length, &h) : NULL;
    /* The reads around the write (s3req.h) are HeadObjects of the object
     * itself: never with the completion's ?uploadId, which HeadObject does
     * not take. Owned here until freed below. */
    char *object = complete ? s3_object_url(route, guardroute_rest(route, req->raw_uri)) : NULL;
    if (url && req->guard->call && !part && (!complete || object))
        req->guard->s3 = s3req_write_new(g->s3, s->proxy, req, route, complete ? object : url, b.lock, b.token);
    char *source_url = any_copy && source_path ? s3_object_url(route, source) : NULL;
    char name[HTTP_MAX_TARGET + 300];
    snprintf(name, sizeof name, "%s%s", route->prefix, source + strspn(source, "/"));
    bool copy_ok = !any_copy || (source_line && source_url && s3req_write_copies(req->guard->s3, source_url, name, carry) &&
                                 (!part_copy || s3req_write_copies_part(req->guard->s3, url)));
    /* A write with a prepare step is signed once it has added its last
     * header (s3req.h); an UploadPart, which has none, now. */
    bool signed_ok = req->guard->call && (part ? proxy_call_configure(req->guard->call, s3req_sign, &sign)
                                          : any_copy || (req->guard->s3 && s3req_write_signs(req->guard->s3, call_method, url)));
    free(source_url);
    free(source_line);
    free(source_path);
    free(object);
    free(url);
    if (!req->guard->call || (!part && !req->guard->s3) || !copy_ok || !signed_ok ||
        (del && !proxy_call_fixed_body(req->guard->call, S3_TOMBSTONE_BODY, sizeof S3_TOMBSTONE_BODY - 1)) ||
        !guardq_add(g->queues, req, req->guard->call, !del && !any_copy && content_length > 0, &b, 1, &req->guard->ticket,
                    part ? NULL : s3req_prepare, req->guard->s3)) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    if (complete)
        s3req_write_completes(req->guard->s3, s3_route_mpu_if_match(g->s3, (size_t)(route - s->cfg.guards)));
    if (!part && !part_copy)
        guardq_set_confirm(req->guard->write, s3req_confirm);
    req->guard->s3_token = b.token;
    if (complete)
        proxy_call_on_answer(req->guard->call, gather_all, s3_completed, (void *)route);
    else
        proxy_call_on_answer(req->guard->call, del ? s3req_delete_head : any_copy ? s3req_copy_head : s3req_write_head,
                             del ? s3req_delete_gathered : any_copy ? s3req_copy_gathered : s3req_read_gathered,
                             (void *)route);
}

/* CreateMultipartUpload: the token goes into the object's fencing-token
 * metadata now (the object gets it when the upload completes), and the
 * upload is recorded as this token's (s3mpu.h). Nothing of the object
 * changes yet, so it does not wait in the lock's queue. */
static void begin_s3_create(Request *req, const GuardRoute *route, const char *method)
{
    Server *s = req->srv;
    Guard *g = s->guard;
    GuardBinding b;
    if (!s3_write_allowed(req, route, method, &b))
        return;
    if (s3mpu_count(g->uploads) >= S3MPU_MAX || s3mpu_count_lock(g->uploads, b.lock) >= S3MPU_LOCK_MAX)
        s3mpu_prune(g->uploads, upload_still_held, s);
    /* One lock's uploads have a share of their own: one lease cannot take every upload the guard keeps. */
    if (s3mpu_count_lock(g->uploads, b.lock) >= S3MPU_LOCK_MAX) {
        http_reply_error(req, ERR_OVERLOADED, json_pack("{s:s}", "lock", b.lock),
                         "%d multipart uploads of lock '%s' are open at the guard, its most for one lock: complete "
                         "or abort one, or retry",
                         S3MPU_LOCK_MAX, b.lock);
        return;
    }
    if (s3mpu_count(g->uploads) >= S3MPU_MAX) {
        http_reply_error(req, ERR_OVERLOADED, json_pack("{s:s}", "lock", b.lock),
                         "%d multipart uploads are open at the guard, its most: complete or abort one, or retry",
                         S3MPU_MAX);
        return;
    }
    char fence[64];
    snprintf(fence, sizeof fence, "x-amz-meta-fencing-token: %llu", (unsigned long long)b.token);
    const char *add[] = {fence, NULL};
    static const char *const NONE[] = {NULL};
    ProxyHeaders h = {NONE, add, s3req_keep_write};
    static const char *const CREATE_Q[] = {NULL};
    char *base = s3_url_with(req, route, CREATE_Q);
    char *url = NULL;
    if (base && asprintf(&url, "%s?uploads=", base) < 0)
        url = NULL;
    free(base);
    S3Sign sign = {g->s3, route, "POST", url};
    req->guard->call = url ? proxy_call_new(s->proxy, req, "POST", url, false, 0, &h) : NULL;
    bool signed_ok = req->guard->call && proxy_call_configure(req->guard->call, s3req_sign, &sign);
    free(url);
    if (!signed_ok) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    req->guard->s3_token = b.token;
    snprintf(req->guard->s3_lock, sizeof req->guard->s3_lock, "%s", b.lock);
    proxy_call_on_answer(req->guard->call, gather_all, s3_created, (void *)route);
    proxy_call_start(req->guard->call);
}

/* AbortMultipartUpload: the lease must hold the object's lock (any holder
 * may clean up an upload of its object, but not another object's: a store
 * that does not check the key an upload id goes with, moto for one, would
 * abort it, and the guard would forget it). ListParts: a read. */
static void begin_s3_upload_call(Request *req, const GuardRoute *route, const char *method, S3Op op)
{
    Guard *g = req->srv->guard;
    GuardBinding b;
    if (op == S3_OP_MP_ABORT ? !s3_write_allowed(req, route, method, &b)
                             : !route_open(req, route, true) || !s3_read_allowed(req, route, method))
        return;
    char object[HTTP_MAX_TARGET + 300];
    upload_object(req, route, object, sizeof object);
    const char *id = http_query(req, "uploadId");
    if (id && s3mpu_elsewhere(g->uploads, id, object)) {
        refused(req, GUARD_REFUSED_REQUEST);
        http_reply_error(req, ERR_NOT_FOUND, json_pack("{s:s, s:i}", "s3_code", "NoSuchUpload", "s3_status", 404),
                         "The specified multipart upload does not exist.");
        return;
    }
    static const char *const ABORT_Q[] = {"uploadId", NULL};
    static const char *const LIST_Q[] = {"max-parts", "part-number-marker", "uploadId", NULL};
    char *url = s3_url_with(req, route, op == S3_OP_MP_ABORT ? ABORT_Q : LIST_Q);
    s3_call(req, route, method, url, gather_all, op == S3_OP_MP_ABORT ? s3_aborted : s3_listed_parts);
}

/* An S3 route's request, once its share is taken. */
static void begin_s3(Request *req, const GuardRoute *route, const char *method, S3Op op, int64_t content_length)
{
    switch (op) {
    case S3_OP_READ:
    case S3_OP_READ_TAGGING:
        begin_s3_read(req, route, method, op == S3_OP_READ_TAGGING);
        break;
    case S3_OP_PUT:
    case S3_OP_COPY:
    case S3_OP_DELETE:
    case S3_OP_MP_PART:
    case S3_OP_MP_PART_COPY:
    case S3_OP_MP_COMPLETE:
        begin_s3_write(req, route, method, op, content_length);
        break;
    case S3_OP_MP_CREATE:
        begin_s3_create(req, route, method);
        break;
    case S3_OP_MP_ABORT:
    case S3_OP_MP_LIST_PARTS:
        begin_s3_upload_call(req, route, method, op);
        break;
    case S3_OP_LIST_V1:
    case S3_OP_LIST_V2:
        begin_s3_list(req, route, op == S3_OP_LIST_V2);
        break;
    case S3_OP_LOCATION:
    case S3_OP_HEAD_BUCKET:
    case S3_OP_CREATE_BUCKET:
        /* As a listing: a signature names no lock, so with --auth-file it opens nothing here. */
        if (s3_read_allowed(req, route, method))
            s3list_answer_bucket(req, route, method, op == S3_OP_LOCATION);
        break;
    case S3_OP_NONE:
    default:
        break;
    }
}

bool guard_prepare(Request *req, const GuardRoute *route)
{
    if (!req->guard && !(req->guard = calloc(1, sizeof *req->guard))) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return false;
    }
    req->guard->route = route;
    if (route->kind == GUARD_S3)
        req->guard->reply_error = s3err_reply;
    return true;
}

void guard_begin(Request *req, const GuardRoute *route, const char *method, const char *key)
{
    if (!guard_prepare(req, route))
        return;
    req->stream = &guarded;
    Guard *g = req->srv->guard;
    bool s3 = route->kind == GUARD_S3;
    if (!guardroute_allows(route, method)) {
        refused(req, GUARD_REFUSED_METHOD);
        http_reply_error(req, ERR_METHOD_NOT_ALLOWED, json_pack("{s:s}", "allow", route->allow),
                         "%.20s is not forwarded under %s (this route forwards: %s)", method, route->prefix,
                         route->allow);
        http_add_header(req, MHD_HTTP_HEADER_ALLOW, route->allow);
        return;
    }
    bool framed, has_body;
    int64_t content_length;
    if (!acceptable(req, route, method, &framed, &has_body, &content_length))
        return;
    bool read = guardroute_is_read(method);
    S3Op op = S3_OP_NONE;
    if (s3 ? (op = s3req_classify(req, route, method, req->srv->auth != NULL)) == S3_OP_NONE
           : !query_names_no_override(req) || (!read && !reaches_only_its_own(req, route, method)))
        return;
    if (!take_share(req, g, key))
        return;
    if (s3)
        begin_s3(req, route, method, op, content_length);
    else if (read)
        begin_read(req, route, method);
    else
        begin_write(req, route, method, framed, has_body, content_length);
    if (req->response)
        guardshare_give(&req->guard->ticket); /* refused: its share is free again at once */
}

void guard_request_end(Request *req)
{
    if (!req->guard)
        return;
    guardq_request_end(req);
    s3req_write_free(req->guard->s3);
    req->guard->s3 = NULL;
    if (req->guard->pre) {
        proxy_call_free(req->guard->pre); /* its report never comes */
        req->guard->pre = NULL;
    }
    free(req->guard->form);
    req->guard->form = NULL;
    s3auth_free(req->guard->auth);
    req->guard->auth = NULL;
    if (req->guard->call) {
        proxy_call_free(req->guard->call);
        req->guard->call = NULL;
    }
    guardshare_give(&req->guard->ticket);
    free(req->guard);
    req->guard = NULL;
}
