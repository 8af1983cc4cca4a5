/* Unit tests of fence marks: equal accepted, lower rejected, marks only grow, limits. */
#include "check.h"
#include "leasegate/fence.h"

int main(void)
{
    Fence *f = fence_new(2);
    uint64_t max;
    bool raised;
    CHECK(fence_check(f, "a", 5, &max, &raised) == FENCE_ACCEPTED && max == 5 && raised);
    CHECK(fence_check(f, "a", 5, &max, &raised) == FENCE_ACCEPTED && max == 5 && !raised);
    CHECK(fence_check(f, "a", 4, &max, &raised) == FENCE_STALE && max == 5 && !raised);
    CHECK(fence_check(f, "a", 9, &max, &raised) == FENCE_ACCEPTED && max == 9 && raised);
    CHECK(fence_check(f, "b", 1, &max, &raised) == FENCE_ACCEPTED && max == 1);
    CHECK(fence_check(f, "c", 1, &max, &raised) == FENCE_OVERLOADED);
    CHECK(fence_load(f, "a", 3) == FENCE_ACCEPTED);
    CHECK(fence_check(f, "a", 8, &max, &raised) == FENCE_STALE && max == 9);
    CHECK(fence_count(f) == 2);
    fence_free(f);
    return check_report("fence");
}
