/*
 * store — where durable state lives, behind one small interface.
 *
 * Storage receives plain records and never sees the lock table. A batch is
 * applied atomically (one transaction, one fsync for SQLite): after
 * store->commit returns 0, every record in it survives a crash or power loss.
 *
 * When you change StoreLock or StoreHolder, also change: the schema and
 * statements in store_sqlite.c, the records in store_etcd.c, the snapshots
 * in commit.c, and the loader in gateway.c.
 */
#ifndef LEASEGATE_STORE_H
#define LEASEGATE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/audit.h"
#include "core/locktab.h"

/* One name's durable record: a lock's (last token, lock-delay, and its
 * writer while a writer holds it) or a semaphore's (last token, limit); or,
 * with forget, the record's removal. Readers and permits are StoreHolder
 * records. Records apply in order. */
typedef struct StoreLock {
    const char *name;
    uint8_t kind;        /* LockKind */
    bool forget;         /* delete the record (and a lock's guard mark); nothing else is set */
    uint64_t last_token;
    uint32_t limit;      /* semaphores */
    int64_t delay_until_ms; /* locks: a lock-delay runs until then (Unix ms); 0: none */
    bool held;           /* locks: a writer holds it */
    Holder holder;       /* the writer, valid when held; strings borrowed */
} StoreLock;

/* A reader of a lock or a permit of a semaphore, keyed by its token (unique,
 * and fixed for the lease's life); or, with gone, its removal. */
typedef struct StoreHolder {
    const char *name;    /* the lock or semaphore */
    uint8_t kind;        /* LockKind */
    bool gone;           /* delete it: only holder.token is set */
    Holder holder;       /* strings borrowed */
} StoreHolder;

/* A high-water mark: a fence resource's, or the guard's for one lock; or,
 * with forget, a fence resource's removal (its mark lives on in a floor). */
typedef struct StoreMark {
    const char *name;
    uint64_t max_token;
    bool forget;
    /* Guard marks only: when the guard last let a write of the lock through
     * (Unix ms; 0: unknown), so that a restart waits out --guard-settle. */
    int64_t at_ms;
} StoreMark;

/* The floor of one bucket of forgotten fence resources (fence.h). */
typedef struct StoreFloor {
    uint32_t bucket;
    uint64_t floor;
} StoreFloor;

/* A lease that ended (for not_holder reasons after a restart). */
typedef struct StoreEnded {
    const char *lock;
    uint8_t kind;         /* LockKind of the name */
    const uint8_t *lease; /* LEASE_ID_BYTES */
    uint64_t token;
    int how; /* LeaseEnd */
    uint64_t seq;
} StoreEnded;

/* An audit row its key evicted (auditlog.h): storage deletes it. */
typedef struct StoreAuditDrop {
    const char *key; /* "" for rows without a key */
    uint64_t seq;
} StoreAuditDrop;

typedef struct StoreBatch {
    const StoreLock *locks;
    size_t nlocks;
    const StoreHolder *holders; /* applied after every lock record */
    size_t nholders;
    const StoreMark *fences;
    size_t nfences;
    const StoreMark *guard_marks; /* highest token the guard forwarded, per lock */
    size_t nguard_marks;
    const StoreFloor *floors;
    size_t nfloors;
    const StoreEnded *ended;
    size_t nended;
    uint64_t history_keep; /* ended leases kept: the newest this many (by seq) */
    const AuditRow *audit; /* the audit trail's new rows (audit.h), in seq order */
    size_t naudit;
    /* Rows each key's --audit-keep evicted, in the order they went (the rows
     * of one key in seq order); some may be among `audit` (kept, then
     * evicted by a later row of the same batch): they are not kept. */
    const StoreAuditDrop *audit_drops;
    size_t naudit_drops;
    /* Every audit row below this seq is gone (auditlog_gone_below); 0: not known. */
    uint64_t audit_gone_below;
    /* Nonzero when the batch forgets locks: the global token counter, which the
     * deleted rows can no longer vouch for. */
    uint64_t counter;
} StoreBatch;

typedef struct StoreLoad {
    void *ud;
    /* Called once per stored lock or semaphore; nonzero aborts the load. */
    int (*lock)(void *ud, const StoreLock *lock);
    /* After the locks: every reader and permit, by token. */
    int (*holder)(void *ud, const StoreHolder *holder);
    int (*fence)(void *ud, const StoreMark *fence);
    int (*guard_mark)(void *ud, const StoreMark *mark);
    int (*floor)(void *ud, const StoreFloor *floor);
    /* Before the locks: the largest seq of a stored ended lease (0: none). */
    int (*history_seq)(void *ud, uint64_t seq);
    /* After the locks: ended leases, oldest first. */
    int (*ended)(void *ud, const StoreEnded *ended);
    /* The token of every lease ever force-released (how LEASE_END_REVOKED):
     * kept whatever the history keeps. */
    int (*revoked)(void *ud, uint64_t token);
    /* The audit trail's rows, oldest first. */
    int (*audit)(void *ud, const AuditRow *row);
} StoreLoad;

typedef struct Store Store;

#define STORE_REFUSED 1

typedef struct StoreOps {
    /* Reads everything; *last_token is the largest token ever committed. 0 on success. */
    int (*load)(Store *s, const StoreLoad *cb, uint64_t *last_token);
    /* Applies the batch atomically and durably. 0 on success; STORE_REFUSED
     * when the store refuses writes for now (etcd's NOSPACE or CORRUPT
     * alarm: error() names it) and no more of the batch applied: commit is
     * called again with the same batch, and goes on where it stopped;
     * another value: failed. */
    int (*commit)(Store *s, const StoreBatch *batch);
    /* A store that another process may take over (etcd) has a barrier: a
     * transaction fenced like a commit that changes nothing, made now. 0 means
     * no one else can have written since this store's last commit, as of a
     * moment after the call began; nonzero (a failed fence, no answer) means
     * that cannot be known, and nothing may be revealed. NULL for a store that
     * only this process writes (SQLite): commit.h then makes no barriers. */
    int (*barrier)(Store *s);
    void (*close)(Store *s);
    /* The last error, for logs. */
    const char *(*error)(const Store *s);
    /* A consistent copy of everything committed, in an unlinked file: its
     * descriptor (the caller's to close) and *size, or -1 (see error). Called
     * between commits by the one thread that commits. NULL when the store
     * cannot copy itself (etcd: etcd's own snapshot does). */
    int (*snapshot)(Store *s, uint64_t *size);
} StoreOps;

struct Store {
    const StoreOps *ops;
};

/* Opens (creating if needed) the SQLite database at path. boot_id names this
 * boot of the machine (clock_boot_id), or is NULL when unknown: a holder's
 * boot-clock deadline is loaded only when it was written in the same boot,
 * else as -1. On failure returns NULL and writes a message into err. */
Store *store_sqlite_open(const char *path, const char *boot_id, char *err, size_t errlen);
/* Before opening: the database at path and its -wal, -shm and -journal files,
 * where they exist and others than their owner may read or write them, are
 * narrowed to their owner's bits (0600): they hold every live lease in
 * plain text. Returns how many were narrowed, naming each with its old mode
 * in note; -1 with err when one cannot be. (New files are created 0600.) */
int store_sqlite_narrow(const char *path, char *note, size_t notelen, char *err, size_t errlen);

typedef struct EtcdUrl EtcdUrl;
typedef struct Election Election;

/* The store on etcd (store_etcd.c) for the gateway that leads (election, its
 * campaign won): every commit is one etcd transaction (or, for a large batch,
 * several in order) that applies only while the election's leader key still
 * has the create revision it won with (after etcd ended the lease, the new
 * key it leads with again: election_refence), with at most max_txn_ops
 * operations in a transaction (etcd's --max-txn-ops). Connects lazily: NULL
 * only when out of memory (message in err). */
Store *store_etcd_open(const EtcdUrl *url, Election *election, size_t max_txn_ops, char *err, size_t errlen);
/* The leader compacts etcd's history after its commits (etcd_compact.h):
 * every interval_s at the revision of one interval before, and once it wrote
 * `bytes` since the last compaction; 0 turns either off. Before the first
 * commit. */
void store_etcd_compaction(Store *s, unsigned interval_s, uint64_t bytes);

typedef struct StoreBackupInfo {
    uint64_t locks;      /* lock and semaphore rows in the copy */
    uint64_t last_token; /* the largest token the copy knows was issued */
} StoreBackupInfo;

/* A copy of the database at src, which no server may be using (a running
 * server holds its database exclusively: ask it, GET /v1/backup), written to
 * dest, which must not exist yet; the copy passes store_sqlite_check_copy.
 * 0, or -1 with err. */
int store_sqlite_backup(const char *src, const char *dest, StoreBackupInfo *info, char *err, size_t errlen);
/* partial (a finished copy, e.g. downloaded) must be a leasegate database
 * that passes SQLite's integrity check; then it is renamed to dest, which
 * must not exist, durably. 0, or -1 with err (partial is left for the caller
 * to remove). */
int store_sqlite_check_copy(const char *partial, const char *dest, StoreBackupInfo *info, char *err, size_t errlen);

static inline int store_load(Store *s, const StoreLoad *cb, uint64_t *last_token)
{
    return s->ops->load(s, cb, last_token);
}
static inline int store_commit(Store *s, const StoreBatch *b) { return s->ops->commit(s, b); }
static inline bool store_has_barrier(const Store *s) { return s->ops->barrier != NULL; }
static inline int store_barrier(Store *s) { return s->ops->barrier(s); }
static inline void store_close(Store *s) { s->ops->close(s); }
static inline const char *store_error(const Store *s) { return s->ops->error(s); }
static inline bool store_can_snapshot(const Store *s) { return s->ops->snapshot != NULL; }

#endif
