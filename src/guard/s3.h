/*
 * s3 — what the guard's S3 routes share (--guard PREFIX=s3://BUCKET...): the
 * credentials its requests are signed with (SigV4: libcurl's
 * CURLOPT_AWS_SIGV4), and the proof that each route's store honours
 * preconditions.
 *
 * Fail closed: at start each S3 route proves its store honours
 * preconditions on a probe key (KEYPREFIX/.leasegate-probe, refused to
 * clients): it creates the key with If-None-Match: *, then a PUT with a wrong
 * If-Match and a repeated If-None-Match: * must both get 412. A store (or a
 * proxy before it) that answers 2xx would let a stale write through, so the
 * start stops with a line naming the route. A thread of its own repeats the
 * probe every --s3-probe-interval seconds; while it fails, the route's
 * writes get 502. Never a fall back to unconditional writes.
 *
 * The credentials come from --s3-credentials FILE (re-read on SIGHUP) or the
 * environment; they are copied under a mutex, because the probe thread signs
 * too. They are never logged.
 */
#ifndef LEASEGATE_S3_H
#define LEASEGATE_S3_H

#include <stdbool.h>
#include <stddef.h>

#include "guard/awscred.h"
#include "leasegate/config.h"

#define S3_PROBE_KEY ".leasegate-probe"

struct curl_slist;

typedef struct S3 S3;

S3 *s3_new(const Config *cfg); /* NULL when out of memory; does nothing yet */
void s3_free(S3 *s);           /* stops the probe thread */
/* At start, when there are S3 routes: loads the credentials, probes every
 * route (blocking, each request at most --guard-timeout), and starts the
 * probe thread. False with one line in err otherwise (the start stops). */
bool s3_open(S3 *s, char *err, size_t errlen);
/* SIGHUP: --s3-credentials is read again. False with one line in err (the
 * old credentials stay). True without a file. */
bool s3_reload(S3 *s, char *err, size_t errlen);
/* The probe's last word on the route (index into cfg->guards). */
bool s3_route_ok(const S3 *s, size_t route);
/* A copy of the credentials now. */
void s3_credentials(S3 *s, AwsCreds *out);

/* Signs a libcurl easy handle for `route` with `creds`: SigV4 for service
 * s3 in the route's region, the payload declared UNSIGNED-PAYLOAD (libcurl
 * 7.88 would sign the hash of an empty body for a streamed upload), and the
 * session token when there is one; lines go to *headers. False when out of
 * memory. */
bool s3_sign_easy(void *curl_easy, const GuardRoute *route, const AwsCreds *creds, struct curl_slist **headers);
/* The object's URL (path-style, percent-encoded as SigV4 expects) for
 * `rest`, the canonical path below the route's prefix. Owned; NULL when
 * out of memory. */
char *s3_object_url(const GuardRoute *route, const char *rest);

#endif
