/*
 * store_sqlite — the Store interface on one SQLite database.
 *
 * Settings that carry the guarantees (do not weaken them):
 *  - journal_mode=WAL with synchronous=FULL: a committed batch survives power
 *    loss, so a token revealed after commit can never be handed out again;
 *  - an exclusive flock() on the database file, taken at open and held until
 *    close: a second server on the same file fails at start instead of
 *    issuing duplicate tokens;
 *  - locking_mode=EXCLUSIVE, set before the first access: the connection
 *    keeps its locks for its life and the WAL's index lives in its own memory
 *    (no -shm file), so a commit takes no file lock (six fcntl calls fewer).
 *    No other process can read the database while the server runs: a backup
 *    of a live server is asked of the server (GET /v1/backup, made here with
 *    SQLite's backup API by sqlite_snapshot), never read from its files;
 *  - BEGIN IMMEDIATE for every batch; statements prepared once;
 *  - the WAL copied into the database file (a checkpoint) by our own WAL
 *    hook, never failing a COMMIT (on_wal).
 * One connection, used by the loader at start-up and then only by the commit
 * thread.
 *
 * The token counter is max(meta.last_token, max(locks.last_token),
 * max(semaphores.last_token), max(holders.token)): every grant writes its
 * name's row in the same transaction, so rows vouch for it without a meta
 * write per commit; a batch that deletes rows (forgotten idle names) writes
 * the counter to meta in the same transaction.
 */
#include "store/store.h"

#include "core/leasehist.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* When you change the schema: add a step to MIGRATIONS (the step from
 * version N to N + 1, SQL only: prepare_schema sets the version after it) and
 * bump SCHEMA_VERSION. A new database gets SCHEMA_V9, then every step from
 * 9 on, like an old one: so steps written on two branches compose by
 * numbering one after the other, and nobody rewrites a schema by hand. */
#define SCHEMA_VERSION 10
#define SCHEMA_BASE_VERSION 9

/* Ended leases, pruned to the newest --lease-history by seq (and up to
 * PRUNE_CHUNK more). seq is the rowid: every insert appends at the end of one
 * b-tree and pruning cuts from its start, so a commit dirties a page or two
 * for them, not one per ended lease (they are looked up by lease only in
 * memory, after loading). */
#define LEASE_HISTORY_SCHEMA                                                                      \
    "CREATE TABLE IF NOT EXISTS lease_history(seq INTEGER PRIMARY KEY, lease BLOB NOT NULL,"      \
    "  lock TEXT NOT NULL, token INTEGER NOT NULL, how INTEGER NOT NULL);"
#define PRUNE_CHUNK 256

/* Tokens of force-released leases (revoked.h): never pruned. */
#define REVOKED_SCHEMA "CREATE TABLE IF NOT EXISTS revoked(token INTEGER PRIMARY KEY, lock TEXT NOT NULL);"

/* The audit trail (auditlog.h): each key's newest --audit-keep rows; a row its key evicts is deleted by seq. */
#define AUDIT_SCHEMA                                                                                       \
    "CREATE TABLE IF NOT EXISTS audit(seq INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, kind INTEGER NOT NULL," \
    "  lock TEXT NOT NULL, owner TEXT NOT NULL, token INTEGER NOT NULL, key TEXT NOT NULL, peer TEXT NOT NULL);"

/* A new database, as of version 9 (the steps after it follow). meta holds
 * schema_version, last_token, boot_id (text) and boot (a counter that moves
 * whenever boot_id changes; locks.boot and holders.boot say in which boot a
 * row's deadline_ms was written). */
static const char SCHEMA_V9[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS locks("
    "  name TEXT PRIMARY KEY, last_token INTEGER NOT NULL,"
    "  lease BLOB, owner TEXT, token INTEGER, ttl_ms INTEGER, acquired_at_ms INTEGER,"
    "  expires_at_ms INTEGER, count INTEGER, metadata TEXT, deadline_ms INTEGER, boot INTEGER,"
    "  request_id TEXT, key TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS fences(resource TEXT PRIMARY KEY, max_token INTEGER NOT NULL)"
    "  WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS fence_floors(bucket INTEGER PRIMARY KEY, floor INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS guard_marks(lock TEXT PRIMARY KEY, max_token INTEGER NOT NULL,"
    "  at_ms INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    LEASE_HISTORY_SCHEMA
    REVOKED_SCHEMA
    AUDIT_SCHEMA
    "INSERT INTO meta(key, value) VALUES('schema_version', 9), ('last_token', 0), ('boot', 0);";
_Static_assert(SCHEMA_BASE_VERSION == 9, "SCHEMA_V9 writes version 9");

/* MIGRATIONS[v] takes a database of version v to v + 1 (the steps up to 9
 * set the version themselves). */
static const char *const MIGRATIONS[SCHEMA_VERSION] = {
    [1] = "ALTER TABLE locks ADD COLUMN deadline_ms INTEGER;"
          "ALTER TABLE locks ADD COLUMN boot INTEGER;"
          "CREATE TABLE IF NOT EXISTS fence_floors(bucket INTEGER PRIMARY KEY, floor INTEGER NOT NULL);"
          "INSERT OR IGNORE INTO meta(key, value) VALUES('boot', 0);"
          "UPDATE meta SET value = 2 WHERE key = 'schema_version';",
    [2] = LEASE_HISTORY_SCHEMA "UPDATE meta SET value = 3 WHERE key = 'schema_version';",
    /* Version 3 kept the history keyed by lease (a random key: every ended
     * lease dirtied a page of its own). */
    [3] = "CREATE TABLE lease_history_by_seq(seq INTEGER PRIMARY KEY, lease BLOB NOT NULL, lock TEXT NOT NULL,"
          "  token INTEGER NOT NULL, how INTEGER NOT NULL);"
          "INSERT OR REPLACE INTO lease_history_by_seq(seq, lease, lock, token, how)"
          "  SELECT seq, lease, lock, token, how FROM lease_history;"
          "DROP TABLE lease_history;"
          "ALTER TABLE lease_history_by_seq RENAME TO lease_history;"
          "UPDATE meta SET value = 4 WHERE key = 'schema_version';",
    /* Version 5 keeps the request_id of the acquire behind each grant, so a
     * retry whose answer was lost in a restart still gets its grant. */
    [4] = "ALTER TABLE locks ADD COLUMN request_id TEXT;"
          "UPDATE meta SET value = 5 WHERE key = 'schema_version';",
    /* Version 6 keeps the tokens of force-released leases. */
    [5] = REVOKED_SCHEMA "UPDATE meta SET value = 6 WHERE key = 'schema_version';",
    /* Version 7 keeps the audit trail. */
    [6] = AUDIT_SCHEMA "UPDATE meta SET value = 7 WHERE key = 'schema_version';",
    /* Version 8 keeps the API key's name behind each grant (per-key limits). */
    [7] = "ALTER TABLE locks ADD COLUMN key TEXT;"
          "UPDATE meta SET value = 8 WHERE key = 'schema_version';",
    /* Version 9 keeps when the guard last let a write of each lock through
     * (--guard-settle after a restart). */
    [8] = "ALTER TABLE guard_marks ADD COLUMN at_ms INTEGER NOT NULL DEFAULT 0;"
          "UPDATE meta SET value = 9 WHERE key = 'schema_version';",
    /* Version 10: semaphores, readers and lock-delay. A lock's writer stays in
     * its row (as before); readers and permits are rows of holders, keyed by
     * token. Ended leases and audit rows say which namespace (kind, object)
     * and audit rows the lease's mode; the rows written before were a
     * writer's (mode 1) or a fence's (object 2). */
    [9] = "ALTER TABLE locks ADD COLUMN lock_delay_ms INTEGER;"
          "ALTER TABLE locks ADD COLUMN delay_until_ms INTEGER;"
          "CREATE TABLE semaphores(name TEXT PRIMARY KEY, last_token INTEGER NOT NULL, lim INTEGER NOT NULL)"
          "  WITHOUT ROWID;"
          "CREATE TABLE holders(token INTEGER PRIMARY KEY, kind INTEGER NOT NULL, lock TEXT NOT NULL,"
          "  lease BLOB NOT NULL, owner TEXT NOT NULL, ttl_ms INTEGER NOT NULL, acquired_at_ms INTEGER NOT NULL,"
          "  expires_at_ms INTEGER NOT NULL, count INTEGER NOT NULL, metadata TEXT NOT NULL, deadline_ms INTEGER,"
          "  boot INTEGER, request_id TEXT, key TEXT, mode INTEGER NOT NULL, lock_delay_ms INTEGER NOT NULL);"
          "ALTER TABLE lease_history ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;"
          "ALTER TABLE audit ADD COLUMN object INTEGER NOT NULL DEFAULT 0;"
          "ALTER TABLE audit ADD COLUMN mode INTEGER NOT NULL DEFAULT 0;"
          "UPDATE audit SET object = 2 WHERE kind = 5;"
          "UPDATE audit SET mode = 1 WHERE kind IN (1, 2, 3, 4);",
};

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_PUT_LOCK,
    ST_DELETE_LOCK,
    ST_PUT_SEMAPHORE,
    ST_DELETE_SEMAPHORE,
    ST_PUT_HOLDER,
    ST_DELETE_HOLDER,
    ST_DELETE_GUARD_MARK,
    ST_PUT_FENCE,
    ST_DELETE_FENCE,
    ST_PUT_FLOOR,
    ST_PUT_GUARD_MARK,
    ST_PUT_COUNTER,
    ST_PUT_ENDED,
    ST_PRUNE_ENDED,
    ST_PUT_REVOKED,
    ST_PUT_AUDIT,
    ST_DROP_AUDIT,
    ST_COUNT
};

static const char *const STATEMENTS[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PUT_LOCK] = "INSERT OR REPLACE INTO locks(name, last_token, lease, owner, token, ttl_ms,"
                    " acquired_at_ms, expires_at_ms, count, metadata, deadline_ms, boot, request_id, key,"
                    " lock_delay_ms, delay_until_ms)"
                    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    [ST_DELETE_LOCK] = "DELETE FROM locks WHERE name = ?1",
    [ST_PUT_SEMAPHORE] = "INSERT OR REPLACE INTO semaphores(name, last_token, lim) VALUES(?1, ?2, ?3)",
    [ST_DELETE_SEMAPHORE] = "DELETE FROM semaphores WHERE name = ?1",
    [ST_PUT_HOLDER] = "INSERT OR REPLACE INTO holders(token, kind, lock, lease, owner, ttl_ms, acquired_at_ms,"
                      " expires_at_ms, count, metadata, deadline_ms, boot, request_id, key, mode, lock_delay_ms)"
                      " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    [ST_DELETE_HOLDER] = "DELETE FROM holders WHERE token = ?1",
    [ST_DELETE_GUARD_MARK] = "DELETE FROM guard_marks WHERE lock = ?1",
    [ST_PUT_COUNTER] = "UPDATE meta SET value = max(value, ?1) WHERE key = 'last_token'",
    [ST_PUT_ENDED] = "INSERT OR REPLACE INTO lease_history(lease, lock, token, how, seq, kind)"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_PRUNE_ENDED] = "DELETE FROM lease_history WHERE seq <= ?1",
    [ST_PUT_REVOKED] = "INSERT OR IGNORE INTO revoked(token, lock) VALUES(?1, ?2)",
    [ST_PUT_AUDIT] = "INSERT OR REPLACE INTO audit(seq, at_ms, kind, lock, owner, token, key, peer, object, mode)"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [ST_DROP_AUDIT] = "DELETE FROM audit WHERE seq = ?1",
    [ST_PUT_FENCE] = "INSERT INTO fences(resource, max_token) VALUES(?1, ?2)"
                     " ON CONFLICT(resource) DO UPDATE SET max_token = max(max_token, excluded.max_token)",
    [ST_DELETE_FENCE] = "DELETE FROM fences WHERE resource = ?1",
    [ST_PUT_FLOOR] = "INSERT INTO fence_floors(bucket, floor) VALUES(?1, ?2)"
                     " ON CONFLICT(bucket) DO UPDATE SET floor = max(floor, excluded.floor)",
    [ST_PUT_GUARD_MARK] = "INSERT INTO guard_marks(lock, max_token, at_ms) VALUES(?1, ?2, ?3)"
                          " ON CONFLICT(lock) DO UPDATE SET max_token = max(max_token, excluded.max_token),"
                          " at_ms = max(at_ms, excluded.at_ms)",
};

/* SQLite's own auto-checkpoint threshold, in WAL pages, which on_wal keeps. */
#define CHECKPOINT_PAGES 1000

typedef struct SqliteStore {
    Store base;
    int lock_fd; /* holds the flock; closed only after the database (see above) */
    char *path;  /* owned */
    char *wal_path; /* owned */
    ino_t db_ino; /* the database file SQLite opened */
    dev_t db_dev;
    ino_t wal_ino; /* the WAL file SQLite writes (0 until it exists) */
    dev_t wal_dev;
    /* An inotify descriptor watching both files for being unlinked, renamed
     * or linked (check_files), or -1: then the paths are checked every time. */
    int watch_fd;
    bool wal_watched;
    sqlite3 *db;
    sqlite3_int64 boot; /* meta.boot of this run */
    uint64_t pruned_upto; /* lease_history holds no seq at or below this (0: not pruned in this run) */
    int checkpoint_at;    /* WAL pages at which on_wal next copies the WAL into the database file */
    unsigned long long checkpoint_failures; /* in a row, since the last checkpoint that worked */
    sqlite3_stmt *st[ST_COUNT];
    char err[512];
} SqliteStore;

static void set_err(SqliteStore *s, const char *what)
{
    snprintf(s->err, sizeof s->err, "%s: %s", what, s->db ? sqlite3_errmsg(s->db) : "out of memory");
}

/* SQLite calls this at the end of every COMMIT, in the thread that committed,
 * once the transaction is durable in the WAL, which holds `pages` pages. It
 * does what SQLite's default hook (its auto-checkpoint) does, a passive
 * checkpoint from CHECKPOINT_PAGES pages on, with two differences:
 *  - a failed checkpoint (the database file cannot be written or synced) is
 *    said on stderr, and tried again only once the WAL grew by
 *    CHECKPOINT_PAGES more pages: each try copies the whole WAL, so trying
 *    at every commit (the default) made every commit slower as the WAL grew,
 *    and silently (tests/powerloss/test_powerloss.py, CheckpointFailure);
 *  - the invariant the default keeps implicitly is kept on purpose: the hook
 *    returns SQLITE_OK whatever happened. An error returned here would make
 *    the COMMIT report it for a transaction that "will have still occurred"
 *    (sqlite3_wal_hook's documentation): the server would stop at a commit
 *    that failed (commit_done), for changes a restart then shows. Every
 *    commit stays durable in the WAL while checkpoints fail. */
static int on_wal(void *arg, sqlite3 *db, const char *name, int pages)
{
    SqliteStore *s = arg;
    if (pages < s->checkpoint_at)
        return SQLITE_OK;
    int rc = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc == SQLITE_OK) {
        if (s->checkpoint_failures)
            fprintf(stderr, "leasegate: checkpoints work again, after %llu failed: %s is up to date\n",
                    s->checkpoint_failures, s->path);
        s->checkpoint_failures = 0;
        s->checkpoint_at = CHECKPOINT_PAGES;
        return SQLITE_OK;
    }
    s->checkpoint_failures++;
    s->checkpoint_at = pages + CHECKPOINT_PAGES;
    fprintf(stderr,
            "leasegate: copying the WAL into %s failed (%s; %llu in a row): every commit is still durable in the "
            "WAL, which grows until a checkpoint works (the next try at %d pages; it holds %d)\n",
            s->path, sqlite3_errmsg(db), s->checkpoint_failures, s->checkpoint_at, pages);
    return SQLITE_OK;
}

static int exec(SqliteStore *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(s->err, sizeof s->err, "%s", msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int step_reset(SqliteStore *s, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    int ok = rc == SQLITE_DONE || rc == SQLITE_ROW;
    if (!ok)
        set_err(s, sqlite3_sql(st));
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ok ? 0 : -1;
}

/* The holder's columns from `first` on: lease, owner, token, ttl_ms,
 * acquired_at_ms, expires_at_ms, count, metadata, deadline_ms, boot,
 * request_id, key (ST_PUT_LOCK's ?3..?14, ST_PUT_HOLDER's ?4..?14 with the
 * token first). */
static int bind_holder(sqlite3_stmt *st, int first, const Holder *h, sqlite3_int64 boot, bool token)
{
    int i = first, rc = sqlite3_bind_blob(st, i++, h->lease, LEASE_ID_BYTES, SQLITE_STATIC);
    rc |= sqlite3_bind_text(st, i++, h->owner, -1, SQLITE_STATIC);
    if (token)
        rc |= sqlite3_bind_int64(st, i++, (sqlite3_int64)h->token);
    rc |= sqlite3_bind_int64(st, i++, h->ttl_ms);
    rc |= sqlite3_bind_int64(st, i++, h->acquired_at_ms);
    rc |= sqlite3_bind_int64(st, i++, h->expires_at_ms);
    rc |= sqlite3_bind_int64(st, i++, h->count);
    rc |= sqlite3_bind_text(st, i++, h->metadata, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(st, i++, h->deadline_ms);
    rc |= sqlite3_bind_int64(st, i++, boot);
    if (h->request_id)
        rc |= sqlite3_bind_text(st, i, h->request_id, -1, SQLITE_STATIC);
    i++;
    if (h->key)
        rc |= sqlite3_bind_text(st, i, h->key, -1, SQLITE_STATIC);
    return rc;
}

static int bind_lock(sqlite3_stmt *st, const StoreLock *l, sqlite3_int64 boot)
{
    int rc = sqlite3_bind_text(st, 1, l->name, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(st, 2, (sqlite3_int64)l->last_token);
    if (l->held) {
        rc |= bind_holder(st, 3, &l->holder, boot, true);
        rc |= sqlite3_bind_int64(st, 15, l->holder.lock_delay_ms);
    }
    if (l->delay_until_ms)
        rc |= sqlite3_bind_int64(st, 16, l->delay_until_ms);
    return rc == SQLITE_OK ? 0 : -1;
}

static int bind_semaphore(sqlite3_stmt *st, const StoreLock *l)
{
    int rc = sqlite3_bind_text(st, 1, l->name, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(st, 2, (sqlite3_int64)l->last_token);
    rc |= sqlite3_bind_int64(st, 3, l->limit);
    return rc == SQLITE_OK ? 0 : -1;
}

static int put_holders(SqliteStore *s, const StoreHolder *hs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const StoreHolder *r = &hs[i];
        sqlite3_stmt *st = s->st[r->gone ? ST_DELETE_HOLDER : ST_PUT_HOLDER];
        int rc = sqlite3_bind_int64(st, 1, (sqlite3_int64)r->holder.token);
        if (!r->gone) {
            rc |= sqlite3_bind_int(st, 2, r->kind);
            rc |= sqlite3_bind_text(st, 3, r->name, -1, SQLITE_STATIC);
            rc |= bind_holder(st, 4, &r->holder, s->boot, false);
            rc |= sqlite3_bind_int(st, 15, r->holder.mode);
            rc |= sqlite3_bind_int64(st, 16, r->holder.lock_delay_ms);
        }
        if (rc != SQLITE_OK) {
            set_err(s, "bind holder");
            return -1;
        }
        if (step_reset(s, st))
            return -1;
    }
    return 0;
}

/* Marks in order; `del` (if not NULL) deletes the ones marked forget. */
static int put_marks(SqliteStore *s, sqlite3_stmt *put, sqlite3_stmt *del, const StoreMark *marks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *st = del && marks[i].forget ? del : put;
        if (sqlite3_bind_text(st, 1, marks[i].name, -1, SQLITE_STATIC) != SQLITE_OK ||
            (st == put && sqlite3_bind_int64(st, 2, (sqlite3_int64)marks[i].max_token) != SQLITE_OK) ||
            (st == put && sqlite3_bind_parameter_count(st) >= 3 &&
             sqlite3_bind_int64(st, 3, marks[i].at_ms) != SQLITE_OK)) {
            set_err(s, "bind mark");
            return -1;
        }
        if (step_reset(s, st))
            return -1;
    }
    return 0;
}

static int put_floors(SqliteStore *s, const StoreFloor *floors, size_t n)
{
    sqlite3_stmt *st = s->st[ST_PUT_FLOOR];
    for (size_t i = 0; i < n; i++) {
        if (sqlite3_bind_int64(st, 1, floors[i].bucket) != SQLITE_OK ||
            sqlite3_bind_int64(st, 2, (sqlite3_int64)floors[i].floor) != SQLITE_OK) {
            set_err(s, "bind floor");
            return -1;
        }
        if (step_reset(s, st))
            return -1;
    }
    return 0;
}

static int put_ended(SqliteStore *s, const StoreEnded *e, size_t n, uint64_t keep)
{
    sqlite3_stmt *st = s->st[ST_PUT_ENDED];
    uint64_t last = 0;
    for (size_t i = 0; i < n; i++) {
        if (sqlite3_bind_blob(st, 1, e[i].lease, LEASE_ID_BYTES, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(st, 2, e[i].lock, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(st, 3, (sqlite3_int64)e[i].token) != SQLITE_OK ||
            sqlite3_bind_int(st, 4, e[i].how) != SQLITE_OK ||
            sqlite3_bind_int64(st, 5, (sqlite3_int64)e[i].seq) != SQLITE_OK ||
            sqlite3_bind_int(st, 6, e[i].kind) != SQLITE_OK) {
            set_err(s, "bind ended lease");
            return -1;
        }
        if (step_reset(s, st))
            return -1;
        if (e[i].seq > last)
            last = e[i].seq;
        if (e[i].how == LEASE_END_REVOKED) {
            sqlite3_stmt *rv = s->st[ST_PUT_REVOKED];
            if (sqlite3_bind_int64(rv, 1, (sqlite3_int64)e[i].token) != SQLITE_OK ||
                sqlite3_bind_text(rv, 2, e[i].lock, -1, SQLITE_STATIC) != SQLITE_OK) {
                set_err(s, "bind revoked token");
                return -1;
            }
            if (step_reset(s, rv))
                return -1;
        }
    }
    /* Pruned a chunk at a time: a delete from the start of the table every
     * PRUNE_CHUNK ended leases (or `keep`, when fewer are kept), not one in
     * every commit. */
    uint64_t chunk = keep < PRUNE_CHUNK ? keep : PRUNE_CHUNK;
    if (n == 0 || keep == 0 || last <= keep || last - keep < s->pruned_upto + chunk)
        return 0;
    st = s->st[ST_PRUNE_ENDED];
    if (sqlite3_bind_int64(st, 1, (sqlite3_int64)(last - keep)) != SQLITE_OK) {
        set_err(s, "bind prune");
        return -1;
    }
    if (step_reset(s, st))
        return -1;
    s->pruned_upto = last - keep;
    return 0;
}

/* The files SQLite writes must still be the ones it opened: a database or WAL
 * file that was deleted, moved or replaced while the server ran takes every
 * later commit with it (SQLite goes on writing to the file it has open), so
 * that is a storage failure like any other, found at the commit that would
 * reveal it. A lost WAL still holds what was acknowledged: SQLite can still
 * read it, so it is checkpointed into the database file first, which keeps
 * every acknowledged change for the next start.
 *
 * The paths are looked up only when something may have changed: inotify
 * reports every unlink, rename or link of a watched file (IN_ATTRIB for a
 * change of its link count, IN_MOVE_SELF, IN_DELETE_SELF) synchronously, in
 * the call that made it, so an empty queue read after the commit proves that
 * neither file was touched before that read. One read(2) per commit instead
 * of a stat(2) of each path; any event (a chmod too) leads to the full check. */
static int check_paths(SqliteStore *s)
{
    struct stat path, wal;
    if (stat(s->path, &path) != 0 || path.st_ino != s->db_ino || path.st_dev != s->db_dev) {
        snprintf(s->err, sizeof s->err, "the database file %.150s was deleted or replaced while the server ran", s->path);
        return -1;
    }
    if (stat(s->wal_path, &wal) != 0 || (s->wal_ino && (wal.st_ino != s->wal_ino || wal.st_dev != s->wal_dev))) {
        int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        snprintf(s->err, sizeof s->err, "the WAL file %.150s was deleted or replaced while the server ran; %s",
                 s->wal_path,
                 rc == SQLITE_OK ? "what it held was copied into the database file"
                                 : "copying what it held into the database file failed");
        return -1;
    }
    s->wal_ino = wal.st_ino;
    s->wal_dev = wal.st_dev;
    return 0;
}

#define WATCHED (IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF)

static int check_files(SqliteStore *s)
{
    if (s->watch_fd >= 0 && s->wal_watched) {
        char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n = read(s->watch_fd, events, sizeof events);
        if (n < 0 && errno == EAGAIN)
            return 0; /* neither file was unlinked, renamed or linked */
        /* Drained: later events are about later changes. */
        while (n > 0)
            n = read(s->watch_fd, events, sizeof events);
    } else if (s->watch_fd >= 0) {
        /* The WAL exists from the first write on: watched from then on, the
         * watch set before its path is checked, so no change falls between. */
        s->wal_watched = inotify_add_watch(s->watch_fd, s->wal_path, WATCHED) >= 0;
    }
    return check_paths(s);
}

/* New rows, then the rows their keys evicted (auditlog.h: each key keeps
 * its own newest --audit-keep, so rows go one by one, not by a range). */
static int put_audit(SqliteStore *s, const AuditRow *r, size_t n, const StoreAuditDrop *drops, size_t ndrops)
{
    sqlite3_stmt *st = s->st[ST_PUT_AUDIT];
    for (size_t i = 0; i < n; i++) {
        if (sqlite3_bind_int64(st, 1, (sqlite3_int64)r[i].seq) != SQLITE_OK ||
            sqlite3_bind_int64(st, 2, r[i].at_ms) != SQLITE_OK || sqlite3_bind_int(st, 3, r[i].kind) != SQLITE_OK ||
            sqlite3_bind_text(st, 4, r[i].lock, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(st, 5, r[i].owner, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(st, 6, (sqlite3_int64)r[i].token) != SQLITE_OK ||
            sqlite3_bind_text(st, 7, r[i].key, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(st, 8, r[i].peer, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int(st, 9, r[i].object) != SQLITE_OK || sqlite3_bind_int(st, 10, r[i].mode) != SQLITE_OK) {
            set_err(s, "bind audit row");
            return -1;
        }
        if (step_reset(s, st))
            return -1;
    }
    st = s->st[ST_DROP_AUDIT];
    for (size_t i = 0; i < ndrops; i++) {
        if (sqlite3_bind_int64(st, 1, (sqlite3_int64)drops[i].seq) != SQLITE_OK) {
            set_err(s, "bind audit drop");
            return -1;
        }
        if (step_reset(s, st))
            return -1;
    }
    return 0;
}

static int sqlite_commit(Store *base, const StoreBatch *b)
{
    SqliteStore *s = (SqliteStore *)base;
    if (step_reset(s, s->st[ST_BEGIN]))
        return -1;
    for (size_t i = 0; i < b->nlocks; i++) {
        const StoreLock *l = &b->locks[i];
        bool sem = l->kind == KIND_SEMAPHORE;
        sqlite3_stmt *st = s->st[l->forget ? (sem ? ST_DELETE_SEMAPHORE : ST_DELETE_LOCK)
                                           : (sem ? ST_PUT_SEMAPHORE : ST_PUT_LOCK)];
        int bad = l->forget ? sqlite3_bind_text(st, 1, l->name, -1, SQLITE_STATIC) != SQLITE_OK
                  : sem     ? bind_semaphore(st, l)
                            : bind_lock(st, l, s->boot);
        if (bad) {
            set_err(s, "bind lock");
            goto fail;
        }
        if (step_reset(s, st))
            goto fail;
        if (l->forget && !sem) {
            sqlite3_stmt *gm = s->st[ST_DELETE_GUARD_MARK];
            if (sqlite3_bind_text(gm, 1, l->name, -1, SQLITE_STATIC) != SQLITE_OK || step_reset(s, gm))
                goto fail;
        }
    }
    if (put_holders(s, b->holders, b->nholders))
        goto fail;
    if (b->counter && (sqlite3_bind_int64(s->st[ST_PUT_COUNTER], 1, (sqlite3_int64)b->counter) != SQLITE_OK ||
                       step_reset(s, s->st[ST_PUT_COUNTER])))
        goto fail;
    if (put_marks(s, s->st[ST_PUT_FENCE], s->st[ST_DELETE_FENCE], b->fences, b->nfences) ||
        put_floors(s, b->floors, b->nfloors) ||
        put_marks(s, s->st[ST_PUT_GUARD_MARK], NULL, b->guard_marks, b->nguard_marks))
        goto fail;
    if (put_ended(s, b->ended, b->nended, b->history_keep) || put_audit(s, b->audit, b->naudit, b->audit_drops, b->naudit_drops) ||
        step_reset(s, s->st[ST_COMMIT]))
        goto fail;
    return check_files(s);
fail:
    /* SQLite may have rolled back already (disk full, I/O error): then there is
     * nothing to roll back, and the first error is the one to report. */
    if (!sqlite3_get_autocommit(s->db)) {
        char first[sizeof s->err];
        memcpy(first, s->err, sizeof first);
        step_reset(s, s->st[ST_ROLLBACK]);
        memcpy(s->err, first, sizeof first);
    }
    return -1;
}

/* A holder from columns first.. (bind_holder's order, the token at
 * token_col); false when corrupt. The strings point into the row. */
static bool column_holder(SqliteStore *s, sqlite3_stmt *st, int first, int token_col, Holder *h)
{
    if (sqlite3_column_bytes(st, first) != LEASE_ID_BYTES)
        return false;
    int i = first;
    memcpy(h->lease, sqlite3_column_blob(st, i++), LEASE_ID_BYTES);
    h->owner = (char *)sqlite3_column_text(st, i++);
    if (first + 2 == token_col)
        i++;
    h->token = (uint64_t)sqlite3_column_int64(st, token_col);
    h->ttl_ms = sqlite3_column_int64(st, i++);
    h->acquired_at_ms = sqlite3_column_int64(st, i++);
    h->expires_at_ms = sqlite3_column_int64(st, i++);
    h->count = (uint32_t)sqlite3_column_int64(st, i++);
    h->metadata = (char *)sqlite3_column_text(st, i++);
    /* A deadline on the boot clock means something only in the boot that wrote it. */
    bool same_boot = sqlite3_column_type(st, i) != SQLITE_NULL && sqlite3_column_int64(st, i + 1) == s->boot;
    h->deadline_ms = same_boot ? sqlite3_column_int64(st, i) : -1;
    i += 2;
    h->request_id = (char *)sqlite3_column_text(st, i++); /* NULL when none */
    h->key = (char *)sqlite3_column_text(st, i++);        /* NULL when none */
    return h->owner && h->metadata;
}

/* Every row of one SELECT through row_fn, which fills *what and returns -1
 * after writing s->err. */
static int load_rows(SqliteStore *s, const char *sql, const char *what,
                     int (*row_fn)(SqliteStore *s, sqlite3_stmt *st, const StoreLoad *cb, uint64_t *max_token),
                     const StoreLoad *cb, uint64_t *max_token)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        set_err(s, what);
        return -1;
    }
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (row_fn(s, st, cb, max_token)) {
            res = -1;
            break;
        }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, what);
        res = -1;
    }
    sqlite3_finalize(st);
    return res;
}

static int lock_row(SqliteStore *s, sqlite3_stmt *st, const StoreLoad *cb, uint64_t *max_token)
{
    StoreLock l = {0};
    l.name = (const char *)sqlite3_column_text(st, 0);
    l.kind = KIND_LOCK;
    l.last_token = (uint64_t)sqlite3_column_int64(st, 1);
    l.delay_until_ms = sqlite3_column_int64(st, 15); /* 0 when NULL */
    if (l.last_token > *max_token)
        *max_token = l.last_token;
    l.held = sqlite3_column_type(st, 2) != SQLITE_NULL;
    if (l.held) {
        if (!column_holder(s, st, 2, 4, &l.holder)) {
            snprintf(s->err, sizeof s->err, "lock %s: corrupt holder", l.name ? l.name : "(null)");
            return -1;
        }
        l.holder.mode = MODE_WRITE;
        l.holder.lock_delay_ms = sqlite3_column_int64(st, 14);
    }
    if (!l.name || cb->lock(cb->ud, &l)) {
        snprintf(s->err, sizeof s->err, "cannot load lock %s", l.name ? l.name : "(null)");
        return -1;
    }
    return 0;
}

static int semaphore_row(SqliteStore *s, sqlite3_stmt *st, const StoreLoad *cb, uint64_t *max_token)
{
    StoreLock l = {0};
    l.name = (const char *)sqlite3_column_text(st, 0);
    l.kind = KIND_SEMAPHORE;
    l.last_token = (uint64_t)sqlite3_column_int64(st, 1);
    sqlite3_int64 limit = sqlite3_column_int64(st, 2);
    l.limit = limit > 0 && limit <= LOCKTAB_LIMIT_MAX ? (uint32_t)limit : 0;
    if (l.last_token > *max_token)
        *max_token = l.last_token;
    if (!l.name || !l.limit || cb->lock(cb->ud, &l)) {
        snprintf(s->err, sizeof s->err, "cannot load semaphore %s", l.name ? l.name : "(null)");
        return -1;
    }
    return 0;
}

static int holder_row(SqliteStore *s, sqlite3_stmt *st, const StoreLoad *cb, uint64_t *max_token)
{
    StoreHolder h = {0};
    h.kind = (uint8_t)sqlite3_column_int(st, 1);
    h.name = (const char *)sqlite3_column_text(st, 2);
    if (!h.name || h.kind >= LOCK_KINDS || !column_holder(s, st, 3, 0, &h.holder)) {
        snprintf(s->err, sizeof s->err, "corrupt holder row %lld", (long long)sqlite3_column_int64(st, 0));
        return -1;
    }
    h.holder.mode = (uint8_t)sqlite3_column_int(st, 14);
    h.holder.lock_delay_ms = sqlite3_column_int64(st, 15);
    if (h.holder.token > *max_token)
        *max_token = h.holder.token;
    if (cb->holder(cb->ud, &h)) {
        snprintf(s->err, sizeof s->err, "cannot load a holder of %s", h.name);
        return -1;
    }
    return 0;
}

static int load_locks(SqliteStore *s, const StoreLoad *cb, uint64_t *max_token)
{
    return load_rows(s,
                     "SELECT name, last_token, lease, owner, token, ttl_ms, acquired_at_ms,"
                     " expires_at_ms, count, metadata, deadline_ms, boot, request_id, key, lock_delay_ms,"
                     " delay_until_ms FROM locks",
                     "load locks", lock_row, cb, max_token) ||
                   load_rows(s, "SELECT name, last_token, lim FROM semaphores", "load semaphores", semaphore_row, cb,
                             max_token) ||
                   load_rows(s,
                             "SELECT token, kind, lock, lease, owner, ttl_ms, acquired_at_ms, expires_at_ms, count,"
                             " metadata, deadline_ms, boot, request_id, key, mode, lock_delay_ms FROM holders"
                             " ORDER BY token",
                             "load holders", holder_row, cb, max_token)
               ? -1
               : 0;
}

static int load_marks(SqliteStore *s, const char *sql, int (*fn)(void *ud, const StoreMark *m), void *ud)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        set_err(s, sql);
        return -1;
    }
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        StoreMark m = {(const char *)sqlite3_column_text(st, 0), (uint64_t)sqlite3_column_int64(st, 1), false,
                       sqlite3_column_count(st) > 2 ? sqlite3_column_int64(st, 2) : 0};
        if (!m.name || fn(ud, &m)) {
            snprintf(s->err, sizeof s->err, "cannot load mark %s", m.name ? m.name : "(null)");
            res = -1;
            break;
        }
    }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, sql);
        res = -1;
    }
    sqlite3_finalize(st);
    return res;
}

static int read_meta(SqliteStore *s, const char *key, sqlite3_int64 *value)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?1", -1, &st, NULL) != SQLITE_OK) {
        set_err(s, "read meta");
        return -1;
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *value = sqlite3_column_int64(st, 0);
    else
        snprintf(s->err, sizeof s->err, "meta %s missing: %s", key, sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}

static int load_floors(SqliteStore *s, const StoreLoad *cb)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT bucket, floor FROM fence_floors", -1, &st, NULL) != SQLITE_OK) {
        set_err(s, "load floors");
        return -1;
    }
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        StoreFloor f = {(uint32_t)sqlite3_column_int64(st, 0), (uint64_t)sqlite3_column_int64(st, 1)};
        if (cb->floor(cb->ud, &f)) {
            snprintf(s->err, sizeof s->err, "cannot load fence floor %u", f.bucket);
            res = -1;
            break;
        }
    }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, "load floors");
        res = -1;
    }
    sqlite3_finalize(st);
    return res;
}

static int one_value(SqliteStore *s, const char *sql, sqlite3_int64 *value)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        set_err(s, sql);
        return -1;
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *value = sqlite3_column_int64(st, 0);
    else
        set_err(s, sql);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}

static int load_ended(SqliteStore *s, const StoreLoad *cb)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT lease, lock, token, how, seq, kind FROM lease_history ORDER BY seq", -1,
                           &st, NULL) != SQLITE_OK) {
        set_err(s, "load lease history");
        return -1;
    }
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        StoreEnded e = {(const char *)sqlite3_column_text(st, 1), (uint8_t)sqlite3_column_int(st, 5),
                        sqlite3_column_blob(st, 0), (uint64_t)sqlite3_column_int64(st, 2), sqlite3_column_int(st, 3),
                        (uint64_t)sqlite3_column_int64(st, 4)};
        if (!e.lock || !e.lease || sqlite3_column_bytes(st, 0) != LEASE_ID_BYTES || e.kind >= LOCK_KINDS) {
            snprintf(s->err, sizeof s->err, "corrupt lease history row");
            res = -1;
            break;
        }
        if (cb->ended(cb->ud, &e)) {
            snprintf(s->err, sizeof s->err, "cannot load the lease history");
            res = -1;
            break;
        }
    }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, "load lease history");
        res = -1;
    }
    sqlite3_finalize(st);
    return res;
}

static int load_revoked(SqliteStore *s, const StoreLoad *cb)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT token FROM revoked", -1, &st, NULL) != SQLITE_OK) {
        set_err(s, "load revoked tokens");
        return -1;
    }
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (cb->revoked(cb->ud, (uint64_t)sqlite3_column_int64(st, 0))) {
            snprintf(s->err, sizeof s->err, "cannot load the revoked tokens");
            res = -1;
            break;
        }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, "load revoked tokens");
        res = -1;
    }
    sqlite3_finalize(st);
    return res;
}

static int load_audit(SqliteStore *s, const StoreLoad *cb)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT seq, at_ms, kind, lock, owner, token, key, peer, object, mode FROM audit ORDER BY seq",
                           -1, &st, NULL) != SQLITE_OK) {
        set_err(s, "load audit trail");
        return -1;
    }
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        AuditRow r = {(uint64_t)sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int(st, 2),
                      (const char *)sqlite3_column_text(st, 3), (const char *)sqlite3_column_text(st, 4),
                      (uint64_t)sqlite3_column_int64(st, 5), (const char *)sqlite3_column_text(st, 6),
                      (const char *)sqlite3_column_text(st, 7), (uint8_t)sqlite3_column_int(st, 8),
                      (uint8_t)sqlite3_column_int(st, 9)};
        if (!r.lock || !r.owner || !r.key || !r.peer || cb->audit(cb->ud, &r)) {
            snprintf(s->err, sizeof s->err, "cannot load the audit trail");
            res = -1;
            break;
        }
    }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, "load audit trail");
        res = -1;
    }
    sqlite3_finalize(st);
    return res;
}

static int sqlite_load(Store *base, const StoreLoad *cb, uint64_t *last_token)
{
    SqliteStore *s = (SqliteStore *)base;
    sqlite3_int64 counter; /* databases of earlier versions kept it here */
    uint64_t max_token = 0;
    sqlite3_int64 history_seq;
    if (read_meta(s, "last_token", &counter) ||
        one_value(s, "SELECT coalesce(max(seq), 0) FROM lease_history", &history_seq))
        return -1;
    if (cb->history_seq(cb->ud, (uint64_t)history_seq)) {
        snprintf(s->err, sizeof s->err, "cannot load the lease history");
        return -1;
    }
    if (load_locks(s, cb, &max_token) ||
        load_marks(s, "SELECT resource, max_token FROM fences", cb->fence, cb->ud) ||
        load_marks(s, "SELECT lock, max_token, at_ms FROM guard_marks", cb->guard_mark, cb->ud) ||
        load_floors(s, cb) || load_ended(s, cb) || load_revoked(s, cb) || load_audit(s, cb))
        return -1;
    *last_token = (uint64_t)counter > max_token ? (uint64_t)counter : max_token;
    return 0;
}

static void sqlite_close(Store *base)
{
    SqliteStore *s = (SqliteStore *)base;
    if (!s)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->st[i]);
    sqlite3_close(s->db);
    /* Closing any descriptor of the file drops SQLite's POSIX locks on it:
     * this one goes last. */
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    if (s->watch_fd >= 0)
        close(s->watch_fd);
    free(s->path);
    free(s->wal_path);
    free(s);
}

static const char *sqlite_error(const Store *base) { return ((const SqliteStore *)base)->err; }

/* Inside the opening transaction: a new database gets the schema, an older
 * one is migrated step by step, a newer one is refused. */
static int prepare_schema(SqliteStore *s)
{
    sqlite3_int64 tables;
    if (one_value(s, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", &tables))
        return -1;
    sqlite3_int64 version;
    if (tables == 0) {
        if (exec(s, SCHEMA_V9))
            return -1;
        version = SCHEMA_BASE_VERSION;
    } else if (read_meta(s, "schema_version", &version)) {
        return -1;
    }
    if (version < 1 || version > SCHEMA_VERSION) {
        snprintf(s->err, sizeof s->err, "schema version %lld: this leasegate reads versions 1..%d%s",
                 (long long)version, SCHEMA_VERSION, version > SCHEMA_VERSION ? " (the database is from a newer leasegate)" : "");
        return -1;
    }
    for (; version < SCHEMA_VERSION; version++) {
        char set[96];
        snprintf(set, sizeof set, "UPDATE meta SET value = %lld WHERE key = 'schema_version'", (long long)version + 1);
        if (exec(s, MIGRATIONS[version]) || exec(s, set))
            return -1;
    }
    return 0;
}

/* meta.boot moves whenever the machine's boot id differs from the last
 * server's (or is unknown): deadlines written under another value are not
 * on this boot's clock. */
static int note_boot(SqliteStore *s, const char *boot_id)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT (SELECT value FROM meta WHERE key = 'boot_id'),"
                                  " (SELECT value FROM meta WHERE key = 'boot')", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        set_err(s, "read boot");
        sqlite3_finalize(st);
        return -1;
    }
    const char *stored = (const char *)sqlite3_column_text(st, 0);
    bool same = boot_id && stored && !strcmp(stored, boot_id);
    s->boot = sqlite3_column_int64(st, 1) + (same ? 0 : 1);
    sqlite3_finalize(st);
    if (same)
        return 0;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO meta(key, value) VALUES('boot', ?1), ('boot_id', ?2)", -1,
                           &st, NULL) != SQLITE_OK) {
        set_err(s, "write boot");
        return -1;
    }
    sqlite3_bind_int64(st, 1, s->boot);
    sqlite3_bind_text(st, 2, boot_id ? boot_id : "unknown", -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        set_err(s, "write boot");
        return -1;
    }
    return 0;
}

/* A copy through SQLite's backup API into a new file beside the database
 * (never a path a request names), unlinked once written: what the caller
 * holds is its descriptor. One step copies every page under the one
 * connection, between two commits, so the copy is everything committed
 * then. The copy needs no durability of its own: no journal, no fsync. */
static int sqlite_snapshot(Store *base, uint64_t *size)
{
    SqliteStore *s = (SqliteStore *)base;
    size_t len = strlen(s->path) + sizeof ".snapshot-XXXXXX";
    char *tmp = malloc(len);
    if (!tmp) {
        snprintf(s->err, sizeof s->err, "snapshot: out of memory");
        return -1;
    }
    snprintf(tmp, len, "%s.snapshot-XXXXXX", s->path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(s->err, sizeof s->err, "snapshot: cannot create %.200s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    sqlite3 *dest = NULL;
    sqlite3_backup *b = NULL;
    int rc = sqlite3_open_v2(tmp, &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(dest, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF", NULL, NULL, NULL);
    if (rc == SQLITE_OK && !(b = sqlite3_backup_init(dest, "main", s->db, "main")))
        rc = sqlite3_errcode(dest);
    if (b) {
        int step = sqlite3_backup_step(b, -1);
        rc = sqlite3_backup_finish(b);
        if (step != SQLITE_DONE && rc == SQLITE_OK)
            rc = step;
    }
    if (rc != SQLITE_OK)
        snprintf(s->err, sizeof s->err, "snapshot into %.200s: %s", tmp,
                 dest ? sqlite3_errmsg(dest) : sqlite3_errstr(rc));
    if (sqlite3_close(dest) != SQLITE_OK && rc == SQLITE_OK) {
        snprintf(s->err, sizeof s->err, "snapshot: cannot close %.200s", tmp);
        rc = SQLITE_ERROR;
    }
    unlink(tmp);
    free(tmp);
    struct stat st;
    if (rc == SQLITE_OK && fstat(fd, &st) != 0) {
        snprintf(s->err, sizeof s->err, "snapshot: %s", strerror(errno));
        rc = SQLITE_ERROR;
    }
    if (rc != SQLITE_OK) {
        close(fd);
        return -1;
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

/* No barrier: only this process writes the file (commit.h). */
static const StoreOps SQLITE_OPS = {.load = sqlite_load,
                                    .commit = sqlite_commit,
                                    .close = sqlite_close,
                                    .error = sqlite_error,
                                    .snapshot = sqlite_snapshot};

Store *store_sqlite_open(const char *path, const char *boot_id, char *err, size_t errlen)
{
    SqliteStore *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base.ops = &SQLITE_OPS;
    s->watch_fd = -1;
    s->checkpoint_at = CHECKPOINT_PAGES;
    s->path = strdup(path);
    size_t wlen = strlen(path) + sizeof "-wal";
    s->wal_path = malloc(wlen);
    if (s->wal_path)
        snprintf(s->wal_path, wlen, "%s-wal", path);
    /* 0600 whatever the umask: the database holds every live lease. SQLite
     * gives its -wal file the database file's mode. */
    s->lock_fd = s->path && s->wal_path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
    struct stat st;
    if (s->lock_fd < 0 || fstat(s->lock_fd, &st) != 0 || ((st.st_mode & 0777) != 0600 && fchmod(s->lock_fd, 0600))) {
        snprintf(s->err, sizeof s->err, "%s", s->path && s->wal_path ? strerror(errno) : "out of memory");
        goto fail;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(s->err, sizeof s->err, "%s",
                 errno == EWOULDBLOCK ? "another leasegate server is using this database (only one may; or leasegate backup is copying it)"
                                      : strerror(errno));
        goto fail;
    }
    /* Watched before its identity is taken (check_files); without inotify
     * (no instance left) the paths are checked after every commit instead. */
    s->watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (s->watch_fd >= 0 && inotify_add_watch(s->watch_fd, path, WATCHED) < 0) {
        close(s->watch_fd);
        s->watch_fd = -1;
    }
    s->db_ino = st.st_ino; /* the same file: flock holds it from the fstat on */
    s->db_dev = st.st_dev;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        set_err(s, path);
        goto fail;
    }
    sqlite3_wal_hook(s->db, on_wal, s); /* in place of SQLite's auto-checkpoint */
    /* EXCLUSIVE before the first access, so that no -shm is ever used (see above). */
    if (exec(s, "PRAGMA locking_mode=EXCLUSIVE") || exec(s, "PRAGMA journal_mode=WAL") ||
        exec(s, "PRAGMA synchronous=FULL") || exec(s, "BEGIN IMMEDIATE") || prepare_schema(s) ||
        note_boot(s, boot_id) || exec(s, "COMMIT")) {
        if (sqlite3_errcode(s->db) == SQLITE_BUSY)
            snprintf(s->err, sizeof s->err,
                     "database is locked: another process (not a leasegate server) has it open; the server "
                     "holds its database exclusively");
        goto fail;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(s->db, STATEMENTS[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL) !=
            SQLITE_OK) {
            set_err(s, STATEMENTS[i]);
            goto fail;
        }
    }
    return &s->base;
fail:
    snprintf(err, errlen, "%s: %s", path, s->err);
    sqlite_close(&s->base);
    return NULL;
}

/* The rename that published a file is durable only once its directory is. */
static int sync_parent(const char *path, char *err, size_t errlen)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        snprintf(err, errlen, "cannot sync directory %s: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

int store_sqlite_check_copy(const char *partial, const char *dest_path, StoreBackupInfo *info, char *err,
                            size_t errlen)
{
    sqlite3 *dest = NULL;
    /* No SQLITE_OPEN_CREATE: what was copied must be there. */
    if (sqlite3_open_v2(partial, &dest, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", partial, dest ? sqlite3_errmsg(dest) : "out of memory");
        sqlite3_close(dest);
        return -1;
    }
    sqlite3_stmt *st = NULL;
    /* Semaphores and shared holders from version 10 on (a copy of an older
     * database, never opened by this leasegate, has none). */
    bool v10 = sqlite3_prepare_v2(dest, "SELECT 1 FROM sqlite_master WHERE name = 'semaphores'", -1, &st, NULL) ==
                   SQLITE_OK &&
               sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(dest,
                           v10 ? "SELECT (SELECT count(*) FROM locks) + (SELECT count(*) FROM semaphores),"
                                 " max((SELECT value FROM meta WHERE key = 'last_token'),"
                                 "     (SELECT coalesce(max(last_token), 0) FROM locks),"
                                 "     (SELECT coalesce(max(last_token), 0) FROM semaphores),"
                                 "     (SELECT coalesce(max(token), 0) FROM holders)),"
                                 " (SELECT group_concat(integrity_check) FROM pragma_integrity_check)"
                               : "SELECT (SELECT count(*) FROM locks),"
                                 " max((SELECT value FROM meta WHERE key = 'last_token'),"
                                 "     (SELECT coalesce(max(last_token), 0) FROM locks)),"
                                 " (SELECT group_concat(integrity_check) FROM pragma_integrity_check)",
                           -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        snprintf(err, errlen, "the copy is not a leasegate database: %s", sqlite3_errmsg(dest));
        sqlite3_finalize(st);
        sqlite3_close(dest);
        return -1;
    }
    info->locks = (uint64_t)sqlite3_column_int64(st, 0);
    info->last_token = (uint64_t)sqlite3_column_int64(st, 1);
    const char *check = (const char *)sqlite3_column_text(st, 2);
    bool ok = check && !strcmp(check, "ok");
    if (!ok)
        snprintf(err, errlen, "the copy fails its integrity check: %.200s", check ? check : "?");
    sqlite3_finalize(st);
    if (sqlite3_close(dest) != SQLITE_OK) {
        snprintf(err, errlen, "cannot close %s", partial);
        return -1;
    }
    if (!ok)
        return -1;
    if (access(dest_path, F_OK) == 0) {
        snprintf(err, errlen, "%s exists; back up to a new file", dest_path);
        return -1;
    }
    if (rename(partial, dest_path) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", partial, dest_path, strerror(errno));
        return -1;
    }
    return sync_parent(dest_path, err, errlen);
}

int store_sqlite_narrow(const char *path, char *note, size_t notelen, char *err, size_t errlen)
{
    static const char *const SUFFIX[] = {"", "-wal", "-shm", "-journal"};
    int narrowed = 0;
    size_t o = 0;
    note[0] = '\0';
    for (size_t i = 0; i < sizeof SUFFIX / sizeof SUFFIX[0]; i++) {
        char file[4200];
        snprintf(file, sizeof file, "%s%s", path, SUFFIX[i]);
        struct stat st;
        if (stat(file, &st) != 0) {
            if (errno == ENOENT)
                continue;
            snprintf(err, errlen, "%s: %s", file, strerror(errno));
            return -1;
        }
        if (!S_ISREG(st.st_mode) || (st.st_mode & 0077) == 0)
            continue;
        if (chmod(file, st.st_mode & 0700) != 0) {
            snprintf(err, errlen, "cannot narrow %s (mode %04o) to the owner only: %s", file, st.st_mode & 07777,
                     strerror(errno));
            return -1;
        }
        int n = snprintf(note + o, o < notelen ? notelen - o : 0, "%s%s (was %04o)", narrowed ? ", " : "", file,
                         st.st_mode & 07777);
        if (n > 0)
            o += (size_t)n;
        narrowed++;
    }
    return narrowed;
}

/* Copies src into a new file next to dest and renames it into place, so that
 * dest is either absent or a complete, checked copy, readable by its owner
 * only (it holds every live lease) whatever the umask. */
int store_sqlite_backup(const char *src_path, const char *dest_path, StoreBackupInfo *info, char *err,
                        size_t errlen)
{
    if (access(dest_path, F_OK) == 0) {
        snprintf(err, errlen, "%s exists; back up to a new file", dest_path);
        return -1;
    }
    char partial[4096];
    if (snprintf(partial, sizeof partial, "%s.partial", dest_path) >= (int)sizeof partial) {
        snprintf(err, errlen, "path too long");
        return -1;
    }
    /* A running server holds its database exclusively (and this lock keeps
     * one from starting while the copy is made). No O_CREAT: a mistyped path
     * must not become an empty database. */
    int lock_fd = open(src_path, O_RDONLY | O_CLOEXEC);
    if (lock_fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", src_path, strerror(errno));
        return -1;
    }
    if (flock(lock_fd, LOCK_SH | LOCK_NB) != 0) {
        snprintf(err, errlen,
                 errno == EWOULDBLOCK ? "a leasegate server is using %s: ask it for the backup (leasegate backup "
                                        "--server URL DEST)"
                                      : "cannot lock %s: %s",
                 src_path, strerror(errno));
        close(lock_fd);
        return -1;
    }
    sqlite3 *src = NULL, *dest = NULL;
    sqlite3_backup *b = NULL;
    int rc = -1;
    if (sqlite3_open_v2(src_path, &src, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", src_path, src ? sqlite3_errmsg(src) : "out of memory");
        goto out;
    }
    unlink(partial);
    /* An empty file is an empty database: SQLite opens it as is, and gives
     * its journal the file's mode. */
    int pfd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (pfd < 0 || fchmod(pfd, 0600) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", partial, strerror(errno));
        if (pfd >= 0)
            close(pfd);
        goto out;
    }
    close(pfd);
    if (sqlite3_open_v2(partial, &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot create %s: %s", partial, dest ? sqlite3_errmsg(dest) : "out of memory");
        goto out;
    }
    b = sqlite3_backup_init(dest, "main", src, "main");
    if (!b || sqlite3_backup_step(b, -1) != SQLITE_DONE) {
        snprintf(err, errlen, "backup of %s failed: %s", src_path, sqlite3_errmsg(b ? src : dest));
        goto out;
    }
    if (sqlite3_backup_finish(b) != SQLITE_OK) {
        b = NULL;
        snprintf(err, errlen, "backup of %s failed: %s", src_path, sqlite3_errmsg(dest));
        goto out;
    }
    b = NULL;
    if (sqlite3_close(dest) != SQLITE_OK) {
        snprintf(err, errlen, "cannot close %s", partial);
        goto out;
    }
    dest = NULL;
    rc = store_sqlite_check_copy(partial, dest_path, info, err, errlen);
out:
    if (b)
        sqlite3_backup_finish(b);
    sqlite3_close(dest);
    sqlite3_close(src);
    close(lock_fd);
    if (rc)
        unlink(partial);
    return rc;
}
