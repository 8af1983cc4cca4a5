/*
 * walgather — a SQLite VFS that sends a commit's writes to the WAL to the
 * kernel in one call, at the commit's sync.
 *
 * Why: SQLite writes each WAL frame in two calls, its 24-byte header and then
 * its page, so a commit of three pages is six pwrite calls before its
 * fdatasync (bench/syscalls.sh: 11 a commit at 64 clients). Each is a system
 * call through the file system's write path. A commit is durable only at its
 * sync, so nothing is lost by handing its frames over together just before it.
 *
 * What it does: on a file SQLite opens as a WAL, a write that continues the
 * one before it (SQLite appends frames in order) is kept in a buffer; the
 * buffer goes to the file in one write before anything else is done with the
 * file (sync, read, size, truncate, close, any other call) and whenever the
 * next write does not continue it or would pass WALGATHER_MAX_BYTES. Every
 * other file (the database, a rollback journal) and every other call goes
 * straight to the VFS underneath (SQLite's default).
 *
 * Invariants:
 *  - what SQLite has written is in the file before any call that could
 *    observe the file or make it durable returns (so a read, a checkpoint and
 *    a sync see exactly what SQLite wrote);
 *  - a failed write of the buffer drops it, and that call and every later
 *    call that touches the file fail with that write's error (SQLITE_FULL
 *    when the disk is full, which the log then says) until the file is
 *    closed: SQLite was told those frames were written, so nothing may read,
 *    sync or commit as if they were there. A SQLITE_FULL in a statement
 *    rolls back that statement only, and SQLite ignores some calls' errors
 *    (file controls, unlocks); the transaction still cannot commit, because
 *    its frames' writes and its sync fail too. The store stops at a failed
 *    commit (runloop.c), so a file that failed is never used again.
 *
 * A WalGather belongs to one store (no process-wide state of ours): it is
 * registered with SQLite under a name of its own and must outlive every
 * connection opened with it. Each file is used by one thread at a time, as
 * SQLite's connection is (SQLITE_OPEN_NOMUTEX, threads.h).
 */
#ifndef LEASEGATE_WALGATHER_H
#define LEASEGATE_WALGATHER_H

#include <stddef.h>
#include <stdint.h>

/* The most gathered into one write: SQLite's unix VFS writes at most
 * 128 KiB - 1 bytes in one call (it never asks for more than a page and its
 * header) and answers SQLITE_FULL past that; 64 KiB holds a commit of 15
 * pages of 4 KiB. A commit of more is written in several. */
#define WALGATHER_MAX_BYTES (64 * 1024)

typedef struct WalGather WalGather;

/* Registers a new VFS over SQLite's default one (not as the default). NULL
 * with err set when out of memory or SQLite refuses it. Free with
 * walgather_free, after the last connection opened with it was closed. */
WalGather *walgather_new(char *err, size_t errlen);
void walgather_free(WalGather *g);
/* The name to pass to sqlite3_open_v2. */
const char *walgather_name(const WalGather *g);

/* Writes SQLite made to WAL files, and writes that reached them: the
 * difference is what was gathered (tests, bench). */
typedef struct {
    uint64_t wal_writes;
    uint64_t file_writes;
} WalGatherStats;
WalGatherStats walgather_stats(const WalGather *g);

#endif
