/* Unit tests of the fixed-bound histogram: cumulative buckets, the edges, the sum. */
#include "check.h"
#include "core/histogram.h"

static const double BOUNDS[] = {0.001, 0.01, 0.1, 1};

int main(void)
{
    Histogram h;
    histogram_init(&h, BOUNDS, 4);
    CHECK(h.count == 0 && h.sum == 0 && h.le[0] == 0 && h.le[3] == 0);
    histogram_observe(&h, 0);      /* into every bucket */
    histogram_observe(&h, 0.01);   /* a bound belongs to its own bucket (le) */
    histogram_observe(&h, 0.5);
    histogram_observe(&h, 7);      /* above every bound: only +Inf, i.e. count */
    histogram_observe(&h, -3);     /* a clock that stepped back counts as 0 */
    CHECK(h.le[0] == 2);
    CHECK(h.le[1] == 3);
    CHECK(h.le[2] == 3);
    CHECK(h.le[3] == 4);
    CHECK(h.count == 5);
    CHECK(h.sum > 7.5099 && h.sum < 7.5101);
    for (size_t i = 1; i < h.n; i++)
        CHECK(h.le[i - 1] <= h.le[i]);
    histogram_init(&h, BOUNDS, 4);
    CHECK(h.count == 0 && h.le[3] == 0 && h.bounds == BOUNDS && h.n == 4);
    return check_report("histogram");
}
