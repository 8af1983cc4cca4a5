/*
 * fuzz_locktab — the lock table (src/core/locktab.h) driven by a
 * sequence of operations decoded from the input, on a handful of lock names
 * with a fake clock, and checked against a small reference model after every
 * step and inside every hook:
 *
 *  - one holder per lock: a new grant only after the model's holder ended
 *    (released with its count at zero, or its deadline passed);
 *  - FIFO: a lock that becomes free (a release, an expiry by the tick or at
 *    the start of an operation on it) walks its queue from the head: the
 *    waiters whose wait has run out (deadline <= now, the tick has not timed
 *    them out yet) time out then, in that operation, and the first one whose
 *    wait has not is granted; at most one is granted, and never at or after
 *    its wait deadline; granted/timed_out come exactly once per waiter, never
 *    for a cancelled one, granted after the grant's changed; timed_out never
 *    before the waiter's deadline, and outside such a hand-over only by the
 *    tick, earliest deadline first;
 *  - tokens: every grant takes the model's counter + 1 (so they strictly
 *    grow and never repeat, also across restarts), reentry keeps the token;
 *  - reentry counts, ttl, expires_at_ms, metadata and owner as the model says;
 *  - expiry exactly at the deadline (mono + ttl + LOCKTAB_DEADLINE_SLACK_MS): never before it and
 *    never before expires_at_ms on the wall clock, and nothing due is left
 *    after locktab_tick; deadlines fire earliest first; the tick times
 *    waiters out at their wait deadline; idle locks forgotten at
 *    forget_idle_ms;
 *  - a lease whose deadline has passed is ended (expired, counted, recorded,
 *    the lock passed on as above or left idle) at the start of any
 *    acquire, reentry, renew or release of its lock, even before
 *    locktab_tick has run: it is never renewed, released or reentered after
 *    its deadline, and a newcomer then gets the lock when nobody waits;
 *  - every durable change is reported before the call returns, one hook per
 *    record: hooks.changed (the name's: its last token), holder_changed (the
 *    lease's) and ended (its removal); the last state reported equals the
 *    state after the call;
 *  - hooks.ended once per ended lease, with the next
 *    history number; locktab_why_not as the history says: the newest
 *    lease_history ended leases by sequence number;
 *  - limits (max_locks, max_waiters, max_waiters_per_lock), the counters,
 *    locktab_next_timeout_ms, locktab_held_by, locktab_list, and
 *    locktab_check()'s invariants (assertions on: built without NDEBUG);
 *  - a restart as the server does it (locktab_free; locktab_load of the
 *    model's durable state on the same boot or a new one, then the stored
 *    history replayed, then locktab_tick) keeps deadlines as locktab.h says:
 *    loading reports nothing, and a lease that expired while the server was
 *    down ends at that first tick, numbered after the stored history (so it
 *    is the newest entry of the history).
 */
#include <stdbool.h>

#include "core/leasehist.h"
#include "core/locktab.h"
#include "fuzz.h"

#define NNAMES 5
static const char *const NAMES[NNAMES] = {"a", "b/c", "orders/42", "x", "y.z"};
static const char *const OWNERS[] = {"o0", "billing-7f3", "w"};
static const char *const METAS[] = {NULL, "{}", "{\"who\":\"a\"}", "{\"n\":0.1}"};
#define NOWNERS (sizeof OWNERS / sizeof OWNERS[0])
#define NMETAS (sizeof METAS / sizeof METAS[0])
/* An acquire's request_id follows from its metadata choice (no input byte of
 * its own, so that the corpus keeps its meaning): repeats of an acquire with
 * the same owner and metadata while its grant holds are replays. */
static const char *const REQUEST_IDS[] = {NULL, "r1", NULL, "r3"};

#define MAX_OPS 600
#define MAXQ 16
#define MAX_HIST 512
#define HIST_KEEP 64 /* more than lease_history can be */

enum { W_QUEUED = 1, W_GRANTING, W_DONE };

typedef struct MWaiter {
    int state;
    int lock;
    Waiter *w;
    uint8_t lease[LEASE_ID_BYTES];
    const char *owner, *metadata, *request_id;
    int64_t ttl_ms, wait_deadline;
} MWaiter;

typedef struct MHolder {
    uint8_t lease[LEASE_ID_BYTES];
    const char *owner, *metadata, *request_id;
    uint64_t token;
    int64_t ttl_ms, acquired_at, expires_at, deadline;
    int64_t wall_floor; /* the lease may not end while now.wall < this */
    uint32_t count;
} MHolder;

/* A lock's durable state as the table showed it. */
typedef struct Dur {
    bool held;
    uint8_t lease[LEASE_ID_BYTES];
    uint64_t token, last_token;
    int64_t ttl_ms, acquired_at, expires_at, deadline;
    uint32_t count;
    char owner[32], metadata[64];
} Dur;

typedef struct MLock {
    bool known;
    uint64_t inc, old_inc; /* the model's incarnation of the name */
    uint64_t last_token;
    bool held;
    MHolder h;
    int64_t idle_deadline;
    MWaiter *q[MAXQ];
    int nq;
    bool just_ended;
    Dur reported;
    bool reported_valid;
} MLock;

typedef struct Hist {
    uint8_t lease[LEASE_ID_BYTES];
    int lock;
    uint64_t inc, token, seq;
    int how;
} Hist;

enum Ctx { C_NONE, C_ACQUIRE, C_RENEW, C_RELEASE, C_CANCEL, C_TICK, C_LOAD, C_QUERY };
static const char *const CTX_NAMES[] = {"none", "acquire", "renew", "release", "cancel", "tick", "load", "query"};

typedef struct Model {
    Locktab *lt;
    LocktabLimits limits;
    Now now;
    uint64_t last_token, last_seq, expiries, forgotten, inc_counter;
    MLock locks[NNAMES];
    MWaiter waiters[MAX_OPS];
    int nwaiters;
    MWaiter *granting;
    uint32_t nleases;
    Hist hist[MAX_HIST];
    int nhist;
    /* the operation running now */
    enum Ctx ctx;
    int cur_lock;
    const uint8_t *cur_lease;
    const uint8_t *cur_new_lease;
    const char *cur_owner, *cur_metadata, *cur_request_id;
    int64_t cur_ttl;
    /* cur_lock's lease was due when the operation began: the table must end it
     * (expired) before anything else, even before locktab_tick has run */
    bool due_pending;
    int ops;
} Model;

static Model m;

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)

static void lease_of(uint32_t n, uint8_t out[LEASE_ID_BYTES])
{
    uint64_t a = (uint64_t)n * 0x9E3779B97F4A7C15ULL + 0x1234567ULL;
    memcpy(out, &a, 8);
    uint64_t b = n;
    memcpy(out + 8, &b, 8);
}

static int name_index(const char *name)
{
    for (int i = 0; i < NNAMES; i++)
        if (!strcmp(name, NAMES[i]))
            return i;
    return -1;
}

static MLock *model_lock_of(const Lock *lock)
{
    CHECK(lock != NULL, "a hook got a NULL lock");
    int i = name_index(lock->name);
    CHECK(i >= 0, "a hook got a lock with a name never used: '%s'", lock->name);
    CHECK(locktab_get(m.lt, KIND_LOCK, lock->name) == lock, "a hook's lock '%s' is not the table's", lock->name);
    return &m.locks[i];
}

static int64_t min_deadline(void)
{
    int64_t min = INT64_MAX;
    for (int i = 0; i < NNAMES; i++) {
        const MLock *M = &m.locks[i];
        if (!M->known || M->just_ended)
            continue;
        int64_t d = M->held ? M->h.deadline : M->idle_deadline;
        if (d < min)
            min = d;
        for (int k = 0; k < M->nq; k++)
            if (M->q[k]->wait_deadline < min)
                min = M->q[k]->wait_deadline;
    }
    return min;
}

static Dur dur_of(const Lock *lock)
{
    Dur d;
    memset(&d, 0, sizeof d);
    d.held = locktab_is_held(lock);
    d.last_token = lock->last_token;
    if (locktab_is_held(lock)) {
        memcpy(d.lease, locktab_holder(lock)->lease, LEASE_ID_BYTES);
        d.token = locktab_holder(lock)->token;
        d.ttl_ms = locktab_holder(lock)->ttl_ms;
        d.acquired_at = locktab_holder(lock)->acquired_at_ms;
        d.expires_at = locktab_holder(lock)->expires_at_ms;
        d.deadline = locktab_holder(lock)->deadline_ms;
        d.count = locktab_holder(lock)->count;
        snprintf(d.owner, sizeof d.owner, "%s", locktab_holder(lock)->owner ? locktab_holder(lock)->owner : "(null)");
        snprintf(d.metadata, sizeof d.metadata, "%s", locktab_holder(lock)->metadata ? locktab_holder(lock)->metadata : "(null)");
    }
    return d;
}

static void hist_add(int lock, uint64_t inc, const uint8_t *lease, uint64_t token, int how, uint64_t seq)
{
    if (m.nhist == MAX_HIST) { /* keep the newest: lease_history is at most 8 here */
        memmove(m.hist, m.hist + MAX_HIST - HIST_KEEP, sizeof m.hist[0] * HIST_KEEP);
        m.nhist = HIST_KEEP;
    }
    Hist *h = &m.hist[m.nhist++];
    memcpy(h->lease, lease, LEASE_ID_BYTES);
    h->lock = lock;
    h->inc = inc;
    h->token = token;
    h->how = how;
    h->seq = seq;
}

/* The model's holder of M ended (how: a LeaseEnd). */
static void end_model_lease(MLock *M, int how)
{
    int i = (int)(M - m.locks);
    CHECK(M->held, "lock '%s': a lease ended while the model has no holder", NAMES[i]);
    CHECK(m.ctx == C_TICK || m.cur_lock == i, "lock '%s': a lease ended during %s of '%s'", NAMES[i],
          CTX_NAMES[m.ctx], NAMES[m.cur_lock]);
    if (how == LEASE_END_EXPIRED) {
        CHECK(m.ctx == C_TICK || m.ctx == C_ACQUIRE || m.ctx == C_RENEW || m.ctx == C_RELEASE,
              "lock '%s': a lease expired during %s", NAMES[i], CTX_NAMES[m.ctx]);
        CHECK(M->h.deadline <= m.now.mono_ms, "lock '%s' expired at mono %lld before its deadline %lld (during %s)",
              NAMES[i], (long long)m.now.mono_ms, (long long)M->h.deadline, CTX_NAMES[m.ctx]);
        CHECK(m.now.wall_ms >= M->h.wall_floor, "lock '%s' expired at wall %lld before expires_at_ms %lld", NAMES[i],
              (long long)m.now.wall_ms, (long long)M->h.expires_at);
        if (m.ctx == C_TICK) {
            CHECK(M->h.deadline == min_deadline(), "lock '%s' expired (deadline %lld) before an earlier deadline %lld",
                  NAMES[i], (long long)M->h.deadline, (long long)min_deadline());
        } else {
            /* only the lease due when the operation began (a waiter granted
             * after it has a deadline ahead) */
            CHECK(m.due_pending, "lock '%s': a lease expired during %s, not the one due at its start", NAMES[i],
                  CTX_NAMES[m.ctx]);
            m.due_pending = false;
        }
        m.expiries++;
    } else {
        CHECK(how == LEASE_END_RELEASED, "lock '%s': a lease ended how=%d", NAMES[i], how);
        CHECK(m.ctx == C_RELEASE, "lock '%s': released during %s", NAMES[i], CTX_NAMES[m.ctx]);
        CHECK(!m.due_pending, "lock '%s': a lease released before the due lease (deadline %lld) was ended", NAMES[i],
              (long long)M->h.deadline);
        CHECK(M->h.deadline > m.now.mono_ms, "lock '%s' released at mono %lld, after its deadline %lld", NAMES[i],
              (long long)m.now.mono_ms, (long long)M->h.deadline);
        CHECK(!memcmp(m.cur_lease, M->h.lease, LEASE_ID_BYTES), "lock '%s': released by another lease", NAMES[i]);
        CHECK(M->h.count == 1, "lock '%s': released with reentry count %u", NAMES[i], M->h.count);
    }
    hist_add(i, M->inc, M->h.lease, M->h.token, how, ++m.last_seq);
    M->held = false;
    M->just_ended = true;
}

static void model_grant(MLock *M, const Lock *lock)
{
    int i = (int)(M - m.locks);
    CHECK(locktab_holder(lock)->token == m.last_token + 1, "lock '%s' granted token %llu, expected %llu", NAMES[i],
          (unsigned long long)locktab_holder(lock)->token, (unsigned long long)(m.last_token + 1));
    CHECK(lock->last_token == locktab_holder(lock)->token, "lock '%s': last_token %llu after granting %llu", NAMES[i],
          (unsigned long long)lock->last_token, (unsigned long long)locktab_holder(lock)->token);
    m.last_token++;
    MHolder *h = &M->h;
    memset(h, 0, sizeof *h);
    if (M->nq > 0) {
        MWaiter *w = M->q[0];
        CHECK(M->just_ended, "lock '%s': a waiter was granted while the lock was never freed", NAMES[i]);
        /* a release, an expiry by the tick, or the expiry that begins an
         * operation on the lock (end_model_lease checked which) */
        CHECK(m.ctx == C_RELEASE || m.ctx == C_TICK || m.ctx == C_ACQUIRE || m.ctx == C_RENEW,
              "lock '%s': waiter granted during %s", NAMES[i], CTX_NAMES[m.ctx]);
        for (int k = 1; k < M->nq; k++)
            CHECK(memcmp(locktab_holder(lock)->lease, M->q[k]->lease, LEASE_ID_BYTES) != 0,
                  "lock '%s': waiter #%d of %d granted before the head (FIFO)", NAMES[i], k + 1, M->nq);
        CHECK(!memcmp(locktab_holder(lock)->lease, w->lease, LEASE_ID_BYTES),
              "lock '%s': granted to a lease that is not the head waiter's", NAMES[i]);
        CHECK(w->wait_deadline > m.now.mono_ms, "lock '%s': a waiter granted at %lld, its wait ended at %lld",
              NAMES[i], (long long)m.now.mono_ms, (long long)w->wait_deadline);
        memcpy(h->lease, w->lease, LEASE_ID_BYTES);
        h->owner = w->owner;
        h->metadata = w->metadata ? w->metadata : "{}";
        h->request_id = w->request_id;
        h->ttl_ms = w->ttl_ms;
        memmove(M->q, M->q + 1, sizeof M->q[0] * (size_t)(M->nq - 1));
        M->nq--;
        w->state = W_GRANTING;
        CHECK(m.granting == NULL, "two waiters granted without granted hook in between");
        m.granting = w;
    } else {
        CHECK(m.ctx == C_ACQUIRE && m.cur_lock == i && m.cur_new_lease,
              "lock '%s': a grant with no waiter during %s", NAMES[i], CTX_NAMES[m.ctx]);
        CHECK(!memcmp(locktab_holder(lock)->lease, m.cur_new_lease, LEASE_ID_BYTES),
              "lock '%s': an acquire granted a lease other than new_lease", NAMES[i]);
        memcpy(h->lease, m.cur_new_lease, LEASE_ID_BYTES);
        h->owner = m.cur_owner;
        h->metadata = m.cur_metadata ? m.cur_metadata : "{}";
        h->request_id = m.cur_request_id;
        h->ttl_ms = m.cur_ttl;
    }
    h->token = m.last_token;
    h->count = 1;
    h->acquired_at = m.now.wall_ms;
    h->expires_at = m.now.wall_ms + h->ttl_ms;
    h->deadline = m.now.mono_ms + h->ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
    h->wall_floor = h->expires_at + 1;
    M->held = true;
    M->last_token = h->token;
    M->just_ended = false;
}

/* Every lease that ended was reported (hooks.ended, which storage needs to
 * remove its record): the table holds M by the model's lease, or the model
 * has it ended. */
static void check_end_reported(const MLock *M, const Lock *lock)
{
    CHECK(!M->held || (locktab_is_held(lock) && !memcmp(locktab_holder(lock)->lease, M->h.lease, LEASE_ID_BYTES) &&
                       locktab_holder(lock)->token == M->h.token),
          "lock '%s': its lease ended without hooks.ended", lock->name);
}

/* A hook about lock M: during a call on it (or the tick), never while its
 * due lease is left running. */
static MLock *hook_of(const Lock *lock, const char *hook)
{
    /* not during locktab_load: a lease that expired while the server was down
     * ends at the first tick */
    CHECK(m.ctx == C_ACQUIRE || m.ctx == C_RENEW || m.ctx == C_RELEASE || m.ctx == C_TICK, "hooks.%s during %s", hook,
          CTX_NAMES[m.ctx]);
    MLock *M = model_lock_of(lock);
    CHECK(M->known, "hooks.%s for '%s', which the model does not know", hook, lock->name);
    CHECK(m.ctx == C_TICK || m.cur_lock == (int)(M - m.locks), "hooks.%s for '%s' during %s of '%s'", hook,
          lock->name, CTX_NAMES[m.ctx], NAMES[m.cur_lock]);
    return M;
}

/* The name's record: here only a grant changes it (its last token; no lock
 * has a lock-delay here). */
static void on_changed(void *ud, const Lock *lock)
{
    (void)ud;
    MLock *M = hook_of(lock, "changed");
    check_end_reported(M, lock);
    CHECK(!m.due_pending, "'%s' reported changed during %s while its lease (deadline %lld, now %lld) was not ended",
          lock->name, CTX_NAMES[m.ctx], (long long)M->h.deadline, (long long)m.now.mono_ms);
    CHECK(locktab_is_held(lock) && !M->held, "hooks.changed for '%s' without a grant", lock->name);
    model_grant(M, lock);
    M->reported.last_token = lock->last_token;
    M->reported_valid = true;
}

/* The lease's record: made at a grant (after changed), changed by a renewal,
 * a reentry or a release to a count above 0. */
static void on_holder_changed(void *ud, const Lock *lock, const Holder *h)
{
    (void)ud;
    MLock *M = hook_of(lock, "holder_changed");
    CHECK(locktab_is_held(lock) && h == locktab_holder(lock), "hooks.holder_changed for '%s' with a lease that does "
          "not hold it", lock->name);
    Dur d = dur_of(lock);
    d.last_token = M->reported.last_token;
    M->reported = d;
}

/* After a call on lock i (or the tick): a lock whose lease ended and that
 * nobody got starts its idle time. */
static void settle_model(int i)
{
    MLock *M = &m.locks[i];
    const Lock *lock = locktab_get(m.lt, KIND_LOCK, NAMES[i]);
    if (!M->known || !lock)
        return;
    if (M->just_ended) {
        CHECK(!locktab_is_held(lock), "harness: '%s' ended and held, but no grant was reported", NAMES[i]);
        CHECK(M->nq == 0, "lock '%s' is free with %d waiters in the model", lock->name, M->nq);
        CHECK(lock->waiters.len == 0, "lock '%s' is free with %zu waiters", lock->name, lock->waiters.len);
        M->idle_deadline = m.now.mono_ms + m.limits.forget_idle_ms;
        M->just_ended = false;
    }
}

static void on_granted(void *ud, void *ctx, const Lock *lock, const Holder *granted)
{
    (void)ud;
    CHECK(granted == locktab_holder(lock), "hooks.granted: the grant is not the lock's holder");
    CHECK(m.ctx == C_RELEASE || m.ctx == C_TICK || m.ctx == C_ACQUIRE || m.ctx == C_RENEW, "hooks.granted during %s",
          CTX_NAMES[m.ctx]);
    MWaiter *w = ctx;
    CHECK(w >= m.waiters && w < m.waiters + m.nwaiters, "hooks.granted with a context never given");
    CHECK(w->state == W_GRANTING && m.granting == w,
          "hooks.granted for a waiter in state %d (before its changed, twice, or after a timeout/cancel)", w->state);
    MLock *M = model_lock_of(lock);
    CHECK(M == &m.locks[w->lock], "hooks.granted for '%s', the waiter waits on '%s'", lock->name, NAMES[w->lock]);
    CHECK(locktab_is_held(lock) && !memcmp(locktab_holder(lock)->lease, w->lease, LEASE_ID_BYTES),
          "hooks.granted but '%s' is not held by the waiter's lease", lock->name);
    if (fuzz_tracing())
        fprintf(stderr, "    granted: a waiter on %s (wait deadline %lld) during %s at %lld\n", lock->name,
                (long long)w->wait_deadline, CTX_NAMES[m.ctx], (long long)m.now.mono_ms);
    w->state = W_DONE;
    m.granting = NULL;
}

static void on_timed_out(void *ud, void *ctx, const Lock *lock)
{
    (void)ud;
    MWaiter *w = ctx;
    CHECK(w >= m.waiters && w < m.waiters + m.nwaiters, "hooks.timed_out with a context never given");
    if (fuzz_tracing())
        fprintf(stderr, "    timed out: a waiter on %s (wait deadline %lld) during %s at %lld\n", lock->name,
                (long long)w->wait_deadline, CTX_NAMES[m.ctx], (long long)m.now.mono_ms);
    CHECK(w->state == W_QUEUED, "hooks.timed_out for a waiter in state %d", w->state);
    MLock *M = model_lock_of(lock);
    CHECK(M == &m.locks[w->lock], "hooks.timed_out for '%s', the waiter waits on '%s'", lock->name,
          NAMES[w->lock]);
    /* grant_next also times a waiter out when it cannot grant for lack of
     * memory; nothing runs out of memory here, so every timeout is at or
     * after the waiter's deadline */
    CHECK(w->wait_deadline <= m.now.mono_ms, "a waiter on '%s' timed out at %lld before its deadline %lld (during %s)",
          lock->name, (long long)m.now.mono_ms, (long long)w->wait_deadline, CTX_NAMES[m.ctx]);
    int k = 0;
    while (k < M->nq && M->q[k] != w)
        k++;
    CHECK(k < M->nq, "harness: timed-out waiter not in the model's queue");
    check_end_reported(M, lock);
    if (M->just_ended) {
        /* the lock's lease has just ended (end_model_lease checked when and
         * how) and the table passes it on: it walks the queue from the head,
         * timing out the waiters whose wait has run out */
        CHECK(k == 0, "lock '%s': passing the lock on timed out waiter #%d of %d, not the head (FIFO)", lock->name,
              k + 1, M->nq);
    } else {
        /* otherwise only the tick, earliest deadline first */
        CHECK(m.ctx == C_TICK, "hooks.timed_out during %s (the lock was not passed on)", CTX_NAMES[m.ctx]);
        CHECK(w->wait_deadline == min_deadline(),
              "a waiter on '%s' timed out (deadline %lld) before an earlier deadline %lld", lock->name,
              (long long)w->wait_deadline, (long long)min_deadline());
    }
    memmove(M->q + k, M->q + k + 1, sizeof M->q[0] * (size_t)(M->nq - k - 1));
    M->nq--;
    CHECK(lock->waiters.len == (size_t)M->nq, "'%s' has %zu waiters after a timeout, model %d", lock->name,
          lock->waiters.len, M->nq);
    w->state = W_DONE;
}

static void on_forgotten(void *ud, const Lock *lock)
{
    (void)ud;
    CHECK(m.ctx == C_TICK, "hooks.forgotten during %s", CTX_NAMES[m.ctx]);
    MLock *M = model_lock_of(lock);
    CHECK(M->known && !M->held && M->nq == 0, "'%s' forgotten while held or waited for", lock->name);
    CHECK(!locktab_is_held(lock) && lock->waiters.len == 0, "'%s' forgotten while held or waited for (table)", lock->name);
    CHECK(M->idle_deadline <= m.now.mono_ms, "'%s' forgotten at %lld before its idle deadline %lld", lock->name,
          (long long)m.now.mono_ms, (long long)M->idle_deadline);
    CHECK(M->idle_deadline == min_deadline(), "'%s' forgotten (deadline %lld) before an earlier deadline %lld",
          lock->name, (long long)M->idle_deadline, (long long)min_deadline());
    CHECK(lock->last_token == M->last_token, "'%s' forgotten with last_token %llu, model %llu", lock->name,
          (unsigned long long)lock->last_token, (unsigned long long)M->last_token);
    M->known = false;
    M->reported_valid = false;
    m.forgotten++;
}

static void on_ended(void *ud, void *actor, const Lock *lock, const Holder *ended, int how, uint64_t seq)
{
    (void)actor;
    (void)ud;
    const uint8_t *lease = ended->lease;
    uint64_t token = ended->token;
    CHECK(!locktab_is_held(lock), "hooks.ended: the lease ended is still among the holders");
    CHECK(m.ctx == C_ACQUIRE || m.ctx == C_RENEW || m.ctx == C_RELEASE || m.ctx == C_TICK, "hooks.ended during %s",
          CTX_NAMES[m.ctx]);
    MLock *M = model_lock_of(lock);
    CHECK(M->held, "hooks.ended for '%s', which the model has free", lock->name);
    CHECK(!memcmp(lease, M->h.lease, LEASE_ID_BYTES) && token == M->h.token,
          "hooks.ended for '%s' names token %llu, the holder has %llu", lock->name, (unsigned long long)token,
          (unsigned long long)M->h.token);
    CHECK(seq == m.last_seq + 1, "hooks.ended seq %llu, expected %llu", (unsigned long long)seq,
          (unsigned long long)(m.last_seq + 1));
    end_model_lease(M, how);
    uint64_t last_token = M->reported.last_token;
    memset(&M->reported, 0, sizeof M->reported); /* the lease's record goes */
    M->reported.last_token = last_token;
}

/* ---- checks after every operation ---- */

static bool dur_equal(const Dur *a, const Dur *b) { return memcmp(a, b, sizeof *a) == 0; }

static NotHolderReason expected_why(int i, const uint8_t *lease)
{
    const MLock *M = &m.locks[i];
    if (!M->known)
        return REASON_UNKNOWN;
    const Hist *found = NULL;
    size_t cap = m.limits.lease_history ? m.limits.lease_history : 1;
    /* the newest `cap` entries by sequence number (also after a restart) */
    for (int k = 0; k < m.nhist; k++) {
        if (memcmp(m.hist[k].lease, lease, LEASE_ID_BYTES) != 0)
            continue;
        size_t newer = 0;
        for (int j = 0; j < m.nhist; j++)
            newer += m.hist[j].seq > m.hist[k].seq;
        if (newer < cap)
            found = &m.hist[k];
    }
    if (!found || found->lock != i || found->inc != M->inc)
        return REASON_UNKNOWN;
    if (found->how == LEASE_END_RELEASED)
        return REASON_RELEASED;
    return M->last_token > found->token ? REASON_SUPERSEDED : REASON_EXPIRED;
}

static void check_why(int i, const uint8_t *lease)
{
    static const char *const REASONS[] = {"unknown", "expired", "superseded", "released"};
    NotHolderReason got = locktab_why_not(m.lt, KIND_LOCK, NAMES[i], lease), want = expected_why(i, lease);
    CHECK(got == want, "locktab_why_not('%s') = %s, model %s", NAMES[i],
          (unsigned)got < 4 ? REASONS[got] : "(out of range)", REASONS[want]);
}

static void check_lock_state(int i)
{
    const MLock *M = &m.locks[i];
    const Lock *L = locktab_get(m.lt, KIND_LOCK, NAMES[i]);
    CHECK(!!L == M->known, "'%s' is %s in the table, %s in the model", NAMES[i], L ? "known" : "unknown",
          M->known ? "known" : "unknown");
    if (!L)
        return;
    CHECK(!strcmp(L->name, NAMES[i]), "lock name '%s' != '%s'", L->name, NAMES[i]);
    CHECK(locktab_is_held(L) == M->held, "'%s' held=%d, model %d", NAMES[i], locktab_is_held(L), M->held);
    CHECK(L->last_token == M->last_token, "'%s' last_token %llu, model %llu", NAMES[i],
          (unsigned long long)L->last_token, (unsigned long long)M->last_token);
    CHECK(L->waiters.len == (size_t)M->nq, "'%s' has %zu waiters, model %d", NAMES[i], L->waiters.len, M->nq);
    CHECK(!M->just_ended, "harness: '%s' ended but not reported", NAMES[i]);
    if (locktab_is_held(L)) {
        const Holder *h = locktab_holder(L);
        const MHolder *mh = &M->h;
        CHECK(!memcmp(h->lease, mh->lease, LEASE_ID_BYTES), "'%s' held by another lease than the model's", NAMES[i]);
        CHECK(h->token == mh->token, "'%s' token %llu, model %llu", NAMES[i], (unsigned long long)h->token,
              (unsigned long long)mh->token);
        CHECK(h->count == mh->count, "'%s' reentry count %u, model %u", NAMES[i], h->count, mh->count);
        CHECK(h->ttl_ms == mh->ttl_ms, "'%s' ttl %lld, model %lld", NAMES[i], (long long)h->ttl_ms,
              (long long)mh->ttl_ms);
        CHECK(h->deadline_ms == mh->deadline, "'%s' deadline %lld, model %lld", NAMES[i], (long long)h->deadline_ms,
              (long long)mh->deadline);
        CHECK(h->expires_at_ms == mh->expires_at, "'%s' expires_at_ms %lld, model %lld", NAMES[i],
              (long long)h->expires_at_ms, (long long)mh->expires_at);
        CHECK(h->acquired_at_ms == mh->acquired_at, "'%s' acquired_at_ms %lld, model %lld", NAMES[i],
              (long long)h->acquired_at_ms, (long long)mh->acquired_at);
        CHECK(h->owner && !strcmp(h->owner, mh->owner), "'%s' owner '%s', model '%s'", NAMES[i],
              h->owner ? h->owner : "(null)", mh->owner);
        CHECK(h->metadata && !strcmp(h->metadata, mh->metadata), "'%s' metadata '%s', model '%s'", NAMES[i],
              h->metadata ? h->metadata : "(null)", mh->metadata);
        const Holder *by = locktab_held_by(m.lt, KIND_LOCK, NAMES[i], mh->lease, &m.now);
        CHECK(by == (mh->deadline > m.now.mono_ms ? locktab_holder(L) : NULL),
              "locktab_held_by('%s') wrong at mono %lld, deadline %lld",
              NAMES[i], (long long)m.now.mono_ms, (long long)mh->deadline);
    }
    CHECK(M->reported_valid, "'%s' known but its state was never reported nor loaded", NAMES[i]);
    Dur now_dur = dur_of(L), reported = M->reported;
    CHECK(dur_equal(&now_dur, &reported),
          "'%s' changed without hooks.changed before the call returned (held %d/%d, token %llu/%llu, count %u/%u, "
          "deadline %lld/%lld)",
          NAMES[i], now_dur.held, reported.held, (unsigned long long)now_dur.token, (unsigned long long)reported.token,
          now_dur.count, reported.count, (long long)now_dur.deadline, (long long)reported.deadline);
}

typedef struct ListOut {
    const char *names[NNAMES + 1];
    int n;
} ListOut;

static void list_fn(void *ud, const Lock *lock)
{
    ListOut *o = ud;
    CHECK(o->n < NNAMES, "locktab_list gave more locks than exist");
    o->names[o->n++] = lock->name;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void check_list(const char *prefix, const char *after, size_t limit)
{
    const char *want[NNAMES];
    int nwant = 0;
    for (int i = 0; i < NNAMES; i++)
        if (m.locks[i].known && !strncmp(NAMES[i], prefix, strlen(prefix)) && (!after || strcmp(NAMES[i], after) > 0))
            want[nwant++] = NAMES[i];
    qsort(want, (size_t)nwant, sizeof want[0], cmp_str);
    ListOut out = {.n = 0};
    bool more = locktab_list(m.lt, KIND_LOCK, prefix, after, limit, list_fn, &out);
    int expect_n = (size_t)nwant < limit ? nwant : (int)limit;
    CHECK(out.n == expect_n, "locktab_list(prefix '%s', after '%s', limit %zu) gave %d locks, expected %d", prefix,
          after ? after : "(null)", limit, out.n, expect_n);
    for (int k = 0; k < out.n; k++)
        CHECK(!strcmp(out.names[k], want[k]), "locktab_list #%d is '%s', expected '%s'", k, out.names[k], want[k]);
    CHECK(more == ((size_t)nwant > limit), "locktab_list(prefix '%s', after '%s', limit %zu) said more=%d of %d", prefix,
          after ? after : "(null)", limit, more, nwant);
}

static void check_all(void)
{
    CHECK(m.granting == NULL, "a waiter was granted (changed) but hooks.granted never came");
    size_t known = 0, held = 0, waiters = 0;
    for (int i = 0; i < NNAMES; i++) {
        check_lock_state(i);
        known += m.locks[i].known;
        held += m.locks[i].known && m.locks[i].held;
        waiters += (size_t)m.locks[i].nq;
    }
    CHECK(locktab_locks(m.lt) == known, "locktab_locks %zu, model %zu", locktab_locks(m.lt), known);
    CHECK(locktab_held(m.lt) == held, "locktab_held %zu, model %zu", locktab_held(m.lt), held);
    CHECK(locktab_waiters(m.lt) == waiters, "locktab_waiters %zu, model %zu", locktab_waiters(m.lt), waiters);
    CHECK(locktab_last_token(m.lt) == m.last_token, "locktab_last_token %llu, model %llu",
          (unsigned long long)locktab_last_token(m.lt), (unsigned long long)m.last_token);
    CHECK(locktab_expiries(m.lt) == m.expiries, "locktab_expiries %llu, model %llu",
          (unsigned long long)locktab_expiries(m.lt), (unsigned long long)m.expiries);
    CHECK(locktab_forgotten(m.lt) == m.forgotten, "locktab_forgotten %llu, model %llu",
          (unsigned long long)locktab_forgotten(m.lt), (unsigned long long)m.forgotten);
    int64_t min = min_deadline();
    int64_t want = min == INT64_MAX ? -1 : min > m.now.mono_ms ? min - m.now.mono_ms : 0;
    int64_t got = locktab_next_timeout_ms(m.lt, &m.now);
    CHECK(got == want, "locktab_next_timeout_ms %lld, model %lld", (long long)got, (long long)want);
    locktab_check(m.lt);
}

/* ---- operations ---- */

static void fresh_lease(uint8_t out[LEASE_ID_BYTES]) { lease_of(++m.nleases, out); }

/* A lease for renew/release/reentry: mostly one that matters. */
static void pick_lease(FuzzIn *in, int i, uint8_t out[LEASE_ID_BYTES])
{
    uint8_t b = fuzz_u8(in);
    const MLock *M = &m.locks[i];
    if (b < 160 && M->known && M->held)
        memcpy(out, M->h.lease, LEASE_ID_BYTES);
    else if (b < 230 && m.nleases > 0)
        lease_of(1 + (uint32_t)(b * 7919u + fuzz_u8(in)) % m.nleases, out);
    else
        lease_of(1000000u + b, out); /* never issued */
}

static int64_t pick_ttl(FuzzIn *in)
{
    uint8_t b = fuzz_u8(in);
    if (b == 255)
        return 86400000; /* the API's TTL_MAX_MS */
    return 1 + b % 40;
}

/* Lock M's lease has passed its deadline (locktab_tick may not have run). */
static bool lease_due(const MLock *M) { return M->known && M->held && M->h.deadline <= m.now.mono_ms; }

static bool lease_stale(const MLock *M, const uint8_t *lease)
{
    return lease_due(M) && !memcmp(M->h.lease, lease, LEASE_ID_BYTES);
}

/* The waiter that M passes to when it becomes free now: the first in the
 * queue whose wait has not run out (the ones before it time out), or none;
 * *gone: how many waiters then leave the queue (timed out or granted). */
static const MWaiter *heir(const MLock *M, int *gone)
{
    for (int k = 0; k < M->nq; k++) {
        if (M->q[k]->wait_deadline > m.now.mono_ms) {
            *gone = k + 1;
            return M->q[k];
        }
    }
    *gone = M->nq;
    return NULL;
}

/* The lease that holds M once an operation on it has ended a due lease: the
 * holder's, the heir's (granted at that expiry), or none. */
static const uint8_t *live_holder(const MLock *M)
{
    if (!M->known || !M->held)
        return NULL;
    if (!lease_due(M))
        return M->h.lease;
    int gone;
    const MWaiter *w = heir(M, &gone);
    return w ? w->lease : NULL;
}

static void op_begin(enum Ctx ctx, int i)
{
    m.ctx = ctx;
    m.cur_lock = i;
    m.due_pending = lease_due(&m.locks[i]);
}

static void op_end(int i)
{
    if (m.locks[i].known && locktab_get(m.lt, KIND_LOCK, NAMES[i]))
        check_end_reported(&m.locks[i], locktab_get(m.lt, KIND_LOCK, NAMES[i]));
    CHECK(!m.due_pending, "%s of '%s' at mono %lld left its lease (deadline %lld) not ended", CTX_NAMES[m.ctx],
          NAMES[i], (long long)m.now.mono_ms, (long long)m.locks[i].h.deadline);
    settle_model(i);
    m.ctx = C_NONE;
}

static void op_acquire(FuzzIn *in, bool wait)
{
    int i = fuzz_u8(in) % NNAMES;
    MLock *M = &m.locks[i];
    uint8_t lease[LEASE_ID_BYTES];
    fresh_lease(lease);
    const char *owner = OWNERS[fuzz_u8(in) % NOWNERS];
    size_t meta_i = fuzz_u8(in) % NMETAS;
    const char *meta = METAS[meta_i], *request_id = REQUEST_IDS[meta_i];
    int64_t ttl = pick_ttl(in);
    int64_t wait_ms = wait ? 1 + fuzz_u8(in) % 60 : 0;
    if (wait && fuzz_u8(in) == 255)
        wait_ms = 3600000; /* WAIT_MAX_MS */
    size_t known = 0, waiters = 0;
    for (int k = 0; k < NNAMES; k++) {
        known += m.locks[k].known;
        waiters += (size_t)m.locks[k].nq;
    }
    /* a due lease ends first: the waiters before its heir time out, the heir
     * (if any) is granted; all of them leave the queue */
    bool due = lease_due(M);
    int gone = 0;
    const MWaiter *next = due ? heir(M, &gone) : NULL;
    bool held = live_holder(M) != NULL;
    /* who holds once a due lease has ended: the heir, granted just before */
    const char *held_owner = due ? (next ? next->owner : NULL) : M->h.owner;
    const char *held_request_id = due ? (next ? next->request_id : NULL) : M->h.request_id;
    size_t nq = (size_t)(M->nq - gone);
    waiters -= (size_t)gone;
    LockResult want;
    if (!M->known && known >= m.limits.max_locks)
        want = LOCK_TOO_MANY_LOCKS;
    else if (held && request_id && held_request_id && !strcmp(request_id, held_request_id) &&
             !strcmp(owner, held_owner))
        want = LOCK_REPLAYED;
    else if (!held)
        want = LOCK_OK;
    else if (wait_ms <= 0)
        want = LOCK_BUSY;
    else if (waiters >= m.limits.max_waiters || nq >= m.limits.max_waiters_per_lock)
        want = LOCK_TOO_MANY_WAITERS;
    else
        want = LOCK_QUEUED;
    if (want == LOCK_OK && !M->known) { /* the table creates it, free, then grants it */
        M->known = true;
        M->inc = ++m.inc_counter;
        M->last_token = 0;
        M->held = false;
        M->nq = 0;
        M->reported_valid = false;
    }
    MWaiter *mw = NULL;
    if (want == LOCK_QUEUED) {
        CHECK(m.nwaiters < MAX_OPS, "harness: too many waiters");
        mw = &m.waiters[m.nwaiters++];
        memset(mw, 0, sizeof *mw);
        mw->lock = i;
        memcpy(mw->lease, lease, LEASE_ID_BYTES);
        mw->owner = owner;
        mw->metadata = meta;
        mw->request_id = request_id;
        mw->ttl_ms = ttl;
        mw->wait_deadline = m.now.mono_ms + wait_ms;
    }
    if (fuzz_tracing())
        fprintf(stderr, "[%d] acquire %s owner=%s meta=%s ttl=%lld wait=%lld lease#%u due=%d (now %lld)\n", m.ops,
                NAMES[i], owner, meta ? meta : "NULL", (long long)ttl, (long long)wait_ms, m.nleases, due,
                (long long)m.now.mono_ms);
    AcquireArgs args = {owner, meta, ttl, wait_ms, NULL, lease, request_id, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    const Lock *lock_out;
    const Holder *hold_out;
    Waiter *wout;
    op_begin(C_ACQUIRE, i);
    m.cur_new_lease = lease;
    m.cur_owner = owner;
    m.cur_metadata = meta;
    m.cur_request_id = request_id;
    m.cur_ttl = ttl;
    LockResult r = locktab_acquire(m.lt, KIND_LOCK, NAMES[i], &args, mw, &m.now, &lock_out, &hold_out, &wout);
    op_end(i);
    m.cur_new_lease = NULL;
    CHECK(r == want, "acquire '%s' = %d, model %d (due=%d)", NAMES[i], (int)r, (int)want, due);
    if (r == LOCK_OK) {
        CHECK(lock_out == locktab_get(m.lt, KIND_LOCK, NAMES[i]) && locktab_is_held(lock_out) &&
                  !memcmp(locktab_holder(lock_out)->lease, lease, LEASE_ID_BYTES),
              "acquire '%s' OK but lock_out is not the lock held by the new lease", NAMES[i]);
        CHECK(M->held && !memcmp(M->h.lease, lease, LEASE_ID_BYTES), "acquire '%s' granted without hooks.changed",
              NAMES[i]);
    } else if (r == LOCK_REPLAYED) {
        CHECK(lock_out == locktab_get(m.lt, KIND_LOCK, NAMES[i]) && locktab_is_held(lock_out) &&
                  !memcmp(locktab_holder(lock_out)->lease, M->h.lease, LEASE_ID_BYTES) &&
                  locktab_holder(lock_out)->token == M->h.token && locktab_holder(lock_out)->count == M->h.count,
              "acquire '%s' replayed but lock_out is not the grant unchanged", NAMES[i]);
    } else if (r == LOCK_BUSY) {
        CHECK(lock_out == locktab_get(m.lt, KIND_LOCK, NAMES[i]), "acquire '%s' BUSY without the lock in lock_out", NAMES[i]);
    } else if (r == LOCK_QUEUED) {
        CHECK(wout != NULL, "acquire '%s' QUEUED without a waiter", NAMES[i]);
        mw->w = wout;
        mw->state = W_QUEUED;
        M->q[M->nq++] = mw;
    } else {
        CHECK(wout == NULL, "acquire '%s' failed but returned a waiter", NAMES[i]);
    }
    if (r != LOCK_QUEUED && mw)
        m.nwaiters--;
}

static void op_reenter(FuzzIn *in)
{
    int i = fuzz_u8(in) % NNAMES;
    MLock *M = &m.locks[i];
    uint8_t lease[LEASE_ID_BYTES], fresh[LEASE_ID_BYTES];
    pick_lease(in, i, lease);
    fresh_lease(fresh);
    const char *meta = METAS[fuzz_u8(in) % NMETAS];
    int64_t ttl = fuzz_u8(in) % 3 == 0 ? 0 : pick_ttl(in);
    int64_t wait_ms = fuzz_u8(in) % 2 ? 0 : 50;
    const uint8_t *live = live_holder(M);
    bool holds = live && !memcmp(live, lease, LEASE_ID_BYTES);
    bool stale = lease_stale(M, lease);
    if (fuzz_tracing())
        fprintf(stderr, "[%d] reenter %s holds=%d stale=%d due=%d meta=%s ttl=%lld (now %lld)\n", m.ops, NAMES[i],
                holds, stale, lease_due(M), meta ? meta : "NULL", (long long)ttl, (long long)m.now.mono_ms);
    AcquireArgs args = {"reentrant", meta, ttl, wait_ms, lease, fresh, NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    const Lock *lock_out;
    const Holder *hold_out;
    Waiter *wout;
    op_begin(C_ACQUIRE, i);
    m.cur_new_lease = NULL;
    LockResult r = locktab_acquire(m.lt, KIND_LOCK, NAMES[i], &args, NULL, &m.now, &lock_out, &hold_out, &wout);
    op_end(i);
    if (stale)
        CHECK(r == LOCK_NOT_HOLDER, "reentry of '%s' with a lease whose deadline %lld passed (now %lld) = %d",
              NAMES[i], (long long)M->h.deadline, (long long)m.now.mono_ms, (int)r);
    CHECK(r == (holds ? LOCK_OK : LOCK_NOT_HOLDER), "reentry '%s' = %d, holds=%d", NAMES[i], (int)r, holds);
    CHECK(wout == NULL, "reentry returned a waiter");
    if (r == LOCK_OK) {
        CHECK(lock_out == locktab_get(m.lt, KIND_LOCK, NAMES[i]), "reentry '%s': lock_out is not the lock", NAMES[i]);
        MHolder *h = &M->h;
        if (meta)
            h->metadata = meta;
        if (ttl > 0)
            h->ttl_ms = ttl;
        h->deadline = m.now.mono_ms + h->ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
        h->expires_at = m.now.wall_ms + h->ttl_ms;
        h->wall_floor = h->expires_at + 1;
        h->count++;
        h->request_id = NULL; /* this reentry had none */
    } else {
        check_why(i, lease);
    }
}

static void op_renew(FuzzIn *in)
{
    int i = fuzz_u8(in) % NNAMES;
    MLock *M = &m.locks[i];
    uint8_t lease[LEASE_ID_BYTES];
    pick_lease(in, i, lease);
    int64_t ttl = fuzz_u8(in) % 3 == 0 ? 0 : pick_ttl(in);
    const uint8_t *live = live_holder(M);
    bool holds = live && !memcmp(live, lease, LEASE_ID_BYTES);
    bool stale = lease_stale(M, lease);
    if (fuzz_tracing())
        fprintf(stderr, "[%d] renew %s holds=%d stale=%d due=%d ttl=%lld (now %lld)\n", m.ops, NAMES[i], holds, stale,
                lease_due(M), (long long)ttl, (long long)m.now.mono_ms);
    const Lock *lock_out;
    const Holder *hold_out;
    op_begin(C_RENEW, i);
    LockResult r = locktab_renew(m.lt, KIND_LOCK, NAMES[i], lease, ttl, &m.now, &lock_out, &hold_out);
    op_end(i);
    if (stale)
        CHECK(r == LOCK_NOT_HOLDER, "renew of '%s' with a lease whose deadline %lld passed (now %lld) = %d", NAMES[i],
              (long long)M->h.deadline, (long long)m.now.mono_ms, (int)r);
    CHECK(r == (holds ? LOCK_OK : LOCK_NOT_HOLDER), "renew '%s' = %d, holds=%d", NAMES[i], (int)r, holds);
    if (r == LOCK_OK) {
        CHECK(lock_out == locktab_get(m.lt, KIND_LOCK, NAMES[i]), "renew '%s': lock_out is not the lock", NAMES[i]);
        MHolder *h = &M->h;
        if (ttl > 0)
            h->ttl_ms = ttl;
        h->deadline = m.now.mono_ms + h->ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
        h->expires_at = m.now.wall_ms + h->ttl_ms;
        h->wall_floor = h->expires_at + 1;
    } else {
        CHECK(lock_out == NULL, "renew '%s' NOT_HOLDER with a lock in lock_out", NAMES[i]);
        check_why(i, lease);
    }
}

static void op_release(FuzzIn *in)
{
    int i = fuzz_u8(in) % NNAMES;
    MLock *M = &m.locks[i];
    uint8_t lease[LEASE_ID_BYTES];
    pick_lease(in, i, lease);
    const uint8_t *live = live_holder(M);
    bool holds = live && !memcmp(live, lease, LEASE_ID_BYTES);
    bool stale = lease_stale(M, lease);
    /* a waiter granted at the expiry holds it once */
    uint32_t count_before = !holds ? 0 : lease_due(M) ? 1 : M->h.count;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] release %s holds=%d stale=%d due=%d count=%u (now %lld)\n", m.ops, NAMES[i], holds,
                stale, lease_due(M), count_before, (long long)m.now.mono_ms);
    uint32_t left = 12345;
    op_begin(C_RELEASE, i);
    m.cur_lease = lease;
    LockResult r = locktab_release(m.lt, KIND_LOCK, NAMES[i], lease, NULL, &m.now, &left);
    op_end(i);
    m.cur_lease = NULL;
    if (stale)
        CHECK(r == LOCK_NOT_HOLDER, "release of '%s' with a lease whose deadline %lld passed (now %lld) = %d",
              NAMES[i], (long long)M->h.deadline, (long long)m.now.mono_ms, (int)r);
    CHECK(r == (holds ? LOCK_OK : LOCK_NOT_HOLDER), "release '%s' = %d, holds=%d", NAMES[i], (int)r, holds);
    if (r == LOCK_OK) {
        CHECK(left == count_before - 1, "release '%s': count_left %u, expected %u", NAMES[i], left, count_before - 1);
        if (left > 0) {
            CHECK(M->held && !memcmp(M->h.lease, lease, LEASE_ID_BYTES), "release '%s' with count left ended the lease",
                  NAMES[i]);
            M->h.count--;
        } else {
            CHECK(!M->held || memcmp(M->h.lease, lease, LEASE_ID_BYTES) != 0,
                  "release '%s' to count 0 did not end the lease (or not through hooks.changed)", NAMES[i]);
        }
    } else {
        CHECK(left == 0, "release '%s' NOT_HOLDER with count_left %u", NAMES[i], left);
        check_why(i, lease);
    }
}

static void op_cancel(FuzzIn *in)
{
    int total = 0;
    for (int i = 0; i < NNAMES; i++)
        total += m.locks[i].nq;
    if (total == 0)
        return;
    int k = fuzz_u8(in) % total;
    for (int i = 0; i < NNAMES; i++) {
        MLock *M = &m.locks[i];
        if (k >= M->nq) {
            k -= M->nq;
            continue;
        }
        MWaiter *w = M->q[k];
        if (fuzz_tracing())
            fprintf(stderr, "[%d] cancel waiter #%d of %s\n", m.ops, k + 1, NAMES[i]);
        m.ctx = C_CANCEL;
        locktab_cancel(m.lt, w->w, &m.now);
        m.ctx = C_NONE;
        memmove(M->q + k, M->q + k + 1, sizeof M->q[0] * (size_t)(M->nq - k - 1));
        M->nq--;
        w->state = W_DONE;
        return;
    }
}

static void advance(int64_t d)
{
    m.now.mono_ms += d;
    m.now.wall_ms += d;
}

static void tick(void)
{
    if (fuzz_tracing())
        fprintf(stderr, "[%d] tick at %lld\n", m.ops, (long long)m.now.mono_ms);
    m.ctx = C_TICK;
    locktab_tick(m.lt, &m.now);
    for (int i = 0; i < NNAMES; i++)
        settle_model(i);
    m.ctx = C_NONE;
    int64_t min = min_deadline();
    CHECK(min > m.now.mono_ms, "after locktab_tick at %lld a deadline %lld is still due", (long long)m.now.mono_ms,
          (long long)min);
}

static void op_time(FuzzIn *in)
{
    uint8_t b = fuzz_u8(in);
    switch (b % 5) {
    case 0: /* a small step */
        advance(b / 5 % 8);
        tick();
        break;
    case 1: /* a larger step */
        advance(1 + b / 5 % 64);
        tick();
        break;
    case 2: { /* to the next deadline, or 1 ms either side of it */
        int64_t next = locktab_next_timeout_ms(m.lt, &m.now);
        if (next >= 0) {
            int64_t d = next + (b / 5 % 3) - 1;
            advance(d > 0 ? d : 0);
        }
        tick();
        break;
    }
    case 3: /* time passes, the loop has not fired deadlines yet */
        advance(b / 5 % 8);
        if (fuzz_tracing())
            fprintf(stderr, "[%d] time passes to %lld (no tick)\n", m.ops, (long long)m.now.mono_ms);
        break;
    default: /* a long pause */
        advance(100 + b * 3);
        tick();
        break;
    }
}

static void op_restart(FuzzIn *in)
{
    uint8_t b = fuzz_u8(in);
    bool same_boot = b % 2 == 0;
    int64_t pause = fuzz_u8(in) % 50;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] restart (%s boot) after %lld ms\n", m.ops, same_boot ? "same" : "new", (long long)pause);
    locktab_free(m.lt);
    m.granting = NULL;
    for (int i = 0; i < NNAMES; i++) {
        for (int k = 0; k < m.locks[i].nq; k++)
            m.locks[i].q[k]->state = W_DONE;
        m.locks[i].nq = 0;
    }
    m.now.wall_ms += pause;
    if (!same_boot) /* a new boot; its wall clock may also have been set back */
        m.now.wall_ms -= fuzz_u8(in) % 64;
    m.now.mono_ms = same_boot ? m.now.mono_ms + pause : 1 + b / 2;
    LocktabHooks hooks = {NULL, on_changed, on_granted, on_timed_out, on_forgotten, on_ended, on_holder_changed, NULL, NULL};
    m.lt = locktab_new(&m.limits, &hooks);
    CHECK(m.lt != NULL, "locktab_new failed");
    m.expiries = m.forgotten = 0;
    /* the history that storage would hand back: the last lease_history ended leases */
    Hist old[MAX_HIST];
    int nold = 0;
    size_t cap = m.limits.lease_history ? m.limits.lease_history : 1;
    for (int k = m.nhist > (int)cap ? m.nhist - (int)cap : 0; k < m.nhist; k++)
        old[nold++] = m.hist[k];
    m.nhist = 0;
    /* as the server does at start-up: load every lock, replay the stored
     * history, raise the token counter, then tick (which ends the leases that
     * expired while the server was down); loading itself reports nothing */
    m.ctx = C_LOAD;
    locktab_continue_history(m.lt, m.last_seq);
    for (int i = 0; i < NNAMES; i++) {
        MLock *M = &m.locks[i];
        if (!M->known)
            continue;
        M->old_inc = M->inc;
        M->inc = ++m.inc_counter;
        Holder h;
        char owner[32], meta[64];
        memset(&h, 0, sizeof h);
        int64_t left = 0;
        if (M->held) {
            memcpy(h.lease, M->h.lease, LEASE_ID_BYTES);
            snprintf(owner, sizeof owner, "%s", M->h.owner);
            snprintf(meta, sizeof meta, "%s", M->h.metadata);
            h.owner = owner;
            h.metadata = meta;
            h.request_id = (char *)M->h.request_id; /* copied by locktab_load */
            h.token = M->h.token;
            h.ttl_ms = M->h.ttl_ms;
            h.acquired_at_ms = M->h.acquired_at;
            h.expires_at_ms = M->h.expires_at;
            h.deadline_ms = same_boot ? M->h.deadline : -1;
            h.count = M->h.count;
            if (same_boot) {
                left = M->h.deadline - m.now.mono_ms;
            } else { /* by the wall clock, with the slack a grant's deadline has too */
                left = M->h.expires_at - m.now.wall_ms + LOCKTAB_DEADLINE_SLACK_MS;
                if (left > M->h.ttl_ms + LOCKTAB_DEADLINE_SLACK_MS)
                    left = M->h.ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
            }
        }
        LockResult r = locktab_load(m.lt, KIND_LOCK, NAMES[i], M->last_token, 0, 0, &m.now);
        if (r == LOCK_OK && M->held)
            r = locktab_load_holder(m.lt, KIND_LOCK, NAMES[i], &h, &m.now);
        CHECK(r == LOCK_OK, "locktab_load('%s') = %d", NAMES[i], (int)r);
        if (M->held) { /* held, also when nothing is left (left <= 0: due now) */
            M->h.deadline = m.now.mono_ms + left;
            if (!same_boot)
                M->h.wall_floor = m.now.wall_ms + left;
        } else {
            M->idle_deadline = m.now.mono_ms + m.limits.forget_idle_ms;
        }
        M->reported = dur_of(locktab_get(m.lt, KIND_LOCK, NAMES[i]));
        M->reported_valid = true;
    }
    for (int k = 0; k < nold; k++) {
        const Hist *e = &old[k];
        const MLock *M = &m.locks[e->lock];
        if (!M->known || M->old_inc != e->inc)
            continue; /* storage keeps the history of a lock with the lock */
        locktab_load_ended(m.lt, KIND_LOCK, NAMES[e->lock], e->lease, e->token, e->how, e->seq);
        hist_add(e->lock, M->inc, e->lease, e->token, e->how, e->seq);
    }
    uint64_t raise = m.last_token + fuzz_u8(in) % 3; /* --min-token may raise it */
    locktab_raise_last_token(m.lt, raise);
    m.last_token = raise;
    m.ctx = C_NONE;
    tick();
}

static void op_query(FuzzIn *in)
{
    static const char *const PREFIXES[] = {"", "a", "b/", "o", "orders/42", "x", "y.", "z"};
    static const char *const AFTERS[] = {NULL, "", "a", "b/c", "c", "orders/42", "x", "y.z", "zz"};
    uint8_t b = fuzz_u8(in);
    if (fuzz_tracing())
        fprintf(stderr, "[%d] query: locktab_list, why_not and held_by\n", m.ops);
    m.ctx = C_QUERY;
    check_list(PREFIXES[b % 8], AFTERS[fuzz_u8(in) % 9], fuzz_u8(in) % 7);
    int i = b / 8 % NNAMES;
    uint8_t lease[LEASE_ID_BYTES];
    pick_lease(in, i, lease);
    const MLock *M = &m.locks[i];
    if (!(M->known && M->held && !memcmp(M->h.lease, lease, LEASE_ID_BYTES))) {
        check_why(i, lease);
        CHECK(locktab_held_by(m.lt, KIND_LOCK, NAMES[i], lease, &m.now) == NULL, "locktab_held_by('%s') for a lease that does not hold it",
              NAMES[i]);
    }
    m.ctx = C_NONE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzIn in = {data, size, 0};
    memset(&m, 0, sizeof m);
    uint8_t cfg = fuzz_u8(&in);
    m.limits.max_locks = 1 + cfg % 6;
    m.limits.max_waiters = 1 + fuzz_u8(&in) % 10;
    m.limits.max_waiters_per_lock = 1 + fuzz_u8(&in) % 5;
    m.limits.lease_history = 1 + fuzz_u8(&in) % 8;
    m.limits.forget_idle_ms = 1 + fuzz_u8(&in) % 80;
    m.now.mono_ms = 1000 + fuzz_u8(&in);
    m.now.wall_ms = 1700000000000LL + fuzz_u8(&in) * 1000LL;
    LocktabHooks hooks = {NULL, on_changed, on_granted, on_timed_out, on_forgotten, on_ended, on_holder_changed, NULL, NULL};
    m.lt = locktab_new(&m.limits, &hooks);
    CHECK(m.lt != NULL, "locktab_new failed");
    if (fuzz_tracing())
        fprintf(stderr, "limits: locks %zu waiters %zu per lock %zu history %zu forget %lld\n",
                m.limits.max_locks, m.limits.max_waiters, m.limits.max_waiters_per_lock, m.limits.lease_history,
                (long long)m.limits.forget_idle_ms);
    for (m.ops = 0; fuzz_more(&in) && m.ops < MAX_OPS; m.ops++) {
        uint8_t op = fuzz_u8(&in);
        switch (op % 16) {
        case 0: case 1: case 2:
            op_acquire(&in, false);
            break;
        case 3: case 4: case 5:
            op_acquire(&in, true);
            break;
        case 6:
            op_reenter(&in);
            break;
        case 7: case 8:
            op_renew(&in);
            break;
        case 9: case 10:
            op_release(&in);
            break;
        case 11:
            op_cancel(&in);
            break;
        case 12: case 13:
            op_time(&in);
            break;
        case 14:
            op_query(&in);
            break;
        default:
            if (op / 16 % 4 == 0)
                op_restart(&in);
            else
                op_time(&in);
            break;
        }
        check_all();
    }
    locktab_free(m.lt);
    return 0;
}
