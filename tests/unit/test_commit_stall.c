/*
 * Unit test of the commit writer's stall (commit.h) over a store that refuses
 * writes for a while (STORE_REFUSED, as etcd does under its NOSPACE alarm):
 * the writer keeps the batch and tries it again, the loop sees the stall, the
 * answers held for the batch fail while the holds without a failed callback
 * stay, a read held for the stall's fenced read is ready after one made after
 * it, the batch applies once the store takes it, and a stall that is given up
 * or whose fenced read fails fails the batch.
 */
#include <poll.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "store/commit.h"

typedef struct Fake {
    Store base;
    _Atomic int refusals;      /* commits still to refuse; -1: refuse for ever */
    _Atomic int commits_tried;
    _Atomic int barriers;
    _Atomic bool barrier_fails;
} Fake;

static int fake_commit(Store *s, const StoreBatch *b)
{
    (void)b;
    Fake *f = (Fake *)s;
    atomic_fetch_add(&f->commits_tried, 1);
    int left = atomic_load(&f->refusals);
    if (left == 0)
        return 0;
    if (left > 0)
        atomic_fetch_sub(&f->refusals, 1);
    return STORE_REFUSED;
}

static int fake_barrier(Store *s)
{
    Fake *f = (Fake *)s;
    atomic_fetch_add(&f->barriers, 1);
    return atomic_load(&f->barrier_fails) ? -1 : 0;
}

static int fake_load(Store *s, const StoreLoad *cb, uint64_t *t) { (void)s, (void)cb, *t = 0; return 0; }
static void fake_close(Store *s) { (void)s; }
static const char *fake_error(const Store *s) { (void)s; return "etcd refuses writes (alarm NOSPACE): database space exceeded"; }

static const StoreOps FAKE_OPS = {.load = fake_load, .commit = fake_commit, .barrier = fake_barrier,
                                  .close = fake_close, .error = fake_error};

typedef struct Probe {
    CommitHold hold;
    int ready, failed;
} Probe;

static void on_ready(CommitHold *h) { ((Probe *)(void *)h)->ready++; }
static void on_failed(CommitHold *h) { ((Probe *)(void *)h)->failed++; }

/* Waits for the writer's next word (bounded), then collects: commit_done's result. */
static int next(Commit *c)
{
    struct pollfd p = {commit_fd(c), POLLIN, 0};
    CHECK(poll(&p, 1, 10000) == 1);
    return commit_done(c);
}

/* Until the loop sees the stall (bounded). */
static bool wait_stalled(Commit *c, char *why, size_t len)
{
    for (int i = 0; i < 100; i++) {
        if (commit_stalled(c, why, len))
            return true;
        next(c);
    }
    return false;
}

static void test_stall_then_apply(void)
{
    Fake f = {.base = {&FAKE_OPS}, .refusals = 3};
    char err[256], why[256];
    Commit *c = commit_new(&f.base, err, sizeof err);
    CHECK(c != NULL);
    commit_counter(c, 7); /* a batch with a row */
    Probe answer = {.hold = {.ready = on_ready, .failed = on_failed}};
    Probe event = {.hold = {.ready = on_ready}}; /* no failed callback: an event waiting for its batch */
    commit_hold(c, &answer.hold);
    commit_hold(c, &event.hold);
    commit_flush(c);
    CHECK(wait_stalled(c, why, sizeof why));
    CHECK(strstr(why, "NOSPACE") != NULL);
    commit_stall_fail_answers(c);
    CHECK(answer.failed == 1 && answer.ready == 0);
    CHECK(event.failed == 0 && event.ready == 0 && commit_held(&event.hold));
    /* A read held while stalled: ready after a fenced read made after it. */
    int before = atomic_load(&f.barriers);
    Probe read = {.hold = {.ready = on_ready, .failed = on_failed}};
    commit_stall_hold(c, &read.hold);
    CHECK(commit_held(&read.hold));
    for (int i = 0; i < 100 && !read.ready; i++)
        next(c);
    CHECK(read.ready == 1 && read.failed == 0);
    CHECK(atomic_load(&f.barriers) > before);
    /* The store takes the batch after its refusals (one a second): the event is published. */
    for (int i = 0; i < 100 && commit_stalled(c, why, sizeof why); i++)
        CHECK(next(c) == 0);
    CHECK(!commit_stalled(c, why, sizeof why));
    for (int i = 0; i < 100 && !event.ready; i++)
        CHECK(next(c) == 0);
    CHECK(event.ready == 1);
    CHECK(atomic_load(&f.commits_tried) == 4);
    commit_stall_end(c);
    CHECK(commit_sync(c) == 0);
    commit_free(c);
}

static void test_given_up(void)
{
    Fake f = {.base = {&FAKE_OPS}, .refusals = -1};
    char err[256], why[256];
    Commit *c = commit_new(&f.base, err, sizeof err);
    commit_counter(c, 7);
    commit_flush(c);
    CHECK(wait_stalled(c, why, sizeof why));
    commit_stall_give_up(c);
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++)
        rc = next(c);
    CHECK(rc == -1);
    commit_free(c);
}

static void test_a_failed_fenced_read_fails_the_batch(void)
{
    Fake f = {.base = {&FAKE_OPS}, .refusals = -1};
    char err[256], why[256];
    Commit *c = commit_new(&f.base, err, sizeof err);
    commit_counter(c, 7);
    commit_flush(c);
    CHECK(wait_stalled(c, why, sizeof why));
    atomic_store(&f.barrier_fails, true); /* leadership cannot be confirmed */
    Probe read = {.hold = {.ready = on_ready, .failed = on_failed}};
    commit_stall_hold(c, &read.hold);
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++)
        rc = next(c);
    CHECK(rc == -1);
    CHECK(read.ready == 0 && read.failed == 1);
    commit_free(c);
}

int main(void)
{
    test_stall_then_apply();
    test_given_up();
    test_a_failed_fenced_read_fails_the_batch();
    return check_report("commit_stall");
}
