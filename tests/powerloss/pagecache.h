/*
 * pagecache — what cutfs has been told to write and has not yet been asked to
 * make durable: per file, its dirty pages and its size, in memory.
 *
 * A file is the backing file's inode (renames keep it), opened once here and
 * shared by every handle of it (CachedFile.fd). What a reader sees is the
 * backing file overlaid with the dirty pages, cut at `size`; backing bytes at
 * or past `keep` read as zeros (a truncation not yet synced). Nothing here
 * reaches the backing file before cachedfile_sync: a power cut loses it all
 * simply by cutfs exiting (or part of it: pagecache_spill).
 *
 * Invariants: every byte at or past `size` of a dirty page is zero; `keep` <=
 * `size` whenever `keep` is below the backing file's size; a file with no
 * handle left stays while it has something to sync, unless its name is gone.
 * One thread (cutfs runs FUSE single-threaded): no locking.
 */
#ifndef CUTFS_PAGECACHE_H
#define CUTFS_PAGECACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct PageCache PageCache;
typedef struct CachedFile CachedFile;

PageCache *pagecache_new(void);
/* Frees every file (what was not synced is dropped) and closes their descriptors. */
void pagecache_free(PageCache *pc);

/* Opens dirfd/rel (read-write, read-only where the backing file allows no
 * more) as one more handle of its file: -errno, or 0 with *out set. */
int pagecache_open(PageCache *pc, int dirfd, const char *rel, CachedFile **out);
/* The same for a descriptor just opened (taken over, closed here when the
 * file already had one). */
int pagecache_adopt(PageCache *pc, int fd, CachedFile **out);
/* One handle fewer; the file is freed once none is left and it is clean or nameless. */
void pagecache_close(PageCache *pc, CachedFile *f);
/* The file with this backing inode, or NULL. */
CachedFile *pagecache_find(PageCache *pc, ino_t ino);
/* The backing inode lost its (last) name: its unsynced data can never be seen again once closed. */
void pagecache_gone(PageCache *pc, ino_t ino);
/* Syncs every file (a clean unmount): 0 or the first -errno. */
int pagecache_sync_all(PageCache *pc);
/* What a power cut now would drop: files and pages with unsynced changes. */
void pagecache_dirty(const PageCache *pc, size_t *files, size_t *pages);
/* A power cut on a disk that had written part of its cache: each 512-byte
 * sector of each unsynced page reaches the backing file or not, and each
 * unsynced truncation happens or not, as the seeded generator draws (a
 * subset, in no order; bytes nobody wrote are never changed). Returns how
 * many sectors were written, or -errno. */
long pagecache_spill(PageCache *pc, unsigned long long seed);

int cachedfile_fd(const CachedFile *f);
off_t cachedfile_size(const CachedFile *f);
/* Bytes read (0 at the end), or -errno. */
ssize_t cachedfile_read(CachedFile *f, char *buf, size_t n, off_t off);
/* n, or -errno (-ENOMEM): into memory only. */
ssize_t cachedfile_write(CachedFile *f, const char *buf, size_t n, off_t off);
/* 0 or -errno: in memory only. */
int cachedfile_truncate(CachedFile *f, off_t size);
/* Writes what is dirty to the backing file: from now on it survives a cut. */
int cachedfile_sync(CachedFile *f);

#endif
