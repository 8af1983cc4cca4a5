/*
 * clock — the two clocks the server reads.
 *
 * Deadlines in memory use the monotonic clock (immune to wall-clock steps);
 * times on disk and on the wire are Unix milliseconds. The core never reads a
 * clock itself: callers pass a Now, which lets unit tests drive time.
 */
#ifndef LEASEGATE_CLOCK_H
#define LEASEGATE_CLOCK_H

#include <stdint.h>

typedef struct Now {
    int64_t mono_ms; /* CLOCK_MONOTONIC */
    int64_t wall_ms; /* Unix time */
} Now;

Now clock_now(void);

#endif
