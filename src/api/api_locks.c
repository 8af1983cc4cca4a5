/*
 * api_locks — acquire, renew, release, get and list: JSON in, lock table
 * calls, JSON out. The lease id appears only in the acquire response (it is
 * the credential); every other view of a lock leaves it out.
 */
#include <string.h>
#include <uuid/uuid.h>

#include "leasegate/access.h"
#include "leasegate/api.h"
#include "leasegate/body.h"
#include "leasegate/query.h"
#include "leasegate/names.h"
#include "leasegate/events.h"
#include "leasegate/jsonw.h"
#include "leasegate/quota.h"
#include "leasegate/rawjson.h"
#include "leasegate/trail.h"
#include "leasegate/watch.h"

#define TTL_MIN_MS 100
#define TTL_MAX_MS 86400000
#define TTL_DEFAULT_MS 30000
#define WAIT_MAX_MS 3600000
#define WATCH_MAX_MS 300000 /* as long as a long-poll on events */
#define QUEUE_SHOWN 100     /* waiters listed by GET /v1/locks/NAME (`waiters` counts them all) */
#define OWNER_MAX_BYTES 128
#define REQUEST_ID_MAX_BYTES 64
#define METADATA_MAX_BYTES 4096
#define LIST_MAX 1000
#define LIST_DEFAULT 100

/* Metadata is kept as its client sent it and goes back byte for byte (rawjson.h). */

/* The holder as every reader may see it: no lease id. */
static json_t *holder_new(const Holder *h, RawRefs *refs)
{
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:o}", "owner", h->owner, "token", (json_int_t)h->token,
                     "ttl_ms", (json_int_t)h->ttl_ms, "acquired_at_ms", (json_int_t)h->acquired_at_ms,
                     "expires_at_ms", (json_int_t)h->expires_at_ms, "count", (json_int_t)h->count, "metadata",
                     rawjson_ref(refs, h->metadata));
}

static json_t *lock_state_new(const Locktab *lt, const char *name, const Lock *lock, RawRefs *refs)
{
    if (!lock)
        return json_pack("{s:s, s:b, s:n, s:i, s:i, s:I}", "name", name, "held", 0, "holder", "waiters", 0,
                         "last_token", 0, "index", (json_int_t)locktab_index(lt, name));
    return json_pack("{s:s, s:b, s:o, s:I, s:I, s:I}", "name", lock->name, "held", lock->held, "holder",
                     lock->held ? holder_new(&lock->holder, refs) : json_null(), "waiters",
                     (json_int_t)lock->waiters.len, "last_token", (json_int_t)lock->last_token, "index",
                     (json_int_t)lock->index);
}

/* 200 with the object w has written (jsonw.h: the hot answers). */
static void reply_written(Request *req, JsonW *w)
{
    size_t len;
    char *text = jsonw_end_new(w, &len);
    http_reply_json_text(req, 200, text, len);
}

static void reply_grant(Request *req, const Lock *lock)
{
    const Holder *h = &lock->holder;
    char lease[37];
    uuid_unparse_lower(h->lease, lease);
    http_note_grant(req, lock->name, h->lease);
    locktab_answer_started(req->srv->locks, lock->name, h->lease);
    /* Every client's hot path: written with jsonw (jsonw.h says why). */
    JsonW w;
    jsonw_begin(&w);
    jsonw_str(&w, "name", lock->name);
    jsonw_str(&w, "owner", h->owner);
    jsonw_str(&w, "lease", lease);
    jsonw_int(&w, "token", (int64_t)h->token);
    jsonw_int(&w, "ttl_ms", h->ttl_ms);
    jsonw_int(&w, "acquired_at_ms", h->acquired_at_ms);
    jsonw_int(&w, "expires_at_ms", h->expires_at_ms);
    jsonw_int(&w, "count", h->count);
    jsonw_raw(&w, "metadata", h->metadata);
    reply_written(req, &w);
}

static void reply_lock_held(Request *req, const Lock *lock)
{
    RawRefs refs = {.n = 0};
    json_t *extra = json_pack("{s:s, s:o, s:I}", "name", lock->name, "holder",
                              lock->held ? holder_new(&lock->holder, &refs) : json_null(), "waiters",
                              (json_int_t)lock->waiters.len);
    if (lock->held)
        http_reply_error_raw(req, ERR_LOCK_HELD, extra, &refs, "lock '%s' is held by '%s' (token %llu)",
                             lock->name, lock->holder.owner, (unsigned long long)lock->holder.token);
    else
        http_reply_error_raw(req, ERR_LOCK_HELD, extra, &refs, "lock '%s' was not granted in time", lock->name);
}

static const char *const REASONS[] = {
    [REASON_UNKNOWN] = "unknown",
    [REASON_EXPIRED] = "expired",
    [REASON_SUPERSEDED] = "superseded",
    [REASON_RELEASED] = "released",
    [REASON_REVOKED] = "revoked",
};

static const char *const REASON_TEXT[] = {
    [REASON_UNKNOWN] = "this server did not issue it for this lock, or has forgotten it",
    [REASON_EXPIRED] = "its TTL ran out",
    [REASON_SUPERSEDED] = "its TTL ran out and the lock has since been granted to another lease",
    [REASON_RELEASED] = "it was released",
    [REASON_REVOKED] = "an admin force-released the lock",
};

static void reply_not_holder(Request *req, const char *name, const uint8_t *lease)
{
    Server *s = req->srv;
    NotHolderReason why = locktab_why_not(s->locks, name, lease);
    s->metrics.not_holder++;
    http_reply_error(req, ERR_NOT_HOLDER, json_pack("{s:s, s:s}", "name", name, "reason", REASONS[why]),
                     "lease does not hold lock '%s': %s", name, REASON_TEXT[why]);
}

static void reply_overloaded(Request *req, LockResult r)
{
    const Server *s = req->srv;
    if (r == LOCK_TOO_MANY_LOCKS)
        /* Names are kept until forgotten (--forget-idle-after), for last_token. */
        http_reply_error(req, ERR_OVERLOADED, NULL,
                         "the lock table is full: %zu lock names are known (--max-locks); idle ones are "
                         "forgotten after --forget-idle-after",
                         s->cfg.max_locks);
    else if (r == LOCK_TOO_MANY_WAITERS)
        http_reply_error(req, ERR_OVERLOADED, NULL,
                         "too many waiters (--max-waiters %zu in all, --max-waiters-per-lock %zu for one lock); "
                         "retry later",
                         s->cfg.max_waiters, s->cfg.max_waiters_per_lock);
    else
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry later");
}

void api_acquire(Request *req)
{
    static const char *const FIELDS[] = {"owner", "ttl_ms", "wait_ms", "metadata", "lease", "request_id", NULL};
    Server *s = req->srv;
    if (!body_check_name(req, "name", req->arg))
        return;
    json_t *obj = body_object_new(req, FIELDS);
    if (!obj)
        return;
    const char *owner, *request_id;
    json_int_t ttl_ms, wait_ms;
    uint8_t lease[LEASE_ID_BYTES];
    bool reentry;
    char *metadata = NULL;
    if (body_string(req, obj, "owner", OWNER_MAX_BYTES, true, &owner) &&
        body_int(req, obj, "ttl_ms", TTL_MIN_MS, TTL_MAX_MS, TTL_DEFAULT_MS, false, &ttl_ms) &&
        body_int(req, obj, "wait_ms", 0, WAIT_MAX_MS, 0, false, &wait_ms) && body_lease(req, obj, false, lease, &reentry) &&
        body_string(req, obj, "request_id", REQUEST_ID_MAX_BYTES, false, &request_id) &&
        body_metadata(req, obj, METADATA_MAX_BYTES, &metadata)) {
        /* Reentry without ttl_ms keeps the lease's own ttl rather than the default. */
        if (reentry && !json_object_get(obj, "ttl_ms"))
            ttl_ms = 0;
        if (wait_ms > 0 && s->stopping) {
            /* Shutting down: no new waiters, they could not be answered. */
            http_reply_error(req, ERR_OVERLOADED, NULL, "server is shutting down; retry");
            free(metadata);
            json_decref(obj);
            return;
        }
        const Lock *before = locktab_get(s->locks, req->arg);
        Charge charge = {NULL, NULL};
        if (!reentry && !quota_admit(req, before, wait_ms > 0, owner, request_id, &charge)) {
            free(metadata);
            json_decref(obj);
            return;
        }
        uint8_t fresh[LEASE_ID_BYTES];
        if (!reentry && !leaseid_next(&s->lease_ids, fresh)) {
            quota_named(s, &charge, 0);
            http_reply_error(req, ERR_OVERLOADED, NULL, "no random bytes for a lease id; retry");
            free(metadata);
            json_decref(obj);
            return;
        }
        AcquireArgs args = {.owner = owner,
                            .metadata = metadata,
                            .ttl_ms = ttl_ms,
                            .wait_ms = wait_ms,
                            .lease = reentry ? lease : NULL,
                            .new_lease = reentry ? NULL : fresh,
                            .request_id = request_id,
                            .key = req->access.key ? req->access.key->name : NULL,
                            .charge = charge};
        req->grant.asked_us = clock_boot_us();
        Now now = clock_now();
        const Lock *lock;
        Waiter *waiter;
        LockResult r = locktab_acquire(s->locks, req->arg, &args, req, &now, &lock, &waiter);
        /* A name made now counts against its charge until it is forgotten. */
        quota_named(s, &charge, !before && locktab_get(s->locks, req->arg) ? +1 : 0);
        switch (r) {
        case LOCK_OK:
            if (reentry) {
                s->metrics.reentries++;
                events_note(s, AUDIT_REENTERED, lock->name, lock->holder.owner, lock->holder.token);
            } else {
                s->metrics.grants++;
                histogram_observe(&s->metrics.acquire_wait, (double)(clock_boot_us() - req->grant.asked_us) / 1e6);
                quota_held(s, lock->holder.key, +1);
                trail_note(s, req, AUDIT_GRANTED, lock->name, lock->holder.owner, lock->holder.token);
            }
            reply_grant(req, lock);
            break;
        case LOCK_REPLAYED:
            /* Held like any answer until what is pending is durable: the
             * grant repeated may still be in the batch being committed. */
            s->metrics.replays++;
            reply_grant(req, lock);
            break;
        case LOCK_QUEUED:
            quota_wait_start(req);
            events_note(s, AUDIT_WAITER_JOINED, req->arg, owner, 0);
            http_wait(req, waiter);
            break;
        case LOCK_BUSY:
            reply_lock_held(req, lock);
            break;
        case LOCK_NOT_HOLDER:
            reply_not_holder(req, req->arg, lease);
            break;
        case LOCK_TOO_MANY_LOCKS:
        case LOCK_TOO_MANY_WAITERS:
        case LOCK_NOMEM:
            reply_overloaded(req, r);
            break;
        }
    }
    free(metadata);
    json_decref(obj);
}

void api_waiter_granted(Request *req, const Lock *lock)
{
    http_waiter_done(req);
    quota_wait_stop(req);
    quota_held(req->srv, lock->holder.key, +1);
    req->srv->metrics.grants++;
    histogram_observe(&req->srv->metrics.acquire_wait, (double)(clock_boot_us() - req->grant.asked_us) / 1e6);
    trail_note(req->srv, req, AUDIT_GRANTED, lock->name, lock->holder.owner, lock->holder.token);
    reply_grant(req, lock);
}

void api_waiter_timed_out(Request *req, const Lock *lock)
{
    http_waiter_done(req);
    quota_wait_stop(req);
    events_note(req->srv, AUDIT_WAITER_LEFT, lock->name, "", 0);
    req->srv->metrics.wait_timeouts++;
    reply_lock_held(req, lock);
}

void api_waiter_left(Request *req)
{
    /* The name from the waiter, not req->arg: a parked waiter has none (park.c
     * frees it), and a NULL name crashed watch_note and events_note. */
    events_note(req->srv, AUDIT_WAITER_LEFT, locktab_waiter_lock(req->wait.waiter), "", 0);
    locktab_cancel(req->srv->locks, req->wait.waiter);
    quota_wait_stop(req);
    req->srv->metrics.waiter_disconnects++;
}

void api_waiter_revoked(Request *req, ErrCode code, const char *why)
{
    events_note(req->srv, AUDIT_WAITER_LEFT, locktab_waiter_lock(req->wait.waiter), "", 0);
    locktab_cancel(req->srv->locks, req->wait.waiter);
    quota_wait_stop(req);
    http_waiter_done(req);
    http_reply_error(req, code, NULL, "%s", why);
}

void api_request_end(Request *req, bool delivered)
{
    Server *s = req->srv;
    /* An undelivered grant is undone, unless another answer of it (a replay
     * of its request_id) was delivered or still may be. */
    if (req->grant.pending && locktab_answer_ended(s->locks, req->grant.lock, req->grant.lease, delivered)) {
        Now now = clock_now();
        uint32_t left;
        s->trail_actor = req;
        if (locktab_release(s->locks, req->grant.lock, req->grant.lease, &now, &left) == LOCK_OK)
            s->metrics.undelivered_grants++;
        s->trail_actor = NULL;
    }
}

void api_renew(Request *req)
{
    static const char *const FIELDS[] = {"lease", "ttl_ms", NULL};
    Server *s = req->srv;
    if (!body_check_name(req, "name", req->arg))
        return;
    json_t *obj = body_object_new(req, FIELDS);
    if (!obj)
        return;
    uint8_t lease[LEASE_ID_BYTES];
    bool present;
    json_int_t ttl_ms;
    if (body_lease(req, obj, true, lease, &present) &&
        body_int(req, obj, "ttl_ms", TTL_MIN_MS, TTL_MAX_MS, 0, false, &ttl_ms)) {
        Now now = clock_now();
        const Lock *lock;
        LockResult r = locktab_renew(s->locks, req->arg, lease, ttl_ms, &now, &lock);
        if (r == LOCK_OK) {
            s->metrics.renewals++;
            events_note(s, AUDIT_RENEWED, lock->name, lock->holder.owner, lock->holder.token);
            JsonW w;
            jsonw_begin(&w);
            jsonw_str(&w, "name", lock->name);
            jsonw_int(&w, "token", (int64_t)lock->holder.token);
            jsonw_int(&w, "ttl_ms", lock->holder.ttl_ms);
            jsonw_int(&w, "expires_at_ms", lock->holder.expires_at_ms);
            reply_written(req, &w);
        } else if (r == LOCK_NOT_HOLDER) {
            reply_not_holder(req, req->arg, lease);
        } else {
            reply_overloaded(req, r);
        }
    }
    json_decref(obj);
}

void api_release(Request *req)
{
    static const char *const FIELDS[] = {"lease", NULL};
    Server *s = req->srv;
    if (!body_check_name(req, "name", req->arg))
        return;
    json_t *obj = body_object_new(req, FIELDS);
    if (!obj)
        return;
    uint8_t lease[LEASE_ID_BYTES];
    bool present;
    if (body_lease(req, obj, true, lease, &present)) {
        Now now = clock_now();
        uint32_t left;
        s->trail_actor = req;
        LockResult r = locktab_release(s->locks, req->arg, lease, &now, &left);
        s->trail_actor = NULL;
        if (r == LOCK_OK) {
            s->metrics.releases++;
            JsonW w;
            jsonw_begin(&w);
            jsonw_str(&w, "name", req->arg);
            jsonw_bool(&w, "released", left == 0);
            jsonw_int(&w, "count", left);
            reply_written(req, &w);
        } else {
            reply_not_holder(req, req->arg, lease);
        }
    }
    json_decref(obj);
}

/* DELETE /v1/locks/{name} (admin): ends the holder's lease, whoever holds it
 * and whatever its reentry count, and hands the lock to the next waiter. Its
 * token is revoked first: from then on /v1/fence refuses it (the holder was
 * told nothing and may still write), and the guard refuses its lease. The
 * ended lease, and with it the revoked token, is in the batch the answer
 * waits for. */
void api_force_release(Request *req)
{
    Server *s = req->srv;
    if (!body_check_name(req, "name", req->arg))
        return;
    Now now = clock_now();
    locktab_tick(s->locks, &now); /* a lease that has run out is ended first, not revoked */
    const Lock *lock = locktab_get(s->locks, req->arg);
    json_t *revoked = json_null();
    if (lock && lock->held && lock->holder.deadline_ms > now.mono_ms) {
        uint64_t token = lock->holder.token;
        revoked = json_pack("{s:s, s:I}", "owner", lock->holder.owner, "token", (json_int_t)token);
        if (!revoked || !revoked_add(s->revoked, token)) {
            json_decref(revoked);
            http_reply_error(req, ERR_OVERLOADED, NULL, "%s",
                             revoked && revoked_count(s->revoked) == REVOKED_MAX
                                 ? "a million leases were force-released already: no more can be"
                                 : "out of memory; retry");
            return;
        }
        s->trail_actor = req;
        locktab_revoke(s->locks, req->arg, &now, &token);
        s->trail_actor = NULL;
        s->metrics.force_releases++;
    }
    RawRefs refs = {.n = 0};
    json_t *state = lock_state_new(s->locks, req->arg, locktab_get(s->locks, req->arg), &refs);
    if (!state || json_object_set_new(state, "revoked", revoked)) {
        json_decref(state);
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    http_reply_json_raw_new(req, 200, state, &refs);
}

typedef struct Queue {
    json_t *list;
    bool failed;
} Queue;

static void queue_one(void *ud, const char *owner, int64_t since_ms)
{
    Queue *q = ud;
    json_t *w = q->failed ? NULL : json_pack("{s:s, s:I}", "owner", owner, "since_ms", (json_int_t)since_ms);
    if (!w || json_array_append_new(q->list, w))
        q->failed = true;
}

/* One lock as GET /v1/locks/NAME shows it: its state and the head of its queue. */
static void reply_one_lock(Request *req, const char *name)
{
    Server *s = req->srv;
    const Lock *lock = locktab_get(s->locks, name);
    RawRefs refs = {.n = 0};
    json_t *state = lock_state_new(s->locks, name, lock, &refs);
    Queue q = {json_array(), false};
    if (q.list && lock)
        locktab_each_waiter(lock, QUEUE_SHOWN, queue_one, &q);
    if (!state || !q.list || q.failed) {
        json_decref(q.list);
        json_decref(state);
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    if (json_object_set_new(state, "queue", q.list)) { /* takes q.list even when it fails */
        json_decref(state);
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    http_reply_json_raw_new(req, 200, state, &refs);
}

/* A watch (?index=N) is due once the lock's index is past N, or when N is
 * beyond every index of this run (it came from before a restart). */
static bool index_past(const Request *req, const char *name, uint64_t index)
{
    const Locktab *lt = req->srv->locks;
    return locktab_index(lt, name) > index || index > locktab_index_now(lt);
}

static bool watch_due(Request *req) { return index_past(req, req->poll->watch.name, req->poll->watch.index); }
static void watch_answer(Request *req) { reply_one_lock(req, req->poll->watch.name); }

static const WatchCalls WATCH = {watch_due, watch_answer};

void api_get_lock(Request *req)
{
    long long index, wait_ms;
    if (!body_check_name(req, "name", req->arg) || !query_int(req, "index", 0, INT64_MAX, 0, &index) ||
        !query_int(req, "wait_ms", 0, WATCH_MAX_MS, 0, &wait_ms))
        return;
    if (!http_query(req, "index") || wait_ms == 0 || index_past(req, req->arg, (uint64_t)index) ||
        req->srv->stopping) {
        reply_one_lock(req, req->arg);
        return;
    }
    if (!quota_poll_start(req))
        return;
    if (!request_poll(req)) {
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    req->poll->watch.index = (uint64_t)index;
    if (!watch_start(req, wait_ms, &WATCH))
        reply_overloaded(req, LOCK_NOMEM);
}

typedef struct ListCtx {
    const Locktab *lt;
    json_t *locks;
    RawRefs refs;
    const char *last;
    bool failed; /* out of memory: the listing would skip a lock */
} ListCtx;

static void list_one(void *ud, const Lock *lock)
{
    ListCtx *ctx = ud;
    json_t *state = ctx->failed ? NULL : lock_state_new(ctx->lt, lock->name, lock, &ctx->refs);
    if (!state || json_array_append_new(ctx->locks, state) != 0)
        ctx->failed = true;
    ctx->last = lock->name;
}

void api_list_locks(Request *req)
{
    const char *prefix = http_query(req, "prefix");
    const char *after = http_query(req, "after");
    const char *limit_s = http_query(req, "limit");
    if (!prefix)
        prefix = "";
    if (*prefix && !body_check_name(req, "prefix", prefix))
        return;
    if (!access_check_listing(req, prefix))
        return;
    if (after && !body_check_name(req, "after", after))
        return;
    long limit = LIST_DEFAULT;
    if (limit_s) {
        char *end;
        limit = strtol(limit_s, &end, 10);
        if (!*limit_s || *end || limit < 1 || limit > LIST_MAX) {
            http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "limit"),
                             "query parameter 'limit' must be an integer in 1..%d", LIST_MAX);
            return;
        }
    }
    ListCtx ctx = {.lt = req->srv->locks, .locks = json_array()}; /* about 8 KiB of raw references, on the loop thread's stack */
    if (!ctx.locks) {
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    bool more = locktab_list(req->srv->locks, prefix, after, (size_t)limit, list_one, &ctx);
    if (ctx.failed) {
        json_decref(ctx.locks);
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    http_reply_json_raw_new(req, 200,
                            json_pack("{s:o, s:o, s:I}", "locks", ctx.locks, "next",
                                      more && ctx.last ? json_string(ctx.last) : json_null(), "now_ms",
                                      (json_int_t)clock_now().wall_ms),
                            &ctx.refs);
}
