/*
 * fence — per-resource high-water marks of fencing tokens.
 *
 * A token may write to a resource when it is >= the highest token accepted
 * for that resource, which then becomes the new mark. Marks only grow, and a
 * raised mark is revealed only once it is durable: the caller checks
 * (fence_check, which changes nothing visible), records the new mark for
 * commit, and only then applies it (fence_raise), holding its answer until the
 * commit is durable.
 *
 * Resources that stay idle (no check) for forget_idle_ms are forgotten, so
 * names used once do not pile up; a forgotten mark is folded into one of
 * FENCE_FLOOR_BUCKETS floors (by a fixed hash of the name), and a resource
 * that is not known starts at its bucket's floor. So a mark never goes
 * backwards, also across forgetting: a stale token for a forgotten resource is
 * still refused. The price is that a new resource may refuse a token below
 * the floor of a resource that shares its bucket and was forgotten earlier:
 * only a lease held (renewed) for longer than forget_idle_ms can hold such a
 * token.
 */
#ifndef LEASEGATE_FENCE_H
#define LEASEGATE_FENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/share.h"

#define FENCE_FLOOR_BUCKETS 4096

/* A token as written in a header or a key: a decimal integer in 1..2^63-1,
 * digits only (no sign, space or leading '+'); false for anything else. */
bool fence_parse_token(const char *s, uint64_t *out);

typedef enum FenceResult {
    FENCE_ACCEPTED,
    FENCE_STALE,
    FENCE_OVERLOADED, /* too many resources */
    FENCE_NOMEM,
} FenceResult;

typedef struct FenceHooks {
    void *ud;
    /* `resource` (mark `max_token`) was idle too long and is about to go; the
     * floor of its bucket is now `floor`. The caller makes both durable. */
    void (*forgotten)(void *ud, const char *resource, uint32_t bucket, uint64_t floor, const Charge *charge);
} FenceHooks;

typedef struct Fence Fence;

/* forget_idle_ms 0: never forget (hooks may then be NULL). NULL on allocation failure. */
Fence *fence_new(size_t max_resources, int64_t forget_idle_ms, const FenceHooks *hooks);
void fence_free(Fence *f);
/* Start-up: a stored mark (the limit on resources applies to new ones only);
 * its idle time counts from now. */
FenceResult fence_load(Fence *f, const char *resource, uint64_t max_token, const Now *now);
void fence_load_floor(Fence *f, uint32_t bucket, uint64_t floor);
/* Would `token` be accepted? *max_token is the mark now. The resource counts
 * as used (its idle time restarts); an accepted new resource is created at
 * its floor, so that fence_raise cannot fail. Nothing visible changes. */
FenceResult fence_check(Fence *f, const char *resource, uint64_t token, const Now *now, uint64_t *max_token);
/* fence_check, and a resource it makes is counted against *charge (handed
 * back by hooks.forgotten). */
FenceResult fence_check_charged(Fence *f, const char *resource, uint64_t token, const Now *now, const Charge *charge,
                                uint64_t *max_token);
/* Is there a mark of its own for resource? */
bool fence_known(const Fence *f, const char *resource);
/* Sets the mark to `token`, which fence_check accepted just before (and the
 * caller has recorded for commit). */
void fence_raise(Fence *f, const char *resource, uint64_t token);
/* The mark of a resource: its own, else its bucket's floor. */
uint64_t fence_max(const Fence *f, const char *resource);
size_t fence_count(const Fence *f);
/* Drops a resource's mark (its owner, e.g. a forgotten lock, is gone). */
void fence_remove(Fence *f, const char *resource);
/* Forgets resources idle for forget_idle_ms (hooks.forgotten for each). */
void fence_tick(Fence *f, const Now *now);
int64_t fence_next_timeout_ms(const Fence *f, const Now *now); /* -1: none */
uint32_t fence_bucket(const char *resource);

#endif
