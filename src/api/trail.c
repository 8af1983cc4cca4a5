/* trail — rows of the audit trail; see include/leasegate/trail.h. */
#include "leasegate/trail.h"

#include <stdio.h>
#include <unistd.h>

#include "leasegate/auditlog.h"
#include "leasegate/clock.h"
#include "leasegate/events.h"
#include "leasegate/leasehist.h"

/* A trail with holes is no trail: like any change that cannot be recorded,
 * this stops the server (as the lock table's hooks do). */
static void out_of_memory(void)
{
    fprintf(stderr, "leasegate: out of memory recording the audit trail; exiting\n");
    _exit(70);
}

/* A row its key's --audit-keep evicted goes from storage in the same batch. */
static void dropped(void *ud, const char *key, uint64_t seq)
{
    Server *s = ud;
    if (!commit_audit_drop(s->commit, key, seq, auditlog_gone_below(s->audit)))
        out_of_memory();
}

static void note(Server *s, AuditKind kind, const char *lock, const char *owner, uint64_t token, const char *key,
                 const char *peer)
{
    events_note(s, kind, lock, owner, token);
    if (!auditlog_enabled(s->audit))
        return;
    Now now = clock_now();
    AuditRow row = {0, now.wall_ms, kind, lock, owner ? owner : "", token, key ? key : "", peer ? peer : ""};
    if (!(row.seq = auditlog_add(s->audit, &row, dropped, s)) || !commit_audit(s->commit, &row))
        out_of_memory();
}

void trail_guard_refused(Request *req, const char *lock, uint64_t token)
{
    trail_note(req->srv, req, AUDIT_GUARD_REFUSED, lock, "", token);
}

void trail_note(Server *s, Request *req, AuditKind kind, const char *lock, const char *owner, uint64_t token)
{
    char peer[300] = "";
    if (req)
        http_peer(req, peer, sizeof peer);
    note(s, kind, lock, owner, token, req && req->access.key ? req->access.key->name : "", peer);
}

void trail_ended(Server *s, const char *lock, const char *owner, const char *holder_key, uint64_t token, int how)
{
    AuditKind kind = how == LEASE_END_EXPIRED ? AUDIT_EXPIRED : how == LEASE_END_REVOKED ? AUDIT_REVOKED
                                                                                        : AUDIT_RELEASED;
    if (kind == AUDIT_EXPIRED) /* the server's doing, on the holder's key's account */
        note(s, kind, lock, owner, token, holder_key, "");
    else
        trail_note(s, s->trail_actor, kind, lock, owner, token);
}
