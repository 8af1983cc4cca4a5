/* sqlite_record — each record kind in SQLite, described once; see sqlite_record.h. */
#include "store/sqlite_record.h"

#include <string.h>

#include "core/leasehist.h"
#include "core/valwrites.h"

/* A column list is X(PREFIX, column, merge) for each column, the key's
 * first; from it come the column indexes (PREFIX_column), the key's width
 * (PREFIX_NKEY) and the SqlColumn array (PREFIX_COLUMNS) the statements are
 * built from. */
#define COLUMN_INDEX(P, c, merge) P##_##c,
#define COLUMN_IS_KEY(P, c, merge) +((merge) == SQL_KEY)
#define COLUMN_DESC(P, c, merge) {#c, merge},
#define DESCRIBE_COLUMNS(P, LIST)                                                                                   \
    enum { LIST(P, COLUMN_INDEX) P##_NCOLUMNS, P##_NKEY = 0 LIST(P, COLUMN_IS_KEY) };                              \
    static const SqlColumn P##_COLUMNS[] = {LIST(P, COLUMN_DESC)}

/* A column's statement parameter: ?1 is column 0. */
#define PARAM(i) ((i) + 1)

static int bind_text(sqlite3_stmt *st, int col, const char *text)
{
    return text ? sqlite3_bind_text(st, PARAM(col), text, -1, SQLITE_STATIC) : SQLITE_OK; /* unbound: NULL */
}

static int bind_i64(sqlite3_stmt *st, int col, int64_t v) { return sqlite3_bind_int64(st, PARAM(col), v); }
static int bind_u64(sqlite3_stmt *st, int col, uint64_t v) { return sqlite3_bind_int64(st, PARAM(col), (sqlite3_int64)v); }
static const char *col_text(sqlite3_stmt *st, int col) { return (const char *)sqlite3_column_text(st, col); }
static uint64_t col_u64(sqlite3_stmt *st, int col) { return (uint64_t)sqlite3_column_int64(st, col); }

/* The lock space: a name's own record (token 0) and each of its leases (its
 * token) are rows of one table, keyed (kind, name, token), so that a name's
 * rows are neighbours in one b-tree: a grant writes its name's last token
 * and its lease into one page, as the row of a lock that held its writer
 * did before version 11 (docs/BENCHMARKS.md, "The lease as a record"). */
#define LOCK_LIST(P, X)                                                                                              \
    X(P, kind, SQL_KEY) X(P, name, SQL_KEY) X(P, token, SQL_KEY) X(P, last_token, SQL_SET) X(P, lim, SQL_SET)       \
        X(P, delay_until_ms, SQL_SET)
DESCRIBE_COLUMNS(LOCK, LOCK_LIST);

#define HOLDER_LIST(P, X)                                                                                            \
    X(P, kind, SQL_KEY) X(P, name, SQL_KEY) X(P, token, SQL_KEY) X(P, lease, SQL_SET) X(P, owner, SQL_SET)          \
        X(P, mode, SQL_SET) X(P, ttl_ms, SQL_SET) X(P, acquired_at_ms, SQL_SET) X(P, expires_at_ms, SQL_SET)        \
            X(P, count, SQL_SET) X(P, metadata, SQL_SET) X(P, deadline_ms, SQL_SET) X(P, boot, SQL_SET)             \
                X(P, request_id, SQL_SET) X(P, key, SQL_SET) X(P, lock_delay_ms, SQL_SET) X(P, permits, SQL_SET)     \
                    X(P, value, SQL_SET)
DESCRIBE_COLUMNS(HOLDER, HOLDER_LIST);

static int bind_lock(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    const StoreLock *l = &r->lock;
    int rc = sqlite3_bind_int(st, PARAM(LOCK_kind), l->kind) | bind_text(st, LOCK_name, l->name) |
             bind_i64(st, LOCK_token, 0);
    if (r->removal)
        return rc;
    rc |= bind_u64(st, LOCK_last_token, l->last_token);
    if (l->kind == KIND_SEMAPHORE)
        rc |= bind_i64(st, LOCK_lim, l->limit);
    if (l->delay_until_ms)
        rc |= bind_i64(st, LOCK_delay_until_ms, l->delay_until_ms);
    return rc;
}

static bool read_lock(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    StoreLock *l = &r->lock;
    sqlite3_int64 kind = sqlite3_column_int64(st, LOCK_kind), lim = sqlite3_column_int64(st, LOCK_lim);
    l->name = col_text(st, LOCK_name);
    l->kind = (uint8_t)kind;
    l->last_token = col_u64(st, LOCK_last_token);
    l->limit = kind == KIND_SEMAPHORE && lim >= 1 && lim <= LOCKTAB_LIMIT_MAX ? (uint32_t)lim : 0;
    l->delay_until_ms = sqlite3_column_int64(st, LOCK_delay_until_ms); /* 0 when NULL */
    return l->name && kind >= 0 && kind < LOCK_KINDS && (kind != KIND_SEMAPHORE || l->limit);
}

static int bind_holder(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    const StoreHolder *x = &r->holder;
    const Holder *h = &x->holder;
    int rc = sqlite3_bind_int(st, PARAM(HOLDER_kind), x->kind) | bind_text(st, HOLDER_name, x->name) |
             bind_u64(st, HOLDER_token, h->token);
    if (r->removal)
        return rc;
    return rc | sqlite3_bind_blob(st, PARAM(HOLDER_lease), h->lease, LEASE_ID_BYTES, SQLITE_STATIC) |
           bind_text(st, HOLDER_owner, h->owner) | sqlite3_bind_int(st, PARAM(HOLDER_mode), h->mode) |
           bind_i64(st, HOLDER_ttl_ms, h->ttl_ms) | bind_i64(st, HOLDER_acquired_at_ms, h->acquired_at_ms) |
           bind_i64(st, HOLDER_expires_at_ms, h->expires_at_ms) | bind_i64(st, HOLDER_count, h->count) |
           bind_text(st, HOLDER_metadata, h->metadata) | bind_i64(st, HOLDER_deadline_ms, h->deadline_ms) |
           bind_i64(st, HOLDER_boot, boot) | bind_text(st, HOLDER_request_id, h->request_id) |
           bind_text(st, HOLDER_key, h->key) | bind_i64(st, HOLDER_lock_delay_ms, h->lock_delay_ms) |
           (h->permits > 1 ? bind_i64(st, HOLDER_permits, h->permits) : SQLITE_OK) | /* unbound: NULL, one */
           bind_text(st, HOLDER_value, h->value);
}

static bool read_holder(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    StoreHolder *x = &r->holder;
    Holder *h = &x->holder;
    sqlite3_int64 kind = sqlite3_column_int64(st, HOLDER_kind), mode = sqlite3_column_int64(st, HOLDER_mode),
                  count = sqlite3_column_int64(st, HOLDER_count);
    sqlite3_int64 permits = sqlite3_column_type(st, HOLDER_permits) == SQLITE_NULL
                                ? 1
                                : sqlite3_column_int64(st, HOLDER_permits);
    x->name = col_text(st, HOLDER_name);
    x->kind = (uint8_t)kind;
    if (sqlite3_column_bytes(st, HOLDER_lease) != LEASE_ID_BYTES)
        return false;
    memcpy(h->lease, sqlite3_column_blob(st, HOLDER_lease), LEASE_ID_BYTES);
    h->owner = (char *)col_text(st, HOLDER_owner);
    h->metadata = (char *)col_text(st, HOLDER_metadata);
    h->request_id = (char *)col_text(st, HOLDER_request_id); /* NULL when none */
    h->key = (char *)col_text(st, HOLDER_key);               /* NULL when none */
    h->value = (char *)col_text(st, HOLDER_value);           /* NULL when none (or null) */
    h->token = col_u64(st, HOLDER_token);
    h->mode = (uint8_t)mode;
    h->ttl_ms = sqlite3_column_int64(st, HOLDER_ttl_ms);
    h->acquired_at_ms = sqlite3_column_int64(st, HOLDER_acquired_at_ms);
    h->expires_at_ms = sqlite3_column_int64(st, HOLDER_expires_at_ms);
    h->count = (uint32_t)count;
    h->permits = (uint32_t)permits;
    h->lock_delay_ms = sqlite3_column_int64(st, HOLDER_lock_delay_ms);
    /* A deadline on the boot clock means something only in the boot that wrote it. */
    bool same_boot = sqlite3_column_type(st, HOLDER_deadline_ms) != SQLITE_NULL &&
                     sqlite3_column_type(st, HOLDER_boot) != SQLITE_NULL &&
                     sqlite3_column_int64(st, HOLDER_boot) == boot;
    h->deadline_ms = same_boot ? sqlite3_column_int64(st, HOLDER_deadline_ms) : -1;
    return x->name && h->owner && h->metadata && kind >= 0 && kind < LOCK_KINDS && h->token > 0 &&
           (mode == MODE_WRITE || (mode == MODE_READ && kind == KIND_LOCK)) && count >= 1 && count <= UINT32_MAX &&
           permits >= 1 && permits <= LOCKTAB_LIMIT_MAX && (permits == 1 || kind == KIND_SEMAPHORE);
}

/* Lock values, keyed by the lock's name (value NULL: null written; writes:
 * the writes a retry may repeat, valwrites.h's text, NULL when none). */
#define VALUE_LIST(P, X)                                                                                             \
    X(P, name, SQL_KEY) X(P, value, SQL_SET) X(P, version, SQL_SET) X(P, token, SQL_SET) X(P, key, SQL_SET)         \
        X(P, at_ms, SQL_SET) X(P, writes, SQL_SET)
DESCRIBE_COLUMNS(VALUE, VALUE_LIST);

static int bind_value(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    const StoreValue *v = &r->value;
    int rc = bind_text(st, VALUE_name, v->name);
    if (r->removal)
        return rc;
    return rc | bind_text(st, VALUE_value, v->text) | bind_u64(st, VALUE_version, v->version) |
           bind_u64(st, VALUE_token, v->token) | bind_text(st, VALUE_key, v->key) | bind_i64(st, VALUE_at_ms, v->at_ms) |
           bind_text(st, VALUE_writes, v->writes);
}

static bool read_value(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    r->value = (StoreValue){col_text(st, VALUE_name),  col_text(st, VALUE_value), col_u64(st, VALUE_version),
                            col_u64(st, VALUE_token), col_text(st, VALUE_key),    sqlite3_column_int64(st, VALUE_at_ms),
                            col_text(st, VALUE_writes)};
    return r->value.name && r->value.version >= 1 && r->value.token >= 1 &&
           valwrites_parse(r->value.writes, r->value.version, NULL);
}

#define FENCE_LIST(P, X) X(P, resource, SQL_KEY) X(P, max_token, SQL_MAX)
DESCRIBE_COLUMNS(FENCE, FENCE_LIST);

static int bind_fence(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    int rc = bind_text(st, FENCE_resource, r->fence.name);
    return r->removal ? rc : rc | bind_u64(st, FENCE_max_token, r->fence.max_token);
}

static bool read_fence(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    r->fence = (StoreMark){col_text(st, FENCE_resource), col_u64(st, FENCE_max_token), 0};
    return r->fence.name != NULL;
}

#define GUARD_MARK_LIST(P, X) X(P, lock, SQL_KEY) X(P, max_token, SQL_MAX) X(P, at_ms, SQL_MAX)
DESCRIBE_COLUMNS(GUARD_MARK, GUARD_MARK_LIST);

static int bind_guard_mark(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    const StoreMark *m = &r->guard_mark;
    int rc = bind_text(st, GUARD_MARK_lock, m->name);
    return r->removal ? rc : rc | bind_u64(st, GUARD_MARK_max_token, m->max_token) | bind_i64(st, GUARD_MARK_at_ms, m->at_ms);
}

static bool read_guard_mark(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    r->guard_mark = (StoreMark){col_text(st, GUARD_MARK_lock), col_u64(st, GUARD_MARK_max_token),
                                sqlite3_column_int64(st, GUARD_MARK_at_ms)};
    return r->guard_mark.name != NULL;
}

#define FLOOR_LIST(P, X) X(P, bucket, SQL_KEY) X(P, floor, SQL_MAX)
DESCRIBE_COLUMNS(FLOOR, FLOOR_LIST);

static int bind_floor(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    int rc = bind_i64(st, FLOOR_bucket, r->floor.bucket);
    return r->removal ? rc : rc | bind_u64(st, FLOOR_floor, r->floor.floor);
}

static bool read_floor(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    sqlite3_int64 bucket = sqlite3_column_int64(st, FLOOR_bucket);
    r->floor = (StoreFloor){(uint32_t)bucket, col_u64(st, FLOOR_floor)};
    return bucket >= 0 && bucket <= UINT32_MAX;
}

/* Ended leases, keyed by seq (the rowid): every insert appends at the end of
 * one b-tree and pruning cuts from its start (store_sqlite.c). */
#define ENDED_LIST(P, X)                                                                                             \
    X(P, seq, SQL_KEY) X(P, lease, SQL_SET) X(P, lock, SQL_SET) X(P, token, SQL_SET) X(P, how, SQL_SET)              \
        X(P, kind, SQL_SET)
DESCRIBE_COLUMNS(ENDED, ENDED_LIST);

static int bind_ended(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    const StoreEnded *e = &r->ended;
    int rc = bind_u64(st, ENDED_seq, e->seq);
    if (r->removal)
        return rc;
    return rc | sqlite3_bind_blob(st, PARAM(ENDED_lease), e->lease, LEASE_ID_BYTES, SQLITE_STATIC) |
           bind_text(st, ENDED_lock, e->lock) | bind_u64(st, ENDED_token, e->token) |
           sqlite3_bind_int(st, PARAM(ENDED_how), e->how) | sqlite3_bind_int(st, PARAM(ENDED_kind), e->kind);
}

static bool read_ended(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    sqlite3_int64 kind = sqlite3_column_int64(st, ENDED_kind);
    r->ended = (StoreEnded){col_text(st, ENDED_lock), (uint8_t)kind, sqlite3_column_blob(st, ENDED_lease),
                            col_u64(st, ENDED_token), sqlite3_column_int(st, ENDED_how), col_u64(st, ENDED_seq)};
    return r->ended.lock && r->ended.lease && sqlite3_column_bytes(st, ENDED_lease) == LEASE_ID_BYTES &&
           kind >= 0 && kind < LOCK_KINDS;
}

#define REVOKED_LIST(P, X) X(P, token, SQL_KEY) X(P, lock, SQL_SET)
DESCRIBE_COLUMNS(REVOKED, REVOKED_LIST);

static int bind_revoked(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    int rc = bind_u64(st, REVOKED_token, r->revoked.token);
    return r->removal ? rc : rc | bind_text(st, REVOKED_lock, r->revoked.lock);
}

static bool read_revoked(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    r->revoked = (StoreRevoked){col_u64(st, REVOKED_token), col_text(st, REVOKED_lock)};
    return r->revoked.lock != NULL;
}

#define AUDIT_LIST(P, X)                                                                                             \
    X(P, seq, SQL_KEY) X(P, at_ms, SQL_SET) X(P, kind, SQL_SET) X(P, lock, SQL_SET) X(P, owner, SQL_SET)             \
        X(P, token, SQL_SET) X(P, key, SQL_SET) X(P, peer, SQL_SET) X(P, object, SQL_SET) X(P, mode, SQL_SET)     \
            X(P, reason, SQL_SET)
DESCRIBE_COLUMNS(AUDIT, AUDIT_LIST);

static int bind_audit(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    const AuditRow *a = &r->audit;
    int rc = bind_u64(st, AUDIT_seq, a->seq);
    if (r->removal)
        return rc;
    return rc | bind_i64(st, AUDIT_at_ms, a->at_ms) | sqlite3_bind_int(st, PARAM(AUDIT_kind), a->kind) |
           bind_text(st, AUDIT_lock, a->lock) | bind_text(st, AUDIT_owner, a->owner) |
           bind_u64(st, AUDIT_token, a->token) | bind_text(st, AUDIT_key, a->key) | bind_text(st, AUDIT_peer, a->peer) |
           sqlite3_bind_int(st, PARAM(AUDIT_object), a->object) | sqlite3_bind_int(st, PARAM(AUDIT_mode), a->mode) |
           bind_text(st, AUDIT_reason, a->reason ? a->reason : "");
}

static bool read_audit(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot)
{
    (void)boot;
    r->audit = (AuditRow){col_u64(st, AUDIT_seq),
                          sqlite3_column_int64(st, AUDIT_at_ms),
                          sqlite3_column_int(st, AUDIT_kind),
                          col_text(st, AUDIT_lock),
                          col_text(st, AUDIT_owner),
                          col_u64(st, AUDIT_token),
                          col_text(st, AUDIT_key),
                          col_text(st, AUDIT_peer),
                          (uint8_t)sqlite3_column_int(st, AUDIT_object),
                          (uint8_t)sqlite3_column_int(st, AUDIT_mode),
                          col_text(st, AUDIT_reason),
                          NULL};
    return r->audit.lock && r->audit.owner && r->audit.key && r->audit.peer && r->audit.reason;
}

/* One descriptor per kind: a kind missing here is a compile error
 * (SQL_KIND_<KIND> undefined), so none can be forgotten. */
#define SQL_KIND_OF(P, TABLE, WHERE, ORDER, COUNTER, NAMES, member)                                                \
    {TABLE, P##_COLUMNS, P##_NCOLUMNS, P##_NKEY, WHERE, ORDER, COUNTER, NAMES, bind_##member, read_##member}
#define SQL_KIND_LOCK SQL_KIND_OF(LOCK, "lockspace", "token = 0", NULL, LOCK_last_token, true, lock)
/* Leases in the table's own order (its key: no sort at start-up), so by token within each name. */
#define SQL_KIND_HOLDER SQL_KIND_OF(HOLDER, "lockspace", "token <> 0", "kind, name, token", HOLDER_token, false, holder)
#define SQL_KIND_VALUE SQL_KIND_OF(VALUE, "lock_values", NULL, NULL, -1, false, value)
#define SQL_KIND_FENCE SQL_KIND_OF(FENCE, "fences", NULL, NULL, -1, false, fence)
#define SQL_KIND_GUARD_MARK SQL_KIND_OF(GUARD_MARK, "guard_marks", NULL, NULL, -1, false, guard_mark)
#define SQL_KIND_FLOOR SQL_KIND_OF(FLOOR, "fence_floors", NULL, NULL, -1, false, floor)
#define SQL_KIND_ENDED SQL_KIND_OF(ENDED, "lease_history", NULL, "seq", -1, false, ended)
#define SQL_KIND_REVOKED SQL_KIND_OF(REVOKED, "revoked", NULL, NULL, -1, false, revoked)
#define SQL_KIND_AUDIT SQL_KIND_OF(AUDIT, "audit", NULL, "seq", -1, false, audit)

const SqlKind SQL_KINDS[REC_KINDS] = {
#define SQL_KIND_ENTRY(K, member, type) [REC_##K] = SQL_KIND_##K,
    STORE_RECORD_KINDS(SQL_KIND_ENTRY)
#undef SQL_KIND_ENTRY
};
