/*
 * api_locks — acquire, renew and release of locks (in write or read mode),
 * semaphores and elections (a campaign is an election's acquire, a
 * resignation its release: api_elections.c has the rest), force-release,
 * and the lock table's hooks for waiters:
 * JSON in, lock table calls, JSON out. The lease id appears only in the
 * acquire response (it is the credential); every other view leaves it out
 * (lockview.h has them, and api_lockview.c the reads).
 */
#include <string.h>
#include <uuid/uuid.h>

#include "api/api.h"
#include "api/body.h"
#include "api/events.h"
#include "api/jsonw.h"
#include "api/lockview.h"
#include "api/query.h"
#include "api/quota.h"
#include "api/trail.h"

#define TTL_MIN_MS 100
#define TTL_MAX_MS 86400000
#define TTL_DEFAULT_MS 30000
#define WAIT_MAX_MS 3600000
#define OWNER_MAX_BYTES 128
#define METADATA_MAX_BYTES 4096

/* Metadata is kept as its client sent it and goes back byte for byte (rawjson.h). */

static const char *kind_noun(LockKind kind)
{
    return kind == KIND_SEMAPHORE ? "semaphore" : kind == KIND_ELECTION ? "election" : "lock";
}

static int audit_object(LockKind kind)
{
    return kind == KIND_SEMAPHORE ? AUDIT_OF_SEMAPHORE : kind == KIND_ELECTION ? AUDIT_OF_ELECTION : AUDIT_OF_LOCK;
}

/* The name rule of kind's path (an election's action words are its own). */
static bool check_name(Request *req, LockKind kind)
{
    return body_check_name(req, kind == KIND_ELECTION ? "election" : "name", req->arg);
}

/* The metrics' kind of a grant (Metrics.grants_of). */
static int grant_kind(const Lock *lock, const Holder *h)
{
    return lock->kind == KIND_SEMAPHORE ? 2 : lock->kind == KIND_ELECTION ? 3 : h->mode == MODE_READ;
}

/* 200 with the object w has written (jsonw.h: the hot answers). */
static void reply_written(Request *req, JsonW *w)
{
    size_t len;
    char *text = jsonw_end_new(w, &len);
    http_reply_json_text(req, 200, text, len);
}

static void reply_grant(Request *req, const Lock *lock, const Holder *h)
{
    char lease[37];
    uuid_unparse_lower(h->lease, lease);
    http_note_grant(req, (LockKind)lock->kind, lock->name, h->lease);
    locktab_answer_started(req->srv->locks, (LockKind)lock->kind, lock->name, h->lease);
    /* Every client's hot path: written with jsonw (jsonw.h says why). */
    JsonW w;
    jsonw_begin(&w);
    jsonw_str(&w, "name", lock->name);
    jsonw_str(&w, "owner", h->owner);
    jsonw_str(&w, "lease", lease);
    jsonw_int(&w, "token", (int64_t)h->token);
    if (lock->kind == KIND_SEMAPHORE) {
        jsonw_int(&w, "limit", lock->limit);
        jsonw_int(&w, "permits", h->permits);
    }
    if (lock->kind == KIND_ELECTION) { /* the term is the leader's fencing token */
        jsonw_int(&w, "term", (int64_t)h->token);
        jsonw_raw(&w, "value", h->value ? h->value : "null");
    }
    jsonw_int(&w, "ttl_ms", h->ttl_ms);
    jsonw_int(&w, "acquired_at_ms", h->acquired_at_ms);
    jsonw_int(&w, "expires_at_ms", h->expires_at_ms);
    if (lock->kind == KIND_LOCK) {
        jsonw_int(&w, "count", h->count);
        jsonw_str(&w, "mode", lockview_mode_name(h->mode));
        jsonw_int(&w, "lock_delay_ms", h->lock_delay_ms);
        /* What the last writer left, read with the grant: a writer's own now (only it can
         * write it), so nothing written before it can be missed. */
        jsonw_raw(&w, "value", lock->value.text ? lock->value.text : "null");
        jsonw_int(&w, "value_version", (int64_t)lock->value.version);
    }
    jsonw_raw(&w, "metadata", h->metadata);
    reply_written(req, &w);
}

static const char *const REASONS[] = {
    [REASON_UNKNOWN] = "unknown",
    [REASON_EXPIRED] = "expired",
    [REASON_SUPERSEDED] = "superseded",
    [REASON_RELEASED] = "released",
    [REASON_REVOKED] = "revoked",
};

static const char *const REASON_TEXT[] = {
    [REASON_UNKNOWN] = "this server did not issue it for this name, or has forgotten it",
    [REASON_EXPIRED] = "its TTL ran out",
    [REASON_SUPERSEDED] = "its TTL ran out and the name has since been granted to another lease",
    [REASON_RELEASED] = "it was released",
    [REASON_REVOKED] = "an admin force-released it",
};

static void reply_not_holder(Request *req, LockKind kind, const char *name, const uint8_t *lease)
{
    Server *s = req->srv;
    NotHolderReason why = locktab_why_not(s->locks, kind, name, lease);
    s->metrics.not_holder++;
    http_reply_error(req, ERR_NOT_HOLDER, json_pack("{s:s, s:s}", "name", name, "reason", REASONS[why]),
                     "lease does not hold %s '%s': %s", kind_noun(kind), name, REASON_TEXT[why]);
}

/* 409 not_leader: the lease does not lead election `name` (proclaim, resign). */
void api_reply_not_leader(Request *req, const char *name, const uint8_t *lease)
{
    Server *s = req->srv;
    NotHolderReason why = locktab_why_not(s->locks, KIND_ELECTION, name, lease);
    const Lock *lock = locktab_get(s->locks, KIND_ELECTION, name);
    const Holder *leader = lock ? locktab_holder(lock) : NULL;
    json_t *who = leader ? json_pack("{s:s, s:I, s:I}", "owner", leader->owner, "term", (json_int_t)leader->token,
                                     "since_ms", (json_int_t)leader->acquired_at_ms)
                         : json_null();
    s->metrics.not_holder++;
    http_reply_error(req, ERR_NOT_LEADER, json_pack("{s:s, s:s, s:o}", "name", name, "reason", REASONS[why], "leader", who),
                     "this lease does not lead election '%s' (%s)%s%s", name, REASON_TEXT[why],
                     leader ? "; it is led by " : "", leader ? leader->owner : "");
}

static void reply_overloaded(Request *req, LockResult r)
{
    const Server *s = req->srv;
    if (r == LOCK_TOO_MANY_LOCKS)
        /* Names are kept until forgotten (--forget-idle-after), for last_token. */
        http_reply_error(req, ERR_OVERLOADED, NULL,
                         "the lock table is full: %zu lock and semaphore names are known (--max-locks); idle ones "
                         "are forgotten after --forget-idle-after",
                         s->cfg.max_locks);
    else if (r == LOCK_TOO_MANY_WAITERS)
        http_reply_error(req, ERR_OVERLOADED, NULL,
                         "too many waiters (--max-waiters %zu in all, --max-waiters-per-lock %zu for one name); "
                         "retry later",
                         s->cfg.max_waiters, s->cfg.max_waiters_per_lock);
    else
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry later");
}

/* A lease's grant, reentry, renewal and so on, in the events and the trail. */
static void note(Server *s, Request *req, AuditKind kind, const Lock *lock, const Holder *h)
{
    if (req)
        trail_note_lease(s, req, kind, lock, h);
    else
        events_note_of(s, kind, trail_object(lock), trail_mode(lock, h), lock->name, h->owner, h->token);
}

/* "mode": "write" (the default) or "read". */
static bool body_mode(Request *req, json_t *obj, uint8_t *mode, bool *given)
{
    const char *text;
    if (!body_string(req, obj, "mode", 8, false, &text))
        return false;
    *given = text != NULL;
    if (!text || !strcmp(text, "write")) {
        *mode = MODE_WRITE;
        return true;
    }
    if (!strcmp(text, "read")) {
        *mode = MODE_READ;
        return true;
    }
    http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "mode"),
                       "field 'mode' must be \"write\" (exclusive, the default) or \"read\" (shared)");
    return false;
}

/* What an acquire asks, read from its body; false after answering 400. */
typedef struct Ask {
    const char *owner, *request_id;
    json_int_t ttl_ms, wait_ms, lock_delay_ms, limit, permits;
    uint8_t lease[LEASE_ID_BYTES];
    bool reentry;
    uint8_t mode;
    bool mode_given;
    char *metadata; /* owned */
    char *value;    /* owned: a candidate's value, or NULL (null) */
} Ask;

static bool read_ask(Request *req, LockKind kind, json_t *obj, Ask *a)
{
    if (!body_string(req, obj, "owner", OWNER_MAX_BYTES, true, &a->owner) ||
        !body_int(req, obj, "ttl_ms", TTL_MIN_MS, TTL_MAX_MS, TTL_DEFAULT_MS, false, &a->ttl_ms) ||
        !body_int(req, obj, "wait_ms", 0, WAIT_MAX_MS, 0, false, &a->wait_ms) ||
        !body_string(req, obj, "request_id", REQUEST_ID_MAX_BYTES, false, &a->request_id))
        return false;
    if (kind == KIND_SEMAPHORE) {
        if (json_object_get(obj, "lease")) {
            http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "lease"),
                               "field 'lease': a semaphore has no reentry; each acquire takes a permit of its own");
            return false;
        }
        if (!body_int(req, obj, "limit", 1, LOCKTAB_LIMIT_MAX, 0, true, &a->limit) ||
            !body_int(req, obj, "permits", 1, LOCKTAB_LIMIT_MAX, 1, false, &a->permits))
            return false;
        /* Never grantable: refused rather than queued for ever. */
        if (a->permits > a->limit) {
            http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "permits"),
                               "field 'permits' (%lld) is more than the semaphore's limit (%lld)",
                               (long long)a->permits, (long long)a->limit);
            return false;
        }
    } else if (kind == KIND_ELECTION) {
        bool given;
        if (!body_json(req, obj, "value", req->srv->cfg.max_value_bytes, &given, &a->value))
            return false;
    } else if (!body_lease(req, obj, false, a->lease, &a->reentry) || !body_mode(req, obj, &a->mode, &a->mode_given) ||
               !body_int(req, obj, "lock_delay_ms", 0, LOCKTAB_DELAY_MAX_MS, 0, false, &a->lock_delay_ms)) {
        return false;
    }
    /* Reentry without ttl_ms keeps the lease's own ttl rather than the default. */
    if (a->reentry && !json_object_get(obj, "ttl_ms"))
        a->ttl_ms = 0;
    return body_metadata(req, obj, METADATA_MAX_BYTES, &a->metadata);
}

static void acquire(Request *req, LockKind kind)
{
    static const char *const LOCK_FIELDS[] = {"owner", "ttl_ms", "wait_ms", "metadata", "lease", "request_id",
                                              "mode", "lock_delay_ms", NULL};
    static const char *const SEMAPHORE_FIELDS[] = {"owner", "limit", "permits", "ttl_ms", "wait_ms", "metadata",
                                                   "request_id", "lease", NULL};
    static const char *const CAMPAIGN_FIELDS[] = {"owner", "value", "ttl_ms", "wait_ms", "metadata", "request_id",
                                                  NULL};
    Server *s = req->srv;
    if (!check_name(req, kind))
        return;
    json_t *obj = body_object_new(req, kind == KIND_SEMAPHORE  ? SEMAPHORE_FIELDS
                                       : kind == KIND_ELECTION ? CAMPAIGN_FIELDS
                                                               : LOCK_FIELDS);
    if (!obj)
        return;
    Ask a = {0};
    uint8_t fresh[LEASE_ID_BYTES];
    if (!read_ask(req, kind, obj, &a))
        goto out;
    if (a.wait_ms > 0 && s->stopping) {
        /* Shutting down: no new waiters, they could not be answered. */
        http_reply_error(req, ERR_OVERLOADED, NULL, "server is shutting down; retry");
        goto out;
    }
    bool made_before = locktab_get(s->locks, kind, req->arg) != NULL;
    Charge charge = {NULL, NULL};
    /* One instant for the share's preview and the acquire itself. */
    Now now = clock_now();
    if (!a.reentry && !quota_admit(req, kind, req->arg, a.mode, (uint32_t)a.limit, (uint32_t)a.permits,
                                   a.wait_ms > 0, a.owner, a.request_id, &now, &charge))
        goto out;
    if (!a.reentry && !leaseid_next(&s->lease_ids, fresh)) {
        quota_named(s, &charge, 0);
        http_reply_error(req, ERR_OVERLOADED, NULL, "no random bytes for a lease id; retry");
        goto out;
    }
    AcquireArgs args = {.owner = a.owner,
                        .metadata = a.metadata,
                        .ttl_ms = a.ttl_ms,
                        .wait_ms = a.wait_ms,
                        .lease = a.reentry ? a.lease : NULL,
                        .new_lease = a.reentry ? NULL : fresh,
                        .request_id = a.request_id,
                        .key = req->access.key ? req->access.key->name : NULL,
                        .charge = charge,
                        .mode = a.mode,
                        .mode_given = a.mode_given,
                        .lock_delay_ms = a.lock_delay_ms,
                        .limit = (uint32_t)a.limit,
                        .permits = (uint32_t)a.permits,
                        .value = a.value};
    req->grant.asked_us = clock_boot_us();
    const Lock *lock;
    const Holder *h;
    Waiter *waiter;
    LockResult r = locktab_acquire(s->locks, kind, req->arg, &args, req, &now, &lock, &h, &waiter);
    /* A name made now counts against its charge until it is forgotten. */
    quota_named(s, &charge, !made_before && locktab_get(s->locks, kind, req->arg) ? +1 : 0);
    switch (r) {
    case LOCK_OK:
        if (a.reentry) {
            s->metrics.reentries++;
            note(s, NULL, AUDIT_REENTERED, lock, h);
        } else {
            s->metrics.grants++;
            s->metrics.grants_of[grant_kind(lock, h)]++;
            histogram_observe(&s->metrics.acquire_wait, (double)(clock_boot_us() - req->grant.asked_us) / 1e6);
            quota_held(s, h->key, +1);
            note(s, req, AUDIT_GRANTED, lock, h);
        }
        reply_grant(req, lock, h);
        break;
    case LOCK_REPLAYED:
        /* Held like any answer until what is pending is durable: the
         * grant repeated may still be in the batch being committed. */
        s->metrics.replays++;
        reply_grant(req, lock, h);
        break;
    case LOCK_QUEUED:
        quota_wait_start(req);
        events_note_of(s, AUDIT_WAITER_JOINED, audit_object(kind),
                       kind != KIND_LOCK     ? AUDIT_MODE_NONE
                       : a.mode == MODE_READ ? AUDIT_MODE_READ
                                             : AUDIT_MODE_WRITE,
                       req->arg, a.owner, 0);
        http_wait(req, waiter);
        break;
    case LOCK_BUSY:
        lockview_reply_busy(req, lock);
        break;
    case LOCK_NOT_HOLDER:
        reply_not_holder(req, kind, req->arg, a.lease);
        break;
    case LOCK_MODE_CONFLICT:
        http_reply_error(req, ERR_MODE_CONFLICT,
                         json_pack("{s:s, s:s}", "name", req->arg, "mode", lockview_mode_name(h->mode)),
                         "this lease holds lock '%s' in %s mode: a reentry keeps the mode (leave mode out); to "
                         "change it, release and acquire again",
                         req->arg, lockview_mode_name(h->mode));
        break;
    case LOCK_LIMIT_MISMATCH:
        http_reply_error(req, ERR_LIMIT_MISMATCH,
                         json_pack("{s:s, s:I}", "name", req->arg, "limit", (json_int_t)lock->limit),
                         "semaphore '%s' has limit %u while it has holders or waiters; acquire it with that limit",
                         req->arg, (unsigned)lock->limit);
        break;
    case LOCK_TOO_MANY_LOCKS:
    case LOCK_TOO_MANY_WAITERS:
    case LOCK_VERSION_MISMATCH: /* a value's, never an acquire's */
    case LOCK_REQUEST_ID_REUSED:
    case LOCK_NOMEM:
        reply_overloaded(req, r);
        break;
    }
out:
    free(a.metadata);
    free(a.value);
    json_decref(obj);
}

void api_acquire(Request *req) { acquire(req, KIND_LOCK); }
void api_semaphore_acquire(Request *req) { acquire(req, KIND_SEMAPHORE); }
void api_campaign(Request *req) { acquire(req, KIND_ELECTION); }

void api_waiter_granted(Request *req, const Lock *lock, const Holder *h)
{
    Server *s = req->srv;
    http_waiter_done(req);
    quota_wait_stop(req);
    quota_held(s, h->key, +1);
    s->metrics.grants++;
    s->metrics.grants_of[grant_kind(lock, h)]++;
    histogram_observe(&s->metrics.acquire_wait, (double)(clock_boot_us() - req->grant.asked_us) / 1e6);
    note(s, req, AUDIT_GRANTED, lock, h);
    reply_grant(req, lock, h);
}

void api_waiter_timed_out(Request *req, const Lock *lock)
{
    http_waiter_done(req);
    quota_wait_stop(req);
    events_note_of(req->srv, AUDIT_WAITER_LEFT, trail_object(lock), AUDIT_MODE_NONE, lock->name, "", 0);
    req->srv->metrics.wait_timeouts++;
    lockview_reply_busy(req, lock);
}

void api_waiter_left(Request *req)
{
    /* The name from the waiter, not req->arg: a parked waiter has none (park.c
     * frees it), and a NULL name crashed watch_note and events_note. */
    Waiter *w = req->wait.waiter;
    events_note_of(req->srv, AUDIT_WAITER_LEFT,
                   audit_object(locktab_waiter_kind(w)), AUDIT_MODE_NONE,
                   locktab_waiter_lock(w), "", 0);
    Now now = clock_now();
    locktab_cancel(req->srv->locks, w, &now);
    quota_wait_stop(req);
    req->srv->metrics.waiter_disconnects++;
}

void api_waiter_revoked(Request *req, ErrCode code, const char *why)
{
    Waiter *w = req->wait.waiter;
    events_note_of(req->srv, AUDIT_WAITER_LEFT,
                   audit_object(locktab_waiter_kind(w)), AUDIT_MODE_NONE,
                   locktab_waiter_lock(w), "", 0);
    Now now = clock_now();
    locktab_cancel(req->srv->locks, w, &now);
    quota_wait_stop(req);
    http_waiter_done(req);
    http_reply_error(req, code, NULL, "%s", why);
}

void api_request_end(Request *req, bool delivered)
{
    Server *s = req->srv;
    /* An undelivered grant is undone, unless another answer of it (a replay
     * of its request_id) was delivered or still may be. */
    if (req->grant.pending && locktab_answer_ended(s->locks, (LockKind)req->grant.kind, req->grant.lock,
                                                   req->grant.lease, delivered && !req->grant.refused)) {
        Now now = clock_now();
        uint32_t left;
        if (locktab_release(s->locks, (LockKind)req->grant.kind, req->grant.lock, req->grant.lease, req, &now,
                            &left) == LOCK_OK)
            s->metrics.undelivered_grants++;
    }
}

static void renew(Request *req, LockKind kind)
{
    static const char *const FIELDS[] = {"lease", "ttl_ms", NULL};
    Server *s = req->srv;
    if (!check_name(req, kind))
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
        const Holder *h;
        LockResult r = locktab_renew(s->locks, kind, req->arg, lease, ttl_ms, &now, &lock, &h);
        if (r == LOCK_OK) {
            s->metrics.renewals++;
            note(s, NULL, AUDIT_RENEWED, lock, h);
            JsonW w;
            jsonw_begin(&w);
            jsonw_str(&w, "name", lock->name);
            jsonw_int(&w, "token", (int64_t)h->token);
            if (kind == KIND_ELECTION)
                jsonw_int(&w, "term", (int64_t)h->token);
            jsonw_int(&w, "ttl_ms", h->ttl_ms);
            jsonw_int(&w, "expires_at_ms", h->expires_at_ms);
            reply_written(req, &w);
        } else if (r == LOCK_NOT_HOLDER) {
            reply_not_holder(req, kind, req->arg, lease);
        } else {
            reply_overloaded(req, r);
        }
    }
    json_decref(obj);
}

void api_renew(Request *req) { renew(req, KIND_LOCK); }
void api_semaphore_renew(Request *req) { renew(req, KIND_SEMAPHORE); }
void api_election_renew(Request *req) { renew(req, KIND_ELECTION); }

static void release(Request *req, LockKind kind)
{
    static const char *const FIELDS[] = {"lease", NULL};
    Server *s = req->srv;
    if (!check_name(req, kind))
        return;
    json_t *obj = body_object_new(req, FIELDS);
    if (!obj)
        return;
    uint8_t lease[LEASE_ID_BYTES];
    bool present;
    if (body_lease(req, obj, true, lease, &present)) {
        Now now = clock_now();
        uint32_t left;
        LockResult r = locktab_release(s->locks, kind, req->arg, lease, req, &now, &left);
        if (r == LOCK_OK) {
            s->metrics.releases++;
            JsonW w;
            jsonw_begin(&w);
            jsonw_str(&w, "name", req->arg);
            if (kind == KIND_ELECTION) { /* a resignation: nobody leads now, or the next candidate */
                jsonw_bool(&w, "resigned", true);
            } else {
                jsonw_bool(&w, "released", left == 0);
                jsonw_int(&w, "count", left);
            }
            reply_written(req, &w);
        } else if (kind == KIND_ELECTION) {
            api_reply_not_leader(req, req->arg, lease);
        } else {
            reply_not_holder(req, kind, req->arg, lease);
        }
    }
    json_decref(obj);
}

void api_release(Request *req) { release(req, KIND_LOCK); }
void api_semaphore_release(Request *req) { release(req, KIND_SEMAPHORE); }
void api_resign(Request *req) { release(req, KIND_ELECTION); }

/* DELETE /v1/locks/{name} and DELETE /v1/semaphores/{name} (admin): ends
 * every lease of the name (a lock's writer, or all its readers; a
 * semaphore's permits), or with ?token=T (semaphores) only the permit with
 * that token, whoever holds them and whatever the reentry counts, and hands
 * the name to the next waiters (after the leases' lock-delay, if they have
 * one). Their tokens are revoked first: from then on /v1/fence refuses them
 * (the holders were told nothing and may still write), and the guard
 * refuses their leases. The ended leases, and with them the revoked tokens
 * and their audit rows (`revoked`, by the admin's key), are in the batch the
 * answer waits for. `revoked` is the first of them (the writer, or the
 * oldest reader or permit), `revoked_all` every one. */
static void force_release(Request *req, LockKind kind, uint64_t token)
{
    Server *s = req->srv;
    Now now = clock_now();
    locktab_tick(s->locks, &now); /* a lease that has run out is ended first, not revoked */
    const Lock *lock = locktab_get(s->locks, kind, req->arg);
    json_t *all = json_array();
    for (const Holder *h = lock ? locktab_holder(lock) : NULL; all && h; h = locktab_next_holder(h)) {
        if (h->deadline_ms <= now.mono_ms || (token && h->token != token))
            continue;
        json_t *one = json_pack("{s:s, s:I}", "owner", h->owner, "token", (json_int_t)h->token);
        if (!one || json_array_append_new(all, one) || !revoked_add(s->revoked, h->token)) {
            bool full = one && revoked_count(s->revoked) == REVOKED_MAX;
            json_decref(all);
            http_reply_error(req, ERR_OVERLOADED, NULL, "%s",
                             full ? "a million leases were force-released already: no more can be"
                                  : "out of memory; retry");
            return;
        }
    }
    if (!all) {
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    if (token && !json_array_size(all)) {
        json_decref(all);
        http_reply_error(req, ERR_NOT_HOLDER,
                         json_pack("{s:s, s:s}", "name", req->arg, "reason", "unknown"),
                         "semaphore '%s' has no permit with token %llu (it ended, or never was one)", req->arg,
                         (unsigned long long)token);
        return;
    }
    if (json_array_size(all)) {
        if (token)
            locktab_revoke_token(s->locks, kind, req->arg, token, req, &now);
        else
            locktab_revoke(s->locks, kind, req->arg, req, &now);
        s->metrics.force_releases += json_array_size(all);
    }
    RawRefs refs = {.n = 0};
    json_t *state =
        lockview_state_new(s->locks, kind, req->arg, locktab_get(s->locks, kind, req->arg), true, &now, &refs);
    json_t *first = json_array_size(all) ? json_deep_copy(json_array_get(all, 0)) : json_null();
    if (!state || !first) {
        json_decref(first);
        json_decref(all);
        json_decref(state);
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    int bad = json_object_set_new(state, "revoked", first); /* each takes its value, also on failure */
    bad |= json_object_set_new(state, "revoked_all", all);
    if (bad) {
        json_decref(state);
        reply_overloaded(req, LOCK_NOMEM);
        return;
    }
    http_reply_json_raw_new(req, 200, state, &refs);
}

void api_force_release(Request *req)
{
    if (body_check_name(req, "name", req->arg))
        force_release(req, KIND_LOCK, 0);
}

void api_election_force_release(Request *req)
{
    if (check_name(req, KIND_ELECTION))
        force_release(req, KIND_ELECTION, 0);
}

void api_semaphore_force_release(Request *req)
{
    long long token;
    if (body_check_name(req, "name", req->arg) && query_int(req, "token", 1, INT64_MAX, 0, &token))
        force_release(req, KIND_SEMAPHORE, (uint64_t)token);
}
