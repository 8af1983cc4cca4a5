/*
 * s3auth — an unmodified S3 client's request through an S3 route: AWS
 * Signature Version 4 made with a lease. The access key id is the lease's
 * token (decimal), the secret access key the lease itself; the lease never
 * crosses the wire.
 *
 * The holder is found by the token among the holders of the lock the object
 * is bound to: a token that holds no lease of that lock (unknown, ended, or
 * another lock's) is refused as stale (409 StaleFencingToken naming it).
 * Then the signature is checked with that lease, over the path as S3
 * canonicalizes it (decoded, encoded once: a ':' bare or as %3a is signed
 * as %3A; 403 SignatureDoesNotMatch otherwise; a date more than 15 minutes
 * off, 403 RequestTimeTooSkewed; an x-amz-* header that SignedHeaders
 * does not name, 403 AccessDenied, as S3 answers: it could have been added
 * on the way), and the write goes on as one with Fencing-Lease would: the guard re-signs it
 * for the store with its own credentials.
 *
 * A presigned URL (SigV4 in the query: X-Amz-Algorithm, X-Amz-Credential,
 * X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature) is the
 * same signature made ahead of time: its canonical request is the one above
 * with the query less X-Amz-Signature and UNSIGNED-PAYLOAD as the payload's
 * hash. It holds from X-Amz-Date (one more than 15 minutes ahead of the
 * gateway's clock: 403 AccessDenied "Request is not yet valid") to
 * X-Amz-Date + X-Amz-Expires (1 to 604800 seconds; after it, 403
 * AccessDenied "Request has expired"), and only while its token holds the
 * lock, as a header's signature: a URL of a released lease is stale. Its
 * body is unsigned; a malformed query is 400
 * AuthorizationQueryParametersError.
 *
 * The body, as x-amz-content-sha256 says: UNSIGNED-PAYLOAD passes; a
 * SHA-256 is checked over the body before its last byte is released;
 * aws-chunked bodies (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, and the
 * -TRAILER and STREAMING-UNSIGNED-PAYLOAD-TRAILER variants) are decoded
 * as they arrive, every chunk's signature checked, the trailing checksum
 * (CRC32, SHA1 or SHA256) and the trailer's signature checked, and the
 * store gets the decoded body (x-amz-decoded-content-length bytes). A body
 * that fails any of these is cut off before its last byte: the store
 * applies nothing.
 */
#ifndef LEASEGATE_S3AUTH_H
#define LEASEGATE_S3AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/leaseid.h"
#include "guard/proxy.h"
#include "leasegate/request.h"

typedef struct S3Auth S3Auth;

#define S3AUTH_SKEW_S 900

typedef enum S3AuthResult {
    S3AUTH_OK,
    S3AUTH_REFUSED, /* answered */
} S3AuthResult;

/* Checks req's signature with the lease of `lock` whose token is the
 * access key id; fills lease and token. `read`: a read (the lease may be a
 * reader's). Answers otherwise. *out (owned by the caller, s3auth_free)
 * follows the body. */
S3AuthResult s3auth_check(Request *req, const char *method, const char *lock, bool read, uint8_t lease[LEASE_ID_BYTES],
                          uint64_t *token, S3Auth **out);
/* Does the token of req's signature (header or query) hold `lock` (any
 * mode)? */
bool s3auth_token_holds(Request *req, const char *lock);
/* The signature's form, as S3 checks it before the signature itself: a
 * presigned URL's query parses and it is within its time, and either
 * signature's credential scope names the route's region and s3 (true too
 * for a request that is not signed); answers otherwise. For a read that
 * passes unchecked (its token holds no lease of the lock, without
 * --auth-file): an expired URL, or one of another region, is refused all
 * the same. */
bool s3auth_form_valid(Request *req);
void s3auth_free(S3Auth *a);
/* A write's x-amz-checksum-crc32, -sha1 or -sha256 header: the guard
 * computes that checksum over the body too and refuses a body that does not
 * match it before its last byte leaves (400 BadDigest), so that a store that
 * checks none (moto) still gets none wrong. Makes *a (a plain one, for an
 * unsigned request) when needed. False when out of memory (answered). */
bool s3auth_header_checksum(Request *req, S3Auth **a);
/* The body's length as the store gets it: x-amz-decoded-content-length for
 * aws-chunked, else content_length. -1 (answered) when it is missing. */
int64_t s3auth_store_length(Request *req, const S3Auth *a, int64_t content_length);
/* Is the body aws-chunked (Content-Encoding to be taken off)? */
bool s3auth_chunked(const S3Auth *a);
/* The client's body as it arrives, into the call: decoded, hashed and
 * checked; leaves in *size what the call could not take yet. False when
 * the body is refused (answered; the caller stops the call). */
bool s3auth_upload(S3Auth *a, Request *req, ProxyCall *call, const char *data, size_t *size);
/* The body is complete: true when every check passed; else answered. */
bool s3auth_body_done(S3Auth *a, Request *req);

#endif
