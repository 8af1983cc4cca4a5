/* Unit tests of clock_now against a scripted clock: clock_gettime is defined
 * here, so clock.c (linked in from lgcore) reads this one instead of the
 * kernel's. Time passes only when the script says so. */
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "core/clock.h"
#include "core/locktab.h"

/* The true boot clock (ns) and the wall clock, a fixed distance ahead. */
#define WALL_AHEAD_NS ((int64_t)1700000000 * 1000000000 + 123456789)
static int64_t boot_ns;
static long reads;
/* Called after each reading (its index, 0 the first of the clock_now call
 * under test): how long the thread is held before it goes on, in ns. */
static int64_t (*stall)(long read);

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int64_t t = id == CLOCK_REALTIME ? boot_ns + WALL_AHEAD_NS : boot_ns;
    ts->tv_sec = (time_t)(t / 1000000000);
    ts->tv_nsec = (long)(t % 1000000000);
    boot_ns += 20 + (stall ? stall(reads) : 0); /* a reading itself takes 20 ns */
    reads++;
    return 0;
}

/* What LOCKTAB_DEADLINE_SLACK_MS relies on (locktab.h): a Now's wall clock
 * is at most SLACK - 1 ms ahead of where its boot clock puts it. Then a
 * lease granted or renewed with this Now ends (boot clock at mono_ms + ttl +
 * SLACK) with the wall clock at or past wall_ms + ttl + 1 > expires_at_ms,
 * and a Now that ends it reads a wall clock >= expires_at_ms. How far ahead,
 * in ns: */
static int64_t ahead_ns(Now n) { return n.wall_ms * 1000000 - (n.mono_ms * 1000000 + WALL_AHEAD_NS); }
#define AHEAD_MAX_NS ((int64_t)(LOCKTAB_DEADLINE_SLACK_MS - 1) * 1000000)

static Now now_with(int64_t (*fn)(long))
{
    boot_ns = (int64_t)5000 * 1000000000 + 999000; /* 0.999 ms into a millisecond */
    reads = 0;
    stall = fn;
    Now n = clock_now();
    stall = NULL;
    return n;
}

static int64_t never(long read)
{
    (void)read;
    return 0;
}

/* Each try is held between its boot reading and its wall reading: the first
 * a little too long (60 us), every later one 5 ms (a busy machine). */
static int64_t held_in_every_try(long read)
{
    if (read % 3 != 0)
        return 0;
    return read == 0 ? 60000 : 5000000;
}

static void test_undisturbed(void)
{
    Now n = now_with(never);
    CHECK(reads == 3);
    CHECK(n.mono_ms == 5000000);
    CHECK(ahead_ns(n) <= AHEAD_MAX_NS);
}

/* No try is within CLOCK_PAIR_MAX_GAP_NS: the Now must still be the pair read
 * closest together (60 us apart, well within what the slack covers), not
 * whichever came last (5 ms apart: a lease would end 4 ms before the
 * expires_at_ms it was announced with). */
static void test_every_try_held(void)
{
    Now n = now_with(held_in_every_try);
    CHECK(reads > 3 && reads <= 3 * 101);
    CHECK(ahead_ns(n) <= AHEAD_MAX_NS);
    if (ahead_ns(n) > AHEAD_MAX_NS)
        fprintf(stderr, "  the wall clock is %lld ns ahead of the boot clock it was paired with\n",
                (long long)ahead_ns(n));
}

int main(void)
{
    test_undisturbed();
    test_every_try_held();
    return check_report("clock");
}
