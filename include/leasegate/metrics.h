/*
 * metrics — counters the HTTP layer keeps; rendered by GET /metrics together
 * with gauges read from the lock table and commit statistics.
 */
#ifndef LEASEGATE_METRICS_H
#define LEASEGATE_METRICS_H

#include <stdint.h>

#include "leasegate/share.h"

typedef struct Metrics {
    uint64_t requests;
    uint64_t responses[6];       /* by status class: [2] = 2xx ... [5] = 5xx */
    uint64_t grants;             /* fresh grants, immediate or after waiting */
    uint64_t reentries;
    uint64_t replays;            /* acquires answered with the grant of their request_id */
    uint64_t renewals;
    uint64_t releases;           /* release calls that succeeded */
    uint64_t force_releases;     /* leases an admin ended (DELETE /v1/locks/{name}) */
    uint64_t expiries;           /* leases ended by their TTL */
    uint64_t wait_timeouts;
    uint64_t waiter_disconnects;
    uint64_t undelivered_grants; /* grants released because the response failed */
    uint64_t not_holder;
    uint64_t fence_accepted;
    uint64_t fence_rejected;
    uint64_t guard_rejected_stale;
    uint64_t guard_rejected_missing;
    uint64_t share_refused[2][SHARE_KINDS]; /* 429s: [0] a key's share, [1] a peer's */
} Metrics;

#endif
