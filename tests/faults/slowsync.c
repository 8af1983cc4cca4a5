/*
 * slowsync — a slow disk for tests, as an LD_PRELOAD library: every fsync and
 * fdatasync first sleeps SLOWSYNC_MS milliseconds (default 200), then syncs.
 * It widens the window between a change and its durability, so that tests can
 * do things (hang up, send SIGTERM) while an answer waits for its commit.
 * With SLOWSYNC_IF=PATH, only while PATH exists (so that start-up, which
 * syncs many times, is not slowed).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void slow(void)
{
    const char *only_if = getenv("SLOWSYNC_IF");
    if (only_if && access(only_if, F_OK) != 0)
        return;
    const char *env = getenv("SLOWSYNC_MS");
    long ms = env ? atol(env) : 200;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow();
    return real(fd);
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow();
    return real(fd);
}
