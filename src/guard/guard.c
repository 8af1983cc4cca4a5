/*
 * guard — lease checks and write order in front of the proxy; see
 * include/leasegate/guard.h.
 *
 * Each lock with writes in progress has a queue of them, in arrival order.
 * Only the head may talk to the upstream. Life of a write at the head:
 *   waits for its mark to be durable (and, without a body, for the request
 *   to be complete) -> checked -> its call starts, the body streams but its
 *   end is held back -> the body is complete -> checked again -> the end is
 *   released -> the upstream answers -> it leaves the queue, the next starts.
 * A failed check refuses the write with 409 and cuts its call off. A write
 * whose client goes away after its end was released stays at the head until
 * the upstream answers (its call runs on, detached).
 */
#include "leasegate/guard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "leasegate/guardpath.h"
#include "leasegate/httphead.h"
#include "leasegate/names.h"
#include "leasegate/proxy.h"
#include "leasegate/smap.h"
#include "leasegate/trail.h"

typedef struct GuardQueue {
    DList writes;    /* GuardWrite.link, in arrival order */
    char lock[];     /* the map's key */
} GuardQueue;

struct GuardWrite {
    DLink link;          /* in q->writes while queued */
    GuardQueue *q;       /* NULL once out of the queue */
    Guard *guard;
    Request *req;        /* NULL once the client is gone */
    ProxyCall *call;     /* req->guard.call; this write's own once detached */
    CommitHold hold;     /* waits for the raised mark to be durable */
    uint8_t lease[LEASE_ID_BYTES];
    uint64_t token;
    bool has_body;
    bool durable;        /* every change recorded before it is durable */
    bool body_done;      /* the client's body has fully arrived */
    bool started;        /* its call was started */
    bool released;       /* the upstream may have the whole request */
};

struct Guard {
    Server *srv;
    Smap *queues; /* lock name -> GuardQueue, only while it has writes */
};

Guard *guard_new(Server *s)
{
    Guard *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->srv = s;
    g->queues = smap_new();
    if (!g->queues) {
        free(g);
        return NULL;
    }
    return g;
}

void guard_free(Guard *g)
{
    if (!g)
        return;
    smap_free(g->queues, free);
    free(g);
}

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

static const char *header(Request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
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
    if (bad->problem) {
        bad->name = key;
        return MHD_NO;
    }
    return MHD_YES;
}

static const char *const REASONS[] = {
    [REASON_UNKNOWN] = "the lease is not one this server issued for the lock, or it has been forgotten",
    [REASON_EXPIRED] = "the lease expired",
    [REASON_SUPERSEDED] = "the lease expired and the lock has a newer holder",
    [REASON_RELEASED] = "the lease was released",
    [REASON_REVOKED] = "an admin force-released the lock",
};

/* Why a write by `lease` with `token` may not go upstream now, or NULL. */
static const char *stale_reason(const Server *s, const char *lock, const uint8_t *lease, uint64_t token)
{
    Now now = clock_now();
    const Lock *l = locktab_held_by(s->locks, lock, lease, &now);
    if (!l)
        return REASONS[locktab_why_not(s->locks, lock, lease)];
    if (l->holder.token != token)
        return "the lease's token changed"; /* cannot happen: reentry keeps it */
    if (fence_max(s->guard_marks, lock) > token)
        return "a write with a larger token was let through";
    return NULL;
}

/* 409 stale_token; token 0 when the lease holds nothing (so has no token). */
static void reply_stale(Request *req, const char *lock, uint64_t token, const char *why)
{
    Server *s = req->srv;
    s->metrics.guard_rejected_stale++;
    trail_note(s, req, AUDIT_GUARD_REFUSED, lock, "", token);
    const Lock *l = locktab_get(s->locks, lock);
    json_t *holder = l && l->held ? json_integer((json_int_t)l->holder.token) : json_null();
    json_t *extra = json_pack("{s:s, s:o, s:I, s:o}", "lock", lock, "token",
                              token ? json_integer((json_int_t)token) : json_null(), "max_token",
                              (json_int_t)fence_max(s->guard_marks, lock), "holder_token", holder);
    http_reply_error(req, ERR_STALE_TOKEN, extra, "this write to %s under lock '%s' may not go through: %s",
                     req->raw_uri ? req->raw_uri : "?", lock, why);
}

static void advance(Guard *g, GuardQueue *q);

/* Takes w out of its queue (the queue goes when empty, unless the caller
 * goes on with it: then it advances it). */
static void dequeue(GuardWrite *w)
{
    if (!w->q)
        return;
    dlist_remove(&w->q->writes, &w->link);
    w->q = NULL;
    commit_unhold(w->guard->srv->commit, &w->hold);
}

static void drop_queue_if_empty(Guard *g, GuardQueue *q)
{
    if (q->writes.len == 0) {
        smap_remove(g->queues, q->lock);
        free(q);
    }
}

/* Refuses a queued write: its call is cut off, its client answered 409. */
static void refuse(GuardWrite *w, const char *why)
{
    GuardQueue *q = w->q;
    char lock[NAME_MAX_BYTES + 1];
    snprintf(lock, sizeof lock, "%s", q->lock);
    dequeue(w);
    if (w->call)
        proxy_call_abort(w->call);
    if (w->req)
        reply_stale(w->req, lock, w->token, why);
}

/* The head of the queue moves as far as it can; see the top of this file. */
static void advance(Guard *g, GuardQueue *q)
{
    Server *s = g->srv;
    while (q->writes.head) {
        GuardWrite *w = DLIST_ITEM(q->writes.head, GuardWrite, link);
        if (w->released)
            return; /* the upstream may be applying it: wait for its answer */
        if (!w->started) {
            /* A write without a body is whole once it starts: it waits for its end. */
            if (!w->durable || (!w->has_body && !w->body_done))
                return;
            const char *why = stale_reason(s, q->lock, w->lease, w->token);
            if (why) {
                refuse(w, why);
                continue;
            }
            w->started = true;
            w->released = !w->has_body;
            proxy_call_start(w->call);
            if (w->released)
                return;
        }
        if (!w->body_done)
            return;
        const char *why = stale_reason(s, q->lock, w->lease, w->token);
        if (why) {
            refuse(w, why);
            continue;
        }
        w->released = true;
        proxy_call_release(w->call);
        return;
    }
    drop_queue_if_empty(g, q);
}

static void write_free(GuardWrite *w) { free(w); }

/* The upstream answered w (or its call failed): the next write may go. */
static void on_answered(void *ud)
{
    GuardWrite *w = ud;
    GuardQueue *q = w->q;
    Guard *g = w->guard;
    dequeue(w);
    if (!w->req)
        write_free(w); /* detached: nobody else holds it */
    if (q)
        advance(g, q);
}

/* The raised mark (and everything before it) is durable. */
static void mark_durable(CommitHold *hold)
{
    GuardWrite *w = CONTAINER_OF(hold, GuardWrite, hold);
    w->durable = true;
    if (w->q)
        advance(w->guard, w->q);
}

static GuardQueue *queue_for(Guard *g, const char *lock)
{
    GuardQueue *q = smap_get(g->queues, lock);
    if (q)
        return q;
    size_t n = strlen(lock) + 1;
    q = calloc(1, sizeof *q + n);
    if (!q)
        return NULL;
    memcpy(q->lock, lock, n);
    if (!smap_insert(g->queues, q->lock, q)) {
        free(q);
        return NULL;
    }
    return q;
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

/* Never forwarded: the lease is the secret, and the guard sets the others
 * itself; with API keys (--auth-file), the key is leasegate's, not the
 * upstream's, so Authorization stops here too. */
static const char *const DROP[] = {"Fencing-Lease", "Fencing-Token", "Fencing-Lock", NULL};
static const char *const DROP_WITH_KEYS[] = {"Fencing-Lease", "Fencing-Token", "Fencing-Lock", "Authorization", NULL};

/* Checks of the headers that every guarded request passes. */
/* *framed: the request declares a body (Content-Length, even 0, or
 * Transfer-Encoding), which the upstream call must declare too; *has_body:
 * it may have bytes. */
static bool acceptable(Request *req, const GuardRoute *route, const char *method, bool *framed, bool *has_body,
                       int64_t *content_length)
{
    const char *rest = req->raw_uri + strlen(route->prefix);
    const char *problem = guardpath_problem(rest);
    if (problem) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL, "only canonical paths go through the guard; this one has %s",
                         problem);
        return false;
    }
    BadHeader bad = {NULL, NULL};
    MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, find_bad_header, &bad);
    if (bad.problem) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL, "header '%.100s': %s", bad.name, bad.problem);
        return false;
    }
    const char *cl = header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = header(req, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    uint64_t n = 0;
    if (cl && te) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL, "a request may not have both Content-Length and Transfer-Encoding");
        return false;
    }
    if (cl && (!httphead_content_length(req->conn, &n) || n > INT64_MAX)) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL, "Content-Length is not a number");
        return false;
    }
    *framed = cl || te;
    *has_body = te || n > 0;
    *content_length = te ? -1 : (int64_t)n;
    /* A body on a method that passes unchecked would be a write without a lease. */
    if (safe_method(method) && *has_body) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL, "%s may not carry a body through the guard", method);
        return false;
    }
    return true;
}

/* A write: the lease in Fencing-Lease holds the bound lock, its token is not
 * below the lock's mark. Fills w; replies and returns false otherwise. */
static bool write_allowed(Request *req, const GuardRoute *route, const char *method, GuardWrite *w, char *lock,
                          size_t locklen)
{
    Server *s = req->srv;
    const char *problem = NULL;
    if (route->lock[0])
        snprintf(lock, locklen, "%s", route->lock);
    else if (!guardpath_lock(req->raw_uri + strlen(route->prefix), lock, locklen, &problem)) {
        http_reply_error(req, ERR_BAD_REQUEST, NULL,
                         "a write must go to a path that names its lock ([A-Za-z0-9._~:/-], at most 256 bytes, not "
                         "ending in acquire, renew, release or history): %s",
                         problem);
        return false;
    }
    const char *lease_s = header(req, "Fencing-Lease");
    uuid_t lease;
    if (!lease_s || strlen(lease_s) != 36 || uuid_parse(lease_s, lease) != 0) {
        s->metrics.guard_rejected_missing++;
        trail_note(s, req, AUDIT_GUARD_REFUSED, lock, "", 0);
        http_reply_error(req, ERR_TOKEN_REQUIRED, json_pack("{s:s}", "lock", lock),
                         "%s needs header Fencing-Lease: the lease (from acquire) that holds lock '%s'%s", method, lock,
                         lease_s ? "; the one sent is not a lease id" : "");
        return false;
    }
    const char *named = header(req, "Fencing-Lock");
    if (named && strcmp(named, lock) != 0) {
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "lock", lock),
                         "Fencing-Lock '%.300s' is not the lock this path is bound to ('%s')", named, lock);
        return false;
    }
    Now now = clock_now();
    const Lock *l = locktab_held_by(s->locks, lock, lease, &now);
    uint64_t token = l ? l->holder.token : 0;
    const char *token_s = header(req, "Fencing-Token");
    uint64_t sent;
    if (token_s && (!parse_token(token_s, &sent) || (l && sent != token))) {
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "lock", lock),
                         "Fencing-Token '%.40s' is not the token of the lease in Fencing-Lease", token_s);
        return false;
    }
    if (!l) {
        reply_stale(req, lock, 0, REASONS[locktab_why_not(s->locks, lock, lease)]);
        return false;
    }
    const char *why = stale_reason(s, lock, lease, token);
    if (why) {
        reply_stale(req, lock, token, why);
        return false;
    }
    memcpy(w->lease, lease, LEASE_ID_BYTES);
    w->token = token;
    return true;
}

/* The mark becomes `token` (recorded before it is applied). False: out of memory. */
static bool raise_mark(Server *s, const char *lock, uint64_t token)
{
    Now now = clock_now();
    uint64_t max;
    if (fence_check(s->guard_marks, lock, token, &now, &max) != FENCE_ACCEPTED)
        return false;
    if (token > max) {
        if (!commit_guard_mark(s->commit, lock, token))
            return false;
        fence_raise(s->guard_marks, lock, token);
    }
    return true;
}

/* The body, as it arrives, goes to the upstream call; a refused request has
 * none, and its body is dropped. */
static void stream_upload(Request *req, const char *data, size_t *size)
{
    if (req->guard.call)
        proxy_call_upload(req->guard.call, data, size);
    else
        *size = 0;
}

static void body_done(Request *req);

static bool stream_complete(Request *req)
{
    if (!req->guard.call)
        return false;
    /* The guard may refuse the write now that its body is complete. */
    body_done(req);
    return req->response ? true : proxy_call_final(req->guard.call) == MHD_YES;
}

static void stream_abort(Request *req)
{
    if (req->guard.call)
        proxy_call_abort(req->guard.call);
}

static const RequestStream guarded = {stream_upload, stream_complete, stream_abort};

void guard_begin(Request *req, const GuardRoute *route, const char *method)
{
    Server *s = req->srv;
    req->stream = &guarded;
    Guard *g = s->guard;
    bool framed, has_body;
    int64_t content_length;
    if (!acceptable(req, route, method, &framed, &has_body, &content_length))
        return;
    if (proxy_calls(s->proxy) >= s->cfg.guard_max_calls) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "%zu upstream calls are in flight (--guard-max-calls); retry",
                         s->cfg.guard_max_calls);
        return;
    }
    bool write = !safe_method(method);
    GuardWrite *w = NULL;
    char lock[NAME_MAX_BYTES + 1];
    char token_line[64], lock_line[NAME_MAX_BYTES + 32];
    const char *add[3] = {NULL, NULL, NULL};
    if (write) {
        w = calloc(1, sizeof *w);
        if (!w) {
            http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
            return;
        }
        if (!write_allowed(req, route, method, w, lock, sizeof lock)) {
            write_free(w);
            return;
        }
        snprintf(token_line, sizeof token_line, "Fencing-Token: %llu", (unsigned long long)w->token);
        snprintf(lock_line, sizeof lock_line, "Fencing-Lock: %s", lock);
        add[0] = token_line;
        add[1] = lock_line;
    }
    char *url = upstream_url(route, req->raw_uri);
    /* A read passes with no body (acceptable() saw to that): declaring one,
     * even of 0 bytes, would make curl send it as an upload (a PUT). */
    req->guard.call = url ? proxy_call_new(s->proxy, req, method, url, write && framed, content_length,
                                                   s->auth ? DROP_WITH_KEYS : DROP, add) : NULL;
    free(url);
    GuardQueue *q = w && req->guard.call ? queue_for(g, lock) : NULL;
    if (!req->guard.call || (w && (!q || !raise_mark(s, lock, w->token)))) {
        if (q)
            drop_queue_if_empty(g, q);
        write_free(w);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    if (!w) {
        proxy_call_start(req->guard.call);
        return;
    }
    /* Writes that can no longer pass (a smaller token, not yet with the
     * upstream) are refused now, so that this one need not wait for them. */
    for (DLink *l = q->writes.head; l;) {
        GuardWrite *older = DLIST_ITEM(l, GuardWrite, link);
        l = l->next;
        if (older->token < w->token && !older->released)
            refuse(older, "a write with a larger token arrived");
    }
    w->guard = g;
    w->req = req;
    w->call = req->guard.call;
    w->has_body = has_body;
    req->guard.write = w;
    proxy_call_hold_end(w->call);
    proxy_call_on_answered(w->call, on_answered, w);
    w->q = q;
    dlist_append(&q->writes, &w->link);
    if (commit_pending(s->commit)) {
        w->hold.ready = mark_durable;
        commit_hold(s->commit, &w->hold);
    } else {
        w->durable = true;
    }
    advance(g, q);
}

static void body_done(Request *req)
{
    GuardWrite *w = req->guard.write;
    if (!w || w->body_done)
        return;
    w->body_done = true;
    if (w->q)
        advance(w->guard, w->q);
}

static void write_end(Request *req);

void guard_request_end(Request *req)
{
    write_end(req);
    if (req->guard.call) {
        proxy_call_free(req->guard.call);
        req->guard.call = NULL;
    }
}

static void write_end(Request *req)
{
    GuardWrite *w = req->guard.write;
    if (!w)
        return;
    req->guard.write = NULL;
    w->req = NULL;
    Guard *g = w->guard;
    GuardQueue *q = w->q;
    if (q && w->released && req->guard.call) {
        /* The upstream may have the whole request: the next write waits for its answer. */
        ProxyCall *call = req->guard.call;
        req->guard.call = NULL;
        if (proxy_call_detach(call))
            return; /* on_answered frees w */
    }
    dequeue(w);
    write_free(w);
    if (q)
        advance(g, q);
}
