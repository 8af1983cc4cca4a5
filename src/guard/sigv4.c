/* sigv4 — AWS Signature Version 4; see sigv4.h. */
#include "guard/sigv4.h"

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void to_hex(const uint8_t *d, size_t n, char *out)
{
    static const char HEX[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = HEX[d[i] >> 4];
        out[2 * i + 1] = HEX[d[i] & 15];
    }
    out[2 * n] = '\0';
}

static void hmac(const uint8_t *key, size_t keylen, const char *text, size_t len, uint8_t out[32])
{
    struct hmac_sha256_ctx ctx;
    hmac_sha256_set_key(&ctx, keylen, key);
    hmac_sha256_update(&ctx, len, (const uint8_t *)text);
    hmac_sha256_digest(&ctx, SHA256_DIGEST_SIZE, out);
}

void sigv4_key(const char *secret, const SigV4Auth *a, uint8_t key[32])
{
    char first[256];
    int n = snprintf(first, sizeof first, "AWS4%s", secret);
    uint8_t k[32];
    hmac((const uint8_t *)first, (size_t)n, a->date, strlen(a->date), k);
    hmac(k, 32, a->region, strlen(a->region), k);
    hmac(k, 32, a->service, strlen(a->service), k);
    hmac(k, 32, "aws4_request", 12, key);
    explicit_bzero(first, sizeof first);
    explicit_bzero(k, sizeof k);
}

void sigv4_hmac_hex(const uint8_t key[32], const char *text, size_t len, char *out)
{
    uint8_t d[32];
    hmac(key, 32, text, len, d);
    to_hex(d, 32, out);
}

void sigv4_sha256_hex(const void *data, size_t len, char *out)
{
    struct sha256_ctx ctx;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, len, data);
    sha256_digest(&ctx, sizeof d, d);
    to_hex(d, sizeof d, out);
}

bool sigv4_equal(const char *a, const char *b)
{
    size_t n = strlen(a);
    return n == strlen(b) && memeql_sec(a, b, n);
}

/* Copies the value of `name=` in the header (up to ',' or the end) into out. */
static bool field(const char *h, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    for (const char *p = h; (p = strstr(p, name)); p += n) {
        if (p != h && p[-1] != ' ' && p[-1] != ',')
            continue;
        const char *v = p + n;
        size_t len = strcspn(v, ", ");
        if (len >= outlen)
            return false;
        memcpy(out, v, len);
        out[len] = '\0';
        return true;
    }
    return false;
}

/* AKID/DATE/REGION/SERVICE/aws4_request (cred is cut up) into out's
 * access_key, date, region, service and scope. The fifth part is the rest,
 * so that one with more parts is no aws4_request (S3 refuses it). */
static bool credential(char *cred, SigV4Auth *out)
{
    char *parts[5];
    size_t np = 0;
    for (char *p = cred, *slash; np < 5; p = slash + 1) {
        parts[np++] = p;
        if (np == 5 || !(slash = strchr(p, '/')))
            break;
        *slash = '\0';
    }
    if (np != 5 || strcmp(parts[4], "aws4_request") || strlen(parts[1]) != 8 ||
        strspn(parts[1], "0123456789") != 8 || !*parts[0] || strlen(parts[0]) >= sizeof out->access_key ||
        !*parts[2] || strlen(parts[2]) >= sizeof out->region || strlen(parts[3]) >= sizeof out->service)
        return false;
    snprintf(out->access_key, sizeof out->access_key, "%s", parts[0]);
    snprintf(out->date, sizeof out->date, "%s", parts[1]);
    snprintf(out->region, sizeof out->region, "%s", parts[2]);
    snprintf(out->service, sizeof out->service, "%s", parts[3]);
    snprintf(out->scope, sizeof out->scope, "%s/%s/%s/aws4_request", out->date, out->region, out->service);
    return true;
}

static bool hex_signature(const char *s) { return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64; }

bool sigv4_parse(const char *authorization, SigV4Auth *out, const char **why)
{
    memset(out, 0, sizeof *out);
    static const char ALG[] = "AWS4-HMAC-SHA256 ";
    if (!authorization || strncmp(authorization, ALG, sizeof ALG - 1)) {
        *why = "not AWS4-HMAC-SHA256";
        return false;
    }
    const char *h = authorization + sizeof ALG - 1;
    char cred[512];
    if (!field(h, "Credential=", cred, sizeof cred) ||
        !field(h, "SignedHeaders=", out->signed_headers, sizeof out->signed_headers) ||
        !field(h, "Signature=", out->signature, sizeof out->signature) || strlen(out->signature) != 64) {
        *why = "it lacks Credential, SignedHeaders or a Signature of 64 hex digits";
        return false;
    }
    if (!credential(cred, out)) {
        *why = "its Credential is not ACCESS_KEY/YYYYMMDD/REGION/SERVICE/aws4_request";
        return false;
    }
    return true;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The byte at in[*i] of a query's name or value (in[0..n)), decoded: %XX
 * is its byte, a '+' a space (as S3 reads a query, and as the guard's HTTP
 * server parses the one it acts on: what is signed must be what is meant);
 * *i moves past it. */
static unsigned char query_byte(const char *in, size_t n, size_t *i)
{
    unsigned char c = (unsigned char)in[*i];
    if (c == '%' && *i + 2 < n && hexval(in[*i + 1]) >= 0 && hexval(in[*i + 2]) >= 0) {
        c = (unsigned char)(hexval(in[*i + 1]) * 16 + hexval(in[*i + 2]));
        *i += 2;
    } else if (c == '+') {
        c = ' ';
    }
    return c;
}

/* in[0..n) decoded (query_byte) into out (outlen bytes, NUL-terminated);
 * false when it does not fit or decodes to a NUL. */
static bool decode(const char *in, size_t n, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = (char)query_byte(in, n, &i);
        if (!c || o + 1 >= outlen)
            return false;
        out[o++] = c;
    }
    out[o] = '\0';
    return true;
}

/* A presigned URL's authentication parameters (X-Amz-Security-Token, a
 * session's, is signed like any other parameter: the lease has none). */
enum { Q_ALGORITHM, Q_CREDENTIAL, Q_DATE, Q_EXPIRES, Q_SIGNED_HEADERS, Q_SIGNATURE, Q_COUNT };
static const char *const QUERY_AUTH[Q_COUNT] = {"X-Amz-Algorithm", "X-Amz-Credential",    "X-Amz-Date",
                                                "X-Amz-Expires",   "X-Amz-SignedHeaders", SIGV4_QUERY_SIGNATURE};

/* Which of QUERY_AUTH the parameter named in[0..n) is (its name decoded),
 * or -1. */
static int query_auth(const char *in, size_t n)
{
    char name[32];
    if (!decode(in, n, name, sizeof name))
        return -1;
    for (int i = 0; i < Q_COUNT; i++)
        if (!strcmp(name, QUERY_AUTH[i]))
            return i;
    return -1;
}

bool sigv4_query_signed(const char *raw)
{
    for (const char *p = raw; *p;) {
        size_t len = strcspn(p, "&");
        int k = query_auth(p, strcspn(p, "=&"));
        if (k == Q_ALGORITHM || k == Q_CREDENTIAL || k == Q_SIGNATURE)
            return true;
        p += len;
        if (*p == '&')
            p++;
    }
    return false;
}

/* Does the ';'-separated list name `name`? */
static bool names(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ";");
        if (len == n && !strncmp(p, name, n))
            return true;
        p += len;
        if (*p == ';')
            p++;
    }
    return false;
}

bool sigv4_parse_query(const char *raw, SigV4Query *out, const char **why)
{
    memset(out, 0, sizeof *out);
    char v[Q_COUNT][sizeof out->auth.signed_headers];
    bool seen[Q_COUNT] = {false};
    for (const char *p = raw; *p;) {
        size_t len = strcspn(p, "&"), eq = strcspn(p, "=&");
        int k = query_auth(p, eq);
        if (k >= 0) {
            if (seen[k]) {
                *why = "an authentication parameter (X-Amz-*) is in the query twice";
                return false;
            }
            seen[k] = true;
            if (!decode(p + eq + (eq < len), eq < len ? len - eq - 1 : 0, v[k], sizeof v[k])) {
                *why = "an authentication parameter (X-Amz-*) of the query is too long";
                return false;
            }
        }
        p += len;
        if (*p == '&')
            p++;
    }
    for (int k = 0; k < Q_COUNT; k++) {
        if (!seen[k]) {
            *why = "query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
                   "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters";
            return false;
        }
    }
    if (strcmp(v[Q_ALGORITHM], "AWS4-HMAC-SHA256")) {
        *why = "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"";
        return false;
    }
    if (!credential(v[Q_CREDENTIAL], &out->auth)) {
        *why = "X-Amz-Credential is not ACCESS_KEY/YYYYMMDD/REGION/SERVICE/aws4_request";
        return false;
    }
    const char *d = v[Q_DATE];
    if (strlen(d) != 16 || strspn(d, "0123456789") != 8 || d[8] != 'T' || strspn(d + 9, "0123456789") != 6 ||
        d[15] != 'Z' || strncmp(d, out->auth.date, 8)) {
        *why = "X-Amz-Date must be YYYYMMDDTHHMMSSZ, of the day X-Amz-Credential names";
        return false;
    }
    memcpy(out->amz_date, d, sizeof out->amz_date); /* 16 characters and the NUL, checked above */
    const char *e = v[Q_EXPIRES];
    size_t elen = strlen(e);
    unsigned long expires = elen && elen <= 7 && strspn(e, "0123456789") == elen ? strtoul(e, NULL, 10) : 0;
    if (expires < 1 || expires > SIGV4_EXPIRES_MAX_S) {
        *why = "X-Amz-Expires must be a number of seconds from 1 to 604800 (a week)";
        return false;
    }
    out->expires_s = (unsigned)expires;
    const char *sh = v[Q_SIGNED_HEADERS];
    if (!names(sh, "host")) {
        *why = "X-Amz-SignedHeaders must name host";
        return false;
    }
    memcpy(out->auth.signed_headers, sh, strlen(sh) + 1); /* fits: v's rows are as long */
    if (!hex_signature(v[Q_SIGNATURE])) {
        *why = "X-Amz-Signature must be 64 lower-case hex digits";
        return false;
    }
    memcpy(out->auth.signature, v[Q_SIGNATURE], sizeof out->auth.signature); /* 64 digits and the NUL */
    return true;
}

char *sigv4_string_to_sign(const char *amz_date, const SigV4Auth *a, const char *canonical)
{
    char hash[SIGV4_HEX];
    sigv4_sha256_hex(canonical, strlen(canonical), hash);
    char *s;
    if (asprintf(&s, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date, a->scope, hash) < 0)
        return NULL;
    return s;
}

/* Appends c to out as SigV4 encodes a query's byte; returns the bytes written. */
static size_t encode_byte(char *out, unsigned char c)
{
    static const char HEX[] = "0123456789ABCDEF";
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
        out[0] = (char)c;
        return 1;
    }
    out[0] = '%';
    out[1] = HEX[c >> 4];
    out[2] = HEX[c & 15];
    return 3;
}

size_t sigv4_encode(char *out, const char *in, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += encode_byte(out + o, (unsigned char)in[i]);
    out[o] = '\0';
    return o;
}

/* Decodes in[0..n) (query_byte: a '+' is a space, so it is signed as %20,
 * and a plus is %2B) and encodes again as SigV4 does; appends to out. */
static size_t recode(char *out, const char *in, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += encode_byte(out + o, query_byte(in, n, &i));
    out[o] = '\0';
    return o;
}

/* "name=value" items by name, then by value, byte by byte (AWS's order). Not
 * strcmp of the whole items: '-', '.', the digits and an encoded byte's '%'
 * sort below '=', so "a-b=1" would go before "a=2". Names hold no '=' (it is
 * encoded). */
static int compare(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t xn = strcspn(x, "="), yn = strcspn(y, "=");
    int c = memcmp(x, y, xn < yn ? xn : yn);
    if (c || xn != yn)
        return c ? c : xn < yn ? -1 : 1;
    return strcmp(x + xn, y + yn);
}

char *sigv4_canonical_query(const char *raw, const char *omit)
{
    size_t n = strlen(raw), count = 1;
    for (const char *p = raw; *p; p++)
        count += *p == '&';
    char **items = calloc(count, sizeof *items);
    char *out = malloc(3 * n + count + 2);
    if (!items || !out) {
        free(items);
        free(out);
        return NULL;
    }
    size_t k = 0;
    bool ok = true;
    for (const char *p = raw; ok && *p;) {
        size_t len = strcspn(p, "&");
        if (len) {
            size_t eq = strcspn(p, "=&");
            char *item = malloc(3 * len + 2);
            if (!item) {
                ok = false;
                break;
            }
            size_t o = recode(item, p, eq < len ? eq : len);
            item[o++] = '=';
            if (omit && o - 1 == strlen(omit) && !strncmp(item, omit, o - 1)) {
                free(item);
            } else {
                recode(item + o, eq < len ? p + eq + 1 : p + len, eq < len ? len - eq - 1 : 0);
                items[k++] = item;
            }
        }
        p += len;
        if (*p == '&')
            p++;
    }
    qsort(items, k, sizeof *items, compare);
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < k; i++) {
        size_t l = strlen(items[i]);
        if (i)
            out[o++] = '&';
        memcpy(out + o, items[i], l + 1);
        o += l;
        free(items[i]);
    }
    free(items);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

void sigv4_chunk_sign(const uint8_t key[32], const char *amz_date, const SigV4Auth *a, const char *prev,
                      const char *chunk_sha256_hex, char *out)
{
    char empty[SIGV4_HEX];
    sigv4_sha256_hex("", 0, empty);
    char text[1024];
    int n = snprintf(text, sizeof text, "AWS4-HMAC-SHA256-PAYLOAD\n%s\n%s\n%s\n%s\n%s", amz_date, a->scope, prev, empty,
                     chunk_sha256_hex);
    sigv4_hmac_hex(key, text, (size_t)n, out);
}

void sigv4_trailer_sign(const uint8_t key[32], const char *amz_date, const SigV4Auth *a, const char *prev,
                        const char *trailer, size_t len, char *out)
{
    char hash[SIGV4_HEX];
    sigv4_sha256_hex(trailer, len, hash);
    char text[1024];
    int n = snprintf(text, sizeof text, "AWS4-HMAC-SHA256-TRAILER\n%s\n%s\n%s\n%s", amz_date, a->scope, prev, hash);
    sigv4_hmac_hex(key, text, (size_t)n, out);
}
