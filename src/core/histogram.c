/* histogram — fixed-bound histograms; see histogram.h. */
#include "core/histogram.h"

#include <assert.h>
#include <string.h>

void histogram_init(Histogram *h, const double *bounds, size_t n)
{
    assert(n <= HISTOGRAM_MAX_BOUNDS);
    for (size_t i = 1; i < n; i++)
        assert(bounds[i - 1] < bounds[i]);
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n = n;
}

void histogram_observe(Histogram *h, double v)
{
    if (v < 0)
        v = 0;
    /* Cumulative: every bucket whose bound is at or above v. */
    for (size_t i = h->n; i > 0 && v <= h->bounds[i - 1]; i--)
        h->le[i - 1]++;
    h->count++;
    h->sum += v;
}
