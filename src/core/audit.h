/*
 * audit — rows of what happened to locks and who did it: grants, releases,
 * expiries, force-releases, and the fence's and the guard's refusals, each
 * with its time, lock, owner, token, the API key's name and the peer's
 * address, and whether it is about a lock (with the lease's mode), a
 * semaphore or a fence resource (never a lease); and a ring of the newest
 * `keep` rows, in seq order, which the events (events.h) are published into.
 *
 * The audit trail itself is auditlog.h: rows numbered (seq, from 1, never
 * reused), kept per API key and written in the same group commit as the
 * change they describe (commit_audit), so the trail costs no fsync of its own.
 */
#ifndef LEASEGATE_AUDIT_H
#define LEASEGATE_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Stored (the audit rows' kind, in SQLite and etcd) and sent (the events'
 * seq numbers name rows): every value is numbered, and a number once written
 * keeps its meaning; a new kind takes a new number. */
typedef enum AuditKind {
    AUDIT_GRANTED = 1,
    AUDIT_RELEASED = 2,
    AUDIT_EXPIRED = 3,
    AUDIT_REVOKED = 4, /* force-released by an admin */
    AUDIT_FENCE_REFUSED = 5,
    AUDIT_GUARD_REFUSED = 6,
    /* Events only (events.h): not in the audit trail. */
    AUDIT_REENTERED = 7,
    AUDIT_RENEWED = 8,
    AUDIT_WAITER_JOINED = 9,
    AUDIT_WAITER_LEFT = 10,
    AUDIT_FENCE_RAISED = 11,
    /* Stored again (issue 40): a lock's value written by its holder. */
    AUDIT_VALUE_SET = 12,
    /* An election's leader proclaimed a value (issue 40). */
    AUDIT_PROCLAIMED = 13,
} AuditKind;

/* What a row is about (its "type"), and a lock grant's mode ("mode"): stored,
 * numbered as AuditKind is. */
typedef enum AuditObject {
    AUDIT_OF_LOCK = 0,
    AUDIT_OF_SEMAPHORE = 1,
    AUDIT_OF_FENCE = 2,
    AUDIT_OF_ELECTION = 3, /* its grants are leaders (the token is the term), a release a resignation */
} AuditObject;
typedef enum AuditMode { AUDIT_MODE_NONE = 0, AUDIT_MODE_WRITE = 1, AUDIT_MODE_READ = 2 } AuditMode;

typedef struct AuditRow {
    uint64_t seq;
    int64_t at_ms; /* Unix ms */
    int kind;      /* AuditKind */
    const char *lock;  /* the lock, or for a fence refusal the resource */
    const char *owner; /* "" when unknown */
    uint64_t token;    /* 0 when none */
    const char *key;   /* the API key's name; "" without keys or for the server itself */
    const char *peer;  /* "ADDR:PORT"; "" for the server itself */
    uint8_t object;    /* AuditObject: a lock, a semaphore, a fence resource */
    uint8_t mode;      /* AuditMode: of the lease a lock's row is about; NONE when none */
    const char *reason; /* a guard refusal's why, a short code ("expired", "lease_missing"...);
                         * "" (or NULL) for every other row */
    /* Events only (never stored): an election leader's value (JSON text) in
     * its `granted` and `proclaimed` events, for the observers of its
     * election; NULL in every other row (and null values). The events' ring
     * keeps a copy of its own. */
    const char *value;
} AuditRow;

typedef struct Audit Audit;

/* A ring of the newest `keep` rows (keep 0: the trail is off). NULL when out of memory. */
Audit *audit_new(size_t keep);
void audit_free(Audit *a);
bool audit_enabled(const Audit *a);
/* Numbers and keeps a copy of row (its seq is ignored; strings longer than
 * the contract allows are cut); the row's seq (0 when the trail is off). */
uint64_t audit_add(Audit *a, const AuditRow *row);
/* Numbers the rows of an empty ring from `first` on. */
void audit_start_seq(Audit *a, uint64_t first);
/* Calls fn for up to `limit` rows with seq > after, oldest first, of `lock`
 * only (or, with prefix, of locks whose names start with `lock`) unless lock
 * is NULL. True when more follow. The rows looked at are added to *looked
 * (unless NULL): what the listing cost. */
bool audit_list(const Audit *a, const char *lock, bool prefix, uint64_t after, size_t limit,
                void (*fn)(void *ud, const AuditRow *row), void *ud, uint64_t *looked);
/* The largest seq given so far (0: none). */
uint64_t audit_latest(const Audit *a);
const char *audit_kind_name(int kind);
const char *audit_object_name(int object);
/* "write", "read", or NULL for AUDIT_MODE_NONE. */
const char *audit_mode_name(int mode);
/* The smallest seq still kept (0: none kept). */
uint64_t audit_oldest(const Audit *a);

#endif
