/*
 * fence — per-resource high-water marks of fencing tokens.
 *
 * A backend asks whether a token may write to a resource: it may when the token
 * is >= the highest token seen for that resource, which then becomes the new
 * mark. Marks only grow. The caller makes a raised mark durable before it
 * reveals the answer.
 */
#ifndef LEASEGATE_FENCE_H
#define LEASEGATE_FENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum FenceResult {
    FENCE_ACCEPTED,
    FENCE_STALE,
    FENCE_OVERLOADED, /* too many resources */
    FENCE_NOMEM,
} FenceResult;

typedef struct Fence Fence;

Fence *fence_new(size_t max_resources); /* NULL on allocation failure */
void fence_free(Fence *f);
/* Start-up: sets a stored mark (the limit on resources applies to new ones only). */
FenceResult fence_load(Fence *f, const char *resource, uint64_t max_token);
/* *max_token is the mark after the check; *raised says whether it moved. */
FenceResult fence_check(Fence *f, const char *resource, uint64_t token, uint64_t *max_token,
                        bool *raised);
size_t fence_count(const Fence *f);
/* Drops a resource's mark (its owner, e.g. a forgotten lock, is gone). */
void fence_remove(Fence *f, const char *resource);
/* The mark of a resource, 0 when it has none. */
uint64_t fence_max(const Fence *f, const char *resource);

#endif
