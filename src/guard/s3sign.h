/*
 * s3sign — SigV4 for a request of the guard's whose headers libcurl 7.88
 * would sign wrong.
 *
 * libcurl 7.88 sorts the canonical headers as whole "name:value" lines, so
 * a name that another one extends comes after it ("x-amz-copy-source-if-
 * match:" before "x-amz-copy-source:", since '-' sorts before ':'), where
 * SigV4 sorts by name (the shorter first): a CopyObject pinned to its
 * source's ETag gets SignatureDoesNotMatch from S3 (and from moto). Such a
 * request is signed here instead, as the spec says, once its last header is
 * in: Host (set explicitly, so that what is signed is what is sent) and every
 * header line of the call, the payload UNSIGNED-PAYLOAD, and the session
 * token when there is one. Lines without a value (libcurl's "do not send")
 * are neither sent nor signed; a "Name;" line (libcurl's form of an empty
 * header, sent as "Name:") is signed with its empty value. A repeated
 * header's values are signed joined in the order of their lines.
 */
#ifndef LEASEGATE_S3SIGN_H
#define LEASEGATE_S3SIGN_H

#include <stdbool.h>
#include <time.h>

#include "guard/awscred.h"
#include "guard/guardroute.h"

struct curl_slist;

/* Appends to *headers the lines that sign `method` of `url` (the route's
 * endpoint, then a path and query as S3 canonicalizes them: s3_object_url,
 * sigv4_encode) at time `now`: Host,
 * x-amz-date, x-amz-content-sha256, x-amz-security-token and Authorization.
 * False when out of memory, or the URL is not the route's. */
bool s3sign_lines(const GuardRoute *route, const AwsCreds *creds, const char *method, const char *url, time_t now,
                  struct curl_slist **headers);

#endif
