/* leaseidx — running leases by lease id; see leaseidx.h. */
#include "core/leaseidx.h"

#include <stdlib.h>
#include <string.h>

#define MIN_BUCKETS 64

static size_t bucket_of(size_t mask, const uint8_t *lease)
{
    uint64_t v;
    memcpy(&v, lease, sizeof v);
    return (size_t)((v * 0x9e3779b97f4a7c15ULL) >> 17) & mask; /* mixed: spread even if ids were not random */
}

bool leaseidx_init(LeaseIdx *x)
{
    x->buckets = calloc(MIN_BUCKETS, sizeof *x->buckets);
    x->mask = MIN_BUCKETS - 1;
    x->len = 0;
    return x->buckets != NULL;
}

void leaseidx_clear(LeaseIdx *x)
{
    free(x->buckets);
    memset(x, 0, sizeof *x);
}

/* Moves every entry into n buckets (a power of two); when that memory is not
 * to be had, the table stays as it is. */
static void resize(LeaseIdx *x, size_t n)
{
    LeaseIdxEntry **b = calloc(n, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i <= x->mask; i++)
        for (LeaseIdxEntry *e = x->buckets[i], *next; e; e = next) {
            next = e->next;
            size_t k = bucket_of(n - 1, e->lease);
            e->next = b[k];
            b[k] = e;
        }
    free(x->buckets);
    x->buckets = b;
    x->mask = n - 1;
}

void leaseidx_add(LeaseIdx *x, LeaseIdxEntry *e, const uint8_t *lease)
{
    if (x->len > x->mask && x->mask < SIZE_MAX / 4)
        resize(x, (x->mask + 1) * 2);
    e->lease = lease;
    size_t k = bucket_of(x->mask, lease);
    e->next = x->buckets[k];
    x->buckets[k] = e;
    x->len++;
}

void leaseidx_remove(LeaseIdx *x, LeaseIdxEntry *e)
{
    for (LeaseIdxEntry **p = &x->buckets[bucket_of(x->mask, e->lease)]; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            e->next = NULL;
            x->len--;
            break;
        }
    if (x->mask + 1 > MIN_BUCKETS && x->len < (x->mask + 1) / 8)
        resize(x, (x->mask + 1) / 2);
}

LeaseIdxEntry *leaseidx_chain(const LeaseIdx *x, const uint8_t *lease) { return x->buckets[bucket_of(x->mask, lease)]; }
