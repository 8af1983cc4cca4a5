/*
 * revoked — the tokens of leases an admin force-released. A backend that asks
 * POST /v1/fence with one is refused whatever the resource's mark, because
 * the holder was told nothing and may still be writing: a token that only
 * lost its lock by force must not pass where the next holder's has not been
 * seen yet. Kept for ever (storage keeps them too), at most REVOKED_MAX.
 */
#ifndef LEASEGATE_REVOKED_H
#define LEASEGATE_REVOKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REVOKED_MAX 1000000

typedef struct Revoked Revoked;

Revoked *revoked_new(void); /* NULL when out of memory */
void revoked_free(Revoked *r);
/* false when out of memory or full (REVOKED_MAX). Adding twice is fine. */
bool revoked_add(Revoked *r, uint64_t token);
bool revoked_has(const Revoked *r, uint64_t token);
size_t revoked_count(const Revoked *r);

#endif
