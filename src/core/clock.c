/* clock — the boot clock and Unix time in milliseconds; see include/leasegate/clock.h. */
#include "leasegate/clock.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int64_t read_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Now clock_now(void)
{
    Now now = {read_ms(CLOCK_BOOTTIME), read_ms(CLOCK_REALTIME)};
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
