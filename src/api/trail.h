/*
 * trail — writes rows of the audit trail (audit.h) for the endpoints, the
 * guard and the lock table's hooks: who (the request's API key name and peer
 * address) did what to which lock. Each row goes into the pending batch with
 * the change it describes, with the deletes of the rows it evicts (each key
 * keeps its newest --audit-keep). A no-op with --audit-keep 0.
 */
#ifndef LEASEGATE_TRAIL_H
#define LEASEGATE_TRAIL_H

#include <stdint.h>

#include "core/audit.h"
#include "net/http.h"

/* A row for req (NULL: the server itself, e.g. an expiry); object and mode
 * as in an AuditRow (trail_note: as events_note takes them). */
void trail_note(Server *s, Request *req, AuditKind kind, const char *lock, const char *owner, uint64_t token);
void trail_note_of(Server *s, Request *req, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                   uint64_t token);
/* A row about lease h of lock (its object and mode from them; an election
 * leader's value for the event of its grant or proclamation). */
void trail_note_lease(Server *s, Request *req, AuditKind kind, const Lock *lock, const Holder *h);
/* The object and mode of a row about lease h of lock. */
int trail_object(const Lock *lock);
int trail_mode(const Lock *lock, const Holder *h);
/* A write the guard refused (Server.guard_refused): the lock, the token and
 * owner of the lease presented (0 and "" when unknown or none), and why. */
void trail_guard_refused(Request *req, const char *lock, uint64_t token, const char *owner, const char *reason);
/* The lock table's hook for an ended lease h of lock: released or revoked
 * (by actor, the request that asked, or NULL: the server itself), or
 * expired (its row carries the key that held the lease, what it counts
 * against, auditlog.h). */
void trail_ended(Server *s, Request *actor, const Lock *lock, const Holder *h, int how);

#endif
