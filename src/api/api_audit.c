/*
 * api_audit — GET /v1/audit?lock=&key=&after=&limit= (admin): the audit
 * trail's rows after seq `after`, oldest first, of one lock (or fence
 * resource) when `lock` is given, of one API key when `key` is (`key=` with
 * no value: rows without a key); from memory (auditlog.h), which holds what
 * storage holds. Each key keeps its newest --audit-keep rows. `oldest` is the
 * smallest seq still kept (of that key, with `key`): a reader of one key whose
 * `after` is below oldest - 1 has missed rows of it to retention; across all
 * keys, rows of a busy key may be gone from between kept ones.
 */
#include <stdint.h>
#include <stdlib.h>

#include "api/api.h"
#include "api/body.h"
#include "api/query.h"
#include "core/auditlog.h"
#include "net/auth.h"

#define AUDIT_DEFAULT 100
#define AUDIT_MAX 1000

typedef struct Rows {
    json_t *rows;
    uint64_t last;
    bool failed;
} Rows;

static void add_row(void *ud, const AuditRow *r)
{
    Rows *out = ud;
    const char *mode = audit_mode_name(r->mode);
    json_t *j = out->failed ? NULL
                            : json_pack("{s:I, s:I, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:o, s:o}", "seq",
                                        (json_int_t)r->seq, "at_ms", (json_int_t)r->at_ms, "kind",
                                        audit_kind_name(r->kind), "lock", r->lock, "owner", r->owner, "token",
                                        (json_int_t)r->token, "key", r->key, "peer", r->peer, "type",
                                        audit_object_name(r->object), "mode", mode ? json_string(mode) : json_null(),
                                        "reason", r->reason && *r->reason ? json_string(r->reason) : json_null());
    if (!j || json_array_append_new(out->rows, j))
        out->failed = true;
    out->last = r->seq;
}

void api_audit(Request *req)
{
    Server *s = req->srv;
    const char *lock = http_query(req, "lock"), *key = http_query(req, "key");
    long long after, limit;
    if ((lock && !body_check_name(req, "lock", lock)) || !query_int(req, "after", 0, INT64_MAX, 0, &after) ||
        !query_int(req, "limit", 1, AUDIT_MAX, AUDIT_DEFAULT, &limit))
        return;
    if (key && *key && !auth_name_ok(key)) {
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "key"),
                         "query key must be an API key's name (1..%d of [A-Za-z0-9._-]), or empty for rows "
                         "without a key",
                         AUTH_NAME_MAX);
        return;
    }
    if (!auditlog_enabled(s->audit)) {
        http_reply_error(req, ERR_NOT_FOUND, NULL, "the audit trail is off (--audit-keep 0)");
        return;
    }
    Rows out = {json_array(), 0, false};
    bool more = out.rows && auditlog_list(s->audit, key, lock, (uint64_t)after, (size_t)limit, add_row, &out);
    if (!out.rows || out.failed) {
        json_decref(out.rows);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    http_reply_json_new(req, 200,
                        json_pack("{s:o, s:o, s:I}", "rows", out.rows, "next",
                                  more ? json_integer((json_int_t)out.last) : json_null(), "oldest",
                                  (json_int_t)auditlog_oldest(s->audit, key)));
}

typedef struct LockRows {
    const AuditRow **rows; /* borrowed from the ring; valid during this request's handler only */
    size_t n, cap;
    int object; /* the rows of a lock's or a semaphore's (a name may be both) */
    bool failed;
} LockRows;

static void keep_row(void *ud, const AuditRow *r)
{
    LockRows *l = ud;
    if ((r->kind != AUDIT_GRANTED && r->kind != AUDIT_RELEASED && r->kind != AUDIT_EXPIRED &&
         r->kind != AUDIT_REVOKED && r->kind != AUDIT_VALUE_SET) ||
        r->object != l->object)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        const AuditRow **p = realloc(l->rows, cap * sizeof *p);
        if (!p) {
            l->failed = true;
            return;
        }
        l->rows = p;
        l->cap = cap;
    }
    l->rows[l->n++] = r;
}

/* A lock's last writes of its value (value_set rows), newest first, up to limit. */
static json_t *values_new(const LockRows *rows, size_t limit)
{
    json_t *values = json_array();
    size_t shown = 0;
    for (size_t i = rows->n; values && i-- > 0 && shown < limit;) {
        const AuditRow *r = rows->rows[i];
        if (r->kind != AUDIT_VALUE_SET)
            continue;
        json_t *e = json_pack("{s:I, s:s, s:s, s:I}", "token", (json_int_t)r->token, "owner", r->owner, "key", r->key,
                              "at_ms", (json_int_t)r->at_ms);
        if (!e || json_array_append_new(values, e)) {
            json_decref(values);
            values = NULL;
        }
        shown++;
    }
    return values;
}

/* GET /v1/locks/{name}/history?limit= (and /v1/semaphores/...): the last
 * grants of the name, newest first, each with how it ended (null while held)
 * and a lock's mode, from the audit trail (so as far back as --audit-keep
 * reaches; `complete` says whether the trail reaches back past the oldest
 * grant shown); a lock's, its last writes of its value too (`values`). */
static void history(Request *req, int object)
{
    Server *s = req->srv;
    long long limit;
    if (!body_check_name(req, "name", req->arg) || !query_int(req, "limit", 1, AUDIT_MAX, 20, &limit))
        return;
    if (!auditlog_enabled(s->audit)) {
        http_reply_error(req, ERR_NOT_FOUND, NULL, "the audit trail is off (--audit-keep 0): no history is kept");
        return;
    }
    /* While etcd refuses writes, only a name no batch not yet durable touches (http.h). */
    if (s->stalled && commit_touches(s->commit, object == AUDIT_OF_SEMAPHORE ? KIND_SEMAPHORE : KIND_LOCK, req->arg)) {
        http_reply_stalled(req);
        return;
    }
    http_stall_ok(req);
    LockRows rows = {.object = object};
    auditlog_list(s->audit, NULL, req->arg, 0, SIZE_MAX, keep_row, &rows);
    json_t *grants = rows.failed ? NULL : json_array();
    size_t shown = 0;
    for (size_t i = rows.n; grants && i-- > 0 && shown < (size_t)limit;) {
        const AuditRow *g = rows.rows[i];
        if (g->kind != AUDIT_GRANTED)
            continue;
        const AuditRow *end = NULL;
        for (size_t j = i + 1; j < rows.n && !end; j++)
            if (rows.rows[j]->kind != AUDIT_GRANTED && rows.rows[j]->kind != AUDIT_VALUE_SET &&
                rows.rows[j]->token == g->token)
                end = rows.rows[j];
        json_t *e = json_pack("{s:I, s:s, s:s, s:I, s:o, s:o}", "token", (json_int_t)g->token, "owner", g->owner,
                              "key", g->key, "acquired_at_ms", (json_int_t)g->at_ms, "ended_at_ms",
                              end ? json_integer((json_int_t)end->at_ms) : json_null(), "how",
                              end ? json_string(audit_kind_name(end->kind)) : json_null());
        const char *mode = audit_mode_name(g->mode);
        if (e && object == AUDIT_OF_LOCK && json_object_set_new(e, "mode", mode ? json_string(mode) : json_null()))
            json_decref(e), e = NULL;
        if (!e || json_array_append_new(grants, e)) {
            json_decref(grants);
            grants = NULL;
        }
        shown++;
    }
    /* Complete: no row of the trail is missing, so none of this lock's
     * before the oldest grant shown either (rows go per key: any may be). */
    bool complete = auditlog_max_gone(s->audit) == 0 || (shown == (size_t)limit);
    json_t *values = object == AUDIT_OF_LOCK && grants ? values_new(&rows, (size_t)limit) : NULL;
    free(rows.rows);
    json_t *body = grants ? json_pack("{s:s, s:o, s:b}", "name", req->arg, "grants", grants, "complete", complete)
                          : NULL;
    if (body && object == AUDIT_OF_LOCK && json_object_set_new(body, "values", values))
        json_decref(body), body = NULL;
    else if (!body)
        json_decref(values);
    if (!body) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    http_reply_json_new(req, 200, body);
}

void api_lock_history(Request *req) { history(req, AUDIT_OF_LOCK); }
void api_semaphore_history(Request *req) { history(req, AUDIT_OF_SEMAPHORE); }
