/* monoms — the monotonic clock in milliseconds, for the unit tests that bound
 * how long a call may take (generously: CPU is contended in CI). */
#ifndef LEASEGATE_TEST_MONOMS_H
#define LEASEGATE_TEST_MONOMS_H

#include <stdint.h>
#include <time.h>

static inline int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

#endif
