/*
 * undolog — the names cutfs changed that no directory fsync has made durable
 * yet, and how to put each back at a power cut.
 *
 * Every change of a name is made at once in the backing tree (so that what
 * the mount shows is simply the backing tree) and recorded here; an fsync of
 * the directory holding the name makes the record durable (it is dropped),
 * and a power cut undoes the records left, newest first. A removed file is
 * not deleted but moved into the trash directory until its removal is
 * durable, so that a cut can bring it back (with its synced content: what was
 * not synced is lost either way). A removed directory (empty) is recreated.
 * A rename across two directories is durable once both were synced after it.
 *
 * Paths are the mount's ("/a/b"); the backing tree is opened at root_fd.
 * Errors are -errno. One thread: no locking.
 */
#ifndef CUTFS_UNDOLOG_H
#define CUTFS_UNDOLOG_H

#include <stddef.h>
#include <sys/types.h>

typedef struct UndoLog UndoLog;

/* Both descriptors stay the caller's. */
UndoLog *undolog_new(int root_fd, int trash_fd);
void undolog_free(UndoLog *u);

/* path was just created (a file or a directory). */
int undolog_created(UndoLog *u, const char *path);
/* Removes the file path (into the trash). */
int undolog_unlink(UndoLog *u, const char *path);
/* Removes the empty directory path. */
int undolog_rmdir(UndoLog *u, const char *path);
/* Renames from to `to`; a file at `to` is removed first (into the trash).
 * noreplace: -EEXIST when `to` exists. A directory is never replaced (-EOPNOTSUPP). */
int undolog_rename(UndoLog *u, const char *from, const char *to, int noreplace);
/* The directory dir was fsynced: the changes of names in it are durable. */
void undolog_dir_synced(UndoLog *u, const char *dir);
/* The power cut: every change not yet durable is undone, newest first.
 * Returns how many were; *failed counts those that could not be. */
size_t undolog_undo_all(UndoLog *u, size_t *failed);
/* Changes not yet durable. */
size_t undolog_pending(const UndoLog *u);

#endif
