/*
 * histogram — counts of observations under fixed upper bounds, kept as
 * Prometheus reads a histogram: cumulative per bound, a count and a sum.
 *
 * Invariants: bounds ascend; le[i] counts the observations <= bounds[i], so
 * le[] never decreases with i and le[n-1] <= count (the rest are above the
 * last bound: the +Inf bucket is count). Nothing here allocates: the bounds
 * are the caller's (static arrays), the counts are in the struct. One thread
 * owns a histogram.
 */
#ifndef LEASEGATE_HISTOGRAM_H
#define LEASEGATE_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#define HISTOGRAM_MAX_BOUNDS 20

typedef struct Histogram {
    const double *bounds; /* the caller's, ascending; n of them */
    size_t n;
    uint64_t le[HISTOGRAM_MAX_BOUNDS]; /* cumulative: observations <= bounds[i] */
    uint64_t count;
    double sum;
} Histogram;

/* Empties h and gives it n (<= HISTOGRAM_MAX_BOUNDS) ascending bounds. */
void histogram_init(Histogram *h, const double *bounds, size_t n);
/* Counts one observation; a negative one counts as 0 (clocks only move on). */
void histogram_observe(Histogram *h, double v);

#endif
