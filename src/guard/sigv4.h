/*
 * sigv4 — AWS Signature Version 4 as an S3 server checks it: the
 * Authorization header's parts, or a presigned URL's query parameters, the
 * canonical query of a request as received, the signing key, and the
 * signatures of aws-chunked chunks; and the encoding of the queries the
 * guard sends its store, which libcurl 7.88 signs as written. HMAC-SHA256 and SHA-256 are nettle's.
 * Pure: no request, no clock.
 *
 * (docs.aws.amazon.com, "Signature Version 4 signing process", "Signature
 * calculations for the Authorization header: transferring payload in
 * multiple chunks" and "Authenticating Requests: Using Query Parameters").
 */
#ifndef LEASEGATE_SIGV4_H
#define LEASEGATE_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIGV4_HEX 65 /* a SHA-256 in hex, with its NUL */

/* An Authorization header: AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/
 * SERVICE/aws4_request, SignedHeaders=a;b;c, Signature=HEX. */
typedef struct SigV4Auth {
    char access_key[128];
    char date[9];        /* YYYYMMDD */
    char region[64];
    char service[32];
    char scope[256];     /* DATE/REGION/SERVICE/aws4_request */
    char signed_headers[2048]; /* as sent: lower-case names joined by ';' */
    char signature[SIGV4_HEX];
} SigV4Auth;

/* Parses the header. False with why (static text) otherwise. */
bool sigv4_parse(const char *authorization, SigV4Auth *out, const char **why);

#define SIGV4_EXPIRES_MAX_S 604800 /* a week: the longest X-Amz-Expires S3 takes */
#define SIGV4_QUERY_SIGNATURE "X-Amz-Signature" /* the one parameter the canonical query leaves out */

/* A presigned URL's query: X-Amz-Algorithm=AWS4-HMAC-SHA256, X-Amz-Credential
 * (as the header's Credential), X-Amz-Date, X-Amz-Expires,
 * X-Amz-SignedHeaders (naming host) and X-Amz-Signature. Its payload is
 * always UNSIGNED-PAYLOAD. */
typedef struct SigV4Query {
    SigV4Auth auth;
    char amz_date[17];  /* YYYYMMDDTHHMMSSZ, of the credential's day */
    unsigned expires_s; /* 1..SIGV4_EXPIRES_MAX_S */
} SigV4Query;

/* Does the raw query ("a=1&b", without '?') carry a presigned URL's
 * authentication: X-Amz-Algorithm, X-Amz-Credential or X-Amz-Signature? */
bool sigv4_query_signed(const char *raw);
/* Parses those parameters of the raw query, each there once. False with
 * why (static text) otherwise. */
bool sigv4_parse_query(const char *raw, SigV4Query *out, const char **why);

/* The signing key of `secret` for a's scope. */
void sigv4_key(const char *secret, const SigV4Auth *a, uint8_t key[32]);
/* hex(HMAC-SHA256(key, text)) into out (SIGV4_HEX bytes). */
void sigv4_hmac_hex(const uint8_t key[32], const char *text, size_t len, char *out);
/* hex(SHA-256(data)) into out (SIGV4_HEX bytes). */
void sigv4_sha256_hex(const void *data, size_t len, char *out);

/* The string to sign of a request whose canonical request is `canonical`
 * and whose X-Amz-Date is amz_date. Owned; NULL when out of memory. */
char *sigv4_string_to_sign(const char *amz_date, const SigV4Auth *a, const char *canonical);
/* The canonical query of a raw query string ("a=1&b" without '?'): each
 * name and value decoded, encoded again as SigV4 wants, sorted; without the
 * parameter named `omit` when it is not NULL (a presigned URL's canonical
 * query leaves out SIGV4_QUERY_SIGNATURE). Owned; NULL when out of memory. */
char *sigv4_canonical_query(const char *raw, const char *omit);
/* The string a chunk's signature signs (aws-chunked, signed): prev is the
 * previous signature (the seed: the request's). */
void sigv4_chunk_sign(const uint8_t key[32], const char *amz_date, const SigV4Auth *a, const char *prev,
                      const char *chunk_sha256_hex, char *out);
/* The same for the trailer of a signed aws-chunked body (its canonical
 * trailer lines, "name:value\n" each). */
void sigv4_trailer_sign(const uint8_t key[32], const char *amz_date, const SigV4Auth *a, const char *prev,
                        const char *trailer, size_t len, char *out);
/* in[0..n) encoded as SigV4 canonicalizes a query's name or value, the
 * bytes as they are (nothing decoded): every byte but A-Za-z0-9-_.~ as %XX,
 * upper-case hex. So S3 signs '/' as %2F, ':' as %3A, a space as %20. out
 * holds 3n+1 bytes; NUL-terminated; returns its length. A store URL's
 * query written so (each name once, in sigv4_canonical_query's order) is
 * its own canonical query: what libcurl 7.88 signs, the query as written,
 * is then what the store computes. */
size_t sigv4_encode(char *out, const char *in, size_t n);
/* Constant-time comparison of two hex signatures. */
bool sigv4_equal(const char *a, const char *b);

#endif
