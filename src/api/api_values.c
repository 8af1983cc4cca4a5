/*
 * api_values — a lock's value (issue 40): PUT /v1/locks/NAME/value, which
 * only the lease that holds the lock now as its writer may make, and GET
 * /v1/locks/NAME/value. The value is JSON, kept as its writer sent it
 * (rawjson.h), at most --max-value-bytes; it outlives the writer's lease
 * (the next holder reads the last one's checkpoint) until a holder writes
 * another, or null. Its bytes count against the key and the peer that wrote
 * it (quota.h, max_value_bytes). A write is durable before it is answered
 * (the answer waits for its batch, http.h), moves the lock's watch index,
 * and is an event and an audit row (value_set).
 *
 * A write may carry a request_id (as an acquire does). The value remembers
 * the request_ids of the last VALWRITES_MAX writes of the grant that wrote it
 * (valwrites.h; with the value, durable, across restarts): a retry of one of
 * them, or its first attempt arriving late, with the same request_id, value
 * and API key, by the same lease while it still holds the lock as its
 * writer, is answered what that write was (200, its own version, the token)
 * and writes nothing (locktab_value_write); with another value or from
 * another key it is 409 request_id_reused, and writes nothing either. A
 * retry of an older write of the lease is not recognised, and with an
 * if_version it gets 409 version_mismatch (the value moved on), never
 * writing over the newer one.
 *
 * Why a stale lease can never write: the check that the lease holds the
 * lock and the write itself are one call of the lock table
 * (locktab_set_value), on the one thread that owns it, at one instant; a
 * lease that ran out is ended first. Consul's unchecked KV write, which this
 * replaces, is the gap it closes.
 */
#include <string.h>

#include <nettle/sha2.h>

#include "api/api.h"
#include "api/body.h"
#include "api/jsonw.h"
#include "api/quota.h"
#include "api/trail.h"

static const char *const WHY[] = {
    [REASON_UNKNOWN] = "unknown",   [REASON_EXPIRED] = "expired", [REASON_SUPERSEDED] = "superseded",
    [REASON_RELEASED] = "released", [REASON_REVOKED] = "revoked",
};

/* The value's fields, as every answer about it has them. */
static void value_fields(JsonW *w, const Lock *lock)
{
    const LockValue *v = lock ? &lock->value : NULL;
    jsonw_int(w, "value_version", v ? (int64_t)v->version : 0);
    if (v && v->version)
        jsonw_int(w, "value_token", (int64_t)v->token);
    else
        jsonw_raw(w, "value_token", "null");
}

static void reply_written(Request *req, JsonW *w)
{
    size_t len;
    char *text = jsonw_end_new(w, &len);
    http_reply_json_text(req, 200, text, len);
}

/* 200: what the write that made `version` answers (it, or a repeat of it). */
static void reply_version(Request *req, uint64_t version, uint64_t token)
{
    JsonW w;
    jsonw_begin(&w);
    jsonw_str(&w, "name", req->arg);
    jsonw_int(&w, "value_version", (int64_t)version);
    jsonw_int(&w, "token", (int64_t)token);
    reply_written(req, &w);
}

_Static_assert(REQUEST_ID_MAX_BYTES == VALWRITE_ID_MAX, "a value write remembers any request_id the API takes");

/* ValueWrite.digest: SHA-256 of the writing key's name (none: empty; a
 * name is never empty and has no NUL), a NUL, and the value's text as sent
 * ("null" for null), cut to VALWRITE_DIGEST_BYTES. */
static void write_digest(const char *key, const char *text, uint8_t out[VALWRITE_DIGEST_BYTES])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, key ? strlen(key) + 1 : 1, (const uint8_t *)(key ? key : ""));
    text = text ? text : "null";
    sha256_update(&ctx, strlen(text), (const uint8_t *)text);
    sha256_digest(&ctx, VALWRITE_DIGEST_BYTES, out);
}

/* 409 request_id_reused: a remembered write of this grant has this request_id, and another value or key. */
static void reply_reused(Request *req, const char *request_id, const ValueWrite *was, const LockValue *v)
{
    req->srv->metrics.value_refused[2]++;
    http_reply_error(req, ERR_REQUEST_ID_REUSED,
                     json_pack("{s:s, s:s, s:I, s:I}", "name", req->arg, "request_id", request_id, "value_version",
                               (json_int_t)v->version, "value_token", (json_int_t)v->token),
                     "request_id '%s' names this lease's write of version %llu of lock '%s', which wrote another "
                     "value or came from another API key: a retry sends the same value from the same key, and "
                     "another write needs a request_id of its own; nothing was written",
                     request_id, (unsigned long long)was->version, req->arg);
}

/* 409 stale_token: the lease does not hold the lock as its writer now. */
static void reply_stale(Request *req, const uint8_t *lease, const Holder *reader)
{
    Server *s = req->srv;
    const Lock *lock = locktab_get(s->locks, KIND_LOCK, req->arg);
    const char *reason = reader ? "read_lease" : WHY[locktab_why_not(s->locks, KIND_LOCK, req->arg, lease)];
    s->metrics.value_refused[0]++;
    json_t *extra = json_pack("{s:s, s:s, s:I, s:o}", "name", req->arg, "reason", reason, "value_version",
                              (json_int_t)(lock ? lock->value.version : 0), "value_token",
                              lock && lock->value.version ? json_integer((json_int_t)lock->value.token) : json_null());
    http_reply_error(req, ERR_STALE_TOKEN, extra,
                     "this lease does not hold lock '%s' as its writer now (%s): only the current writer may "
                     "write its value, which is unchanged",
                     req->arg, reader ? "it is a read lease" : reason);
}

void api_set_value(Request *req)
{
    static const char *const FIELDS[] = {"lease", "value", "if_version", "request_id", NULL};
    Server *s = req->srv;
    if (!body_check_name(req, "name", req->arg))
        return;
    json_t *obj = body_object_new(req, FIELDS);
    if (!obj)
        return;
    uint8_t lease[LEASE_ID_BYTES];
    bool present, given;
    char *text = NULL;
    json_int_t if_version = 0;
    const char *request_id;
    if (!body_lease(req, obj, true, lease, &present) ||
        !body_json(req, obj, "value", s->cfg.max_value_bytes, &given, &text) ||
        !body_int(req, obj, "if_version", 0, INT64_MAX, 0, false, &if_version) ||
        !body_string(req, obj, "request_id", REQUEST_ID_MAX_BYTES, false, &request_id))
        goto out;
    if (!given) {
        http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "value"),
                           "field 'value' is required (null clears the value)");
        goto out;
    }
    /* One instant for the checks and the write: a lease that holds now holds for both. */
    Now now = clock_now();
    const Holder *h = locktab_held_by(s->locks, KIND_LOCK, req->arg, lease, &now);
    if (!h || h->mode != MODE_WRITE) {
        reply_stale(req, lease, h);
        goto out;
    }
    const Lock *lock = locktab_get(s->locks, KIND_LOCK, req->arg);
    const LockValue *v = &lock->value;
    const char *key = req->access.key ? req->access.key->name : NULL;
    uint8_t digest[VALWRITE_DIGEST_BYTES] = {0};
    if (request_id)
        write_digest(key, text, digest);
    /* Before the version: a repeat's if_version is the one its first write moved on from. */
    const ValueWrite *was = locktab_value_write(v, h, request_id);
    if (was && memcmp(was->digest, digest, VALWRITE_DIGEST_BYTES) == 0) {
        s->metrics.value_replays++;
        reply_version(req, was->version, v->token);
        goto out;
    }
    if (was) {
        reply_reused(req, request_id, was, v);
        goto out;
    }
    bool check = json_object_get(obj, "if_version") != NULL;
    if (check && (uint64_t)if_version != v->version) {
        s->metrics.value_refused[1]++;
        http_reply_error(req, ERR_VERSION_MISMATCH,
                         json_pack("{s:s, s:I, s:o}", "name", req->arg, "value_version", (json_int_t)v->version,
                                   "value_token", v->version ? json_integer((json_int_t)v->token) : json_null()),
                         "lock '%s''s value is at version %llu, not %lld: read it again", req->arg,
                         (unsigned long long)v->version, (long long)if_version);
        goto out;
    }
    Charge old = v->charge, charge;
    size_t old_bytes = v->text ? strlen(v->text) : 0, bytes = text ? strlen(text) : 0;
    if (!quota_admit_value(req, &old, old_bytes, bytes, &charge))
        goto out;
    ValueArgs args = {text, check, (uint64_t)if_version, key, charge, request_id, request_id ? digest : NULL};
    LockResult r = locktab_set_value(s->locks, req->arg, lease, &args, &now, &lock);
    if (r != LOCK_OK) { /* out of memory (the checks above held at this instant) */
        quota_value_counted(s, &charge, bytes, -1);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry later");
        goto out;
    }
    quota_value_counted(s, &old, old_bytes, -1);
    s->metrics.value_writes++;
    trail_note_of(s, req, AUDIT_VALUE_SET, AUDIT_OF_LOCK, AUDIT_MODE_WRITE, req->arg, h->owner, h->token);
    reply_version(req, lock->value.version, lock->value.token);
out:
    free(text);
    json_decref(obj);
}

void api_get_value(Request *req)
{
    Server *s = req->srv;
    if (!body_check_name(req, "name", req->arg))
        return;
    /* While etcd refuses writes, only a name no batch not yet durable touches (http.h). */
    if (s->stalled && commit_touches(s->commit, KIND_LOCK, req->arg)) {
        http_reply_stalled(req);
        return;
    }
    http_stall_ok(req);
    const Lock *lock = locktab_get(s->locks, KIND_LOCK, req->arg);
    JsonW w;
    jsonw_begin(&w);
    jsonw_str(&w, "name", req->arg);
    jsonw_raw(&w, "value", lock && lock->value.text ? lock->value.text : "null");
    value_fields(&w, lock);
    reply_written(req, &w);
}
