/*
 * locktab — the lock state machine; see include/leasegate/locktab.h.
 *
 * Fairness: waiters of a lock form one FIFO list; they are appended at the
 * tail when they arrive and only the head is ever granted (grant_next), so a
 * release wakes exactly one waiter, the one that has waited longest.
 */
#include "leasegate/locktab.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "leasegate/container.h"
#include "leasegate/leasehist.h"
#include "leasegate/smap.h"

enum { DEADLINE_EXPIRY = 1, DEADLINE_WAIT = 2, DEADLINE_IDLE = 3 };

struct Waiter {
    Deadline wait;
    Lock *lock;
    DLink link; /* in lock->waiters */
    void *ctx; /* the caller's, untouched */
    uint8_t lease[LEASE_ID_BYTES];
    char *owner;
    char *metadata;
    char *request_id; /* NULL when the acquire had none */
    char *key;        /* NULL without an API key */
    int64_t ttl_ms;
    int64_t since_ms; /* Unix ms: when it joined the queue */
};

struct Locktab {
    Smap *locks; /* name -> Lock, owns the locks */
    Heap deadlines;
    LeaseHist *history;
    LocktabLimits limits;
    LocktabHooks hooks;
    uint64_t last_token;
    size_t held;
    size_t waiters;
    uint64_t expiries;
    uint64_t forgotten;
    uint64_t next_lock_id;
    uint64_t changes;      /* the last index given (locktab_index) */
    uint64_t forget_index; /* what an absent lock reads as: above every forgotten lock's */
};


static void holder_clear(Holder *h)
{
    free(h->owner);
    free(h->metadata);
    free(h->request_id);
    free(h->key);
    memset(h, 0, sizeof *h);
}

static void waiter_free(Waiter *w)
{
    free(w->owner);
    free(w->metadata);
    free(w->request_id);
    free(w->key);
    free(w);
}

static Waiter *first_waiter(const Lock *lock)
{
    return lock->waiters.head ? DLIST_ITEM(lock->waiters.head, Waiter, link) : NULL;
}

static void lock_free(void *p)
{
    Lock *lock = p;
    Waiter *w;
    while ((w = first_waiter(lock))) {
        dlist_remove(&lock->waiters, &w->link);
        waiter_free(w);
    }
    holder_clear(&lock->holder);
    free(lock->name);
    free(lock);
}

Locktab *locktab_new(const LocktabLimits *limits, const LocktabHooks *hooks)
{
    Locktab *lt = calloc(1, sizeof *lt);
    if (!lt)
        return NULL;
    lt->limits = *limits;
    lt->hooks = *hooks;
    heap_init(&lt->deadlines);
    lt->locks = smap_new();
    lt->history = leasehist_new(limits->lease_history ? limits->lease_history : 1);
    if (!lt->locks || !lt->history) {
        locktab_free(lt);
        return NULL;
    }
    return lt;
}

void locktab_free(Locktab *lt)
{
    if (!lt)
        return;
    heap_clear(&lt->deadlines);
    smap_free(lt->locks, lock_free);
    leasehist_free(lt->history);
    free(lt);
}

#ifndef NDEBUG
static void lock_check(const Locktab *lt, const Lock *lock)
{
    assert(lock->held == heap_queued(&lock->expiry.entry));
    assert(!(lock->held && heap_queued(&lock->idle.entry)));
    assert(lock->held || lock->waiters.len == 0);
    assert(!lock->held || (lock->holder.token <= lock->last_token && lock->holder.count >= 1));
    assert(lock->last_token <= lt->last_token);
    size_t n = 0;
    for (const DLink *l = lock->waiters.head; l; l = l->next, n++) {
        const Waiter *w = DLIST_ITEM(l, Waiter, link);
        assert(w->lock == lock);
        assert(heap_queued(&w->wait.entry));
        assert(l->next ? l->next->prev == l : lock->waiters.tail == l);
    }
    assert(n == lock->waiters.len);
}
#else
static void lock_check(const Locktab *lt, const Lock *lock) { (void)lt; (void)lock; }
#endif

static void check_lock(void *ud, const Lock *lock) { lock_check(ud, lock); }

void locktab_check(const Locktab *lt)
{
    size_t held = 0, waiters = 0, idle = 0;
    for (const SmapNode *n = smap_first_after(lt->locks, NULL); n; n = smap_next(n)) {
        const Lock *lock = smap_value(n);
        check_lock((void *)lt, lock);
        held += lock->held;
        waiters += lock->waiters.len;
        idle += heap_queued(&lock->idle.entry);
    }
    assert(held == lt->held);
    assert(waiters == lt->waiters);
    assert(heap_len(&lt->deadlines) == held + waiters + idle);
    (void)idle;
    (void)held;
    (void)waiters;
}

static Lock *find(const Locktab *lt, const char *name) { return smap_get(lt->locks, name); }

static void idle_from(Locktab *lt, Lock *lock, const Now *now);

/* Returns the lock called name, creating it (free, never granted) if needed;
 * limit refuses a new name beyond max_locks (not for locks loaded from storage). */
/* charge: Lock.charge of a lock made here (NULL: none). */
static LockResult find_or_create(Locktab *lt, const char *name, bool limit, const Charge *charge, const Now *now,
                                 Lock **out)
{
    Lock *lock = find(lt, name);
    if (lock) {
        *out = lock;
        return LOCK_OK;
    }
    if (limit && smap_len(lt->locks) >= lt->limits.max_locks)
        return LOCK_TOO_MANY_LOCKS;
    lock = calloc(1, sizeof *lock);
    if (!lock)
        return LOCK_NOMEM;
    lock->name = strdup(name);
    if (!lock->name || !smap_insert(lt->locks, lock->name, lock)) {
        free(lock->name);
        free(lock);
        return LOCK_NOMEM;
    }
    heap_entry_init(&lock->expiry.entry);
    lock->expiry.kind = DEADLINE_EXPIRY;
    heap_entry_init(&lock->idle.entry);
    lock->idle.kind = DEADLINE_IDLE;
    lock->id = ++lt->next_lock_id;
    if (charge)
        lock->charge = *charge;
    /* Not a change yet: the grant or queueing that follows is (so loading a
     * million locks uses up no indexes, and a restart's base stays above). */
    lock->index = lt->changes;
    idle_from(lt, lock, now);
    *out = lock;
    return LOCK_OK;
}

/* The lock is free from now on: forget it if it stays so. (If the heap cannot
 * grow, the lock is simply kept.) */
static void idle_from(Locktab *lt, Lock *lock, const Now *now)
{
    heap_set(&lt->deadlines, &lock->idle.entry, now->mono_ms + lt->limits.forget_idle_ms);
}

static void changed(Locktab *lt, Lock *lock)
{
    lock->index = ++lt->changes;
    lock_check(lt, lock);
    lt->hooks.changed(lt->hooks.ud, lock);
}

/* The announced expiry is a safe bound for the holder: the deadline gets
 * LOCKTAB_DEADLINE_SLACK_MS (locktab.h says why). */
static bool set_expiry(Locktab *lt, Lock *lock, int64_t ttl_ms, const Now *now)
{
    int64_t deadline = now->mono_ms + ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
    if (!heap_set(&lt->deadlines, &lock->expiry.entry, deadline))
        return false;
    lock->holder.ttl_ms = ttl_ms;
    lock->holder.expires_at_ms = now->wall_ms + ttl_ms;
    lock->holder.deadline_ms = deadline;
    return true;
}

/* The strings a new grant takes: owner and metadata non-NULL, the others may be. */
typedef struct GrantStrings {
    char *owner, *metadata, *request_id, *key;
} GrantStrings;

static void grant_strings_free(GrantStrings *g)
{
    free(g->owner);
    free(g->metadata);
    free(g->request_id);
    free(g->key);
}

/* Makes a free lock held by a new lease. On success takes ownership of the
 * strings; on failure leaves them to the caller and changes nothing. The
 * token is the next value of the global counter. */
static bool grant(Locktab *lt, Lock *lock, const uint8_t lease[LEASE_ID_BYTES], const GrantStrings *g,
                  int64_t ttl_ms, const Now *now)
{
    assert(!lock->held);
    Holder *h = &lock->holder;
    memcpy(h->lease, lease, LEASE_ID_BYTES);
    h->owner = g->owner;
    h->metadata = g->metadata;
    h->request_id = g->request_id;
    h->key = g->key;
    uint64_t lock_last = lock->last_token;
    h->token = ++lt->last_token;
    h->acquired_at_ms = now->wall_ms;
    h->count = 1;
    h->answers = 0;
    h->delivered = false;
    lock->last_token = h->token;
    lock->held = true;
    lt->held++;
    heap_remove(&lt->deadlines, &lock->idle.entry);
    if (!set_expiry(lt, lock, ttl_ms, now)) {
        /* Out of memory for the heap: undo all of it, so that no undurable
         * token is ever visible. */
        idle_from(lt, lock, now);
        lock->held = false;
        lt->held--;
        lt->last_token--;
        lock->last_token = lock_last;
        memset(h, 0, sizeof *h);
        return false;
    }
    return true;
}

static void unlink_waiter(Locktab *lt, Waiter *w)
{
    dlist_remove(&w->lock->waiters, &w->link);
    w->lock->index = ++lt->changes;
    lt->waiters--;
    heap_remove(&lt->deadlines, &w->wait.entry);
}

/* The lock has just become free: hand it to the longest-waiting waiter, or
 * report it free. Exactly one waiter is granted; waiters whose wait ran out
 * (the tick has not timed them out yet) time out now instead, so that no
 * grant comes after a waiter's wait_ms. */
static void grant_next(Locktab *lt, Lock *lock, const Now *now)
{
    Waiter *w;
    while ((w = first_waiter(lock))) {
        bool wait_over = w->wait.entry.deadline_ms <= now->mono_ms;
        unlink_waiter(lt, w);
        void *ctx = w->ctx;
        /* grant() takes the waiter's strings only when it succeeds; it cannot
         * for lack of memory, and then this waiter times out now too. */
        GrantStrings g = {w->owner, w->metadata, w->request_id, w->key};
        if (!wait_over && grant(lt, lock, w->lease, &g, w->ttl_ms, now)) {
            free(w);
            changed(lt, lock);
            lt->hooks.granted(lt->hooks.ud, ctx, lock);
            return;
        }
        waiter_free(w);
        lt->hooks.timed_out(lt->hooks.ud, ctx, lock);
    }
    idle_from(lt, lock, now);
    changed(lt, lock);
}

/* Ends the current lease (count reached 0, or expiry) and passes the lock on. */
/* Remembers an ended lease, and reports it for storage. */
static void record_end(Locktab *lt, const Lock *lock, const uint8_t *lease, uint64_t token, LeaseEnd how)
{
    uint64_t seq = leasehist_add(lt->history, lease, lock->id, token, how);
    if (lt->hooks.ended)
        lt->hooks.ended(lt->hooks.ud, lock, lease, token, (int)how, seq);
}

static void end_lease(Locktab *lt, Lock *lock, LeaseEnd how, const Now *now)
{
    record_end(lt, lock, lock->holder.lease, lock->holder.token, how);
    heap_remove(&lt->deadlines, &lock->expiry.entry);
    holder_clear(&lock->holder);
    lock->held = false;
    lt->held--;
    grant_next(lt, lock, now);
}

LockResult locktab_load(Locktab *lt, const char *name, uint64_t last_token, const Holder *holder,
                        const Now *now)
{
    Lock *lock;
    LockResult r = find_or_create(lt, name, false, NULL, now, &lock); /* stored: no limit */
    if (r != LOCK_OK)
        return r;
    if (last_token > lock->last_token)
        lock->last_token = last_token;
    if (last_token > lt->last_token)
        lt->last_token = last_token;
    if (!holder) {
        idle_from(lt, lock, now);
        return LOCK_OK;
    }
    /* What is left: exact on this boot's clock; from another boot, by the
     * wall clock but never more than one ttl (a clock that is behind must not
     * stretch a lease; the last commit of a lease is a grant or renewal, when
     * one ttl was left). The wall-clock case gets the same slack as
     * set_expiry, for the same reason. */
    int64_t left_ms = holder->deadline_ms >= 0 ? holder->deadline_ms - now->mono_ms
                                               : holder->expires_at_ms - now->wall_ms + LOCKTAB_DEADLINE_SLACK_MS;
    if (holder->deadline_ms < 0 && left_ms > holder->ttl_ms + LOCKTAB_DEADLINE_SLACK_MS)
        left_ms = holder->ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
    /* A lease that expired while the server was down is loaded all the same,
     * with its deadline passed: the first locktab_tick ends it, after the
     * stored history is replayed, so that its end is the newest entry. */
    Holder *h = &lock->holder;
    *h = *holder;
    h->answers = 0;
    h->delivered = true;
    h->owner = strdup(holder->owner);
    h->metadata = strdup(holder->metadata);
    h->request_id = holder->request_id ? strdup(holder->request_id) : NULL;
    h->key = holder->key ? strdup(holder->key) : NULL;
    if (!h->owner || !h->metadata || (holder->request_id && !h->request_id) || (holder->key && !h->key)) {
        holder_clear(h);
        return LOCK_NOMEM;
    }
    lock->held = true;
    lt->held++;
    heap_remove(&lt->deadlines, &lock->idle.entry);
    h->deadline_ms = now->mono_ms + left_ms;
    if (!heap_set(&lt->deadlines, &lock->expiry.entry, h->deadline_ms)) {
        lock->held = false;
        lt->held--;
        holder_clear(h);
        idle_from(lt, lock, now);
        return LOCK_NOMEM;
    }
    lock_check(lt, lock);
    return LOCK_OK;
}

/* Whether this acquire repeats the one that made or last re-entered the
 * current grant: its answer was lost, and it gets the same grant again. Only
 * the key that made the grant can repeat it: owner labels and request ids are
 * not secrets, and a replay answers with the lease. */
static bool is_replay(const Lock *lock, const AcquireArgs *args)
{
    const Holder *h = &lock->holder;
    return lock->held && args->request_id && h->request_id && strcmp(args->request_id, h->request_id) == 0 &&
           strcmp(args->owner, h->owner) == 0 && locktab_same_key(h->key, args->key);
}

void locktab_set_charge(Locktab *lt, const char *name, Charge charge)
{
    Lock *lock = find(lt, name);
    if (lock)
        lock->charge = charge;
}

bool locktab_same_key(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

static LockResult reenter(Locktab *lt, Lock *lock, const AcquireArgs *args, const Now *now)
{
    char *metadata = args->metadata ? strdup(args->metadata) : NULL;
    char *request_id = args->request_id ? strdup(args->request_id) : NULL;
    if ((args->metadata && !metadata) || (args->request_id && !request_id) ||
        !set_expiry(lt, lock, args->ttl_ms > 0 ? args->ttl_ms : lock->holder.ttl_ms, now)) {
        free(metadata);
        free(request_id);
        return LOCK_NOMEM;
    }
    if (metadata) {
        free(lock->holder.metadata);
        lock->holder.metadata = metadata;
    }
    free(lock->holder.request_id);
    lock->holder.request_id = request_id;
    lock->holder.count++;
    lock->holder.answers = 0; /* the answers from here on are the re-entry's */
    lock->holder.delivered = false;
    changed(lt, lock);
    return LOCK_OK;
}

static LockResult enqueue(Locktab *lt, Lock *lock, const AcquireArgs *args, void *ctx,
                          const Now *now, Waiter **waiter_out)
{
    if (lt->waiters >= lt->limits.max_waiters || lock->waiters.len >= lt->limits.max_waiters_per_lock)
        return LOCK_TOO_MANY_WAITERS;
    Waiter *w = calloc(1, sizeof *w);
    if (!w)
        return LOCK_NOMEM;
    w->owner = strdup(args->owner);
    w->metadata = strdup(args->metadata ? args->metadata : "{}");
    w->request_id = args->request_id ? strdup(args->request_id) : NULL;
    w->key = args->key ? strdup(args->key) : NULL;
    heap_entry_init(&w->wait.entry);
    w->wait.kind = DEADLINE_WAIT;
    if (!w->owner || !w->metadata || (args->request_id && !w->request_id) || (args->key && !w->key) ||
        !heap_set(&lt->deadlines, &w->wait.entry, now->mono_ms + args->wait_ms)) {
        waiter_free(w);
        return LOCK_NOMEM;
    }
    memcpy(w->lease, args->new_lease, LEASE_ID_BYTES);
    w->ttl_ms = args->ttl_ms;
    w->since_ms = now->wall_ms;
    w->ctx = ctx;
    w->lock = lock;
    /* Fairness: append at the tail; only the head is ever granted. */
    dlist_append(&lock->waiters, &w->link);
    lock->index = ++lt->changes;
    lt->waiters++;
    lock_check(lt, lock);
    *waiter_out = w;
    return LOCK_QUEUED;
}

/* A lease whose deadline has passed ends before anything else is done with its
 * lock, even when locktab_tick has not run yet (the loop ticks once per turn and
 * handlers read a later clock): no renewal, release or reentry ever answers OK
 * after the expiry time announced. */
static void expire_if_due(Locktab *lt, Lock *lock, const Now *now)
{
    if (lock->held && lock->holder.deadline_ms <= now->mono_ms) {
        lt->expiries++;
        end_lease(lt, lock, LEASE_END_EXPIRED, now);
    }
}

static Lock *find_live(Locktab *lt, const char *name, const Now *now)
{
    Lock *lock = find(lt, name);
    if (lock)
        expire_if_due(lt, lock, now);
    return lock;
}

LockResult locktab_acquire(Locktab *lt, const char *name, const AcquireArgs *args, void *waiter_ctx,
                           const Now *now, const Lock **lock_out, Waiter **waiter_out)
{
    *lock_out = NULL;
    *waiter_out = NULL;
    if (args->lease) {
        Lock *lock = find_live(lt, name, now);
        if (!lock || !lock->held || memcmp(lock->holder.lease, args->lease, LEASE_ID_BYTES) != 0)
            return LOCK_NOT_HOLDER;
        *lock_out = lock;
        return is_replay(lock, args) ? LOCK_REPLAYED : reenter(lt, lock, args, now);
    }
    Lock *lock;
    LockResult r = find_or_create(lt, name, true, &args->charge, now, &lock);
    if (r != LOCK_OK)
        return r;
    *lock_out = lock;
    expire_if_due(lt, lock, now);
    if (is_replay(lock, args))
        return LOCK_REPLAYED;
    if (!lock->held) {
        GrantStrings g = {strdup(args->owner), strdup(args->metadata ? args->metadata : "{}"),
                          args->request_id ? strdup(args->request_id) : NULL, args->key ? strdup(args->key) : NULL};
        if (!g.owner || !g.metadata || (args->request_id && !g.request_id) || (args->key && !g.key) ||
            !grant(lt, lock, args->new_lease, &g, args->ttl_ms, now)) {
            grant_strings_free(&g);
            return LOCK_NOMEM;
        }
        changed(lt, lock);
        return LOCK_OK;
    }
    if (args->wait_ms <= 0)
        return LOCK_BUSY;
    return enqueue(lt, lock, args, waiter_ctx, now, waiter_out);
}

static Lock *held_by(Locktab *lt, const char *name, const uint8_t *lease, const Now *now)
{
    Lock *lock = find_live(lt, name, now);
    if (!lock || !lock->held || memcmp(lock->holder.lease, lease, LEASE_ID_BYTES) != 0)
        return NULL;
    return lock;
}

LockResult locktab_renew(Locktab *lt, const char *name, const uint8_t *lease, int64_t ttl_ms,
                         const Now *now, const Lock **lock_out)
{
    Lock *lock = held_by(lt, name, lease, now);
    *lock_out = lock;
    if (!lock)
        return LOCK_NOT_HOLDER;
    if (!set_expiry(lt, lock, ttl_ms > 0 ? ttl_ms : lock->holder.ttl_ms, now))
        return LOCK_NOMEM;
    changed(lt, lock);
    return LOCK_OK;
}

LockResult locktab_release(Locktab *lt, const char *name, const uint8_t *lease, const Now *now,
                           uint32_t *count_left)
{
    Lock *lock = held_by(lt, name, lease, now);
    *count_left = 0;
    if (!lock)
        return LOCK_NOT_HOLDER;
    if (--lock->holder.count > 0) {
        *count_left = lock->holder.count;
        changed(lt, lock);
        return LOCK_OK;
    }
    end_lease(lt, lock, LEASE_END_RELEASED, now);
    return LOCK_OK;
}

LockResult locktab_revoke(Locktab *lt, const char *name, const Now *now, uint64_t *token)
{
    Lock *lock = find(lt, name);
    if (!lock || !lock->held || lock->holder.deadline_ms <= now->mono_ms)
        return LOCK_NOT_HOLDER;
    *token = lock->holder.token;
    end_lease(lt, lock, LEASE_END_REVOKED, now);
    return LOCK_OK;
}

const Lock *locktab_held_by(const Locktab *lt, const char *name, const uint8_t *lease, const Now *now)
{
    const Lock *lock = find(lt, name);
    if (!lock || !lock->held || memcmp(lock->holder.lease, lease, LEASE_ID_BYTES) != 0)
        return NULL;
    return lock->holder.deadline_ms > now->mono_ms ? lock : NULL;
}

void locktab_continue_history(Locktab *lt, uint64_t seq) { leasehist_continue_after(lt->history, seq); }

void locktab_load_ended(Locktab *lt, const char *name, const uint8_t *lease, uint64_t token, int how,
                        uint64_t seq)
{
    const Lock *lock = find(lt, name);
    if (lock && (how == LEASE_END_EXPIRED || how == LEASE_END_RELEASED || how == LEASE_END_REVOKED))
        leasehist_load(lt->history, lease, lock->id, token, (LeaseEnd)how, seq);
}

NotHolderReason locktab_why_not(const Locktab *lt, const char *name, const uint8_t *lease)
{
    const Lock *lock = find(lt, name);
    uint64_t of_lock;
    uint64_t token;
    LeaseEnd how;
    if (!lock || !leasehist_find(lt->history, lease, &of_lock, &token, &how) || of_lock != lock->id)
        return REASON_UNKNOWN;
    if (how == LEASE_END_RELEASED)
        return REASON_RELEASED;
    if (how == LEASE_END_REVOKED)
        return REASON_REVOKED;
    return lock->last_token > token ? REASON_SUPERSEDED : REASON_EXPIRED;
}

const char *locktab_waiter_lock(const Waiter *w) { return w->lock->name; }

void locktab_cancel(Locktab *lt, Waiter *w)
{
    Lock *lock = w->lock;
    unlink_waiter(lt, w);
    waiter_free(w);
    lock_check(lt, lock);
}

/* A lock free for forget_idle_ms leaves the table (and, through the hook, storage). */
static void forget(Locktab *lt, Lock *lock)
{
    assert(!lock->held && lock->waiters.len == 0);
    heap_remove(&lt->deadlines, &lock->idle.entry);
    lt->hooks.forgotten(lt->hooks.ud, lock);
    lt->forget_index = ++lt->changes;
    smap_remove(lt->locks, lock->name);
    lt->forgotten++;
    lock_free(lock);
}

void locktab_tick(Locktab *lt, const Now *now)
{
    HeapEntry *e;
    while ((e = heap_peek(&lt->deadlines)) && e->deadline_ms <= now->mono_ms) {
        Deadline *d = CONTAINER_OF(e, Deadline, entry);
        if (d->kind == DEADLINE_EXPIRY) {
            expire_if_due(lt, CONTAINER_OF(d, Lock, expiry), now);
        } else if (d->kind == DEADLINE_IDLE) {
            forget(lt, CONTAINER_OF(d, Lock, idle));
        } else {
            Waiter *w = CONTAINER_OF(d, Waiter, wait);
            Lock *lock = w->lock;
            void *ctx = w->ctx;
            locktab_cancel(lt, w);
            lt->hooks.timed_out(lt->hooks.ud, ctx, lock);
        }
    }
}

int64_t locktab_next_timeout_ms(const Locktab *lt, const Now *now)
{
    return heap_ms_until_first(&lt->deadlines, now->mono_ms);
}

const Lock *locktab_get(const Locktab *lt, const char *name) { return find(lt, name); }

/* The holder of `name` when `lease` holds it, else NULL. */
static Holder *holder_of(const Locktab *lt, const char *name, const uint8_t *lease)
{
    Lock *lock = find(lt, name);
    return lock && lock->held && !memcmp(lock->holder.lease, lease, LEASE_ID_BYTES) ? &lock->holder : NULL;
}

void locktab_answer_started(Locktab *lt, const char *name, const uint8_t *lease)
{
    Holder *h = holder_of(lt, name, lease);
    if (h)
        h->answers++;
}

bool locktab_answer_ended(Locktab *lt, const char *name, const uint8_t *lease, bool delivered)
{
    Holder *h = holder_of(lt, name, lease);
    if (!h)
        return false;
    if (h->answers > 0) /* an answer of the grant, ending after a re-entry reset the count, is not counted */
        h->answers--;
    h->delivered |= delivered;
    return !delivered && !h->delivered && h->answers == 0;
}

bool locktab_list(const Locktab *lt, const char *prefix, const char *after, size_t limit,
                  void (*fn)(void *ud, const Lock *lock), void *ud)
{
    size_t plen = strlen(prefix);
    const SmapNode *n = after && strcmp(after, prefix) >= 0 ? smap_first_after(lt->locks, after)
                                                              : smap_first_from(lt->locks, prefix);
    for (; n && strncmp(smap_key(n), prefix, plen) == 0; n = smap_next(n)) {
        if (limit == 0)
            return true;
        fn(ud, smap_value(n));
        limit--;
    }
    return false;
}

void locktab_start_index(Locktab *lt, uint64_t base)
{
    if (base > lt->changes)
        lt->changes = lt->forget_index = base;
}

uint64_t locktab_index(const Locktab *lt, const char *name)
{
    const Lock *lock = find(lt, name);
    return lock ? lock->index : lt->forget_index;
}

uint64_t locktab_index_now(const Locktab *lt) { return lt->changes; }

void locktab_each_waiter(const Lock *lock, size_t limit,
                         void (*fn)(void *ud, const char *owner, int64_t since_ms), void *ud)
{
    for (const DLink *l = lock->waiters.head; l && limit; l = l->next, limit--) {
        const Waiter *w = CONTAINER_OF(l, Waiter, link);
        fn(ud, w->owner, w->since_ms);
    }
}

uint64_t locktab_last_token(const Locktab *lt) { return lt->last_token; }

void locktab_raise_last_token(Locktab *lt, uint64_t token)
{
    if (token > lt->last_token)
        lt->last_token = token;
}

size_t locktab_locks(const Locktab *lt) { return smap_len(lt->locks); }
size_t locktab_held(const Locktab *lt) { return lt->held; }
size_t locktab_waiters(const Locktab *lt) { return lt->waiters; }
uint64_t locktab_expiries(const Locktab *lt) { return lt->expiries; }
uint64_t locktab_forgotten(const Locktab *lt) { return lt->forgotten; }
