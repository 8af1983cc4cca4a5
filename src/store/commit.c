/* commit — group commit with one writer thread; see commit.h. */
#include "store/commit.h"

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

#include "store/arena.h"

const double COMMIT_LATENCY_BOUNDS_MS[COMMIT_LATENCY_BUCKETS] = {0.25, 0.5, 1,   2,   5,    10,
                                                                 25,   50,  100, 250, 1000, 5000};

typedef struct Batch {
    StoreLock *locks;
    size_t nlocks, caplocks;
    StoreHolder *holders;
    size_t nholders, capholders;
    StoreMark *fences;
    size_t nfences, capfences;
    StoreMark *guard_marks;
    size_t nguard_marks, capguard_marks;
    StoreFloor *floors;
    size_t nfloors, capfloors;
    StoreEnded *ended;
    size_t nended, capended;
    AuditRow *audit;
    size_t naudit, capaudit;
    StoreAuditDrop *audit_drops;
    size_t naudit_drops, capaudit_drops;
    uint64_t audit_gone_below;
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
 * batches come far apart sleeps at once and burns nothing. */
#define WRITER_SPIN_NS 200000

struct Commit {
    Store *store;
    bool barriers; /* the store has barriers: every batch with holds makes a fenced transaction */
    Batch batches[2];
    Batch *pending;  /* filled by the loop */
    Batch *inflight; /* see the states above */
    _Atomic int state;
    _Atomic bool writer_sleeping;
    _Atomic bool stop;
    int efd;
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    CommitStats stats;
    uint64_t history_keep; /* see commit_keep_history */
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
    b->nlocks = 0;
    b->nholders = 0;
    b->nfences = 0;
    b->nguard_marks = 0;
    b->nfloors = 0;
    b->nended = 0;
    b->naudit = 0;
    b->naudit_drops = 0;
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
    free(b->locks);
    free(b->holders);
    free(b->fences);
    free(b->guard_marks);
    free(b->floors);
    free(b->ended);
    free(b->audit);
    free(b->audit_drops);
    arena_clear(&b->strings);
}

static bool batch_has_rows(const Batch *b)
{
    return b->nlocks || b->nholders || b->nfences || b->nguard_marks || b->nfloors || b->nended || b->naudit ||
           b->naudit_drops || b->counter;
}

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
        /* Poll next time only if this batch came within the polling window. */
        spin = seconds_since(&idle_since) * 1e9 < WRITER_SPIN_NS;
        Batch *b = c->inflight;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        StoreBatch sb = {.locks = b->locks,
                         .nlocks = b->nlocks,
                         .holders = b->holders,
                         .nholders = b->nholders,
                         .fences = b->fences,
                         .nfences = b->nfences,
                         .guard_marks = b->guard_marks,
                         .nguard_marks = b->nguard_marks,
                         .floors = b->floors,
                         .nfloors = b->nfloors,
                         .ended = b->ended,
                         .nended = b->nended,
                         .history_keep = c->history_keep,
                         .audit = b->audit,
                         .naudit = b->naudit,
                         .audit_drops = b->audit_drops,
                         .naudit_drops = b->naudit_drops,
                         .audit_gone_below = b->audit_gone_below,
                         .counter = b->counter};
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
        clock_gettime(CLOCK_MONOTONIC, &idle_since);
        atomic_store(&c->state, INFLIGHT_DONE);
        wake_loop(c);
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

static bool grow(void **items, size_t *cap, size_t len, size_t size)
{
    if (len < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 256;
    void *p = realloc(*items, ncap * size);
    if (!p)
        return false;
    *items = p;
    *cap = ncap;
    return true;
}

/* A copy of h with its strings in the batch's arena; false when out of memory. */
static bool copy_holder(Batch *b, Holder *to, const Holder *h)
{
    *to = *h;
    to->owner = arena_strdup(&b->strings, h->owner);
    to->metadata = arena_strdup(&b->strings, h->metadata);
    to->request_id = h->request_id ? arena_strdup(&b->strings, h->request_id) : NULL;
    to->key = h->key ? arena_strdup(&b->strings, h->key) : NULL;
    return to->owner && to->metadata && (!h->request_id || to->request_id) && (!h->key || to->key);
}

bool commit_lock(Commit *c, const Lock *lock)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->locks, &b->caplocks, b->nlocks, sizeof *b->locks))
        return false;
    StoreLock *r = &b->locks[b->nlocks];
    memset(r, 0, sizeof *r);
    r->name = arena_strdup(&b->strings, lock->name);
    r->kind = lock->kind;
    r->last_token = lock->last_token;
    r->limit = lock->limit;
    r->delay_until_ms = lock->delay_until_ms;
    if (!r->name)
        return false;
    /* A lock's writer is part of its record; readers and permits are not. */
    const Holder *writer = locktab_holder(lock);
    r->held = lock->kind == KIND_LOCK && writer && writer->mode == MODE_WRITE;
    if (r->held && !copy_holder(b, &r->holder, writer))
        return false;
    b->nlocks++;
    return true;
}

bool commit_holder(Commit *c, const Lock *lock, const Holder *h)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->holders, &b->capholders, b->nholders, sizeof *b->holders))
        return false;
    StoreHolder *r = &b->holders[b->nholders];
    memset(r, 0, sizeof *r);
    r->name = arena_strdup(&b->strings, lock->name);
    r->kind = lock->kind;
    if (!r->name || !copy_holder(b, &r->holder, h))
        return false;
    b->nholders++;
    return true;
}

bool commit_holder_gone(Commit *c, LockKind kind, const char *name, uint64_t token)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->holders, &b->capholders, b->nholders, sizeof *b->holders))
        return false;
    StoreHolder *r = &b->holders[b->nholders];
    memset(r, 0, sizeof *r);
    r->name = arena_strdup(&b->strings, name);
    r->kind = (uint8_t)kind;
    r->gone = true;
    r->holder.token = token;
    if (!r->name)
        return false;
    b->nholders++;
    return true;
}

bool commit_forget(Commit *c, LockKind kind, const char *name, uint64_t counter)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->locks, &b->caplocks, b->nlocks, sizeof *b->locks))
        return false;
    StoreLock *r = &b->locks[b->nlocks];
    memset(r, 0, sizeof *r);
    r->name = arena_strdup(&b->strings, name);
    r->kind = (uint8_t)kind;
    if (!r->name)
        return false;
    r->forget = true;
    b->nlocks++;
    if (counter > b->counter)
        b->counter = counter;
    return true;
}

static bool add_mark(Batch *b, StoreMark **marks, size_t *n, size_t *cap, const char *name, uint64_t max_token,
                     bool forget)
{
    if (!grow((void **)marks, cap, *n, sizeof **marks))
        return false;
    const char *copy = arena_strdup(&b->strings, name);
    if (!copy)
        return false;
    (*marks)[(*n)++] = (StoreMark){copy, max_token, forget, 0};
    return true;
}

void commit_counter(Commit *c, uint64_t counter)
{
    if (counter > c->pending->counter)
        c->pending->counter = counter;
}

bool commit_fence(Commit *c, const char *resource, uint64_t max_token)
{
    Batch *b = c->pending;
    return add_mark(b, &b->fences, &b->nfences, &b->capfences, resource, max_token, false);
}

bool commit_fence_forget(Commit *c, const char *resource, uint32_t bucket, uint64_t floor)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->floors, &b->capfloors, b->nfloors, sizeof *b->floors) ||
        !add_mark(b, &b->fences, &b->nfences, &b->capfences, resource, 0, true))
        return false;
    b->floors[b->nfloors++] = (StoreFloor){bucket, floor};
    return true;
}

bool commit_ended(Commit *c, LockKind kind, const char *lock, const uint8_t *lease, uint64_t token, int how,
                  uint64_t seq)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->ended, &b->capended, b->nended, sizeof *b->ended))
        return false;
    const char *name = arena_strdup(&b->strings, lock);
    uint8_t *id = arena_alloc(&b->strings, LEASE_ID_BYTES);
    if (!name || !id)
        return false;
    memcpy(id, lease, LEASE_ID_BYTES);
    b->ended[b->nended++] = (StoreEnded){name, (uint8_t)kind, id, token, how, seq};
    return true;
}

void commit_keep_history(Commit *c, uint64_t keep) { c->history_keep = keep; }

bool commit_audit(Commit *c, const AuditRow *row)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->audit, &b->capaudit, b->naudit, sizeof *b->audit))
        return false;
    AuditRow r = *row;
    if (!(r.lock = arena_strdup(&b->strings, row->lock)) || !(r.owner = arena_strdup(&b->strings, row->owner)) ||
        !(r.key = arena_strdup(&b->strings, row->key)) || !(r.peer = arena_strdup(&b->strings, row->peer)))
        return false;
    b->audit[b->naudit++] = r;
    return true;
}

bool commit_audit_drop(Commit *c, const char *key, uint64_t seq, uint64_t gone_below)
{
    Batch *b = c->pending;
    if (!grow((void **)&b->audit_drops, &b->capaudit_drops, b->naudit_drops, sizeof *b->audit_drops))
        return false;
    const char *k = arena_strdup(&b->strings, key);
    if (!k)
        return false;
    b->audit_drops[b->naudit_drops++] = (StoreAuditDrop){k, seq};
    if (gone_below > b->audit_gone_below)
        b->audit_gone_below = gone_below;
    return true;
}

bool commit_guard_mark(Commit *c, const char *lock, uint64_t max_token, int64_t at_ms)
{
    Batch *b = c->pending;
    if (!add_mark(b, &b->guard_marks, &b->nguard_marks, &b->capguard_marks, lock, max_token, false))
        return false;
    b->guard_marks[b->nguard_marks - 1].at_ms = at_ms;
    return true;
}

bool commit_pending(const Commit *c)
{
    return batch_has_rows(c->pending) ||
           (atomic_load(&c->state) != INFLIGHT_IDLE && batch_has_rows(c->inflight));
}

bool commit_holds_wait(const Commit *c) { return c->barriers || commit_pending(c); }

void commit_hold(Commit *c, CommitHold *hold)
{
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
    for (size_t i = 0; i < b->nlocks; i++)
        if (named(b->locks[i].name, b->locks[i].kind, name, kind))
            return true;
    for (size_t i = 0; i < b->nholders; i++)
        if (named(b->holders[i].name, b->holders[i].kind, name, kind))
            return true;
    for (size_t i = 0; i < b->nended; i++)
        if (named(b->ended[i].lock, b->ended[i].kind, name, kind))
            return true;
    uint8_t object = kind == KIND_SEMAPHORE ? AUDIT_OF_SEMAPHORE : AUDIT_OF_LOCK;
    for (size_t i = 0; i < b->naudit; i++)
        if (b->audit[i].object == object && !strcmp(b->audit[i].lock, name))
            return true;
    return false;
}

bool commit_touches(const Commit *c, LockKind kind, const char *name)
{
    /* The inflight batch is only read by the writer while it is handed over. */
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
    hold->batch = &c->stall_wait;
    dlist_append(&c->stall_wait.holds, &hold->link);
    stall_reads_progress(c);
}

void commit_stall_end(Commit *c)
{
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
    Batch *b = c->pending;
    if (atomic_load(&c->state) != INFLIGHT_IDLE || (!batch_has_rows(b) && b->holds.len == 0))
        return;
    c->pending = c->inflight;
    c->inflight = b;
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
    c->stats.rows += b->nlocks + b->nholders + b->nfences + b->nguard_marks + b->nfloors + b->nended + b->naudit +
                     b->naudit_drops;
    c->stats.seconds_total += b->seconds;
    double ms = b->seconds * 1000;
    for (int i = 0; i < COMMIT_LATENCY_BUCKETS; i++)
        if (ms <= COMMIT_LATENCY_BOUNDS_MS[i])
            c->stats.latency_buckets[i]++;
}

int commit_done(Commit *c)
{
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
    /* The batch being committed first: its holds came first. */
    fail_batch_holds(c->inflight);
    fail_batch_holds(c->pending);
    fail_batch_holds(&c->stall_check);
    fail_batch_holds(&c->stall_wait);
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
