/*
 * cutfs — a file system whose power can be cut: it loses, at the cut, every
 * write that no fsync made durable, as a disk with a volatile cache would.
 *
 *   cutfs [--cut-at N [--cut-only GLOB]] [--torn SEED] [--trace-syncs] DISK MOUNTPOINT
 *
 * DISK/root is the disk: what a sync made durable (created if missing);
 * DISK/trash holds removed files until their removal is durable (wiped at
 * start). The mount shows DISK/root with every write since the last fsync of
 * each file kept in memory (pagecache.h), and every name created, removed or
 * renamed since the last fsync of its directory recorded so that it can be
 * taken back (undolog.h). fsync and fdatasync write a file's pages to DISK;
 * an fsync of a directory makes its names durable.
 *
 * The power cut: SIGUSR1, or the N-th changing operation (a write, truncate,
 * fsync of a file or a directory, create, mkdir, unlink, rmdir, rename,
 * chmod, chown, utimens) on a path matching GLOB (fnmatch(3), `*` matching
 * `/` too; every path without --cut-only), which then fails with EIO instead
 * of happening. Nothing after it happens: cutfs stops serving at once, takes
 * back the names not yet durable, drops the unsynced pages by exiting, and
 * unmounts (lazily: the processes that used it get errors until they are
 * killed, as on a machine that lost power). A new cutfs on the same DISK is the
 * machine powered on again. With --torn, the disk had written part of its
 * cache when the power went: each 512-byte sector of the unsynced pages (and
 * each unsynced truncation) reaches DISK or not, drawn from SEED
 * (pagecache_spill); without it, none does. SIGTERM, SIGINT or an unmount instead end it
 * cleanly: everything is synced first, as at a clean shutdown.
 *
 * It prints "cutfs: mounted" on stdout once the mount serves, on stderr one
 * line with what it did when it ends, and on SIGUSR2 the number of changing
 * operations so far ("cutfs: ops N matching M"), so that a test can aim a
 * later --cut-at inside a phase it measured; with --trace-syncs, a line for
 * each fsync of a file or a directory ("cutfs: sync at op N PATH"), so that
 * it can aim just before or just after one.
 *
 * What it does not model: a torn sector (a sector is written whole or not at
 * all), names kept in part (a name change is durable with its directory's
 * fsync, and undone otherwise), attributes (chmod, times: durable at once), hard and symbolic links (not supported), a directory
 * renamed over another. It serves one request at a time (FUSE single-threaded),
 * so that a cut falls between two operations.
 */
#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "pagecache.h"
#include "undolog.h"

typedef struct CutFs {
    int root_fd, trash_fd; /* DISK/root and DISK/trash, owned */
    PageCache *cache;
    UndoLog *undo;
    const char *cut_glob;  /* NULL: every path */
    uint64_t cut_at;       /* 0: only SIGUSR1 cuts */
    bool torn;             /* --torn: part of the unsynced pages reach the disk at the cut */
    bool trace_syncs;
    unsigned long long torn_seed;
    _Atomic uint64_t ops;      /* changing operations so far */
    _Atomic uint64_t matching; /* of those, on a path matching cut_glob */
    uint64_t syncs;
    bool cut;
    struct fuse_session *session;
} CutFs;

/* A signal handler reaches only globals: the one file system of this process. */
static CutFs *signal_fs;
static volatile sig_atomic_t cut_signalled;

static CutFs *fs_of(void) { return fuse_get_context()->private_data; }

/* The backing tree's name for a path of the mount ("": none, for a removed file's NULL path). */
static const char *rel(const char *path) { return !path ? "" : path[1] ? path + 1 : "."; }

static CachedFile *file_of(const struct fuse_file_info *fi) { return (CachedFile *)(uintptr_t)fi->fh; }

/* Counts a changing operation on path; true when the power goes now (the
 * operation must then fail with EIO and not happen). */
static bool power_fails(CutFs *fs, const char *path)
{
    if (fs->cut)
        return true;
    atomic_fetch_add(&fs->ops, 1);
    if (fs->cut_glob && (!path || fnmatch(fs->cut_glob, path, 0) != 0))
        return false;
    uint64_t n = atomic_fetch_add(&fs->matching, 1) + 1;
    if (fs->cut_at && n == fs->cut_at) {
        fs->cut = true;
        fuse_session_exit(fs->session);
    }
    return fs->cut;
}

static void fill_size(CutFs *fs, struct stat *st, const CachedFile *f)
{
    if (!f && S_ISREG(st->st_mode))
        f = pagecache_find(fs->cache, st->st_ino);
    if (f) {
        st->st_size = cachedfile_size(f);
        st->st_blocks = (st->st_size + 511) / 512;
    }
}

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    CutFs *fs = fs_of();
    if (fi && fi->fh) {
        if (fstat(cachedfile_fd(file_of(fi)), st) != 0)
            return -errno;
        fill_size(fs, st, file_of(fi));
        return 0;
    }
    if (!path)
        return -ESTALE;
    if (fstatat(fs->root_fd, rel(path), st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    fill_size(fs, st, NULL);
    return 0;
}

static int op_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags)
{
    (void)off, (void)fi, (void)flags;
    int fd = openat(fs_of()->root_fd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return -e;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (fill(buf, de->d_name, NULL, 0, 0))
            break;
    closedir(d);
    return 0;
}

static int op_open(const char *path, struct fuse_file_info *fi)
{
    CutFs *fs = fs_of();
    CachedFile *f;
    int rc = pagecache_open(fs->cache, fs->root_fd, rel(path), &f);
    if (rc)
        return rc;
    if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY) {
        if (power_fails(fs, path)) {
            pagecache_close(fs->cache, f);
            return -EIO;
        }
        cachedfile_truncate(f, 0);
    }
    fi->fh = (uintptr_t)f;
    return 0;
}

static int op_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    bool existed = faccessat(fs->root_fd, rel(path), F_OK, AT_SYMLINK_NOFOLLOW) == 0;
    int fd = openat(fs->root_fd, rel(path), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW | (fi->flags & O_EXCL), mode);
    if (fd < 0)
        return -errno;
    int rc = existed ? 0 : undolog_created(fs->undo, path);
    CachedFile *f = NULL;
    if (rc == 0)
        rc = pagecache_adopt(fs->cache, fd, &f);
    else
        close(fd);
    if (rc == 0 && existed && (fi->flags & O_TRUNC))
        cachedfile_truncate(f, 0);
    if (rc)
        return rc;
    fi->fh = (uintptr_t)f;
    return 0;
}

static int op_read(const char *path, char *buf, size_t n, off_t off, struct fuse_file_info *fi)
{
    (void)path;
    return (int)cachedfile_read(file_of(fi), buf, n, off);
}

static int op_write(const char *path, const char *buf, size_t n, off_t off, struct fuse_file_info *fi)
{
    if (power_fails(fs_of(), path))
        return -EIO;
    return (int)cachedfile_write(file_of(fi), buf, n, off);
}

static int op_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    pagecache_close(fs_of()->cache, file_of(fi));
    return 0;
}

static void trace_sync(CutFs *fs, const char *path)
{
    if (fs->trace_syncs)
        fprintf(stderr, "cutfs: sync at op %llu %s\n", (unsigned long long)atomic_load(&fs->ops), path ? path : "-");
}

static int op_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)datasync; /* the size is data here: fdatasync keeps it too */
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    fs->syncs++;
    trace_sync(fs, path);
    return cachedfile_sync(file_of(fi));
}

static int op_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)datasync, (void)fi;
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    fs->syncs++;
    trace_sync(fs, path);
    if (path) /* NULL: the directory was removed meanwhile */
        undolog_dir_synced(fs->undo, path);
    return 0;
}

static int op_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    if (fi && fi->fh)
        return cachedfile_truncate(file_of(fi), size);
    CachedFile *f;
    int rc = pagecache_open(fs->cache, fs->root_fd, rel(path), &f);
    if (rc)
        return rc;
    rc = cachedfile_truncate(f, size);
    pagecache_close(fs->cache, f);
    return rc;
}

static int op_mkdir(const char *path, mode_t mode)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    if (mkdirat(fs->root_fd, rel(path), mode) != 0)
        return -errno;
    return undolog_created(fs->undo, path);
}

static int op_unlink(const char *path)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    struct stat st;
    if (fstatat(fs->root_fd, rel(path), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    int rc = undolog_unlink(fs->undo, path);
    if (rc == 0)
        pagecache_gone(fs->cache, st.st_ino);
    return rc;
}

static int op_rmdir(const char *path)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    return undolog_rmdir(fs->undo, path);
}

static int op_rename(const char *from, const char *to, unsigned int flags)
{
    CutFs *fs = fs_of();
    if (flags & ~(unsigned)RENAME_NOREPLACE)
        return -EINVAL; /* RENAME_EXCHANGE is not modelled */
    if (power_fails(fs, from))
        return -EIO;
    struct stat st;
    bool replaces = fstatat(fs->root_fd, rel(to), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    int rc = undolog_rename(fs->undo, from, to, flags & RENAME_NOREPLACE);
    if (rc == 0 && replaces)
        pagecache_gone(fs->cache, st.st_ino);
    return rc;
}

static int op_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    int rc = fi && fi->fh ? fchmod(cachedfile_fd(file_of(fi)), mode) : fchmodat(fs->root_fd, rel(path), mode, 0);
    return rc ? -errno : 0;
}

static int op_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    int rc = fi && fi->fh ? fchown(cachedfile_fd(file_of(fi)), uid, gid)
                          : fchownat(fs->root_fd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW);
    return rc ? -errno : 0;
}

static int op_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
    CutFs *fs = fs_of();
    if (power_fails(fs, path))
        return -EIO;
    int rc = fi && fi->fh ? futimens(cachedfile_fd(file_of(fi)), tv)
                          : utimensat(fs->root_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW);
    return rc ? -errno : 0;
}

static int op_statfs(const char *path, struct statvfs *st)
{
    (void)path;
    return fstatvfs(fs_of()->root_fd, st) ? -errno : 0;
}

static int op_access(const char *path, int mask)
{
    return faccessat(fs_of()->root_fd, rel(path), mask, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
}

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    (void)conn;
    /* Every operation gets its path (--cut-only matches it, fsyncdir needs
     * it). A file removed while open is renamed .fuse_hiddenN by libfuse (an
     * undoable rename here) and removed at its last close: so fstat(2) of it
     * still works, which hard_remove would break (ESTALE). */
    cfg->hard_remove = 0;
    cfg->nullpath_ok = 0;
    return fs_of();
}

static const struct fuse_operations OPS = {
    .getattr = op_getattr,
    .readdir = op_readdir,
    .open = op_open,
    .create = op_create,
    .read = op_read,
    .write = op_write,
    .release = op_release,
    .fsync = op_fsync,
    .fsyncdir = op_fsyncdir,
    .truncate = op_truncate,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .chmod = op_chmod,
    .chown = op_chown,
    .utimens = op_utimens,
    .statfs = op_statfs,
    .access = op_access,
    .init = op_init,
};

/* Writes "cutfs: ops N matching M\n" with write(2) only (a signal handler's). */
static void say_ops(void)
{
    char line[96];
    size_t n = 0;
    const char *parts[] = {"cutfs: ops ", NULL, " matching ", NULL, "\n"};
    uint64_t values[] = {0, atomic_load(&signal_fs->ops), 0, atomic_load(&signal_fs->matching), 0};
    for (int p = 0; p < 5; p++) {
        if (parts[p]) {
            size_t len = strlen(parts[p]);
            memcpy(line + n, parts[p], len);
            n += len;
            continue;
        }
        char digits[24];
        int d = 0;
        uint64_t v = values[p];
        do
            digits[d++] = (char)('0' + v % 10);
        while ((v /= 10) && d < (int)sizeof digits);
        while (d > 0)
            line[n++] = digits[--d];
    }
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

static void on_signal(int sig)
{
    if (sig == SIGUSR2) {
        say_ops();
        return;
    }
    cut_signalled = 1;
    fuse_session_exit(signal_fs->session);
}

/* Without SA_RESTART: the read of /dev/fuse returns, and the loop sees the exit. */
static int catch_signal(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT ? -1 : 0;
}

/* DISK/root (created when missing) and an empty DISK/trash, opened: 0 or -1 (said on stderr). */
static int open_disk(CutFs *fs, const char *disk)
{
    char root[4096], trash[4096];
    if (snprintf(root, sizeof root, "%s/root", disk) >= (int)sizeof root ||
        snprintf(trash, sizeof trash, "%s/trash", disk) >= (int)sizeof trash) {
        fprintf(stderr, "cutfs: %s: path too long\n", disk);
        return -1;
    }
    if ((mkdir(root, 0755) != 0 && errno != EEXIST) ||
        (nftw(trash, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) || mkdir(trash, 0700) != 0) {
        fprintf(stderr, "cutfs: cannot prepare %s: %s\n", disk, strerror(errno));
        return -1;
    }
    fs->root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    fs->trash_fd = open(trash, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fs->root_fd < 0 || fs->trash_fd < 0) {
        fprintf(stderr, "cutfs: cannot open %s: %s\n", disk, strerror(errno));
        return -1;
    }
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: cutfs [--cut-at N [--cut-only GLOB]] [--torn SEED] [--trace-syncs] DISK MOUNTPOINT\n");
    return 2;
}

/* What happened, on stderr: the test reads this line. */
static void report(CutFs *fs, size_t dirty_files, size_t dirty_pages, long spilled, size_t undone,
                   size_t undo_failed, int sync_rc)
{
    if (fs->cut)
        fprintf(stderr,
                "cutfs: power cut after %llu operations (%llu matching, %llu syncs): dropped %zu unsynced pages of "
                "%zu files (%ld sectors of them written), took back %zu names%s\n",
                (unsigned long long)atomic_load(&fs->ops), (unsigned long long)atomic_load(&fs->matching),
                (unsigned long long)fs->syncs, dirty_pages, dirty_files, spilled, undone,
                undo_failed || spilled < 0 ? " (some of it failed: see the disk)" : "");
    else
        fprintf(stderr, "cutfs: unmounted cleanly after %llu operations (%llu syncs)%s\n",
                (unsigned long long)atomic_load(&fs->ops), (unsigned long long)fs->syncs,
                sync_rc ? ": the last sync failed" : "");
}

/* The options into fs, the two paths into *disk and *mnt: 0, or -1 when the command line is wrong. */
static int parse_args(int argc, char **argv, CutFs *fs, const char **disk, const char **mnt)
{
    int i = 1;
    for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--cut-at") && i + 1 < argc) {
            fs->cut_at = strtoull(argv[++i], &end, 10);
            if (*end || fs->cut_at == 0)
                return -1;
        } else if (!strcmp(argv[i], "--cut-only") && i + 1 < argc) {
            fs->cut_glob = argv[++i];
        } else if (!strcmp(argv[i], "--trace-syncs")) {
            fs->trace_syncs = true;
        } else if (!strcmp(argv[i], "--torn") && i + 1 < argc) {
            fs->torn = true;
            fs->torn_seed = strtoull(argv[++i], &end, 10);
            if (*end)
                return -1;
        } else {
            return -1;
        }
    }
    if (argc - i != 2)
        return -1;
    *disk = argv[i];
    *mnt = argv[i + 1];
    return 0;
}

int main(int argc, char **argv)
{
    CutFs fs = {.root_fd = -1, .trash_fd = -1};
    const char *disk, *mnt;
    if (parse_args(argc, argv, &fs, &disk, &mnt))
        return usage();
    if (open_disk(&fs, disk) || !(fs.cache = pagecache_new()) || !(fs.undo = undolog_new(fs.root_fd, fs.trash_fd))) {
        if (!fs.cache || !fs.undo)
            fprintf(stderr, "cutfs: out of memory\n");
        return 1;
    }
    char *fargv[] = {argv[0], "-o", "default_permissions,fsname=cutfs,subtype=cutfs", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    struct fuse *f = fuse_new(&args, &OPS, sizeof OPS, &fs);
    if (!f) {
        fprintf(stderr, "cutfs: fuse_new failed\n");
        return 1;
    }
    if (fuse_mount(f, mnt) != 0) {
        fprintf(stderr, "cutfs: cannot mount on %s (FUSE needs /dev/fuse, and root or fusermount3)\n", mnt);
        fuse_destroy(f);
        return 1;
    }
    fs.session = fuse_get_session(f);
    signal_fs = &fs;
    if (fuse_set_signal_handlers(fs.session) != 0 || catch_signal(SIGUSR1) || catch_signal(SIGUSR2)) {
        fprintf(stderr, "cutfs: cannot set signal handlers\n");
        fuse_unmount(f);
        fuse_destroy(f);
        return 1;
    }
    printf("cutfs: mounted %s/root on %s\n", disk, mnt);
    fflush(stdout);
    int loop_rc = fuse_loop(f);
    /* The session goes away below: no handler may reach it any more. */
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    if (cut_signalled)
        fs.cut = true;
    size_t dirty_files, dirty_pages, undone = 0, undo_failed = 0;
    pagecache_dirty(fs.cache, &dirty_files, &dirty_pages);
    int sync_rc = 0;
    long spilled = 0;
    if (fs.cut && fs.torn)
        spilled = pagecache_spill(fs.cache, fs.torn_seed);
    if (fs.cut)
        undone = undolog_undo_all(fs.undo, &undo_failed);
    else
        sync_rc = pagecache_sync_all(fs.cache);
    fuse_remove_signal_handlers(fs.session);
    fuse_unmount(f);
    fuse_destroy(f);
    report(&fs, dirty_files, dirty_pages, spilled, undone, undo_failed, sync_rc);
    pagecache_free(fs.cache);
    undolog_free(fs.undo);
    close(fs.root_fd);
    close(fs.trash_fd);
    return fs.cut ? 0 : loop_rc != 0 || sync_rc != 0;
}
