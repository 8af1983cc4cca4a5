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

#include "leasegate/audit.h"
#include "leasegate/http.h"

/* A row for req (NULL: the server itself, e.g. an expiry). */
void trail_note(Server *s, Request *req, AuditKind kind, const char *lock, const char *owner, uint64_t token);
/* A write the guard refused (Server.guard_refused). */
void trail_guard_refused(Request *req, const char *lock, uint64_t token);
/* The lock table's hook for an ended lease: released (by s->trail_actor, the
 * request being handled, if any), expired (its row carries the key that held
 * the lease, holder_key, NULL for none: what it counts against, auditlog.h)
 * or revoked. */
void trail_ended(Server *s, const char *lock, const char *owner, const char *holder_key, uint64_t token, int how);

#endif
