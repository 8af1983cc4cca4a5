/* clock — the boot clock and Unix time in milliseconds; see clock.h. */
#include "core/clock.h"

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
 * those are close enough: then the wall reading is within the gap of both.
 * When no try is (the thread held between the readings every time), the
 * pair read closest together, not the last one: the last may be any
 * distance apart, and a Now whose wall clock is ahead of its boot clock by
 * a millisecond or more lets a lease end before its announced expiry
 * (locktab.h, LOCKTAB_DEADLINE_SLACK_MS). */
Now clock_now(void)
{
    int64_t boot = 0, wall = 0, best = INT64_MAX;
    for (int i = 0; i < PAIR_TRIES && best > CLOCK_PAIR_MAX_GAP_NS; i++) {
        int64_t b = read_ns(CLOCK_BOOTTIME);
        int64_t w = read_ns(CLOCK_REALTIME);
        int64_t gap = read_ns(CLOCK_BOOTTIME) - b;
        if (gap < best) {
            best = gap;
            boot = b;
            wall = w;
        }
    }
    /* Unix time is never before 1970 here, so division rounds down. */
    Now now = {boot / 1000000, wall / 1000000};
    return now;
}

int64_t clock_boot_us(void) { return read_ns(CLOCK_BOOTTIME) / 1000; }

bool clock_boot_id(char out[CLOCK_BOOT_ID_LEN + 1])
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return false;
    bool ok = fgets(out, CLOCK_BOOT_ID_LEN + 1, f) && strlen(out) == CLOCK_BOOT_ID_LEN;
    fclose(f);
    return ok;
}
