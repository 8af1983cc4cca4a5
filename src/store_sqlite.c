/*
 * store_sqlite — the Store interface on one SQLite database.
 *
 * Settings that carry the guarantees (do not weaken them):
 *  - journal_mode=WAL with synchronous=FULL: a committed batch survives power
 *    loss, so a token revealed after commit can never be handed out again;
 *  - locking_mode=EXCLUSIVE, taken at open: a second server on the same file
 *    fails at start instead of issuing duplicate tokens;
 *  - BEGIN IMMEDIATE for every batch; statements prepared once.
 * One connection, used by the loader at start-up and then only by the commit
 * thread.
 *
 * The token counter is max(meta.last_token, max(locks.last_token)): every grant
 * writes its lock's row in the same transaction, so rows vouch for it without
 * a meta write per commit; a batch that deletes rows (forgotten idle locks)
 * writes the counter to meta in the same transaction.
 */
#include "leasegate/store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_VERSION 1

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS locks("
    "  name TEXT PRIMARY KEY, last_token INTEGER NOT NULL,"
    "  lease BLOB, owner TEXT, token INTEGER, ttl_ms INTEGER, acquired_at_ms INTEGER,"
    "  expires_at_ms INTEGER, count INTEGER, metadata TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS fences(resource TEXT PRIMARY KEY, max_token INTEGER NOT NULL)"
    "  WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS guard_marks(lock TEXT PRIMARY KEY, max_token INTEGER NOT NULL)"
    "  WITHOUT ROWID;"
    "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', 1), ('last_token', 0);";

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_PUT_LOCK,
    ST_DELETE_LOCK,
    ST_DELETE_GUARD_MARK,
    ST_PUT_FENCE,
    ST_PUT_GUARD_MARK,
    ST_PUT_COUNTER,
    ST_COUNT
};

static const char *const STATEMENTS[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PUT_LOCK] = "INSERT OR REPLACE INTO locks(name, last_token, lease, owner, token, ttl_ms,"
                    " acquired_at_ms, expires_at_ms, count, metadata)"
                    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [ST_DELETE_LOCK] = "DELETE FROM locks WHERE name = ?1",
    [ST_DELETE_GUARD_MARK] = "DELETE FROM guard_marks WHERE lock = ?1",
    [ST_PUT_COUNTER] = "UPDATE meta SET value = max(value, ?1) WHERE key = 'last_token'",
    [ST_PUT_FENCE] = "INSERT INTO fences(resource, max_token) VALUES(?1, ?2)"
                     " ON CONFLICT(resource) DO UPDATE SET max_token = max(max_token, excluded.max_token)",
    [ST_PUT_GUARD_MARK] = "INSERT INTO guard_marks(lock, max_token) VALUES(?1, ?2)"
                          " ON CONFLICT(lock) DO UPDATE SET max_token = max(max_token, excluded.max_token)",
};

typedef struct SqliteStore {
    Store base;
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    char err[256];
} SqliteStore;

static void set_err(SqliteStore *s, const char *what)
{
    snprintf(s->err, sizeof s->err, "%s: %s", what, s->db ? sqlite3_errmsg(s->db) : "out of memory");
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

static int bind_lock(sqlite3_stmt *st, const StoreLock *l)
{
    int rc = sqlite3_bind_text(st, 1, l->name, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(st, 2, (sqlite3_int64)l->last_token);
    if (l->held) {
        const Holder *h = &l->holder;
        rc |= sqlite3_bind_blob(st, 3, h->lease, LEASE_ID_BYTES, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 4, h->owner, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 5, (sqlite3_int64)h->token);
        rc |= sqlite3_bind_int64(st, 6, h->ttl_ms);
        rc |= sqlite3_bind_int64(st, 7, h->acquired_at_ms);
        rc |= sqlite3_bind_int64(st, 8, h->expires_at_ms);
        rc |= sqlite3_bind_int64(st, 9, h->count);
        rc |= sqlite3_bind_text(st, 10, h->metadata, -1, SQLITE_STATIC);
    }
    return rc == SQLITE_OK ? 0 : -1;
}

static int put_marks(SqliteStore *s, sqlite3_stmt *st, const StoreMark *marks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (sqlite3_bind_text(st, 1, marks[i].name, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(st, 2, (sqlite3_int64)marks[i].max_token) != SQLITE_OK) {
            set_err(s, "bind mark");
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
        sqlite3_stmt *st = s->st[l->forget ? ST_DELETE_LOCK : ST_PUT_LOCK];
        int bad = l->forget ? sqlite3_bind_text(st, 1, l->name, -1, SQLITE_STATIC) != SQLITE_OK : bind_lock(st, l);
        if (bad) {
            set_err(s, "bind lock");
            goto fail;
        }
        if (step_reset(s, st))
            goto fail;
        if (l->forget) {
            sqlite3_stmt *gm = s->st[ST_DELETE_GUARD_MARK];
            if (sqlite3_bind_text(gm, 1, l->name, -1, SQLITE_STATIC) != SQLITE_OK || step_reset(s, gm))
                goto fail;
        }
    }
    if (b->counter && (sqlite3_bind_int64(s->st[ST_PUT_COUNTER], 1, (sqlite3_int64)b->counter) != SQLITE_OK ||
                       step_reset(s, s->st[ST_PUT_COUNTER])))
        goto fail;
    if (put_marks(s, s->st[ST_PUT_FENCE], b->fences, b->nfences) ||
        put_marks(s, s->st[ST_PUT_GUARD_MARK], b->guard_marks, b->nguard_marks))
        goto fail;
    if (step_reset(s, s->st[ST_COMMIT]))
        goto fail;
    return 0;
fail:
    step_reset(s, s->st[ST_ROLLBACK]);
    return -1;
}

static int load_locks(SqliteStore *s, const StoreLoad *cb, uint64_t *max_token)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT name, last_token, lease, owner, token, ttl_ms, acquired_at_ms,"
                           " expires_at_ms, count, metadata FROM locks",
                           -1, &st, NULL) != SQLITE_OK) {
        set_err(s, "load locks");
        return -1;
    }
    int rc, res = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        StoreLock l = {0};
        l.name = (const char *)sqlite3_column_text(st, 0);
        l.last_token = (uint64_t)sqlite3_column_int64(st, 1);
        if (l.last_token > *max_token)
            *max_token = l.last_token;
        l.held = sqlite3_column_type(st, 2) != SQLITE_NULL;
        if (l.held) {
            if (sqlite3_column_bytes(st, 2) != LEASE_ID_BYTES) {
                snprintf(s->err, sizeof s->err, "lock %s: corrupt lease id", l.name);
                res = -1;
                break;
            }
            memcpy(l.holder.lease, sqlite3_column_blob(st, 2), LEASE_ID_BYTES);
            l.holder.owner = (char *)sqlite3_column_text(st, 3);
            l.holder.token = (uint64_t)sqlite3_column_int64(st, 4);
            l.holder.ttl_ms = sqlite3_column_int64(st, 5);
            l.holder.acquired_at_ms = sqlite3_column_int64(st, 6);
            l.holder.expires_at_ms = sqlite3_column_int64(st, 7);
            l.holder.count = (uint32_t)sqlite3_column_int64(st, 8);
            l.holder.metadata = (char *)sqlite3_column_text(st, 9);
            if (!l.holder.owner || !l.holder.metadata) {
                snprintf(s->err, sizeof s->err, "lock %s: corrupt holder", l.name);
                res = -1;
                break;
            }
        }
        if (!l.name || cb->lock(cb->ud, &l)) {
            snprintf(s->err, sizeof s->err, "cannot load lock %s", l.name ? l.name : "(null)");
            res = -1;
            break;
        }
    }
    if (res == 0 && rc != SQLITE_DONE) {
        set_err(s, "load locks");
        res = -1;
    }
    sqlite3_finalize(st);
    return res;
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
        StoreMark m = {(const char *)sqlite3_column_text(st, 0), (uint64_t)sqlite3_column_int64(st, 1)};
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

static int sqlite_load(Store *base, const StoreLoad *cb, uint64_t *last_token)
{
    SqliteStore *s = (SqliteStore *)base;
    sqlite3_int64 counter; /* databases of earlier versions kept it here */
    uint64_t max_token = 0;
    if (read_meta(s, "last_token", &counter) || load_locks(s, cb, &max_token) ||
        load_marks(s, "SELECT resource, max_token FROM fences", cb->fence, cb->ud) ||
        load_marks(s, "SELECT lock, max_token FROM guard_marks", cb->guard_mark, cb->ud))
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
    free(s);
}

static const char *sqlite_error(const Store *base) { return ((const SqliteStore *)base)->err; }

static const StoreOps SQLITE_OPS = {sqlite_load, sqlite_commit, sqlite_close, sqlite_error};

Store *store_sqlite_open(const char *path, char *err, size_t errlen)
{
    SqliteStore *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base.ops = &SQLITE_OPS;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        set_err(s, path);
        goto fail;
    }
    /* Exclusive locking first, so WAL needs no shared memory and the lock is held from here on. */
    if (exec(s, "PRAGMA locking_mode=EXCLUSIVE") || exec(s, "PRAGMA journal_mode=WAL") ||
        exec(s, "PRAGMA synchronous=FULL") || exec(s, "BEGIN IMMEDIATE") || exec(s, SCHEMA) ||
        exec(s, "COMMIT"))
        goto fail;
    sqlite3_int64 version;
    if (read_meta(s, "schema_version", &version))
        goto fail;
    if (version != SCHEMA_VERSION) {
        snprintf(s->err, sizeof s->err, "schema version %lld, expected %d", (long long)version,
                 SCHEMA_VERSION);
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
