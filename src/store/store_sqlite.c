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
 *  - the WAL copied into the database file (a checkpoint) between commits,
 *    after the last one's answers may have gone out (sqlite_idle), never
 *    failing a COMMIT (on_wal).
 * One connection, used by the loader at start-up and then only by the commit
 * thread.
 *
 * Each record kind is described once, in sqlite_record.c (its table, its
 * columns, its binder and reader); the statements that write, remove and
 * load records, and the backup check's count, are built from those
 * descriptors when the store opens.
 *
 * The token counter is max(meta.last_token, the names' last_token, the
 * leases' token) (the descriptors' counter columns): every grant writes its
 * name's row in the same transaction, so rows vouch for it without a meta
 * write per commit; a batch that deletes rows (forgotten idle names) writes
 * the counter to meta in the same transaction.
 */
#include "store/store.h"

#include "store/sqlite_record.h"
#include "store/walgather.h"

#include "core/leasehist.h"
#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* The schema changes by steps: MIGRATIONS[N] takes version N to N + 1 (SQL
 * only: prepare_schema sets the version after it), and SCHEMA_VERSION is the
 * last. Each record kind's columns are sqlite_record.c's; the statements are
 * built from them, so a step that renames or drops a column they name is
 * caught when the store opens. A new database gets SCHEMA_V9, then every step from
 * 9 on, like an old one: so steps written on two branches compose by
 * numbering one after the other, and nobody rewrites a schema by hand. */
#define SCHEMA_VERSION 14
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
    /* Version 11: every lease is one row, whatever its mode, and a name's row
     * keeps only what is the name's (last token, a semaphore's limit, a
     * lock-delay). Both are rows of one table, keyed (kind, name, token): a
     * name's own row has token 0, a lease's its token (tokens start at 1).
     * A lock's writer leaves its lock's row for a row of its own (mode 0);
     * readers and permits move from holders. Like every step it runs inside
     * the opening transaction: a crash in the middle leaves version 10 as it
     * was (tests/integration/test_migration.py). */
    [10] = "CREATE TABLE lockspace(kind INTEGER NOT NULL, name TEXT NOT NULL, token INTEGER NOT NULL,"
           "  last_token INTEGER, lim INTEGER, delay_until_ms INTEGER,"
           "  lease BLOB, owner TEXT, mode INTEGER, ttl_ms INTEGER, acquired_at_ms INTEGER, expires_at_ms INTEGER,"
           "  count INTEGER, metadata TEXT, deadline_ms INTEGER, boot INTEGER, request_id TEXT, key TEXT,"
           "  lock_delay_ms INTEGER,"
           "  PRIMARY KEY(kind, name, token), CHECK((token = 0) = (lease IS NULL))) WITHOUT ROWID;"
           "INSERT INTO lockspace(kind, name, token, last_token, delay_until_ms)"
           "  SELECT 0, name, 0, last_token, delay_until_ms FROM locks;"
           "INSERT INTO lockspace(kind, name, token, last_token, lim) SELECT 1, name, 0, last_token, lim FROM semaphores;"
           "INSERT INTO lockspace(kind, name, token, lease, owner, mode, ttl_ms, acquired_at_ms, expires_at_ms, count,"
           "    metadata, deadline_ms, boot, request_id, key, lock_delay_ms)"
           "  SELECT 0, name, token, lease, owner, 0, ttl_ms, acquired_at_ms, expires_at_ms, count, metadata,"
           "    deadline_ms, boot, request_id, key, coalesce(lock_delay_ms, 0) FROM locks WHERE lease IS NOT NULL;"
           "INSERT INTO lockspace(kind, name, token, lease, owner, mode, ttl_ms, acquired_at_ms, expires_at_ms, count,"
           "    metadata, deadline_ms, boot, request_id, key, lock_delay_ms)"
           "  SELECT kind, lock, token, lease, owner, mode, ttl_ms, acquired_at_ms, expires_at_ms, count, metadata,"
           "    deadline_ms, boot, request_id, key, lock_delay_ms FROM holders;"
           "DROP TABLE locks;"
           "DROP TABLE semaphores;"
           "DROP TABLE holders;",
    /* Version 12: a guard refusal's audit row says why (AuditRow.reason). */
    [11] = "ALTER TABLE audit ADD COLUMN reason TEXT NOT NULL DEFAULT '';",
    /* Version 13 (issue 40: coordination on top of the lock): a semaphore's
     * lease may hold several permits (permits; NULL: one), an election's
     * leader lease carries its value (value, JSON text), and a lock's value,
     * which only its holder writes and which outlives the holder, is a row
     * of lock_values, keyed by the lock's name (value NULL: written null;
     * version counts its writes, token is the writer's, key its API key). */
    [12] = "ALTER TABLE lockspace ADD COLUMN permits INTEGER;"
           "ALTER TABLE lockspace ADD COLUMN value TEXT;"
           "CREATE TABLE lock_values(name TEXT PRIMARY KEY, value TEXT, version INTEGER NOT NULL,"
           "  token INTEGER NOT NULL, key TEXT, at_ms INTEGER NOT NULL) WITHOUT ROWID;",
    /* Version 14 keeps, with each lock's value, the request_ids of the last
     * writes of the grant that wrote it (writes: valwrites.h's text, each
     * line a write's version, digest and request_id), so a retry whose
     * answer was lost, in a restart too, or a late first attempt, is
     * answered, not written again. A value written before has none (NULL):
     * no retry matches it. */
    [13] = "ALTER TABLE lock_values ADD COLUMN writes TEXT;",
};

/* The statements that are no record's (each kind's are built from its
 * descriptor: see build_statements). */
enum { ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_PUT_COUNTER, ST_PRUNE_ENDED, ST_DEL_AUDIT_RUN, ST_COUNT };

static const char *const STATEMENTS[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PUT_COUNTER] = "UPDATE meta SET value = max(value, ?1) WHERE key = 'last_token'",
    [ST_PRUNE_ENDED] = "DELETE FROM lease_history WHERE seq <= ?1",
    [ST_DEL_AUDIT_RUN] = "DELETE FROM audit WHERE seq BETWEEN ?1 AND ?2",
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
    /* Owned: the VFS db was opened with (one write to the WAL per commit);
     * freed only once db is closed. */
    WalGather *gather;
    sqlite3_int64 boot; /* meta.boot of this run */
    uint64_t pruned_upto; /* lease_history holds no seq at or below this (0: not pruned in this run) */
    int checkpoint_at;    /* WAL pages from which a checkpoint is due */
    int checkpoint_due;   /* the WAL's pages when a checkpoint became due (0: none is) */
    unsigned long long checkpoint_failures; /* in a row, since the last checkpoint that worked */
    sqlite3_stmt *st[ST_COUNT];
    sqlite3_stmt *put[REC_KINDS]; /* each kind's upsert, from its descriptor */
    sqlite3_stmt *del[REC_KINDS]; /* each kind's removal by key */
    sqlite3_stmt *load[REC_KINDS]; /* each kind's rows, in its order */
    uint64_t *audit_gone;  /* owned: the audit rows a commit removes (delete_audit_runs); kept between commits */
    size_t audit_gone_cap;
    char err[512];
} SqliteStore;

static void set_err(SqliteStore *s, const char *what)
{
    snprintf(s->err, sizeof s->err, "%.300s: %s", what, s->db ? sqlite3_errmsg(s->db) : "out of memory");
}

/* Copies the WAL, which holds `pages` pages, into the database file: a
 * passive checkpoint, as SQLite's auto-checkpoint makes, with two differences:
 *  - a failed checkpoint (the database file cannot be written or synced) is
 *    said on stderr, and tried again only once the WAL grew by
 *    CHECKPOINT_PAGES more pages: each try copies the whole WAL, so trying
 *    at every commit (the default) made every commit slower as the WAL grew,
 *    and silently (tests/powerloss/test_powerloss.py, CheckpointFailure);
 *  - it never fails a commit: every commit stays durable in the WAL while
 *    checkpoints fail. */
static void checkpoint(SqliteStore *s, int pages)
{
    s->checkpoint_due = 0;
    int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc == SQLITE_OK) {
        if (s->checkpoint_failures)
            log_line(LEVEL_INFO, "checkpoints work again, after %llu failed: %s is up to date", s->checkpoint_failures,
                     s->path);
        s->checkpoint_failures = 0;
        s->checkpoint_at = CHECKPOINT_PAGES;
        return;
    }
    s->checkpoint_failures++;
    s->checkpoint_at = pages + CHECKPOINT_PAGES;
    log_line(LEVEL_WARN,
             "copying the WAL into %s failed (%s; %llu in a row): every commit is still durable in the "
             "WAL, which grows until a checkpoint works (the next try at %d pages; it holds %d)",
             s->path, sqlite3_errmsg(s->db), s->checkpoint_failures, s->checkpoint_at, pages);
}

/* SQLite calls this at the end of every COMMIT, in the thread that committed,
 * once the transaction is durable in the WAL, which holds `pages` pages (in
 * place of its auto-checkpoint). From CHECKPOINT_PAGES on, a checkpoint is
 * due: the commit thread makes it between commits (sqlite_idle), so that the
 * answers of the commit that crossed the mark do not wait for a copy of the
 * whole WAL and a sync of the database file (measured in
 * docs/BENCHMARKS.md). A store whose owner never calls idle (an offline
 * tool) gets it here, once the WAL is CHECKPOINT_PAGES past the mark.
 *
 * Returns SQLITE_OK whatever happened: an error returned here would make the
 * COMMIT report it for a transaction that "will have still occurred"
 * (sqlite3_wal_hook's documentation), and the server would stop at a commit
 * that failed (commit_done), for changes a restart then shows. */
static int on_wal(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)db, (void)name;
    SqliteStore *s = arg;
    if (pages < s->checkpoint_at)
        return SQLITE_OK;
    s->checkpoint_due = pages;
    if (pages >= s->checkpoint_at + CHECKPOINT_PAGES)
        checkpoint(s, pages);
    return SQLITE_OK;
}

static void sqlite_idle(Store *base)
{
    SqliteStore *s = (SqliteStore *)base;
    if (s->checkpoint_due)
        checkpoint(s, s->checkpoint_due);
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

/* SQL text built from a descriptor, in a fixed buffer: `full` once it no
 * longer fits (the statements are a few hundred bytes). */
typedef struct Sql {
    char text[2048];
    size_t len;
    bool full;
} Sql;

static void sql_add(Sql *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sql_add(Sql *q, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = q->full ? -1 : vsnprintf(q->text + q->len, sizeof q->text - q->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof q->text - q->len)
        q->full = true;
    else
        q->len += (size_t)n;
}

/* Columns [from, to) of d, as "a, b, c". */
static void sql_columns(Sql *q, const SqlKind *d, int from, int to)
{
    for (int i = from; i < to; i++)
        sql_add(q, "%s%s", i > from ? ", " : "", d->columns[i].name);
}

/* A kind's put: an upsert on its key (sqlite_record.h). */
static void sql_put(Sql *q, const SqlKind *d)
{
    sql_add(q, "INSERT INTO %s(", d->table);
    sql_columns(q, d, 0, d->ncolumns);
    sql_add(q, ") VALUES(");
    for (int i = 0; i < d->ncolumns; i++)
        sql_add(q, "%s?%d", i ? ", " : "", i + 1);
    sql_add(q, ") ON CONFLICT(");
    sql_columns(q, d, 0, d->nkey);
    if (d->nkey == d->ncolumns) {
        sql_add(q, ") DO NOTHING");
        return;
    }
    sql_add(q, ") DO UPDATE SET ");
    for (int i = d->nkey; i < d->ncolumns; i++) {
        const char *c = d->columns[i].name;
        if (d->columns[i].merge == SQL_MAX)
            sql_add(q, "%s%s = max(%s, excluded.%s)", i > d->nkey ? ", " : "", c, c, c);
        else
            sql_add(q, "%s%s = excluded.%s", i > d->nkey ? ", " : "", c, c);
    }
}

static void sql_del(Sql *q, const SqlKind *d)
{
    sql_add(q, "DELETE FROM %s WHERE ", d->table);
    for (int i = 0; i < d->nkey; i++)
        sql_add(q, "%s%s = ?%d", i ? " AND " : "", d->columns[i].name, i + 1);
}

static void sql_load(Sql *q, const SqlKind *d)
{
    sql_add(q, "SELECT ");
    sql_columns(q, d, 0, d->ncolumns);
    sql_add(q, " FROM %s", d->table);
    if (d->where)
        sql_add(q, " WHERE %s", d->where);
    if (d->order)
        sql_add(q, " ORDER BY %s", d->order);
}

static int prepare(SqliteStore *s, const Sql *q, sqlite3_stmt **st)
{
    if (q->full) {
        snprintf(s->err, sizeof s->err, "a statement longer than %zu bytes", sizeof q->text);
        return -1;
    }
    if (sqlite3_prepare_v3(s->db, q->text, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK) {
        set_err(s, q->text);
        return -1;
    }
    return 0;
}

/* Every statement: the fixed ones, and each kind's put, removal and load
 * from its descriptor (whose key columns come first). */
static int build_statements(SqliteStore *s)
{
    for (int i = 0; i < ST_COUNT; i++) {
        Sql q = {.len = 0};
        sql_add(&q, "%s", STATEMENTS[i]);
        if (prepare(s, &q, &s->st[i]))
            return -1;
    }
    for (int k = 0; k < REC_KINDS; k++) {
        const SqlKind *d = &SQL_KINDS[k];
        for (int i = 0; i < d->ncolumns; i++)
            if ((i < d->nkey) != (d->columns[i].merge == SQL_KEY)) {
                snprintf(s->err, sizeof s->err, "the %s descriptor: its key columns must come first",
                         record_kind_name((StoreRecordKind)k));
                return -1;
            }
        Sql put = {.len = 0}, del = {.len = 0}, load = {.len = 0};
        sql_put(&put, d);
        sql_del(&del, d);
        sql_load(&load, d);
        if (prepare(s, &put, &s->put[k]) || prepare(s, &del, &s->del[k]) || prepare(s, &load, &s->load[k]))
            return -1;
    }
    return 0;
}

/* One record's statement, bound by its kind's descriptor; NULL after
 * writing s->err. */
static sqlite3_stmt *bind_record(SqliteStore *s, const StoreRecord *r)
{
    sqlite3_stmt *st = r->removal ? s->del[r->kind] : s->put[r->kind];
    if (SQL_KINDS[r->kind].bind(st, r, s->boot) != SQLITE_OK) {
        snprintf(s->err, sizeof s->err, "bind %s: %s", record_kind_name((StoreRecordKind)r->kind), sqlite3_errmsg(s->db));
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return NULL;
    }
    return st;
}

/* Ended leases are pruned to the newest `keep` a chunk at a time: a delete
 * from the start of the table every PRUNE_CHUNK ended leases (or `keep`, when
 * fewer are kept), not one in every commit. last: the largest seq of the batch. */
static int prune_ended(SqliteStore *s, uint64_t last, uint64_t keep)
{
    uint64_t chunk = keep < PRUNE_CHUNK ? keep : PRUNE_CHUNK;
    if (!last || keep == 0 || last <= keep || last - keep < s->pruned_upto + chunk)
        return 0;
    sqlite3_stmt *st = s->st[ST_PRUNE_ENDED];
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

static int by_seq(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The audit rows a batch removes (the ones their keys' --audit-keep evicted),
 * one DELETE per run of consecutive seqs rather than one per row: with one
 * API key a batch's evictions are one run, a key's oldest rows, so a batch
 * of 64 pairs makes one statement where it made 128 (two of the eight a pair
 * made; bench/instructions.sh). A run holds only removed rows, so it deletes
 * exactly them. They go after the batch's other records: a row added and
 * evicted in the same batch is added first, as in the records' order. */
static int delete_audit_runs(SqliteStore *s, uint64_t *seqs, size_t n)
{
    if (n == 0)
        return 0; /* seqs may be NULL: no batch removed a row yet */
    qsort(seqs, n, sizeof *seqs, by_seq);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && seqs[j] == seqs[j - 1] + 1)
            j++;
        sqlite3_stmt *st = s->st[ST_DEL_AUDIT_RUN];
        if (sqlite3_bind_int64(st, 1, (sqlite3_int64)seqs[i]) != SQLITE_OK ||
            sqlite3_bind_int64(st, 2, (sqlite3_int64)seqs[j - 1]) != SQLITE_OK) {
            set_err(s, "bind the audit rows' delete");
            return -1;
        }
        if (step_reset(s, st))
            return -1;
        i = j;
    }
    return 0;
}

static int sqlite_commit(Store *base, const StoreBatch *b)
{
    SqliteStore *s = (SqliteStore *)base;
    if (step_reset(s, s->st[ST_BEGIN]))
        return -1;
    uint64_t last_ended = 0;
    size_t ngone = 0;
    for (size_t i = 0; i < b->n; i++) {
        const StoreRecord *r = &b->records[i];
        if (r->kind == REC_AUDIT && r->removal) {
            if (ngone == s->audit_gone_cap) {
                size_t cap = s->audit_gone_cap ? 2 * s->audit_gone_cap : 256;
                uint64_t *grown = realloc(s->audit_gone, cap * sizeof *grown);
                if (!grown) {
                    snprintf(s->err, sizeof s->err, "out of memory");
                    goto fail;
                }
                s->audit_gone = grown;
                s->audit_gone_cap = cap;
            }
            s->audit_gone[ngone++] = r->audit.seq;
            continue;
        }
        sqlite3_stmt *st = bind_record(s, r);
        if (!st || step_reset(s, st))
            goto fail;
        if (r->kind == REC_ENDED && r->ended.seq > last_ended)
            last_ended = r->ended.seq;
    }
    if (delete_audit_runs(s, s->audit_gone, ngone))
        goto fail;
    if (b->counter && (sqlite3_bind_int64(s->st[ST_PUT_COUNTER], 1, (sqlite3_int64)b->counter) != SQLITE_OK ||
                       step_reset(s, s->st[ST_PUT_COUNTER])))
        goto fail;
    if (prune_ended(s, last_ended, b->history_keep) || step_reset(s, s->st[ST_COMMIT]))
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

/* Every stored record of kind k, in its order, to cb. *max_token: the
 * largest value of the kind's counter column seen. */
static int load_kind(SqliteStore *s, StoreRecordKind k, const StoreLoad *cb, uint64_t *max_token)
{
    const SqlKind *d = &SQL_KINDS[k];
    sqlite3_stmt *st = s->load[k];
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        StoreRecord r = {.kind = (uint8_t)k};
        if (!d->read(st, &r, s->boot)) {
            snprintf(s->err, sizeof s->err, "a corrupt %s row in %s", record_kind_name(k), d->table);
            res = -1;
            break;
        }
        uint64_t token = d->counter >= 0 ? (uint64_t)sqlite3_column_int64(st, d->counter) : 0;
        if (token > *max_token)
            *max_token = token;
        if (cb->record(cb->ud, &r)) {
            snprintf(s->err, sizeof s->err, "cannot load a %s row of %s", record_kind_name(k), d->table);
            res = -1;
            break;
        }
    }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, d->table);
        res = -1;
    }
    sqlite3_reset(st);
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
    for (int k = 0; k < REC_KINDS; k++)
        if (load_kind(s, (StoreRecordKind)k, cb, &max_token))
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
    for (int k = 0; k < REC_KINDS; k++) {
        sqlite3_finalize(s->put[k]);
        sqlite3_finalize(s->del[k]);
        sqlite3_finalize(s->load[k]);
    }
    /* The VFS outlives the connection; a connection that could not close
     * (it cannot, every statement is finalized) would keep it. */
    if (sqlite3_close(s->db) == SQLITE_OK)
        walgather_free(s->gather);
    /* Closing any descriptor of the file drops SQLite's POSIX locks on it:
     * this one goes last. */
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    if (s->watch_fd >= 0)
        close(s->watch_fd);
    free(s->audit_gone);
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

/* A snapshot's file lives only while sqlite_snapshot runs; one left beside
 * the database (the server was killed meanwhile) holds a copy of every lease
 * and nothing else refers to it. Called with the database's flock held, so
 * no other server's snapshot can be in progress. Best effort: a file that
 * cannot be removed is named in the log and the start goes on. */
static void remove_stale_snapshots(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t blen = strlen(base), slen = strlen(".snapshot-");
    for (struct dirent *e; (e = readdir(d));) {
        if (strlen(e->d_name) != blen + slen + 6 || strncmp(e->d_name, base, blen) ||
            strncmp(e->d_name + blen, ".snapshot-", slen))
            continue;
        char file[4096 + 256];
        snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
        if (unlink(file) == 0)
            log_line(LEVEL_INFO, "removed %s, a backup's copy left by a server that stopped while making it", file);
        else
            log_line(LEVEL_WARN, "cannot remove %s, a backup's copy left by a server that stopped while making "
                                 "it: %s", file, strerror(errno));
    }
    closedir(d);
}

/* No barrier: only this process writes the file (commit.h). */
static const StoreOps SQLITE_OPS = {.load = sqlite_load,
                                    .commit = sqlite_commit,
                                    .close = sqlite_close,
                                    .error = sqlite_error,
                                    .snapshot = sqlite_snapshot,
                                    .idle = sqlite_idle};

Store *store_sqlite_open(const char *path, const char *boot_id, char *err, size_t errlen)
{
    SqliteStore *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base.ops = &SQLITE_OPS;
    thread_own(&s->base.owner);
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
    remove_stale_snapshots(path);
    /* Watched before its identity is taken (check_files); without inotify
     * (no instance left) the paths are checked after every commit instead. */
    s->watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (s->watch_fd >= 0 && inotify_add_watch(s->watch_fd, path, WATCHED) < 0) {
        close(s->watch_fd);
        s->watch_fd = -1;
    }
    s->db_ino = st.st_ino; /* the same file: flock holds it from the fstat on */
    s->db_dev = st.st_dev;
    if (!(s->gather = walgather_new(s->err, sizeof s->err)))
        goto fail;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        walgather_name(s->gather)) != SQLITE_OK) {
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
    if (build_statements(s))
        goto fail;
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

/* What a copy holds, counted by the descriptors: its names (the kinds whose
 * rows are names) and the largest token it knows was issued (meta's counter
 * and every kind's counter column). */
static int count_copy(SqliteStore *s, StoreBackupInfo *info)
{
    Sql q = {.len = 0};
    sql_add(&q, "SELECT 0");
    for (int k = 0; k < REC_KINDS; k++) {
        const SqlKind *d = &SQL_KINDS[k];
        if (d->names)
            sql_add(&q, " + (SELECT count(*) FROM %s%s%s)", d->table, d->where ? " WHERE " : "", d->where ? d->where : "");
    }
    sql_add(&q, ", max((SELECT value FROM meta WHERE key = 'last_token')");
    for (int k = 0; k < REC_KINDS; k++) {
        const SqlKind *d = &SQL_KINDS[k];
        if (d->counter >= 0)
            sql_add(&q, ", (SELECT coalesce(max(%s), 0) FROM %s%s%s)", d->columns[d->counter].name, d->table,
                    d->where ? " WHERE " : "", d->where ? d->where : "");
    }
    sql_add(&q, ")");
    sqlite3_stmt *st = NULL;
    if (q.full || sqlite3_prepare_v2(s->db, q.text, -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
        set_err(s, "count the copy");
        sqlite3_finalize(st);
        return -1;
    }
    info->locks = (uint64_t)sqlite3_column_int64(st, 0);
    info->last_token = (uint64_t)sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    return 0;
}

int store_sqlite_check_copy(const char *partial, const char *dest_path, StoreBackupInfo *info, char *err,
                            size_t errlen)
{
    /* A store over the copy, for the helpers that read a database; no SQLITE_OPEN_CREATE: what was copied must be there. */
    SqliteStore c = {.lock_fd = -1, .watch_fd = -1};
    if (sqlite3_open_v2(partial, &c.db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", partial, c.db ? sqlite3_errmsg(c.db) : "out of memory");
        sqlite3_close(c.db);
        return -1;
    }
    sqlite3_int64 tables = 0;
    char check[256] = "";
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c.db, "SELECT group_concat(integrity_check) FROM pragma_integrity_check", -1, &st, NULL) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        snprintf(check, sizeof check, "%s", sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "?");
    sqlite3_finalize(st);
    bool ok = !strcmp(check, "ok");
    if (!ok) {
        snprintf(err, errlen, "the copy fails its integrity check: %.200s", check[0] ? check : sqlite3_errmsg(c.db));
    } else if (one_value(&c, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", &tables) ||
               tables == 0) {
        snprintf(err, errlen, "the copy is not a leasegate database%s%s", tables ? ": " : "", tables ? c.err : "");
        ok = false;
    } else {
        /* Counted as this leasegate will load it: a copy of an older version
         * is migrated inside a transaction that is rolled back, so the file
         * stays as it was copied. */
        ok = exec(&c, "BEGIN IMMEDIATE") == 0 && prepare_schema(&c) == 0 && count_copy(&c, info) == 0;
        if (!ok)
            snprintf(err, errlen, "the copy is not a leasegate database this leasegate can load: %.300s", c.err);
        if (!sqlite3_get_autocommit(c.db))
            exec(&c, "ROLLBACK");
    }
    if (sqlite3_close(c.db) != SQLITE_OK) {
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
