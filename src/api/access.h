/*
 * access — which API key may make which request (--auth-file; auth.h holds
 * the keys). Decided at a request's start, from its headers alone, before
 * anything about a lock is looked at: so neither answer, 401 (no key, or an
 * unknown one) nor 403 (a known key out of its role or its prefixes), says
 * whether a lock exists.
 *
 * Roles: client — the lock endpoints and guarded requests, for names within
 * its prefixes (a listing's ?prefix= must be within one); fence — POST
 * /v1/fence/{resource} for resources within its prefixes; admin — everything.
 * /healthz and /metrics need no key unless --auth-metrics; `/` (the
 * dashboard's page, which holds no state: it reads the API with the key the
 * user types) never needs one, so that a browser can open it, and neither
 * does /readyz, so that a load balancer can ask it.
 * Without --auth-file every request passes, as before.
 */
#ifndef LEASEGATE_ACCESS_H
#define LEASEGATE_ACCESS_H

#include <stdbool.h>

#include "net/http.h"

typedef enum Access {
    ACCESS_PAGE,  /* the dashboard's page and /readyz: always open */
    ACCESS_OPEN,  /* health and metrics: open unless --auth-metrics */
    ACCESS_LOCKS, /* a lock's endpoints (name), or the listing (name NULL) */
    ACCESS_FENCE, /* a fence resource (name) */
    ACCESS_ADMIN, /* admin only */
} Access;

/* True when the request may go on; otherwise it has been answered 401 or 403.
 * A request let in with a key keeps one reference to the key table until
 * access_end, however many checks it passed. */
bool access_check(Request *req, Access need, const char *name);
/* The listing's ?prefix= is within the request's key. Answers 403 otherwise. */
bool access_check_listing(Request *req, const char *prefix);
void access_end(Request *req);

#endif
