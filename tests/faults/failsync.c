/*
 * failsync — a disk that refuses to sync one file, as an LD_PRELOAD library:
 * fsync and fdatasync of a descriptor whose path matches FAILSYNC_GLOB
 * (fnmatch(3), `*` matching `/` too) fail with EIO, and each failure is
 * counted by appending a line to FAILSYNC_LOG (if set). Every other
 * descriptor syncs as usual. With FAILSYNC_GLOB='*.db' under SQLite's WAL mode,
 * only checkpoints sync the database file: every checkpoint fails, every
 * commit (a sync of the -wal file) succeeds. With FAILSYNC_IF=PATH, only while
 * PATH exists.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* True when fd's file is one this library must refuse to sync. */
static int refused(int fd)
{
    const char *glob = getenv("FAILSYNC_GLOB");
    const char *only_if = getenv("FAILSYNC_IF");
    if (!glob || (only_if && access(only_if, F_OK) != 0))
        return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0)
        return 0;
    path[n] = '\0';
    if (fnmatch(glob, path, 0) != 0)
        return 0;
    const char *log = getenv("FAILSYNC_LOG");
    int lfd = log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (lfd >= 0) {
        char line[4200];
        int len = snprintf(line, sizeof line, "failsync: EIO for %s\n", path);
        if (len > 0 && write(lfd, line, (size_t)len) < 0)
            len = 0;
        close(lfd);
    }
    return 1;
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (refused(fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (refused(fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}
