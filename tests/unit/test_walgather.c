/* Unit test of walgather: a commit reaches the WAL in one write, and what
 * SQLite wrote is all there for a read, a checkpoint, a process that dies
 * right after its commit and a big transaction; an uncommitted one is not. */
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "store/walgather.h"

static bool exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        fprintf(stderr, "%s: %s\n", sql, msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return rc == SQLITE_OK;
}

/* The store's own settings (store_sqlite.c). */
static sqlite3 *open_gathered(const char *path, WalGather *g)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        walgather_name(g)) != SQLITE_OK ||
        !exec(db, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                  "PRAGMA wal_autocheckpoint=0;"
                  "CREATE TABLE IF NOT EXISTS a(k INTEGER PRIMARY KEY, v TEXT);"
                  "CREATE TABLE IF NOT EXISTS b(k INTEGER PRIMARY KEY, v TEXT);"
                  "CREATE TABLE IF NOT EXISTS c(k INTEGER PRIMARY KEY, v BLOB);")) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

static long long one(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* A transaction that dirties a page of each of a and b. */
static bool commit_two_pages(sqlite3 *db, int i)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "BEGIN IMMEDIATE; INSERT INTO a(k, v) VALUES(%d, 'a%d'); INSERT INTO b(k, v) VALUES(%d, 'b%d'); COMMIT;",
             i, i, i, i);
    return exec(db, sql);
}

static void gathers_a_commit_into_one_write(const char *path)
{
    char err[256];
    WalGather *g = walgather_new(err, sizeof err);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(sqlite3_vfs_find(walgather_name(g)) != NULL);
    CHECK(sqlite3_vfs_find(NULL) != sqlite3_vfs_find(walgather_name(g))); /* not made the default */
    sqlite3 *db = open_gathered(path, g);
    CHECK(db != NULL);
    WalGatherStats before = walgather_stats(g);
    bool ok = true;
    for (int i = 1; i <= 20; i++)
        ok = ok && commit_two_pages(db, i);
    CHECK(ok);
    WalGatherStats after = walgather_stats(g);
    /* Each commit: two pages and their frame headers, four writes by SQLite, one to the file. */
    CHECK(after.file_writes - before.file_writes == 20);
    CHECK(after.wal_writes - before.wal_writes >= 80);
    /* A checkpoint reads the frames back from the WAL. */
    CHECK(exec(db, "PRAGMA wal_checkpoint(PASSIVE)"));
    CHECK(one(db, "SELECT count(*) FROM a") == 20);
    CHECK(one(db, "SELECT sum(length(v)) FROM b") == 9 * 2 + 11 * 3);

    /* Past WALGATHER_MAX_BYTES the writes go on, in order. */
    CHECK(exec(db, "BEGIN; INSERT INTO c(k, v) VALUES(1, zeroblob(3000000)); UPDATE a SET v = 'big' WHERE k = 1; COMMIT;"));
    CHECK(sqlite3_close(db) == SQLITE_OK);
    walgather_free(g);

    /* Read with SQLite's own VFS: everything is in the files. */
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK);
    CHECK(one(db, "SELECT count(*) FROM a") == 20);
    CHECK(one(db, "SELECT length(v) FROM c WHERE k = 1") == 3000000);
    CHECK(one(db, "SELECT v = 'big' FROM a WHERE k = 1") == 1);
    CHECK(one(db, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'") == 1);
    sqlite3_close(db);
}

/* A child commits, begins one more transaction whose pages SQLite has
 * written (a big one: its frames leave before COMMIT) and dies without
 * closing anything, as under kill -9. */
static void a_dying_process_keeps_its_commits(const char *path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char err[256];
        WalGather *g = walgather_new(err, sizeof err);
        sqlite3 *db = g ? open_gathered(path, g) : NULL;
        bool ok = db != NULL;
        for (int i = 100; ok && i < 110; i++)
            ok = commit_two_pages(db, i);
        ok = ok && exec(db, "BEGIN IMMEDIATE; INSERT INTO c(k, v) VALUES(2, zeroblob(5000000));"
                            "INSERT INTO a(k, v) VALUES(999, 'never');");
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK);
    CHECK(one(db, "SELECT count(*) FROM a WHERE k BETWEEN 100 AND 109") == 10);
    CHECK(one(db, "SELECT count(*) FROM b WHERE k BETWEEN 100 AND 109") == 10);
    CHECK(one(db, "SELECT count(*) FROM a WHERE k = 999") == 0);
    CHECK(one(db, "SELECT count(*) FROM c WHERE k = 2") == 0);
    CHECK(one(db, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'") == 1);
    sqlite3_close(db);
}

/* A VFS under walgather whose WAL writes fail (SQLITE_FULL, a full disk)
 * while `failing` is set. */
typedef struct {
    sqlite3_vfs vfs;
    sqlite3_vfs *real;
    sqlite3_io_methods io; /* the real WAL file's, with the failing write */
    const sqlite3_io_methods *real_io;
    bool failing;
} Faulty;
static Faulty *faulty_of_io; /* the test's one Faulty, for f_write (a unit test's own) */

static int f_write(sqlite3_file *f, const void *data, int amt, sqlite3_int64 off)
{
    return faulty_of_io->failing ? SQLITE_FULL : faulty_of_io->real_io->xWrite(f, data, amt, off);
}

static int f_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    Faulty *fv = (Faulty *)vfs;
    int rc = fv->real->xOpen(fv->real, name, f, flags, out_flags);
    if (rc == SQLITE_OK && (flags & SQLITE_OPEN_WAL) && f->pMethods) {
        fv->real_io = f->pMethods;
        fv->io = *f->pMethods;
        fv->io.xWrite = f_write;
        f->pMethods = &fv->io;
    }
    return rc;
}

static bool copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    bool ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    if (in)
        fclose(in);
    if (out && fclose(out))
        ok = false;
    return ok;
}

/* A transaction too big for the page cache spills pages to the WAL, which
 * walgather keeps; a later statement reads one back, and the write of the
 * buffer fails. The transaction must not then commit without those pages
 * (it did: SQLITE_FULL rolled back the statement only, COMMIT said OK, and
 * the database was corrupt, its commit gone after a crash). Whatever COMMIT
 * says must be what a crash leaves. */
static void a_lost_buffer_fails_its_transaction(const char *dir)
{
    Faulty fv = {.real = sqlite3_vfs_find(NULL)};
    faulty_of_io = &fv;
    fv.vfs = *fv.real;
    fv.vfs.zName = "walgather-test-faulty";
    fv.vfs.xOpen = f_open;
    CHECK(sqlite3_vfs_register(&fv.vfs, 1) == SQLITE_OK); /* the default, which walgather wraps */
    int failed_commits = 0;
    for (int n = 2980; n <= 3020; n += 5) {
        char path[256], copy[256], wal[300], copy_wal[300], sql[300], err[256];
        snprintf(path, sizeof path, "%s/spill%d", dir, n);
        snprintf(copy, sizeof copy, "%s/crashed%d", dir, n);
        snprintf(wal, sizeof wal, "%s-wal", path);
        snprintf(copy_wal, sizeof copy_wal, "%s-wal", copy);
        WalGather *g = walgather_new(err, sizeof err);
        sqlite3 *db = NULL;
        CHECK(g && sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                   walgather_name(g)) == SQLITE_OK);
        CHECK(exec(db, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                       "PRAGMA wal_autocheckpoint=0; PRAGMA cache_size=10;"
                       "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT UNIQUE); BEGIN IMMEDIATE;"));
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %d)"
                 " INSERT INTO t SELECT i, printf('%%0200d', i) FROM c",
                 n);
        CHECK(exec(db, sql));
        fv.failing = true;
        sqlite3_exec(db, "INSERT INTO t SELECT k + 100000, v || 'y' FROM t WHERE k <= 3000", NULL, NULL, NULL);
        fv.failing = false;
        bool committed = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
        failed_commits += !committed;
        /* A crash now: the files as they are, read with SQLite's own VFS. */
        CHECK(copy_file(path, copy) && copy_file(wal, copy_wal));
        sqlite3 *after = NULL;
        CHECK(sqlite3_open_v2(copy, &after, SQLITE_OPEN_READWRITE, "unix") == SQLITE_OK);
        long long rows = one(after, "SELECT count(*) FROM t");
        CHECK(committed ? rows >= n : rows == 0);
        if (committed ? rows < n : rows != 0)
            fprintf(stderr, "n=%d: COMMIT %s, %lld rows after a crash\n", n, committed ? "said OK" : "failed", rows);
        CHECK(one(after, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'") == 1);
        sqlite3_close(after);
        sqlite3_close(db);
        walgather_free(g);
    }
    CHECK(failed_commits > 0); /* the fault did hit gathered frames */
    CHECK(sqlite3_vfs_register(fv.real, 1) == SQLITE_OK);
    CHECK(sqlite3_vfs_unregister(&fv.vfs) == SQLITE_OK);
    faulty_of_io = NULL;
}

static void unregistered_when_freed(void)
{
    char err[256], name[64];
    WalGather *g = walgather_new(err, sizeof err);
    CHECK(g != NULL);
    if (!g)
        return;
    snprintf(name, sizeof name, "%s", walgather_name(g));
    walgather_free(g);
    CHECK(sqlite3_vfs_find(name) == NULL);
}

int main(void)
{
    char dir[] = "/tmp/test_walgather.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[sizeof dir + 16];
    snprintf(path, sizeof path, "%s/db", dir);
    gathers_a_commit_into_one_write(path);
    a_dying_process_keeps_its_commits(path);
    unregistered_when_freed();
    a_lost_buffer_fails_its_transaction(dir);
    char cmd[sizeof dir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report("walgather");
}
