/*
 * s3 — what the guard's S3 routes share (--guard PREFIX=s3://BUCKET...): the
 * credentials its requests are signed with (SigV4: libcurl's
 * CURLOPT_AWS_SIGV4), and the proof that each route's store honours
 * preconditions.
 *
 * Fail closed, never the server: each S3 route proves that its store
 * honours preconditions on a probe key (KEYPREFIX/.leasegate-probe, refused
 * to clients): it creates the key with If-None-Match: *, then a PUT with a
 * wrong If-Match and a repeated If-None-Match: * must both get 412. A thread
 * per route does this, at start and then every --s3-probe-interval seconds
 * (every S3_RETRY_S while the route is closed), so that a store that takes
 * --guard-timeout to fail holds up no other route's probe; a probe in
 * flight ends within a second when the server stops. A route is:
 *  - closed until its store answers so (refused, unresolvable, timed out,
 *    no bucket, wrong credentials): writes get 503 with Retry-After, reads
 *    502; the rest of the server serves all along;
 *  - open once it does;
 *  - refused for good when the store answers 2xx to a failed precondition
 *    (it, or a proxy before it, ignores them, and a stale write could land):
 *    writes get 502, reads pass; it is not probed again until a reload
 *    (SIGHUP) or a restart. Never a fall back to unconditional writes.
 * Each change is one line on stderr; /healthz and /metrics show the state.
 * The probe also completes a multipart upload of the probe key with a wrong
 * If-Match: a store that ignores that precondition (moto does) lets
 * multipart uploads through the route create objects only. And it copies
 * the probe key onto itself with a wrong If-Match and with If-None-Match: *:
 * a store that ignores either (moto 5.2 does) gets no copy through the
 * route (501).
 *
 * The credentials come from --s3-credentials FILE (re-read on SIGHUP) or the
 * environment; they are copied under a mutex, because the probe threads sign
 * too. They are never logged.
 */
#ifndef LEASEGATE_S3_H
#define LEASEGATE_S3_H

#include <stdbool.h>
#include <stddef.h>

#include "guard/awscred.h"
#include "leasegate/config.h"

#define S3_PROBE_KEY ".leasegate-probe"
#define S3_RETRY_S 5      /* a closed route's probe interval (at most --s3-probe-interval) */
#define S3_FIRST_WAIT_S 2 /* how long the start waits for the first probes */

typedef enum S3RouteState { S3_ROUTE_CLOSED, S3_ROUTE_OPEN, S3_ROUTE_REFUSED } S3RouteState;

struct curl_slist;

typedef struct S3 S3;

S3 *s3_new(const Config *cfg); /* NULL when out of memory; does nothing yet */
void s3_free(S3 *s);           /* stops the probe threads */
/* At start, when there are S3 routes: loads the credentials and starts the
 * probe threads, waiting for their first round at most S3_FIRST_WAIT_S. False
 * with one line in err when the credentials do not load (the start stops);
 * a store that fails its probe only closes its route. */
bool s3_open(S3 *s, char *err, size_t errlen);
/* SIGHUP: --s3-credentials is read again, and every route probed again
 * (s3_reprobe). False with one line in err (the old credentials stay). True
 * without a file. */
bool s3_reload(S3 *s, char *err, size_t errlen);
/* Every route is probed again now, refused ones too. */
void s3_reprobe(S3 *s);
/* The probe's last word on the route (index into cfg->guards), and why in
 * detail (no URL of the store's: it is shown to anyone). */
S3RouteState s3_route_state(S3 *s, size_t route, char *detail, size_t detail_len);
/* Does the route's store honour If-Match on CompleteMultipartUpload (the
 * probe completes an upload of the probe key with a wrong one)? Without
 * it, a multipart upload through the route may only create an object. */
bool s3_route_mpu_if_match(const S3 *s, size_t route);
/* Does the route's store honour If-Match and If-None-Match on CopyObject's
 * destination, and x-amz-copy-source-if-match on its source (the probe
 * copies the probe key onto itself with a wrong If-Match, with
 * If-None-Match: *, then with a wrong source If-Match)? Without it, copies
 * (CopyObject and UploadPartCopy) through the route get 501: never an
 * unconditional copy, nor an unpinned one. */
bool s3_route_copy_if_match(const S3 *s, size_t route);
/* Seconds between the probes of a closed route (the writes' Retry-After). */
unsigned s3_retry_s(const S3 *s);
/* A copy of the credentials now. */
void s3_credentials(S3 *s, AwsCreds *out);

/* Signs a libcurl easy handle for `route` with `creds`: SigV4 for service
 * s3 in the route's region, the payload declared UNSIGNED-PAYLOAD (libcurl
 * 7.88 would sign the hash of an empty body for a streamed upload), and the
 * session token when there is one; lines go to *headers. False when out of
 * memory. libcurl 7.88 signs the URL's path and query as written: the URL
 * must hold them as S3 canonicalizes them (s3_object_url, sigv4_encode). */
bool s3_sign_easy(void *curl_easy, const GuardRoute *route, const AwsCreds *creds, struct curl_slist **headers);
/* The object's path at the store, "/BUCKET/KEYPREFIX/KEY", encoded as
 * s3_object_url's (what x-amz-copy-source names it by). Owned; NULL when out
 * of memory. */
char *s3_object_path(const GuardRoute *route, const char *rest);
/* The object's URL (path-style, percent-encoded as SigV4 expects) for
 * `rest`, the canonical path below the route's prefix (a query is left
 * out). Owned; NULL when
 * out of memory. */
char *s3_object_url(const GuardRoute *route, const char *rest);
/* Writes `in` to out as SigV4 wants a path (every byte but A-Za-z0-9-._~
 * and '/' as %XX, after decoding the %XX there): out holds 3 * strlen(in)
 * + 1 bytes. Returns its length. */
size_t s3_encode_path(char *out, const char *in);

#endif
