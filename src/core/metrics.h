/*
 * metrics — counters and histograms the loop thread keeps; rendered by GET
 * /metrics together with gauges read from the lock table, commit statistics
 * and the process (/proc/self).
 */
#ifndef LEASEGATE_METRICS_H
#define LEASEGATE_METRICS_H

#include <stdint.h>

#include "core/histogram.h"
#include "core/share.h"

/* Why the guard refused a request (leasegate_guard_refused_total{reason}). */
typedef enum GuardRefusal {
    GUARD_REFUSED_STALE,         /* 409: the lease does not hold the lock, or a larger token went */
    GUARD_REFUSED_LEASE_MISSING, /* 428 */
    GUARD_REFUSED_METHOD,        /* 405: the route does not forward the method */
    GUARD_REFUSED_REQUEST,       /* 400: a path, header or framing the guard does not forward */
    GUARD_REFUSED_CALLS,         /* 503: --guard-max-calls */
    GUARD_REFUSED_LOCK_CALLS,    /* 503: --guard-lock-max-calls */
    GUARD_REFUSED_KEY_CALLS,     /* 429 key_limit: --guard-key-max-calls */
    GUARD_REFUSED_PEER_CALLS,    /* 429 peer_limit: --guard-peer-max-calls */
    GUARD_REFUSED_QUEUE_TIMEOUT, /* 503: waited --guard-timeout for its turn */
    GUARD_REFUSED_SETTLING,      /* 503: its lock settles (--guard-settle) */
    GUARD_REFUSED_ROUTE_CLOSED,  /* 503, 502: its S3 route's store is unreached or ignores preconditions */
    GUARD_REFUSED_COUNT
} GuardRefusal;

typedef struct Metrics {
    /* Unix ms at which these counters (and the lock table's) began at zero:
     * the start, or over etcd the moment this gateway took the lock space
     * over. A failover restarts them on the new leader, which says so here. */
    int64_t since_ms;
    uint64_t requests;
    uint64_t responses[6];       /* by status class: [2] = 2xx ... [5] = 5xx */
    uint64_t grants;             /* fresh grants, immediate or after waiting */
    uint64_t grants_of[4];       /* the same: [0] writers, [1] readers, [2] semaphores' leases, [3] leaders */
    uint64_t proclamations;      /* values proclaimed by elections' leaders */
    uint64_t reentries;
    uint64_t replays;            /* acquires answered with the grant of their request_id */
    uint64_t renewals;
    uint64_t releases;           /* release calls that succeeded */
    uint64_t force_releases;     /* leases an admin ended (DELETE /v1/locks/{name}) */
    uint64_t wait_timeouts;
    uint64_t waiter_disconnects;
    uint64_t undelivered_grants; /* grants released because the response failed */
    uint64_t not_holder;
    uint64_t value_writes;       /* locks' values written (PUT /v1/locks/NAME/value answered 200) */
    uint64_t value_replays;      /* value writes answered with the write of their request_id */
    uint64_t value_refused[3];   /* value writes refused: [0] stale_token, [1] version_mismatch,
                                  * [2] request_id_reused */
    uint64_t fence_accepted;
    uint64_t fence_rejected;
    uint64_t guard_rejected_stale;
    uint64_t guard_rejected_missing;
    uint64_t share_refused[2][SHARE_KINDS]; /* 429s: [0] a key's share, [1] a peer's */
    uint64_t guard_refused[GUARD_REFUSED_COUNT];
    /* Seconds from an acquire's arrival (its handler) to its grant, for every
     * fresh grant: 0 for one granted at once, the time queued for a waiter. */
    Histogram acquire_wait;
    /* Seconds a lease held its lock, from its grant (acquired_at_ms) to its
     * end, by how it ended: [LEASE_END_x - 1] (expired, released, revoked). */
    Histogram hold[3];
} Metrics;

#endif
