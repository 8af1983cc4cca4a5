/*
 * fuzz_rwsem — the lock table's readers, writers, semaphores and
 * lock-delays (src/core/locktab.h), in fuzz_locktab's style: a
 * sequence of operations decoded from the input on three lock names and
 * two semaphore names (one of them spelled like a lock: the namespaces are
 * apart) with a fake clock, checked after every step against a small
 * reference model written independently of locktab.c:
 *
 *  - safety: a lock has one writer, or readers only; a semaphore's leases
 *    hold at most `limit` permits together (a lease holds 1..limit of them,
 *    issue 40); nobody is granted anything while a lock-delay runs;
 *  - FIFO without barging: a newcomer is granted at once only when nobody
 *    waits; only the head of a queue is ever granted, and whenever the head
 *    could be granted it is (between calls, no head waits for nothing): a
 *    writer's end grants the run of readers at the head, freed permits the
 *    waiters at the head whose permits fit, in order (a head asking for more
 *    than is free keeps a smaller request behind it waiting); a waiter
 *    leaving the head lets the ones behind it in;
 *  - tokens: every grant takes the next value of the one counter (so the
 *    grants of one call take consecutive values), per name in grant order;
 *    reentry keeps the token; a reentry in another mode is refused;
 *  - the limit of a semaphore is the first acquire's while it has holders
 *    or waiters (limit_mismatch);
 *  - lock-delay: an expiry (from its deadline) or a revocation (from now)
 *    of a lease with lock_delay_ms keeps the lock from every grant until
 *    then (with LOCKTAB_DEADLINE_SLACK_MS), extends a running one, and a
 *    release starts none; waiters keep their places;
 *  - expiry at the deadline, ended before anything else is done with the
 *    name; wait timeouts never before their deadline; granted/timed_out
 *    exactly once per waiter, never for a cancelled one; not_holder reasons;
 *  - durability: the records the hooks report (changed: a name's own
 *    record; holder_changed: a lease's, whatever its mode; ended: its
 *    removal) equal the table after every call, and a restart that loads
 *    them (oldest token first, as the stores do) gives back the same table;
 *  - locktab_check()'s invariants (assertions on: built without NDEBUG).
 *
 * Ties between deadlines that fall due in one tick are processed in any
 * order by the table; the model takes its own, and the state after the
 * tick is the same (the checks are on states and token order, not on the
 * order of the hooks within one tick).
 */
#include <stdbool.h>

#include "core/leasehist.h"
#include "core/locktab.h"
#include "fuzz.h"

#define NNAMES 5
#define NLOCKS 3 /* names 0..2 are locks, 3..4 semaphores */
static const char *const NAMES[NNAMES] = {"a", "b/c", "x", "a", "s"};
static LockKind kind_of(int i) { return i < NLOCKS ? KIND_LOCK : KIND_SEMAPHORE; }

#define MAX_OPS 400
#define MAXH 64 /* readers are many: an acquire is a writer once a name has 40 (holders and waiters) */
#define MAXQ 12
#define MAX_LEASES (MAX_OPS + 8)
#define WALL_OFFSET 1700000000000LL

/* A waiter's end, as the model has it and as the table reported it. */
enum { W_QUEUED, W_GRANTED, W_TIMED_OUT, W_GONE };

typedef struct MWaiter {
    int model, table;
    int name;
    Waiter *w;
    uint32_t lease; /* the model's lease number */
    uint8_t mode;
    int64_t ttl_ms, delay_ms, wait_deadline;
    const char *owner, *request_id;
    uint32_t permits; /* a semaphore's: what its grant will hold; 1 otherwise */
} MWaiter;

typedef struct MHolder {
    uint32_t lease;
    bool fresh; /* granted by the call running now: its token is checked at its end */
    uint64_t token;
    uint8_t mode;
    uint32_t count;
    uint32_t permits;
    int64_t ttl_ms, delay_ms, deadline;
    const char *owner, *request_id;
} MHolder;

typedef struct MName {
    bool known;
    uint64_t inc;          /* the incarnation: a forgotten name comes back as another */
    uint64_t last_token;
    uint32_t limit;
    uint8_t mode;
    MHolder h[MAXH];
    int nh;
    MWaiter *q[MAXQ];
    int nq;
    int64_t delay;         /* the lock-delay's deadline; 0: none runs */
    int64_t idle_deadline; /* 0: not idle */
} MName;

/* How each lease ended (0: it did not), for not_holder reasons. */
typedef struct MEnd {
    int how;
    int name;
    uint64_t inc, token;
} MEnd;

/* What the hooks reported: the durable records, as a store would keep them. */
typedef struct SHolder {
    bool used;
    Holder h;
    char owner[16], metadata[8], request_id[8];
    bool has_request_id;
} SHolder;

typedef struct Stored {
    bool known;
    uint64_t last_token;
    uint32_t limit;
    int64_t delay_until_ms;
    SHolder leases[MAXH + 4]; /* one record per lease, whatever its mode */
} Stored;

enum Ctx { C_NONE, C_ACQUIRE, C_RENEW, C_RELEASE, C_REVOKE, C_CANCEL, C_TICK, C_LOAD };

typedef struct Model {
    Locktab *lt;
    LocktabLimits limits;
    Now now;
    uint64_t counter, inc_counter, last_seq;
    MName names[NNAMES];
    Stored stored[NNAMES];
    MWaiter waiters[MAX_OPS];
    int nwaiters;
    MEnd ends[MAX_LEASES];
    uint32_t nleases;
    enum Ctx ctx;
    int ops;
} Model;

static Model m;

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)

static void lease_of(uint32_t n, uint8_t out[LEASE_ID_BYTES])
{
    memset(out, 0, LEASE_ID_BYTES);
    uint64_t a = (uint64_t)n * 0x9E3779B97F4A7C15ULL + 0x5151ULL;
    memcpy(out, &a, 8);
    memcpy(out + 8, &n, sizeof n);
}

static uint32_t lease_number(const uint8_t *lease)
{
    uint32_t n;
    memcpy(&n, lease + 8, sizeof n);
    uint8_t check[LEASE_ID_BYTES];
    lease_of(n, check);
    CHECK(!memcmp(check, lease, LEASE_ID_BYTES), "a lease the model never made");
    return n;
}

static int name_of(const Lock *lock)
{
    for (int i = 0; i < NNAMES; i++)
        if (kind_of(i) == lock->kind && !strcmp(NAMES[i], lock->name))
            return i;
    CHECK(0, "a lock the model does not know: '%s'", lock->name);
    return -1;
}

static bool delay_runs(const MName *M) { return M->delay != 0; }

/* The permits name i's holders hold together. */
static uint32_t permits_held(const MName *M)
{
    uint32_t n = 0;
    for (int k = 0; k < M->nh; k++)
        n += M->h[k].permits;
    return n;
}

/* Could a grant in `mode` (of `permits`) be made on name i now, its waiters aside? */
static bool grantable(int i, uint8_t mode, uint32_t permits)
{
    const MName *M = &m.names[i];
    if (delay_runs(M))
        return false;
    if (kind_of(i) == KIND_SEMAPHORE)
        return permits_held(M) + permits <= M->limit;
    return M->nh == 0 || (mode == MODE_READ && M->mode == MODE_READ);
}

static bool idle(const MName *M) { return M->nh == 0 && M->nq == 0 && !delay_runs(M); }

static void update_idle(MName *M)
{
    if (idle(M) && !M->idle_deadline)
        M->idle_deadline = m.now.mono_ms + m.limits.forget_idle_ms;
    if (!idle(M))
        M->idle_deadline = 0;
}

/* ---- the model's transitions ---- */

static void model_grant(int i, uint32_t lease, uint8_t mode, uint32_t permits, int64_t ttl, int64_t delay_ms,
                        const char *owner, const char *request_id)
{
    MName *M = &m.names[i];
    CHECK(M->nh < MAXH, "harness: too many holders");
    MHolder *h = &M->h[M->nh++];
    h->lease = lease;
    h->fresh = true;
    h->token = ++m.counter;
    h->mode = kind_of(i) == KIND_SEMAPHORE ? MODE_WRITE : mode;
    h->count = 1;
    h->permits = kind_of(i) == KIND_SEMAPHORE ? permits : 1;
    h->ttl_ms = ttl;
    h->delay_ms = kind_of(i) == KIND_LOCK ? delay_ms : 0;
    h->deadline = m.now.mono_ms + ttl + LOCKTAB_DEADLINE_SLACK_MS;
    h->owner = owner;
    h->request_id = request_id;
    M->mode = h->mode;
    M->last_token = h->token;
    M->idle_deadline = 0;
}

static void model_end(int i, int k, int how)
{
    MName *M = &m.names[i];
    MHolder h = M->h[k];
    memmove(&M->h[k], &M->h[k + 1], (size_t)(M->nh - k - 1) * sizeof *M->h);
    M->nh--;
    m.ends[h.lease] = (MEnd){how, i, M->inc, h.token};
    m.last_seq++;
    if (how != LEASE_END_RELEASED && h.delay_ms > 0) {
        int64_t start = how == LEASE_END_EXPIRED ? h.deadline : m.now.mono_ms;
        int64_t left = start + h.delay_ms - m.now.mono_ms;
        int64_t deadline = m.now.mono_ms + left + LOCKTAB_DEADLINE_SLACK_MS;
        if (left > 0 && (!delay_runs(M) || M->delay < deadline)) {
            M->delay = deadline;
            M->idle_deadline = 0;
        }
    }
}

static void model_grant_next(int i)
{
    MName *M = &m.names[i];
    while (M->nq > 0 && grantable(i, M->q[0]->mode, M->q[0]->permits)) {
        MWaiter *w = M->q[0];
        memmove(&M->q[0], &M->q[1], (size_t)(M->nq - 1) * sizeof *M->q);
        M->nq--;
        if (w->wait_deadline <= m.now.mono_ms) {
            w->model = W_TIMED_OUT; /* instead of a grant after its wait */
            continue;
        }
        w->model = W_GRANTED;
        model_grant(i, w->lease, w->mode, w->permits, w->ttl_ms, w->delay_ms, w->owner, w->request_id);
    }
    update_idle(M);
}

/* Due leases end (grant order), then a due delay, before anything else. */
static void model_settle(int i)
{
    MName *M = &m.names[i];
    bool ended = false;
    for (int k = 0; k < M->nh;) {
        if (M->h[k].deadline <= m.now.mono_ms) {
            model_end(i, k, LEASE_END_EXPIRED);
            ended = true;
        } else {
            k++;
        }
    }
    if (delay_runs(M) && M->delay <= m.now.mono_ms) {
        M->delay = 0;
        ended = true;
    }
    if (ended)
        model_grant_next(i);
}

static void model_remove_waiter(int i, MWaiter *w, int how)
{
    MName *M = &m.names[i];
    int k = 0;
    while (k < M->nq && M->q[k] != w)
        k++;
    CHECK(k < M->nq, "harness: a waiter not in its queue");
    memmove(&M->q[k], &M->q[k + 1], (size_t)(M->nq - k - 1) * sizeof *M->q);
    M->nq--;
    w->model = how;
    if (k == 0 && M->nq > 0 && grantable(i, M->q[0]->mode, M->q[0]->permits))
        model_grant_next(i);
}

/* ---- the hooks: what the table reports ---- */

static void store_holder(SHolder *s, const Holder *h)
{
    s->used = true;
    s->h = *h;
    snprintf(s->owner, sizeof s->owner, "%s", h->owner);
    snprintf(s->metadata, sizeof s->metadata, "%s", h->metadata);
    s->has_request_id = h->request_id != NULL;
    snprintf(s->request_id, sizeof s->request_id, "%s", h->request_id ? h->request_id : "");
    s->h.owner = s->owner;
    s->h.metadata = s->metadata;
    s->h.request_id = s->has_request_id ? s->request_id : NULL;
    s->h.key = NULL;
}

static SHolder *lease_slot(Stored *st, uint64_t token, bool make)
{
    for (int k = 0; k < MAXH + 4; k++)
        if (st->leases[k].used && st->leases[k].h.token == token)
            return &st->leases[k];
    if (!make)
        return NULL;
    for (int k = 0; k < MAXH + 4; k++)
        if (!st->leases[k].used)
            return &st->leases[k];
    CHECK(0, "harness: too many stored holders");
    return NULL;
}

static void on_changed(void *ud, const Lock *lock)
{
    (void)ud;
    CHECK(m.ctx != C_LOAD && m.ctx != C_NONE, "hooks.changed outside a call (%d)", (int)m.ctx);
    Stored *st = &m.stored[name_of(lock)];
    st->known = true;
    st->last_token = lock->last_token;
    st->limit = lock->limit;
    st->delay_until_ms = lock->delay_until_ms;
}

static void on_holder_changed(void *ud, const Lock *lock, const Holder *h)
{
    (void)ud;
    CHECK(m.ctx != C_LOAD && m.ctx != C_NONE, "hooks.holder_changed outside a call (%d)", (int)m.ctx);
    store_holder(lease_slot(&m.stored[name_of(lock)], h->token, true), h);
}

static void on_ended(void *ud, void *actor, const Lock *lock, const Holder *h, int how, uint64_t seq)
{
    (void)actor;
    (void)ud;
    CHECK(seq > 0, "hooks.ended seq 0");
    for (const Holder *x = locktab_holder(lock); x; x = locktab_next_holder(x))
        CHECK(x != h && x->token != h->token, "hooks.ended: the lease ended is still a holder of '%s'", lock->name);
    CHECK(how >= LEASE_END_EXPIRED && how <= LEASE_END_REVOKED, "hooks.ended how %d", how);
    SHolder *s = lease_slot(&m.stored[name_of(lock)], h->token, false);
    CHECK(s != NULL, "hooks.ended for a lease of '%s' never reported", lock->name);
    s->used = false;
}

static void on_granted(void *ud, void *ctx, const Lock *lock, const Holder *h)
{
    (void)ud;
    MWaiter *w = ctx;
    CHECK(w >= m.waiters && w < m.waiters + m.nwaiters, "hooks.granted with a context never given");
    CHECK(w->table == W_QUEUED, "hooks.granted for a waiter already ended (%d)", w->table);
    CHECK(w->name == name_of(lock), "hooks.granted on another name");
    CHECK(lease_number(h->lease) == w->lease, "hooks.granted: a lease other than the waiter's");
    CHECK(w->wait_deadline > m.now.mono_ms, "granted at %lld at or after its wait deadline %lld",
          (long long)m.now.mono_ms, (long long)w->wait_deadline);
    bool found = false;
    for (const Holder *x = locktab_holder(lock); x; x = locktab_next_holder(x))
        found |= x == h;
    CHECK(found, "hooks.granted: the grant is not a holder");
    w->table = W_GRANTED;
}

static void on_timed_out(void *ud, void *ctx, const Lock *lock)
{
    (void)ud;
    MWaiter *w = ctx;
    CHECK(w >= m.waiters && w < m.waiters + m.nwaiters, "hooks.timed_out with a context never given");
    CHECK(w->table == W_QUEUED, "hooks.timed_out for a waiter already ended (%d)", w->table);
    CHECK(w->name == name_of(lock), "hooks.timed_out on another name");
    CHECK(w->wait_deadline <= m.now.mono_ms, "timed out at %lld before its deadline %lld", (long long)m.now.mono_ms,
          (long long)w->wait_deadline);
    w->table = W_TIMED_OUT;
}

static void on_forgotten(void *ud, const Lock *lock)
{
    (void)ud;
    CHECK(m.ctx == C_TICK, "hooks.forgotten outside the tick");
    CHECK(!locktab_is_held(lock) && lock->waiters.len == 0, "'%s' forgotten while busy", lock->name);
    Stored *st = &m.stored[name_of(lock)];
    memset(st, 0, sizeof *st);
}

/* ---- checks ---- */

static bool holder_eq(const Holder *a, const Holder *b)
{
    return !memcmp(a->lease, b->lease, LEASE_ID_BYTES) && a->token == b->token && a->count == b->count &&
           a->ttl_ms == b->ttl_ms && a->expires_at_ms == b->expires_at_ms && a->deadline_ms == b->deadline_ms &&
           a->acquired_at_ms == b->acquired_at_ms && a->mode == b->mode && a->lock_delay_ms == b->lock_delay_ms &&
           a->permits == b->permits &&
           !strcmp(a->owner, b->owner) && !strcmp(a->metadata, b->metadata) &&
           !a->request_id == !b->request_id && (!a->request_id || !strcmp(a->request_id, b->request_id));
}

static void check_name(int i)
{
    const MName *M = &m.names[i];
    const Lock *L = locktab_get(m.lt, kind_of(i), NAMES[i]);
    const Stored *st = &m.stored[i];
    CHECK(!!L == M->known, "'%s' (kind %d) known %d, model %d", NAMES[i], kind_of(i), !!L, M->known);
    CHECK(st->known == M->known, "'%s' (kind %d): stored record known %d, model %d", NAMES[i], kind_of(i), st->known,
          M->known);
    if (!L)
        return;
    CHECK(L->last_token == M->last_token, "'%s' last_token %llu, model %llu", NAMES[i],
          (unsigned long long)L->last_token, (unsigned long long)M->last_token);
    CHECK(kind_of(i) == KIND_LOCK || L->limit == M->limit, "'%s' limit %u, model %u", NAMES[i], L->limit, M->limit);
    CHECK((int)L->holders.len == M->nh, "'%s' has %zu holders, model %d", NAMES[i], L->holders.len, M->nh);
    CHECK((int)L->waiters.len == M->nq, "'%s' has %zu waiters, model %d", NAMES[i], L->waiters.len, M->nq);
    CHECK(locktab_delayed(L, &m.now) == (M->delay > m.now.mono_ms), "'%s' delayed %d, model delay %lld (now %lld)",
          NAMES[i], locktab_delayed(L, &m.now), (long long)M->delay, (long long)m.now.mono_ms);
    if (M->delay)
        CHECK(L->delay_until_ms == M->delay - LOCKTAB_DEADLINE_SLACK_MS + WALL_OFFSET,
              "'%s' delay_until_ms %lld, model %lld", NAMES[i], (long long)L->delay_until_ms,
              (long long)(M->delay - LOCKTAB_DEADLINE_SLACK_MS + WALL_OFFSET));
    else
        CHECK(L->delay_until_ms == 0, "'%s' delay_until_ms %lld without a delay", NAMES[i], (long long)L->delay_until_ms);
    /* safety */
    if (kind_of(i) == KIND_SEMAPHORE) {
        uint32_t held = 0;
        for (const Holder *h = locktab_holder(L); h; h = locktab_next_holder(h))
            held += h->permits;
        CHECK(held <= L->limit && held == L->permits_used, "semaphore '%s' holds %u permits (permits_used %u) of %u",
              NAMES[i], held, L->permits_used, L->limit);
    } else
        CHECK(L->holders.len <= 1 || L->mode == MODE_READ, "lock '%s' has %zu holders in write mode", NAMES[i],
              L->holders.len);
    /* the holders, in grant order, as the model has them */
    int k = 0;
    uint64_t prev = 0;
    for (const Holder *h = locktab_holder(L); h; h = locktab_next_holder(h), k++) {
        const MHolder *mh = &M->h[k];
        CHECK(lease_number(h->lease) == mh->lease, "'%s' holder #%d is lease %u, model %u", NAMES[i], k,
              lease_number(h->lease), mh->lease);
        CHECK(h->token == mh->token, "'%s' holder #%d token %llu, model %llu", NAMES[i], k,
              (unsigned long long)h->token, (unsigned long long)mh->token);
        CHECK(h->token > prev, "'%s' holders not in token order", NAMES[i]);
        prev = h->token;
        CHECK(h->mode == mh->mode && h->mode == L->mode, "'%s' holder #%d mode %d, model %d (lock %d)", NAMES[i], k,
              h->mode, mh->mode, L->mode);
        CHECK(h->count == mh->count, "'%s' holder #%d count %u, model %u", NAMES[i], k, h->count, mh->count);
        CHECK(h->permits == mh->permits, "'%s' holder #%d permits %u, model %u", NAMES[i], k, h->permits,
              mh->permits);
        CHECK(h->deadline_ms == mh->deadline, "'%s' holder #%d deadline %lld, model %lld", NAMES[i], k,
              (long long)h->deadline_ms, (long long)mh->deadline);
        CHECK(h->expires_at_ms == mh->deadline - LOCKTAB_DEADLINE_SLACK_MS + WALL_OFFSET,
              "'%s' holder #%d expires_at_ms %lld, deadline %lld", NAMES[i], k, (long long)h->expires_at_ms,
              (long long)mh->deadline);
        CHECK(h->lock_delay_ms == mh->delay_ms, "'%s' holder #%d lock_delay_ms %lld, model %lld", NAMES[i], k,
              (long long)h->lock_delay_ms, (long long)mh->delay_ms);
        const Holder *by = locktab_held_by(m.lt, kind_of(i), NAMES[i], h->lease, &m.now);
        CHECK(by == (mh->deadline > m.now.mono_ms ? h : NULL), "locktab_held_by('%s') wrong", NAMES[i]);
        CHECK(locktab_held_by(m.lt, kind_of(i) == KIND_LOCK ? KIND_SEMAPHORE : KIND_LOCK, NAMES[i], h->lease,
                              &m.now) == NULL,
              "a lease of '%s' holds the other namespace's name", NAMES[i]);
        /* durable: the stored records are the table's */
        const SHolder *s = lease_slot((Stored *)st, h->token, false);
        CHECK(s && holder_eq(&s->h, h), "'%s' holder #%d (token %llu) not as reported for storage", NAMES[i], k,
              (unsigned long long)h->token);
    }
    int stored = 0;
    for (int x = 0; x < MAXH + 4; x++)
        stored += st->leases[x].used;
    CHECK(stored == (int)L->holders.len, "'%s': storage has %d leases, the table %zu holders", NAMES[i], stored,
          L->holders.len);
    /* (a delay whose end passed while the server was down is not loaded) */
    CHECK(st->last_token == L->last_token &&
              (st->delay_until_ms == L->delay_until_ms || (!L->delay_until_ms && st->delay_until_ms <= m.now.wall_ms)) &&
              (L->kind == KIND_LOCK || st->limit == L->limit),
          "'%s': its record is not as reported for storage", NAMES[i]);
    /* FIFO: the waiters, and nobody at the head who could be granted */
    k = 0;
    for (const DLink *l = L->waiters.head; l; l = l->next, k++)
        (void)l;
    CHECK(k == M->nq, "harness: queue walk");
    CHECK(M->nq == 0 || !grantable(i, M->q[0]->mode, M->q[0]->permits),
          "'%s': the head waiter could be granted and waits", NAMES[i]);
}

static void check_all(void)
{
    size_t held = 0, waiters = 0, known = 0;
    for (int i = 0; i < NNAMES; i++) {
        check_name(i);
        held += m.names[i].known ? (size_t)m.names[i].nh : 0;
        waiters += m.names[i].known ? (size_t)m.names[i].nq : 0;
        known += m.names[i].known;
    }
    CHECK(locktab_held(m.lt) == held, "locktab_held %zu, model %zu", locktab_held(m.lt), held);
    CHECK(locktab_waiters(m.lt) == waiters, "locktab_waiters %zu, model %zu", locktab_waiters(m.lt), waiters);
    CHECK(locktab_locks(m.lt) == known, "locktab_locks %zu, model %zu", locktab_locks(m.lt), known);
    CHECK(locktab_last_token(m.lt) == m.counter, "last token %llu, model %llu",
          (unsigned long long)locktab_last_token(m.lt), (unsigned long long)m.counter);
    for (int k = 0; k < m.nwaiters; k++) {
        const MWaiter *w = &m.waiters[k];
        CHECK(w->model == w->table, "waiter #%d on '%s': the model has it %d, the table %d", k, NAMES[w->name],
              w->model, w->table);
    }
    locktab_check(m.lt);
}

static NotHolderReason expected_why(int i, uint32_t lease)
{
    const MEnd *e = lease < MAX_LEASES ? &m.ends[lease] : NULL;
    const MName *M = &m.names[i];
    if (!M->known || !e || !e->how || e->name != i || e->inc != M->inc)
        return REASON_UNKNOWN;
    if (e->how == LEASE_END_RELEASED)
        return REASON_RELEASED;
    if (e->how == LEASE_END_REVOKED)
        return REASON_REVOKED;
    return M->last_token > e->token ? REASON_SUPERSEDED : REASON_EXPIRED;
}

/* ---- operations ---- */

static void op_begin(enum Ctx ctx) { m.ctx = ctx; }

/* The call is over. The grants it made took the next values of the counter
 * (the model's own: the same set), per name in grant order; the table may
 * take the names whose deadlines tie in one tick in another order than the
 * model, so the model adopts the table's tokens once the set is checked. */
static void op_end(void)
{
    m.ctx = C_NONE;
    uint64_t want = 0, got = 0;
    int n = 0;
    for (int i = 0; i < NNAMES; i++) {
        MName *M = &m.names[i];
        const Lock *L = M->known ? locktab_get(m.lt, kind_of(i), NAMES[i]) : NULL;
        if (!L || (int)L->holders.len != M->nh)
            continue; /* check_name says what is wrong */
        int k = 0;
        uint64_t prev = 0;
        for (const Holder *h = locktab_holder(L); h; h = locktab_next_holder(h), k++) {
            MHolder *mh = &M->h[k];
            if (!mh->fresh)
                continue;
            CHECK(h->token > prev && h->token + 64 > m.counter && h->token <= m.counter,
                  "'%s': a grant's token %llu is not one of the call's (counter %llu)", NAMES[i],
                  (unsigned long long)h->token, (unsigned long long)m.counter);
            prev = h->token;
            want ^= mh->token;
            got ^= h->token;
            n++;
            mh->token = h->token;
            mh->fresh = false;
            M->last_token = L->last_token;
        }
    }
    CHECK(want == got, "the %d grants of a call took other tokens than the next %d", n, n);
}

static size_t model_waiters(void)
{
    size_t n = 0;
    for (int i = 0; i < NNAMES; i++)
        n += m.names[i].known ? (size_t)m.names[i].nq : 0;
    return n;
}

static size_t model_names(void)
{
    size_t n = 0;
    for (int i = 0; i < NNAMES; i++)
        n += m.names[i].known;
    return n;
}

static uint32_t pick_lease(FuzzIn *in, int i)
{
    const MName *M = &m.names[i];
    uint8_t b = fuzz_u8(in);
    if (b < 200 && M->nh > 0)
        return M->h[b % M->nh].lease;
    if (b < 240 && m.nleases > 0)
        return (uint32_t)(b % m.nleases);
    return m.nleases + 1000; /* never issued */
}

static const int64_t TTLS[] = {3, 10, 25, 60};
static const int64_t WAITS[] = {0, 0, 4, 20, 90};
static const int64_t DELAYS[] = {0, 0, 6, 30};
static const char *const OWNERS[] = {"o0", "o1"};
static const char *const REQUEST_IDS[] = {NULL, NULL, "r1", "r2"};

static void run_call(LockResult got, LockResult want, const char *what, int i)
{
    CHECK(got == want, "%s '%s' (kind %d) = %d, model %d", what, NAMES[i], kind_of(i), (int)got, (int)want);
}

static void op_acquire(FuzzIn *in)
{
    int i = fuzz_u8(in) % NNAMES;
    MName *M = &m.names[i];
    uint8_t mode = kind_of(i) == KIND_LOCK && fuzz_u8(in) % 2 && M->nh + M->nq < 40 ? MODE_READ : MODE_WRITE;
    uint32_t limit = 1 + fuzz_u8(in) % 3;
    /* A semaphore's lease of 1..limit permits (the API refuses more than the limit). */
    uint32_t permits = kind_of(i) == KIND_SEMAPHORE ? 1 + fuzz_u8(in) % limit : 1;
    int64_t ttl = TTLS[fuzz_u8(in) % 4], wait_ms = WAITS[fuzz_u8(in) % 5];
    int64_t delay = kind_of(i) == KIND_LOCK ? DELAYS[fuzz_u8(in) % 4] : 0;
    const char *owner = OWNERS[fuzz_u8(in) % 2];
    const char *request_id = REQUEST_IDS[fuzz_u8(in) % 4];
    uint32_t lease = m.nleases++;
    uint8_t id[LEASE_ID_BYTES];
    lease_of(lease, id);
    if (fuzz_tracing())
        fprintf(stderr, "[%d] acquire %s/%s mode=%d limit=%u permits=%u ttl=%lld wait=%lld delay=%lld owner=%s "
                        "rid=%s lease#%u (now %lld)\n",
                m.ops, kind_of(i) == KIND_LOCK ? "lock" : "sem", NAMES[i], mode, limit, permits, (long long)ttl,
                (long long)wait_ms, (long long)delay, owner, request_id ? request_id : "-", lease,
                (long long)m.now.mono_ms);
    /* the model */
    LockResult want;
    int replay = -1;
    bool created = false;
    if (!M->known) {
        if (model_names() >= m.limits.max_locks) {
            want = LOCK_TOO_MANY_LOCKS;
            goto call;
        }
        memset(M, 0, sizeof *M);
        M->known = true;
        M->inc = ++m.inc_counter;
        M->idle_deadline = m.now.mono_ms + m.limits.forget_idle_ms;
        created = true;
    }
    (void)created;
    model_settle(i);
    /* the oldest grant of that request_id and owner (two waiters that used
     * one may both have been granted) */
    for (int k = 0; k < M->nh && request_id && replay < 0; k++)
        if (M->h[k].request_id && !strcmp(M->h[k].request_id, request_id) && !strcmp(M->h[k].owner, owner))
            replay = k;
    if (replay >= 0) {
        want = LOCK_REPLAYED;
    } else if (kind_of(i) == KIND_SEMAPHORE && limit != M->limit && (M->nh || M->nq)) {
        want = LOCK_LIMIT_MISMATCH;
    } else {
        if (kind_of(i) == KIND_SEMAPHORE)
            M->limit = limit;
        if (M->nq == 0 && grantable(i, mode, permits)) {
            model_grant(i, lease, mode, permits, ttl, delay, owner, request_id);
            want = LOCK_OK;
        } else if (wait_ms == 0) {
            want = LOCK_BUSY;
        } else if (model_waiters() >= m.limits.max_waiters || M->nq >= (int)m.limits.max_waiters_per_lock) {
            want = LOCK_TOO_MANY_WAITERS;
        } else {
            want = LOCK_QUEUED;
        }
    }
call:;
    MWaiter *mw = NULL;
    if (want == LOCK_QUEUED) {
        CHECK(m.nwaiters < MAX_OPS && M->nq < MAXQ, "harness: too many waiters");
        mw = &m.waiters[m.nwaiters++];
        *mw = (MWaiter){W_QUEUED, W_QUEUED, i, NULL, lease, mode, ttl, delay, m.now.mono_ms + wait_ms, owner,
                        request_id, permits};
    }
    AcquireArgs args = {owner, NULL, ttl, wait_ms, NULL, id, request_id, NULL, {NULL, NULL}, mode, true, delay, limit,
                        permits, NULL};
    const Lock *lock;
    const Holder *h;
    Waiter *w;
    op_begin(C_ACQUIRE);
    LockResult got = locktab_acquire(m.lt, kind_of(i), NAMES[i], &args, mw, &m.now, &lock, &h, &w);
    op_end();
    run_call(got, want, "acquire", i);
    if (got == LOCK_OK)
        CHECK(h && lease_number(h->lease) == lease && h->token == M->h[M->nh - 1].token, "acquire: not the new grant");
    if (got == LOCK_REPLAYED)
        CHECK(h && h->token == M->h[replay].token, "replay: not the grant repeated");
    if (got == LOCK_QUEUED) {
        CHECK(w != NULL, "QUEUED without a waiter");
        mw->w = w;
        M->q[M->nq++] = mw;
    }
}

static void op_reenter(FuzzIn *in)
{
    int i = fuzz_u8(in) % NLOCKS;
    MName *M = &m.names[i];
    uint32_t lease = pick_lease(in, i);
    bool mode_given = fuzz_u8(in) % 2;
    uint8_t mode = fuzz_u8(in) % 2 ? MODE_READ : MODE_WRITE;
    int64_t ttl = fuzz_u8(in) % 2 ? 0 : TTLS[fuzz_u8(in) % 4];
    uint8_t id[LEASE_ID_BYTES];
    lease_of(lease, id);
    if (fuzz_tracing())
        fprintf(stderr, "[%d] reenter %s lease#%u mode=%d given=%d (now %lld)\n", m.ops, NAMES[i], lease, mode,
                mode_given, (long long)m.now.mono_ms);
    LockResult want = LOCK_NOT_HOLDER;
    int k = -1;
    if (M->known) {
        model_settle(i);
        for (int j = 0; j < M->nh; j++)
            if (M->h[j].lease == lease)
                k = j;
        if (k >= 0 && mode_given && mode != M->h[k].mode) {
            want = LOCK_MODE_CONFLICT;
        } else if (k >= 0) {
            want = LOCK_OK;
            MHolder *h = &M->h[k];
            h->count++;
            if (ttl)
                h->ttl_ms = ttl;
            h->deadline = m.now.mono_ms + h->ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
            h->request_id = NULL;
        }
    }
    AcquireArgs args = {"o0", NULL, ttl, 0, id, NULL, NULL, NULL, {NULL, NULL}, mode, mode_given, 0, 0, 0, NULL};
    const Lock *lock;
    const Holder *h;
    Waiter *w;
    op_begin(C_ACQUIRE);
    LockResult got = locktab_acquire(m.lt, KIND_LOCK, NAMES[i], &args, NULL, &m.now, &lock, &h, &w);
    op_end();
    run_call(got, want, "reentry", i);
    if (got == LOCK_NOT_HOLDER)
        CHECK(locktab_why_not(m.lt, KIND_LOCK, NAMES[i], id) == expected_why(i, lease), "why_not after reentry");
}

static void op_renew_release(FuzzIn *in, bool release)
{
    int i = fuzz_u8(in) % NNAMES;
    MName *M = &m.names[i];
    uint32_t lease = pick_lease(in, i);
    int64_t ttl = fuzz_u8(in) % 2 ? 0 : TTLS[fuzz_u8(in) % 4];
    uint8_t id[LEASE_ID_BYTES];
    lease_of(lease, id);
    if (fuzz_tracing())
        fprintf(stderr, "[%d] %s %s/%s lease#%u (now %lld)\n", m.ops, release ? "release" : "renew",
                kind_of(i) == KIND_LOCK ? "lock" : "sem", NAMES[i], lease, (long long)m.now.mono_ms);
    LockResult want = LOCK_NOT_HOLDER;
    uint32_t want_left = 0;
    if (M->known) {
        model_settle(i);
        for (int k = 0; k < M->nh; k++) {
            if (M->h[k].lease != lease)
                continue;
            want = LOCK_OK;
            if (!release) {
                if (ttl)
                    M->h[k].ttl_ms = ttl;
                M->h[k].deadline = m.now.mono_ms + M->h[k].ttl_ms + LOCKTAB_DEADLINE_SLACK_MS;
            } else if ((want_left = --M->h[k].count) == 0) {
                model_end(i, k, LEASE_END_RELEASED);
                model_grant_next(i);
            }
            break;
        }
    }
    LockResult got;
    uint32_t left = 0;
    const Lock *lock;
    const Holder *h;
    op_begin(release ? C_RELEASE : C_RENEW);
    if (release)
        got = locktab_release(m.lt, kind_of(i), NAMES[i], id, NULL, &m.now, &left);
    else
        got = locktab_renew(m.lt, kind_of(i), NAMES[i], id, ttl, &m.now, &lock, &h);
    op_end();
    run_call(got, want, release ? "release" : "renew", i);
    CHECK(left == want_left, "release left %u, model %u", left, want_left);
    if (got == LOCK_NOT_HOLDER)
        CHECK(locktab_why_not(m.lt, kind_of(i), NAMES[i], id) == expected_why(i, lease),
              "why_not('%s', lease#%u) = %d, model %d", NAMES[i], lease,
              (int)locktab_why_not(m.lt, kind_of(i), NAMES[i], id), (int)expected_why(i, lease));
}

static void op_revoke(FuzzIn *in)
{
    int i = fuzz_u8(in) % NLOCKS;
    MName *M = &m.names[i];
    if (fuzz_tracing())
        fprintf(stderr, "[%d] revoke %s (now %lld)\n", m.ops, NAMES[i], (long long)m.now.mono_ms);
    LockResult want = LOCK_NOT_HOLDER;
    if (M->known) {
        bool any = false;
        for (int k = 0; k < M->nh;) {
            if (M->h[k].deadline > m.now.mono_ms) {
                model_end(i, k, LEASE_END_REVOKED);
                any = true;
            } else {
                k++;
            }
        }
        if (any) {
            want = LOCK_OK;
            model_grant_next(i);
        }
    }
    op_begin(C_REVOKE);
    LockResult got = locktab_revoke(m.lt, KIND_LOCK, NAMES[i], NULL, &m.now);
    op_end();
    run_call(got, want, "revoke", i);
}

static void op_cancel(FuzzIn *in)
{
    int queued[MAX_OPS], n = 0;
    for (int k = 0; k < m.nwaiters; k++)
        if (m.waiters[k].model == W_QUEUED)
            queued[n++] = k;
    if (n == 0)
        return;
    MWaiter *w = &m.waiters[queued[fuzz_u8(in) % n]];
    if (fuzz_tracing())
        fprintf(stderr, "[%d] cancel a waiter on %s (now %lld)\n", m.ops, NAMES[w->name], (long long)m.now.mono_ms);
    model_remove_waiter(w->name, w, W_GONE);
    w->table = W_GONE; /* its hooks are never called */
    op_begin(C_CANCEL);
    locktab_cancel(m.lt, w->w, &m.now);
    op_end();
}

/* The earliest deadline due at now in the model, and what it is. */
enum { EV_NONE, EV_EXPIRY, EV_DELAY, EV_WAIT, EV_IDLE };
static int next_event(int *name, int *index, int64_t *when)
{
    int ev = EV_NONE;
    *when = INT64_MAX;
    for (int i = 0; i < NNAMES; i++) {
        const MName *M = &m.names[i];
        if (!M->known)
            continue;
        for (int k = 0; k < M->nh; k++)
            if (M->h[k].deadline < *when)
                ev = EV_EXPIRY, *when = M->h[k].deadline, *name = i, *index = k;
        if (delay_runs(M) && M->delay < *when)
            ev = EV_DELAY, *when = M->delay, *name = i;
        for (int k = 0; k < M->nq; k++)
            if (M->q[k]->wait_deadline < *when)
                ev = EV_WAIT, *when = M->q[k]->wait_deadline, *name = i, *index = k;
        if (M->idle_deadline && M->idle_deadline < *when)
            ev = EV_IDLE, *when = M->idle_deadline, *name = i;
    }
    return *when <= m.now.mono_ms ? ev : EV_NONE;
}

static void op_tick(void)
{
    if (fuzz_tracing())
        fprintf(stderr, "[%d] tick (now %lld)\n", m.ops, (long long)m.now.mono_ms);
    int i = 0, k = 0, ev;
    int64_t when;
    for (int guard = 0; guard < 10000 && (ev = next_event(&i, &k, &when)) != EV_NONE; guard++) {
        MName *M = &m.names[i];
        if (ev == EV_EXPIRY) {
            model_end(i, k, LEASE_END_EXPIRED);
            model_grant_next(i);
        } else if (ev == EV_DELAY) {
            M->delay = 0;
            model_grant_next(i);
        } else if (ev == EV_WAIT) {
            model_remove_waiter(i, M->q[k], W_TIMED_OUT);
        } else {
            CHECK(idle(M), "harness: forgetting a busy name");
            M->known = false;
        }
    }
    op_begin(C_TICK);
    locktab_tick(m.lt, &m.now);
    op_end();
    int64_t next = locktab_next_timeout_ms(m.lt, &m.now);
    CHECK(next != 0, "a deadline still due after the tick");
}

/* A restart on the same boot: the table is freed (its waiters' requests
 * die with it) and loaded from what the hooks reported, readers and permits
 * by token as the stores give them. */
static void op_restart(FuzzIn *in)
{
    int64_t pause = fuzz_u8(in) % 16;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] restart after %lld ms (now %lld)\n", m.ops, (long long)pause, (long long)m.now.mono_ms);
    locktab_free(m.lt);
    m.now.mono_ms += pause;
    m.now.wall_ms += pause;
    LocktabHooks hooks = {NULL, on_changed, on_granted, on_timed_out, on_forgotten, on_ended, on_holder_changed, NULL, NULL};
    m.lt = locktab_new(&m.limits, &hooks);
    CHECK(m.lt != NULL, "locktab_new");
    for (int k = 0; k < m.nwaiters; k++)
        if (m.waiters[k].model == W_QUEUED)
            m.waiters[k].model = m.waiters[k].table = W_GONE; /* their requests die with the server */
    m.ctx = C_LOAD;
    locktab_continue_history(m.lt, m.last_seq);
    for (int i = 0; i < NNAMES; i++) {
        MName *M = &m.names[i];
        M->nq = 0;
        if (!M->known)
            continue;
        Stored *st = &m.stored[i];
        CHECK(locktab_load(m.lt, kind_of(i), NAMES[i], st->last_token, st->limit, st->delay_until_ms, &m.now) ==
                  LOCK_OK,
              "locktab_load('%s')", NAMES[i]);
        /* by token */
        for (uint64_t last = 0;;) {
            SHolder *next = NULL;
            for (int x = 0; x < MAXH + 4; x++)
                if (st->leases[x].used && st->leases[x].h.token > last &&
                    (!next || st->leases[x].h.token < next->h.token))
                    next = &st->leases[x];
            if (!next)
                break;
            CHECK(locktab_load_holder(m.lt, kind_of(i), NAMES[i], &next->h, &m.now) == LOCK_OK,
                  "load holder %llu of '%s'", (unsigned long long)next->h.token, NAMES[i]);
            last = next->h.token;
        }
        /* what the model expects of a load: a delay is what is left by the
         * wall clock (the same deadline: the fake clocks move together), none
         * once its announced end passed; idle names start their idle time now */
        if (M->delay && M->delay - LOCKTAB_DEADLINE_SLACK_MS <= m.now.mono_ms)
            M->delay = 0;
        M->inc = ++m.inc_counter;
        M->idle_deadline = 0;
        update_idle(M);
    }
    /* history: ends of leases of names still known keep their reasons */
    for (uint32_t l = 0; l < MAX_LEASES; l++) {
        MEnd *e = &m.ends[l];
        if (!e->how)
            continue;
        const MName *M = &m.names[e->name];
        if (M->known && e->inc == M->inc - 1) {
            uint8_t id[LEASE_ID_BYTES];
            lease_of(l, id);
            locktab_load_ended(m.lt, kind_of(e->name), NAMES[e->name], id, e->token, e->how, 1);
            e->inc = M->inc;
        } else {
            e->how = 0;
        }
    }
    locktab_raise_last_token(m.lt, m.counter);
    m.ctx = C_NONE;
    check_all();
    op_tick();
}

static void op_time(FuzzIn *in)
{
    int64_t d = 1 + fuzz_u8(in) % 24;
    m.now.mono_ms += d;
    m.now.wall_ms += d;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] time passes to %lld\n", m.ops, (long long)m.now.mono_ms);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzIn in = {data, size, 0};
    memset(&m, 0, sizeof m);
    m.limits.max_locks = 3 + fuzz_u8(&in) % 3;
    m.limits.max_waiters = 4 + fuzz_u8(&in) % 12;
    m.limits.max_waiters_per_lock = 2 + fuzz_u8(&in) % 6;
    m.limits.lease_history = MAX_LEASES * 2; /* nothing is ever forgotten: reasons are exact */
    m.limits.forget_idle_ms = 40 + fuzz_u8(&in) % 100;
    m.now = (Now){1000, 1000 + WALL_OFFSET};
    LocktabHooks hooks = {NULL, on_changed, on_granted, on_timed_out, on_forgotten, on_ended, on_holder_changed, NULL, NULL};
    m.lt = locktab_new(&m.limits, &hooks);
    CHECK(m.lt != NULL, "locktab_new");
    if (fuzz_tracing())
        fprintf(stderr, "limits: locks %zu waiters %zu per name %zu forget %lld\n", m.limits.max_locks,
                m.limits.max_waiters, m.limits.max_waiters_per_lock, (long long)m.limits.forget_idle_ms);
    for (m.ops = 0; m.ops < MAX_OPS && fuzz_more(&in); m.ops++) {
        uint8_t op = fuzz_u8(&in) % 16;
        uint64_t counter = m.counter;
        switch (op) {
        case 0: case 1: case 2: case 3:
            op_acquire(&in);
            break;
        case 4:
            op_reenter(&in);
            break;
        case 5:
            op_renew_release(&in, false);
            break;
        case 6: case 7:
            op_renew_release(&in, true);
            break;
        case 8:
            op_revoke(&in);
            break;
        case 9:
            op_cancel(&in);
            break;
        case 10: case 11: case 12:
            op_time(&in);
            break;
        case 13: case 14:
            op_tick();
            break;
        default:
            op_restart(&in);
            break;
        }
        (void)counter;
        check_all();
    }
    locktab_free(m.lt);
    m.lt = NULL;
    return 0;
}
