/* lockview — what readers see of locks and semaphores; see lockview.h. */
#include "api/lockview.h"

#include "core/clock.h"

const char *lockview_mode_name(int mode) { return mode == MODE_READ ? "read" : "write"; }

json_t *lockview_holder_new(const Lock *lock, const Holder *h, RawRefs *refs)
{
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:o}", "owner", h->owner, "token", (json_int_t)h->token,
                          "ttl_ms", (json_int_t)h->ttl_ms, "acquired_at_ms", (json_int_t)h->acquired_at_ms,
                          "expires_at_ms", (json_int_t)h->expires_at_ms, "count", (json_int_t)h->count, "metadata",
                          rawjson_ref(refs, h->metadata));
    if (j && lock->kind == KIND_LOCK && json_object_set_new(j, "mode", json_string(lockview_mode_name(h->mode))))
        json_decref(j), j = NULL;
    if (j && lock->kind == KIND_SEMAPHORE && json_object_set_new(j, "permits", json_integer(h->permits)))
        json_decref(j), j = NULL;
    return j;
}

/* The first LOCKVIEW_HOLDERS_SHOWN holders, in grant order. */
static json_t *holders_new(const Lock *lock, RawRefs *refs)
{
    json_t *list = json_array();
    size_t n = 0;
    for (const Holder *h = lock ? locktab_holder(lock) : NULL; list && h && n < LOCKVIEW_HOLDERS_SHOWN;
         h = locktab_next_holder(h), n++)
        if (json_array_append_new(list, lockview_holder_new(lock, h, refs)))
            json_decref(list), list = NULL;
    return list;
}

typedef struct Candidates {
    json_t *list;
    bool failed;
} Candidates;

static void candidate_one(void *ud, const WaiterView *v)
{
    Candidates *c = ud;
    json_t *j = c->failed ? NULL : json_pack("{s:s, s:I}", "owner", v->owner, "since_ms", (json_int_t)v->since_ms);
    if (!j || json_array_append_new(c->list, j))
        c->failed = true;
}

json_t *lockview_election_new(const Locktab *lt, const char *name, const Lock *lock, bool candidates, RawRefs *refs)
{
    const Holder *leader = lock ? locktab_holder(lock) : NULL;
    json_t *who = leader ? json_pack("{s:s, s:I, s:o, s:I}", "owner", leader->owner, "term",
                                     (json_int_t)leader->token, "value",
                                     leader->value ? rawjson_ref(refs, leader->value) : json_null(), "since_ms",
                                     (json_int_t)leader->acquired_at_ms)
                         : json_null();
    json_t *j = json_pack("{s:s, s:o, s:o, s:I, s:I, s:I}", "name", name, "leader", who, "vacant_since_ms",
                          lock && !leader ? json_integer(lock->vacant_since_ms) : json_null(), "candidates_total",
                          (json_int_t)(lock ? lock->waiters.len : 0), "last_token",
                          (json_int_t)(lock ? lock->last_token : 0), "index",
                          (json_int_t)locktab_index(lt, KIND_ELECTION, name));
    if (j && candidates) {
        Candidates c = {json_array(), false};
        if (c.list && lock)
            locktab_each_waiter(lock, LOCKVIEW_HOLDERS_SHOWN, candidate_one, &c);
        if (!c.list || c.failed || json_object_set_new(j, "candidates", c.list)) {
            if (c.failed)
                json_decref(c.list);
            json_decref(j);
            j = NULL;
        }
    }
    return j;
}

json_t *lockview_state_new(const Locktab *lt, LockKind kind, const char *name, const Lock *lock, bool holders,
                           const Now *now, RawRefs *refs)
{
    if (kind == KIND_ELECTION)
        return lockview_election_new(lt, name, lock, holders, refs);
    const Holder *first = lock ? locktab_holder(lock) : NULL;
    size_t total = lock ? lock->holders.len : 0;
    json_t *j;
    if (kind == KIND_SEMAPHORE)
        j = json_pack("{s:s, s:o, s:I, s:I, s:o, s:I, s:I, s:I}", "name", name, "limit",
                      lock ? json_integer(lock->limit) : json_null(), "holders_total", (json_int_t)total,
                      "permits_used", (json_int_t)(lock ? lock->permits_used : 0), "available",
                      lock ? json_integer((json_int_t)(lock->limit - lock->permits_used)) : json_null(), "waiters",
                      (json_int_t)(lock ? lock->waiters.len : 0), "last_token",
                      (json_int_t)(lock ? lock->last_token : 0), "index", (json_int_t)locktab_index(lt, kind, name));
    else
        j = json_pack("{s:s, s:b, s:o, s:o, s:I, s:I, s:I, s:I, s:o, s:I, s:o}", "name", name, "held", first != NULL,
                      "mode",
                      first ? json_string(lockview_mode_name(lock->mode)) : json_null(), "holder",
                      first ? lockview_holder_new(lock, first, refs) : json_null(), "holders_total", (json_int_t)total,
                      "waiters", (json_int_t)(lock ? lock->waiters.len : 0), "last_token",
                      (json_int_t)(lock ? lock->last_token : 0), "index", (json_int_t)locktab_index(lt, kind, name),
                      "delay_until_ms",
                      lock && locktab_delayed(lock, now) ? json_integer(lock->delay_until_ms) : json_null(),
                      "value_version", (json_int_t)(lock ? lock->value.version : 0), "value_token",
                      lock && lock->value.version ? json_integer((json_int_t)lock->value.token) : json_null());
    /* The value itself in the view of one lock, not in listings (their raw references would not fit). */
    if (j && kind == KIND_LOCK && holders &&
        json_object_set_new(j, "value",
                            lock && lock->value.text ? rawjson_ref(refs, lock->value.text) : json_null()))
        json_decref(j), j = NULL;
    if (j && holders && json_object_set_new(j, "holders", holders_new(lock, refs)))
        json_decref(j), j = NULL;
    return j;
}

void lockview_reply_busy(Request *req, const Lock *lock)
{
    RawRefs refs = {.n = 0};
    Now now = clock_now();
    const Holder *first = locktab_holder(lock);
    json_t *extra;
    if (lock->kind == KIND_ELECTION) {
        json_t *who = first ? json_pack("{s:s, s:I, s:I}", "owner", first->owner, "term", (json_int_t)first->token,
                                        "since_ms", (json_int_t)first->acquired_at_ms)
                            : json_null();
        extra = json_pack("{s:s, s:o, s:I}", "name", lock->name, "leader", who, "candidates_total",
                          (json_int_t)lock->waiters.len);
        if (first)
            http_reply_error_raw(req, ERR_NOT_LEADER, extra, &refs,
                                 "election '%s' is led by '%s' (term %llu); %zu candidates wait: this campaign did "
                                 "not win in time",
                                 lock->name, first->owner, (unsigned long long)first->token, lock->waiters.len);
        else
            http_reply_error_raw(req, ERR_NOT_LEADER, extra, &refs,
                                 "election '%s': this campaign did not win in time (%zu candidates wait before it)",
                                 lock->name, lock->waiters.len);
        return;
    }
    if (lock->kind == KIND_SEMAPHORE) {
        extra = json_pack("{s:s, s:I, s:I, s:o, s:I}", "name", lock->name, "limit", (json_int_t)lock->limit,
                          "available", (json_int_t)(lock->limit - lock->permits_used), "holders",
                          holders_new(lock, &refs), "waiters", (json_int_t)lock->waiters.len);
        if (lock->waiters.len)
            http_reply_error_raw(req, ERR_SEMAPHORE_FULL, extra, &refs,
                                 "semaphore '%s': %u of %u permits are held and %zu acquires wait (first come, "
                                 "first served)",
                                 lock->name, (unsigned)lock->permits_used, (unsigned)lock->limit, lock->waiters.len);
        else
            http_reply_error_raw(req, ERR_SEMAPHORE_FULL, extra, &refs,
                                 "semaphore '%s': %u of %u permits are held, too many for this acquire", lock->name,
                                 (unsigned)lock->permits_used, (unsigned)lock->limit);
        return;
    }
    bool delayed = locktab_delayed(lock, &now);
    extra = json_pack("{s:s, s:o, s:o, s:o, s:I}", "name", lock->name, "holder",
                      first ? lockview_holder_new(lock, first, &refs) : json_null(), "mode",
                      first ? json_string(lockview_mode_name(lock->mode)) : json_null(), "holders",
                      holders_new(lock, &refs), "waiters", (json_int_t)lock->waiters.len);
    if (extra && delayed && json_object_set_new(extra, "delay_until_ms", json_integer(lock->delay_until_ms)))
        json_decref(extra), extra = NULL;
    if (first)
        http_reply_error_raw(req, ERR_LOCK_HELD, extra, &refs, "lock '%s' is held by '%s' (token %llu%s)", lock->name,
                             first->owner, (unsigned long long)first->token,
                             lock->holders.len > 1 ? ", and other readers" : "");
    else if (delayed)
        http_reply_error_raw(req, ERR_LOCK_HELD, extra, &refs,
                             "lock '%s' is in its lock-delay after a lease ended uncleanly: nobody is granted it "
                             "before delay_until_ms",
                             lock->name);
    else
        http_reply_error_raw(req, ERR_LOCK_HELD, extra, &refs, "lock '%s' was not granted in time", lock->name);
}
