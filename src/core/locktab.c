/*
 * locktab — the lock state machine; see locktab.h.
 *
 * Fairness: the waiters of a name form one FIFO list; they are appended at
 * the tail when they arrive, a newcomer is granted at once only when nobody
 * waits (no barging), and only the head is ever granted (grant_next): while
 * the head can be granted it is, so a writer's end wakes the next writer or
 * the run of readers at the head up to the next writer, and freed permits
 * wake the waiters at the head whose permits fit, in order: a head that
 * asks for more than is free keeps everyone behind it waiting.
 */
#include "core/locktab.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/leasehist.h"
#include "core/leaseidx.h"
#include "core/smap.h"
#include "core/threads.h"
#include "leasegate/container.h"

enum { DEADLINE_EXPIRY = 1, DEADLINE_WAIT = 2, DEADLINE_IDLE = 3, DEADLINE_DELAY = 4 };

/* A lease as the table keeps it: the holder, its expiry and its place. */
typedef struct Grant {
    Holder h;        /* what the hooks and readers see (locktab_holder) */
    Deadline expiry; /* always queued */
    DLink link;      /* in lock->holders, grant order */
    LeaseIdxEntry byid; /* in Locktab.leases while it holds */
    Lock *lock;
} Grant;

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
    char *value;      /* an election's candidate: its value, or NULL */
    int64_t ttl_ms;
    int64_t lock_delay_ms;
    int64_t since_ms; /* Unix ms: when it joined the queue */
    uint32_t permits; /* a semaphore's: what the grant will hold; 1 otherwise */
    uint8_t mode;
};

struct Locktab {
    Smap *names[LOCK_KINDS]; /* name -> Lock, owns the locks */
    Heap deadlines;
    LeaseHist *history;
    LeaseIdx leases; /* every holder by its lease id (grant_with) */
    LocktabLimits limits;
    LocktabHooks hooks;
    uint64_t last_token;
    LocktabCounts counts[LOCK_KINDS]; /* names is smap_len's */
    uint64_t expiries;
    uint64_t forgotten;
    uint64_t delays;
    uint64_t next_lock_id;
    uint64_t changes;      /* the last index given (locktab_index) */
    uint64_t forget_index; /* what an absent name reads as: above every forgotten name's */
    uint64_t holder_visits; /* locktab_holder_visits */
    ThreadOwner owner;     /* the loop (threads.h): every call that changes the table asserts it */
};

/* Every entry point that changes the table runs on its owner (threads.h). */
#define OWNED(lt) assert(thread_owns(&(lt)->owner))

static Grant *grant_of(const Holder *h) { return CONTAINER_OF(h, Grant, h); }

static Grant *first_grant(const Lock *lock)
{
    return lock->holders.head ? DLIST_ITEM(lock->holders.head, Grant, link) : NULL;
}

const Holder *locktab_holder(const Lock *lock)
{
    Grant *g = first_grant(lock);
    return g ? &g->h : NULL;
}

const Holder *locktab_next_holder(const Holder *h)
{
    const DLink *next = grant_of(h)->link.next;
    return next ? &DLIST_ITEM(next, Grant, link)->h : NULL;
}

static void holder_clear(Holder *h)
{
    free(h->owner);
    free(h->metadata);
    free(h->request_id);
    free(h->key);
    free(h->value);
    memset(h, 0, sizeof *h);
}

static void waiter_free(Waiter *w)
{
    free(w->owner);
    free(w->metadata);
    free(w->request_id);
    free(w->key);
    free(w->value);
    free(w);
}

static Waiter *first_waiter(const Lock *lock)
{
    return lock->waiters.head ? DLIST_ITEM(lock->waiters.head, Waiter, link) : NULL;
}

/* Its holders leave the lease index first, unless the whole table goes. */
static void lock_free(void *p)
{
    Lock *lock = p;
    Waiter *w;
    while ((w = first_waiter(lock))) {
        dlist_remove(&lock->waiters, &w->link);
        waiter_free(w);
    }
    Grant *g;
    while ((g = first_grant(lock))) {
        dlist_remove(&lock->holders, &g->link);
        holder_clear(&g->h);
        free(g);
    }
    free(lock->value.text);
    free(lock->value.key);
    valwrites_clear(&lock->value.writes);
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
    thread_own(&lt->owner);
    heap_init(&lt->deadlines);
    bool made = true;
    for (int k = 0; k < LOCK_KINDS; k++)
        made &= (lt->names[k] = smap_new()) != NULL;
    lt->history = leasehist_new(limits->lease_history ? limits->lease_history : 1);
    if (!made || !lt->history || !leaseidx_init(&lt->leases)) {
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
    for (int k = 0; k < LOCK_KINDS; k++)
        smap_free(lt->names[k], lock_free);
    leasehist_free(lt->history);
    leaseidx_clear(&lt->leases);
    free(lt);
}

static bool delay_running(const Lock *lock) { return heap_queued(&lock->delay.entry); }

bool locktab_delayed(const Lock *lock, const Now *now)
{
    return delay_running(lock) && lock->delay.entry.deadline_ms > now->mono_ms;
}

/* Could a grant in `mode` (of `permits`, on a semaphore) be made on lock
 * now, its waiters aside? */
static bool grantable(const Lock *lock, uint8_t mode, uint32_t permits)
{
    if (delay_running(lock))
        return false;
    if (lock->kind == KIND_SEMAPHORE)
        return permits <= lock->limit && lock->permits_used <= lock->limit - permits;
    return lock->holders.len == 0 || (mode == MODE_READ && lock->mode == MODE_READ);
}

/* A value other than null keeps the name: it outlives its holders. */
static bool is_idle(const Lock *lock)
{
    return lock->holders.len == 0 && lock->waiters.len == 0 && !delay_running(lock) && !lock->value.text;
}

static Grant *grant_with(const Locktab *lt, const Lock *lock, const uint8_t *lease, uint64_t *visits);

#ifndef NDEBUG
static void lock_check(const Locktab *lt, const Lock *lock)
{
    size_t n = 0;
    uint64_t permits = 0;
    for (const DLink *l = lock->holders.head; l; l = l->next, n++) {
        const Grant *g = DLIST_ITEM(l, Grant, link);
        assert(g->lock == lock);
        assert(heap_queued(&g->expiry.entry));
        assert(g->h.mode == lock->mode);
        assert(g->h.token <= lock->last_token && g->h.count >= 1);
        assert(g->h.permits >= 1 && (lock->kind == KIND_SEMAPHORE || g->h.permits == 1));
        permits += g->h.permits;
        assert(grant_with(lt, lock, g->h.lease, NULL) == g); /* indexed by its lease */
        assert(g->h.deadline_ms >= lock->holders_due_from_ms);
        assert(l->next ? l->next->prev == l : lock->holders.tail == l);
    }
    assert(n == lock->holders.len);
    if (lock->kind == KIND_SEMAPHORE)
        assert(lock->mode == MODE_WRITE && permits == lock->permits_used && permits <= lock->limit &&
               !delay_running(lock));
    else
        assert((lock->mode == MODE_READ || n <= 1) && lock->permits_used == 0);
    (void)permits;
    assert(!heap_queued(&lock->idle.entry) || is_idle(lock));
    assert(lock->last_token <= lt->last_token);
    assert(lock->kind == KIND_LOCK || (lock->value.version == 0 && !lock->value.text));
    assert(lock->value.token <= lock->last_token && (lock->value.version > 0 || !lock->value.text));
    assert(valwrites_valid(&lock->value.writes, lock->value.version));
    n = 0;
    for (const DLink *l = lock->waiters.head; l; l = l->next, n++) {
        const Waiter *w = DLIST_ITEM(l, Waiter, link);
        assert(w->lock == lock);
        assert(heap_queued(&w->wait.entry));
        assert(w->permits >= 1 && (lock->kind == KIND_SEMAPHORE || w->permits == 1));
        assert(l->next ? l->next->prev == l : lock->waiters.tail == l);
    }
    assert(n == lock->waiters.len);
}
#else
static void lock_check(const Locktab *lt, const Lock *lock) { (void)lt; (void)lock; }
#endif

void locktab_check(const Locktab *lt)
{
    size_t queued = 0;
    for (int k = 0; k < LOCK_KINDS; k++) {
        LocktabCounts c = {0};
        for (const SmapNode *n = smap_first_after(lt->names[k], NULL); n; n = smap_next(n)) {
            const Lock *lock = smap_value(n);
            lock_check(lt, lock);
            assert(lock->kind == k);
            /* Between calls (not inside one, while grant_next walks the
             * queue): nobody waits who could be granted. */
            const Waiter *head = first_waiter(lock);
            assert(!head || !grantable(lock, head->mode, head->permits));
            (void)head;
            c.held += lock->holders.len > 0;
            c.leases += lock->holders.len;
            c.readers += lock->kind == KIND_LOCK && lock->mode == MODE_READ ? lock->holders.len : 0;
            c.permits += lock->permits_used;
            c.values += lock->value.text != NULL;
            c.value_bytes += lock->value.text ? strlen(lock->value.text) : 0;
            c.waiters += lock->waiters.len;
            queued += lock->holders.len + lock->waiters.len + heap_queued(&lock->idle.entry) + delay_running(lock);
        }
        assert(c.held == lt->counts[k].held && c.leases == lt->counts[k].leases &&
               c.readers == lt->counts[k].readers && c.permits == lt->counts[k].permits &&
               c.waiters == lt->counts[k].waiters && c.values == lt->counts[k].values &&
               c.value_bytes == lt->counts[k].value_bytes);
    }
    assert(lt->leases.len == locktab_held(lt));
    assert(heap_len(&lt->deadlines) == queued);
    (void)queued;
}

static Lock *find(const Locktab *lt, LockKind kind, const char *name) { return smap_get(lt->names[kind], name); }

/* The lock is idle from now on: forget it if it stays so. (If the heap cannot
 * grow, the lock is simply kept.) */
static void idle_from(Locktab *lt, Lock *lock, const Now *now)
{
    heap_set(&lt->deadlines, &lock->idle.entry, now->mono_ms + lt->limits.forget_idle_ms);
}

/* Starts the idle time of a lock that has just become idle. */
static void update_idle(Locktab *lt, Lock *lock, const Now *now)
{
    if (is_idle(lock) && !heap_queued(&lock->idle.entry))
        idle_from(lt, lock, now);
}

/* Returns the lock called name, creating it (idle, never granted) if needed;
 * limit refuses a new name beyond max_locks (not for locks loaded from
 * storage); charge: Lock.charge of a lock made here (NULL: none). */
static LockResult find_or_create(Locktab *lt, LockKind kind, const char *name, bool limit, const Charge *charge,
                                 const Now *now, Lock **out)
{
    Lock *lock = find(lt, kind, name);
    if (lock) {
        *out = lock;
        return LOCK_OK;
    }
    if (limit && locktab_locks(lt) >= lt->limits.max_locks)
        return LOCK_TOO_MANY_LOCKS;
    lock = calloc(1, sizeof *lock);
    if (!lock)
        return LOCK_NOMEM;
    lock->name = strdup(name);
    if (!lock->name || !smap_insert(lt->names[kind], lock->name, lock)) {
        free(lock->name);
        free(lock);
        return LOCK_NOMEM;
    }
    lock->kind = (uint8_t)kind;
    heap_entry_init(&lock->delay.entry);
    lock->delay.kind = DEADLINE_DELAY;
    heap_entry_init(&lock->idle.entry);
    lock->idle.kind = DEADLINE_IDLE;
    lock->id = ++lt->next_lock_id;
    lock->vacant_since_ms = now->wall_ms;
    if (charge)
        lock->charge = *charge;
    /* Not a change yet: the grant or queueing that follows is (so loading a
     * million locks uses up no indexes, and a restart's base stays above). */
    lock->index = lt->changes;
    idle_from(lt, lock, now);
    *out = lock;
    return LOCK_OK;
}

/* Something a reader of lock sees changed (its index moves); with `record`,
 * the name's own record changed too (hooks.changed). */
static void touched(Locktab *lt, Lock *lock, bool record)
{
    lock->index = ++lt->changes;
    lock_check(lt, lock);
    if (record)
        lt->hooks.changed(lt->hooks.ud, lock);
}

/* Lease g's record changed (re-entered, renewed, released to a count above
 * 0): every lease is a record of its own, whatever its mode. */
static void report(Locktab *lt, Lock *lock, Grant *g)
{
    touched(lt, lock, false);
    if (lt->hooks.holder_changed)
        lt->hooks.holder_changed(lt->hooks.ud, lock, &g->h);
}

/* A new grant: the name's last token (its record), then the lease's own record. */
static void report_grant(Locktab *lt, Lock *lock, Grant *g)
{
    touched(lt, lock, true);
    if (lt->hooks.holder_changed)
        lt->hooks.holder_changed(lt->hooks.ud, lock, &g->h);
}

/* The announced expiry is a safe bound for the holder: the deadline gets
 * LOCKTAB_DEADLINE_SLACK_MS (locktab.h says why). */
static bool set_expiry(Locktab *lt, Grant *g, int64_t ttl_ms, const Now *now)
{
    int64_t deadline = now->mono_ms + ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
    if (!heap_set(&lt->deadlines, &g->expiry.entry, deadline))
        return false;
    g->h.ttl_ms = ttl_ms;
    g->h.expires_at_ms = now->wall_ms + ttl_ms;
    g->h.deadline_ms = deadline;
    if (g->lock && deadline < g->lock->holders_due_from_ms) /* a renewal with a shorter ttl */
        g->lock->holders_due_from_ms = deadline;
    return true;
}

/* The strings a new grant takes: owner and metadata non-NULL, the others may be. */
typedef struct GrantStrings {
    char *owner, *metadata, *request_id, *key, *value;
} GrantStrings;

static void grant_strings_free(GrantStrings *g)
{
    free(g->owner);
    free(g->metadata);
    free(g->request_id);
    free(g->key);
    free(g->value);
}

/* A lease (its id set) joins lock's holders: indexed, counted, and the name
 * is no longer idle. */
static void add_holder(Locktab *lt, Lock *lock, Grant *g)
{
    LocktabCounts *c = &lt->counts[lock->kind];
    g->lock = lock;
    leaseidx_add(&lt->leases, &g->byid, g->h.lease);
    if (!lock->holders.len || g->h.deadline_ms < lock->holders_due_from_ms)
        lock->holders_due_from_ms = g->h.deadline_ms;
    lock->mode = g->h.mode;
    c->held += lock->holders.len == 0;
    dlist_append(&lock->holders, &g->link);
    c->leases++;
    c->readers += lock->kind == KIND_LOCK && g->h.mode == MODE_READ;
    if (lock->kind == KIND_SEMAPHORE) {
        lock->permits_used += g->h.permits;
        c->permits += g->h.permits;
    }
    heap_remove(&lt->deadlines, &lock->idle.entry);
}

/* What a new lease is, besides its id and strings. */
typedef struct GrantTerms {
    int64_t ttl_ms;
    uint8_t mode;
    int64_t lock_delay_ms;
    uint32_t permits; /* a semaphore's; 1 otherwise */
} GrantTerms;

/* Makes a new lease of lock (grantable now). On success takes ownership of
 * the strings; on failure leaves them to the caller and changes nothing, so
 * that no undurable token is ever visible. The token is the next value of
 * the global counter. */
static Grant *grant(Locktab *lt, Lock *lock, const uint8_t lease[LEASE_ID_BYTES], const GrantStrings *gs,
                    const GrantTerms *t, const Now *now)
{
    assert(grantable(lock, t->mode, t->permits));
    Grant *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    heap_entry_init(&g->expiry.entry);
    g->expiry.kind = DEADLINE_EXPIRY;
    if (!set_expiry(lt, g, t->ttl_ms, now)) {
        free(g);
        return NULL;
    }
    Holder *h = &g->h;
    memcpy(h->lease, lease, LEASE_ID_BYTES);
    h->owner = gs->owner;
    h->metadata = gs->metadata;
    h->request_id = gs->request_id;
    h->key = gs->key;
    h->value = gs->value;
    h->token = ++lt->last_token;
    h->acquired_at_ms = now->wall_ms;
    h->count = 1;
    h->mode = lock->kind == KIND_LOCK ? t->mode : MODE_WRITE;
    h->lock_delay_ms = lock->kind == KIND_LOCK ? t->lock_delay_ms : 0;
    h->permits = lock->kind == KIND_SEMAPHORE ? t->permits : 1;
    h->answers = 0;
    h->delivered = false;
    lock->last_token = h->token;
    add_holder(lt, lock, g);
    return g;
}

/* Sets *ctx to what w's last hook is called with (hooks.waking); false
 * when hooks.waking could not give one (w then leaves with no hook). */
static bool waking(Locktab *lt, const Waiter *w, void **ctx)
{
    if (!lt->hooks.waking) {
        *ctx = w->ctx;
        return true;
    }
    *ctx = lt->hooks.waking(lt->hooks.ud, w->ctx);
    return *ctx != NULL;
}

static void unlink_waiter(Locktab *lt, Waiter *w)
{
    dlist_remove(&w->lock->waiters, &w->link);
    w->lock->index = ++lt->changes;
    lt->counts[w->lock->kind].waiters--;
    heap_remove(&lt->deadlines, &w->wait.entry);
}

/* Grants the head of lock's queue while it can be granted, never past it
 * (FIFO); a waiter at the head that could be granted but whose wait has run
 * out (the tick has not timed it out yet) times out now instead, so that no
 * grant comes after a waiter's wait_ms (one that could not be granted is
 * left to the tick). Each grant is reported (report_grant, then granted).
 * When nothing was granted the lock's index moves once more (its holders
 * changed before the call), and with `record` (the caller changed the name's
 * record: a lock-delay began or ended) hooks.changed reports it; a grant
 * reports the record anyway. */
static void grant_next(Locktab *lt, Lock *lock, const Now *now, bool record)
{
    bool granted = false;
    Waiter *w;
    while ((w = first_waiter(lock)) && grantable(lock, w->mode, w->permits)) {
        bool wait_over = w->wait.entry.deadline_ms <= now->mono_ms;
        unlink_waiter(lt, w);
        void *ctx;
        if (!waking(lt, w, &ctx)) {
            waiter_free(w);
            continue;
        }
        /* grant() takes the waiter's strings only when it succeeds; it cannot
         * for lack of memory, and then this waiter times out now too. */
        GrantStrings gs = {w->owner, w->metadata, w->request_id, w->key, w->value};
        GrantTerms terms = {w->ttl_ms, w->mode, w->lock_delay_ms, w->permits};
        Grant *g = wait_over ? NULL : grant(lt, lock, w->lease, &gs, &terms, now);
        if (g) {
            free(w);
            report_grant(lt, lock, g);
            lt->hooks.granted(lt->hooks.ud, ctx, lock, &g->h);
            granted = true;
            continue;
        }
        waiter_free(w);
        lt->hooks.timed_out(lt->hooks.ud, ctx, lock);
    }
    update_idle(lt, lock, now);
    if (!granted)
        touched(lt, lock, record);
}

/* Remembers an ended lease, and reports it for storage. */
static void record_end(Locktab *lt, const Lock *lock, const Holder *h, LeaseEnd how, void *actor)
{
    uint64_t seq = leasehist_add(lt->history, h->lease, lock->id, h->token, how);
    if (lt->hooks.ended)
        lt->hooks.ended(lt->hooks.ud, actor, lock, h, (int)how, seq);
}

/* A lock-delay until delay_ms after end_mono (boot clock), unless one runs
 * longer already. The announced delay_until_ms is a safe bound, as an
 * expiry is: the deadline is LOCKTAB_DEADLINE_SLACK_MS later. (Should the
 * heap fail to grow, the lock goes without this delay.) True when it began
 * or was extended: the name's record changed. */
static bool start_delay(Locktab *lt, Lock *lock, int64_t end_mono, int64_t delay_ms, const Now *now)
{
    int64_t left = end_mono + delay_ms - now->mono_ms;
    int64_t deadline = now->mono_ms + left + LOCKTAB_DEADLINE_SLACK_MS;
    if (left <= 0 || (delay_running(lock) && lock->delay.entry.deadline_ms >= deadline))
        return false;
    bool running = delay_running(lock);
    if (!heap_set(&lt->deadlines, &lock->delay.entry, deadline))
        return false;
    lock->delay_until_ms = now->wall_ms + left;
    lt->delays += !running;
    heap_remove(&lt->deadlines, &lock->idle.entry);
    return true;
}

/* Ends lease g (released to count 0, expired, revoked; by actor, see
 * hooks.ended): records it, takes it out, and starts its lock-delay when it
 * ended uncleanly. The caller then passes the lock on (grant_next). An
 * expired lease ended at its deadline, however late the table sees it.
 * True when a lock-delay began: the name's record changed. */
static bool end_grant(Locktab *lt, Lock *lock, Grant *g, LeaseEnd how, void *actor, const Now *now)
{
    LocktabCounts *c = &lt->counts[lock->kind];
    dlist_remove(&lock->holders, &g->link);
    leaseidx_remove(&lt->leases, &g->byid);
    heap_remove(&lt->deadlines, &g->expiry.entry);
    c->leases--;
    c->readers -= lock->kind == KIND_LOCK && g->h.mode == MODE_READ;
    c->held -= lock->holders.len == 0;
    if (lock->kind == KIND_SEMAPHORE) {
        lock->permits_used -= g->h.permits;
        c->permits -= g->h.permits;
    }
    if (lock->holders.len == 0) /* an election's: nobody leads from now (an expiry: from its deadline's announced time) */
        lock->vacant_since_ms = how == LEASE_END_EXPIRED && g->h.expires_at_ms < now->wall_ms ? g->h.expires_at_ms
                                                                                             : now->wall_ms;
    bool delayed = how != LEASE_END_RELEASED && g->h.lock_delay_ms > 0 &&
                   start_delay(lt, lock, how == LEASE_END_EXPIRED ? g->h.deadline_ms : now->mono_ms,
                               g->h.lock_delay_ms, now);
    record_end(lt, lock, &g->h, how, actor);
    holder_clear(&g->h);
    free(g);
    return delayed;
}

static void end_delay(Locktab *lt, Lock *lock)
{
    heap_remove(&lt->deadlines, &lock->delay.entry);
    lock->delay_until_ms = 0;
}

/* Leases whose deadline has passed end (in grant order), and so does a
 * lock-delay whose deadline has passed, before anything else is done with
 * the name, even when locktab_tick has not run yet (the loop ticks once per
 * turn and handlers read a later clock): no renewal, release or reentry
 * ever answers OK after the expiry time announced, and nobody waits for a
 * delay that is over. */
static void settle(Locktab *lt, Lock *lock, const Now *now)
{
    bool ended = false, record = false;
    /* The holders are walked only when one may be due: a lock with
     * thousands of readers is not walked for each renewal. The walk makes
     * the bound exact again. */
    if (lock->holders.len && lock->holders_due_from_ms <= now->mono_ms) {
        int64_t due_from = INT64_MAX;
        lt->holder_visits += lock->holders.len;
        for (DLink *l = lock->holders.head, *next; l; l = next) {
            next = l->next;
            Grant *g = DLIST_ITEM(l, Grant, link);
            if (g->h.deadline_ms <= now->mono_ms) {
                lt->expiries++;
                record |= end_grant(lt, lock, g, LEASE_END_EXPIRED, NULL, now);
                ended = true;
            } else if (g->h.deadline_ms < due_from) {
                due_from = g->h.deadline_ms;
            }
        }
        lock->holders_due_from_ms = due_from;
    }
    if (delay_running(lock) && lock->delay.entry.deadline_ms <= now->mono_ms) {
        end_delay(lt, lock);
        ended = record = true;
    }
    if (ended)
        grant_next(lt, lock, now, record);
}

LockResult locktab_load(Locktab *lt, LockKind kind, const char *name, uint64_t last_token, uint32_t limit,
                        int64_t delay_until_ms, const Now *now)
{
    OWNED(lt);
    Lock *lock;
    LockResult r = find_or_create(lt, kind, name, false, NULL, now, &lock); /* stored: no limit */
    if (r != LOCK_OK)
        return r;
    if (last_token > lock->last_token)
        lock->last_token = last_token;
    if (last_token > lt->last_token)
        lt->last_token = last_token;
    if (kind == KIND_SEMAPHORE)
        lock->limit = limit;
    /* What is left of a lock-delay, by the wall clock (the boot clock of
     * the run that started it means nothing now), never more than the
     * longest delay there is: a clock that is behind must not stretch it. */
    int64_t left = delay_until_ms > 0 ? delay_until_ms - now->wall_ms : 0;
    if (left > LOCKTAB_DELAY_MAX_MS)
        left = LOCKTAB_DELAY_MAX_MS;
    if (kind == KIND_LOCK && left > 0) {
        if (!heap_set(&lt->deadlines, &lock->delay.entry, now->mono_ms + left + LOCKTAB_DEADLINE_SLACK_MS))
            return LOCK_NOMEM;
        lock->delay_until_ms = now->wall_ms + left;
        heap_remove(&lt->deadlines, &lock->idle.entry);
    }
    lock_check(lt, lock);
    return LOCK_OK;
}

LockResult locktab_load_holder(Locktab *lt, LockKind kind, const char *name, const Holder *holder, const Now *now)
{
    OWNED(lt);
    Lock *lock;
    LockResult r = find_or_create(lt, kind, name, false, NULL, now, &lock);
    if (r != LOCK_OK)
        return r;
    uint8_t mode = kind == KIND_LOCK ? holder->mode : MODE_WRITE;
    uint32_t permits = kind == KIND_SEMAPHORE && holder->permits ? holder->permits : 1;
    if (kind == KIND_LOCK ? lock->holders.len && (mode == MODE_WRITE || lock->mode == MODE_WRITE)
                          : !grantable(lock, MODE_WRITE, permits))
        return LOCK_BUSY;
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
    Grant *g = calloc(1, sizeof *g);
    if (!g)
        return LOCK_NOMEM;
    Holder *h = &g->h;
    *h = *holder;
    h->mode = mode;
    h->permits = permits;
    h->answers = 0;
    h->delivered = true;
    h->owner = strdup(holder->owner);
    h->metadata = strdup(holder->metadata);
    h->request_id = holder->request_id ? strdup(holder->request_id) : NULL;
    h->key = holder->key ? strdup(holder->key) : NULL;
    bool valued = kind == KIND_ELECTION && holder->value;
    h->value = valued ? strdup(holder->value) : NULL;
    h->deadline_ms = now->mono_ms + left_ms;
    heap_entry_init(&g->expiry.entry);
    g->expiry.kind = DEADLINE_EXPIRY;
    if (!h->owner || !h->metadata || (holder->request_id && !h->request_id) || (holder->key && !h->key) ||
        (valued && !h->value) ||
        !heap_set(&lt->deadlines, &g->expiry.entry, h->deadline_ms)) {
        holder_clear(h);
        free(g);
        return LOCK_NOMEM;
    }
    if (h->token > lock->last_token)
        lock->last_token = h->token;
    if (h->token > lt->last_token)
        lt->last_token = h->token;
    add_holder(lt, lock, g);
    lock_check(lt, lock);
    return LOCK_OK;
}

/* Whether this acquire repeats the one that made or last re-entered lease
 * g: its answer was lost, and it gets the same grant again. Only the key
 * that made the grant can repeat it: owner labels and request ids are not
 * secrets, and a replay answers with the lease. */
static bool is_replay(const Grant *g, const char *owner, const char *request_id, const char *key)
{
    return request_id && g->h.request_id && strcmp(request_id, g->h.request_id) == 0 &&
           strcmp(owner, g->h.owner) == 0 && locktab_same_key(g->h.key, key);
}

static Grant *replay_of(const Lock *lock, const char *owner, const char *request_id, const char *key)
{
    if (!request_id)
        return NULL;
    for (DLink *l = lock->holders.head; l; l = l->next)
        if (is_replay(DLIST_ITEM(l, Grant, link), owner, request_id, key))
            return DLIST_ITEM(l, Grant, link);
    return NULL;
}

/* The holder of lock whose lease is `lease`: one lookup in the lease index,
 * not a walk of the lock's holders. Adds the holders it compared to *visits
 * (when not NULL). */
static Grant *grant_with(const Locktab *lt, const Lock *lock, const uint8_t *lease, uint64_t *visits)
{
    for (LeaseIdxEntry *e = leaseidx_chain(&lt->leases, lease); e; e = e->next) {
        Grant *g = CONTAINER_OF(e, Grant, byid);
        if (visits)
            (*visits)++;
        if (g->lock == lock && memcmp(g->h.lease, lease, LEASE_ID_BYTES) == 0)
            return g;
    }
    return NULL;
}

void locktab_set_charge(Locktab *lt, LockKind kind, const char *name, Charge charge)
{
    OWNED(lt);
    Lock *lock = find(lt, kind, name);
    if (lock)
        lock->charge = charge;
}

bool locktab_same_key(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

const ValueWrite *locktab_value_write(const LockValue *v, const Holder *holder, const char *request_id)
{
    /* The list is the grant's that wrote last: another grant's ids mean nothing to this one. */
    return v->version && v->token == holder->token ? valwrites_find(&v->writes, request_id) : NULL;
}

static LockResult reenter(Locktab *lt, Lock *lock, Grant *g, const AcquireArgs *args, const Now *now)
{
    char *metadata = args->metadata ? strdup(args->metadata) : NULL;
    char *request_id = args->request_id ? strdup(args->request_id) : NULL;
    if ((args->metadata && !metadata) || (args->request_id && !request_id) ||
        !set_expiry(lt, g, args->ttl_ms > 0 ? args->ttl_ms : g->h.ttl_ms, now)) {
        free(metadata);
        free(request_id);
        return LOCK_NOMEM;
    }
    if (metadata) {
        free(g->h.metadata);
        g->h.metadata = metadata;
    }
    free(g->h.request_id);
    g->h.request_id = request_id;
    g->h.count++;
    g->h.answers = 0; /* the answers from here on are the re-entry's */
    g->h.delivered = false;
    report(lt, lock, g);
    return LOCK_OK;
}

static LockResult enqueue(Locktab *lt, Lock *lock, const AcquireArgs *args, void *ctx,
                          const Now *now, Waiter **waiter_out)
{
    if (locktab_waiters(lt) >= lt->limits.max_waiters || lock->waiters.len >= lt->limits.max_waiters_per_lock)
        return LOCK_TOO_MANY_WAITERS;
    Waiter *w = calloc(1, sizeof *w);
    if (!w)
        return LOCK_NOMEM;
    w->owner = strdup(args->owner);
    w->metadata = strdup(args->metadata ? args->metadata : "{}");
    w->request_id = args->request_id ? strdup(args->request_id) : NULL;
    w->key = args->key ? strdup(args->key) : NULL;
    w->value = lock->kind == KIND_ELECTION && args->value ? strdup(args->value) : NULL;
    heap_entry_init(&w->wait.entry);
    w->wait.kind = DEADLINE_WAIT;
    if (!w->owner || !w->metadata || (args->request_id && !w->request_id) || (args->key && !w->key) ||
        (lock->kind == KIND_ELECTION && args->value && !w->value) ||
        !heap_set(&lt->deadlines, &w->wait.entry, now->mono_ms + args->wait_ms)) {
        waiter_free(w);
        return LOCK_NOMEM;
    }
    memcpy(w->lease, args->new_lease, LEASE_ID_BYTES);
    w->ttl_ms = args->ttl_ms;
    w->mode = lock->kind == KIND_LOCK ? args->mode : MODE_WRITE;
    w->permits = lock->kind == KIND_SEMAPHORE && args->permits ? args->permits : 1;
    w->lock_delay_ms = args->lock_delay_ms;
    w->since_ms = now->wall_ms;
    w->ctx = ctx;
    w->lock = lock;
    /* Fairness: append at the tail; only the head is ever granted. */
    dlist_append(&lock->waiters, &w->link);
    lock->index = ++lt->changes;
    lt->counts[lock->kind].waiters++;
    lock_check(lt, lock);
    *waiter_out = w;
    return LOCK_QUEUED;
}

static Lock *find_live(Locktab *lt, LockKind kind, const char *name, const Now *now)
{
    Lock *lock = find(lt, kind, name);
    if (lock)
        settle(lt, lock, now);
    return lock;
}

LockResult locktab_acquire(Locktab *lt, LockKind kind, const char *name, const AcquireArgs *args,
                           void *waiter_ctx, const Now *now, const Lock **lock_out, const Holder **holder_out,
                           Waiter **waiter_out)
{
    OWNED(lt);
    *lock_out = NULL;
    *holder_out = NULL;
    *waiter_out = NULL;
    uint8_t mode = kind == KIND_LOCK ? args->mode : MODE_WRITE;
    uint32_t permits = kind == KIND_SEMAPHORE && args->permits ? args->permits : 1;
    if (args->lease) {
        Lock *lock = find_live(lt, kind, name, now);
        Grant *g = lock && kind == KIND_LOCK ? grant_with(lt, lock, args->lease, &lt->holder_visits) : NULL;
        if (!g)
            return LOCK_NOT_HOLDER;
        *lock_out = lock;
        *holder_out = &g->h;
        if (is_replay(g, args->owner, args->request_id, args->key))
            return LOCK_REPLAYED;
        if (args->mode_given && args->mode != g->h.mode)
            return LOCK_MODE_CONFLICT;
        return reenter(lt, lock, g, args, now);
    }
    Lock *lock;
    LockResult r = find_or_create(lt, kind, name, true, &args->charge, now, &lock);
    if (r != LOCK_OK)
        return r;
    *lock_out = lock;
    settle(lt, lock, now);
    Grant *replayed = replay_of(lock, args->owner, args->request_id, args->key);
    if (replayed) {
        *holder_out = &replayed->h;
        return LOCK_REPLAYED;
    }
    /* A semaphore takes the limit of the acquire that finds it idle. */
    uint32_t limit_before = lock->limit;
    if (kind == KIND_SEMAPHORE && args->limit != lock->limit) {
        if (lock->holders.len || lock->waiters.len)
            return LOCK_LIMIT_MISMATCH;
        lock->limit = args->limit;
    }
    /* The caller refuses a request for more permits than the limit (it could never be granted). */
    assert(kind != KIND_SEMAPHORE || permits <= lock->limit);
    if (lock->waiters.len == 0 && grantable(lock, mode, permits)) {
        bool valued = kind == KIND_ELECTION && args->value;
        GrantStrings g = {strdup(args->owner), strdup(args->metadata ? args->metadata : "{}"),
                          args->request_id ? strdup(args->request_id) : NULL, args->key ? strdup(args->key) : NULL,
                          valued ? strdup(args->value) : NULL};
        GrantTerms terms = {args->ttl_ms, mode, args->lock_delay_ms, permits};
        Grant *made = NULL;
        if (!g.owner || !g.metadata || (args->request_id && !g.request_id) || (args->key && !g.key) ||
            (valued && !g.value) ||
            !(made = grant(lt, lock, args->new_lease, &g, &terms, now))) {
            grant_strings_free(&g);
            lock->limit = limit_before;
            return LOCK_NOMEM;
        }
        report_grant(lt, lock, made);
        *holder_out = &made->h;
        return LOCK_OK;
    }
    if (args->wait_ms <= 0)
        return LOCK_BUSY;
    return enqueue(lt, lock, args, waiter_ctx, now, waiter_out);
}

LockResult locktab_preview(const Locktab *lt, LockKind kind, const char *name, uint8_t mode, uint32_t limit,
                           uint32_t permits, const char *owner, const char *request_id, const char *key,
                           const Now *now)
{
    const Lock *lock = find(lt, kind, name);
    if (!lock)
        return LOCK_OK;
    size_t live = 0;
    uint64_t live_permits = 0;
    for (DLink *l = lock->holders.head; l; l = l->next) {
        const Grant *g = DLIST_ITEM(l, Grant, link);
        if (g->h.deadline_ms <= now->mono_ms)
            continue;
        if (is_replay(g, owner, request_id, key))
            return LOCK_REPLAYED;
        live++;
        live_permits += g->h.permits;
    }
    if (kind == KIND_SEMAPHORE && limit != lock->limit && (live || lock->waiters.len))
        return LOCK_LIMIT_MISMATCH;
    if (lock->waiters.len || locktab_delayed(lock, now))
        return LOCK_BUSY;
    if (kind == KIND_SEMAPHORE)
        return live_permits + (permits ? permits : 1) <= limit ? LOCK_OK : LOCK_BUSY;
    return live == 0 || (mode == MODE_READ && lock->mode == MODE_READ) ? LOCK_OK : LOCK_BUSY;
}

LockResult locktab_renew(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, int64_t ttl_ms,
                         const Now *now, const Lock **lock_out, const Holder **holder_out)
{
    OWNED(lt);
    Lock *lock = find_live(lt, kind, name, now);
    Grant *g = lock ? grant_with(lt, lock, lease, &lt->holder_visits) : NULL;
    *lock_out = g ? lock : NULL;
    *holder_out = g ? &g->h : NULL;
    if (!g)
        return LOCK_NOT_HOLDER;
    if (!set_expiry(lt, g, ttl_ms > 0 ? ttl_ms : g->h.ttl_ms, now))
        return LOCK_NOMEM;
    report(lt, lock, g);
    return LOCK_OK;
}

LockResult locktab_release(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, void *actor,
                           const Now *now, uint32_t *count_left)
{
    OWNED(lt);
    Lock *lock = find_live(lt, kind, name, now);
    Grant *g = lock ? grant_with(lt, lock, lease, &lt->holder_visits) : NULL;
    *count_left = 0;
    if (!g)
        return LOCK_NOT_HOLDER;
    if (--g->h.count > 0) {
        *count_left = g->h.count;
        report(lt, lock, g);
        return LOCK_OK;
    }
    bool record = end_grant(lt, lock, g, LEASE_END_RELEASED, actor, now);
    grant_next(lt, lock, now, record);
    return LOCK_OK;
}

LockResult locktab_set_value(Locktab *lt, const char *name, const uint8_t *lease, const ValueArgs *args,
                             const Now *now, const Lock **lock_out)
{
    OWNED(lt);
    /* Leases that ran out end first: an expired writer writes nothing. */
    Lock *lock = find_live(lt, KIND_LOCK, name, now);
    *lock_out = lock;
    Grant *g = lock ? grant_with(lt, lock, lease, &lt->holder_visits) : NULL;
    if (!g || g->h.mode != MODE_WRITE)
        return LOCK_NOT_HOLDER;
    LockValue *v = &lock->value;
    /* Before the version: the repeat's if_version is the one its first write moved on from. */
    assert(!args->request_id || (args->digest && *args->request_id &&
                                 strlen(args->request_id) <= VALWRITE_ID_MAX));
    const ValueWrite *was = locktab_value_write(v, &g->h, args->request_id);
    if (was)
        return memcmp(was->digest, args->digest, VALWRITE_DIGEST_BYTES) == 0 ? LOCK_REPLAYED
                                                                              : LOCK_REQUEST_ID_REUSED;
    if (args->check_version && args->if_version != v->version)
        return LOCK_VERSION_MISMATCH;
    ValueWrite w = {v->version + 1, {0}, {0}};
    if (args->request_id) { /* bounded by the API (ValueArgs) */
        snprintf(w.request_id, sizeof w.request_id, "%s", args->request_id);
        memcpy(w.digest, args->digest, VALWRITE_DIGEST_BYTES);
    }
    char *text = args->text ? strdup(args->text) : NULL;
    char *key = args->key ? strdup(args->key) : NULL;
    /* The list last: it changes in place, so nothing may fail after it. */
    if ((args->text && !text) || (args->key && !key) ||
        !valwrites_add(&v->writes, v->version == 0 || v->token != g->h.token, args->request_id ? &w : NULL)) {
        free(text);
        free(key);
        return LOCK_NOMEM;
    }
    LocktabCounts *c = &lt->counts[KIND_LOCK];
    c->values += (text != NULL) - (v->text != NULL);
    c->value_bytes += (text ? strlen(text) : 0) - (v->text ? strlen(v->text) : 0);
    free(v->text);
    free(v->key);
    v->text = text;
    v->key = key;
    v->version++;
    v->token = g->h.token;
    v->at_ms = now->wall_ms;
    v->charge = args->charge;
    /* Held now, so not idle; when it is let go, a null value no longer keeps it. */
    touched(lt, lock, false);
    if (lt->hooks.value_changed)
        lt->hooks.value_changed(lt->hooks.ud, lock);
    return LOCK_OK;
}

LockResult locktab_load_value(Locktab *lt, const char *name, const LockValue *value, const Now *now)
{
    OWNED(lt);
    Lock *lock;
    LockResult r = find_or_create(lt, KIND_LOCK, name, false, NULL, now, &lock);
    if (r != LOCK_OK)
        return r;
    char *text = value->text ? strdup(value->text) : NULL;
    char *key = value->key ? strdup(value->key) : NULL;
    ValueWrites writes;
    if ((value->text && !text) || (value->key && !key) || !valwrites_copy(&writes, &value->writes)) {
        free(text);
        free(key);
        return LOCK_NOMEM;
    }
    LocktabCounts *c = &lt->counts[KIND_LOCK];
    c->values += (text != NULL) - (lock->value.text != NULL);
    c->value_bytes += (text ? strlen(text) : 0) - (lock->value.text ? strlen(lock->value.text) : 0);
    free(lock->value.text);
    free(lock->value.key);
    valwrites_clear(&lock->value.writes);
    lock->value = *value;
    lock->value.text = text;
    lock->value.key = key;
    lock->value.writes = writes;
    lock->value.charge = (Charge){NULL, NULL};
    if (value->token > lock->last_token) /* its writer's grant is older: its token was counted */
        lock->last_token = value->token;
    if (value->token > lt->last_token)
        lt->last_token = value->token;
    if (!is_idle(lock))
        heap_remove(&lt->deadlines, &lock->idle.entry);
    lock_check(lt, lock);
    return LOCK_OK;
}

LockResult locktab_proclaim(Locktab *lt, const char *name, const uint8_t *lease, const char *text, const Now *now,
                            const Lock **lock_out, const Holder **holder_out)
{
    OWNED(lt);
    /* A leader whose lease ran out proclaims nothing: its end comes first. */
    Lock *lock = find_live(lt, KIND_ELECTION, name, now);
    Grant *g = lock ? grant_with(lt, lock, lease, &lt->holder_visits) : NULL;
    *lock_out = lock;
    *holder_out = g ? &g->h : NULL;
    if (!g)
        return LOCK_NOT_HOLDER;
    char *copy = text ? strdup(text) : NULL;
    if (text && !copy)
        return LOCK_NOMEM;
    free(g->h.value);
    g->h.value = copy;
    report(lt, lock, g);
    return LOCK_OK;
}

void locktab_set_value_charge(Locktab *lt, const char *name, Charge charge)
{
    OWNED(lt);
    Lock *lock = find(lt, KIND_LOCK, name);
    if (lock)
        lock->value.charge = charge;
}

/* Ends the running leases of name with token `token` (0: every one), for actor. */
static LockResult revoke(Locktab *lt, LockKind kind, const char *name, uint64_t token, void *actor, const Now *now)
{
    OWNED(lt);
    Lock *lock = find(lt, kind, name);
    bool any = false, record = false;
    /* Only leases still running: one whose deadline has passed is the
     * tick's to end, as expired. */
    for (DLink *l = lock ? lock->holders.head : NULL, *next; l; l = next) {
        next = l->next;
        Grant *g = DLIST_ITEM(l, Grant, link);
        if (g->h.deadline_ms > now->mono_ms && (token == 0 || g->h.token == token)) {
            record |= end_grant(lt, lock, g, LEASE_END_REVOKED, actor, now);
            any = true;
        }
    }
    if (!any)
        return LOCK_NOT_HOLDER;
    grant_next(lt, lock, now, record);
    return LOCK_OK;
}

LockResult locktab_revoke(Locktab *lt, LockKind kind, const char *name, void *actor, const Now *now)
{
    return revoke(lt, kind, name, 0, actor, now);
}

LockResult locktab_revoke_token(Locktab *lt, LockKind kind, const char *name, uint64_t token, void *actor,
                                const Now *now)
{
    return token ? revoke(lt, kind, name, token, actor, now) : LOCK_NOT_HOLDER;
}

const Holder *locktab_held_by(const Locktab *lt, LockKind kind, const char *name, const uint8_t *lease,
                              const Now *now)
{
    const Lock *lock = find(lt, kind, name);
    const Grant *g = lock ? grant_with(lt, lock, lease, NULL) : NULL;
    return g && g->h.deadline_ms > now->mono_ms ? &g->h : NULL;
}

void locktab_continue_history(Locktab *lt, uint64_t seq)
{
    OWNED(lt);
    leasehist_continue_after(lt->history, seq);
}

void locktab_load_ended(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, uint64_t token,
                        int how, uint64_t seq)
{
    OWNED(lt);
    const Lock *lock = find(lt, kind, name);
    if (lock && (how == LEASE_END_EXPIRED || how == LEASE_END_RELEASED || how == LEASE_END_REVOKED))
        leasehist_load(lt->history, lease, lock->id, token, (LeaseEnd)how, seq);
}

uint64_t locktab_token_of(const Locktab *lt, LockKind kind, const char *name, const uint8_t *lease)
{
    const Lock *lock = find(lt, kind, name);
    const Grant *g = lock ? grant_with(lt, lock, lease, NULL) : NULL;
    uint64_t of_lock, token;
    LeaseEnd how;
    if (g)
        return g->h.token;
    return lock && leasehist_find(lt->history, lease, &of_lock, &token, &how) && of_lock == lock->id ? token : 0;
}

NotHolderReason locktab_why_not(const Locktab *lt, LockKind kind, const char *name, const uint8_t *lease)
{
    const Lock *lock = find(lt, kind, name);
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

void locktab_waiter_set_ctx(Waiter *w, void *ctx) { w->ctx = ctx; }
const char *locktab_waiter_lock(const Waiter *w) { return w->lock->name; }
LockKind locktab_waiter_kind(const Waiter *w) { return (LockKind)w->lock->kind; }

/* A waiter left the queue (its hooks already called, or never to be): if it
 * was at the head, the ones behind it may be grantable now (a reader behind
 * a writer that gave up, while readers hold). */
static void after_leaving(Locktab *lt, Lock *lock, bool was_head, const Now *now)
{
    const Waiter *head = first_waiter(lock);
    if (was_head && head && grantable(lock, head->mode, head->permits))
        grant_next(lt, lock, now, false);
    lock_check(lt, lock);
}

void locktab_cancel(Locktab *lt, Waiter *w, const Now *now)
{
    OWNED(lt);
    Lock *lock = w->lock;
    bool was_head = first_waiter(lock) == w;
    unlink_waiter(lt, w);
    waiter_free(w);
    after_leaving(lt, lock, was_head, now);
}

/* A name idle for forget_idle_ms leaves the table (and, through the hook, storage). */
static void forget(Locktab *lt, Lock *lock)
{
    assert(is_idle(lock));
    heap_remove(&lt->deadlines, &lock->idle.entry);
    lt->hooks.forgotten(lt->hooks.ud, lock);
    lt->forget_index = ++lt->changes;
    smap_remove(lt->names[lock->kind], lock->name);
    lt->forgotten++;
    lock_free(lock);
}

void locktab_tick(Locktab *lt, const Now *now)
{
    OWNED(lt);
    HeapEntry *e;
    while ((e = heap_peek(&lt->deadlines)) && e->deadline_ms <= now->mono_ms) {
        Deadline *d = CONTAINER_OF(e, Deadline, entry);
        if (d->kind == DEADLINE_EXPIRY) {
            /* This lease only, so that deadlines fire earliest first. */
            Grant *g = CONTAINER_OF(d, Grant, expiry);
            Lock *lock = g->lock;
            lt->expiries++;
            bool record = end_grant(lt, lock, g, LEASE_END_EXPIRED, NULL, now);
            grant_next(lt, lock, now, record);
        } else if (d->kind == DEADLINE_DELAY) {
            Lock *lock = CONTAINER_OF(d, Lock, delay);
            end_delay(lt, lock);
            grant_next(lt, lock, now, true);
        } else if (d->kind == DEADLINE_IDLE) {
            forget(lt, CONTAINER_OF(d, Lock, idle));
        } else {
            Waiter *w = CONTAINER_OF(d, Waiter, wait);
            Lock *lock = w->lock;
            bool was_head = first_waiter(lock) == w;
            unlink_waiter(lt, w);
            void *ctx;
            bool woken = waking(lt, w, &ctx);
            waiter_free(w);
            lock_check(lt, lock);
            if (woken)
                lt->hooks.timed_out(lt->hooks.ud, ctx, lock);
            after_leaving(lt, lock, was_head, now);
        }
    }
}

int64_t locktab_next_timeout_ms(const Locktab *lt, const Now *now)
{
    return heap_ms_until_first(&lt->deadlines, now->mono_ms);
}

const Lock *locktab_get(const Locktab *lt, LockKind kind, const char *name) { return find(lt, kind, name); }

/* The holder of `name` (of `kind`) whose lease is `lease`, else NULL. */
static Holder *holder_of(const Locktab *lt, LockKind kind, const char *name, const uint8_t *lease)
{
    Lock *lock = find(lt, kind, name);
    Grant *g = lock ? grant_with(lt, lock, lease, NULL) : NULL;
    return g ? &g->h : NULL;
}

void locktab_answer_started(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease)
{
    OWNED(lt);
    Holder *h = holder_of(lt, kind, name, lease);
    if (h)
        h->answers++;
}

bool locktab_answer_ended(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, bool delivered)
{
    OWNED(lt);
    Holder *h = holder_of(lt, kind, name, lease);
    if (!h)
        return false;
    if (h->answers > 0) /* an answer of the grant, ending after a re-entry reset the count, is not counted */
        h->answers--;
    h->delivered |= delivered;
    return !delivered && !h->delivered && h->answers == 0;
}

bool locktab_list(const Locktab *lt, LockKind kind, const char *prefix, const char *after, size_t limit,
                  void (*fn)(void *ud, const Lock *lock), void *ud)
{
    const Smap *names = lt->names[kind];
    size_t plen = strlen(prefix);
    const SmapNode *n = after && strcmp(after, prefix) >= 0 ? smap_first_after(names, after)
                                                              : smap_first_from(names, prefix);
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

uint64_t locktab_index(const Locktab *lt, LockKind kind, const char *name)
{
    const Lock *lock = find(lt, kind, name);
    return lock ? lock->index : lt->forget_index;
}

uint64_t locktab_index_now(const Locktab *lt) { return lt->changes; }

void locktab_each_waiter(const Lock *lock, size_t limit, void (*fn)(void *ud, const WaiterView *w), void *ud)
{
    for (const DLink *l = lock->waiters.head; l && limit; l = l->next, limit--) {
        const Waiter *w = CONTAINER_OF(l, Waiter, link);
        WaiterView v = {w->owner, w->since_ms, w->mode, w->permits};
        fn(ud, &v);
    }
}

LocktabCounts locktab_counts(const Locktab *lt, LockKind kind)
{
    LocktabCounts c = lt->counts[kind];
    c.names = smap_len(lt->names[kind]);
    return c;
}

uint64_t locktab_last_token(const Locktab *lt) { return lt->last_token; }

void locktab_raise_last_token(Locktab *lt, uint64_t token)
{
    OWNED(lt);
    if (token > lt->last_token)
        lt->last_token = token;
}

size_t locktab_locks(const Locktab *lt)
{
    size_t n = 0;
    for (int k = 0; k < LOCK_KINDS; k++)
        n += smap_len(lt->names[k]);
    return n;
}

size_t locktab_held(const Locktab *lt)
{
    size_t n = 0;
    for (int k = 0; k < LOCK_KINDS; k++)
        n += lt->counts[k].leases;
    return n;
}

size_t locktab_waiters(const Locktab *lt)
{
    size_t n = 0;
    for (int k = 0; k < LOCK_KINDS; k++)
        n += lt->counts[k].waiters;
    return n;
}

uint64_t locktab_holder_visits(const Locktab *lt) { return lt->holder_visits; }
uint64_t locktab_expiries(const Locktab *lt) { return lt->expiries; }
uint64_t locktab_forgotten(const Locktab *lt) { return lt->forgotten; }
uint64_t locktab_delays(const Locktab *lt) { return lt->delays; }
