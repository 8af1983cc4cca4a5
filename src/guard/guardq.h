/*
 * guardq — the guard's write queues: which write of a lock may talk to the
 * upstream, when the end of its request may leave, and when the next write of
 * that lock may start.
 *
 * Each lock with writes in progress has a queue of them, in arrival order; a
 * write bound to two locks (a COPY or MOVE whose Destination has a lock of
 * its own) is in both, entered in one step, so every queue orders any two
 * writes alike and none can wait for the other (no deadlock). Only a write at
 * the head of all its queues talks to the upstream. Life of a write there:
 *   checked -> its call starts, the body streams but its end is held back ->
 *   the body is complete -> checked again -> the marks and the time are
 *   recorded and made durable (the end record) -> checked again -> the end
 *   is released -> the upstream answers -> it leaves, the next one starts.
 * A failed check refuses the write with 409 and cuts its call off. A write
 * whose client goes away after its end was released stays at the head until
 * the upstream answers (its call runs on, detached).
 *
 * Settling: a released write whose upstream connection closed without an
 * answer (a timeout, a broken connection) may still be applied by a slow
 * backend; for --guard-settle seconds from then its locks take no write
 * (503 with Retry-After, queued ones too). The end record holds when a write
 * was let through, so after a restart (or a failover) a lock written less
 * than the settle time before settles for the rest: a restart cannot reorder
 * writes either.
 *
 * A write that waits in a queue longer than --guard-timeout before its turn
 * gets 503.
 */
#ifndef LEASEGATE_GUARDQ_H
#define LEASEGATE_GUARDQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/leaseid.h"
#include "core/names.h"
#include "core/locktab.h"
#include "guard/guardshare.h"
#include "guard/guardroute.h"
#include "leasegate/request.h"

typedef struct GuardQueues GuardQueues;

/* One lock a write is bound to, and the lease that holds it with its token. */
/* The lock table's kind and name of a binding's key (guardroute.h). */
static inline LockKind guard_binding_kind(const char *key)
{
    return key[0] == GUARD_ELECTION_MARK ? KIND_ELECTION : KIND_LOCK;
}
static inline const char *guard_binding_name(const char *key)
{
    return key[0] == GUARD_ELECTION_MARK ? key + 1 : key;
}

typedef struct GuardBinding {
    char lock[GUARD_BINDING_MAX + 1]; /* a lock's name, or "@" and an election's (guardroute.h) */
    uint8_t lease[LEASE_ID_BYTES];
    uint64_t token;
} GuardBinding;

GuardQueues *guardq_new(Server *s, GuardShares *shares); /* NULL when out of memory */
void guardq_free(GuardQueues *gq);
/* At start: the last write of `lock` was let through at at_ms (Unix ms): if
 * that is less than --guard-settle ago, the lock's writes wait out the rest.
 * False when out of memory. */
bool guardq_restore(GuardQueues *gq, const char *lock, int64_t at_ms, const Now *now);
/* Writes queued or in flight for `lock`. */
size_t guardq_writes(const GuardQueues *gq, const char *lock);
/* Milliseconds until `lock` has settled (0: it takes writes now). */
int64_t guardq_settling_ms(const GuardQueues *gq, const char *lock, const Now *now);
/* Answers req 503: `lock` settles for ms more (Retry-After). */
void guardq_reply_settling(Request *req, const char *lock, int64_t ms);
/* Why a write may not go upstream: a short code (the 409's and the audit
 * row's `reason`: expired, superseded, released, revoked, unknown,
 * read_lease, newer_token) and the words for a person. */
typedef struct GuardStale {
    const char *code;
    const char *why;
} GuardStale;
/* Why a write bound to b may not go upstream now, or NULL. */
const GuardStale *guardq_stale_reason(const Server *s, const GuardBinding *b);
/* Answers req 409 stale_token for binding b, and writes its audit row: the
 * lock, the token of the lease presented (its holder's, or its ended lease's
 * while the history remembers it; null when unknown), the holder's owner
 * while it holds, and the reason. */
void guardq_reply_stale(Request *req, const GuardBinding *b, const GuardStale *why);

/* A step a write takes at its turn, after its check and before its call
 * starts (an S3 write reads the object's fence and ETag first). It returns
 * at once and calls guardq_prepared when done; false when it could not
 * start (it has answered the client). */
typedef bool (*GuardPrepare)(void *ud, GuardWrite *w);

/* Queues the write that req makes through `call` (the request's; not
 * started), bound to nb (1 or 2) locks, which must differ; `prepare` (may be
 * NULL) runs at its turn. Takes over *ticket. Writes of those locks that
 * have smaller tokens and are not with the upstream yet are refused now, so
 * that this one need not wait for them. Sets req->guard->write. False when
 * out of memory (nothing is queued; the ticket is still the caller's). */
bool guardq_add(GuardQueues *gq, Request *req, ProxyCall *call, bool has_body, const GuardBinding *b, size_t nb,
                GuardTicket *ticket, GuardPrepare prepare, void *prepare_ud);
/* Is w still waiting for its prepare or confirm step (not refused meanwhile)? */
bool guardq_preparing(const GuardWrite *w);
/* A step the write takes once its end record is durable, right before its
 * end leaves (an S3 write reads the object again: nothing may have changed
 * since its prepare step). It returns at once and calls guardq_confirmed. */
void guardq_set_confirm(GuardWrite *w, GuardPrepare confirm);
/* The confirm step is over: the end leaves, or (ok false: the step has
 * answered the client) the write leaves its queues. */
void guardq_confirmed(GuardWrite *w, bool ok);
/* The prepare step is over: the write goes on, or (ok false: the step has
 * answered the client) leaves its queues. */
void guardq_prepared(GuardWrite *w, bool ok);
/* req's whole body has arrived. */
void guardq_body_done(Request *req);
/* The guard refuses req's write for what its request turned out to carry
 * (a method override in its body): the write leaves its queues, its call is
 * cut off before its end reaches the upstream, and its share is given
 * back. The caller answers. */
void guardq_refuse(Request *req);
/* req is over: its write leaves its queues, unless its whole request is
 * with the upstream (then its call runs on until the upstream answers, and
 * the next write waits for that: the write takes req->guard->call over). */
void guardq_request_end(Request *req);

int64_t guardq_next_timeout_ms(const GuardQueues *gq, const Now *now); /* -1: none */
void guardq_tick(GuardQueues *gq, const Now *now);

#endif
