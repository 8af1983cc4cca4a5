/*
 * quota — per-key limits, so that one tenant cannot take every lock or
 * waiter slot: a key's requests may hold and wait for at most max_held leases
 * together, and wait in at most max_waiters queues (auth.h: per key in the
 * --auth-file, else --key-max-held and --key-max-waiters). Counted by key
 * name: held from each grant's Holder.key (stored with the grant, so counts
 * survive restarts and failovers), waiting from the requests in a queue.
 * Without --auth-file nothing is counted.
 */
#ifndef LEASEGATE_QUOTA_H
#define LEASEGATE_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "leasegate/http.h"

/* Before an acquire of name (of kind, in mode, with a semaphore's limit) by
 * req's key that would be granted or (wait) queued: true when it may go on;
 * else it has been answered 429 key_limit. A retry of a current grant (same
 * request_id and owner) and a reentry are not new and always pass. Each
 * lease counts, so a reader or a permit is one of max_held. */
bool quota_admit(Request *req, LockKind kind, const char *name, int mode, uint32_t limit, bool wait, const char *owner,
                 const char *request_id);
/* A lease of key `key` (NULL: none) was granted (+1) or ended (-1). */
void quota_held(Server *s, const char *key, int delta);
/* req started waiting in a queue / stopped (granted, timed out, gone): counted once. */
void quota_wait_start(Request *req);
void quota_wait_stop(Request *req);
void quota_free(Server *s);

#endif
