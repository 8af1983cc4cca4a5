/* s3auth — SigV4 with a lease; see s3auth.h. */
#include "guard/s3auth.h"

#include <errno.h>
#include <nettle/base64.h>
#include <nettle/sha1.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <uuid/uuid.h>
#include <zlib.h>

#include "core/fence.h"
#include "core/locktab.h"
#include "guard/guardroute.h"
#include "guard/s3.h"
#include "guard/sigv4.h"
#include "net/http.h"

typedef enum Payload { PAY_UNSIGNED, PAY_SHA256, PAY_CHUNKED_SIGNED, PAY_CHUNKED_UNSIGNED } Payload;
typedef enum Sum { SUM_NONE, SUM_CRC32, SUM_SHA1, SUM_SHA256 } Sum;
typedef enum ChunkState { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE } ChunkState;

struct S3Auth {
    SigV4Auth auth;
    uint8_t key[32];
    char amz_date[32];
    char prev[SIGV4_HEX]; /* the last signature: the request's, then each chunk's */
    Payload payload;
    bool trailer_signed;
    char payload_sha256[SIGV4_HEX];
    struct sha256_ctx body; /* the whole body (PAY_SHA256) */
    struct sha256_ctx chunk; /* the current chunk's data (PAY_CHUNKED_SIGNED) */
    /* The trailing checksum (x-amz-trailer). */
    Sum sum;
    char sum_name[64];
    char sum_expected[128]; /* from the x-amz-checksum-* header, when the body's checksum came there */
    uLong crc;
    struct sha1_ctx sha1;
    struct sha256_ctx sha256;
    /* The aws-chunked decoder. */
    ChunkState st;
    char line[1024]; /* a chunk's size line, or the trailer, being read */
    size_t line_len;
    uint64_t left;  /* bytes of the chunk's data still to come */
    bool last;      /* the zero-length chunk came */
    char chunk_sig[SIGV4_HEX];
    uint64_t decoded; /* data bytes passed on */
    uint64_t declared; /* x-amz-decoded-content-length */
    char trailer[2048]; /* the trailer's lines as received */
    size_t trailer_len;
};

static void refuse(Request *req, ErrCode code, const char *s3code, unsigned status, const char *fmt, const char *detail)
{
    req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
    http_reply_error(req, code, json_pack("{s:s, s:i}", "s3_code", s3code, "s3_status", (int)status), fmt, detail);
}

/* Collects the values of one header (every line of it, joined by ','). */
typedef struct Collect {
    const char *name;
    char *out;
    size_t len, cap;
    bool found, overflow;
} Collect;

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    Collect *c = cls;
    if (strcasecmp(key, c->name))
        return MHD_YES;
    /* Trimmed, runs of spaces made one. */
    if (c->found && c->len + 1 < c->cap)
        c->out[c->len++] = ',';
    c->found = true;
    const char *v = value ? value : "";
    while (*v == ' ' || *v == '\t')
        v++;
    bool space = false;
    for (; *v; v++) {
        if (*v == ' ' || *v == '\t') {
            space = true;
            continue;
        }
        if (space && c->len + 1 < c->cap)
            c->out[c->len++] = ' ';
        space = false;
        if (c->len + 1 < c->cap)
            c->out[c->len++] = *v;
        else
            c->overflow = true;
    }
    c->out[c->len] = '\0';
    return MHD_YES;
}

/* The query of req as received, without its '?' ("" when none). */
static const char *raw_query(const Request *req)
{
    const char *q = strchr(req->raw_uri, '?');
    return q ? q + 1 : "";
}

/* The canonical request of req, as the client signed it: `path` its
 * canonical URI, `payload` is its last line (the payload's hash, or
 * UNSIGNED-PAYLOAD), `omit` a query parameter left out (a presigned URL's
 * signature) or NULL. Owned; NULL with why. */
static char *canonical_request(Request *req, const char *method, const S3Auth *a, const char *path,
                               const char *payload, const char *omit, const char **why)
{
    char *query = sigv4_canonical_query(raw_query(req), omit);
    size_t cap = 16384;
    char *headers = malloc(cap);
    if (!query || !headers) {
        free(query);
        free(headers);
        *why = "out of memory";
        return NULL;
    }
    size_t hl = 0;
    headers[0] = '\0';
    char names[sizeof a->auth.signed_headers];
    snprintf(names, sizeof names, "%s", a->auth.signed_headers);
    for (char *save = NULL, *n = strtok_r(names, ";", &save); n; n = strtok_r(NULL, ";", &save)) {
        char value[8192];
        Collect c = {n, value, 0, sizeof value, false, false};
        value[0] = '\0';
        MHD_get_connection_values(req->conn, MHD_HEADER_KIND, collect, &c);
        if (!c.found || c.overflow || hl + strlen(n) + c.len + 3 > cap) {
            free(query);
            free(headers);
            *why = !c.found ? "a header it names in SignedHeaders is not in the request" : "a signed header is too long";
            return NULL;
        }
        hl += (size_t)snprintf(headers + hl, cap - hl, "%s:%s\n", n, value);
    }
    char *out;
    int n = asprintf(&out, "%s\n%s\n%s\n%s\n%s\n%s", method, path, query, headers,
                     a->auth.signed_headers, payload);
    free(query);
    free(headers);
    if (n < 0) {
        *why = "out of memory";
        return NULL;
    }
    return out;
}

/* The first x-amz-* header of the request that its signature does not
 * cover (S3 refuses those too): a header that no signature covers could
 * have been added on the way, and would change what the store does
 * (metadata, encryption, storage class, tagging). */
typedef struct Unsigned {
    const char *signed_headers;
    const char *name; /* the first unsigned one, or NULL */
} Unsigned;

static bool signs(const char *signed_headers, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = signed_headers; *p;) {
        size_t len = strcspn(p, ";");
        if (len == n && !strncasecmp(p, name, n))
            return true;
        p += len;
        if (*p == ';')
            p++;
    }
    return false;
}

static enum MHD_Result find_unsigned(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    (void)value;
    Unsigned *u = cls;
    if (strncasecmp(key, "x-amz-", 6) || signs(u->signed_headers, key))
        return MHD_YES;
    u->name = key;
    return MHD_NO;
}

/* X-Amz-Date (YYYYMMDDTHHMMSSZ) as Unix seconds; -1 when malformed. */
static int64_t amz_time(const char *d)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!d || strlen(d) != 16 || !strptime(d, "%Y%m%dT%H%M%SZ", &tm))
        return -1;
    return (int64_t)timegm(&tm);
}

/* The holder of `lock` whose token is `token`, or NULL. */
static const Holder *holder_by_token(Server *s, const char *lock, uint64_t token)
{
    const Lock *l = locktab_get(s->locks, KIND_LOCK, lock);
    for (const Holder *h = l ? locktab_holder(l) : NULL; h; h = locktab_next_holder(h))
        if (h->token == token)
            return h;
    return NULL;
}

/* Which checksum a header or trailer name is; SUM_NONE for one the guard does not compute. */
static Sum sum_named(const char *name)
{
    return !strcasecmp(name, "x-amz-checksum-crc32")    ? SUM_CRC32
           : !strcasecmp(name, "x-amz-checksum-sha1")   ? SUM_SHA1
           : !strcasecmp(name, "x-amz-checksum-sha256") ? SUM_SHA256
                                                         : SUM_NONE;
}

static void sum_start(S3Auth *a, Sum sum, const char *name)
{
    a->sum = sum;
    snprintf(a->sum_name, sizeof a->sum_name, "%s", name);
    if (sum == SUM_CRC32)
        a->crc = crc32(0L, Z_NULL, 0);
    else if (sum == SUM_SHA1)
        sha1_init(&a->sha1);
    else if (sum == SUM_SHA256)
        sha256_init(&a->sha256);
}

static bool setup_payload(S3Auth *a, Request *req)
{
    const char *p = http_header(req, "x-amz-content-sha256");
    if (!p) {
        refuse(req, ERR_BAD_REQUEST, "InvalidRequest", 400, "%s",
               "a signed request needs x-amz-content-sha256 (UNSIGNED-PAYLOAD, the body's SHA-256, or STREAMING-...)");
        return false;
    }
    if (!strcmp(p, "UNSIGNED-PAYLOAD")) {
        a->payload = PAY_UNSIGNED;
    } else if (!strcmp(p, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")) {
        a->payload = PAY_CHUNKED_SIGNED;
    } else if (!strcmp(p, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")) {
        a->payload = PAY_CHUNKED_SIGNED;
        a->trailer_signed = true;
    } else if (!strcmp(p, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")) {
        a->payload = PAY_CHUNKED_UNSIGNED;
    } else if (strlen(p) == 64 && strspn(p, "0123456789abcdef") == 64) {
        a->payload = PAY_SHA256;
        snprintf(a->payload_sha256, sizeof a->payload_sha256, "%s", p);
        sha256_init(&a->body);
    } else {
        refuse(req, ERR_BAD_REQUEST, "InvalidArgument", 400, "x-amz-content-sha256 '%.80s' is not one S3 knows", p);
        return false;
    }
    const char *trailer = http_header(req, "x-amz-trailer");
    if (trailer) {
        if ((a->payload != PAY_CHUNKED_SIGNED || !a->trailer_signed) && a->payload != PAY_CHUNKED_UNSIGNED) {
            refuse(req, ERR_BAD_REQUEST, "InvalidRequest", 400, "%s",
                   "x-amz-trailer needs a -TRAILER x-amz-content-sha256");
            return false;
        }
        Sum sum = sum_named(trailer);
        if (sum != SUM_NONE) {
            sum_start(a, sum, trailer);
        } else {
            refuse(req, ERR_BAD_REQUEST, "InvalidRequest", 400,
                   "the guard verifies a trailing checksum of CRC32, SHA1 or SHA256, not %.60s: have the client "
                   "compute one of those",
                   trailer);
            return false;
        }
    }
    if (a->payload == PAY_CHUNKED_SIGNED || a->payload == PAY_CHUNKED_UNSIGNED) {
        const char *d = http_header(req, "x-amz-decoded-content-length");
        if (!d || !fence_parse_token(d, &a->declared)) {
            if (d && !strcmp(d, "0"))
                a->declared = 0;
            else {
                refuse(req, ERR_LENGTH_REQUIRED, "MissingContentLength", 411, "%s",
                       "an aws-chunked body needs x-amz-decoded-content-length");
                return false;
            }
        }
        a->st = CH_SIZE;
    }
    return true;
}

/* The UTC time of Unix seconds t as S3 writes it in an error
 * (2026-11-29T08:00:00Z). */
static void iso_time(int64_t t, char *out, size_t outlen)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || !strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, outlen, "%lld", (long long)t);
}

/* 403 AccessDenied for a presigned URL used outside its time, in S3's
 * words, with S3's X-Amz-Expires, Expires and ServerTime. */
static void refuse_time(Request *req, const char *message, const SigV4Query *q, int64_t signed_s, int64_t now_s)
{
    char expires[32], server[32], seconds[16];
    iso_time(signed_s + q->expires_s, expires, sizeof expires);
    iso_time(now_s, server, sizeof server);
    snprintf(seconds, sizeof seconds, "%u", q->expires_s);
    req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
    http_reply_error(req, ERR_FORBIDDEN,
                     json_pack("{s:s, s:i, s:[[s,s],[s,s],[s,s]]}", "s3_code", "AccessDenied", "s3_status", 403,
                               "s3_elements", "X-Amz-Expires", seconds, "Expires", expires, "ServerTime", server),
                     "%s", message);
}

/* The credential's scope names the route's region and s3, as S3 requires:
 * the signing key is derived from them, so without this a client
 * configured for another region would be checked in its own region and let
 * through. Answers as S3 does otherwise (400, the region expected in
 * <Region>: an SDK that follows S3's region redirects signs again with it). */
static bool scope_ok(Request *req, const SigV4Auth *a, bool query)
{
    const GuardRoute *route = req->guard ? req->guard->route : NULL;
    const char *code = query ? "AuthorizationQueryParametersError" : "AuthorizationHeaderMalformed";
    const char *what = query ? "Error parsing the X-Amz-Credential parameter" : "The authorization header is malformed";
    const char *q = query ? "\"" : "'";
    if (route && strcmp(a->region, route->region) != 0) {
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_BAD_REQUEST,
                         json_pack("{s:s, s:i, s:[[s,s]]}", "s3_code", code, "s3_status", 400, "s3_elements", "Region",
                                   route->region),
                         "%s; the region %s%.64s%s is wrong; expecting %s%s%s", what, q, a->region, q, q,
                         route->region, q);
        /* A HEAD's error has no body: botocore (download_file, head_object)
         * reads the region to redirect to from this header, as S3 sends it. */
        http_add_header(req, "x-amz-bucket-region", route->region);
        return false;
    }
    if (strcmp(a->service, "s3") != 0) {
        char message[160];
        snprintf(message, sizeof message, "%s; incorrect service %s%.32s%s. This endpoint belongs to %ss3%s.", what, q,
                 a->service, q, q, q);
        refuse(req, ERR_BAD_REQUEST, code, 400, "%s", message);
        return false;
    }
    return true;
}

/* A presigned URL's query parsed into q, and its time checked: from its
 * X-Amz-Date (a clock up to S3AUTH_SKEW_S behind the client's aside) to
 * X-Amz-Date + X-Amz-Expires, as S3 takes it. Answers otherwise. */
static bool presigned(Request *req, SigV4Query *q)
{
    const char *why = "";
    if (!sigv4_parse_query(raw_query(req), q, &why)) {
        refuse(req, ERR_BAD_REQUEST, "AuthorizationQueryParametersError", 400, "%s", why);
        return false;
    }
    if (!scope_ok(req, &q->auth, true))
        return false;
    const char *a = http_header(req, "Authorization");
    if (a && !strncmp(a, "AWS4-HMAC-SHA256 ", 17)) {
        refuse(req, ERR_BAD_REQUEST, "InvalidArgument", 400, "%s",
               "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the Authorization "
               "header should be specified");
        return false;
    }
    int64_t t = amz_time(q->amz_date), now_s = clock_now().wall_ms / 1000;
    if (t < 0) {
        refuse(req, ERR_BAD_REQUEST, "AuthorizationQueryParametersError", 400, "%s",
               "X-Amz-Date must be YYYYMMDDTHHMMSSZ");
        return false;
    }
    if (t > now_s + S3AUTH_SKEW_S) {
        refuse_time(req, "Request is not yet valid", q, t, now_s);
        return false;
    }
    if (now_s > t + q->expires_s) {
        refuse_time(req, "Request has expired", q, t, now_s);
        return false;
    }
    return true;
}

/* The Authorization header parsed into a, its scope the route's. Answers
 * otherwise. */
static bool header_parsed(Request *req, SigV4Auth *a)
{
    const char *why = "";
    if (!sigv4_parse(http_header(req, "Authorization"), a, &why)) {
        refuse(req, ERR_BAD_REQUEST, "AuthorizationHeaderMalformed", 400, "the Authorization header: %s", why);
        return false;
    }
    return scope_ok(req, a, false);
}

bool s3auth_form_valid(Request *req)
{
    if (sigv4_query_signed(raw_query(req))) {
        SigV4Query q;
        return presigned(req, &q);
    }
    const char *authorization = http_header(req, "Authorization");
    SigV4Auth a;
    return !authorization || strncmp(authorization, "AWS4-HMAC-SHA256 ", 17) || header_parsed(req, &a);
}

/* The signature of the Authorization header parsed into a, its date
 * within S3AUTH_SKEW_S of the gateway's clock. Answers otherwise. */
static bool header_signed(Request *req, S3Auth *a)
{
    if (!header_parsed(req, &a->auth))
        return false;
    const char *date = http_header(req, "x-amz-date");
    int64_t t = amz_time(date);
    Now now = clock_now();
    if (t < 0 || strncmp(date, a->auth.date, 8)) {
        refuse(req, ERR_FORBIDDEN, "AccessDenied", 403, "%s",
               "a signed request needs X-Amz-Date (YYYYMMDDTHHMMSSZ), of the day its credential scope names");
        return false;
    }
    if (t * 1000 > now.wall_ms + S3AUTH_SKEW_S * 1000 || t * 1000 < now.wall_ms - S3AUTH_SKEW_S * 1000) {
        refuse(req, ERR_FORBIDDEN, "RequestTimeTooSkewed", 403, "%s",
               "the request's X-Amz-Date is more than 15 minutes from the gateway's clock");
        return false;
    }
    snprintf(a->amz_date, sizeof a->amz_date, "%s", date);
    return true;
}

/* Does a's signature sign req (SIGNED_OK, SIGNED_NOT; SIGNED_UNCHECKED with
 * why when the canonical request cannot be made)? Its canonical URI is the
 * path as S3 canonicalizes it (decoded, then every byte but A-Za-z0-9-._~
 * and '/' encoded once, upper-case: s3_encode_path), so a bare ':' and a
 * lower-case %3a are signed as %3A. Only that form: a signature over the
 * path as sent where it differs (curl 7.88's --aws-sigv4 signs a bare ':')
 * is one S3 refuses too, and the guard takes what S3 takes. */
typedef enum SignedOver { SIGNED_OK, SIGNED_NOT, SIGNED_UNCHECKED } SignedOver;

static SignedOver signed_over(Request *req, const char *method, const S3Auth *a, const char *payload,
                              const char *omit, const char **why)
{
    size_t plen = strcspn(req->raw_uri, "?");
    char *raw = strndup(req->raw_uri, plen), *path = malloc(3 * plen + 1);
    char *canonical = NULL, *sts = NULL;
    if (raw && path) {
        s3_encode_path(path, raw);
        canonical = canonical_request(req, method, a, path, payload, omit, why);
    } else {
        *why = "out of memory";
    }
    if (canonical) {
        sts = sigv4_string_to_sign(a->amz_date, &a->auth, canonical);
        if (!sts)
            *why = "out of memory";
    }
    free(raw);
    free(path);
    free(canonical);
    if (!sts)
        return SIGNED_UNCHECKED;
    char sig[SIGV4_HEX];
    sigv4_hmac_hex(a->key, sts, strlen(sts), sig);
    free(sts);
    return sigv4_equal(sig, a->auth.signature) ? SIGNED_OK : SIGNED_NOT;
}

S3AuthResult s3auth_check(Request *req, const char *method, const char *lock, bool read, uint8_t lease[LEASE_ID_BYTES],
                          uint64_t *token, S3Auth **out)
{
    Server *s = req->srv;
    *out = NULL;
    S3Auth *a = calloc(1, sizeof *a);
    if (!a) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return S3AUTH_REFUSED;
    }
    const char *why = "";
    bool query = sigv4_query_signed(raw_query(req));
    if (query) {
        SigV4Query q;
        if (!presigned(req, &q))
            goto fail;
        a->auth = q.auth;
        snprintf(a->amz_date, sizeof a->amz_date, "%s", q.amz_date);
    } else if (!header_signed(req, a)) {
        goto fail;
    }
    if (!fence_parse_token(a->auth.access_key, token)) {
        refuse(req, ERR_FORBIDDEN, "InvalidAccessKeyId", 403,
               "the access key id '%.40s' is not a fencing token: use the lease's token as the access key id and "
               "the lease as the secret access key",
               a->auth.access_key);
        goto fail;
    }
    const Holder *h = lock[0] ? holder_by_token(s, lock, *token) : NULL;
    if (!h || (!read && h->mode == MODE_READ)) {
        s->metrics.guard_refused[GUARD_REFUSED_STALE]++;
        s->metrics.guard_rejected_stale++;
        s->guard_refused(req, lock, *token, h ? h->owner : "", h ? "read_lease" : "");
        const Lock *l = lock[0] ? locktab_get(s->locks, KIND_LOCK, lock) : NULL;
        const Holder *first = l ? locktab_holder(l) : NULL;
        http_reply_error(req, ERR_STALE_TOKEN,
                         json_pack("{s:s, s:I, s:o, s:I}", "lock", lock, "token", (json_int_t)*token, "holder_token",
                                   first ? json_integer((json_int_t)first->token) : json_null(), "max_token",
                                   (json_int_t)(l ? l->last_token : 0)),
                         h ? "fencing token %llu holds lock '%s' as a reader: a write needs the writer's lease "
                             "(the lock's last token is %llu)"
                           : "fencing token %llu is stale: it holds no lease of lock '%s' (ended, never issued, or "
                             "another lock's); the lock's last token is %llu",
                         (unsigned long long)*token, lock, (unsigned long long)(l ? l->last_token : 0));
        goto fail;
    }
    char secret[37];
    uuid_unparse_lower(h->lease, secret);
    sigv4_key(secret, &a->auth, a->key);
    explicit_bzero(secret, sizeof secret);
    const char *payload = http_header(req, "x-amz-content-sha256");
    /* A presigned URL signs no payload: its hash is UNSIGNED-PAYLOAD, whatever is sent. */
    SignedOver over = signed_over(req, method, a, query ? "UNSIGNED-PAYLOAD" : payload ? payload : "",
                                  query ? SIGV4_QUERY_SIGNATURE : NULL, &why);
    if (over == SIGNED_UNCHECKED) {
        refuse(req, ERR_FORBIDDEN, "SignatureDoesNotMatch", 403, "the signature cannot be checked: %s", why);
        goto fail;
    }
    if (over == SIGNED_NOT) {
        refuse(req, ERR_FORBIDDEN, "SignatureDoesNotMatch", 403, "%s",
               "the request signature does not match the one made with the lease of this token: the secret "
               "access key must be the lease (from acquire), the access key id its token");
        goto fail;
    }
    Unsigned u = {a->auth.signed_headers, NULL};
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, find_unsigned, &u);
    if (u.name) {
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_FORBIDDEN, json_pack("{s:s, s:s}", "s3_code", "AccessDenied", "field", u.name),
                         "There were headers present in the request which were not signed: %.80s (every x-amz-* "
                         "header must be in SignedHeaders)",
                         u.name);
        goto fail;
    }
    memcpy(a->prev, a->auth.signature, sizeof a->prev);
    memcpy(lease, h->lease, LEASE_ID_BYTES);
    if (query)
        a->payload = PAY_UNSIGNED;
    else if (!setup_payload(a, req))
        goto fail;
    *out = a;
    return S3AUTH_OK;
fail:
    s3auth_free(a);
    return S3AUTH_REFUSED;
}

bool s3auth_token_holds(Request *req, const char *lock)
{
    SigV4Query q;
    const char *why = "";
    uint64_t token;
    bool parsed = sigv4_query_signed(raw_query(req)) ? sigv4_parse_query(raw_query(req), &q, &why)
                                                      : sigv4_parse(http_header(req, "Authorization"), &q.auth, &why);
    return parsed && fence_parse_token(q.auth.access_key, &token) && holder_by_token(req->srv, lock, token) != NULL;
}

void s3auth_free(S3Auth *a)
{
    if (!a)
        return;
    explicit_bzero(a->key, sizeof a->key);
    free(a);
}

bool s3auth_chunked(const S3Auth *a) { return a && (a->payload == PAY_CHUNKED_SIGNED || a->payload == PAY_CHUNKED_UNSIGNED); }

int64_t s3auth_store_length(Request *req, const S3Auth *a, int64_t content_length)
{
    (void)req;
    return s3auth_chunked(a) ? (int64_t)a->declared : content_length;
}

static void bad_body(Request *req, const char *s3code, const char *message)
{
    refuse(req, ERR_BAD_REQUEST, s3code, s3code[0] == 'S' ? 403 : 400, "%s", message);
}

/* Data bytes went to the store: hashes and checksums see them. */
static void saw(S3Auth *a, const char *data, size_t n)
{
    if (a->payload == PAY_SHA256)
        sha256_update(&a->body, n, (const uint8_t *)data);
    if (a->payload == PAY_CHUNKED_SIGNED)
        sha256_update(&a->chunk, n, (const uint8_t *)data);
    if (a->sum == SUM_CRC32)
        a->crc = crc32(a->crc, (const Bytef *)data, (uInt)n);
    else if (a->sum == SUM_SHA1)
        sha1_update(&a->sha1, n, (const uint8_t *)data);
    else if (a->sum == SUM_SHA256)
        sha256_update(&a->sha256, n, (const uint8_t *)data);
    a->decoded += n;
}

static bool chunk_done(S3Auth *a, Request *req);

/* A chunk's size line: "HEX[;chunk-signature=SIG]". */
static bool size_line(S3Auth *a, Request *req)
{
    a->line[a->line_len] = '\0';
    char *end;
    errno = 0;
    unsigned long long n = strtoull(a->line, &end, 16);
    if (end == a->line || errno || (*end && *end != ';')) {
        bad_body(req, "IncompleteBody", "an aws-chunked chunk's size line does not parse");
        return false;
    }
    a->chunk_sig[0] = '\0';
    if (a->payload == PAY_CHUNKED_SIGNED) {
        const char *sig = strstr(end, "chunk-signature=");
        if (!sig || strlen(sig + 16) != 64) {
            bad_body(req, "SignatureDoesNotMatch", "an aws-chunked chunk lacks its chunk-signature");
            return false;
        }
        snprintf(a->chunk_sig, sizeof a->chunk_sig, "%s", sig + 16);
        sha256_init(&a->chunk);
    }
    if (a->decoded + n > a->declared) {
        bad_body(req, "IncompleteBody", "the aws-chunked body is longer than x-amz-decoded-content-length");
        return false;
    }
    a->left = n;
    a->line_len = 0;
    if (n) {
        a->st = CH_DATA;
        return true;
    }
    /* The zero-length chunk: signed, its empty data's CRLF follows (or,
     * with a trailer, the trailer); unsigned, the trailer. */
    a->last = true;
    if (a->payload == PAY_CHUNKED_SIGNED && !a->trailer_signed) {
        a->st = CH_DATA_END;
        return true;
    }
    a->st = CH_TRAILER;
    return a->payload != PAY_CHUNKED_SIGNED || chunk_done(a, req);
}

/* The current chunk's data is complete: its signature. */
static bool chunk_done(S3Auth *a, Request *req)
{
    if (a->payload != PAY_CHUNKED_SIGNED)
        return true;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&a->chunk, sizeof d, d);
    char hex[SIGV4_HEX];
    static const char HEX[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof d; i++) {
        hex[2 * i] = HEX[d[i] >> 4];
        hex[2 * i + 1] = HEX[d[i] & 15];
    }
    hex[64] = '\0';
    char sig[SIGV4_HEX];
    sigv4_chunk_sign(a->key, a->amz_date, &a->auth, a->prev, hex, sig);
    if (!sigv4_equal(sig, a->chunk_sig)) {
        bad_body(req, "SignatureDoesNotMatch", "an aws-chunked chunk's signature does not match: the body was "
                                               "changed, or not signed with the lease");
        return false;
    }
    memcpy(a->prev, sig, sizeof a->prev);
    return true;
}

bool s3auth_upload(S3Auth *a, Request *req, ProxyCall *call, const char *data, size_t *size)
{
    if (!s3auth_chunked(a)) {
        size_t before = *size;
        proxy_call_upload(call, data, size);
        saw(a, data, before - *size);
        return true;
    }
    size_t i = 0, n = *size;
    while (i < n) {
        if (a->st == CH_DATA) {
            size_t take = n - i < a->left ? n - i : (size_t)a->left;
            size_t left = take;
            proxy_call_upload(call, data + i, &left);
            size_t went = take - left;
            saw(a, data + i, went);
            a->left -= went;
            i += went;
            if (left) {
                *size = n - i; /* the call is full: the rest comes again */
                return true;
            }
            if (!a->left)
                a->st = CH_DATA_END;
            continue;
        }
        char c = data[i++];
        if (a->st == CH_DATA_END) {
            /* "\r\n" after the data (and after the last chunk's size line). */
            if (c == '\r')
                continue;
            if (c != '\n') {
                bad_body(req, "IncompleteBody", "an aws-chunked chunk's data does not end with CRLF");
                return false;
            }
            if (!chunk_done(a, req))
                return false;
            a->st = a->last ? CH_DONE : CH_SIZE;
            continue;
        }
        if (a->line_len + 1 >= sizeof a->line) {
            bad_body(req, "IncompleteBody", "an aws-chunked size or trailer line is too long");
            return false;
        }
        if (a->st == CH_SIZE) {
            if (c == '\r')
                continue;
            if (c != '\n') {
                a->line[a->line_len++] = c;
                continue;
            }
            if (!size_line(a, req))
                return false;
            continue;
        }
        if (a->st == CH_TRAILER) {
            if (a->trailer_len + 1 >= sizeof a->trailer) {
                bad_body(req, "IncompleteBody", "the aws-chunked trailer is too long");
                return false;
            }
            a->trailer[a->trailer_len++] = c;
            continue;
        }
        /* CH_DONE: nothing may follow. */
        if (c != '\r' && c != '\n') {
            bad_body(req, "IncompleteBody", "bytes after the end of the aws-chunked body");
            return false;
        }
    }
    *size = 0;
    return true;
}

/* The body's checksum as S3 writes it (base64). */
static void sum_base64(S3Auth *a, char *out)
{
    uint8_t d[SHA256_DIGEST_SIZE];
    size_t dn;
    if (a->sum == SUM_CRC32) {
        d[0] = (uint8_t)(a->crc >> 24), d[1] = (uint8_t)(a->crc >> 16), d[2] = (uint8_t)(a->crc >> 8),
        d[3] = (uint8_t)a->crc;
        dn = 4;
    } else if (a->sum == SUM_SHA1) {
        sha1_digest(&a->sha1, SHA1_DIGEST_SIZE, d);
        dn = SHA1_DIGEST_SIZE;
    } else {
        sha256_digest(&a->sha256, SHA256_DIGEST_SIZE, d);
        dn = SHA256_DIGEST_SIZE;
    }
    base64_encode_raw(out, dn, d);
    out[BASE64_ENCODE_RAW_LENGTH(dn)] = '\0';
}

bool s3auth_header_checksum(Request *req, S3Auth **a)
{
    static const char *const NAMES[] = {"x-amz-checksum-crc32", "x-amz-checksum-sha1", "x-amz-checksum-sha256"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        const char *v = http_header(req, NAMES[i]);
        if (!v)
            continue;
        if (*a && (*a)->sum != SUM_NONE)
            return true; /* a trailer's checksum: checked there */
        if (!*a && !(*a = calloc(1, sizeof **a))) {
            http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
            return false;
        }
        sum_start(*a, sum_named(NAMES[i]), NAMES[i]);
        snprintf((*a)->sum_expected, sizeof (*a)->sum_expected, "%s", v);
        return true;
    }
    return true;
}

/* The trailer's checksum and signature. */
static bool check_trailer(S3Auth *a, Request *req)
{
    if (a->sum == SUM_NONE)
        return true;
    /* Lines "name:value" with CRLF; the signature's line last when signed. */
    a->trailer[a->trailer_len] = '\0';
    char value[128] = "", sig[SIGV4_HEX + 8] = "";
    size_t sum_line_len = 0;
    for (char *p = a->trailer; *p;) {
        size_t len = strcspn(p, "\r\n");
        size_t nlen = strlen(a->sum_name);
        if (len > nlen && !strncasecmp(p, a->sum_name, nlen) && p[nlen] == ':') {
            snprintf(value, sizeof value, "%.*s", (int)(len - nlen - 1), p + nlen + 1);
            sum_line_len = len;
        } else if (!strncmp(p, "x-amz-trailer-signature:", 24) && len - 24 < sizeof sig) {
            snprintf(sig, sizeof sig, "%.*s", (int)(len - 24), p + 24);
        }
        p += len;
        while (*p == '\r' || *p == '\n')
            p++;
    }
    if (!value[0]) {
        bad_body(req, "InvalidRequest", "the aws-chunked trailer lacks the checksum x-amz-trailer names");
        return false;
    }
    char b64[BASE64_ENCODE_RAW_LENGTH(SHA256_DIGEST_SIZE) + 1];
    sum_base64(a, b64);
    if (strcmp(b64, value) != 0) {
        bad_body(req, "BadDigest", "the body's checksum is not the one in the aws-chunked trailer");
        return false;
    }
    if (a->payload == PAY_CHUNKED_SIGNED && a->trailer_signed) {
        char canon[256];
        int n = snprintf(canon, sizeof canon, "%s:%s\n", a->sum_name, value);
        for (char *p = canon; *p && *p != ':'; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        char want[SIGV4_HEX];
        sigv4_trailer_sign(a->key, a->amz_date, &a->auth, a->prev, canon, (size_t)n, want);
        if (!sigv4_equal(want, sig)) {
            bad_body(req, "SignatureDoesNotMatch", "the aws-chunked trailer's signature does not match");
            return false;
        }
    }
    (void)sum_line_len;
    return true;
}

bool s3auth_body_done(S3Auth *a, Request *req)
{
    if (a->payload == PAY_SHA256) {
        uint8_t d[SHA256_DIGEST_SIZE];
        sha256_digest(&a->body, sizeof d, d);
        char hex[SIGV4_HEX];
        static const char HEX[] = "0123456789abcdef";
        for (size_t i = 0; i < sizeof d; i++) {
            hex[2 * i] = HEX[d[i] >> 4];
            hex[2 * i + 1] = HEX[d[i] & 15];
        }
        hex[64] = '\0';
        if (strcmp(hex, a->payload_sha256) != 0) {
            bad_body(req, "XAmzContentSHA256Mismatch",
                     "the body's SHA-256 is not the x-amz-content-sha256 the request was signed with");
            return false;
        }
    }
    if (a->sum_expected[0]) {
        char b64[BASE64_ENCODE_RAW_LENGTH(SHA256_DIGEST_SIZE) + 1];
        sum_base64(a, b64);
        if (strcmp(b64, a->sum_expected) != 0) {
            bad_body(req, "BadDigest", "the body's checksum is not the one its x-amz-checksum header names");
            return false;
        }
    }
    if (!s3auth_chunked(a))
        return true;
    if (a->decoded != a->declared || !a->last || (a->st != CH_TRAILER && a->st != CH_DONE)) {
        bad_body(req, "IncompleteBody", "the aws-chunked body ended before its last chunk");
        return false;
    }
    return check_trailer(a, req);
}
