/*
 * locktab — the lock state machine: locks (exclusive writers or shared
 * readers) and semaphores (up to `limit` permits), FIFO waiters, reentry,
 * lease expiry, lock-delay and the global fencing-token counter.
 *
 * It knows nothing of HTTP, JSON or SQL. It is owned by one thread (the loop),
 * so it takes no locks. Time comes in as a Now, never read here.
 *
 * Three namespaces (LockKind): locks, semaphores and elections (issue 40); a
 * name may be all three, and they have nothing to do with each other except
 * the one token counter. An election is a lock in its own namespace whose
 * one holder is the leader (its token the term) and whose waiters are the
 * candidates, in arrival order: always in write mode, without reentry or
 * lock-delay, its leader's lease carrying a value (Holder.value: what the
 * candidate campaigned with, then what the leader proclaims).
 * Every grant is a lease of its own (a Holder: its own lease id, token and
 * expiry): the writer of a lock, each reader, each grant of a semaphore,
 * which holds one permit or several (AcquireArgs.permits: one lease, one
 * token, all its permits given back together).
 *
 * Fairness (grant_next in locktab.c): the waiters of a name form one FIFO
 * list and only its head is ever granted; nobody is granted past a waiter
 * (no barging: a reader that comes while readers hold and a writer waits
 * waits behind the writer, so neither side starves). When the head can be
 * granted, it is, and so is the next, and so on: a writer's end grants the
 * next writer, or the whole run of readers at the head up to the next
 * writer; freed permits grant the waiters at the head while their permits
 * fit (a head that asks for 3 keeps one that asks for 1 behind it waiting,
 * so that large requests do not starve).
 *
 * A lock's value (issue 40: Chubby's contents, a checkpoint the next holder
 * reads): opaque JSON text that only the lock's writer can set, and that
 * outlives the holder until a writer sets another (or null). A lock with a
 * value other than null is never idle, so it is never forgotten.
 *
 * Lock-delay (locks only): a lease that ends uncleanly (expired, revoked)
 * with a lock_delay_ms keeps the lock from every grant until that long after
 * its end; waiters keep their places.
 *
 * Invariants (checked by locktab_check in debug builds):
 *  - every holder's expiry deadline is queued, and the holder is found by its
 *    lease id in O(1) (the table's lease index: a lock with thousands of
 *    readers is never scanned for a lease); a lock's holders all have its
 *    mode; a lock in write mode has one holder; a semaphore's holders hold
 *    at most `limit` permits together (Lock.permits_used, their sum);
 *  - the head waiter of a name could not be granted now: a lock-delay runs,
 *    or the holders exclude it (so a free lock without a delay, or a
 *    semaphore with a free permit, has no waiters);
 *  - holder.token <= lock.last_token <= locktab's last token, and every grant
 *    takes last token + 1, so tokens never repeat and never go backwards;
 *  - every waiter's wait deadline is queued; a lock-delay's deadline is
 *    queued while it runs;
 *  - a name is idle (no holder, no waiter, no delay, no value)  <=>  its idle deadline
 *    is queued: a name that stays idle for forget_idle_ms is forgotten
 *    (hooks.forgotten), so names do not pile up; its last_token then lives
 *    on only in the global counter.
 * Durable state is one record per name and one per lease: every change to
 * it is reported before the call that made it returns, through one hook per
 * record: hooks.changed (the name's own record: last token, limit,
 * lock-delay), hooks.holder_changed (a lease's record, whatever its mode:
 * made or changed), hooks.ended (a lease's record goes) and
 * hooks.value_changed (a lock's value, a record of its own); the caller must
 * make the change durable before it reveals anything about it (group
 * commit).
 */
#ifndef LEASEGATE_LOCKTAB_H
#define LEASEGATE_LOCKTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/heap.h"
#include "core/share.h"
#include "core/valwrites.h"
#include "leasegate/dlist.h"

#define LEASE_ID_BYTES 16

/* Which namespace a name is in. LockKind and LockMode are stored (records
 * and rows name them by number): every value is numbered, and a number once
 * written keeps its meaning. */
typedef enum LockKind { KIND_LOCK = 0, KIND_SEMAPHORE = 1, KIND_ELECTION = 2 } LockKind;
#define LOCK_KINDS 3

/* A lock's holders: one writer, or readers that share it. A permit is
 * MODE_WRITE (a semaphore has no modes). */
typedef enum LockMode { MODE_WRITE = 0, MODE_READ = 1 } LockMode;

/* The longest lock-delay, and the most permits of a semaphore (and of one of its leases). */
#define LOCKTAB_DELAY_MAX_MS 60000
#define LOCKTAB_LIMIT_MAX 10000

typedef struct Holder {
    uint8_t lease[LEASE_ID_BYTES];
    char *owner;    /* owned */
    char *metadata; /* owned; compact JSON object text, opaque here */
    char *request_id; /* owned; the client's id of the acquire that made or last
                       * re-entered this grant, or NULL when it gave none */
    char *key;        /* owned; the name of the API key the grant was made for, or NULL */
    char *value;      /* owned; an election's leader: its value (JSON text), or NULL (null); else NULL */
    uint64_t token;
    int64_t ttl_ms;
    int64_t acquired_at_ms; /* Unix ms */
    int64_t expires_at_ms;  /* Unix ms: announced, never later than the deadline */
    int64_t deadline_ms;    /* boot clock: when the lease ends; -1 in a record
                             * loaded from another boot (then expires_at_ms rules) */
    int64_t lock_delay_ms;  /* locks: no grant for this long after the lease ends
                             * uncleanly (0: none); 0 for a permit */
    uint32_t count;         /* reentries: 1 for a fresh grant; always 1 for a permit */
    uint32_t permits;       /* a semaphore's lease: the permits it holds (1..limit); 1 for a lock's */
    uint8_t mode;           /* LockMode */
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
 * them. A lock-delay's deadline has the same slack after its announced
 * delay_until_ms. */
#define LOCKTAB_DEADLINE_SLACK_MS 2

/* A lock's value: what its writer last set (locktab_set_value). */
typedef struct LockValue {
    char *text;       /* owned; the JSON text as its writer sent it, or NULL: none, or null written */
    uint64_t version; /* how many times it was written since the name was made (0: never) */
    uint64_t token;   /* the token of the lease that wrote it (0: never written) */
    char *key;        /* owned; the API key that wrote it (what it counts against), or NULL */
    int64_t at_ms;    /* Unix ms of the write */
    Charge charge;    /* who its bytes are counted against (share.h); opaque here */
    ValueWrites writes; /* owned; the request_ids of the last writes of the grant of `token`
                         * (valwrites.h), which a retry repeats (locktab_value_write) */
} LockValue;

typedef struct Deadline {
    HeapEntry entry;
    uint8_t kind; /* which struct embeds it: a holder's expiry, a waiter's wait, a name's idle time or delay */
} Deadline;

typedef struct Waiter Waiter;

typedef struct Lock {
    char *name;          /* owned; the lock table's key (in its kind's namespace) */
    uint64_t id;         /* this incarnation of the name (names can be forgotten and reused) */
    uint64_t last_token; /* last token granted for this name; 0 if never */
    uint8_t kind;        /* LockKind */
    uint8_t mode;        /* LockMode of the holders while held (a semaphore's: MODE_WRITE) */
    uint32_t limit;      /* a semaphore's permits (set by the acquire that finds it idle); 0 for a lock */
    uint32_t permits_used; /* a semaphore's permits its holders hold (their Holder.permits); 0 for a lock */
    DList holders;       /* the table's, in grant order: locktab_holder, locktab_next_holder */
    int64_t holders_due_from_ms; /* boot clock: no holder's deadline is earlier (a lower bound, made
                                  * exact whenever the holders are walked for expiries) */
    int64_t delay_until_ms; /* Unix ms: a lock-delay runs until then (announced); 0 when none */
    Deadline delay;      /* queued while a lock-delay runs */
    Deadline idle;       /* queued while idle: when to forget the name */
    DList waiters;       /* FIFO of Waiter.link: the head is served next */
    uint64_t index;      /* moves with every change a reader can see (holders, renewals,
                          * waiters, delays): locktab_index */
    Charge charge;       /* who the name is counted against (share.h): AcquireArgs.charge of
                          * the acquire that made it, or locktab_set_charge; opaque here */
    LockValue value;     /* locks only; zero until written */
    int64_t vacant_since_ms; /* elections: Unix ms since when nobody leads (its last leader's end,
                              * or when this gateway made or loaded the name) */
} Lock;

static inline bool locktab_is_held(const Lock *lock) { return lock->holders.len > 0; }
/* The first holder in grant order (a lock's writer or oldest reader, a
 * semaphore's oldest permit), or NULL when nobody holds it; the next one. */
const Holder *locktab_holder(const Lock *lock);
const Holder *locktab_next_holder(const Holder *h);

typedef struct LocktabHooks {
    void *ud;
    /* The name's own record changed: its last token (a grant, reported
     * before the grant's holder_changed), a semaphore's limit, a lock-delay
     * that began or ended. Changes of its holders alone are not reported
     * here; a waiter joining or leaving is reported by none of the hooks
     * (the caller knows). */
    void (*changed)(void *ud, const Lock *lock);
    /* A queued waiter was granted `lock`: h is its grant. */
    void (*granted)(void *ud, void *waiter_ctx, const Lock *lock, const Holder *h);
    /* A queued waiter's wait_ms passed without a grant. */
    void (*timed_out)(void *ud, void *waiter_ctx, const Lock *lock);
    /* The name stayed idle for forget_idle_ms and is about to be freed. */
    void (*forgotten)(void *ud, const Lock *lock);
    /* A lease of `lock` ended (how: a LeaseEnd): its record goes; h is still
     * valid (no longer among the holders). Reported in the same call as the
     * change that ended it, so it can share its commit. seq is its place in
     * the lease history; actor is what the caller of locktab_release or
     * locktab_revoke passed (NULL for an expiry). May be NULL. */
    void (*ended)(void *ud, void *actor, const Lock *lock, const Holder *h, int how, uint64_t seq);
    /* A lease of `lock`, whatever its mode, was granted (after changed
     * reported the name's last token), re-entered, renewed or released to a
     * count above 0: its record is h. May be NULL. */
    void (*holder_changed)(void *ud, const Lock *lock, const Holder *h);
    /* lock->value was written (locktab_set_value): its record. May be NULL. */
    void (*value_changed)(void *ud, const Lock *lock);
    /* A queued waiter is about to leave the queue by a grant or a timeout,
     * before anything is granted to it: returns the context its granted or
     * timed_out hook is then called with (the caller may keep a waiter in a
     * smaller form while it waits, and need the whole one to answer), or
     * NULL when it cannot have one (out of memory): the waiter then leaves
     * the queue as if cancelled, nothing granted and neither hook called.
     * May be NULL: the context is used as it is. */
    void *(*waking)(void *ud, void *waiter_ctx);
} LocktabHooks;

typedef struct LocktabLimits {
    size_t max_locks;            /* names known, of both kinds */
    size_t max_waiters;          /* in total */
    size_t max_waiters_per_lock;
    size_t lease_history;        /* ended leases remembered for not_holder reasons */
    int64_t forget_idle_ms;      /* a name idle this long is forgotten (> 0) */
} LocktabLimits;

typedef struct AcquireArgs {
    const char *owner;
    const char *metadata;        /* NULL: "{}" for a grant, unchanged for reentry */
    int64_t ttl_ms;              /* reentry: 0 keeps the lease's ttl */
    int64_t wait_ms;             /* 0: try once */
    const uint8_t *lease;        /* NULL, or the holder's lease for reentry (locks only) */
    const uint8_t *new_lease;    /* the lease id to use if granted now (NULL for reentry) */
    const char *request_id;      /* NULL, or the client's id for this acquire: a repeat of
                                  * the acquire that made or last re-entered a current
                                  * grant (same request_id, owner and key) changes nothing
                                  * and answers LOCK_REPLAYED */
    const char *key;             /* NULL, or the name of the API key acquiring (Holder.key) */
    Charge charge;               /* Lock.charge when this acquire makes a new name */
    uint8_t mode;                /* locks: LockMode */
    bool mode_given;             /* reentry: a mode other than the lease's is LOCK_MODE_CONFLICT */
    int64_t lock_delay_ms;       /* locks: 0..LOCKTAB_DELAY_MAX_MS (Holder.lock_delay_ms) */
    uint32_t limit;              /* semaphores: 1..LOCKTAB_LIMIT_MAX */
    uint32_t permits;            /* semaphores: the permits one lease takes, 1..limit (0: 1) */
    const char *value;           /* elections: the candidate's value (Holder.value), or NULL */
} AcquireArgs;

typedef enum LockResult {
    LOCK_OK,          /* granted, reentered, renewed or released */
    LOCK_REPLAYED,    /* acquire: a retry of the acquire that made a current grant
                       * (AcquireArgs.request_id); *holder_out is that grant, unchanged;
                       * set_value: a retry of one of the writes the value remembers */
    LOCK_QUEUED,      /* acquire: waiting; the waiter is returned */
    LOCK_BUSY,        /* acquire: not grantable now (held, full, or in a lock-delay) and not waiting */
    LOCK_NOT_HOLDER,  /* the given lease does not hold the lock */
    LOCK_MODE_CONFLICT,    /* reentry with a mode other than the lease's */
    LOCK_LIMIT_MISMATCH,   /* a semaphore with holders or waiters has another limit */
    LOCK_TOO_MANY_LOCKS,   /* max_locks names are known */
    LOCK_TOO_MANY_WAITERS, /* max_waiters, or max_waiters_per_lock for this lock */
    LOCK_VERSION_MISMATCH, /* set_value: the value's version is not the one asked for */
    LOCK_REQUEST_ID_REUSED, /* set_value: the request_id of a remembered write with another value or key */
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

/* Start-up, after loading: who name `name` of kind is counted against (Lock.charge). */
void locktab_set_charge(Locktab *lt, LockKind kind, const char *name, Charge charge);
/* Two Holder.key values name the same key (or both none). */
bool locktab_same_key(const char *a, const char *b);

/* Start-up: adds a name read from storage (max_locks applies to new names
 * only), with its last token, a semaphore's limit and a lock's lock-delay
 * (delay_until_ms, Unix ms; 0: none; what is left of it by the wall clock
 * runs, but never more than LOCKTAB_DELAY_MAX_MS). Then its holders, each
 * with locktab_load_holder. */
LockResult locktab_load(Locktab *lt, LockKind kind, const char *name, uint64_t last_token, uint32_t limit,
                        int64_t delay_until_ms, const Now *now);
/* Start-up: a holder read from storage (its name is created if need be;
 * permits 0 reads as 1). A holder whose expiry has passed is loaded too, and ended by the first
 * locktab_tick (call it once loading is done). The holder's deadline is kept
 * when it is on this boot's clock; a holder from another boot (the machine
 * restarted) keeps what is left until its expires_at_ms by the wall clock,
 * but never more than one ttl (both plus LOCKTAB_DEADLINE_SLACK_MS, as at a
 * grant). LOCK_BUSY when it cannot hold with the holders loaded before (a
 * writer beside another holder, a reader beside a writer, permits past a
 * semaphore's limit). */
LockResult locktab_load_holder(Locktab *lt, LockKind kind, const char *name, const Holder *holder, const Now *now);

/* On LOCK_OK and LOCK_REPLAYED *lock_out is the lock and *holder_out the
 * grant (new, re-entered or repeated). On LOCK_QUEUED *waiter_out is the
 * new waiter, which calls hooks.granted or hooks.timed_out exactly once,
 * unless cancelled first. On LOCK_BUSY and LOCK_LIMIT_MISMATCH *lock_out is
 * the lock. */
LockResult locktab_acquire(Locktab *lt, LockKind kind, const char *name, const AcquireArgs *args,
                           void *waiter_ctx, const Now *now, const Lock **lock_out, const Holder **holder_out,
                           Waiter **waiter_out);
/* What locktab_acquire would answer now for a fresh acquire in `mode` with
 * `limit` and `permits` (no lease), and with request_id, owner and key a
 * replay, changing nothing: LOCK_OK (granted), LOCK_REPLAYED, LOCK_BUSY
 * (queued or refused), LOCK_LIMIT_MISMATCH. Leases and delays that are due
 * count as ended. */
LockResult locktab_preview(const Locktab *lt, LockKind kind, const char *name, uint8_t mode, uint32_t limit,
                           uint32_t permits, const char *owner, const char *request_id, const char *key,
                           const Now *now);
/* ttl_ms 0 keeps the lease's ttl. *holder_out is the lease renewed. */
LockResult locktab_renew(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, int64_t ttl_ms,
                         const Now *now, const Lock **lock_out, const Holder **holder_out);
/* Decrements the lease's reentry count; at zero ends the lease and grants
 * the waiters that can now be. *count_left is the count after the release.
 * actor (opaque here: who asks, or NULL) is handed to hooks.ended. */
LockResult locktab_release(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, void *actor,
                           const Now *now, uint32_t *count_left);
/* What a write of a lock's value asks (locktab_set_value). */
typedef struct ValueArgs {
    const char *text;    /* the new value's JSON text (copied), or NULL: null */
    bool check_version;  /* write only when the value's version is if_version now */
    uint64_t if_version;
    const char *key;     /* NULL, or the name of the API key writing (LockValue.key) */
    Charge charge;       /* LockValue.charge from now on */
    const char *request_id; /* NULL, or the client's id for this write (1..VALWRITE_ID_MAX bytes) */
    const uint8_t *digest;  /* with request_id: ValueWrite.digest of key and text (the caller's hash) */
} ValueArgs;
/* The write of the value that a write by `holder` (the lock's writer now)
 * with this request_id repeats, or NULL: the one of the value's remembered
 * writes (the last VALWRITES_MAX of the grant that wrote last) with that
 * request_id, when that grant is the holder's. The caller compares its
 * digest: the same is a repeat (answered with that write's version, nothing
 * written), another is the id reused (LOCK_REQUEST_ID_REUSED). A write
 * older than the list is not recognised: it is a new write, which the
 * if_version it carries refuses (the version moved on). */
const ValueWrite *locktab_value_write(const LockValue *v, const Holder *holder, const char *request_id);
/* Writes lock `name`'s value, for `lease`, which must hold it now as its
 * writer (a reader's lease, another lock's, or one that ended is
 * LOCK_NOT_HOLDER, and nothing changes): its version goes up by one, its
 * token is the lease's, its request_id joins the remembered writes (a new
 * list when another grant wrote last); the index moves and
 * hooks.value_changed reports it. Nothing changes, and it is LOCK_REPLAYED,
 * when it repeats a remembered write (locktab_value_write, the same digest),
 * or LOCK_REQUEST_ID_REUSED (another digest); both are checked before the
 * version. LOCK_VERSION_MISMATCH when check_version and the version is
 * another. *lock_out is the lock, when there is one (its value as it is after the
 * call). The old value's text is freed: the caller reads what it needs of
 * it (its charge, its size) before. */
LockResult locktab_set_value(Locktab *lt, const char *name, const uint8_t *lease, const ValueArgs *args,
                             const Now *now, const Lock **lock_out);
/* An election's leader replaces its value (Holder.value; text copied, NULL:
 * null): LOCK_NOT_HOLDER unless `lease` leads election `name` now. The
 * lease's record changes (hooks.holder_changed) and the index moves.
 * *holder_out is the leader's lease. */
LockResult locktab_proclaim(Locktab *lt, const char *name, const uint8_t *lease, const char *text, const Now *now,
                            const Lock **lock_out, const Holder **holder_out);
/* Start-up, after the holders: a lock's value read from storage (its name
 * is created if need be). The strings and the remembered writes are copied
 * (value->writes must be valwrites_valid at value->version). */
LockResult locktab_load_value(Locktab *lt, const char *name, const LockValue *value, const Now *now);
/* Start-up: who the value of lock `name` is counted against. */
void locktab_set_value_charge(Locktab *lt, const char *name, Charge charge);

/* An admin's force-release: ends every lease of the name whatever its
 * reentry count (hooks.ended with LEASE_END_REVOKED, in grant order), starts
 * their lock-delays and grants the waiters that can then be.
 * LOCK_NOT_HOLDER when nobody holds it. */
LockResult locktab_revoke(Locktab *lt, LockKind kind, const char *name, void *actor, const Now *now);
/* The same for the one running lease of name whose token is `token` (a
 * semaphore's permit; tokens never repeat): the other leases are untouched.
 * LOCK_NOT_HOLDER when no running lease has it. */
LockResult locktab_revoke_token(Locktab *lt, LockKind kind, const char *name, uint64_t token, void *actor,
                                const Now *now);
/* The holder with `lease` of name right now (its deadline not passed, even
 * if locktab_tick has not run yet), or NULL. */
const Holder *locktab_held_by(const Locktab *lt, LockKind kind, const char *name, const uint8_t *lease,
                              const Now *now);
/* Start-up, before the locks: the last lease-history number stored. */
void locktab_continue_history(Locktab *lt, uint64_t seq);
/* Start-up, after the locks: an ended lease read from storage (oldest
 * first). Leases of names that are no longer known are skipped. */
void locktab_load_ended(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, uint64_t token,
                        int how, uint64_t seq);
/* The token of `lease` on name: its holder's (even if its deadline has
 * passed), else that of its ended lease while the history remembers it, else
 * 0 (never issued for name, or forgotten). */
uint64_t locktab_token_of(const Locktab *lt, LockKind kind, const char *name, const uint8_t *lease);
/* Why `lease` does not hold name (after LOCK_NOT_HOLDER). */
NotHolderReason locktab_why_not(const Locktab *lt, LockKind kind, const char *name, const uint8_t *lease);
/* Removes a waiter whose client went away. Its hooks are never called; the
 * waiters behind it may be granted (hooks.granted). */
void locktab_cancel(Locktab *lt, Waiter *w, const Now *now);
/* The context a waiter's hooks get from now on (its caller moved it). */
void locktab_waiter_set_ctx(Waiter *w, void *ctx);
/* The name a waiter waits for (valid while it waits), and its kind. */
const char *locktab_waiter_lock(const Waiter *w);
LockKind locktab_waiter_kind(const Waiter *w);

/* Fires every deadline due at `now`: expiries (and the grants they cause),
 * ends of lock-delays (and theirs) and wait timeouts. */
void locktab_tick(Locktab *lt, const Now *now);
/* Milliseconds until the next deadline (0 if due), or -1 when none. */
int64_t locktab_next_timeout_ms(const Locktab *lt, const Now *now);

const Lock *locktab_get(const Locktab *lt, LockKind kind, const char *name);
/* Whether a lock-delay runs on lock at `now` (its deadline not passed). */
bool locktab_delayed(const Lock *lock, const Now *now);
/* An answer that reveals the grant of `lease` on `name` (of `kind`: a fresh
 * grant, a re-entry, or a request_id's replay of either) is on its way to a
 * client. */
void locktab_answer_started(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease);
/* That answer ended, delivered or not. True when the caller must undo the
 * grant or re-entry (release it once): it was not delivered, and no other
 * answer of it was delivered or is still on its way (a replay sent while
 * the first answer waited: undoing the grant then would make that replay's
 * answer a lie). False when the lease no longer holds the lock. */
bool locktab_answer_ended(Locktab *lt, LockKind kind, const char *name, const uint8_t *lease, bool delivered);
/* Calls fn for up to `limit` names of `kind` that start with `prefix` and sort
 * after `after` (NULL: from the start), in byte order. Returns true when more
 * matching names follow. */
bool locktab_list(const Locktab *lt, LockKind kind, const char *prefix, const char *after, size_t limit,
                  void (*fn)(void *ud, const Lock *lock), void *ud);

/* Change indexes, for watches (GET /v1/locks/NAME?index=N): every change a
 * reader of a name can see (a grant, renewal, release, expiry, revocation, a
 * waiter joining or leaving, a lock-delay ending) gives the name the next
 * value of one counter, so a name's index only grows, and a forgotten name's
 * next incarnation starts above every index the name had. An absent name
 * reads as the index of the last forget. start_index sets the counter at
 * start-up: the gateway starts it from the wall clock, so that indexes seen
 * before a restart stay below the new ones. */
void locktab_start_index(Locktab *lt, uint64_t base);
uint64_t locktab_index(const Locktab *lt, LockKind kind, const char *name);
uint64_t locktab_index_now(const Locktab *lt); /* the highest index given so far */
/* One waiter as readers see it: since_ms is the Unix time it joined, mode
 * its LockMode, permits what it asks of a semaphore (1 otherwise). */
typedef struct WaiterView {
    const char *owner;
    int64_t since_ms;
    int mode;
    uint32_t permits;
} WaiterView;
/* Calls fn for the first `limit` waiters of lock, in queue order. */
void locktab_each_waiter(const Lock *lock, size_t limit, void (*fn)(void *ud, const WaiterView *w), void *ud);

/* What the table holds, per kind. */
typedef struct LocktabCounts {
    size_t names;   /* known */
    size_t held;    /* names with a holder */
    size_t leases;  /* holders */
    size_t readers; /* holders in MODE_READ */
    size_t permits; /* semaphores: the permits held (a lease may hold several) */
    size_t waiters;
    size_t values;      /* locks with a value other than null */
    size_t value_bytes; /* their texts' bytes */
} LocktabCounts;
LocktabCounts locktab_counts(const Locktab *lt, LockKind kind);

uint64_t locktab_last_token(const Locktab *lt);
void locktab_raise_last_token(Locktab *lt, uint64_t token); /* start-up: the stored counter */
size_t locktab_locks(const Locktab *lt);   /* names known, of both kinds */
size_t locktab_held(const Locktab *lt);    /* leases held, of both kinds */
size_t locktab_waiters(const Locktab *lt); /* of both kinds */
uint64_t locktab_expiries(const Locktab *lt); /* leases ended by their TTL so far */
/* Holders looked at so far by renewals, releases and reentries, to find
 * their lease and the leases that ran out meanwhile: about one per call,
 * however many holders a lock has (the lease index, and a bound on the
 * holders' deadlines), not a walk of the lock's holders. */
uint64_t locktab_holder_visits(const Locktab *lt);
uint64_t locktab_forgotten(const Locktab *lt); /* idle names forgotten so far */
uint64_t locktab_delays(const Locktab *lt);    /* lock-delays started so far */
/* Asserts every invariant listed above over the whole table (debug builds). */
void locktab_check(const Locktab *lt);

#endif
