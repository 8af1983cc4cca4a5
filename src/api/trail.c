/* trail — rows of the audit trail; see include/leasegate/trail.h. */
#include "leasegate/trail.h"

#include <stdio.h>
#include <unistd.h>

#include "leasegate/clock.h"
#include "leasegate/events.h"
#include "leasegate/leasehist.h"

void trail_note(Server *s, Request *req, AuditKind kind, const char *lock, const char *owner, uint64_t token)
{
    events_note(s, kind, lock, owner, token);
    if (!audit_enabled(s->audit))
        return;
    char peer[300] = "";
    if (req)
        http_peer(req, peer, sizeof peer);
    Now now = clock_now();
    AuditRow row = {0,    now.wall_ms, kind, lock, owner ? owner : "", token,
                    req && req->access.key ? req->access.key->name : "", peer};
    row.seq = audit_add(s->audit, &row);
    /* A trail with holes is no trail: like any change that cannot be
     * recorded, this stops the server (as the lock table's hooks do). */
    if (!commit_audit(s->commit, &row)) {
        fprintf(stderr, "leasegate: out of memory recording the audit trail; exiting\n");
        _exit(70);
    }
}

void trail_ended(Server *s, const char *lock, const char *owner, uint64_t token, int how)
{
    AuditKind kind = how == LEASE_END_EXPIRED ? AUDIT_EXPIRED : how == LEASE_END_REVOKED ? AUDIT_REVOKED
                                                                                        : AUDIT_RELEASED;
    trail_note(s, kind == AUDIT_EXPIRED ? NULL : s->trail_actor, kind, lock, owner, token);
}
