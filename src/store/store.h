/*
 * store — where durable state lives, behind one small interface.
 *
 * Storage receives plain records (record.h) and never sees the lock table. A
 * batch is applied atomically (one transaction, one fsync for SQLite): after
 * store->commit returns 0, every record in it survives a crash or power loss.
 */
#ifndef LEASEGATE_STORE_H
#define LEASEGATE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <assert.h>

#include "core/threads.h"
#include "store/record.h"

/* The records of one batch, applied in order, and what belongs to the batch
 * as a whole. */
typedef struct StoreBatch {
    const StoreRecord *records;
    size_t n;
    uint64_t history_keep; /* ended leases kept: the newest this many (by seq) */
    /* Every audit row below this seq is gone (auditlog_gone_below); 0: not known. */
    uint64_t audit_gone_below;
    /* Nonzero when the batch forgets locks: the global token counter, which the
     * deleted rows can no longer vouch for. */
    uint64_t counter;
} StoreBatch;

typedef struct StoreLoad {
    void *ud;
    /* First: the largest seq of a stored ended lease (0: none). */
    int (*history_seq)(void *ud, uint64_t seq);
    /* Then every stored record, kind by kind in the order of record.h
     * (STORE_RECORD_KINDS), each a put; nonzero aborts the load. */
    int (*record)(void *ud, const StoreRecord *r);
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
    /* Work a commit leaves for later so that its answers need not wait for it
     * (SQLite: copying the WAL into the database file). Called by the thread
     * that commits, between commits, after the last one succeeded; NULL when
     * the store has none. */
    void (*idle)(Store *s);
} StoreOps;

/* A store has one owner at a time (threads.h): the thread that opened it,
 * which loads it, then the commit writer from the first batch it commits
 * until commit_free joins it. Its error may be read by the loop once a
 * commit failed and is DONE (commit.c publishes it); after a commit that
 * worked, the writer goes on using it (store_idle). */
struct Store {
    const StoreOps *ops;
    ThreadOwner owner;
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
    assert(thread_owns(&s->owner));
    return s->ops->load(s, cb, last_token);
}
static inline int store_commit(Store *s, const StoreBatch *b)
{
    assert(thread_owns(&s->owner));
    return s->ops->commit(s, b);
}
static inline bool store_has_barrier(const Store *s) { return s->ops->barrier != NULL; }
static inline int store_barrier(Store *s)
{
    assert(thread_owns(&s->owner));
    return s->ops->barrier(s);
}
static inline void store_close(Store *s)
{
    assert(thread_owns(&s->owner));
    s->ops->close(s);
}
static inline void store_idle(Store *s)
{
    assert(thread_owns(&s->owner));
    if (s->ops->idle)
        s->ops->idle(s);
}
static inline const char *store_error(const Store *s) { return s->ops->error(s); }
static inline bool store_can_snapshot(const Store *s) { return s->ops->snapshot != NULL; }

#endif
