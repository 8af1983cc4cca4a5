/*
 * Unit test of when the SQLite store copies its WAL into the database file:
 * not inside the commit that makes the WAL cross the checkpoint mark (its
 * answers would wait for the copy), but in store_idle, which the commit
 * writer calls between commits; and, for an owner that never calls it, inside
 * a commit once the WAL is a whole mark further. What a commit wrote stays
 * readable through all of it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "check.h"
#include "store/store.h"

/* store_sqlite.c's CHECKPOINT_PAGES, in bytes of WAL (a frame is a 24-byte
 * header and a 4096-byte page, after the WAL's 32-byte header). */
#define MARK_BYTES (32 + 1000 * (24 + 4096))

static off_t size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* One commit of 60 fences with long names, numbered from *next: about four
 * new pages of the fences' table, and the pages above them. */
static int commit_fences(Store *st, int *next)
{
    enum { N = 60 };
    static char names[N][240];
    StoreRecord recs[N];
    for (int i = 0; i < N; i++, (*next)++) {
        snprintf(names[i], sizeof names[i], "fence-%08d-%0200d", *next, 0);
        recs[i] = (StoreRecord){.kind = REC_FENCE, .fence = {.name = names[i], .max_token = (uint64_t)*next + 1}};
    }
    StoreBatch b = {.records = recs, .n = N, .history_keep = 10};
    return store_commit(st, &b);
}

static int fences_loaded;
static int count_fences(void *ud, const StoreRecord *r)
{
    (void)ud;
    fences_loaded += r->kind == REC_FENCE;
    return 0;
}
static int no_seq(void *ud, uint64_t seq) { return (void)ud, (void)seq, 0; }

/* Commits until the WAL file holds at least `bytes`; the number of commits made. */
static int commit_until_wal(Store *st, const char *wal, off_t bytes, int *next)
{
    int commits = 0;
    while (size_of(wal) < bytes && commits < 5000) {
        CHECK(commit_fences(st, next) == 0);
        commits++;
    }
    return commits;
}

int main(void)
{
    char dir[] = "/tmp/lg-checkpoint.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[256], wal[272], err[256];
    snprintf(path, sizeof path, "%s/db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);

    Store *st = store_sqlite_open(path, NULL, err, sizeof err);
    CHECK(st != NULL);
    if (!st)
        return check_report("checkpoint");
    int next = 0;
    CHECK(commit_fences(st, &next) == 0);
    store_idle(st); /* the first pages are in the database file */
    off_t db0 = size_of(path);
    CHECK(db0 > 0);

    /* Past the mark: the commit that crossed it did not copy the WAL. */
    CHECK(commit_until_wal(st, wal, MARK_BYTES, &next) > 0);
    CHECK(size_of(path) == db0);
    /* The writer's call between commits does. */
    store_idle(st);
    off_t db1 = size_of(path);
    CHECK(db1 > db0);
    /* And then the WAL is used again from its start: it stops growing. */
    off_t wal1 = size_of(wal);
    for (int i = 0; i < 20; i++)
        CHECK(commit_fences(st, &next) == 0);
    CHECK(size_of(wal) == wal1);
    CHECK(size_of(path) == db1);

    /* An owner that never calls store_idle: the mark is passed, then a commit
     * copies the WAL itself, once the WAL is a whole mark further. */
    int commits = 0;
    while (size_of(path) == db1 && commits < 5000) {
        CHECK(commit_fences(st, &next) == 0);
        commits++;
    }
    CHECK(size_of(path) > db1);
    CHECK(size_of(wal) >= 2 * (off_t)MARK_BYTES - 32);

    store_close(st);
    st = store_sqlite_open(path, NULL, err, sizeof err);
    CHECK(st != NULL);
    if (st) {
        uint64_t last = 0;
        StoreLoad cb = {NULL, no_seq, count_fences};
        CHECK(store_load(st, &cb, &last) == 0);
        CHECK(fences_loaded == next);
        store_close(st);
    }
    unlink(wal);
    unlink(path);
    rmdir(dir);
    return check_report("checkpoint");
}
