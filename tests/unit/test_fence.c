/* Unit tests of fence marks: equal accepted, lower rejected, marks only grow and
 * are applied only by fence_raise, limits, idle forgetting into floors. */
#include <string.h>

#include "check.h"
#include "core/fence.h"

static int forgotten;
static char last_forgotten[32];
static uint32_t last_bucket;
static uint64_t last_floor;

static void on_forgotten(void *ud, const char *resource, uint32_t bucket, uint64_t floor, const Charge *charge)
{
    (void)ud;
    (void)charge;
    forgotten++;
    snprintf(last_forgotten, sizeof last_forgotten, "%s", resource);
    last_bucket = bucket;
    last_floor = floor;
}

/* check + raise, as a caller that records the change between them does. */
static FenceResult accept(Fence *f, const char *r, uint64_t token, const Now *now, uint64_t *max)
{
    FenceResult res = fence_check(f, r, token, now, max);
    if (res == FENCE_ACCEPTED)
        fence_raise(f, r, token);
    return res;
}

/* Tokens in headers and S3 access keys: digits only, 1..2^63-1. */
static void test_parse_token(void)
{
    uint64_t t = 7;
    CHECK(fence_parse_token("1", &t) && t == 1);
    CHECK(fence_parse_token("9223372036854775807", &t) && t == 9223372036854775807ULL);
    t = 7;
    CHECK(!fence_parse_token("9223372036854775808", &t) && t == 7);
    CHECK(!fence_parse_token("18446744073709551616", &t));
    CHECK(!fence_parse_token("0", &t));
    CHECK(!fence_parse_token("", &t));
    CHECK(!fence_parse_token(NULL, &t));
    CHECK(!fence_parse_token("+5", &t));
    CHECK(!fence_parse_token(" 5", &t));
    CHECK(!fence_parse_token("-5", &t));
    CHECK(!fence_parse_token("5 ", &t));
    CHECK(!fence_parse_token("5x", &t));
    CHECK(t == 7);
}

int main(void)
{
    test_parse_token();
    Now now = {1000, 1700000000000};
    Fence *f = fence_new(2, 0, NULL);
    uint64_t max;
    CHECK(accept(f, "a", 5, &now, &max) == FENCE_ACCEPTED && fence_max(f, "a") == 5);
    CHECK(accept(f, "a", 5, &now, &max) == FENCE_ACCEPTED && max == 5);
    CHECK(accept(f, "a", 4, &now, &max) == FENCE_STALE && max == 5);
    /* A check alone changes no mark: only raise does, after the caller recorded it. */
    CHECK(fence_check(f, "a", 9, &now, &max) == FENCE_ACCEPTED && max == 5 && fence_max(f, "a") == 5);
    fence_raise(f, "a", 9);
    CHECK(fence_max(f, "a") == 9);
    fence_raise(f, "a", 7); /* never backwards */
    CHECK(fence_max(f, "a") == 9);
    CHECK(accept(f, "b", 1, &now, &max) == FENCE_ACCEPTED && fence_max(f, "b") == 1);
    CHECK(accept(f, "c", 1, &now, &max) == FENCE_OVERLOADED);
    CHECK(fence_load(f, "a", 3, &now) == FENCE_ACCEPTED);
    CHECK(accept(f, "a", 8, &now, &max) == FENCE_STALE && max == 9);
    CHECK(fence_count(f) == 2);
    CHECK(fence_next_timeout_ms(f, &now) == -1);
    fence_free(f);

    /* Forgetting: idle resources go, their marks live on as floors. */
    FenceHooks hooks = {NULL, on_forgotten};
    f = fence_new(100, 5000, &hooks);
    CHECK(accept(f, "old", 40, &now, &max) == FENCE_ACCEPTED);
    Now later = {now.mono_ms + 3000, now.wall_ms + 3000};
    CHECK(accept(f, "busy", 50, &later, &max) == FENCE_ACCEPTED);
    CHECK(fence_next_timeout_ms(f, &now) == 5000);
    Now t1 = {now.mono_ms + 5000, now.wall_ms + 5000};
    fence_tick(f, &t1);
    CHECK(forgotten == 1 && strcmp(last_forgotten, "old") == 0 && last_floor == 40);
    CHECK(last_bucket == fence_bucket("old"));
    CHECK(fence_count(f) == 1);
    /* A stale token for the forgotten resource is still refused. */
    CHECK(accept(f, "old", 39, &t1, &max) == FENCE_STALE && max == 40);
    CHECK(fence_count(f) == 1); /* a refused check creates nothing */
    CHECK(accept(f, "old", 41, &t1, &max) == FENCE_ACCEPTED && fence_max(f, "old") == 41);
    /* Checks keep a resource: "busy" was checked at +3 s, so it lives until +8 s. */
    Now t2 = {now.mono_ms + 7999, now.wall_ms + 7999};
    fence_tick(f, &t2);
    CHECK(forgotten == 1);
    fence_free(f);

    /* Floors come back from storage. */
    f = fence_new(100, 5000, &hooks);
    fence_load_floor(f, fence_bucket("old"), 40);
    CHECK(fence_max(f, "old") == 40);
    CHECK(accept(f, "old", 12, &now, &max) == FENCE_STALE && max == 40);
    fence_free(f);
    return check_report("fence");
}
