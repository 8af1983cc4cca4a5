/*
 * s3list — an S3 route's bucket as its clients see it: the bucket is the
 * route's PREFIX (path-style: --guard /reports/=s3://my-bucket/pfx is bucket
 * "reports"), its keys the paths below it.
 *
 * Answered by the guard: GET ?location (the route's region), HEAD (200),
 * PUT (CreateBucket: 200, the bucket is there). Forwarded and rewritten:
 * ListObjectsV2 (?list-type=2) and ListObjects: the store is asked within
 * the route's key prefix (KEYPREFIX/ + the client's prefix, start-after,
 * marker), and the answer names the client's bucket and keys: the key
 * prefix cut off, the probe key and tombstones (deleted keys, s3req.h)
 * left out, and the store's account (Owner, Initiator) too. With
 * --auth-file, a key that reads only some names has the store asked about
 * those only (s3scope.h says why and how), and what comes back is still
 * filtered by them. A truncated ListObjects page's NextMarker is its last
 * entry. Keys come back URL-encoded when the client asked
 * (encoding-type=url).
 *
 * What cannot be hidden without reading every object: a listing's page may
 * hold fewer keys than max-keys (those left out), never more.
 */
#ifndef LEASEGATE_S3LIST_H
#define LEASEGATE_S3LIST_H

#include <stdbool.h>

#include "guard/guardroute.h"
#include "guard/s3.h"
#include "leasegate/request.h"

/* The tombstone the guard writes for a DELETE: this body, and the user
 * metadata leasegate-deleted (s3req.h). A listing knows one by its size and
 * ETag (the MD5 of the body, as S3 makes it for a single PUT without
 * SSE-KMS or SSE-C). */
#define S3_TOMBSTONE_BODY "leasegate tombstone: deleted through the guard; its fencing-token stays\n"
#define S3_TOMBSTONE_SIZE 72
#define S3_TOMBSTONE_ETAG "\"d41e0e1a251384961889d3185d2ce644\""
#define S3_TOMBSTONE_META "x-amz-meta-leasegate-deleted"

/* GET ?location, HEAD and PUT of the bucket: answered here. */
void s3list_answer_bucket(Request *req, const GuardRoute *route, const char *method, bool location);
/* What req's listing asks the store (s3scope.h): true with the client's
 * prefix to ask for into prefix (len bytes); false when the guard answered
 * (a page of its own, or 403). */
bool s3list_scope(Request *req, const GuardRoute *route, bool v2, char *prefix, size_t len);
/* The store's URL of a listing (v2: ListObjectsV2) for req, of `prefix`
 * (the client's name; the key prefix goes before it). Owned; NULL when out
 * of memory. */
char *s3list_url(Request *req, const GuardRoute *route, bool v2, const char *prefix);
/* The store's listing (status and body as gathered), rewritten for req. */
void s3list_reply(Request *req, const GuardRoute *route, bool v2, long status, const char *body, size_t len,
                  bool complete);
/* A multipart answer of the store (InitiateMultipartUploadResult,
 * CompleteMultipartUploadResult, ListPartsResult), rewritten for req:
 * Bucket, Key and Location in the client's terms; an error (also one in a
 * 200's body, as S3 may send for a Complete) as s3err_from_store. True
 * when it answered 200 (the upload id into upload_id when given). */
bool s3list_rewrite(Request *req, const GuardRoute *route, long status, const char *body, size_t len, bool complete,
                    char *upload_id, size_t id_len);
/* The client's name of the bucket: the route's prefix without its slashes. */
void s3list_bucket_name(const GuardRoute *route, char *out, size_t outlen);

#endif
