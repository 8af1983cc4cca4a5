/*
 * s3req — one client request through an S3 route of the guard.
 *
 * Clients authenticate to the guard with their lease (and API key), never
 * with S3 credentials: the guard signs every request itself (s3.h). Since
 * SigV4 signs every header sent, only an allow-list of the client's headers
 * goes on.
 *
 * Reads (GET, HEAD) pass through, signed. A write (PUT) whose lease holds the
 * bound lock turns its token into the object's own precondition: the fence
 * is the object's user metadata fencing-token (x-amz-meta-fencing-token). At
 * its turn the write HEADs the object for its ETag and fence: a token below
 * the fence gets 409 stale_token and nothing is written; otherwise the PUT
 * goes with If-Match on that ETag (If-None-Match: * when the object does not
 * exist) and the token as the new fence. The body is streamed, never
 * buffered, so a 412 or 409 from the store is not retried: the object is
 * read again, and the client gets 409 stale_token when its fence is now
 * above the token, 409 write_conflict otherwise (send it again with the same
 * lease). So the order no longer rests on the gateway's memory: a gateway
 * restarted with an empty table, another gateway, or a writer that reached
 * the store directly with a higher fencing-token all make a stale write fail
 * at the store.
 *
 * What the store's ETag cannot tell apart: a concurrent writer (not through
 * this gateway) that wrote the very same bytes leaves the ETag as it was, so
 * such a write between the HEAD and the PUT is not seen; it changed nothing
 * but the fence.
 *
 * Refused: a query string, x-amz-copy-source (a copy source would let a
 * tenant copy any object the gateway's credentials can read), the client's
 * own Authorization (without --auth-file) and x-amz-* headers other than
 * user metadata (400); preconditions of the client's own on a PUT (400: the
 * guard sets them); a PUT without Content-Length (411); DELETE (405: it
 * would drop the fence kept in the object, and a stale holder could create
 * the object again) and multipart uploads (405); the probe key (400). A
 * client's x-amz-meta-fencing-token is dropped.
 */
#ifndef LEASEGATE_S3REQ_H
#define LEASEGATE_S3REQ_H

#include <stdbool.h>
#include <stdint.h>

#include "guard/guardq.h"
#include "guard/guardroute.h"
#include "guard/proxy.h"
#include "guard/s3.h"

typedef struct S3Write S3Write;

/* The route's refusals that the request's head decides (see above); false
 * after answering. `keys` says whether --auth-file is on (then
 * Authorization is leasegate's, and dropped). */
bool s3req_acceptable(Request *req, const GuardRoute *route, const char *method, bool keys);
/* The client headers a read / a write passes on (ProxyHeaders.keep). */
bool s3req_keep_read(const char *name, size_t len);
bool s3req_keep_write(const char *name, size_t len);
/* Signs a call of `route` (a ProxyConfigure; ud is an S3Sign). */
typedef struct S3Sign {
    S3 *s3;
    const GuardRoute *route;
} S3Sign;
bool s3req_sign(void *ud, void *curl_easy, struct curl_slist **headers);

/* The state of req's write to `url` with `token` under `lock`: owned by the
 * request (req->guard->s3), freed at its end. NULL when out of memory. */
S3Write *s3req_write_new(S3 *s3, Proxy *proxy, Request *req, const GuardRoute *route, const char *url,
                         const char *lock, uint64_t token);
void s3req_write_free(S3Write *w);
/* The write's prepare step (a GuardPrepare; ud is the S3Write). */
bool s3req_prepare(void *ud, GuardWrite *gw);
/* The client's request is complete: true when the store refused the PUT's
 * precondition (412, 409) and the write answers the client itself (after
 * reading the object again); false to pass the store's answer on. */
bool s3req_final(S3Write *w);

#endif
