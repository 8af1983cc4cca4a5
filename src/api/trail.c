/* trail — rows of the audit trail; see trail.h. */
#include "api/trail.h"

#include <stdio.h>
#include <unistd.h>

#include "api/events.h"
#include "core/auditlog.h"
#include "core/clock.h"
#include "core/leasehist.h"
#include "core/log.h"

/* A trail with holes is no trail: like any change that cannot be recorded,
 * this stops the server (as the lock table's hooks do). */
static void out_of_memory(void)
{
    log_line(LEVEL_ERROR, "out of memory recording the audit trail; exiting");
    _exit(70);
}

/* A row its key's --audit-keep evicted goes from storage in the same batch. */
static void dropped(void *ud, const char *key, uint64_t seq)
{
    Server *s = ud;
    if (!commit_audit_drop(s->commit, key, seq, auditlog_gone_below(s->audit)))
        out_of_memory();
}

/* value: an election leader's, for the event only (the trail never keeps it). */
static void note(Server *s, AuditKind kind, int object, int mode, const char *lock, const char *owner, uint64_t token,
                 const char *key, const char *peer, const char *reason, const char *value)
{
    events_note_value(s, kind, object, mode, lock, owner, token, value);
    if (!auditlog_enabled(s->audit))
        return;
    Now now = clock_now();
    AuditRow row = {0,     now.wall_ms,       kind, lock, owner ? owner : "", token, key ? key : "",
                    peer ? peer : "", (uint8_t)object, (uint8_t)mode, reason ? reason : "", NULL};
    if (!(row.seq = auditlog_add(s->audit, &row, dropped, s)) || !commit_audit(s->commit, &row))
        out_of_memory();
}

int trail_object(const Lock *lock)
{
    return lock->kind == KIND_SEMAPHORE ? AUDIT_OF_SEMAPHORE : lock->kind == KIND_ELECTION ? AUDIT_OF_ELECTION
                                                                                          : AUDIT_OF_LOCK;
}

int trail_mode(const Lock *lock, const Holder *h)
{
    if (lock->kind != KIND_LOCK)
        return AUDIT_MODE_NONE;
    return h->mode == MODE_READ ? AUDIT_MODE_READ : AUDIT_MODE_WRITE;
}

/* The row of req's trail, with a reason (NULL: none) and a leader's value (NULL: none). */
static void note_req(Server *s, Request *req, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                     uint64_t token, const char *reason, const char *value)
{
    char peer[300] = "";
    if (req)
        http_peer(req, peer, sizeof peer);
    note(s, kind, object, mode, lock, owner, token, req && req->access.key ? req->access.key->name : "", peer,
         reason, value);
}

void trail_guard_refused(Request *req, const char *lock, uint64_t token, const char *owner, const char *reason)
{
    note_req(req->srv, req, AUDIT_GUARD_REFUSED, AUDIT_OF_LOCK, AUDIT_MODE_NONE, lock, owner, token, reason, NULL);
}

void trail_note_of(Server *s, Request *req, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                   uint64_t token)
{
    note_req(s, req, kind, object, mode, lock, owner, token, NULL, NULL);
}

void trail_note_lease(Server *s, Request *req, AuditKind kind, const Lock *lock, const Holder *h)
{
    /* A leader's value goes with its grant's and its proclamation's events, for its observers. */
    bool valued = lock->kind == KIND_ELECTION && (kind == AUDIT_GRANTED || kind == AUDIT_PROCLAIMED);
    note_req(s, req, kind, trail_object(lock), trail_mode(lock, h), lock->name, h->owner, h->token, NULL,
             valued ? h->value : NULL);
}

void trail_note(Server *s, Request *req, AuditKind kind, const char *lock, const char *owner, uint64_t token)
{
    bool fence = kind == AUDIT_FENCE_REFUSED || kind == AUDIT_FENCE_RAISED;
    trail_note_of(s, req, kind, fence ? AUDIT_OF_FENCE : AUDIT_OF_LOCK, AUDIT_MODE_NONE, lock, owner, token);
}

void trail_ended(Server *s, Request *actor, const Lock *lock, const Holder *h, int how)
{
    AuditKind kind = how == LEASE_END_EXPIRED ? AUDIT_EXPIRED : how == LEASE_END_REVOKED ? AUDIT_REVOKED
                                                                                        : AUDIT_RELEASED;
    if (kind == AUDIT_EXPIRED) /* the server's doing, on the holder's key's account */
        note(s, kind, trail_object(lock), trail_mode(lock, h), lock->name, h->owner, h->token, h->key, "", NULL,
             NULL);
    else
        trail_note_of(s, actor, kind, trail_object(lock), trail_mode(lock, h), lock->name, h->owner,
                      h->token);
}
