/*
 * api — the endpoint handlers: the only code that joins JSON to the core.
 * Each takes a Request whose body (if any) is gathered and whose path
 * argument (lock name or resource) is in req->arg.
 */
#ifndef LEASEGATE_API_H
#define LEASEGATE_API_H

#include "net/http.h"

void api_acquire(Request *req);
void api_renew(Request *req);
void api_release(Request *req);
void api_get_lock(Request *req);
void api_force_release(Request *req);
void api_semaphore_force_release(Request *req);
/* Elections (issue 40): a campaign is an election's acquire, a resignation
 * its release, its renewal a lock's (api_locks.c); proclaim, the state, the
 * listing and the observers' stream are api_elections.c's. */
void api_campaign(Request *req);
void api_resign(Request *req);
void api_election_renew(Request *req);
void api_election_force_release(Request *req);
void api_proclaim(Request *req);
void api_get_election(Request *req);
void api_list_elections(Request *req);
void api_observe(Request *req);
/* 409 not_leader: the lease does not lead election `name` (and who does). */
void api_reply_not_leader(Request *req, const char *name, const uint8_t *lease);
void api_audit(Request *req);
/* GET /v1/backup (api_backup.c). */
void api_backup(Request *req);
void api_lock_history(Request *req);
/* PUT and GET /v1/locks/{name}/value (api_values.c). */
void api_set_value(Request *req);
void api_get_value(Request *req);
void api_list_locks(Request *req);
void api_semaphore_acquire(Request *req);
void api_semaphore_renew(Request *req);
void api_semaphore_release(Request *req);
void api_get_semaphore(Request *req);
void api_semaphore_history(Request *req);
void api_list_semaphores(Request *req);
void api_fence(Request *req);
void api_healthz(Request *req);
void api_readyz(Request *req);
/* NULL while s can serve; else the reason's code (/readyz) and a sentence in why. */
const char *api_not_ready(const Server *s, char *why, size_t len);
void api_metrics(Request *req);
void api_dashboard(Request *req);

/* Lock-table hooks for long-polling acquires (the waiter context is the Request). */
void api_waiter_granted(Request *req, const Lock *lock, const Holder *h);
void api_waiter_timed_out(Request *req, const Lock *lock);
/* The lock rules at a request's edges: a waiter whose client left leaves the
 * lock's queue; a grant that its answer did not deliver is released at once
 * (it must not sit there until its TTL runs out). */
void api_waiter_left(Request *req);
/* A waiter whose key was removed or narrowed (access.h): it leaves the queue
 * and is answered code (401 or 403) with why. */
void api_waiter_revoked(Request *req, ErrCode code, const char *why);
void api_request_end(Request *req, bool delivered);

#endif
