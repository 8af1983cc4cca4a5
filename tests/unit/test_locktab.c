/*
 * Unit tests of the lock table with a fake clock and recording hooks:
 * FIFO order, exactly-one wake-up, expiry, reentry, the token counter,
 * cancellation, not_holder reasons, limits and loading from storage.
 */
#include <string.h>

#include "check.h"
#include "core/leasehist.h"
#include "core/locktab.h"

typedef struct Rec {
    int changed; /* durable changes: hooks.changed, holder_changed and ended */
    int ended;
    int forgotten;
    char last_forgotten[32];
    int granted[64]; /* waiter ids in grant order */
    int ngranted;
    int timed_out[64];
    int ntimed_out;
    uint64_t last_token_seen;
    bool tokens_monotonic;
    int woken[64]; /* waiter ids in the order hooks.waking saw them */
    int nwoken;
    int refuse_wake; /* hooks.waking answers NULL for this waiter id (0: none) */
} Rec;

static void on_changed(void *ud, const Lock *lock)
{
    Rec *r = ud;
    r->changed++;
    if (locktab_is_held(lock)) {
        if (locktab_holder(lock)->token < r->last_token_seen)
            r->tokens_monotonic = false;
        r->last_token_seen = locktab_holder(lock)->token;
    }
}
static void on_granted(void *ud, void *ctx, const Lock *lock, const Holder *h)
{
    (void)lock, (void)h;
    Rec *r = ud;
    r->granted[r->ngranted++] = (int)(intptr_t)ctx;
}
static void on_timed_out(void *ud, void *ctx, const Lock *lock)
{
    (void)lock;
    Rec *r = ud;
    r->timed_out[r->ntimed_out++] = (int)(intptr_t)ctx;
}

/* The context is the waiter's id; the grant hooks then get it plus 100, as a
 * gateway's get the Request its dormant waiter was made into. */
static void *on_waking(void *ud, void *ctx)
{
    Rec *r = ud;
    int id = (int)(intptr_t)ctx;
    r->woken[r->nwoken++] = id;
    return id == r->refuse_wake ? NULL : (void *)(intptr_t)(id + 100);
}

static void on_lease(void *ud, const Lock *lock, const Holder *h)
{
    (void)lock, (void)h;
    ((Rec *)ud)->changed++;
}
static void on_lease_ended(void *ud, void *actor, const Lock *lock, const Holder *h, int how, uint64_t seq)
{
    (void)actor, (void)lock, (void)h, (void)how, (void)seq;
    Rec *r = ud;
    r->changed++;
    r->ended++;
}

static int values_changed;
static void on_value(void *ud, const Lock *lock)
{
    (void)lock;
    ((Rec *)ud)->changed++;
    values_changed++;
}

static void on_forgotten(void *ud, const Lock *lock)
{
    Rec *r = ud;
    r->forgotten++;
    snprintf(r->last_forgotten, sizeof r->last_forgotten, "%s", lock->name);
}

static Rec rec;
static Now now = {1000, 1700000000000};
static const Holder *hold; /* the last acquire's or renewal's grant */

/* A stored lock, as the gateway loads it: its record, then its writer. */
static LockResult load(Locktab *lt, const char *name, uint64_t last_token, const Holder *h, const Now *at)
{
    LockResult r = locktab_load(lt, KIND_LOCK, name, last_token, 0, 0, at);
    return r == LOCK_OK && h ? locktab_load_holder(lt, KIND_LOCK, name, h, at) : r;
}

static Locktab *table(size_t max_waiters_per_lock)
{
    memset(&rec, 0, sizeof rec);
    rec.tokens_monotonic = true;
    LocktabLimits limits = {1000, 1000, max_waiters_per_lock, 128, 60000};
    LocktabHooks hooks = {&rec, on_changed, on_granted, on_timed_out, on_forgotten, on_lease_ended, on_lease, on_value, NULL};
    return locktab_new(&limits, &hooks);
}

static uint8_t ids[64][LEASE_ID_BYTES];

static LockResult acquire(Locktab *lt, const char *name, int id, int64_t ttl_ms, int64_t wait_ms,
                          const Lock **lock, Waiter **w)
{
    memset(ids[id], id + 1, LEASE_ID_BYTES);
    AcquireArgs a = {"owner", NULL, ttl_ms, wait_ms, NULL, ids[id], NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    return locktab_acquire(lt, KIND_LOCK, name, &a, (void *)(intptr_t)id, &now, lock, &hold, w);
}

static void test_fifo_and_one_wakeup(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "a", 0, 1000, 0, &lock, &w) == LOCK_OK);
    CHECK(locktab_holder(lock)->token == 1);
    for (int i = 1; i <= 5; i++)
        CHECK(acquire(lt, "a", i, 1000, 5000, &lock, &w) == LOCK_QUEUED);
    CHECK(lock->waiters.len == 5);
    CHECK(acquire(lt, "a", 6, 1000, 0, &lock, &w) == LOCK_BUSY);
    uint32_t left;
    /* Each release wakes exactly one waiter, the oldest. */
    for (int i = 0; i < 5; i++) {
        CHECK(locktab_release(lt, KIND_LOCK, "a", ids[i], NULL, &now, &left) == LOCK_OK && left == 0);
        CHECK(rec.ngranted == i + 1);
        CHECK(rec.granted[i] == i + 1);
        CHECK(locktab_holder(locktab_get(lt, KIND_LOCK, "a"))->token == (uint64_t)(i + 2));
        locktab_check(lt);
    }
    CHECK(locktab_release(lt, KIND_LOCK, "a", ids[5], NULL, &now, &left) == LOCK_OK);
    CHECK(!locktab_is_held(locktab_get(lt, KIND_LOCK, "a")));
    CHECK(rec.tokens_monotonic);
    locktab_check(lt);
    locktab_free(lt);
}

/* hooks.waking (a gateway's dormant waiters, net/dormant.h): asked before
 * every grant and timeout, its context is what the grant hooks get; a
 * waiter it cannot wake leaves the queue with nothing granted and no hook,
 * and the next one is served. A context moved while waiting is the one
 * asked about. */
static void test_waking(void)
{
    memset(&rec, 0, sizeof rec);
    LocktabLimits limits = {1000, 1000, 100, 128, 60000};
    LocktabHooks hooks = {&rec, on_changed, on_granted, on_timed_out, on_forgotten, on_lease_ended, on_lease, on_value,
                          on_waking};
    Locktab *lt = locktab_new(&limits, &hooks);
    const Lock *lock;
    Waiter *w, *w2;
    CHECK(acquire(lt, "k", 0, 1000, 0, &lock, &w) == LOCK_OK);
    CHECK(acquire(lt, "k", 1, 1000, 5000, &lock, &w) == LOCK_QUEUED);
    CHECK(acquire(lt, "k", 2, 1000, 5000, &lock, &w2) == LOCK_QUEUED);
    CHECK(acquire(lt, "k", 3, 1000, 50, &lock, &w) == LOCK_QUEUED);
    locktab_waiter_set_ctx(w2, (void *)(intptr_t)12);
    rec.refuse_wake = 1;
    uint64_t last = locktab_last_token(lt);
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "k", ids[0], NULL, &now, &left) == LOCK_OK);
    /* 1 could not be woken: dropped, nothing granted to it; 2 (its context
     * moved to 12) is granted with the context its waking gave. */
    CHECK(rec.nwoken == 2 && rec.woken[0] == 1 && rec.woken[1] == 12);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 112);
    CHECK(locktab_last_token(lt) == last + 1);
    CHECK(lock->waiters.len == 1);
    /* A timeout is asked about too; refused, it is dropped without a hook. */
    rec.refuse_wake = 3;
    now.mono_ms += 50;
    locktab_tick(lt, &now);
    CHECK(rec.nwoken == 3 && rec.woken[2] == 3 && rec.ntimed_out == 0);
    CHECK(lock->waiters.len == 0);
    CHECK(locktab_waiters(lt) == 0);
    locktab_check(lt);
    locktab_free(lt);
}

static void test_expiry_hands_over(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "e", 0, 200, 0, &lock, &w) == LOCK_OK);
    CHECK(acquire(lt, "e", 1, 300, 10000, &lock, &w) == LOCK_QUEUED);
    /* The lease ends LOCKTAB_DEADLINE_SLACK_MS after the announced
     * expires_at_ms, never before it. */
    CHECK(locktab_next_timeout_ms(lt, &now) == 200 + LOCKTAB_DEADLINE_SLACK_MS);
    int64_t announced = locktab_holder(lock)->expires_at_ms;
    now.mono_ms += 200 + LOCKTAB_DEADLINE_SLACK_MS - 1;
    now.wall_ms += 200;
    CHECK(now.wall_ms == announced);
    locktab_tick(lt, &now);
    CHECK(rec.ngranted == 0);
    CHECK(locktab_held_by(lt, KIND_LOCK, "e", ids[0], &now) != NULL);
    now.mono_ms += 1;
    now.wall_ms += 1;
    CHECK(locktab_held_by(lt, KIND_LOCK, "e", ids[0], &now) == NULL); /* due, even before the tick runs */
    locktab_tick(lt, &now);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 1);
    CHECK(locktab_holder(lock)->acquired_at_ms > announced);
    CHECK(locktab_holder(lock)->token == 2 && locktab_holder(lock)->ttl_ms == 300);
    CHECK(locktab_expiries(lt) == 1);
    /* The expired lease is told apart from an unknown one. */
    CHECK(locktab_why_not(lt, KIND_LOCK, "e", ids[0]) == REASON_SUPERSEDED);
    uint8_t stranger[LEASE_ID_BYTES] = {9};
    CHECK(locktab_why_not(lt, KIND_LOCK, "e", stranger) == REASON_UNKNOWN);
    now.mono_ms += 300 + LOCKTAB_DEADLINE_SLACK_MS;
    now.wall_ms += 300 + LOCKTAB_DEADLINE_SLACK_MS;
    locktab_tick(lt, &now);
    CHECK(!locktab_is_held(lock));
    CHECK(locktab_why_not(lt, KIND_LOCK, "e", ids[1]) == REASON_EXPIRED);
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "e", ids[1], NULL, &now, &left) == LOCK_NOT_HOLDER);
    locktab_check(lt);
    locktab_free(lt);
}

static void test_wait_timeout_and_cancel(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w1, *w2, *w3;
    CHECK(acquire(lt, "t", 0, 10000, 0, &lock, &w1) == LOCK_OK);
    CHECK(acquire(lt, "t", 1, 1000, 50, &lock, &w1) == LOCK_QUEUED);
    CHECK(acquire(lt, "t", 2, 1000, 5000, &lock, &w2) == LOCK_QUEUED);
    CHECK(acquire(lt, "t", 3, 1000, 5000, &lock, &w3) == LOCK_QUEUED);
    now.mono_ms += 50;
    locktab_tick(lt, &now);
    CHECK(rec.ntimed_out == 1 && rec.timed_out[0] == 1);
    locktab_cancel(lt, w2, &now); /* client went away: never granted, never timed out */
    CHECK(lock->waiters.len == 1);
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "t", ids[0], NULL, &now, &left) == LOCK_OK);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 3);
    CHECK(locktab_why_not(lt, KIND_LOCK, "t", ids[0]) == REASON_RELEASED);
    locktab_check(lt);
    locktab_free(lt);
}

static void test_reentry_and_renew(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "r", 0, 1000, 0, &lock, &w) == LOCK_OK);
    AcquireArgs again = {"owner", "{\"x\":1}", 5000, 0, ids[0], ids[1], NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "r", &again, NULL, &now, &lock, &hold, &w) == LOCK_OK);
    CHECK(locktab_holder(lock)->count == 2 && locktab_holder(lock)->token == 1 && locktab_holder(lock)->ttl_ms == 5000);
    CHECK(strcmp(locktab_holder(lock)->metadata, "{\"x\":1}") == 0);
    AcquireArgs wrong = {"owner", NULL, 5000, 0, ids[7], ids[8], NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "r", &wrong, NULL, &now, &lock, &hold, &w) == LOCK_NOT_HOLDER);
    CHECK(locktab_renew(lt, KIND_LOCK, "r", ids[0], 0, &now, &lock, &hold) == LOCK_OK && locktab_holder(lock)->ttl_ms == 5000);
    CHECK(locktab_renew(lt, KIND_LOCK, "r", ids[0], 700, &now, &lock, &hold) == LOCK_OK);
    CHECK(locktab_holder(lock)->expires_at_ms == now.wall_ms + 700);
    CHECK(locktab_renew(lt, KIND_LOCK, "r", ids[5], 700, &now, &lock, &hold) == LOCK_NOT_HOLDER);
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "r", ids[0], NULL, &now, &left) == LOCK_OK && left == 1);
    CHECK(locktab_is_held(locktab_get(lt, KIND_LOCK, "r")));
    CHECK(locktab_release(lt, KIND_LOCK, "r", ids[0], NULL, &now, &left) == LOCK_OK && left == 0);
    CHECK(!locktab_is_held(locktab_get(lt, KIND_LOCK, "r")));
    CHECK(acquire(lt, "r", 2, 1000, 0, &lock, &w) == LOCK_OK && locktab_holder(lock)->token == 2);
    locktab_check(lt);
    locktab_free(lt);
}

static void test_limits(void)
{
    Locktab *lt = table(2);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "l", 0, 1000, 0, &lock, &w) == LOCK_OK);
    CHECK(acquire(lt, "l", 1, 1000, 100, &lock, &w) == LOCK_QUEUED);
    CHECK(acquire(lt, "l", 2, 1000, 100, &lock, &w) == LOCK_QUEUED);
    CHECK(acquire(lt, "l", 3, 1000, 100, &lock, &w) == LOCK_TOO_MANY_WAITERS);
    CHECK(locktab_waiters(lt) == 2);
    locktab_free(lt);
}

/* A stored holder of a 1000 ms lease, token 7, from another boot (deadline_ms
 * -1: the wall clock says what is left), expiring expires_in_ms from now. */
static Holder from_another_boot(int64_t expires_in_ms, uint32_t count)
{
    Holder h = {.owner = "o", .metadata = "{}", .token = 7, .ttl_ms = 1000,
                .acquired_at_ms = now.wall_ms + expires_in_ms - 1000, .expires_at_ms = now.wall_ms + expires_in_ms,
                .deadline_ms = -1, .count = count};
    memset(h.lease, 3, LEASE_ID_BYTES);
    return h;
}

static void test_load(void)
{
    Locktab *lt = table(10);
    Holder live = from_another_boot(500, 2);
    Holder dead = live;
    dead.token = 8;
    dead.expires_at_ms = now.wall_ms - LOCKTAB_DEADLINE_SLACK_MS;
    CHECK(load(lt, "live", 7, &live, &now) == LOCK_OK);
    CHECK(load(lt, "dead", 8, &dead, &now) == LOCK_OK);
    CHECK(load(lt, "idle", 3, NULL, &now) == LOCK_OK);
    locktab_raise_last_token(lt, 12);
    /* The lease that expired while the server was down ends at the first tick. */
    CHECK(locktab_next_timeout_ms(lt, &now) == 0);
    int before = rec.ended;
    locktab_tick(lt, &now);
    CHECK(rec.ended == before + 1); /* the end is recorded */
    CHECK(locktab_held(lt) == 1 && locktab_locks(lt) == 3);
    CHECK(locktab_holder(locktab_get(lt, KIND_LOCK, "live"))->count == 2);
    CHECK(locktab_next_timeout_ms(lt, &now) == 500 + LOCKTAB_DEADLINE_SLACK_MS);
    const Lock *lock;
    Waiter *w;
    /* Tokens continue above the stored counter. */
    CHECK(acquire(lt, "dead", 0, 1000, 0, &lock, &w) == LOCK_OK && locktab_holder(lock)->token == 13);
    CHECK(locktab_why_not(lt, KIND_LOCK, "dead", dead.lease) == REASON_SUPERSEDED);
    locktab_check(lt);
    locktab_free(lt);

    /* From this boot: the boot-clock deadline rules, whatever the wall clock
     * says (it was stepped back an hour here, which must not stretch the lease). */
    lt = table(10);
    Holder same = live;
    same.deadline_ms = now.mono_ms + 250;
    same.expires_at_ms = now.wall_ms + 250;
    Now stepped = {now.mono_ms, now.wall_ms - 3600000};
    CHECK(load(lt, "same", 7, &same, &stepped) == LOCK_OK);
    CHECK(locktab_next_timeout_ms(lt, &stepped) == 250);
    /* ... and from another boot, a clock that is behind gives at most one ttl. */
    Holder other = live;
    CHECK(load(lt, "other", 7, &other, &stepped) == LOCK_OK);
    CHECK(locktab_holder(locktab_get(lt, KIND_LOCK, "other"))->deadline_ms == stepped.mono_ms + 1000 + LOCKTAB_DEADLINE_SLACK_MS);
    /* A deadline that passed while the server was down: released at load. */
    Holder gone = live;
    gone.deadline_ms = now.mono_ms - 1;
    gone.expires_at_ms = now.wall_ms + 100000; /* the wall clock would keep it */
    CHECK(load(lt, "gone", 7, &gone, &now) == LOCK_OK);
    locktab_tick(lt, &now);
    CHECK(!locktab_is_held(locktab_get(lt, KIND_LOCK, "gone")));
    locktab_check(lt);
    locktab_free(lt);
}

/* Found by the torture run on etcd (two holders, 1 ms apart): a lease loaded
 * by the wall clock ended up to 1 ms before its announced expiry. Both clocks
 * are read rounded down, so when the load read the wall clock at x.0 and the
 * boot clock at y.9, the boot clock reads the deadline while the wall clock
 * still reads expires_at_ms - 1, and a grant then is stamped before it. The
 * second millisecond of LOCKTAB_DEADLINE_SLACK_MS is for the clocks being
 * read one after the other (test_readings_apart_keep_the_announced_times). */
static void test_load_by_wall_clock_keeps_the_announced_expiry(void)
{
    Locktab *lt = table(10);
    Holder h = from_another_boot(100, 1);
    CHECK(load(lt, "a", 7, &h, &now) == LOCK_OK);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "a", 0, 1000, 1000, &lock, &w) == LOCK_QUEUED);
    /* 100 ms later by the boot clock; the wall clock may read 99. */
    Now later = {now.mono_ms + 100, now.wall_ms + 99};
    locktab_tick(lt, &later);
    CHECK(locktab_holder(locktab_get(lt, KIND_LOCK, "a"))->token == 7);
    Now after = {now.mono_ms + 100 + LOCKTAB_DEADLINE_SLACK_MS, now.wall_ms + 100};
    locktab_tick(lt, &after);
    lock = locktab_get(lt, KIND_LOCK, "a");
    CHECK(locktab_holder(lock)->token == 8 && locktab_holder(lock)->acquired_at_ms >= h.expires_at_ms);
    /* The cap for a clock that is behind keeps the same millisecond. */
    Holder other = h;
    other.expires_at_ms = now.wall_ms + 5000;
    CHECK(load(lt, "b", 7, &other, &now) == LOCK_OK);
    CHECK(locktab_holder(locktab_get(lt, KIND_LOCK, "b"))->deadline_ms == now.mono_ms + 1000 + LOCKTAB_DEADLINE_SLACK_MS);
    locktab_check(lt);
    locktab_free(lt);
}

/* A Now holds both clocks rounded down and read a little apart (clock.h), so
 * from one Now to another wall - mono may differ by up to 2 ms. With that
 * much, the lease still ends no earlier than announced, and the next grant
 * is not stamped before the announced expiry. With a slack of 1 ms (the
 * rounding alone) the next grant here was stamped 1 ms early. */
static void test_readings_apart_keep_the_announced_times(void)
{
    Locktab *lt = table(10);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "a", 0, 1000, 0, &lock, &w) == LOCK_OK);
    int64_t announced = locktab_holder(lock)->expires_at_ms;
    CHECK(acquire(lt, "a", 1, 1000, 100000, &lock, &w) == LOCK_QUEUED);
    /* The boot clock reaches the deadline with the wall clock read 2 ms
     * behind what the grant's reading would make it. */
    Now at_deadline = {now.mono_ms + 1000 + LOCKTAB_DEADLINE_SLACK_MS,
                       now.wall_ms + 1000 + LOCKTAB_DEADLINE_SLACK_MS - 2};
    Now just_before = {at_deadline.mono_ms - 1, at_deadline.wall_ms - 1};
    locktab_tick(lt, &just_before);
    CHECK(rec.ngranted == 0 && locktab_held_by(lt, KIND_LOCK, "a", ids[0], &just_before) != NULL);
    locktab_tick(lt, &at_deadline);
    lock = locktab_get(lt, KIND_LOCK, "a");
    CHECK(rec.ngranted == 1 && locktab_holder(lock)->token == 2);
    CHECK(locktab_holder(lock)->acquired_at_ms >= announced);
    locktab_check(lt);
    locktab_free(lt);
}

/* Found by fuzzing: until the loop's tick ran, a lease past its deadline could
 * still be renewed, released or reentered. */
static void test_no_ok_after_deadline(void)
{
    Locktab *lt = table(10);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "a", 0, 3, 0, &lock, &w) == LOCK_OK); /* deadline: mono + 3 + slack */
    Now at_deadline = {now.mono_ms + 3 + LOCKTAB_DEADLINE_SLACK_MS, now.wall_ms + 3 + LOCKTAB_DEADLINE_SLACK_MS};
    CHECK(locktab_renew(lt, KIND_LOCK, "a", ids[0], 1000, &at_deadline, &lock, &hold) == LOCK_NOT_HOLDER);
    CHECK(locktab_why_not(lt, KIND_LOCK, "a", ids[0]) == REASON_EXPIRED);
    CHECK(!locktab_is_held(locktab_get(lt, KIND_LOCK, "a")));
    /* Release and reentry too; and a waiter is granted before a newcomer. */
    CHECK(acquire(lt, "b", 1, 3, 0, &lock, &w) == LOCK_OK);
    CHECK(acquire(lt, "b", 2, 1000, 100000, &lock, &w) == LOCK_QUEUED);
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "b", ids[1], NULL, &at_deadline, &left) == LOCK_NOT_HOLDER);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 2);
    CHECK(acquire(lt, "c", 3, 3, 0, &lock, &w) == LOCK_OK);
    AcquireArgs again = {"owner", NULL, 1000, 0, ids[3], ids[4], NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "c", &again, NULL, &at_deadline, &lock, &hold, &w) == LOCK_NOT_HOLDER);
    CHECK(locktab_held_by(lt, KIND_LOCK, "b", ids[2], &at_deadline) != NULL);
    locktab_check(lt);
    locktab_free(lt);
}

/* Found by fuzzing: a waiter whose wait had run out, but that the tick had not
 * timed out yet, was granted the lock by a release (a 200 after its wait_ms). */
static void test_no_grant_after_wait(void)
{
    Locktab *lt = table(10);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "a", 0, 100000, 0, &lock, &w) == LOCK_OK);
    CHECK(acquire(lt, "a", 1, 1000, 10, &lock, &w) == LOCK_QUEUED);  /* waits until mono + 10 */
    CHECK(acquire(lt, "a", 2, 1000, 100, &lock, &w) == LOCK_QUEUED); /* until mono + 100 */
    Now later = {now.mono_ms + 11, now.wall_ms + 11};
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "a", ids[0], NULL, &later, &left) == LOCK_OK);
    CHECK(rec.ntimed_out == 1 && rec.timed_out[0] == 1);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 2);
    CHECK(locktab_held_by(lt, KIND_LOCK, "a", ids[2], &later) != NULL);
    locktab_check(lt);
    locktab_free(lt);
}

static uint64_t ended_seq;
static void on_ended(void *ud, void *actor, const Lock *lock, const Holder *h, int how, uint64_t seq)
{
    (void)actor;
    (void)ud, (void)lock, (void)h, (void)how;
    ended_seq = seq;
}

/* Found by fuzzing: with a full history, a lease that expired while the server
 * was down was recorded at load and then overwritten by the older stored
 * history replayed after it (its renewal then said "unknown", not "expired"). */
static void test_history_newest_kept_at_restart(void)
{
    LocktabLimits limits = {1000, 1000, 10, 1, 60000}; /* history of one lease */
    LocktabHooks hooks = {&rec, on_changed, on_granted, on_timed_out, on_forgotten, on_ended, NULL, NULL, NULL};
    Locktab *lt = locktab_new(&limits, &hooks);
    Holder dead = {.owner = "o", .metadata = "{}", .token = 2, .ttl_ms = 3, .acquired_at_ms = now.wall_ms - 10,
                   .expires_at_ms = now.wall_ms - 7, .deadline_ms = now.mono_ms - 7, .count = 1};
    memset(dead.lease, 9, LEASE_ID_BYTES);
    uint8_t released[LEASE_ID_BYTES];
    memset(released, 8, LEASE_ID_BYTES);
    locktab_continue_history(lt, 1);
    CHECK(load(lt, "a", 2, &dead, &now) == LOCK_OK);
    locktab_load_ended(lt, KIND_LOCK, "a", released, 1, LEASE_END_RELEASED, 1);
    locktab_tick(lt, &now);
    CHECK(locktab_why_not(lt, KIND_LOCK, "a", dead.lease) == REASON_EXPIRED);
    CHECK(ended_seq == 2); /* numbered after the stored history */
    locktab_check(lt);
    locktab_free(lt);
}

static void test_forget_idle(void)
{
    Locktab *lt = table(10);
    const Lock *lock;
    Waiter *w;
    CHECK(acquire(lt, "idle", 0, 1000, 0, &lock, &w) == LOCK_OK);
    CHECK(acquire(lt, "busy", 1, 100000, 0, &lock, &w) == LOCK_OK);
    CHECK(acquire(lt, "busy", 2, 1000, 200000, &lock, &w) == LOCK_QUEUED);
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "idle", ids[0], NULL, &now, &left) == LOCK_OK);
    locktab_check(lt);
    /* Free for less than forget_idle_ms: kept. */
    now.mono_ms += 59999;
    locktab_tick(lt, &now);
    CHECK(rec.forgotten == 0 && locktab_get(lt, KIND_LOCK, "idle") != NULL);
    now.mono_ms += 1;
    locktab_tick(lt, &now);
    CHECK(rec.forgotten == 1 && strcmp(rec.last_forgotten, "idle") == 0);
    CHECK(locktab_get(lt, KIND_LOCK, "idle") == NULL);
    CHECK(locktab_locks(lt) == 1); /* a held lock with a waiter is never forgotten */
    CHECK(locktab_forgotten(lt) == 1);
    /* The name can be used again; tokens still only grow; the old lease is unknown there. */
    CHECK(acquire(lt, "idle", 3, 1000, 0, &lock, &w) == LOCK_OK && locktab_holder(lock)->token == 3);
    CHECK(locktab_why_not(lt, KIND_LOCK, "idle", ids[0]) == REASON_UNKNOWN);
    /* Acquiring again before the idle deadline keeps the lock. */
    CHECK(locktab_release(lt, KIND_LOCK, "idle", ids[3], NULL, &now, &left) == LOCK_OK);
    now.mono_ms += 30000;
    locktab_tick(lt, &now);
    CHECK(acquire(lt, "idle", 4, 1000000, 0, &lock, &w) == LOCK_OK);
    now.mono_ms += 60000;
    locktab_tick(lt, &now);
    CHECK(locktab_get(lt, KIND_LOCK, "idle") != NULL && rec.forgotten == 1);
    locktab_check(lt);
    locktab_free(lt);
}

/* A retried acquire (same request_id and owner) gets the grant it made,
 * unchanged; nothing else does. */
static void test_request_id_replays(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w;
    memset(ids[10], 11, LEASE_ID_BYTES);
    memset(ids[11], 12, LEASE_ID_BYTES);
    AcquireArgs first = {"alice", NULL, 1000, 0, NULL, ids[10], "req-1", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &first, NULL, &now, &lock, &hold, &w) == LOCK_OK);
    uint64_t token = locktab_holder(lock)->token;
    int64_t expires = locktab_holder(lock)->expires_at_ms;
    int changes = rec.changed;
    Now later = now;
    later.mono_ms += 300;
    later.wall_ms += 300;
    AcquireArgs retry = {"alice", NULL, 1000, 0, NULL, ids[11], "req-1", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &retry, NULL, &later, &lock, &hold, &w) == LOCK_REPLAYED);
    CHECK(memcmp(locktab_holder(lock)->lease, ids[10], LEASE_ID_BYTES) == 0 && locktab_holder(lock)->token == token);
    CHECK(locktab_holder(lock)->count == 1 && locktab_holder(lock)->expires_at_ms == expires && rec.changed == changes);
    /* Another owner with the same id, or the same owner with another id: held. */
    AcquireArgs other = {"mallory", NULL, 1000, 0, NULL, ids[11], "req-1", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &other, NULL, &later, &lock, &hold, &w) == LOCK_BUSY);
    AcquireArgs fresh = {"alice", NULL, 1000, 0, NULL, ids[11], "req-2", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &fresh, NULL, &later, &lock, &hold, &w) == LOCK_BUSY);
    /* The same owner and id from another API key: a new acquire, never the grant. */
    AcquireArgs other_key = {"alice", NULL, 1000, 0, NULL, ids[11], "req-1", "tenant-b", {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &other_key, NULL, &later, &lock, &hold, &w) == LOCK_BUSY);
    /* A reentry with an id is replayed too, and the count goes up once. */
    AcquireArgs reenter = {"alice", NULL, 0, 0, ids[10], NULL, "req-3", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &reenter, NULL, &later, &lock, &hold, &w) == LOCK_OK && locktab_holder(lock)->count == 2);
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &reenter, NULL, &later, &lock, &hold, &w) == LOCK_REPLAYED && locktab_holder(lock)->count == 2);
    /* The first id now names nothing: its grant was re-entered since. */
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &retry, NULL, &later, &lock, &hold, &w) == LOCK_BUSY);
    /* A queued waiter's id, and its API key's name, come with its grant. */
    memset(ids[12], 13, LEASE_ID_BYTES);
    AcquireArgs queued = {"bob", NULL, 1000, 5000, NULL, ids[12], "bob-1", "tenant-b", {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &queued, NULL, &later, &lock, &hold, &w) == LOCK_QUEUED);
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "q", ids[10], NULL, &later, &left) == LOCK_OK && left == 1);
    CHECK(locktab_release(lt, KIND_LOCK, "q", ids[10], NULL, &later, &left) == LOCK_OK && left == 0);
    lock = locktab_get(lt, KIND_LOCK, "q");
    CHECK(locktab_is_held(lock) && strcmp(locktab_holder(lock)->owner, "bob") == 0 && strcmp(locktab_holder(lock)->key, "tenant-b") == 0);
    AcquireArgs bob_retry = {"bob", NULL, 1000, 5000, NULL, ids[13], "bob-1", "tenant-b", {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &bob_retry, NULL, &later, &lock, &hold, &w) == LOCK_REPLAYED);
    CHECK(memcmp(locktab_holder(lock)->lease, ids[12], LEASE_ID_BYTES) == 0);
    memset(ids[15], 16, LEASE_ID_BYTES);
    /* Once that grant has ended, the id is a new acquire. */
    CHECK(locktab_release(lt, KIND_LOCK, "q", ids[12], NULL, &later, &left) == LOCK_OK && left == 0);
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &bob_retry, NULL, &later, &lock, &hold, &w) == LOCK_OK);
    CHECK(memcmp(locktab_holder(lock)->lease, ids[13], LEASE_ID_BYTES) == 0 && locktab_holder(lock)->token > token + 1);
    /* A retry arriving after the holder's deadline, before any tick: the
     * expiry grants the queued acquire first, and the retry gets that grant
     * (found by fuzz_locktab's model). */
    memset(ids[14], 15, LEASE_ID_BYTES);
    AcquireArgs carol = {"carol", NULL, 1000, 60000, NULL, ids[14], "carol-1", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &carol, NULL, &later, &lock, &hold, &w) == LOCK_QUEUED);
    Now expired = later;
    expired.mono_ms += 5000;
    expired.wall_ms += 5000;
    AcquireArgs carol_retry = {"carol", NULL, 1000, 60000, NULL, ids[15], "carol-1", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "q", &carol_retry, NULL, &expired, &lock, &hold, &w) == LOCK_REPLAYED);
    CHECK(memcmp(locktab_holder(lock)->lease, ids[14], LEASE_ID_BYTES) == 0 && strcmp(locktab_holder(lock)->owner, "carol") == 0);
    CHECK(locktab_release(lt, KIND_LOCK, "q", ids[14], NULL, &expired, &left) == LOCK_OK && left == 0);
    locktab_check(lt);
    locktab_free(lt);
}

/* An acquire of `kind` in `mode` (a semaphore's with `limit`) with lease ids[id]. */
static LockResult take(Locktab *lt, LockKind kind, const char *name, int id, uint8_t mode, uint32_t limit,
                       int64_t wait_ms, int64_t delay_ms)
{
    const Lock *lock;
    Waiter *w;
    memset(ids[id], id + 1, LEASE_ID_BYTES);
    AcquireArgs a = {"owner", NULL, 1000, wait_ms, NULL, ids[id], NULL, NULL, {NULL, NULL}, mode, true, delay_ms, limit, 0, NULL};
    return locktab_acquire(lt, kind, name, &a, (void *)(intptr_t)id, &now, &lock, &hold, &w);
}

/* A semaphore acquire of `permits` permits (of limit) by lease `id`; a waiter it queues is last_waiter. */
static Waiter *last_waiter;
static LockResult take_permits(Locktab *lt, const char *name, int id, uint32_t limit, uint32_t permits,
                               int64_t wait_ms)
{
    const Lock *lock;
    memset(ids[id], id + 1, LEASE_ID_BYTES);
    AcquireArgs a = {"owner", NULL, 1000, wait_ms, NULL, ids[id], NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0,
                     limit, permits, NULL};
    return locktab_acquire(lt, KIND_SEMAPHORE, name, &a, (void *)(intptr_t)id, &now, &lock, &hold, &last_waiter);
}

static size_t holders_of(Locktab *lt, LockKind kind, const char *name)
{
    const Lock *lock = locktab_get(lt, kind, name);
    return lock ? lock->holders.len : 0;
}

/* Readers share; a reader that comes while a writer waits waits behind it
 * (no barging); a writer's end grants the run of readers at the head, up
 * to the next writer; each grant has its own token. */
static void test_readers_fifo(void)
{
    Locktab *lt = table(100);
    uint32_t left;
    CHECK(take(lt, KIND_LOCK, "rw", 0, MODE_READ, 0, 0, 0) == LOCK_OK && hold->token == 1);
    CHECK(take(lt, KIND_LOCK, "rw", 1, MODE_READ, 0, 0, 0) == LOCK_OK && hold->token == 2);
    CHECK(holders_of(lt, KIND_LOCK, "rw") == 2);
    CHECK(take(lt, KIND_LOCK, "rw", 2, MODE_WRITE, 0, 0, 0) == LOCK_BUSY);
    CHECK(take(lt, KIND_LOCK, "rw", 2, MODE_WRITE, 0, 5000, 0) == LOCK_QUEUED);
    /* No barging: a reader behind the waiting writer waits too. */
    CHECK(take(lt, KIND_LOCK, "rw", 3, MODE_READ, 0, 0, 0) == LOCK_BUSY);
    CHECK(take(lt, KIND_LOCK, "rw", 3, MODE_READ, 0, 5000, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "rw", 4, MODE_READ, 0, 5000, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "rw", 5, MODE_WRITE, 0, 5000, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "rw", 6, MODE_READ, 0, 5000, 0) == LOCK_QUEUED);
    locktab_check(lt);
    /* The writer waits for every reader. */
    CHECK(locktab_release(lt, KIND_LOCK, "rw", ids[0], NULL, &now, &left) == LOCK_OK && rec.ngranted == 0);
    CHECK(locktab_release(lt, KIND_LOCK, "rw", ids[1], NULL, &now, &left) == LOCK_OK);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 2);
    const Lock *lock = locktab_get(lt, KIND_LOCK, "rw");
    CHECK(lock->mode == MODE_WRITE && lock->holders.len == 1 && locktab_holder(lock)->token == 3);
    locktab_check(lt);
    /* Its end grants readers 3 and 4 (the run at the head), not writer 5. */
    CHECK(locktab_release(lt, KIND_LOCK, "rw", ids[2], NULL, &now, &left) == LOCK_OK);
    CHECK(rec.ngranted == 3 && rec.granted[1] == 3 && rec.granted[2] == 4);
    CHECK(lock->mode == MODE_READ && lock->holders.len == 2 && lock->waiters.len == 2);
    CHECK(locktab_holder(lock)->token == 4 && locktab_next_holder(locktab_holder(lock))->token == 5);
    locktab_check(lt);
    CHECK(locktab_release(lt, KIND_LOCK, "rw", ids[4], NULL, &now, &left) == LOCK_OK && rec.ngranted == 3);
    CHECK(locktab_release(lt, KIND_LOCK, "rw", ids[3], NULL, &now, &left) == LOCK_OK);
    CHECK(rec.ngranted == 4 && rec.granted[3] == 5);
    CHECK(locktab_release(lt, KIND_LOCK, "rw", ids[5], NULL, &now, &left) == LOCK_OK);
    CHECK(rec.ngranted == 5 && rec.granted[4] == 6 && lock->mode == MODE_READ);
    CHECK(rec.tokens_monotonic);
    LocktabCounts c = locktab_counts(lt, KIND_LOCK);
    CHECK(c.held == 1 && c.leases == 1 && c.readers == 1 && c.waiters == 0);
    locktab_check(lt);
    locktab_free(lt);
}

/* A writer at the head that gives up (or times out) lets the readers
 * behind it join the readers that hold the lock at once. */
static void test_writer_gives_up(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w;
    CHECK(take(lt, KIND_LOCK, "g", 0, MODE_READ, 0, 0, 0) == LOCK_OK);
    memset(ids[1], 2, LEASE_ID_BYTES);
    AcquireArgs writer = {"owner", NULL, 1000, 5000, NULL, ids[1], NULL, NULL, {NULL, NULL}, MODE_WRITE, true, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "g", &writer, (void *)1, &now, &lock, &hold, &w) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "g", 2, MODE_READ, 0, 5000, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "g", 3, MODE_READ, 0, 5000, 0) == LOCK_QUEUED);
    locktab_cancel(lt, w, &now);
    CHECK(rec.ngranted == 2 && rec.granted[0] == 2 && rec.granted[1] == 3 && lock->holders.len == 3);
    locktab_check(lt);
    /* The same when its wait runs out. */
    CHECK(take(lt, KIND_LOCK, "g", 4, MODE_WRITE, 0, 100, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "g", 5, MODE_READ, 0, 5000, 0) == LOCK_QUEUED);
    now.mono_ms += 100;
    locktab_tick(lt, &now);
    CHECK(rec.ntimed_out == 1 && rec.timed_out[0] == 4);
    CHECK(rec.ngranted == 3 && rec.granted[2] == 5 && lock->holders.len == 4);
    locktab_check(lt);
    locktab_free(lt);
}

/* Reentry keeps the lease's mode: left out, it is the lease's; another is a conflict. */
static void test_reentry_modes(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w;
    CHECK(take(lt, KIND_LOCK, "m", 0, MODE_READ, 0, 0, 0) == LOCK_OK);
    AcquireArgs same = {"owner", NULL, 0, 0, ids[0], NULL, NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "m", &same, NULL, &now, &lock, &hold, &w) == LOCK_OK);
    CHECK(hold->count == 2 && hold->mode == MODE_READ);
    AcquireArgs other = {"owner", NULL, 0, 0, ids[0], NULL, NULL, NULL, {NULL, NULL}, MODE_WRITE, true, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "m", &other, NULL, &now, &lock, &hold, &w) == LOCK_MODE_CONFLICT);
    CHECK(hold->count == 2);
    AcquireArgs read = {"owner", NULL, 0, 0, ids[0], NULL, NULL, NULL, {NULL, NULL}, MODE_READ, true, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "m", &read, NULL, &now, &lock, &hold, &w) == LOCK_OK && hold->count == 3);
    /* A semaphore's permit cannot be re-entered. */
    CHECK(take(lt, KIND_SEMAPHORE, "m", 1, MODE_WRITE, 2, 0, 0) == LOCK_OK);
    AcquireArgs permit = {"owner", NULL, 0, 0, ids[1], NULL, NULL, NULL, {NULL, NULL}, MODE_WRITE, false, 0, 2, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_SEMAPHORE, "m", &permit, NULL, &now, &lock, &hold, &w) == LOCK_NOT_HOLDER);
    locktab_check(lt);
    locktab_free(lt);
}

/* A semaphore: `limit` permits, each a lease with its own token; one wake
 * per freed permit, FIFO; a permit ends at its TTL; the limit is the first
 * acquire's while anyone holds or waits; a lock of the same name is
 * another thing. */
static void test_semaphore(void)
{
    Locktab *lt = table(100);
    uint32_t left;
    CHECK(take(lt, KIND_SEMAPHORE, "s", 0, MODE_WRITE, 2, 0, 0) == LOCK_OK && hold->token == 1);
    CHECK(take(lt, KIND_SEMAPHORE, "s", 1, MODE_WRITE, 2, 0, 0) == LOCK_OK && hold->token == 2);
    CHECK(take(lt, KIND_SEMAPHORE, "s", 2, MODE_WRITE, 2, 0, 0) == LOCK_BUSY);
    CHECK(take(lt, KIND_SEMAPHORE, "s", 2, MODE_WRITE, 3, 0, 0) == LOCK_LIMIT_MISMATCH);
    CHECK(take(lt, KIND_SEMAPHORE, "s", 2, MODE_WRITE, 2, 5000, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_SEMAPHORE, "s", 3, MODE_WRITE, 2, 5000, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "s", 4, MODE_WRITE, 0, 0, 0) == LOCK_OK && hold->token == 3); /* another namespace */
    locktab_check(lt);
    CHECK(locktab_release(lt, KIND_SEMAPHORE, "s", ids[0], NULL, &now, &left) == LOCK_OK && left == 0);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 2 && holders_of(lt, KIND_SEMAPHORE, "s") == 2);
    CHECK(locktab_held_by(lt, KIND_SEMAPHORE, "s", ids[2], &now)->token == 4);
    CHECK(locktab_held_by(lt, KIND_LOCK, "s", ids[2], &now) == NULL);
    /* A crashed holder's permit comes back at its TTL, to the next waiter. */
    CHECK(locktab_renew(lt, KIND_SEMAPHORE, "s", ids[2], 5000, &now, &(const Lock *){NULL}, &hold) == LOCK_OK);
    now.mono_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    now.wall_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    locktab_tick(lt, &now);
    CHECK(rec.ngranted == 2 && rec.granted[1] == 3 && holders_of(lt, KIND_SEMAPHORE, "s") == 2);
    CHECK(locktab_why_not(lt, KIND_SEMAPHORE, "s", ids[1]) == REASON_SUPERSEDED);
    locktab_check(lt);
    CHECK(locktab_release(lt, KIND_SEMAPHORE, "s", ids[2], NULL, &now, &left) == LOCK_OK);
    CHECK(locktab_release(lt, KIND_SEMAPHORE, "s", ids[3], NULL, &now, &left) == LOCK_OK);
    /* Idle: the next acquire sets the limit. */
    CHECK(take(lt, KIND_SEMAPHORE, "s", 5, MODE_WRITE, 1, 0, 0) == LOCK_OK);
    CHECK(locktab_get(lt, KIND_SEMAPHORE, "s")->limit == 1);
    CHECK(take(lt, KIND_SEMAPHORE, "s", 6, MODE_WRITE, 1, 0, 0) == LOCK_BUSY);
    LocktabCounts c = locktab_counts(lt, KIND_SEMAPHORE);
    CHECK(c.names == 1 && c.held == 1 && c.leases == 1 && c.readers == 0);
    locktab_check(lt);
    locktab_free(lt);
}

/* Several permits in one lease: limit 5, A takes 3, B asks for 3 and waits,
 * C asks for 1 and waits behind B (no barging, although 2 are free), and
 * A's release grants B, then C. One token per lease; its release, its
 * expiry and a waiter that leaves give every permit back at once. */
static void test_permits(void)
{
    Locktab *lt = table(100);
    uint32_t left;
    CHECK(take_permits(lt, "p", 0, 5, 3, 0) == LOCK_OK && hold->permits == 3 && hold->token == 1);
    const Lock *lock = locktab_get(lt, KIND_SEMAPHORE, "p");
    CHECK(lock->permits_used == 3 && lock->holders.len == 1);
    CHECK(locktab_preview(lt, KIND_SEMAPHORE, "p", MODE_WRITE, 5, 2, "x", NULL, NULL, &now) == LOCK_OK);
    CHECK(locktab_preview(lt, KIND_SEMAPHORE, "p", MODE_WRITE, 5, 3, "x", NULL, NULL, &now) == LOCK_BUSY);
    CHECK(take_permits(lt, "p", 1, 5, 3, 0) == LOCK_BUSY);
    CHECK(take_permits(lt, "p", 2, 5, 3, 100000) == LOCK_QUEUED);
    CHECK(take_permits(lt, "p", 3, 5, 1, 100000) == LOCK_QUEUED); /* 2 free, but B is first */
    CHECK(take_permits(lt, "p", 4, 5, 1, 0) == LOCK_BUSY);
    CHECK(locktab_preview(lt, KIND_SEMAPHORE, "p", MODE_WRITE, 5, 1, "x", NULL, NULL, &now) == LOCK_BUSY);
    CHECK(rec.ngranted == 0 && lock->waiters.len == 2);
    LocktabCounts c = locktab_counts(lt, KIND_SEMAPHORE);
    CHECK(c.leases == 1 && c.permits == 3 && c.waiters == 2);
    locktab_check(lt);
    CHECK(locktab_release(lt, KIND_SEMAPHORE, "p", ids[0], NULL, &now, &left) == LOCK_OK && left == 0);
    CHECK(rec.ngranted == 2 && rec.granted[0] == 2 && rec.granted[1] == 3);
    CHECK(lock->permits_used == 4 && lock->holders.len == 2 && lock->waiters.len == 0);
    CHECK(locktab_holder(lock)->permits == 3 && locktab_next_holder(locktab_holder(lock))->permits == 1);
    CHECK(locktab_holder(lock)->token == 2 && locktab_next_holder(locktab_holder(lock))->token == 3);
    locktab_check(lt);
    /* A head that cannot fit keeps the one behind it waiting, though one permit is free; when the
     * head leaves (its client hung up), the one behind it fits and is granted. */
    CHECK(take_permits(lt, "p", 5, 5, 5, 100000) == LOCK_QUEUED);
    Waiter *big = last_waiter;
    CHECK(take_permits(lt, "p", 6, 5, 1, 100000) == LOCK_QUEUED);
    CHECK(rec.ngranted == 2);
    locktab_cancel(lt, big, &now);
    CHECK(rec.ngranted == 3 && rec.granted[2] == 6 && lock->permits_used == 5 && lock->waiters.len == 0);
    locktab_check(lt);
    /* The expiry of the 3-permit lease gives its three back at once. */
    const Lock *l2;
    CHECK(locktab_renew(lt, KIND_SEMAPHORE, "p", ids[3], 5000, &now, &l2, &hold) == LOCK_OK);
    CHECK(locktab_renew(lt, KIND_SEMAPHORE, "p", ids[6], 5000, &now, &l2, &hold) == LOCK_OK);
    now.mono_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    now.wall_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    locktab_tick(lt, &now);
    CHECK(lock->permits_used == 2 && lock->holders.len == 2);
    CHECK(locktab_counts(lt, KIND_SEMAPHORE).permits == 2);
    locktab_check(lt);
    /* Loading: permits past the limit cannot hold. */
    Holder extra = *locktab_holder(lock);
    extra.token = 99;
    extra.permits = 4; /* beside 2: one past the limit of 5 */
    CHECK(locktab_load_holder(lt, KIND_SEMAPHORE, "p", &extra, &now) == LOCK_BUSY);
    locktab_free(lt);
}

/* Field by field: the bytes past an id's NUL, and the padding, are no part of a write. */
static bool same_writes(const ValueWrites *a, const ValueWrites *b)
{
    if (a->len != b->len)
        return false;
    for (uint8_t i = 0; i < a->len; i++)
        if (a->at[i].version != b->at[i].version || memcmp(a->at[i].digest, b->at[i].digest, VALWRITE_DIGEST_BYTES) ||
            strcmp(a->at[i].request_id, b->at[i].request_id))
            return false;
    return true;
}

/* A lock's value: only its writer, now, writes it (not a reader, not a lease
 * that ended or ran out, not another lock's); if_version; it outlives the
 * writer and keeps the name from being forgotten until null is written. */
static void test_values(void)
{
    Locktab *lt = table(100);
    uint32_t left;
    const Lock *lock;
    values_changed = 0;
    ValueArgs set = {"{\"step\":1}", false, 0, "k", {NULL, NULL}, NULL, NULL};
    CHECK(locktab_set_value(lt, "v", ids[0], &set, &now, &lock) == LOCK_NOT_HOLDER && lock == NULL);
    CHECK(take(lt, KIND_LOCK, "v", 0, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    uint64_t token = hold->token, index = locktab_index(lt, KIND_LOCK, "v");
    CHECK(locktab_set_value(lt, "v", ids[0], &set, &now, &lock) == LOCK_OK);
    CHECK(!strcmp(lock->value.text, "{\"step\":1}") && lock->value.version == 1 && lock->value.token == token);
    CHECK(!strcmp(lock->value.key, "k") && values_changed == 1 && locktab_index(lt, KIND_LOCK, "v") > index);
    ValueArgs stale = {"2", true, 0, NULL, {NULL, NULL}, NULL, NULL};
    CHECK(locktab_set_value(lt, "v", ids[0], &stale, &now, &lock) == LOCK_VERSION_MISMATCH);
    stale.if_version = 1;
    CHECK(locktab_set_value(lt, "v", ids[0], &stale, &now, &lock) == LOCK_OK && lock->value.version == 2);
    CHECK(!strcmp(lock->value.text, "2") && lock->value.key == NULL);
    /* A request_id: its repeat (same grant, same digest) changes nothing, whatever its
     * if_version; with another digest (another value or key) it is the id reused, and changes
     * nothing either; another id, or none, is a new write. */
    static const uint8_t D1[VALWRITE_DIGEST_BYTES] = {1}, D2[VALWRITE_DIGEST_BYTES] = {2};
    ValueArgs once = {"3", true, 2, "k", {NULL, NULL}, "r-1", D1};
    CHECK(locktab_set_value(lt, "v", ids[0], &once, &now, &lock) == LOCK_OK && lock->value.version == 3);
    CHECK(lock->value.writes.len == 1 && !strcmp(lock->value.writes.at[0].request_id, "r-1"));
    CHECK(lock->value.writes.at[0].version == 3 && values_changed == 3);
    CHECK(locktab_set_value(lt, "v", ids[0], &once, &now, &lock) == LOCK_REPLAYED && lock->value.version == 3);
    const ValueWrite *was = locktab_value_write(&lock->value, locktab_holder(lock), "r-1");
    CHECK(was && was->version == 3 && !memcmp(was->digest, D1, sizeof D1) && values_changed == 3);
    CHECK(!locktab_value_write(&lock->value, locktab_holder(lock), NULL));
    CHECK(!locktab_value_write(&lock->value, locktab_holder(lock), "r-2"));
    once.digest = D2;
    CHECK(locktab_set_value(lt, "v", ids[0], &once, &now, &lock) == LOCK_REQUEST_ID_REUSED);
    CHECK(lock->value.version == 3 && !strcmp(lock->value.text, "3") && values_changed == 3);
    once.digest = D1;
    once.request_id = "r-2";
    once.if_version = 3;
    CHECK(locktab_set_value(lt, "v", ids[0], &once, &now, &lock) == LOCK_OK && lock->value.version == 4);
    once.request_id = "r-1"; /* an older write's late attempt: still remembered, and answered as it was */
    CHECK(locktab_set_value(lt, "v", ids[0], &once, &now, &lock) == LOCK_REPLAYED && lock->value.version == 4);
    stale.if_version = 4; /* none: a new write, which keeps the ids */
    CHECK(locktab_set_value(lt, "v", ids[0], &stale, &now, &lock) == LOCK_OK && lock->value.version == 5);
    CHECK(lock->value.writes.len == 2 && locktab_value_write(&lock->value, locktab_holder(lock), "r-1")->version == 3);
    /* Another lock's lease, a semaphore's: not this lock's writer. */
    CHECK(take(lt, KIND_LOCK, "w", 1, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    CHECK(locktab_set_value(lt, "v", ids[1], &set, &now, &lock) == LOCK_NOT_HOLDER && lock->value.version == 5);
    locktab_check(lt);
    /* Released: the value stays (the next holder reads it), and so does the name. */
    CHECK(locktab_release(lt, KIND_LOCK, "v", ids[0], NULL, &now, &left) == LOCK_OK);
    CHECK(locktab_set_value(lt, "v", ids[0], &set, &now, &lock) == LOCK_NOT_HOLDER && lock->value.version == 5);
    for (int i = 0; i < 2; i++) { /* "w" expires at the first tick, and is forgotten at the second */
        now.mono_ms += 120000;
        now.wall_ms += 120000;
        locktab_tick(lt, &now);
    }
    CHECK(locktab_get(lt, KIND_LOCK, "w") == NULL && (lock = locktab_get(lt, KIND_LOCK, "v")) != NULL);
    CHECK(!strcmp(lock->value.text, "2"));
    locktab_check(lt);
    /* Readers may not write it; a reader's lease is refused and nothing changes. */
    CHECK(take(lt, KIND_LOCK, "v", 2, MODE_READ, 0, 0, 0) == LOCK_OK);
    CHECK(locktab_set_value(lt, "v", ids[2], &set, &now, &lock) == LOCK_NOT_HOLDER && lock->value.version == 5);
    CHECK(locktab_release(lt, KIND_LOCK, "v", ids[2], NULL, &now, &left) == LOCK_OK);
    /* A writer that ran out writes nothing, even before the tick ended it. */
    CHECK(take(lt, KIND_LOCK, "v", 3, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    Now late = now;
    late.mono_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    late.wall_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    CHECK(locktab_set_value(lt, "v", ids[3], &set, &late, &lock) == LOCK_NOT_HOLDER && lock->value.version == 5);
    now = late;
    /* Null lets the name go once it is idle. */
    CHECK(take(lt, KIND_LOCK, "v", 4, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    ValueArgs clear = {NULL, false, 0, NULL, {NULL, NULL}, NULL, NULL};
    CHECK(locktab_set_value(lt, "v", ids[4], &clear, &now, &lock) == LOCK_OK && lock->value.text == NULL);
    CHECK(lock->value.version == 6 && lock->value.token == hold->token);
    CHECK(locktab_release(lt, KIND_LOCK, "v", ids[4], NULL, &now, &left) == LOCK_OK);
    now.mono_ms += 120000;
    now.wall_ms += 120000;
    locktab_tick(lt, &now);
    CHECK(locktab_get(lt, KIND_LOCK, "v") == NULL);
    /* Loaded from storage: kept, and the name is not idle. */
    LockValue stored = {"[1,2]", 7, 3, NULL, 1700000000000, {NULL, NULL}, {NULL, 0}};
    CHECK(valwrites_parse("5 000102030405060708090a0b0c0d0e0f w-5\n7 ffffffffffffffffffffffffffffffff w 7\n", 7,
                          &stored.writes));
    CHECK(locktab_load_value(lt, "loaded", &stored, &now) == LOCK_OK);
    lock = locktab_get(lt, KIND_LOCK, "loaded");
    CHECK(lock && !strcmp(lock->value.text, "[1,2]") && lock->value.version == 7 && lock->last_token >= 3);
    const ValueWrites *kept = &lock->value.writes;
    CHECK(kept->len == 2 && kept->at != stored.writes.at && same_writes(kept, &stored.writes));
    CHECK(kept->at[0].version == 5 && kept->at[0].digest[15] == 0x0f && !strcmp(kept->at[1].request_id, "w 7"));
    valwrites_clear(&stored.writes);
    now.mono_ms += 120000;
    now.wall_ms += 120000;
    locktab_tick(lt, &now);
    CHECK(locktab_get(lt, KIND_LOCK, "loaded") != NULL);
    locktab_check(lt);
    locktab_free(lt);
}

/* The writes a value remembers (valwrites.h): the last VALWRITES_MAX of the
 * grant that wrote last, oldest first, each with the version it made; a
 * write past the bound drops the oldest; a write without a request_id keeps
 * the list; another grant's write starts a new one. Their text for storage
 * reads back the same, and a malformed one is refused. */
static void test_value_writes(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    uint32_t left;
    char rid[VALWRITES_MAX + 8][16];
    uint8_t digest[VALWRITES_MAX + 8][VALWRITE_DIGEST_BYTES] = {{0}};
    CHECK(take(lt, KIND_LOCK, "b", 5, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    for (int i = 0; i < VALWRITES_MAX + 4; i++) { /* versions 1..20 */
        snprintf(rid[i], sizeof rid[i], "id-%d", i);
        digest[i][0] = (uint8_t)i;
        ValueArgs a = {"1", false, 0, "k", {NULL, NULL}, rid[i], digest[i]};
        CHECK(locktab_set_value(lt, "b", ids[5], &a, &now, &lock) == LOCK_OK);
        locktab_check(lt);
    }
    const ValueWrites *ws = &lock->value.writes;
    CHECK(lock->value.version == VALWRITES_MAX + 4 && ws->len == VALWRITES_MAX);
    for (int i = 0; i < VALWRITES_MAX; i++) /* the newest 16, oldest first: id-4 (version 5) .. id-19 (20) */
        CHECK(!strcmp(ws->at[i].request_id, rid[i + 4]) && ws->at[i].version == (uint64_t)i + 5 &&
              ws->at[i].digest[0] == i + 4);
    /* The oldest kept is answered; one past the bound is not recognised: its if_version refuses it. */
    ValueArgs late = {"1", true, 4, "k", {NULL, NULL}, rid[4], digest[4]};
    CHECK(locktab_set_value(lt, "b", ids[5], &late, &now, &lock) == LOCK_REPLAYED);
    late = (ValueArgs){"1", true, 3, "k", {NULL, NULL}, rid[3], digest[3]};
    CHECK(!locktab_value_write(&lock->value, locktab_holder(lock), rid[3]));
    CHECK(locktab_set_value(lt, "b", ids[5], &late, &now, &lock) == LOCK_VERSION_MISMATCH);
    /* Without one it is a new write (what if_version adds): it joins the list, the oldest goes. */
    late.check_version = false;
    CHECK(locktab_set_value(lt, "b", ids[5], &late, &now, &lock) == LOCK_OK && lock->value.version == 21);
    CHECK(ws->len == VALWRITES_MAX && !strcmp(ws->at[0].request_id, rid[5]));
    CHECK(!strcmp(ws->at[VALWRITES_MAX - 1].request_id, rid[3]) && ws->at[VALWRITES_MAX - 1].version == 21);
    CHECK(!locktab_value_write(&lock->value, locktab_holder(lock), rid[4]));
    /* A write without a request_id keeps the list (its versions need not be consecutive). */
    ValueArgs plain = {"2", false, 0, "k", {NULL, NULL}, NULL, NULL};
    CHECK(locktab_set_value(lt, "b", ids[5], &plain, &now, &lock) == LOCK_OK && lock->value.version == 22);
    CHECK(ws->len == VALWRITES_MAX && locktab_value_write(&lock->value, locktab_holder(lock), rid[19])->version == 20);
    /* The text storage keeps reads back the same; a value at an older version cannot have it. */
    char text[VALWRITES_TEXT_MAX];
    size_t n = valwrites_format(ws, text);
    CHECK(n == strlen(text) && n > 0 && n < VALWRITES_TEXT_MAX && !strncmp(text, "6 05000000", 10));
    ValueWrites back;
    CHECK(valwrites_parse(text, 22, &back) && same_writes(&back, ws));
    valwrites_clear(&back);
    CHECK(!valwrites_parse(text, 20, &back) && back.len == 0 && back.at == NULL);
    /* Another grant: the list is not its own (the same id is a new write), and its write starts a new one. */
    CHECK(locktab_release(lt, KIND_LOCK, "b", ids[5], NULL, &now, &left) == LOCK_OK);
    CHECK(take(lt, KIND_LOCK, "b", 6, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    CHECK(!locktab_value_write(&lock->value, hold, rid[19]));
    ValueArgs again = {"1", true, 22, "k", {NULL, NULL}, rid[19], digest[19]};
    CHECK(locktab_set_value(lt, "b", ids[6], &again, &now, &lock) == LOCK_OK && lock->value.version == 23);
    CHECK(ws->len == 1 && !strcmp(ws->at[0].request_id, rid[19]) && ws->at[0].version == 23);
    CHECK(lock->value.token == hold->token);
    CHECK(locktab_set_value(lt, "b", ids[6], &again, &now, &lock) == LOCK_REPLAYED);
    /* And a grant's write without one leaves no list of the grant before. */
    CHECK(locktab_release(lt, KIND_LOCK, "b", ids[6], NULL, &now, &left) == LOCK_OK);
    CHECK(take(lt, KIND_LOCK, "b", 7, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    CHECK(locktab_set_value(lt, "b", ids[7], &plain, &now, &lock) == LOCK_OK && ws->len == 0 && ws->at == NULL);
    locktab_check(lt);
    locktab_free(lt);

    /* Malformed text is refused whole; none, or an empty text, is an empty list. */
    static const char *const BAD[] = {
        "1 000102030405060708090a0b0c0d0e0f a",                                          /* no newline */
        "1 000102030405060708090a0b0c0d0e0F a\n",                                        /* upper-case hex */
        "1 000102030405060708090a0b0c0d0e a\n",                                          /* a short digest */
        "1 000102030405060708090a0b0c0d0e0f \n",                                         /* an empty id */
        "1 000102030405060708090a0b0c0d0e0f a\tb\n",                                     /* a control character */
        "0 000102030405060708090a0b0c0d0e0f a\n",                                        /* version 0 */
        "4 000102030405060708090a0b0c0d0e0f a\n",                                        /* past the value's 3 */
        "2 000102030405060708090a0b0c0d0e0f a\n2 000102030405060708090a0b0c0d0e0f b\n",  /* not rising */
        "1 000102030405060708090a0b0c0d0e0f a\n2 000102030405060708090a0b0c0d0e0f a\n",  /* an id twice */
        "18446744073709551616 000102030405060708090a0b0c0d0e0f a\n",                     /* past 64 bits */
        "x 000102030405060708090a0b0c0d0e0f a\n",
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++)
        CHECK(!valwrites_parse(BAD[i], 3, NULL));
    CHECK(valwrites_parse(NULL, 3, NULL) && valwrites_parse("", 3, &back) && back.len == 0 && back.at == NULL);
    char long_id[256];
    int at = snprintf(long_id, sizeof long_id, "1 000102030405060708090a0b0c0d0e0f ");
    memset(long_id + at, 'x', VALWRITE_ID_MAX);
    strcpy(long_id + at + VALWRITE_ID_MAX, "\n");
    CHECK(valwrites_parse(long_id, 1, NULL));
    strcpy(long_id + at + VALWRITE_ID_MAX, "x\n"); /* 65 bytes */
    CHECK(!valwrites_parse(long_id, 1, NULL));
    char many[VALWRITES_TEXT_MAX + 64] = "";
    for (int i = 1; i <= VALWRITES_MAX + 1; i++) /* one line past the bound */
        snprintf(many + strlen(many), sizeof many - strlen(many), "%d 000102030405060708090a0b0c0d0e0f id%d\n", i, i);
    CHECK(!valwrites_parse(many, VALWRITES_MAX + 1, NULL));
    *strrchr(many, '1') = '\0'; /* cut inside the 17th line's id: still refused (no newline) */
    CHECK(!valwrites_parse(many, VALWRITES_MAX + 1, NULL));
}

/* Lock-delay: after an unclean end (expiry, revocation) nobody is granted
 * the lock until the delay has passed; waiters keep their places; a
 * release starts none. */
static void test_lock_delay(void)
{
    Locktab *lt = table(100);
    uint32_t left;
    CHECK(take(lt, KIND_LOCK, "d", 0, MODE_WRITE, 0, 0, 500) == LOCK_OK && hold->lock_delay_ms == 500);
    CHECK(take(lt, KIND_LOCK, "d", 1, MODE_WRITE, 0, 100000, 0) == LOCK_QUEUED);
    CHECK(take(lt, KIND_LOCK, "d", 2, MODE_READ, 0, 100000, 0) == LOCK_QUEUED);
    int64_t expiry = now.wall_ms + 1000;
    now.mono_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    now.wall_ms += 1000 + LOCKTAB_DEADLINE_SLACK_MS;
    locktab_tick(lt, &now);
    const Lock *lock = locktab_get(lt, KIND_LOCK, "d");
    CHECK(rec.ngranted == 0 && !locktab_is_held(lock) && locktab_delayed(lock, &now));
    CHECK(lock->delay_until_ms == expiry + LOCKTAB_DEADLINE_SLACK_MS + 500);
    CHECK(take(lt, KIND_LOCK, "d", 3, MODE_WRITE, 0, 0, 0) == LOCK_BUSY);
    CHECK(locktab_delays(lt) == 1);
    locktab_check(lt);
    /* Not a moment before delay_until_ms, on the boot clock with its slack. */
    now.mono_ms += 500 + LOCKTAB_DEADLINE_SLACK_MS - 1;
    now.wall_ms += 500;
    CHECK(now.wall_ms == lock->delay_until_ms);
    locktab_tick(lt, &now);
    CHECK(rec.ngranted == 0);
    now.mono_ms += 1;
    now.wall_ms += 1;
    CHECK(locktab_next_timeout_ms(lt, &now) == 0);
    locktab_tick(lt, &now);
    CHECK(rec.ngranted == 1 && rec.granted[0] == 1 && !locktab_delayed(lock, &now) && lock->delay_until_ms == 0);
    locktab_check(lt);
    /* A clean release: no delay, the reader is granted at once. */
    CHECK(locktab_release(lt, KIND_LOCK, "d", ids[1], NULL, &now, &left) == LOCK_OK);
    CHECK(rec.ngranted == 2 && rec.granted[1] == 2 && locktab_delays(lt) == 1);
    /* A revocation: the delay of the lease revoked. */
    CHECK(locktab_release(lt, KIND_LOCK, "d", ids[2], NULL, &now, &left) == LOCK_OK);
    CHECK(take(lt, KIND_LOCK, "d", 4, MODE_READ, 0, 0, 300) == LOCK_OK);
    CHECK(take(lt, KIND_LOCK, "d", 5, MODE_READ, 0, 0, 0) == LOCK_OK);
    CHECK(locktab_revoke(lt, KIND_LOCK, "d", NULL, &now) == LOCK_OK && !locktab_is_held(lock));
    CHECK(locktab_delayed(lock, &now) && lock->delay_until_ms == now.wall_ms + 300);
    CHECK(locktab_why_not(lt, KIND_LOCK, "d", ids[5]) == REASON_REVOKED);
    CHECK(take(lt, KIND_LOCK, "d", 6, MODE_READ, 0, 0, 0) == LOCK_BUSY);
    /* The delay is over at the next operation even before the tick. */
    Now later = {now.mono_ms + 300 + LOCKTAB_DEADLINE_SLACK_MS, now.wall_ms + 300 + LOCKTAB_DEADLINE_SLACK_MS};
    now = later;
    CHECK(take(lt, KIND_LOCK, "d", 6, MODE_READ, 0, 0, 0) == LOCK_OK);
    locktab_check(lt);
    /* Stored: what is left by the wall clock, never more than the longest delay. */
    CHECK(locktab_load(lt, KIND_LOCK, "stored", 3, 0, now.wall_ms + 250, &now) == LOCK_OK);
    CHECK(locktab_load(lt, KIND_LOCK, "far", 3, 0, now.wall_ms + 10 * LOCKTAB_DELAY_MAX_MS, &now) == LOCK_OK);
    CHECK(locktab_delayed(locktab_get(lt, KIND_LOCK, "stored"), &now));
    CHECK(locktab_get(lt, KIND_LOCK, "far")->delay_until_ms == now.wall_ms + LOCKTAB_DELAY_MAX_MS);
    CHECK(take(lt, KIND_LOCK, "stored", 7, MODE_WRITE, 0, 0, 0) == LOCK_BUSY);
    locktab_check(lt);
    locktab_free(lt);
}

/* Stored readers and permits load beside their name; one that cannot hold
 * beside what loaded before it is refused (the gateway drops it). */
static void test_load_shared(void)
{
    Locktab *lt = table(10);
    Holder r1 = from_another_boot(500, 1), r2 = r1, w = r1;
    r1.mode = r2.mode = MODE_READ;
    r2.token = 8;
    memset(r2.lease, 4, LEASE_ID_BYTES);
    w.token = 9;
    memset(w.lease, 5, LEASE_ID_BYTES);
    CHECK(locktab_load(lt, KIND_LOCK, "r", 6, 0, 0, &now) == LOCK_OK);
    CHECK(locktab_load_holder(lt, KIND_LOCK, "r", &r1, &now) == LOCK_OK);
    CHECK(locktab_load_holder(lt, KIND_LOCK, "r", &r2, &now) == LOCK_OK);
    CHECK(locktab_load_holder(lt, KIND_LOCK, "r", &w, &now) == LOCK_BUSY);
    const Lock *lock = locktab_get(lt, KIND_LOCK, "r");
    CHECK(lock->holders.len == 2 && lock->mode == MODE_READ && lock->last_token == 8);
    CHECK(locktab_last_token(lt) == 8);
    CHECK(locktab_load(lt, KIND_SEMAPHORE, "s", 9, 1, 0, &now) == LOCK_OK);
    CHECK(locktab_load_holder(lt, KIND_SEMAPHORE, "s", &w, &now) == LOCK_OK);
    CHECK(locktab_load_holder(lt, KIND_SEMAPHORE, "s", &r2, &now) == LOCK_BUSY); /* past the limit */
    CHECK(locktab_held(lt) == 3);
    locktab_check(lt);
    locktab_free(lt);
}

/* An undelivered answer undoes its grant only when no other answer of it (a
 * request_id's replay) was delivered or is still on its way. */
static void test_answers_of_a_grant(void)
{
    Locktab *lt = table(100);
    const Lock *lock;
    Waiter *w;
    memset(ids[20], 21, LEASE_ID_BYTES);
    AcquireArgs first = {"alice", NULL, 1000, 0, NULL, ids[20], "req-a", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "a", &first, NULL, &now, &lock, &hold, &w) == LOCK_OK);
    locktab_answer_started(lt, KIND_LOCK, "a", ids[20]);
    CHECK(locktab_acquire(lt, KIND_LOCK, "a", &first, NULL, &now, &lock, &hold, &w) == LOCK_REPLAYED);
    locktab_answer_started(lt, KIND_LOCK, "a", ids[20]);
    /* The first answer is lost while the replay's is on its way: kept. */
    CHECK(!locktab_answer_ended(lt, KIND_LOCK, "a", ids[20], false));
    /* The replay's is lost too: nothing of the grant reached anyone. */
    CHECK(locktab_answer_ended(lt, KIND_LOCK, "a", ids[20], false));
    /* Delivered once: a later lost answer undoes nothing. */
    CHECK(locktab_acquire(lt, KIND_LOCK, "a", &first, NULL, &now, &lock, &hold, &w) == LOCK_REPLAYED);
    locktab_answer_started(lt, KIND_LOCK, "a", ids[20]);
    locktab_answer_started(lt, KIND_LOCK, "a", ids[20]);
    CHECK(!locktab_answer_ended(lt, KIND_LOCK, "a", ids[20], true));
    CHECK(!locktab_answer_ended(lt, KIND_LOCK, "a", ids[20], false));
    /* A re-entry's answers count for the re-entry. */
    AcquireArgs again = {"alice", NULL, 0, 0, ids[20], NULL, "req-b", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 0, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_LOCK, "a", &again, NULL, &now, &lock, &hold, &w) == LOCK_OK &&
          locktab_holder(lock)->count == 2);
    locktab_answer_started(lt, KIND_LOCK, "a", ids[20]);
    CHECK(locktab_answer_ended(lt, KIND_LOCK, "a", ids[20], false));
    /* Another lease, the same name of the other kind, or a free lock: nothing to undo. */
    CHECK(!locktab_answer_ended(lt, KIND_LOCK, "a", ids[21], false));
    CHECK(!locktab_answer_ended(lt, KIND_SEMAPHORE, "a", ids[20], false));
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "a", ids[20], NULL, &now, &left) == LOCK_OK && left == 1);
    CHECK(locktab_release(lt, KIND_LOCK, "a", ids[20], NULL, &now, &left) == LOCK_OK && left == 0);
    CHECK(!locktab_answer_ended(lt, KIND_LOCK, "a", ids[20], false));
    /* Each permit (and each reader) has answers of its own: one delivered says
     * nothing of another's. */
    memset(ids[22], 23, LEASE_ID_BYTES);
    AcquireArgs p1 = {"p1", NULL, 1000, 0, NULL, ids[21], "req-p1", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 2, 0, NULL};
    AcquireArgs p2 = {"p2", NULL, 1000, 0, NULL, ids[22], "req-p2", NULL, {NULL, NULL}, MODE_WRITE, false, 0, 2, 0, NULL};
    CHECK(locktab_acquire(lt, KIND_SEMAPHORE, "s", &p1, NULL, &now, &lock, &hold, &w) == LOCK_OK);
    locktab_answer_started(lt, KIND_SEMAPHORE, "s", ids[21]);
    CHECK(locktab_acquire(lt, KIND_SEMAPHORE, "s", &p2, NULL, &now, &lock, &hold, &w) == LOCK_OK);
    locktab_answer_started(lt, KIND_SEMAPHORE, "s", ids[22]);
    CHECK(!locktab_answer_ended(lt, KIND_SEMAPHORE, "s", ids[21], true));
    CHECK(locktab_answer_ended(lt, KIND_SEMAPHORE, "s", ids[22], false));
    CHECK(!locktab_answer_ended(lt, KIND_LOCK, "s", ids[22], false));
    locktab_check(lt);
    locktab_free(lt);
}

/* Issue 39: a renewal with a wrong lease compared it with every one of a
 * lock's 16,000 readers (and walked them all for expiries). Lookups go
 * through the lease index, and the walk happens only when a holder may be
 * due: the holders looked at stay about one per call. */
#define CROWD 16000
static void test_lease_lookups_do_not_walk_the_holders(void)
{
    static uint8_t leases[CROWD][LEASE_ID_BYTES];
    memset(&rec, 0, sizeof rec);
    LocktabLimits limits = {1000, 1000, 100, 128, 60000};
    LocktabHooks hooks = {&rec, on_changed, on_granted, on_timed_out, on_forgotten, NULL, NULL, NULL, NULL};
    Locktab *lt = locktab_new(&limits, &hooks);
    const Lock *lock;
    const Holder *h;
    Waiter *w;
    bool granted = true;
    for (uint32_t i = 0; i < CROWD; i++) {
        /* As leaseid makes them: random-looking, here from a counter. */
        uint64_t v = (i + 1) * 0x9e3779b97f4a7c15ULL, u = ~v * 0xbf58476d1ce4e5b9ULL;
        memcpy(leases[i], &v, 8);
        memcpy(leases[i] + 8, &u, 8);
        AcquireArgs a = {"reader", NULL, 60000, 0, NULL, leases[i], NULL, NULL, {NULL, NULL}, MODE_READ, true, 0, 0, 0, NULL};
        granted &= locktab_acquire(lt, KIND_LOCK, "crowd", &a, NULL, &now, &lock, &h, &w) == LOCK_OK;
    }
    CHECK(granted && holders_of(lt, KIND_LOCK, "crowd") == CROWD);
    /* Another lock's lease is not this lock's, even found by its id. */
    CHECK(take(lt, KIND_LOCK, "elsewhere", 0, MODE_WRITE, 0, 0, 0) == LOCK_OK);
    uint64_t before = locktab_holder_visits(lt);
    uint8_t wrong[LEASE_ID_BYTES];
    size_t refused = 0, renewed = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        memset(wrong, (int)(i & 0xff), sizeof wrong);
        memcpy(wrong, &i, sizeof i);
        refused += locktab_renew(lt, KIND_LOCK, "crowd", wrong, 0, &now, &lock, &h) == LOCK_NOT_HOLDER;
        renewed += locktab_renew(lt, KIND_LOCK, "crowd", leases[i * 16], 0, &now, &lock, &h) == LOCK_OK;
    }
    CHECK(refused == 1000 && renewed == 1000);
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", ids[0], 0, &now, &lock, &h) == LOCK_NOT_HOLDER);
    uint64_t visits = locktab_holder_visits(lt) - before;
    /* 2,001 calls; a walk of the holders would be 16,000 visits for each. */
    CHECK(visits <= 2001 * 4);
    /* A renewal that shortens its lease lowers the bound: once it is due, the
     * next call on the lock ends it (one walk), before answering anything. */
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", leases[5], 10, &now, &lock, &h) == LOCK_OK);
    Now later = {now.mono_ms + 20, now.wall_ms + 20};
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", leases[6], 0, &later, &lock, &h) == LOCK_OK);
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", leases[5], 0, &later, &lock, &h) == LOCK_NOT_HOLDER);
    CHECK(locktab_why_not(lt, KIND_LOCK, "crowd", leases[5]) == REASON_SUPERSEDED); /* expired, newer tokens since */
    CHECK(holders_of(lt, KIND_LOCK, "crowd") == CROWD - 1);
    before = locktab_holder_visits(lt);
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", wrong, 0, &later, &lock, &h) == LOCK_NOT_HOLDER);
    CHECK(locktab_holder_visits(lt) - before <= 4); /* the walk made the bound exact again */
    /* Releases find theirs too, the middle one's included; then it is gone. */
    uint32_t left;
    CHECK(locktab_release(lt, KIND_LOCK, "crowd", leases[CROWD / 2], NULL, &now, &left) == LOCK_OK && left == 0);
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", leases[CROWD / 2], 0, &now, &lock, &h) == LOCK_NOT_HOLDER);
    CHECK(locktab_why_not(lt, KIND_LOCK, "crowd", leases[CROWD / 2]) == REASON_RELEASED);
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", leases[CROWD - 1], 0, &now, &lock, &h) == LOCK_OK);
    CHECK(locktab_held_by(lt, KIND_LOCK, "crowd", leases[0], &now) != NULL);
    CHECK(locktab_held_by(lt, KIND_LOCK, "elsewhere", leases[0], &now) == NULL);
    CHECK(locktab_revoke(lt, KIND_LOCK, "crowd", NULL, &now) == LOCK_OK && holders_of(lt, KIND_LOCK, "crowd") == 0);
    CHECK(locktab_renew(lt, KIND_LOCK, "crowd", leases[1], 0, &now, &lock, &h) == LOCK_NOT_HOLDER);
    CHECK(locktab_renew(lt, KIND_LOCK, "elsewhere", ids[0], 0, &now, &lock, &h) == LOCK_OK);
    locktab_check(lt);
    locktab_free(lt);
}

int main(void)
{
    test_lease_lookups_do_not_walk_the_holders();
    test_answers_of_a_grant();
    test_request_id_replays();
    test_fifo_and_one_wakeup();
    test_waking();
    test_expiry_hands_over();
    test_wait_timeout_and_cancel();
    test_reentry_and_renew();
    test_limits();
    test_load();
    test_load_by_wall_clock_keeps_the_announced_expiry();
    test_readings_apart_keep_the_announced_times();
    test_forget_idle();
    test_no_ok_after_deadline();
    test_no_grant_after_wait();
    test_history_newest_kept_at_restart();
    test_readers_fifo();
    test_writer_gives_up();
    test_reentry_modes();
    test_semaphore();
    test_permits();
    test_values();
    test_value_writes();
    test_lock_delay();
    test_load_shared();
    return check_report("locktab");
}
