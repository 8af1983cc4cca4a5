/* undolog — name changes not yet made durable by a directory fsync; see undolog.h. */
#include "undolog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum { NAME_CREATED, NAME_UNLINKED, NAME_RMDIRED, NAME_RENAMED } Change;

typedef struct Record {
    Change change;
    char *path;    /* created, removed, or the rename's new name (owned) */
    char *from;    /* a rename's old name (owned), else NULL */
    char trash[24]; /* NAME_UNLINKED: the file's name in the trash */
    mode_t mode;   /* NAME_RMDIRED: to recreate it */
    char *dirs[2]; /* directories whose fsync is still due (owned; NULL once synced) */
} Record;

struct UndoLog {
    int root_fd, trash_fd;
    Record *recs; /* oldest first */
    size_t n, cap;
    unsigned long long trash_seq;
};

UndoLog *undolog_new(int root_fd, int trash_fd)
{
    UndoLog *u = calloc(1, sizeof *u);
    if (u) {
        u->root_fd = root_fd;
        u->trash_fd = trash_fd;
    }
    return u;
}

static void record_clear(Record *r)
{
    free(r->path);
    free(r->from);
    free(r->dirs[0]);
    free(r->dirs[1]);
}

void undolog_free(UndoLog *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->n; i++)
        record_clear(&u->recs[i]);
    free(u->recs);
    free(u);
}

size_t undolog_pending(const UndoLog *u) { return u->n; }

/* The backing tree's name for a path of the mount. */
static const char *rel(const char *path) { return path[1] ? path + 1 : "."; }

/* The directory holding path, as a path of the mount (owned), or NULL when out of memory. */
static char *parent_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t len = slash && slash != path ? (size_t)(slash - path) : 1;
    char *dir = malloc(len + 1);
    if (dir) {
        memcpy(dir, path, len);
        dir[len] = '\0';
    }
    return dir;
}

/* A new record at the end (its strings owned by it), or NULL when out of memory. */
static Record *record_add(UndoLog *u, Change change, const char *path, const char *from)
{
    if (u->n == u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 64;
        Record *recs = realloc(u->recs, cap * sizeof *recs);
        if (!recs)
            return NULL;
        u->recs = recs;
        u->cap = cap;
    }
    Record *r = &u->recs[u->n];
    memset(r, 0, sizeof *r);
    r->change = change;
    r->path = strdup(path);
    r->from = from ? strdup(from) : NULL;
    r->dirs[0] = parent_of(path);
    r->dirs[1] = from ? parent_of(from) : NULL;
    if (!r->path || (from && !r->from) || !r->dirs[0] || (from && !r->dirs[1])) {
        record_clear(r);
        return NULL;
    }
    if (r->dirs[1] && !strcmp(r->dirs[0], r->dirs[1])) {
        free(r->dirs[1]);
        r->dirs[1] = NULL;
    }
    u->n++;
    return r;
}

int undolog_created(UndoLog *u, const char *path)
{
    return record_add(u, NAME_CREATED, path, NULL) ? 0 : -ENOMEM;
}

/* Moves path into the trash and records it: the file is back at a cut. */
static int trash(UndoLog *u, const char *path)
{
    Record *r = record_add(u, NAME_UNLINKED, path, NULL);
    if (!r)
        return -ENOMEM;
    snprintf(r->trash, sizeof r->trash, "%llu", ++u->trash_seq);
    if (renameat(u->root_fd, rel(path), u->trash_fd, r->trash) != 0) {
        int e = errno;
        record_clear(r);
        u->n--;
        return -e;
    }
    return 0;
}

int undolog_unlink(UndoLog *u, const char *path)
{
    struct stat st;
    if (fstatat(u->root_fd, rel(path), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    return trash(u, path);
}

int undolog_rmdir(UndoLog *u, const char *path)
{
    struct stat st;
    if (fstatat(u->root_fd, rel(path), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    Record *r = record_add(u, NAME_RMDIRED, path, NULL);
    if (!r)
        return -ENOMEM;
    r->mode = st.st_mode & 07777;
    if (unlinkat(u->root_fd, rel(path), AT_REMOVEDIR) != 0) {
        int e = errno;
        record_clear(r);
        u->n--;
        return -e;
    }
    return 0;
}

int undolog_rename(UndoLog *u, const char *from, const char *to, int noreplace)
{
    struct stat fst, tst;
    if (fstatat(u->root_fd, rel(from), &fst, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (!strcmp(from, to))
        return 0;
    bool replaces = fstatat(u->root_fd, rel(to), &tst, AT_SYMLINK_NOFOLLOW) == 0;
    if (replaces) {
        if (noreplace)
            return -EEXIST;
        if (S_ISDIR(tst.st_mode))
            return -EOPNOTSUPP; /* not modelled: nothing here needs it */
        if (S_ISDIR(fst.st_mode))
            return -ENOTDIR;
        int rc = trash(u, to);
        if (rc)
            return rc;
    }
    Record *r = record_add(u, NAME_RENAMED, to, from);
    int e = r ? 0 : ENOMEM;
    if (r && renameat(u->root_fd, rel(from), u->root_fd, rel(to)) != 0) {
        e = errno;
        record_clear(r);
        u->n--;
    }
    if (e && replaces) {
        /* Put the replaced file back: the rename did not happen. */
        Record *t = &u->recs[u->n - 1];
        if (renameat(u->trash_fd, t->trash, u->root_fd, rel(to)) == 0) {
            record_clear(t);
            u->n--;
        }
    }
    return -e;
}

void undolog_dir_synced(UndoLog *u, const char *dir)
{
    size_t kept = 0;
    for (size_t i = 0; i < u->n; i++) {
        Record *r = &u->recs[i];
        for (int d = 0; d < 2; d++)
            if (r->dirs[d] && !strcmp(r->dirs[d], dir)) {
                free(r->dirs[d]);
                r->dirs[d] = NULL;
            }
        if (r->dirs[0] || r->dirs[1]) {
            u->recs[kept++] = *r;
            continue;
        }
        /* Durable: a removed file is gone for good (a leftover is wiped at the next mount). */
        if (r->change == NAME_UNLINKED)
            unlinkat(u->trash_fd, r->trash, 0);
        record_clear(r);
    }
    u->n = kept;
}

/* Takes one change back; 0 or -errno. */
static int undo(UndoLog *u, const Record *r)
{
    int rc = 0;
    switch (r->change) {
    case NAME_CREATED:
        rc = unlinkat(u->root_fd, rel(r->path), 0);
        if (rc != 0 && (errno == EISDIR || errno == EPERM))
            rc = unlinkat(u->root_fd, rel(r->path), AT_REMOVEDIR);
        if (rc != 0 && (errno == ENOTEMPTY || errno == EEXIST)) {
            /* A directory whose own entries were synced: lost with it. */
            char name[32];
            snprintf(name, sizeof name, "%llu", ++u->trash_seq);
            rc = renameat(u->root_fd, rel(r->path), u->trash_fd, name);
        }
        break;
    case NAME_UNLINKED:
        rc = renameat(u->trash_fd, r->trash, u->root_fd, rel(r->path));
        break;
    case NAME_RMDIRED:
        rc = mkdirat(u->root_fd, rel(r->path), r->mode);
        break;
    case NAME_RENAMED:
        rc = renameat(u->root_fd, rel(r->path), u->root_fd, rel(r->from));
        break;
    }
    return rc ? -errno : 0;
}

size_t undolog_undo_all(UndoLog *u, size_t *failed)
{
    size_t done = u->n;
    *failed = 0;
    while (u->n > 0) {
        Record *r = &u->recs[--u->n];
        if (undo(u, r))
            (*failed)++;
        record_clear(r);
    }
    return done;
}
