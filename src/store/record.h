/*
 * record — the durable records: every kind of thing storage keeps, listed once.
 *
 * A change that must survive a crash (a grant, a fence mark, an audit row...)
 * is one StoreRecord of one kind below; a batch (store.h) is one array of
 * them in the order the changes were made, and a store applies them in that
 * order, so that the later record of one key wins, as in memory. A record is
 * a put of its key, or with `removal` the removal of its key (then only its
 * key fields are set).
 *
 * Each store describes each kind once, in one table indexed by the kind:
 * store_sqlite.c its table, columns and binder (its statements generated from
 * the columns), store_etcd.c its key and codec; the writer, the loader and
 * the checks read those tables. Every switch over a kind has no default, so
 * that the compiler names each place a new kind still lacks (-Wswitch).
 * docs/layout.md ("Storage") says how to add a kind.
 */
#ifndef LEASEGATE_RECORD_H
#define LEASEGATE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/audit.h"
#include "core/locktab.h"
#include "store/arena.h"

/* A name's own record: what belongs to the lock or semaphore, not to any of
 * its leases (last token, a semaphore's limit, a lock's lock-delay), keyed
 * by (kind, name); as a removal, the forgotten name's. */
typedef struct StoreLock {
    const char *name;
    uint8_t kind;        /* LockKind */
    uint64_t last_token;
    uint32_t limit;      /* a semaphore's permits; 0 for a lock */
    int64_t delay_until_ms; /* locks: a lock-delay runs until then (Unix ms); 0: none */
} StoreLock;

/* One lease, whatever its mode: a lock's writer or one of its readers, or a
 * semaphore's permit (holder.mode says which), keyed by its token (unique,
 * and fixed for the lease's life). As a removal (the lease ended) only
 * holder.token, name and kind are set. */
typedef struct StoreHolder {
    const char *name;    /* the lock or semaphore */
    uint8_t kind;        /* LockKind of the name */
    Holder holder;       /* strings borrowed */
} StoreHolder;

/* A lock's value (issue 40), keyed by the lock's name: what its writer last
 * set, which outlives the writer (LockValue). As a removal (the name is
 * forgotten) only name is set. */
typedef struct StoreValue {
    const char *name;
    const char *text; /* the value's JSON text, or NULL: null written */
    uint64_t version; /* its writes so far (>= 1) */
    uint64_t token;   /* the writer's token */
    const char *key;  /* the writer's API key, or NULL */
    int64_t at_ms;    /* Unix ms of the write */
    const char *writes; /* the writes a retry may repeat (LockValue.writes) as valwrites_format's text, or
                         * NULL: none */
} StoreValue;

/* A high-water mark: a fence resource's, or the guard's for one lock (kept
 * by storage as the largest of the marks put); as a removal, a fence
 * resource's or a forgotten lock's (a fence mark lives on in a floor). */
typedef struct StoreMark {
    const char *name;
    uint64_t max_token;
    /* Guard marks only: when the guard last let a write of the lock through
     * (Unix ms; 0: unknown), so that a restart waits out --guard-settle. */
    int64_t at_ms;
} StoreMark;

/* The floor of one bucket of forgotten fence resources (fence.h); only grows. */
typedef struct StoreFloor {
    uint32_t bucket;
    uint64_t floor;
} StoreFloor;

/* A lease that ended (for not_holder reasons after a restart), keyed by seq. */
typedef struct StoreEnded {
    const char *lock;
    uint8_t kind;         /* LockKind of the name */
    const uint8_t *lease; /* LEASE_ID_BYTES */
    uint64_t token;
    int how; /* LeaseEnd */
    uint64_t seq;
} StoreEnded;

/* The token of a force-released lease (revoked.h), keyed by the token: never pruned. */
typedef struct StoreRevoked {
    uint64_t token;
    const char *lock;
} StoreRevoked;

/* Every kind, once: X(KIND, member, type). The order is the load's (every
 * record of a kind, then the next kind): names before leases and values, a name's
 * leases by token (oldest grant first; etcd's come by token across names
 * too), ended leases and audit rows by seq, so that a name is known before
 * anything of it loads. An audit row is keyed by its
 * seq; its removal (a row its key's --audit-keep evicted, auditlog.h) names
 * the seq and the key. */
#define STORE_RECORD_KINDS(X)                                                                                     \
    X(LOCK, lock, StoreLock)                                                                                      \
    X(HOLDER, holder, StoreHolder)                                                                                \
    X(VALUE, value, StoreValue)                                                                                   \
    X(FENCE, fence, StoreMark)                                                                                    \
    X(GUARD_MARK, guard_mark, StoreMark)                                                                          \
    X(FLOOR, floor, StoreFloor)                                                                                   \
    X(ENDED, ended, StoreEnded)                                                                                   \
    X(REVOKED, revoked, StoreRevoked)                                                                             \
    X(AUDIT, audit, AuditRow)

typedef enum StoreRecordKind {
#define STORE_RECORD_ENUM(K, member, type) REC_##K,
    STORE_RECORD_KINDS(STORE_RECORD_ENUM)
#undef STORE_RECORD_ENUM
    REC_KINDS
} StoreRecordKind;

typedef struct StoreRecord {
    uint8_t kind; /* StoreRecordKind */
    bool removal; /* the key goes; only the key's fields are set */
    union {
#define STORE_RECORD_MEMBER(K, member, type) type member;
        STORE_RECORD_KINDS(STORE_RECORD_MEMBER)
#undef STORE_RECORD_MEMBER
    };
} StoreRecord;

/* The kind's name, for messages ("lock", "holder", ...). */
const char *record_kind_name(StoreRecordKind kind);
/* *to = *from, its strings and bytes copied into a (they live as long as
 * its allocations). False when out of memory (*to is then not usable). */
bool record_copy(Arena *a, StoreRecord *to, const StoreRecord *from);

#endif
