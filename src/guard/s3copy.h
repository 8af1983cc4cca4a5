/*
 * s3copy — the source of a CopyObject through an S3 route (a PUT with
 * x-amz-copy-source), as a request path of the client's.
 *
 * The copy is a write of its destination, fenced as a PUT is (s3req.h). Its
 * source must be an object the same client could GET through the same
 * route: the header names it as S3 does ("bucket/key" or "/bucket/key",
 * the key URL-encoded), which is read here as the path "/bucket/key" that a
 * GET of it would have; the guard then maps that path to the store as it
 * maps a GET's (never another route's, never the probe key, never outside
 * the route's key prefix) and applies a GET's read checks to it. A
 * ?versionId= is refused: a GET through the guard does not take one
 * either.
 *
 * Pure: no request, no store.
 */
#ifndef LEASEGATE_S3COPY_H
#define LEASEGATE_S3COPY_H

#include <stdbool.h>
#include <stddef.h>

typedef enum S3CopySource {
    S3COPY_PATH,      /* *path is the source's path */
    S3COPY_MALFORMED, /* not "bucket/key" */
    S3COPY_VERSION,   /* it names a version (?versionId=) */
} S3CopySource;

/* The path ("/bucket/key", the key as sent) of copy source `value` into
 * path (pathlen bytes). */
S3CopySource s3copy_source(const char *value, char *path, size_t pathlen);
/* Does a list of ETags as If-Match takes it ("*", or "\"a\", \"b\"", quotes
 * optional) match `etag`? */
bool s3copy_etag_matches(const char *list, const char *etag);
/* Is a response header of the source (`name`, len bytes) one a copy with
 * metadata directive COPY carries over: its user metadata but the fence and
 * leasegate's own (x-amz-meta-leasegate-*), and its content headers? */
bool s3copy_carried(const char *name, size_t len);

#endif
