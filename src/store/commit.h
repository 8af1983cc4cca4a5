/*
 * commit — group commit: many requests' changes in one transaction and one fsync.
 *
 * The loop thread records changes (lock snapshots, fence marks) into the
 * pending batch while it serves requests. A request whose response reveals
 * state is held (commit_hold) until the batch holding every change made before
 * it is durable. One writer thread commits one batch at a time; while it does,
 * the next batch fills up, so the cost of an fsync is shared by all the
 * requests that arrive during the previous one. When a batch is durable the
 * writer wakes the loop (eventfd), or the loop, polling for a short batch's
 * end (commit_poll_begin), sees it; the loop then releases its holds.
 *
 * Invariant: batches are committed in the order they were filled, so a hold
 * released after batch N is durable never reveals a change from batch N+1.
 *
 * Barriers. A store that another process may take over (etcd: a new leader
 * gateway) has a barrier (StoreOps.barrier): a transaction fenced like its
 * commits that changes nothing. On such a store every hold waits for a fenced
 * transaction sent after it was queued: the commit of its batch, or, when
 * that batch has no rows, the batch's barrier. So an answer held until its
 * hold is ready was decided by a gateway that still led after the request
 * was complete, however long it was paused before: no answer leaves from
 * the memory of a deposed leader. One transaction serves every hold of its
 * batch (group commit). On SQLite nothing changes: nothing pending, nothing
 * to wait for, no extra commit.
 */
#ifndef LEASEGATE_COMMIT_H
#define LEASEGATE_COMMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/locktab.h"
#include "leasegate/dlist.h"
#include "store/store.h"

typedef struct CommitHold CommitHold;
struct CommitHold {
    DLink link;  /* in its batch's list of holds */
    void *batch; /* the batch it waits for; NULL when not queued (commit's to set) */
    /* Called on the loop thread once every change recorded before the hold is
     * durable (and, with barriers, a fenced transaction sent after it was
     * queued has committed). */
    void (*ready)(CommitHold *hold);
    /* Optional, the owner's to set: called instead of ready by
     * commit_fail_holds, when what the hold waits for will never be made (the
     * store failed, or this gateway no longer leads). Nothing the hold guards
     * may be revealed; the owner answers 503 or lets go. NULL: the hold is
     * only taken off its queue. */
    void (*failed)(CommitHold *hold);
};

static inline bool commit_held(const CommitHold *hold) { return hold->batch != NULL; }

#define COMMIT_LATENCY_BUCKETS 12
extern const double COMMIT_LATENCY_BOUNDS_MS[COMMIT_LATENCY_BUCKETS];

typedef struct CommitStats {
    uint64_t commits;
    uint64_t barriers; /* batches without rows that made a barrier (a fenced transaction changing nothing) */
    uint64_t rows;
    double seconds_total;
    uint64_t latency_buckets[COMMIT_LATENCY_BUCKETS]; /* cumulative counts per upper bound */
} CommitStats;

typedef struct Commit Commit;

/* Starts the writer thread; the store is used only by it from now on.
 * NULL on failure (message in err). */
Commit *commit_new(Store *store, char *err, size_t errlen);
/* Stops the writer. Whatever is still pending is not committed: call
 * commit_sync first. Holds still queued are dropped. */
void commit_free(Commit *c);
int commit_fd(const Commit *c);

/* Record a change of lock's own record (record.h: StoreLock); false on
 * allocation failure (nothing recorded). Each of these appends one record
 * (or two) to the pending batch, in call order: the lock table's hooks call
 * them (gateway.c), one for each kind of change. */
bool commit_lock(Commit *c, const Lock *lock);
/* A lease's record, whatever its mode (StoreHolder): made or changed; and
 * its removal, when the lease ended. */
bool commit_holder(Commit *c, const Lock *lock, const Holder *h);
bool commit_holder_gone(Commit *c, LockKind kind, const char *name, uint64_t token);
/* A lock's value (StoreValue): written; and its removal, when the name is forgotten. */
bool commit_value(Commit *c, const Lock *lock);
bool commit_value_gone(Commit *c, const char *name);
/* The name is forgotten: its row goes, and the counter (the largest token ever
 * issued) is written where the row no longer vouches for it. */
bool commit_forget(Commit *c, LockKind kind, const char *name, uint64_t counter);
/* A forgotten lock's guard mark goes with it. */
bool commit_guard_mark_forget(Commit *c, const char *lock);
/* The global token counter is at least `counter` (a floor: --min-token). */
void commit_counter(Commit *c, uint64_t counter);
bool commit_fence(Commit *c, const char *resource, uint64_t max_token);
/* A fence resource is forgotten: its row goes, its bucket's floor is `floor`. */
bool commit_fence_forget(Commit *c, const char *resource, uint32_t bucket, uint64_t floor);
/* A lease ended (see StoreEnded); a revoked one's token is kept for good (StoreRevoked). */
bool commit_ended(Commit *c, LockKind kind, const char *lock, const uint8_t *lease, uint64_t token, int how,
                  uint64_t seq);
/* How many ended leases storage keeps (--lease-history); set before the first commit. */
void commit_keep_history(Commit *c, uint64_t keep);
/* The guard let a write of `lock` with token max_token through at at_ms
 * (Unix ms): the mark only grows, the time is the latest. */
bool commit_guard_mark(Commit *c, const char *lock, uint64_t max_token, int64_t at_ms);
/* A row of the audit trail (audit.h), copied. */
bool commit_audit(Commit *c, const AuditRow *row);
/* An audit row of `key` ("" for none) was evicted by its key's --audit-keep:
 * storage deletes it; every row below gone_below is gone (auditlog.h). */
bool commit_audit_drop(Commit *c, const char *key, uint64_t seq, uint64_t gone_below);

/* True while some recorded change is not durable yet. */
bool commit_pending(const Commit *c);
/* True when a hold queued now would wait: something is pending, or the store
 * has barriers (then every hold waits for a fenced transaction). */
bool commit_holds_wait(const Commit *c);
/* Queues hold->ready to run after the pending batch is durable (and, with
 * barriers, fenced). Only valid while commit_holds_wait() is true. */
void commit_hold(Commit *c, CommitHold *hold);
/* The hold for anything that reveals or relies on state: "run hold->ready once
 * every change recorded before this call is durable AND, on a store with
 * barriers, a fenced transaction sent after this call has committed". On etcd
 * that forces a batch, empty if need be (its barrier), so a gateway that was
 * deposed meanwhile never gets to ready (its holds fail: commit_fail_holds).
 * Returns true when the hold is queued (ready, or failed, runs later on the
 * loop thread); false when there is nothing to wait for (SQLite with nothing
 * pending): ready is not called, the caller goes on at once. On SQLite it is
 * commit_hold when something is pending, so it costs nothing more.
 * For the guard: call it where a write's end would be released, and release
 * it (after checking again) in ready. */
bool commit_barrier_hold(Commit *c, CommitHold *hold);
/* Is hold queued for the batch now pending (not one already handed over)? */
bool commit_hold_in_pending(const Commit *c, const CommitHold *hold);
/* Can the store copy itself (commit_snapshot_hold)? */
bool commit_can_snapshot(const Commit *c);
/* Queues hold->ready to run once the pending batch (with or without rows) is
 * durable and the writer, before it commits anything else, has made a copy
 * of the store: exactly what is durable then, so every change revealed
 * before the call is in it. Inside ready, commit_snapshot_take gives it. */
void commit_snapshot_hold(Commit *c, CommitHold *hold);
/* Only inside the ready callback of a snapshot hold: a descriptor of the copy
 * (an unlinked file; the caller's to close) and its size, or -1 with *err. */
int commit_snapshot_take(Commit *c, uint64_t *size, const char **err);
/* Takes a queued hold back (its owner is going away); no-op when not queued. */
void commit_unhold(Commit *c, CommitHold *hold);
/* Hands the pending batch to the writer if the writer is idle. */
void commit_flush(Commit *c);
/* The loop calls this when commit_fd() is readable: runs the holds of the
 * durable batch. Returns -1 if the batch failed to commit (nothing of it may
 * be revealed; the caller must stop), 0 otherwise. */
int commit_done(Commit *c);
/* The store failed or this gateway no longer leads: every queued hold, of
 * the batch being committed and of the pending one, is taken off its queue
 * and its failed callback (if any) runs; no ready runs after this. Loop thread. */
void commit_fail_holds(Commit *c);
/* Stalls. When the store refuses writes for now (STORE_REFUSED: etcd's
 * alarm), the writer keeps the batch and tries it again every second until it
 * applies, leadership is lost (then it fails) or commit_stall_give_up. The
 * batches behind it wait: nothing of them is revealed. While it stalls, a
 * read that reveals nothing of a batch not yet durable (commit_touches) can
 * be answered after a fenced read of its own (commit_stall_hold), which the
 * writer makes between its tries: what is durable, as of a moment after the
 * read was decided, by a gateway that still leads. Loop thread, except where
 * said. */
/* Whether the writer stalls now, with why (the store's error) in why. */
bool commit_stalled(Commit *c, char *why, size_t len);
/* Whether a record of the name (a lock's or semaphore's, a reader's or
 * permit's, an ended lease's, an audit row's) is in a batch not yet durable. */
bool commit_touches(const Commit *c, LockKind kind, const char *name);
/* While stalled: ready once a fenced read made after this call confirmed that
 * this gateway leads and nothing was committed since its last transaction
 * (failed, as other holds, when the writer's batch fails). After the stall
 * the hold waits for an ordinary barrier (commit_stall_end). */
void commit_stall_hold(Commit *c, CommitHold *hold);
/* The stall began: the holds of the batch it refused and of the pending one
 * that answer someone (those with a failed callback) are failed; the others
 * (events waiting to be published) stay, and are ready once their batch
 * applies. */
void commit_stall_fail_answers(Commit *c);
/* The stall is over: the holds of commit_stall_hold move to the pending batch. */
void commit_stall_end(Commit *c);
/* Stop trying (shutdown): the stalled batch fails. Any thread. */
void commit_stall_give_up(Commit *c);

/* The loop's short wait. Waking a sleeping loop thread costs a wake-up of an
 * idle CPU (30-50 us on a small VM whose idle vCPUs halt at once), once per
 * request when one client waits for each commit: a third of what one client's
 * request costs beyond the fsync. So while the writer commits a batch of at
 * most COMMIT_POLL_HOLDS holds (a client or two: latency-bound, not
 * throughput-bound) and the last commit took at most half of the window
 * (COMMIT_POLL_NS), the loop may poll for the batch's end for up to the window (yielding
 * its CPU between polls) instead of sleeping until the eventfd. Begin: true
 * when worth it; the writer then does not write the eventfd for a batch it
 * ends while the loop polls (state and flag form a Dekker pair, as with
 * writer_sleeping). Done: whether the batch in flight is durable (an atomic
 * load, any time between begin and end). End: the loop stops polling;
 * true when the batch is done, which the caller then collects with
 * commit_done as if commit_fd() were readable (it may be too: reading it
 * then finds nothing to do). Loop thread.
 *
 * On a store with barriers (etcd) a commit is a round trip to etcd, not an
 * fsync: 0.5-0.6 ms for one client on a member on the same machine, of which
 * the wake-ups (the writer's when etcd answers, then the loop's) are the part
 * a poll saves; there the window is COMMIT_POLL_REMOTE_NS, so a member a
 * network away (a few ms a commit) is not polled for. Window: how long the
 * loop may poll (ns). */
#define COMMIT_POLL_HOLDS 2
#define COMMIT_POLL_NS 500000
#define COMMIT_POLL_REMOTE_NS 2000000
int64_t commit_poll_window_ns(const Commit *c);
bool commit_poll_begin(Commit *c);
bool commit_poll_done(const Commit *c);
bool commit_poll_end(Commit *c);

/* Blocks until everything recorded so far is durable (shutdown). -1 on failure. */
int commit_sync(Commit *c);
const char *commit_error(const Commit *c);
const CommitStats *commit_stats(const Commit *c);

#endif
