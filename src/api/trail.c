/* trail — rows of the audit trail; see include/leasegate/trail.h. */
#include "leasegate/trail.h"

#include <stdio.h>
#include <unistd.h>

#include "leasegate/clock.h"
#include "leasegate/events.h"
#include "leasegate/leasehist.h"

int trail_object(const Lock *lock) { return lock->kind == KIND_SEMAPHORE ? AUDIT_OF_SEMAPHORE : AUDIT_OF_LOCK; }

int trail_mode(const Lock *lock, const Holder *h)
{
    if (lock->kind == KIND_SEMAPHORE)
        return AUDIT_MODE_NONE;
    return h->mode == MODE_READ ? AUDIT_MODE_READ : AUDIT_MODE_WRITE;
}

void trail_note(Server *s, Request *req, AuditKind kind, const char *lock, const char *owner, uint64_t token)
{
    bool fence = kind == AUDIT_FENCE_REFUSED || kind == AUDIT_FENCE_RAISED;
    trail_note_of(s, req, kind, fence ? AUDIT_OF_FENCE : AUDIT_OF_LOCK, AUDIT_MODE_NONE, lock, owner, token);
}

void trail_note_of(Server *s, Request *req, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                   uint64_t token)
{
    events_note_of(s, kind, object, mode, lock, owner, token);
    if (!audit_enabled(s->audit))
        return;
    char peer[300] = "";
    if (req)
        http_peer(req, peer, sizeof peer);
    Now now = clock_now();
    AuditRow row = {0,    now.wall_ms, kind, lock, owner ? owner : "", token,
                    req && req->access.key ? req->access.key->name : "", peer, (uint8_t)object, (uint8_t)mode};
    row.seq = audit_add(s->audit, &row);
    /* A trail with holes is no trail: like any change that cannot be
     * recorded, this stops the server (as the lock table's hooks do). */
    if (!commit_audit(s->commit, &row)) {
        fprintf(stderr, "leasegate: out of memory recording the audit trail; exiting\n");
        _exit(70);
    }
}

void trail_ended(Server *s, const Lock *lock, const Holder *h, int how)
{
    AuditKind kind = how == LEASE_END_EXPIRED ? AUDIT_EXPIRED : how == LEASE_END_REVOKED ? AUDIT_REVOKED
                                                                                        : AUDIT_RELEASED;
    trail_note_of(s, kind == AUDIT_EXPIRED ? NULL : s->trail_actor, kind, trail_object(lock), trail_mode(lock, h),
                  lock->name, h->owner, h->token);
}
