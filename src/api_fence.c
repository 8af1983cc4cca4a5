/*
 * api_fence — POST /v1/fence/{resource}: a backend asks whether a write
 * carrying `token` may proceed. Accepted tokens raise the resource's mark; the
 * raised mark is recorded for commit, and the reply (held by the HTTP layer
 * until that commit is durable) never reveals a mark that could be lost.
 */
#include "leasegate/api.h"
#include "leasegate/body.h"

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
    if (body_int(req, obj, "token", 1, TOKEN_MAX, 0, true, &token)) {
        uint64_t max;
        bool raised;
        FenceResult r = fence_check(s->fence, req->arg, (uint64_t)token, &max, &raised);
        if (r == FENCE_ACCEPTED && raised && !commit_fence(s->commit, req->arg, max))
            r = FENCE_NOMEM;
        switch (r) {
        case FENCE_ACCEPTED:
            s->metrics.fence_accepted++;
            http_reply_json_new(req, 200,
                                json_pack("{s:s, s:b, s:I}", "resource", req->arg, "accepted", 1, "max_token",
                                          (json_int_t)max));
            break;
        case FENCE_STALE:
            s->metrics.fence_rejected++;
            http_reply_error(req, ERR_STALE_TOKEN,
                             json_pack("{s:s, s:I, s:I}", "resource", req->arg, "token", token, "max_token",
                                       (json_int_t)max),
                             "token %lld is older than %llu, the highest seen for '%s'", (long long)token,
                             (unsigned long long)max, req->arg);
            break;
        case FENCE_OVERLOADED:
        case FENCE_NOMEM:
            http_reply_error(req, ERR_OVERLOADED, NULL, "%s",
                             r == FENCE_NOMEM ? "out of memory; retry later" : "too many fence resources");
            break;
        }
    }
    json_decref(obj);
}
