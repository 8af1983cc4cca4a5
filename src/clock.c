/* clock — reads CLOCK_MONOTONIC and CLOCK_REALTIME in milliseconds. */
#include "leasegate/clock.h"

#include <time.h>

static int64_t read_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Now clock_now(void)
{
    Now now = {read_ms(CLOCK_MONOTONIC), read_ms(CLOCK_REALTIME)};
    return now;
}
