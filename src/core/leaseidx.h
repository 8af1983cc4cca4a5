/*
 * leaseidx — the running leases of the lock table by lease id: a chained
 * hash, so that renew, release, reentry and the guard's checks find a lease
 * in O(1) however many holders its lock has (a lock with 16,000 readers was
 * scanned holder by holder for every renewal, a wrong lease's included).
 *
 * Intrusive: each entry lives in what it indexes (locktab's Grant) and
 * points at its lease id there. Lease ids are 128 random bits, so their first
 * bytes hash well; two entries may still have the same id (nothing here
 * forbids it), so a caller walks the chain of an id and picks its own.
 * Adding never fails: the buckets double as entries come and halve as they
 * go when memory allows, and a table that could not grow only has longer
 * chains. No HTTP, JSON or SQL; one thread.
 */
#ifndef LEASEGATE_LEASEIDX_H
#define LEASEGATE_LEASEIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct LeaseIdxEntry {
    struct LeaseIdxEntry *next; /* in its chain */
    const uint8_t *lease;       /* 16 bytes, in the indexed object: valid while indexed */
} LeaseIdxEntry;

typedef struct LeaseIdx {
    LeaseIdxEntry **buckets;
    size_t mask; /* buckets - 1, a power of two minus one */
    size_t len;
} LeaseIdx;

/* False when out of memory (nothing to clear then). */
bool leaseidx_init(LeaseIdx *x);
/* Frees the buckets; the entries are their owners'. */
void leaseidx_clear(LeaseIdx *x);
/* e (not indexed yet) is found by `lease` (16 bytes that outlive the entry) from now on. */
void leaseidx_add(LeaseIdx *x, LeaseIdxEntry *e, const uint8_t *lease);
/* e (indexed) is found no more. */
void leaseidx_remove(LeaseIdx *x, LeaseIdxEntry *e);
/* The first entry of the chain `lease` is in (follow ->next, compare ->lease), or NULL. */
LeaseIdxEntry *leaseidx_chain(const LeaseIdx *x, const uint8_t *lease);

#endif
