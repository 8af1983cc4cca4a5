/*
 * auditlog — the audit trail in memory (rows as in audit.h), kept per API
 * key: each key keeps its newest `keep` rows (--audit-keep), and requests
 * without a key count as one key (""), so one tenant's churn never evicts
 * another's rows. An expiry counts against the key that held the lease (its
 * row's key, trail.h).
 *
 * Rows are numbered (seq, from 1, never reused) across all keys. A row a key
 * evicts is reported (dropped) so that storage deletes it in the same batch
 * as the row that took its place: storage holds what this holds. Listing is
 * in seq order, of every key (O(log n) to the first row after `after`) or of
 * one (O(log n) in that key's own rows). Memory is at most keep rows per key
 * that wrote any (about 0.6 KB a row).
 *
 * No HTTP, JSON or SQL; only the loop thread uses it.
 */
#ifndef LEASEGATE_AUDITLOG_H
#define LEASEGATE_AUDITLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/audit.h"

typedef struct AuditLog AuditLog;

/* Told of a row evicted for a newer one of its key (key "" for none). */
typedef void (*AuditDropped)(void *ud, const char *key, uint64_t seq);

/* keep: rows per key (0: the trail is off). NULL when out of memory. */
AuditLog *auditlog_new(size_t keep);
void auditlog_free(AuditLog *a);
bool auditlog_enabled(const AuditLog *a);
/* Numbers and keeps a copy of row (its seq is ignored; strings longer than
 * the contract allows are cut); its key's oldest row goes if the key had
 * `keep` (dropped is told). The row's seq; 0 when the trail is off or out of
 * memory (nothing was kept). */
uint64_t auditlog_add(AuditLog *a, const AuditRow *row, AuditDropped dropped, void *ud);
/* Start-up: a stored row, in any order (its seq is kept). False when out of memory. */
bool auditlog_load(AuditLog *a, const AuditRow *row);
/* Start-up, after the last auditlog_load: rows past their key's `keep`
 * (stored under an older --audit-keep, or by a gateway that kept one trail
 * for all) go, and dropped is told of each. False when out of memory. */
bool auditlog_load_done(AuditLog *a, AuditDropped dropped, void *ud);
/* Calls fn for up to `limit` rows with seq > after, oldest first: of key
 * `key` only unless NULL (""; rows without a key), of lock `lock` only unless
 * NULL. True when more follow. */
bool auditlog_list(const AuditLog *a, const char *key, const char *lock, uint64_t after, size_t limit,
                   void (*fn)(void *ud, const AuditRow *row), void *ud);
/* The smallest seq still kept, of every key (key NULL) or of one (0: none kept). */
uint64_t auditlog_oldest(const AuditLog *a, const char *key);
/* Every row below this seq is gone: the oldest kept, or the next seq when none is. */
uint64_t auditlog_gone_below(const AuditLog *a);
/* The largest seq of a row no longer kept (0: none is missing since seq 1). */
uint64_t auditlog_max_gone(const AuditLog *a);

#endif
