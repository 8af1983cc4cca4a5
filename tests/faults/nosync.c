/*
 * nosync — a planted bug for the power-loss test, as an LD_PRELOAD library:
 * fsync and fdatasync return success without syncing anything, as a disk
 * that lies about its cache would. Whatever the process believes durable is
 * still only in cutfs's memory at the power cut (tests/powerloss), so the
 * test must find acknowledged changes lost; if it does not, it proves nothing.
 */
#include <unistd.h>

int fsync(int fd)
{
    (void)fd;
    return 0;
}

int fdatasync(int fd)
{
    (void)fd;
    return 0;
}
