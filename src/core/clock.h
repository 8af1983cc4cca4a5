/*
 * clock — the two clocks the server reads.
 *
 * Deadlines are on the boot clock (CLOCK_BOOTTIME): it never steps, keeps
 * counting while the machine is suspended (clients elsewhere do), and is one
 * clock for every process of one boot, so a deadline saved before a restart
 * means the same instant after it (clock_boot_id tells which boot). Every
 * expiry is decided on it. Times on the wire are Unix milliseconds, for
 * people and clients; they are announcements, never the rule. The core never
 * reads a clock itself: callers pass a Now, which lets unit tests drive time.
 */
#ifndef LEASEGATE_CLOCK_H
#define LEASEGATE_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct Now {
    int64_t mono_ms; /* CLOCK_BOOTTIME, rounded down */
    int64_t wall_ms; /* Unix time, rounded down */
} Now;

/* The two readings of a Now are taken at most this far apart (unless the
 * thread is preempted between them on every one of many tries; then they are
 * the pair of those tries read closest together): a
 * preemption between two plain readings would skew the pair by however long
 * it lasted, and a lease's announced times by as much (locktab.h,
 * LOCKTAB_DEADLINE_SLACK_MS). */
#define CLOCK_PAIR_MAX_GAP_NS 50000

Now clock_now(void);
/* The boot clock in microseconds, for durations finer than a Now's ms. */
int64_t clock_boot_us(void);

#define CLOCK_BOOT_ID_LEN 36
/* The kernel's id of this boot (a UUID), NUL-terminated in out; false when
 * the system does not say (deadlines then do not survive a restart). */
bool clock_boot_id(char out[CLOCK_BOOT_ID_LEN + 1]);

#endif
