/*
 * quota — each API key's and each peer's share of what the server has in
 * common (share.h), so that one tenant cannot take every lock, name, fence,
 * waiter or held request:
 *  - per key: leases held (a writer, a reader, a permit: one each) and acquires
 *    waited for together (max_held), waiting acquires
 *    (max_waiters): in the --auth-file line, else --key-max-held and
 *    --key-max-waiters. Held counted from each grant's Holder.key (stored with
 *    the grant, so counts survive restarts and failovers), waiting from the
 *    requests in a queue;
 *  - per key and per peer: lock names in the table first taken by it
 *    (max_names: --key-max-names, --peer-max-names), fence resources first
 *    raised by it (max_fences), long-polls, watches and event streams held
 *    open (max_polls), bytes of the answers of watches (max_watch_bytes: each
 *    watch counts the size of its lock's view), bytes of the locks' values
 *    it wrote while they are kept (max_value_bytes: --key-max-value-bytes,
 *    --peer-max-value-bytes; a value counts against the key and the peer
 *    that wrote it until another is written over it; loaded at a start,
 *    against its writer's key). A name or resource is counted until it is
 *    forgotten
 *    (--forget-idle-after); names loaded at a start count against the key of
 *    their holder, idle ones against nobody.
 * Past a share the request is answered 429 key_limit or 429 peer_limit, with
 * `limit` naming the share and `value` its size. Without --auth-file only the
 * peers' shares apply. The peers' connections and half-sent requests are
 * the HTTP layer's (peers.h). Only the loop thread calls these.
 */
#ifndef LEASEGATE_QUOTA_H
#define LEASEGATE_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/share.h"
#include "net/http.h"

/* Before an acquire of name (of kind, in mode, with a semaphore's limit and
 * permits) by req's key that would be granted or (wait) queued: true when it
 * may go on; else it has been answered 429. A retry of a current grant (same
 * request_id, owner and key) and a reentry are not new and always pass. Each
 * lease counts, so a reader or a semaphore's lease (however many permits it
 * holds) is one of max_held. *charge is who a
 * new name is counted against (AcquireArgs.charge); quota_named counts it
 * once the name is made. */
bool quota_admit(Request *req, LockKind kind, const char *name, int mode, uint32_t limit, uint32_t permits, bool wait,
                 const char *owner, const char *request_id, const Now *now, Charge *charge);
/* A lock name counted against c was made (+1) or forgotten (-1); 0: the
 * acquire quota_admit let in made no name after all. */
void quota_named(Server *s, const Charge *c, int delta);
/* Before the first raise of a fence resource by req: true when it may go
 * on (*charge: who the resource is counted against), else answered 429. */
bool quota_admit_fence(Request *req, Charge *charge);
/* A fence resource counted against c was made (+1), forgotten (-1), or not
 * made after all (0). */
void quota_fenced(Server *s, const Charge *c, int delta);
/* Start-up: who a stored lock name is counted against (its holder's key, if any). */
Charge quota_charge_of_key(Server *s, const char *key);
/* A lease of key `key` (NULL: none) was granted (+1) or ended (-1). */
void quota_held(Server *s, const char *key, int delta);
/* req started waiting in a queue / stopped (granted, timed out, gone): counted once. */
void quota_wait_start(Request *req);
void quota_wait_stop(Request *req);
/* req is about to be held open (a long-poll, a watch, a stream): true when
 * its key and its peer have room (counted until quota_poll_stop, at the
 * latest when the request ends), else answered 429. */
bool quota_poll_start(Request *req);
void quota_poll_stop(Request *req);
/* A watch (of a request quota_poll_start let in) is about to be held: its
 * answer, of about `bytes` (the lock's view now), counts against its key's
 * and its peer's max_watch_bytes until the request ends, so that a tenant
 * whose watches of a large lock are not read cannot make the server hold
 * more than its share (each watcher that has not read its answer keeps that
 * answer alive). True when it fits, else answered 429. */
bool quota_watch_start(Request *req, uint64_t bytes);
/* The watch's answer is made, of `bytes`: counted in place of its estimate,
 * past the share or not (it is no longer refused). */
void quota_watch_answer(Request *req, uint64_t bytes);
/* Before req writes a lock's value of `bytes` over one of old_bytes counted
 * against `old` (LockValue.charge): true when its key and its peer have
 * room (the old value's bytes count as freed where they were req's own);
 * the new bytes are counted from now on against *charge, the new value's
 * LockValue.charge. Else answered 429 (or 503), and nothing is counted. */
bool quota_admit_value(Request *req, const Charge *old, size_t old_bytes, size_t bytes, Charge *charge);
/* A value of `bytes` counted against c stops counting (sign -1: it was
 * written over, its lock forgotten, or the write quota_admit_value let in
 * did not happen after all) or starts (+1: loaded at a start). */
void quota_value_counted(Server *s, const Charge *c, size_t bytes, int sign);
/* Calls fn for every request with a key that waits in a queue or is held
 * open (what a SIGHUP that removes or narrows its key ends). fn may end the
 * request it is given, and no other. */
void quota_each_keyed(Server *s, void (*fn)(void *ud, Request *req), void *ud);
void quota_free(Server *s);

#endif
