/*
 * listing — a page of the names of one kind, in name order: GET /v1/locks,
 * GET /v1/semaphores and GET /v1/elections. The query (prefix, after, limit),
 * the caller's right to list the prefix, the rule while etcd refuses writes
 * (a page shows only names no batch not yet durable touches: http.h) and the
 * answer `{"<array>": [...], "next": NAME|null, "now_ms": N}` are the same
 * for every kind; only the view of one name is the kind's own.
 *
 * Only the loop thread calls these.
 */
#ifndef LEASEGATE_LISTING_H
#define LEASEGATE_LISTING_H

#include <jansson.h>

#include "core/clock.h"
#include "core/locktab.h"
#include "leasegate/request.h"
#include "net/rawjson.h"

/* The view of one listed name (a new reference), or NULL when out of memory.
 * now is when the page was read (a reader's countdowns); raw references go
 * to refs. */
typedef json_t *(*ListingView)(const Locktab *lt, LockKind kind, const Lock *lock, const Now *now, RawRefs *refs);

/* Answers req with a page of `kind`'s names under the array `array`, each
 * shown by view; or with the error its query earned. */
void listing_reply(Request *req, LockKind kind, const char *array, ListingView view);

#endif
