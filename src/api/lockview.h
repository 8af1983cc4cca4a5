/*
 * lockview — locks, semaphores and elections as every reader may see them,
 * never with a lease id: the JSON of GET /v1/locks/NAME, GET
 * /v1/semaphores/NAME and GET /v1/elections/NAME, their listings, and the
 * 409s of an acquire (or a campaign) that is not granted. Metadata and
 * values go in as raw references (rawjson.h).
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
/* An election as GET /v1/elections/NAME shows it (lock NULL: unknown, so
 * vacant): its leader {owner, term, value, since_ms} or null,
 * vacant_since_ms (null while led, or unknown), candidates_total,
 * last_token, index; with `candidates`, the first LOCKVIEW_HOLDERS_SHOWN
 * candidates {owner, since_ms} too. NULL when out of memory. */
json_t *lockview_election_new(const Locktab *lt, const char *name, const Lock *lock, bool candidates, RawRefs *refs);
/* An acquire that was not granted: 409 lock_held (who holds it, its mode,
 * how many wait, a lock-delay running), semaphore_full, or (a campaign)
 * not_leader with the leader and the candidates waiting. */
void lockview_reply_busy(Request *req, const Lock *lock);

#endif
