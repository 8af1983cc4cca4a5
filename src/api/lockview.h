/*
 * lockview — locks and semaphores as every reader may see them, never with
 * a lease id: the JSON of GET /v1/locks/NAME and GET /v1/semaphores/NAME,
 * their listings, and the 409s of an acquire that is not granted. Metadata
 * goes in as raw references (rawjson.h).
 */
#ifndef LEASEGATE_LOCKVIEW_H
#define LEASEGATE_LOCKVIEW_H

#include <jansson.h>
#include <stdbool.h>

#include "core/locktab.h"
#include "net/http.h"
#include "net/rawjson.h"

/* Holders listed by one view (`holders_total` counts them all). */
#define LOCKVIEW_HOLDERS_SHOWN 100

/* "write" or "read". */
const char *lockview_mode_name(int mode);
/* One holder: owner, token, times, count, metadata (and a lock's mode). */
json_t *lockview_holder_new(const Lock *lock, const Holder *h, RawRefs *refs);
/* The state of `name` (lock NULL: unknown, so free). With holders, the
 * first LOCKVIEW_HOLDERS_SHOWN holders in grant order too (a listing leaves
 * them out: its raw references would not fit). NULL when out of memory. */
json_t *lockview_state_new(const Locktab *lt, LockKind kind, const char *name, const Lock *lock, bool holders,
                           const Now *now, RawRefs *refs);
/* An acquire that was not granted: 409 lock_held (who holds it, its mode,
 * how many wait, a lock-delay running) or semaphore_full. */
void lockview_reply_busy(Request *req, const Lock *lock);

#endif
