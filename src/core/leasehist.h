/*
 * leasehist — a bounded memory of leases that have ended and how.
 *
 * It lets renew and release tell a client why its lease no longer holds a lock
 * ("expired" versus "released" versus a lease the server never issued). It
 * remembers the most recent `capacity` ended leases; older ones are forgotten
 * (and reported as unknown). Lease ids are random, so their first bytes hash well.
 * Every entry gets the next sequence number, so that a durable copy can be
 * pruned to the newest `capacity` and replayed in order at start-up.
 */
#ifndef LEASEGATE_LEASEHIST_H
#define LEASEGATE_LEASEHIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a lease ended; stored (the lease history's "how"), so numbered for good. */
typedef enum LeaseEnd {
    LEASE_END_EXPIRED = 1,
    LEASE_END_RELEASED = 2,
    LEASE_END_REVOKED = 3, /* force-released by an admin */
} LeaseEnd;

typedef struct LeaseHist LeaseHist;

LeaseHist *leasehist_new(size_t capacity); /* NULL on allocation failure */
void leasehist_free(LeaseHist *h);
/* Records that lease `id` of the lock with identity `lock_id` ended; returns
 * the entry's sequence number. */
uint64_t leasehist_add(LeaseHist *h, const uint8_t id[16], uint64_t lock_id, uint64_t token, LeaseEnd how);
/* Start-up, first: numbers given from now on are above seq. */
void leasehist_continue_after(LeaseHist *h, uint64_t seq);
/* Start-up: the stored entries, oldest first. */
void leasehist_load(LeaseHist *h, const uint8_t id[16], uint64_t lock_id, uint64_t token, LeaseEnd how,
                    uint64_t seq);
/* True when `id` is remembered; fills lock_id, token and how. */
bool leasehist_find(const LeaseHist *h, const uint8_t id[16], uint64_t *lock_id, uint64_t *token,
                    LeaseEnd *how);

#endif
