/* clock — the boot clock and Unix time in milliseconds; see include/leasegate/clock.h. */
#include "leasegate/clock.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define PAIR_TRIES 100

static int64_t read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The wall clock read between two readings of the boot clock, again until
 * those are close enough: then the wall reading is within the gap of both. */
Now clock_now(void)
{
    int64_t boot, wall;
    for (int i = 0;; i++) {
        boot = read_ns(CLOCK_BOOTTIME);
        wall = read_ns(CLOCK_REALTIME);
        if (read_ns(CLOCK_BOOTTIME) - boot <= CLOCK_PAIR_MAX_GAP_NS || i == PAIR_TRIES)
            break;
    }
    /* Unix time is never before 1970 here, so division rounds down. */
    Now now = {boot / 1000000, wall / 1000000};
    return now;
}

bool clock_boot_id(char out[CLOCK_BOOT_ID_LEN + 1])
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return false;
    bool ok = fgets(out, CLOCK_BOOT_ID_LEN + 1, f) && strlen(out) == CLOCK_BOOT_ID_LEN;
    fclose(f);
    return ok;
}
