/*
 * s3err — answers of an S3 route in S3's format: every error as
 * <Error><Code>..</Code><Message>..</Message>..</Error> with a code an SDK
 * shows, and the store's own errors rewritten so that no answer names the
 * store's endpoint, bucket or key prefix.
 *
 * Codes: a stale token is 409 StaleFencingToken (the message names the token
 * and the fence); a write that met another writer 409
 * ConditionalRequestConflict; a bad signature 403 SignatureDoesNotMatch (a
 * credential scope of another region 400 AuthorizationHeaderMalformed, or
 * AuthorizationQueryParametersError, the route's in <Region>); no
 * lease or key 403 AccessDenied; shares and a busy lock 503 SlowDown with
 * Retry-After; a closed route 503 ServiceUnavailable (writes) or 502
 * (reads); a request the guard does not forward 400 InvalidRequest or
 * InvalidArgument (ArgumentName: the header or "path"), 405
 * MethodNotAllowed, 501 NotImplemented. Each error also has LeasegateError
 * (the JSON API's code: stale_token, ...) and, where known, Lock, Token and
 * Fence.
 */
#ifndef LEASEGATE_S3ERR_H
#define LEASEGATE_S3ERR_H

#include <stdbool.h>
#include <stddef.h>

#include "guard/guardroute.h"
#include "leasegate/request.h"

struct curl_slist;

/* RequestGuard.reply_error of S3 routes. extra may carry "s3_code" and
 * "s3_status" to choose S3's code and status over the mapping. */
void s3err_reply(Request *req, int code, void *extra, const char *message);
/* The store's error answer (status >= 300, body as gathered), in the
 * client's terms: its code and message, unless the message names the
 * store's bucket, endpoint or key prefix (then S3's usual message for the
 * code). */
void s3err_from_store(Request *req, const GuardRoute *route, long status, const char *body, size_t len);

#endif
