/*
 * api_fence — POST /v1/fence/{resource}: a backend asks whether a write
 * carrying `token` may proceed. Accepted tokens raise the resource's mark; the
 * raised mark is recorded for commit before it is applied, and the reply
 * (held by the HTTP layer until that commit is durable) never reveals a mark
 * that could be lost. A token above the highest ever issued is refused: it
 * cannot come from a grant, and accepting it would lock every real token out.
 */
#include "api/api.h"
#include "api/body.h"
#include "api/events.h"
#include "api/quota.h"
#include "api/trail.h"

#define TOKEN_MAX ((json_int_t)INT64_MAX)

void api_fence(Request *req)
{
    static const char *const FIELDS[] = {"token", NULL};
    Server *s = req->srv;
    if (!body_check_name(req, "resource", req->arg))
        return;
    json_t *obj = body_object_new(req, FIELDS);
    if (!obj)
        return;
    json_int_t token;
    if (!body_int(req, obj, "token", 1, TOKEN_MAX, 0, true, &token)) {
        json_decref(obj);
        return;
    }
    json_decref(obj);
    uint64_t issued = locktab_last_token(s->locks);
    if ((uint64_t)token > issued) {
        s->metrics.fence_rejected++;
        http_reply_error(req, ERR_BAD_REQUEST,
                         json_pack("{s:s, s:s, s:I, s:I}", "field", "token", "resource", req->arg, "token", token,
                                   "last_token", (json_int_t)issued),
                         "token %lld was never issued (the last token issued is %llu)", (long long)token,
                         (unsigned long long)issued);
        return;
    }
    if (revoked_has(s->revoked, (uint64_t)token)) {
        s->metrics.fence_rejected++;
        trail_note(s, req, AUDIT_FENCE_REFUSED, req->arg, "", (uint64_t)token);
        http_reply_error(req, ERR_STALE_TOKEN,
                         json_pack("{s:s, s:I, s:I, s:b}", "resource", req->arg, "token", token, "max_token",
                                   (json_int_t)fence_max(s->fence, req->arg), "revoked", 1),
                         "token %lld belonged to a lease an admin force-released", (long long)token);
        return;
    }
    /* A new resource: the key's and the peer's share of them. */
    bool known = fence_known(s->fence, req->arg);
    Charge charge = {NULL, NULL};
    if (!known && !quota_admit_fence(req, &charge))
        return;
    Now now = clock_now();
    uint64_t max;
    FenceResult r = fence_check_charged(s->fence, req->arg, (uint64_t)token, &now, &charge, &max);
    quota_fenced(s, &charge, !known && fence_known(s->fence, req->arg) ? +1 : 0);
    if (r == FENCE_ACCEPTED && (uint64_t)token > max) {
        if (!commit_fence(s->commit, req->arg, (uint64_t)token))
            r = FENCE_NOMEM;
        else
            fence_raise(s->fence, req->arg, (uint64_t)token);
        if (r == FENCE_ACCEPTED)
            events_note(s, AUDIT_FENCE_RAISED, req->arg, "", (uint64_t)token);
    }
    switch (r) {
    case FENCE_ACCEPTED:
        s->metrics.fence_accepted++;
        http_reply_json_new(req, 200,
                            json_pack("{s:s, s:b, s:I}", "resource", req->arg, "accepted", 1, "max_token", token));
        break;
    case FENCE_STALE:
        s->metrics.fence_rejected++;
        trail_note(s, req, AUDIT_FENCE_REFUSED, req->arg, "", (uint64_t)token);
        http_reply_error(req, ERR_STALE_TOKEN,
                         json_pack("{s:s, s:I, s:I}", "resource", req->arg, "token", token, "max_token",
                                   (json_int_t)max),
                         "token %lld is older than %llu, the highest seen for '%s'", (long long)token,
                         (unsigned long long)max, req->arg);
        break;
    case FENCE_OVERLOADED:
    case FENCE_NOMEM:
        http_reply_error(req, ERR_OVERLOADED, NULL, "%s",
                         r == FENCE_NOMEM ? "out of memory; retry later"
                                          : "too many fence resources (--max-fences); idle ones are forgotten "
                                            "after --forget-idle-after");
        break;
    }
}
