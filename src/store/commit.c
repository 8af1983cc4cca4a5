/* commit — group commit with one writer thread; see commit.h. */
#include "store/commit.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/leasehist.h"
#include "core/valwrites.h"
#include "store/arena.h"

const double COMMIT_LATENCY_BOUNDS_MS[COMMIT_LATENCY_BUCKETS] = {0.25, 0.5, 1,   2,   5,    10,
                                                                 25,   50,  100, 250, 1000, 5000};

typedef struct Batch {
    StoreRecord *records; /* in the order they were recorded (store.h) */
    size_t n, cap;
    uint64_t audit_gone_below; /* see StoreBatch */
    Arena strings; /* every string the records point to */
    uint64_t counter; /* see StoreBatch.counter */
    DList holds; /* CommitHold.link, in arrival order */
    bool snapshot;  /* a copy of the store is wanted once the batch is durable */
    int result;     /* set by the writer: 0 committed, -1 failed */
    double seconds; /* how long the commit took */
    int snap_fd;    /* set by the writer with snapshot: the copy (owned), or -1 */
    uint64_t snap_size;
    char snap_err[256];
} Batch;

/* Who owns the inflight batch. IDLE: the loop (nothing in flight). HANDED:
 * the writer. DONE: the loop again, which collects the result. Each state
 * store publishes the batch contents written before it (seq_cst). */
enum { INFLIGHT_IDLE, INFLIGHT_HANDED, INFLIGHT_DONE };

/* After a commit the writer polls for the next batch this long before it
 * sleeps: a batch that comes soon then costs no wake-up (about 10-50 us on a
 * small VM, against a 100 us fsync), which is most of the latency left for one
 * client or for a chain of hand-offs on one lock. It yields between polls, so
 * it never takes a core from the loop thread or anything else runnable, and it
 * only polls while the last hand-off came within the window: a server whose
 * batches come far apart sleeps at once and burns nothing. Nor does it poll
 * after a batch of more than WRITER_SPIN_HOLDS holds: that many clients keep
 * the loop busy filling the next batch, so the wake-up is not on anyone's
 * path and the polls were only CPU (issue 42, round 7 in docs/BENCHMARKS.md);
 * a lock's hand-off (a release's answer and the grant's, and a few more) stays
 * under it. */
#define WRITER_SPIN_NS 200000
#define WRITER_SPIN_HOLDS 8

struct Commit {
    Store *store;
    bool barriers; /* the store has barriers: every batch with holds makes a fenced transaction */
    Batch batches[2];
    Batch *pending;  /* filled by the loop */
    Batch *inflight; /* see the states above */
    _Atomic int state;
    _Atomic bool writer_sleeping;
    /* The loop polls for the end of the batch in flight (commit_poll_begin):
     * the writer need not write the eventfd. With state, a Dekker pair. */
    _Atomic bool loop_polling;
    _Atomic bool stop;
    int efd;
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    CommitStats stats;
    double last_seconds;     /* how long the last batch with rows took to commit (loop's) */
    size_t inflight_holds;   /* holds of the batch in flight when it was handed over (loop's) */
    uint64_t history_keep; /* see commit_keep_history */
    ThreadOwner owner; /* the loop (threads.h): it fills the pending batch and collects the done one */
    /* While the holds of a batch with a snapshot run: the copy (owned) or -1. */
    int snap_fd;
    uint64_t snap_size;
    char snap_err[256];
    char err[256];
    /* A stall (commit.h). The writer sets stalled and stall_why (under mu);
     * the loop asks for a fenced read by raising check_asked, the writer
     * makes it and sets check_done to the value it read before, or
     * check_failed. The two lists are the loop's: holds waiting for the next
     * check, and holds the check of check_gen covers. */
    _Atomic bool stalled, give_up, check_failed;
    char stall_why[256];
    _Atomic uint64_t check_asked, check_done;
    uint64_t check_gen;
    Batch stall_wait, stall_check; /* only their holds are used */
};

static void batch_init(Batch *b)
{
    memset(b, 0, sizeof *b);
    arena_init(&b->strings);
    b->snap_fd = -1;
}

static void batch_reset(Batch *b)
{
    b->n = 0;
    b->audit_gone_below = 0;
    b->counter = 0;
    arena_reset(&b->strings);
    b->holds = (DList){0};
    b->snapshot = false;
    b->snap_fd = -1;
    b->snap_err[0] = '\0';
    b->result = 0;
}

static void batch_clear(Batch *b)
{
    free(b->records);
    arena_clear(&b->strings);
}

static bool batch_has_rows(const Batch *b) { return b->n || b->counter; }

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Waits until a batch is handed over (true) or the writer must stop (false).
 * The sleeping flag and the state form a Dekker pair with commit_flush: the
 * writer sets sleeping then reads the state; the loop sets the state then
 * reads sleeping; so at least one of them sees the other and no hand-off is
 * missed. */
static bool wait_for_batch(Commit *c, bool spin)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (spin && seconds_since(&t0) * 1e9 < WRITER_SPIN_NS) {
        if (atomic_load(&c->state) == INFLIGHT_HANDED)
            return true;
        if (atomic_load(&c->stop))
            return false;
        sched_yield();
    }
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->writer_sleeping, true);
    while (atomic_load(&c->state) != INFLIGHT_HANDED && !atomic_load(&c->stop))
        pthread_cond_wait(&c->cv, &c->mu);
    atomic_store(&c->writer_sleeping, false);
    pthread_mutex_unlock(&c->mu);
    return atomic_load(&c->state) == INFLIGHT_HANDED && !atomic_load(&c->stop);
}

static void wake_loop(Commit *c)
{
    uint64_t one = 1;
    while (write(c->efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* The store refused the inflight batch for now (STORE_REFUSED): try it again
 * every STALL_RETRY_MS, and between tries make the fenced reads the loop asks
 * for (commit.h). 0 once it applied, -1 when it failed, leadership is
 * unknown (a fenced read failed) or the loop gave up. Writer thread. */
#define STALL_RETRY_MS 1000
static int stall(Commit *c, const StoreBatch *sb)
{
    pthread_mutex_lock(&c->mu);
    snprintf(c->stall_why, sizeof c->stall_why, "%s", store_error(c->store));
    pthread_mutex_unlock(&c->mu);
    atomic_store(&c->stalled, true);
    wake_loop(c);
    int rc = STORE_REFUSED;
    struct timespec retry_at;
    clock_gettime(CLOCK_MONOTONIC, &retry_at);
    retry_at.tv_sec += STALL_RETRY_MS / 1000;
    while (rc == STORE_REFUSED) {
        pthread_mutex_lock(&c->mu);
        while (!atomic_load(&c->give_up) && !atomic_load(&c->stop) &&
               atomic_load(&c->check_asked) == atomic_load(&c->check_done) && !atomic_load(&c->check_failed) &&
               pthread_cond_timedwait(&c->cv, &c->mu, &retry_at) == 0)
            ;
        pthread_mutex_unlock(&c->mu);
        if (atomic_load(&c->give_up) || atomic_load(&c->stop)) {
            rc = -1;
            break;
        }
        uint64_t asked = atomic_load(&c->check_asked);
        if (asked != atomic_load(&c->check_done) && !atomic_load(&c->check_failed)) {
            if (store_barrier(c->store)) {
                atomic_store(&c->check_failed, true);
                wake_loop(c);
                rc = -1;
                break;
            }
            atomic_store(&c->check_done, asked);
            wake_loop(c);
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > retry_at.tv_sec || (now.tv_sec == retry_at.tv_sec && now.tv_nsec >= retry_at.tv_nsec)) {
            rc = store_commit(c->store, sb);
            retry_at = now;
            retry_at.tv_sec += STALL_RETRY_MS / 1000;
            if (rc == STORE_REFUSED) {
                pthread_mutex_lock(&c->mu);
                snprintf(c->stall_why, sizeof c->stall_why, "%s", store_error(c->store));
                pthread_mutex_unlock(&c->mu);
            }
        }
    }
    atomic_store(&c->stalled, false);
    return rc;
}

static void *writer_main(void *arg)
{
    Commit *c = arg;
    bool spin = false;
    struct timespec idle_since;
    clock_gettime(CLOCK_MONOTONIC, &idle_since);
    while (wait_for_batch(c, spin)) {
        /* Poll next time only if this batch came within the polling window
         * and was small (see WRITER_SPIN_NS). */
        spin = seconds_since(&idle_since) * 1e9 < WRITER_SPIN_NS && c->inflight->holds.len <= WRITER_SPIN_HOLDS;
        /* The batch and the store are the writer's from the hand-off (threads.h). */
        thread_own(&c->store->owner);
        Batch *b = c->inflight;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        StoreBatch sb = {b->records, b->n, c->history_keep, b->audit_gone_below, b->counter};
        /* A batch without rows was handed over for its holds: with barriers
         * they wait for a fenced transaction sent now (commit.h). */
        int rc = batch_has_rows(b) ? store_commit(c->store, &sb) : c->barriers ? store_barrier(c->store) : 0;
        if (rc == STORE_REFUSED)
            rc = stall(c, &sb);
        b->result = rc ? -1 : 0;
        b->seconds = seconds_since(&t0);
        /* Between two commits, so the copy is exactly what is durable; the
         * next batch waits for it (measured in docs/BENCHMARKS.md). */
        if (b->snapshot && rc == 0) {
            b->snap_fd = c->store->ops->snapshot(c->store, &b->snap_size);
            if (b->snap_fd < 0)
                snprintf(b->snap_err, sizeof b->snap_err, "%s", store_error(c->store));
        }
        atomic_store(&c->state, INFLIGHT_DONE);
        /* A polling loop sees the state itself (commit_poll_end). */
        if (!atomic_load(&c->loop_polling))
            wake_loop(c);
        /* The store's deferred work, while the answers go out: the loop reads
         * the store (its error) only after a failed commit. */
        if (rc == 0)
            store_idle(c->store);
        clock_gettime(CLOCK_MONOTONIC, &idle_since);
    }
    return NULL;
}

Commit *commit_new(Store *store, char *err, size_t errlen)
{
    Commit *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->store = store;
    thread_own(&c->owner);
    c->snap_fd = -1;
    c->barriers = store_has_barrier(store);
    batch_init(&c->batches[0]);
    batch_init(&c->batches[1]);
    c->pending = &c->batches[0];
    c->inflight = &c->batches[1];
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        free(c);
        return NULL;
    }
    batch_init(&c->stall_wait);
    batch_init(&c->stall_check);
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the stall's timed waits */
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&c->writer, NULL, writer_main, c);
    if (rc) {
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        close(c->efd);
        free(c);
        return NULL;
    }
    return c;
}

void commit_free(Commit *c)
{
    if (!c)
        return;
    atomic_store(&c->stop, true);
    pthread_mutex_lock(&c->mu);
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->writer, NULL);
    thread_own(&c->store->owner); /* back to the caller, which closes it */
    close(c->efd);
    for (int i = 0; i < 2; i++)
        if (c->batches[i].snap_fd >= 0)
            close(c->batches[i].snap_fd);
    batch_clear(&c->batches[0]);
    batch_clear(&c->batches[1]);
    batch_clear(&c->stall_wait);
    batch_clear(&c->stall_check);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

int commit_fd(const Commit *c) { return c->efd; }

/* Appends a copy of r (its strings in the batch's arena) to the pending
 * batch; false when out of memory (nothing recorded). */
static bool add(Commit *c, const StoreRecord *r)
{
    assert(thread_owns(&c->owner));
    Batch *b = c->pending;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        StoreRecord *p = realloc(b->records, cap * sizeof *p);
        if (!p)
            return false;
        b->records = p;
        b->cap = cap;
    }
    if (!record_copy(&b->strings, &b->records[b->n], r))
        return false;
    b->n++;
    return true;
}

bool commit_lock(Commit *c, const Lock *lock)
{
    StoreRecord r = {.kind = REC_LOCK,
                     .lock = {lock->name, lock->kind, lock->last_token, lock->limit, lock->delay_until_ms}};
    return add(c, &r);
}

bool commit_holder(Commit *c, const Lock *lock, const Holder *h)
{
    StoreRecord r = {.kind = REC_HOLDER, .holder = {lock->name, lock->kind, *h}};
    return add(c, &r);
}

bool commit_holder_gone(Commit *c, LockKind kind, const char *name, uint64_t token)
{
    StoreRecord r = {.kind = REC_HOLDER, .removal = true, .holder = {name, (uint8_t)kind, {.token = token}}};
    return add(c, &r);
}

bool commit_value(Commit *c, const Lock *lock)
{
    const LockValue *v = &lock->value;
    char writes[VALWRITES_TEXT_MAX];
    StoreRecord r = {.kind = REC_VALUE,
                     .value = {lock->name, v->text, v->version, v->token, v->key, v->at_ms,
                               valwrites_format(&v->writes, writes) ? writes : NULL}};
    return add(c, &r);
}

bool commit_value_gone(Commit *c, const char *name)
{
    StoreRecord r = {.kind = REC_VALUE, .removal = true, .value = {.name = name}};
    return add(c, &r);
}

bool commit_forget(Commit *c, LockKind kind, const char *name, uint64_t counter)
{
    StoreRecord r = {.kind = REC_LOCK, .removal = true, .lock = {.name = name, .kind = (uint8_t)kind}};
    if (!add(c, &r))
        return false;
    commit_counter(c, counter);
    return true;
}

void commit_counter(Commit *c, uint64_t counter)
{
    if (counter > c->pending->counter)
        c->pending->counter = counter;
}

bool commit_fence(Commit *c, const char *resource, uint64_t max_token)
{
    StoreRecord r = {.kind = REC_FENCE, .fence = {resource, max_token, 0}};
    return add(c, &r);
}

bool commit_fence_forget(Commit *c, const char *resource, uint32_t bucket, uint64_t floor)
{
    StoreRecord gone = {.kind = REC_FENCE, .removal = true, .fence = {.name = resource}};
    StoreRecord f = {.kind = REC_FLOOR, .floor = {bucket, floor}};
    return add(c, &gone) && add(c, &f);
}

bool commit_ended(Commit *c, LockKind kind, const char *lock, const uint8_t *lease, uint64_t token, int how,
                  uint64_t seq)
{
    StoreRecord r = {.kind = REC_ENDED, .ended = {lock, (uint8_t)kind, lease, token, how, seq}};
    /* A force-released lease's token stays revoked whatever the history keeps. */
    StoreRecord revoked = {.kind = REC_REVOKED, .revoked = {token, lock}};
    return add(c, &r) && (how != LEASE_END_REVOKED || add(c, &revoked));
}

void commit_keep_history(Commit *c, uint64_t keep) { c->history_keep = keep; }

bool commit_audit(Commit *c, const AuditRow *row)
{
    StoreRecord r = {.kind = REC_AUDIT, .audit = *row};
    return add(c, &r);
}

bool commit_audit_drop(Commit *c, const char *key, uint64_t seq, uint64_t gone_below)
{
    StoreRecord r = {.kind = REC_AUDIT, .removal = true, .audit = {.seq = seq, .key = key}};
    if (!add(c, &r))
        return false;
    if (gone_below > c->pending->audit_gone_below)
        c->pending->audit_gone_below = gone_below;
    return true;
}

bool commit_guard_mark(Commit *c, const char *lock, uint64_t max_token, int64_t at_ms)
{
    StoreRecord r = {.kind = REC_GUARD_MARK, .guard_mark = {lock, max_token, at_ms}};
    return add(c, &r);
}

bool commit_guard_mark_forget(Commit *c, const char *lock)
{
    StoreRecord r = {.kind = REC_GUARD_MARK, .removal = true, .guard_mark = {.name = lock}};
    return add(c, &r);
}

bool commit_pending(const Commit *c)
{
    return batch_has_rows(c->pending) ||
           (atomic_load(&c->state) != INFLIGHT_IDLE && batch_has_rows(c->inflight));
}

bool commit_holds_wait(const Commit *c) { return c->barriers || commit_pending(c); }

void commit_hold(Commit *c, CommitHold *hold)
{
    assert(thread_owns(&c->owner));
    hold->batch = c->pending;
    dlist_append(&c->pending->holds, &hold->link);
}

bool commit_barrier_hold(Commit *c, CommitHold *hold)
{
    if (!commit_holds_wait(c))
        return false;
    commit_hold(c, hold);
    return true;
}

bool commit_hold_in_pending(const Commit *c, const CommitHold *hold) { return hold->batch == c->pending; }

bool commit_can_snapshot(const Commit *c) { return store_can_snapshot(c->store); }

void commit_snapshot_hold(Commit *c, CommitHold *hold)
{
    c->pending->snapshot = true;
    commit_hold(c, hold);
}

int commit_snapshot_take(Commit *c, uint64_t *size, const char **err)
{
    *err = c->snap_err;
    if (c->snap_fd < 0)
        return -1;
    int fd = fcntl(c->snap_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        snprintf(c->snap_err, sizeof c->snap_err, "snapshot: %s", strerror(errno));
    *size = c->snap_size;
    return fd;
}

void commit_unhold(Commit *c, CommitHold *hold)
{
    (void)c;
    assert(thread_owns(&c->owner));
    Batch *b = hold->batch;
    if (!b)
        return;
    dlist_remove(&b->holds, &hold->link);
    hold->batch = NULL;
}

/* Stalls (commit.h). */

static void fail_batch_holds(Batch *b);

bool commit_stalled(Commit *c, char *why, size_t len)
{
    if (!atomic_load(&c->stalled))
        return false;
    pthread_mutex_lock(&c->mu);
    snprintf(why, len, "%s", c->stall_why);
    pthread_mutex_unlock(&c->mu);
    return true;
}

static bool named(const char *a, uint8_t akind, const char *b, LockKind bkind)
{
    return akind == bkind && !strcmp(a, b);
}

static bool batch_touches(const Batch *b, LockKind kind, const char *name)
{
    uint8_t object = kind == KIND_SEMAPHORE ? AUDIT_OF_SEMAPHORE
                     : kind == KIND_ELECTION ? AUDIT_OF_ELECTION
                                             : AUDIT_OF_LOCK;
    for (size_t i = 0; i < b->n; i++) {
        const StoreRecord *r = &b->records[i];
        switch ((StoreRecordKind)r->kind) {
        case REC_LOCK:
            if (named(r->lock.name, r->lock.kind, name, kind))
                return true;
            break;
        case REC_HOLDER:
            if (named(r->holder.name, r->holder.kind, name, kind))
                return true;
            break;
        case REC_ENDED:
            if (named(r->ended.lock, r->ended.kind, name, kind))
                return true;
            break;
        case REC_VALUE: /* a lock's: its read shows it */
            if (kind == KIND_LOCK && !strcmp(r->value.name, name))
                return true;
            break;
        case REC_AUDIT:
            /* A removal names its seq and key only: it shows nothing of the name. */
            if (!r->removal && r->audit.object == object && !strcmp(r->audit.lock, name))
                return true;
            break;
        case REC_FENCE:
        case REC_GUARD_MARK:
        case REC_FLOOR:
        case REC_REVOKED:
        case REC_KINDS:
            break; /* not shown by a read of a lock, semaphore or election */
        }
    }
    return false;
}

bool commit_touches(const Commit *c, LockKind kind, const char *name)
{
    assert(thread_owns(&c->owner));
    /* The writer only reads a batch it was handed (to commit it, or to try
     * it again while it stalls): the loop reading it too is read beside read
     * (threads.h). */
    return batch_touches(c->pending, kind, name) ||
           (atomic_load(&c->state) != INFLIGHT_IDLE && batch_touches(c->inflight, kind, name));
}

/* Moves every hold of `from` to the end of `to`'s queue. */
static void move_holds(Batch *from, Batch *to)
{
    while (from->holds.head) {
        CommitHold *h = DLIST_ITEM(from->holds.head, CommitHold, link);
        dlist_remove(&from->holds, &h->link);
        h->batch = to;
        dlist_append(&to->holds, &h->link);
    }
}

/* The loop's side of the stall's fenced reads: runs the holds a finished
 * check covers, fails them when it failed (the writer's batch fails too, and
 * the loop learns it from commit_done), and asks for the next check when
 * holds wait and none is under way. */
static void stall_reads_progress(Commit *c)
{
    if (c->stall_check.holds.len && atomic_load(&c->check_failed)) {
        fail_batch_holds(&c->stall_check);
    } else if (c->stall_check.holds.len && atomic_load(&c->check_done) >= c->check_gen) {
        DLink *l = c->stall_check.holds.head;
        for (DLink *x = l; x; x = x->next)
            DLIST_ITEM(x, CommitHold, link)->batch = NULL;
        c->stall_check.holds = (DList){0};
        while (l) {
            DLink *next = l->next;
            CommitHold *h = DLIST_ITEM(l, CommitHold, link);
            h->ready(h);
            l = next;
        }
    }
    if (c->stall_wait.holds.len && !c->stall_check.holds.len && atomic_load(&c->stalled) &&
        !atomic_load(&c->check_failed)) {
        move_holds(&c->stall_wait, &c->stall_check);
        /* The writer reads check_asked after this store: its check begins
         * after every hold now in stall_check was queued. */
        c->check_gen = atomic_fetch_add(&c->check_asked, 1) + 1;
        pthread_mutex_lock(&c->mu);
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

/* Takes the holds of b that have a failed callback off its queue into out;
 * the others stay queued. */
static void take_answers(Batch *b, DList *out)
{
    DLink *l = b->holds.head;
    while (l) {
        DLink *next = l->next;
        CommitHold *h = DLIST_ITEM(l, CommitHold, link);
        if (h->failed) {
            dlist_remove(&b->holds, l);
            h->batch = NULL;
            dlist_append(out, l);
        }
        l = next;
    }
}

void commit_stall_fail_answers(Commit *c)
{
    assert(thread_owns(&c->owner));
    DList taken = {0};
    take_answers(c->inflight, &taken);
    take_answers(c->pending, &taken);
    /* Off every queue first: a callback may touch other holds (an answer's end). */
    while (taken.head) {
        CommitHold *h = DLIST_ITEM(taken.head, CommitHold, link);
        dlist_remove(&taken, taken.head);
        h->failed(h);
    }
}

void commit_stall_hold(Commit *c, CommitHold *hold)
{
    assert(thread_owns(&c->owner));
    hold->batch = &c->stall_wait;
    dlist_append(&c->stall_wait.holds, &hold->link);
    stall_reads_progress(c);
}

void commit_stall_end(Commit *c)
{
    assert(thread_owns(&c->owner));
    move_holds(&c->stall_check, c->pending);
    move_holds(&c->stall_wait, c->pending);
}

void commit_stall_give_up(Commit *c)
{
    atomic_store(&c->give_up, true);
    pthread_mutex_lock(&c->mu);
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void commit_flush(Commit *c)
{
    assert(thread_owns(&c->owner));
    Batch *b = c->pending;
    if (atomic_load(&c->state) != INFLIGHT_IDLE || (!batch_has_rows(b) && b->holds.len == 0))
        return;
    c->pending = c->inflight;
    c->inflight = b;
    c->inflight_holds = b->holds.len;
    atomic_store(&c->state, INFLIGHT_HANDED);
    if (atomic_load(&c->writer_sleeping)) {
        pthread_mutex_lock(&c->mu);
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

static void record_stats(Commit *c, const Batch *b)
{
    if (!batch_has_rows(b)) {
        c->stats.barriers += c->barriers;
        return;
    }
    c->stats.commits++;
    c->stats.rows += b->n;
    c->stats.seconds_total += b->seconds;
    c->last_seconds = b->seconds;
    double ms = b->seconds * 1000;
    for (int i = 0; i < COMMIT_LATENCY_BUCKETS; i++)
        if (ms <= COMMIT_LATENCY_BOUNDS_MS[i])
            c->stats.latency_buckets[i]++;
}

int commit_done(Commit *c)
{
    assert(thread_owns(&c->owner));
    uint64_t n;
    if (read(c->efd, &n, sizeof n) < 0 && errno != EAGAIN)
        return 0;
    stall_reads_progress(c);
    if (atomic_load(&c->state) != INFLIGHT_DONE)
        return 0; /* not finished yet */
    Batch *b = c->inflight;
    if (b->result < 0) {
        snprintf(c->err, sizeof c->err, "%s", store_error(c->store));
        return -1;
    }
    record_stats(c, b);
    DLink *l = b->holds.head;
    for (DLink *x = l; x; x = x->next)
        DLIST_ITEM(x, CommitHold, link)->batch = NULL; /* released: no longer cancellable */
    /* The copy, for the holds that asked for it (commit_snapshot_take). */
    bool snapshot = b->snapshot;
    if (snapshot) {
        c->snap_fd = b->snap_fd;
        c->snap_size = b->snap_size;
        memcpy(c->snap_err, b->snap_err, sizeof c->snap_err);
    }
    batch_reset(b);
    atomic_store(&c->state, INFLIGHT_IDLE);
    /* Ready callbacks may record changes and hold again: they go to the pending
     * batch, and only ever re-link their own hold, which is already passed. */
    while (l) {
        DLink *next = l->next;
        CommitHold *h = DLIST_ITEM(l, CommitHold, link);
        h->ready(h);
        l = next;
    }
    if (snapshot && c->snap_fd >= 0)
        close(c->snap_fd);
    c->snap_fd = -1;
    c->snap_err[0] = '\0';
    return 0;
}

/* Takes every hold off b's queue, then runs the failed callbacks: a callback
 * may touch other holds (an answer's end), never one still queued here. */
static void fail_batch_holds(Batch *b)
{
    DLink *l = b->holds.head;
    for (DLink *x = l; x; x = x->next)
        DLIST_ITEM(x, CommitHold, link)->batch = NULL;
    b->holds = (DList){0};
    while (l) {
        DLink *next = l->next;
        CommitHold *h = DLIST_ITEM(l, CommitHold, link);
        if (h->failed)
            h->failed(h);
        l = next;
    }
}

void commit_fail_holds(Commit *c)
{
    assert(thread_owns(&c->owner));
    /* The batch being committed first: its holds came first. */
    fail_batch_holds(c->inflight);
    fail_batch_holds(c->pending);
    fail_batch_holds(&c->stall_check);
    fail_batch_holds(&c->stall_wait);
}

int64_t commit_poll_window_ns(const Commit *c) { return c->barriers ? COMMIT_POLL_REMOTE_NS : COMMIT_POLL_NS; }

bool commit_poll_begin(Commit *c)
{
    assert(thread_owns(&c->owner));
    if (atomic_load(&c->state) != INFLIGHT_HANDED || c->inflight_holds > COMMIT_POLL_HOLDS ||
        c->last_seconds * 1e9 > (double)commit_poll_window_ns(c) / 2)
        return false;
    atomic_store(&c->loop_polling, true);
    return true;
}

bool commit_poll_done(const Commit *c) { return atomic_load(&c->state) == INFLIGHT_DONE; }

bool commit_poll_end(Commit *c)
{
    assert(thread_owns(&c->owner));
    atomic_store(&c->loop_polling, false);
    return atomic_load(&c->state) == INFLIGHT_DONE;
}

int commit_sync(Commit *c)
{
    for (int round = 0; round < 3; round++) {
        commit_flush(c);
        if (atomic_load(&c->state) == INFLIGHT_IDLE)
            return 0;
        /* Wait for the writer to finish, then collect. */
        while (atomic_load(&c->state) != INFLIGHT_DONE) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        if (commit_done(c))
            return -1;
    }
    return commit_pending(c) ? -1 : 0;
}

const char *commit_error(const Commit *c) { return c->err; }
const CommitStats *commit_stats(const Commit *c) { return &c->stats; }
