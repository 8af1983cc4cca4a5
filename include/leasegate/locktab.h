/*
 * locktab — the lock state machine: free/held, FIFO waiters, reentry,
 * lease expiry and the global fencing-token counter.
 *
 * It knows nothing of HTTP, JSON or SQL. It is owned by one thread (the loop),
 * so it takes no locks. Time comes in as a Now, never read here.
 *
 * Invariants (checked by locktab_check in debug builds):
 *  - a lock is held  <=>  its expiry deadline is queued;
 *  - a free lock has no waiters (freeing a lock grants it to the first waiter);
 *  - holder.token <= lock.last_token <= locktab's last token, and every grant
 *    takes last token + 1, so tokens never repeat and never go backwards;
 *  - every waiter's wait deadline is queued;
 *  - a lock is free  <=>  its idle deadline is queued: a lock that stays free
 *    (no holder, no waiter) for forget_idle_ms is forgotten (hooks.forgotten),
 *    so names do not pile up; its last_token then lives on only in the
 *    global counter.
 * Every change to a lock's durable state is reported through hooks.changed
 * before the call that made it returns; the caller must make that change
 * durable before it reveals anything about it (group commit).
 */
#ifndef LEASEGATE_LOCKTAB_H
#define LEASEGATE_LOCKTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leasegate/clock.h"
#include "leasegate/dlist.h"
#include "leasegate/heap.h"
#include "leasegate/share.h"

#define LEASE_ID_BYTES 16

typedef struct Holder {
    uint8_t lease[LEASE_ID_BYTES];
    char *owner;    /* owned */
    char *metadata; /* owned; compact JSON object text, opaque here */
    char *request_id; /* owned; the client's id of the acquire that made or last
                       * re-entered this grant, or NULL when it gave none */
    char *key;        /* owned; the name of the API key the grant was made for, or NULL */
    uint64_t token;
    int64_t ttl_ms;
    int64_t acquired_at_ms; /* Unix ms */
    int64_t expires_at_ms;  /* Unix ms: announced, never later than the deadline */
    int64_t deadline_ms;    /* boot clock: when the lease ends; -1 in a record
                             * loaded from another boot (then expires_at_ms rules) */
    uint32_t count;         /* reentries: 1 for a fresh grant */
    /* In memory only, never stored: the answers that reveal the grant (or its
     * last re-entry) and have not ended yet, and whether one was delivered
     * (locktab_answer_started, locktab_answer_ended). A loaded holder counts
     * as delivered: its answers were another process's. */
    uint32_t answers;
    bool delivered;
} Holder;

/* A deadline is this much later than ttl_ms on the boot clock, so that the
 * lease never ends before its announced expires_at_ms, and a grant after it
 * is never stamped before that (acquired_at_ms >= the previous expires_at_ms).
 * Each Now holds both clocks rounded down (up to 1 ms each), the wall clock
 * read up to CLOCK_PAIR_MAX_GAP_NS after the boot clock (clock.h). Both
 * hold while the gap of the Now that set the deadline is under 1 ms: with
 * a slack of 1, the roundings alone could use it all up, so any gap broke
 * them. */
#define LOCKTAB_DEADLINE_SLACK_MS 2

typedef struct Deadline {
    HeapEntry entry;
    uint8_t kind; /* which struct embeds it: a lock's expiry or a waiter's wait */
} Deadline;

typedef struct Waiter Waiter;

typedef struct Lock {
    char *name;          /* owned; the lock table's key */
    uint64_t id;         /* this incarnation of the name (names can be forgotten and reused) */
    uint64_t last_token; /* last token granted for this lock; 0 if never */
    bool held;
    Holder holder;       /* valid when held */
    Deadline expiry;     /* queued while held */
    Deadline idle;       /* queued while free: when to forget the lock */
    DList waiters;       /* FIFO of Waiter.link: the head is served next */
    uint64_t index;      /* moves with every change a reader can see (holder, renewal,
                          * waiters): locktab_index */
    Charge charge;       /* who the name is counted against (share.h): AcquireArgs.charge of
                          * the acquire that made it, or locktab_set_charge; opaque here */
} Lock;

typedef struct LocktabHooks {
    void *ud;
    /* The durable state of `lock` changed. */
    void (*changed)(void *ud, const Lock *lock);
    /* A queued waiter was granted `lock` (its holder is the new grant). */
    void (*granted)(void *ud, void *waiter_ctx, const Lock *lock);
    /* A queued waiter's wait_ms passed without a grant. */
    void (*timed_out)(void *ud, void *waiter_ctx, const Lock *lock);
    /* The lock stayed free for forget_idle_ms and is about to be freed. */
    void (*forgotten)(void *ud, const Lock *lock);
    /* A lease of `lock` ended (how: a LeaseEnd); reported in the same call as
     * the change that ended it, so it can share its commit. seq is its place
     * in the lease history. */
    void (*ended)(void *ud, const Lock *lock, const uint8_t *lease, uint64_t token, int how, uint64_t seq);
} LocktabHooks;

typedef struct LocktabLimits {
    size_t max_locks;
    size_t max_waiters;          /* in total */
    size_t max_waiters_per_lock;
    size_t lease_history;        /* ended leases remembered for not_holder reasons */
    int64_t forget_idle_ms;      /* a lock free this long is forgotten (> 0) */
} LocktabLimits;

typedef struct AcquireArgs {
    const char *owner;
    const char *metadata;        /* NULL: "{}" for a grant, unchanged for reentry */
    int64_t ttl_ms;              /* reentry: 0 keeps the lease's ttl */
    int64_t wait_ms;             /* 0: try once */
    const uint8_t *lease;        /* NULL, or the holder's lease for reentry */
    const uint8_t *new_lease;    /* the lease id to use if granted now (NULL for reentry) */
    const char *request_id;      /* NULL, or the client's id for this acquire: a repeat of
                                  * the acquire that made or last re-entered the current
                                  * grant (same request_id, owner and key) changes nothing
                                  * and answers LOCK_REPLAYED */
    const char *key;             /* NULL, or the name of the API key acquiring (Holder.key) */
    Charge charge;               /* Lock.charge when this acquire makes a new name */
} AcquireArgs;

typedef enum LockResult {
    LOCK_OK,          /* granted, reentered, renewed or released */
    LOCK_REPLAYED,    /* acquire: a retry of the acquire that made the current grant
                       * (AcquireArgs.request_id); *lock_out is that grant, unchanged */
    LOCK_QUEUED,      /* acquire: waiting; the waiter is returned */
    LOCK_BUSY,        /* acquire: held by another and not waiting */
    LOCK_NOT_HOLDER,  /* the given lease does not hold the lock */
    LOCK_TOO_MANY_LOCKS,   /* max_locks names are known */
    LOCK_TOO_MANY_WAITERS, /* max_waiters, or max_waiters_per_lock for this lock */
    LOCK_NOMEM,
} LockResult;

typedef enum NotHolderReason {
    REASON_UNKNOWN,
    REASON_EXPIRED,
    REASON_SUPERSEDED,
    REASON_RELEASED,
    REASON_REVOKED,
} NotHolderReason;

typedef struct Locktab Locktab;

/* NULL on allocation failure. */
Locktab *locktab_new(const LocktabLimits *limits, const LocktabHooks *hooks);
/* Frees every lock and waiter; waiter contexts are not touched. */
void locktab_free(Locktab *lt);

/* Start-up, after loading: who lock `name` is counted against (Lock.charge). */
void locktab_set_charge(Locktab *lt, const char *name, Charge charge);
/* Two Holder.key values name the same key (or both none). */
bool locktab_same_key(const char *a, const char *b);

/* Start-up: adds a lock read from storage (max_locks applies to new names
 * only). A holder whose expiry has passed is loaded too, and released by the
 * first locktab_tick (call it once loading is done). `holder` may be NULL.
 * The holder's deadline is kept when it is on this boot's clock; a holder
 * from another boot (the machine restarted) keeps what is left until its
 * expires_at_ms by the wall clock, but never more than one ttl (both plus
 * LOCKTAB_DEADLINE_SLACK_MS, as at a grant). */
LockResult locktab_load(Locktab *lt, const char *name, uint64_t last_token, const Holder *holder,
                        const Now *now);

/* On LOCK_OK *lock_out is the held lock (the grant or the reentry). On
 * LOCK_QUEUED *waiter_out is the new waiter, which calls hooks.granted or
 * hooks.timed_out exactly once, unless cancelled first. */
LockResult locktab_acquire(Locktab *lt, const char *name, const AcquireArgs *args, void *waiter_ctx,
                           const Now *now, const Lock **lock_out, Waiter **waiter_out);
/* ttl_ms 0 keeps the lease's ttl. */
LockResult locktab_renew(Locktab *lt, const char *name, const uint8_t *lease, int64_t ttl_ms,
                         const Now *now, const Lock **lock_out);
/* Decrements the reentry count; at zero frees the lock and grants it to the
 * first waiter. *count_left is the count after the release. */
LockResult locktab_release(Locktab *lt, const char *name, const uint8_t *lease, const Now *now,
                           uint32_t *count_left);
/* An admin's force-release: ends the holder's lease whatever its reentry
 * count (hooks.ended with LEASE_END_REVOKED) and grants the lock to the first
 * waiter. LOCK_NOT_HOLDER when nobody holds it; LOCK_OK with the ended
 * lease's token in *token. */
LockResult locktab_revoke(Locktab *lt, const char *name, const Now *now, uint64_t *token);
/* The lock `name` held by `lease` right now (its deadline not passed, even
 * if locktab_tick has not run yet), or NULL. */
const Lock *locktab_held_by(const Locktab *lt, const char *name, const uint8_t *lease, const Now *now);
/* Start-up, before the locks: the last lease-history number stored. */
void locktab_continue_history(Locktab *lt, uint64_t seq);
/* Start-up, after the locks: an ended lease read from storage (oldest
 * first). Leases of locks that are no longer known are skipped. */
void locktab_load_ended(Locktab *lt, const char *name, const uint8_t *lease, uint64_t token, int how,
                        uint64_t seq);
/* Why `lease` does not hold lock `name` (after LOCK_NOT_HOLDER). */
NotHolderReason locktab_why_not(const Locktab *lt, const char *name, const uint8_t *lease);
/* Removes a waiter whose client went away. Its hooks are never called. */
void locktab_cancel(Locktab *lt, Waiter *w);
/* The name of the lock a waiter waits for (valid while it waits). */
const char *locktab_waiter_lock(const Waiter *w);

/* Fires every deadline due at `now`: expiries (and the grants they cause) and
 * wait timeouts. */
void locktab_tick(Locktab *lt, const Now *now);
/* Milliseconds until the next deadline (0 if due), or -1 when none. */
int64_t locktab_next_timeout_ms(const Locktab *lt, const Now *now);

const Lock *locktab_get(const Locktab *lt, const char *name);
/* An answer that reveals the grant of `lease` on `name` (a fresh grant, a
 * re-entry, or a request_id's replay of either) is on its way to a client. */
void locktab_answer_started(Locktab *lt, const char *name, const uint8_t *lease);
/* That answer ended, delivered or not. True when the caller must undo the
 * grant or re-entry (release it once): it was not delivered, and no other
 * answer of it was delivered or is still on its way (a replay sent while
 * the first answer waited: undoing the grant then would make that replay's
 * answer a lie). False when the lease no longer holds the lock. */
bool locktab_answer_ended(Locktab *lt, const char *name, const uint8_t *lease, bool delivered);
/* Calls fn for up to `limit` locks whose names start with `prefix` and sort
 * after `after` (NULL: from the start), in byte order. Returns true when more
 * matching locks follow. */
bool locktab_list(const Locktab *lt, const char *prefix, const char *after, size_t limit,
                  void (*fn)(void *ud, const Lock *lock), void *ud);

/* Change indexes, for watches (GET /v1/locks/NAME?index=N): every change a
 * reader of a lock can see (a grant, renewal, release, expiry, revocation, a
 * waiter joining or leaving) gives the lock the next value of one counter, so
 * a lock's index only grows, and a forgotten lock's next incarnation starts
 * above every index the name had. An absent lock reads as the index of the
 * last forget. start_index sets the counter at start-up: the gateway starts
 * it from the wall clock, so that indexes seen before a restart stay below
 * the new ones. */
void locktab_start_index(Locktab *lt, uint64_t base);
uint64_t locktab_index(const Locktab *lt, const char *name);
uint64_t locktab_index_now(const Locktab *lt); /* the highest index given so far */
/* Calls fn for the first `limit` waiters of lock, in queue order; since_ms is
 * the Unix time the waiter joined. */
void locktab_each_waiter(const Lock *lock, size_t limit,
                         void (*fn)(void *ud, const char *owner, int64_t since_ms), void *ud);

uint64_t locktab_last_token(const Locktab *lt);
void locktab_raise_last_token(Locktab *lt, uint64_t token); /* start-up: the stored counter */
size_t locktab_locks(const Locktab *lt);
size_t locktab_held(const Locktab *lt);
size_t locktab_waiters(const Locktab *lt);
uint64_t locktab_expiries(const Locktab *lt); /* leases ended by their TTL so far */
uint64_t locktab_forgotten(const Locktab *lt); /* idle locks forgotten so far */
/* Asserts every invariant listed above over the whole table (debug builds). */
void locktab_check(const Locktab *lt);

#endif
