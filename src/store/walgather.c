/* walgather — one write per commit to the WAL; see walgather.h. */
#include "store/walgather.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct WalGather {
    sqlite3_vfs vfs; /* first: SQLite hands it back as the sqlite3_vfs * */
    sqlite3_vfs *under;
    char name[48];
    bool registered;
    WalGatherStats stats; /* each field changed only by the thread using a file */
};

typedef struct {
    sqlite3_file base; /* first: pMethods = &GATHER_IO */
    WalGather *g;
    bool wal;
    /* The error of the first failed write of the buffer (see walgather.h), else 0. */
    int failed;
    unsigned char *buf; /* owned; the bytes of [off, off + len) not yet written */
    size_t len, cap;
    sqlite3_int64 off;
    /* The file underneath (under->szOsFile bytes), last, aligned as SQLite
     * aligns the files it allocates (8 bytes: more would be misaligned). */
    sqlite3_int64 under[];
} GatherFile;

static sqlite3_file *under(GatherFile *f) { return (sqlite3_file *)f->under; }

/* The buffer to the file: 0, or the error of its first failed write from
 * then on (the buffer dropped). */
static int flush(GatherFile *f)
{
    if (f->failed || !f->len)
        return f->failed;
    int rc = under(f)->pMethods->xWrite(under(f), f->buf, (int)f->len, f->off);
    f->g->stats.file_writes++;
    f->len = 0;
    if (rc != SQLITE_OK)
        f->failed = rc;
    return f->failed;
}

static int g_close(sqlite3_file *file)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    int rc2 = under(f)->pMethods->xClose(under(f));
    free(f->buf);
    f->buf = NULL;
    f->cap = 0;
    return rc ? rc : rc2;
}

static int g_read(sqlite3_file *file, void *out, int amt, sqlite3_int64 off)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    return rc ? rc : under(f)->pMethods->xRead(under(f), out, amt, off);
}

/* Room for `more` bytes after what is buffered: false when the buffer
 * would pass WALGATHER_MAX_BYTES or cannot be allocated (its one size). */
static bool room(GatherFile *f, size_t more)
{
    size_t need = f->len + more;
    if (need > WALGATHER_MAX_BYTES)
        return false;
    if (need <= f->cap)
        return true;
    size_t cap = WALGATHER_MAX_BYTES;
    unsigned char *grown = realloc(f->buf, cap);
    if (!grown)
        return false;
    f->buf = grown;
    f->cap = cap;
    return true;
}

static int g_write(sqlite3_file *file, const void *data, int amt, sqlite3_int64 off)
{
    GatherFile *f = (GatherFile *)file;
    if (!f->wal)
        return under(f)->pMethods->xWrite(under(f), data, amt, off);
    f->g->stats.wal_writes++;
    if (f->failed)
        return f->failed;
    if (f->len && off != f->off + (sqlite3_int64)f->len) {
        int rc = flush(f);
        if (rc)
            return rc;
    }
    if (!room(f, (size_t)amt)) {
        /* Full, or no memory: what is buffered goes first, in order. */
        int rc = flush(f);
        if (rc)
            return rc;
        if (!room(f, (size_t)amt)) {
            f->g->stats.file_writes++;
            return under(f)->pMethods->xWrite(under(f), data, amt, off);
        }
    }
    if (!f->len)
        f->off = off;
    memcpy(f->buf + f->len, data, (size_t)amt);
    f->len += (size_t)amt;
    return SQLITE_OK;
}

static int g_truncate(sqlite3_file *file, sqlite3_int64 size)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    return rc ? rc : under(f)->pMethods->xTruncate(under(f), size);
}

static int g_sync(sqlite3_file *file, int flags)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    return rc ? rc : under(f)->pMethods->xSync(under(f), flags);
}

static int g_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    return rc ? rc : under(f)->pMethods->xFileSize(under(f), size);
}

static int g_lock(sqlite3_file *file, int level)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    return rc ? rc : under(f)->pMethods->xLock(under(f), level);
}

static int g_unlock(sqlite3_file *file, int level)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    return rc ? rc : under(f)->pMethods->xUnlock(under(f), level);
}

static int g_check_reserved(sqlite3_file *file, int *out)
{
    GatherFile *f = (GatherFile *)file;
    return under(f)->pMethods->xCheckReservedLock(under(f), out);
}

static int g_file_control(sqlite3_file *file, int op, void *arg)
{
    GatherFile *f = (GatherFile *)file;
    int rc = flush(f);
    return rc ? rc : under(f)->pMethods->xFileControl(under(f), op, arg);
}

static int g_sector_size(sqlite3_file *file)
{
    GatherFile *f = (GatherFile *)file;
    return under(f)->pMethods->xSectorSize(under(f));
}

static int g_device(sqlite3_file *file)
{
    GatherFile *f = (GatherFile *)file;
    return under(f)->pMethods->xDeviceCharacteristics(under(f));
}

/* The shared-memory and memory-mapping calls exist only from version 2 and 3
 * of the file underneath; SQLite makes them only when the file has them. */
static int g_shm_map(sqlite3_file *file, int page, int size, int extend, void volatile **out)
{
    GatherFile *f = (GatherFile *)file;
    if (under(f)->pMethods->iVersion < 2)
        return SQLITE_IOERR_SHMMAP;
    return under(f)->pMethods->xShmMap(under(f), page, size, extend, out);
}

static int g_shm_lock(sqlite3_file *file, int offset, int n, int flags)
{
    GatherFile *f = (GatherFile *)file;
    if (under(f)->pMethods->iVersion < 2)
        return SQLITE_IOERR_SHMLOCK;
    return under(f)->pMethods->xShmLock(under(f), offset, n, flags);
}

static void g_shm_barrier(sqlite3_file *file)
{
    GatherFile *f = (GatherFile *)file;
    if (under(f)->pMethods->iVersion >= 2)
        under(f)->pMethods->xShmBarrier(under(f));
}

static int g_shm_unmap(sqlite3_file *file, int delete_flag)
{
    GatherFile *f = (GatherFile *)file;
    if (under(f)->pMethods->iVersion < 2)
        return SQLITE_OK;
    return under(f)->pMethods->xShmUnmap(under(f), delete_flag);
}

static int g_fetch(sqlite3_file *file, sqlite3_int64 off, int amt, void **out)
{
    GatherFile *f = (GatherFile *)file;
    *out = NULL;
    int rc = flush(f);
    if (rc || under(f)->pMethods->iVersion < 3)
        return rc;
    return under(f)->pMethods->xFetch(under(f), off, amt, out);
}

static int g_unfetch(sqlite3_file *file, sqlite3_int64 off, void *page)
{
    GatherFile *f = (GatherFile *)file;
    if (under(f)->pMethods->iVersion < 3)
        return SQLITE_OK;
    return under(f)->pMethods->xUnfetch(under(f), off, page);
}

static const sqlite3_io_methods GATHER_IO = {
    .iVersion = 3,
    .xClose = g_close,
    .xRead = g_read,
    .xWrite = g_write,
    .xTruncate = g_truncate,
    .xSync = g_sync,
    .xFileSize = g_file_size,
    .xLock = g_lock,
    .xUnlock = g_unlock,
    .xCheckReservedLock = g_check_reserved,
    .xFileControl = g_file_control,
    .xSectorSize = g_sector_size,
    .xDeviceCharacteristics = g_device,
    .xShmMap = g_shm_map,
    .xShmLock = g_shm_lock,
    .xShmBarrier = g_shm_barrier,
    .xShmUnmap = g_shm_unmap,
    .xFetch = g_fetch,
    .xUnfetch = g_unfetch,
};

static int g_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags)
{
    WalGather *g = (WalGather *)vfs;
    GatherFile *f = (GatherFile *)file;
    memset(f, 0, sizeof *f);
    f->g = g;
    f->wal = (flags & SQLITE_OPEN_WAL) != 0;
    int rc = g->under->xOpen(g->under, name, under(f), flags, out_flags);
    /* SQLite calls xClose only on a file whose pMethods is set: ours is set
     * exactly when the file underneath is open. */
    f->base.pMethods = under(f)->pMethods ? &GATHER_IO : NULL;
    return rc;
}

/* The rest is the default VFS's own. */
static int g_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xDelete(u, name, sync_dir);
}
static int g_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xAccess(u, name, flags, out);
}
static int g_full_path(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xFullPathname(u, name, n, out);
}
static void *g_dl_open(sqlite3_vfs *vfs, const char *name)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xDlOpen(u, name);
}
static void g_dl_error(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    u->xDlError(u, n, out);
}
static void (*g_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xDlSym(u, h, sym);
}
static void g_dl_close(sqlite3_vfs *vfs, void *h)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    u->xDlClose(u, h);
}
static int g_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xRandomness(u, n, out);
}
static int g_sleep(sqlite3_vfs *vfs, int us)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xSleep(u, us);
}
static int g_current_time(sqlite3_vfs *vfs, double *out)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xCurrentTime(u, out);
}
static int g_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    return u->xGetLastError ? u->xGetLastError(u, n, out) : 0;
}
static int g_current_time_i64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    sqlite3_vfs *u = ((WalGather *)vfs)->under;
    if (u->iVersion >= 2 && u->xCurrentTimeInt64)
        return u->xCurrentTimeInt64(u, out);
    double days;
    int rc = u->xCurrentTime(u, &days);
    *out = (sqlite3_int64)(days * 86400000.0);
    return rc;
}

WalGather *walgather_new(char *err, size_t errlen)
{
    sqlite3_vfs *u = sqlite3_vfs_find(NULL);
    if (!u) {
        snprintf(err, errlen, "SQLite has no default VFS");
        return NULL;
    }
    WalGather *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->under = u;
    /* Unique while g lives: its address. */
    snprintf(g->name, sizeof g->name, "leasegate-walgather-%p", (void *)g);
    g->vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)(sizeof(GatherFile) + (size_t)u->szOsFile),
        .mxPathname = u->mxPathname,
        .zName = g->name,
        .pAppData = g,
        .xOpen = g_open,
        .xDelete = g_delete,
        .xAccess = g_access,
        .xFullPathname = g_full_path,
        .xDlOpen = g_dl_open,
        .xDlError = g_dl_error,
        .xDlSym = g_dl_sym,
        .xDlClose = g_dl_close,
        .xRandomness = g_randomness,
        .xSleep = g_sleep,
        .xCurrentTime = g_current_time,
        .xGetLastError = g_last_error,
        .xCurrentTimeInt64 = g_current_time_i64,
    };
    int rc = sqlite3_vfs_register(&g->vfs, 0);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot register a VFS: %s", sqlite3_errstr(rc));
        free(g);
        return NULL;
    }
    g->registered = true;
    return g;
}

void walgather_free(WalGather *g)
{
    if (!g)
        return;
    if (g->registered)
        sqlite3_vfs_unregister(&g->vfs);
    free(g);
}

const char *walgather_name(const WalGather *g) { return g->name; }

WalGatherStats walgather_stats(const WalGather *g) { return g->stats; }
