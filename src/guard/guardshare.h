/*
 * guardshare — the guard's upstream calls counted per API key, per peer
 * address and per route, so that one client cannot take every call slot
 * (--guard-max-calls) and make the guard refuse everyone else, and one slow
 * backend, whose calls pile up until --guard-timeout, cannot take them from
 * the other routes. A call holds a ticket from the
 * moment it is admitted until it is over (for a write whose end reached the
 * upstream: until the upstream answers, even after its client left).
 */
#ifndef LEASEGATE_GUARDSHARE_H
#define LEASEGATE_GUARDSHARE_H

#include <stddef.h>

#include "leasegate/request.h" /* GuardTicket, a part of a request */

typedef struct GuardShares GuardShares;

typedef enum ShareResult { SHARE_OK, SHARE_KEY_FULL, SHARE_PEER_FULL, SHARE_ROUTE_FULL, SHARE_NOMEM } ShareResult;

GuardShares *guardshare_new(void); /* NULL when out of memory */
void guardshare_free(GuardShares *g);
/* Counts one call of `key` (NULL: requests without a key are not counted per
 * key) from `peer` through `route` (its prefix) into *t, unless one of them
 * already has its max calls. */
ShareResult guardshare_take(GuardShares *g, const char *key, size_t key_max, const char *peer, size_t peer_max,
                            const char *route, size_t route_max, GuardTicket *t);
/* Gives back what *t holds (nothing when empty) and empties it. */
void guardshare_give(GuardTicket *t);

#endif
