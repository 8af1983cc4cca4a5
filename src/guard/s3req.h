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
 * CopyObject (a PUT with x-amz-copy-source) is a write of its destination
 * with the same steps as a PUT, its source an object the client could GET
 * through the route (s3copy.h): the store gets a copy with the
 * destination's precondition, the token as its fence, metadata directive
 * REPLACE (so the source's fence never comes along: with the client's
 * COPY, the guard carries the source's metadata over itself) and the source
 * pinned to the ETag its HEAD gave. A 412 of the store that the destination
 * does not explain (it is as the prepare step read it) is the source's: 412
 * PreconditionFailed. UploadPartCopy is an UploadPart of a source's bytes,
 * its source read (and pinned) the same way. GetObjectTagging is a read.
 *
 * DELETE writes a tombstone instead of dropping the object, so that the
 * fence stays: the same steps as a PUT, with the body S3_TOMBSTONE_BODY
 * (s3list.h) and the metadata leasegate-deleted, answered 204. GET and HEAD
 * of a tombstone answer 404 NoSuchKey, listings leave it out, and a later
 * PUT (a holder's with a token at or above the fence) replaces it. (A
 * delete of the store's own, even a conditional one, would take the fence
 * with the object: a stale holder's PUT with If-None-Match: * could then
 * create it again.)
 *
 * Forwarded headers are an allow-list (s3req_keep_read, s3req_keep_write;
 * docs/fencing.md has it); any other x-amz-* header is refused with its
 * reason, and so are the client's own preconditions on a PUT (the guard sets
 * them), a PUT without Content-Length (411), query parameters the guard does
 * not know, S3 operations it does not forward (501 NotImplemented), a
 * presigned URL of Signature Version 2 (400 InvalidRequest) and the probe
 * key (400). A client's x-amz-meta-fencing-token is dropped. Every
 * error is S3's XML (s3err.h), and none names the store's URL.
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

/* What an S3 client asks for. */
typedef enum S3Op {
    S3_OP_NONE,          /* refused: answered */
    S3_OP_READ,          /* GetObject, HeadObject */
    S3_OP_READ_TAGGING,  /* GetObjectTagging: GET ?tagging, a read */
    S3_OP_PUT,           /* PutObject */
    S3_OP_DELETE,        /* DeleteObject: a tombstone */
    S3_OP_COPY,          /* CopyObject: PUT with x-amz-copy-source, a write of the destination */
    S3_OP_LOCATION,      /* GetBucketLocation */
    S3_OP_HEAD_BUCKET,   /* HeadBucket */
    S3_OP_CREATE_BUCKET, /* CreateBucket: it is there */
    S3_OP_LIST_V1,       /* ListObjects */
    S3_OP_LIST_V2,       /* ListObjectsV2 */
    S3_OP_MP_CREATE,     /* CreateMultipartUpload: POST ?uploads */
    S3_OP_MP_PART,       /* UploadPart: PUT ?partNumber=N&uploadId=U */
    S3_OP_MP_PART_COPY,  /* UploadPartCopy: the same with x-amz-copy-source */
    S3_OP_MP_COMPLETE,   /* CompleteMultipartUpload: POST ?uploadId=U */
    S3_OP_MP_ABORT,      /* AbortMultipartUpload: DELETE ?uploadId=U */
    S3_OP_MP_LIST_PARTS, /* ListParts: GET ?uploadId=U */
} S3Op;

/* The operation, after the refusals that the request's head decides (see
 * above); S3_OP_NONE after answering. `keys` says whether --auth-file is on
 * (then a Bearer Authorization is leasegate's, and dropped). */
S3Op s3req_classify(Request *req, const GuardRoute *route, const char *method, bool keys);
/* Does the request carry a SigV4 signature: an Authorization header, or a
 * presigned URL's X-Amz-* query (s3auth.h)? */
bool s3req_signed(Request *req);
/* The response-* query parameters a GetObject or HeadObject may carry, each
 * overriding the answer's header of its name (response-content-disposition:
 * Content-Disposition), sorted as SigV4 sorts a query; NULL-terminated. A
 * read forwards them to the store; on another method S3 ignores them, and
 * the guard does not forward them. */
extern const char *const S3REQ_OVERRIDES[];
/* What a GetObject or HeadObject forwards of its query: partNumber (one part
 * of an object uploaded in parts, as S3 answers it; without it the whole
 * object would come back where a part was asked for) and the overrides,
 * sorted as SigV4 sorts a query; NULL-terminated. */
extern const char *const S3REQ_READ_QUERY[];
/* A read's overrides are allowed: none is there, or the request is not
 * anonymous (its signature was checked with a lease, or --auth-file is on, so
 * an API key came). Answers S3's 400 InvalidRequest otherwise: S3 takes them
 * only on a signed request, so that a link anyone can make does not turn an
 * object into, say, text/html served from the gateway's origin. */
bool s3req_overrides_allowed(Request *req, bool checked);
/* The answer hooks of a client's call (proxy_call_on_answer): errors are
 * rewritten (s3err_from_store), tombstones read as 404 NoSuchKey, a
 * tombstone's written as 204. ud is the route. */
ProxyAnswerAction s3req_read_head(void *ud, long status, const struct curl_slist *headers);
/* Do the store's answer headers say the object is the guard's tombstone? */
bool s3req_tombstone(const struct curl_slist *headers);
ProxyAnswerAction s3req_write_head(void *ud, long status, const struct curl_slist *headers);
ProxyAnswerAction s3req_delete_head(void *ud, long status, const struct curl_slist *headers);
void s3req_read_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                         size_t len, bool complete);
/* A copy's (CopyObject, UploadPartCopy): its answer, gathered, since S3 may
 * send an error in a 200's body once the copy has begun: that is the error
 * it names, never a success. A result passes with its version and
 * encryption headers. ud is the route. */
ProxyAnswerAction s3req_copy_head(void *ud, long status, const struct curl_slist *headers);
void s3req_copy_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                         size_t len, bool complete);
void s3req_delete_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                           size_t len, bool complete);
/* The client headers a read / a write passes on (ProxyHeaders.keep). */
bool s3req_keep_read(const char *name, size_t len);
bool s3req_keep_write(const char *name, size_t len);
bool s3req_keep_none(const char *name, size_t len); /* a tombstone's: none of the client's */
/* A CopyObject's: with metadata directive COPY (the source's metadata and
 * content headers are the guard's to carry over), or REPLACE (the client's
 * own, as a PUT's). Never x-amz-copy-source, its -if-match or the directive,
 * which the guard sets. */
bool s3req_keep_copy(const char *name, size_t len);
bool s3req_keep_copy_replace(const char *name, size_t len);
/* An UploadPartCopy's: its range and the client's conditions on the source
 * but x-amz-copy-source-if-match (the guard's). */
bool s3req_keep_part_copy(const char *name, size_t len);
/* A CompleteMultipartUpload's: its content type, checksums and SSE-C keys. */
bool s3req_keep_complete(const char *name, size_t len);
/* An aws-chunked write's: its Content-Encoding is rewritten without aws-chunked. */
bool s3req_keep_write_unencoded(const char *name, size_t len);
/* Signs a call of `route` (a ProxyConfigure; ud is an S3Sign), by libcurl,
 * or by the guard (s3sign.h) when method and url are set and a line is
 * "Name;" (an empty header, which libcurl 7.88 signs as the name "name;",
 * and the store refuses): then all its headers must be in already. */
typedef struct S3Sign {
    S3 *s3;
    const GuardRoute *route;
    const char *method, *url; /* the call's, or NULL: libcurl signs */
} S3Sign;
bool s3req_sign(void *ud, void *curl_easy, struct curl_slist **headers);

/* The state of req's write to `url` with `token` under `lock`: owned by the
 * request (req->guard->s3), freed at its end. NULL when out of memory. */
S3Write *s3req_write_new(S3 *s3, Proxy *proxy, Request *req, const GuardRoute *route, const char *url,
                         const char *lock, uint64_t token);
void s3req_write_free(S3Write *w);
/* The write's own call (`method` to `call_url`, with its query), signed by
 * its prepare step once its last header is in (s3req_sign), not before.
 * False when out of memory. */
bool s3req_write_signs(S3Write *w, const char *method, const char *call_url);
/* The write's prepare step (a GuardPrepare; ud is the S3Write). */
bool s3req_prepare(void *ud, GuardWrite *gw);
/* The write is a CompleteMultipartUpload; if_match_ok: the store honours
 * If-Match on it (s3_route_mpu_if_match). Without that, it may only create
 * an object (its prepare step answers 501 when the object exists). */
void s3req_write_completes(S3Write *w, bool if_match_ok);
/* The write is a CopyObject of the source at `source_url` (the store's;
 * HEADed in the prepare step, after the destination: a tombstone or no
 * object is 404 NoSuchKey, and the copy is pinned to the ETag read with
 * x-amz-copy-source-if-match), named `source` to the client; carry: the
 * metadata directive is COPY, and the source's metadata and content
 * headers go with it (never its fence). False when out of memory. */
bool s3req_write_copies(S3Write *w, const char *source_url, const char *source, bool carry);
/* The copy is an UploadPartCopy to `part_url` (the call's URL, with its
 * query): its prepare step reads the source only, a part has no
 * precondition of its own, and the store's answer is passed on. False when
 * out of memory. */
bool s3req_write_copies_part(S3Write *w, const char *part_url);
/* Its confirm step, right before the end leaves (guardq_set_confirm): the
 * object read again must have the ETag, fence and Last-Modified the prepare
 * step read. */
bool s3req_confirm(void *ud, GuardWrite *gw);
/* The client's request is complete: true when the store refused the PUT's
 * precondition (412, 409) and the write answers the client itself (after
 * reading the object again); false to pass the store's answer on. */
bool s3req_final(S3Write *w);

#endif
