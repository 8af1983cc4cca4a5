/* s3req — requests through S3 routes; see s3req.h. */
#include "guard/s3req.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "guard/s3copy.h"
#include "guard/s3err.h"
#include "guard/s3list.h"
#include "guard/s3sign.h"
#include "guard/sigv4.h"
#include "net/http.h"

#define FENCE_META "x-amz-meta-fencing-token"

struct S3Write {
    S3 *s3;
    Proxy *proxy;
    Request *req;
    const GuardRoute *route;
    GuardWrite *gw;    /* while its prepare step runs */
    ProxyCall *head;   /* the HEAD in flight, or NULL */
    bool rechecking;   /* the store refused the precondition: reading the object again */
    uint64_t token;
    /* What the prepare step read, for the confirm step to compare: the
     * object existed, its ETag, fence and Last-Modified. */
    bool existed;
    bool completes;     /* a CompleteMultipartUpload */
    bool if_match_ok;   /* ... and the store honours If-Match on it */
    char etag[256];
    char modified[64];
    uint64_t fence;
    char *url;         /* owned */
    /* The write's call, signed at the end of the prepare step (owned), or NULL: signed already. */
    const char *call_method;
    char *call_url;
    char lock[NAME_MAX_BYTES + 1];
    /* A CopyObject: its source's store URL (owned) and client's name
     * (owned), and whether its metadata is carried over (directive COPY). */
    char *source_url;
    char *source;
    bool carry;
    char *part_url; /* an UploadPartCopy's call (owned), or NULL */
};

/* Is `name` (len bytes) one of `names`, case aside? */
static bool one_of(const char *const *names, const char *name, size_t len)
{
    for (const char *const *p = names; *p; p++)
        if (strlen(*p) == len && !strncasecmp(*p, name, len))
            return true;
    return false;
}

/* x-amz-meta-leasegate-*: the guard's own metadata (the tombstone's
 * marker, S3_TOMBSTONE_META), never a client's to set. */
static bool guard_metadata(const char *name, size_t len)
{
    static const char OWN[] = "x-amz-meta-leasegate-";
    return len >= sizeof OWN - 1 && !strncasecmp(name, OWN, sizeof OWN - 1);
}

/* A client's own metadata: x-amz-meta-*, but the fence and the guard's own. */
static bool user_metadata(const char *name, size_t len)
{
    static const char META[] = "x-amz-meta-";
    return len > sizeof META - 1 && !strncasecmp(name, META, sizeof META - 1) &&
           !(len == sizeof FENCE_META - 1 && !strncasecmp(name, FENCE_META, len)) && !guard_metadata(name, len);
}

/* Headers an S3 client sends that the guard takes and never forwards: the
 * signature's own, and what SDKs add about themselves. */
static bool signature_header(const char *name, size_t len)
{
    static const char *const OWN[] = {"x-amz-date", "x-amz-content-sha256", "x-amz-user-agent",
                                      "x-amz-decoded-content-length", "x-amz-trailer", "x-amz-security-token",
                                      NULL};
    return one_of(OWN, name, len);
}

static bool prefixed(const char *name, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && !strncasecmp(name, prefix, n);
}

bool s3req_keep_read(const char *name, size_t len)
{
    static const char *const READ[] = {"Range", "If-Match", "If-None-Match", "If-Modified-Since",
                                       "If-Unmodified-Since", "Accept", "x-amz-checksum-mode", NULL};
    return one_of(READ, name, len) || prefixed(name, len, "x-amz-server-side-encryption-customer-");
}

/* The x-amz-* headers a write forwards: what SDKs send by default (the
 * checksums, which the store checks; storage class, server-side encryption,
 * tagging; x-amz-acl, whose values s3req_acceptable narrows). */
static bool amz_write_header(const char *name, size_t len)
{
    static const char *const AMZ[] = {"x-amz-sdk-checksum-algorithm", "x-amz-acl", "x-amz-storage-class",
                                      "x-amz-tagging", NULL};
    return one_of(AMZ, name, len) || prefixed(name, len, "x-amz-checksum-") ||
           (prefixed(name, len, "x-amz-server-side-encryption") &&
            !prefixed(name, len, "x-amz-server-side-encryption-customer-"));
}

bool s3req_keep_copy(const char *name, size_t len)
{
    static const char *const COPY[] = {"x-amz-acl",
                                       "x-amz-storage-class",
                                       "x-amz-tagging",
                                       "x-amz-tagging-directive",
                                       "x-amz-checksum-algorithm",
                                       "x-amz-copy-source-if-none-match",
                                       "x-amz-copy-source-if-modified-since",
                                       "x-amz-copy-source-if-unmodified-since",
                                       NULL};
    return one_of(COPY, name, len) || (prefixed(name, len, "x-amz-server-side-encryption") &&
                                       !prefixed(name, len, "x-amz-server-side-encryption-customer-"));
}

bool s3req_keep_part_copy(const char *name, size_t len)
{
    static const char *const PART[] = {"x-amz-copy-source-range", "x-amz-copy-source-if-none-match",
                                       "x-amz-copy-source-if-modified-since",
                                       "x-amz-copy-source-if-unmodified-since", NULL};
    return one_of(PART, name, len);
}

bool s3req_keep_copy_replace(const char *name, size_t len)
{
    static const char *const CONTENT[] = {"Content-Type",     "Cache-Control",    "Content-Disposition",
                                          "Content-Encoding", "Content-Language", "Expires",
                                          NULL};
    return one_of(CONTENT, name, len) || user_metadata(name, len) || s3req_keep_copy(name, len);
}

bool s3req_keep_complete(const char *name, size_t len)
{
    static const char *const DONE[] = {"Content-Type", "x-amz-sdk-checksum-algorithm", NULL};
    return one_of(DONE, name, len) || prefixed(name, len, "x-amz-checksum-");
}

bool s3req_keep_write_unencoded(const char *name, size_t len)
{
    return !(len == 16 && !strncasecmp(name, "Content-Encoding", 16)) && s3req_keep_write(name, len);
}

bool s3req_keep_none(const char *name, size_t len)
{
    (void)name;
    (void)len;
    return false;
}

bool s3req_keep_write(const char *name, size_t len)
{
    static const char *const WRITE[] = {"Content-Type",     "Content-MD5",      "Cache-Control", "Content-Disposition",
                                        "Content-Encoding", "Content-Language", "Expires",       NULL};
    return one_of(WRITE, name, len) || user_metadata(name, len) || amz_write_header(name, len);
}

typedef struct AmzCheck {
    const char *bad; /* the first header the route refuses, or NULL */
    const char *why;
    bool write;
    bool copy; /* a PUT with x-amz-copy-source */
} AmzCheck;

/* The x-amz-* headers of a CopyObject beyond a write's: its source, the
 * conditions on it, and the directives (whose values find_amz checks). */
static bool amz_copy_header(const char *name, size_t len)
{
    static const char *const COPY[] = {"x-amz-copy-source",
                                       "x-amz-copy-source-if-match",
                                       "x-amz-copy-source-if-none-match",
                                       "x-amz-copy-source-if-modified-since",
                                       "x-amz-copy-source-if-unmodified-since",
                                       "x-amz-copy-source-range",
                                       "x-amz-metadata-directive",
                                       "x-amz-tagging-directive",
                                       NULL};
    return one_of(COPY, name, len);
}

/* Why an x-amz-* header (not on the allow-list) is refused. */
static const char *amz_refusal(const char *name, size_t len)
{
    if (prefixed(name, len, "x-amz-server-side-encryption-customer-"))
        return "an object encrypted with the client's own key (SSE-C) cannot be fenced: the guard reads the "
               "object's fence before every write, which would need that key";
    if (prefixed(name, len, "x-amz-grant-"))
        return "it gives other accounts rights on the object: ask the bucket's owner for a bucket policy";
    if (prefixed(name, len, "x-amz-object-lock-"))
        return "an object lock would keep the guard from writing the object's fence (and its tombstone) again";
    if (prefixed(name, len, "x-amz-copy-source-server-side-encryption-customer-"))
        return "a source encrypted with the client's own key (SSE-C) cannot be copied: the guard reads the source "
               "(its metadata, and whether it is a tombstone) before the copy, which would need that key";
    if (prefixed(name, len, "x-amz-copy-source") || prefixed(name, len, "x-amz-metadata-directive") ||
        prefixed(name, len, "x-amz-tagging-directive"))
        return "it belongs to a copy: a PUT with x-amz-copy-source (CopyObject)";
    if (prefixed(name, len, "x-amz-expected-bucket-owner") || prefixed(name, len, "x-amz-request-payer"))
        return "it names the store's account, which is the gateway's, not the client's";
    if (prefixed(name, len, "x-amz-website-redirect-location"))
        return "a redirect could send readers past the guard";
    return "the guard forwards only the x-amz-* headers on its allow-list (docs/fencing.md)";
}

static enum MHD_Result find_amz(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    AmzCheck *c = cls;
    size_t len = strlen(key);
    if (c->write && guard_metadata(key, len)) {
        c->bad = key;
        c->why = "x-amz-meta-leasegate-* is the guard's own metadata (a tombstone's marker), never a client's to set";
        return MHD_NO;
    }
    if (len < 6 || strncasecmp(key, "x-amz-", 6) || signature_header(key, len) || user_metadata(key, len) ||
        guard_metadata(key, len) || /* on a read: not forwarded (s3req_keep_read) */
        (len == sizeof FENCE_META - 1 && !strncasecmp(key, FENCE_META, len)) ||
        (!c->write && s3req_keep_read(key, len)))
        return MHD_YES;
    if (c->copy && amz_copy_header(key, len)) {
        bool directive = prefixed(key, len, "x-amz-metadata-directive") || prefixed(key, len, "x-amz-tagging-directive");
        if (directive && value && strcmp(value, "COPY") && strcmp(value, "REPLACE")) {
            c->bad = key;
            c->why = "a directive is COPY or REPLACE";
            return MHD_NO;
        }
        return MHD_YES;
    }
    if (c->write && amz_write_header(key, len)) {
        /* A canned ACL that keeps the object private passes; one that opens it to others does not. */
        if (len == 9 && !strncasecmp(key, "x-amz-acl", 9) && value && strcmp(value, "private") &&
            strcmp(value, "bucket-owner-full-control")) {
            c->bad = key;
            c->why = "only the canned ACLs private and bucket-owner-full-control pass: one that opens the object "
                     "to others is the bucket owner's to set";
            return MHD_NO;
        }
        return MHD_YES;
    }
    c->bad = key;
    c->why = amz_refusal(key, len);
    return MHD_NO;
}

static void bad(Request *req, const char *field, const char *fmt, const char *detail)
{
    req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
    http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", field), fmt, detail);
}

/* 501 NotImplemented: an S3 operation the guard does not forward. */
static void not_implemented(Request *req, const char *what)
{
    req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
    http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s, s:i}", "s3_code", "NotImplemented", "s3_status", 501),
                     "%s is not forwarded by the guard (docs/fencing.md lists the S3 operations it forwards)", what);
}

/* Query parameters an object's request may carry, and whether each is
 * forwarded to the store (x-id is what the JavaScript SDK adds to name the
 * operation; the guard knows it from the method). A presigned URL's
 * X-Amz-* parameters are its signature's (s3auth.h), never forwarded. */
typedef struct QueryCheck {
    const char *bad;
    const char *bad_override; /* a response-* parameter S3 does not have, on a read */
    S3Op op;
    bool object;
    const char *method;
} QueryCheck;

const char *const S3REQ_OVERRIDES[] = {"response-cache-control",    "response-content-disposition",
                                       "response-content-encoding", "response-content-language",
                                       "response-content-type",     "response-expires",
                                       NULL};

const char *const S3REQ_READ_QUERY[] = {"partNumber",
                                        "response-cache-control",
                                        "response-content-disposition",
                                        "response-content-encoding",
                                        "response-content-language",
                                        "response-content-type",
                                        "response-expires",
                                        NULL};

static bool presign_parameter(const char *key)
{
    static const char *const PRESIGN[] = {"X-Amz-Algorithm",     "X-Amz-Credential", "X-Amz-Date",
                                          "X-Amz-Expires",       "X-Amz-SignedHeaders", SIGV4_QUERY_SIGNATURE,
                                          "X-Amz-Security-Token", NULL};
    for (const char *const *p = PRESIGN; *p; p++)
        if (!strcmp(*p, key))
            return true;
    return false;
}

static enum MHD_Result find_query(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    (void)value;
    QueryCheck *q = cls;
    static const char *const OBJECT[] = {"x-id",      "partNumber", "uploads", "uploadId", "max-parts",
                                         "part-number-marker", "tagging", NULL};
    static const char *const LIST[] = {"x-id",   "list-type",  "prefix", "delimiter", "max-keys", "encoding-type",
                                       "marker", "start-after", "continuation-token", "fetch-owner", "location",
                                       NULL};
    bool override = q->object && !strncmp(key, "response-", 9);
    bool ok = presign_parameter(key) || override ||
              (q->object ? one_of(OBJECT, key, strlen(key)) : one_of(LIST, key, strlen(key)));
    /* S3 answers a response-* it does not have on a GET or HEAD, and ignores them on other methods. */
    if (override && (!strcmp(q->method, "GET") || !strcmp(q->method, "HEAD")) &&
        !one_of(S3REQ_OVERRIDES, key, strlen(key))) {
        q->bad_override = key;
        return MHD_NO;
    }
    if (!ok) {
        q->bad = key;
        return MHD_NO;
    }
    return MHD_YES;
}

typedef struct QueryFind {
    const char *key;
    bool found;
} QueryFind;

static enum MHD_Result find_key(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    (void)value;
    QueryFind *f = cls;
    if (!strcmp(key, f->key)) {
        f->found = true;
        return MHD_NO;
    }
    return MHD_YES;
}

/* Is `key` in the query, with a value or without one (?location)? */
static bool query_has(Request *req, const char *key)
{
    QueryFind f = {key, false};
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, find_key, &f);
    return f.found;
}

/* A copy has no body: its bytes are the source's. Answers 400 otherwise. */
static bool copy_without_body(Request *req)
{
    const char *cl = http_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if ((cl && strcmp(cl, "0")) || http_header(req, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        bad(req, cl ? "Content-Length" : "Transfer-Encoding", "%s",
            "a copy (x-amz-copy-source) has no body: its bytes are the source's");
        return false;
    }
    return true;
}

S3Op s3req_classify(Request *req, const GuardRoute *route, const char *method, bool keys)
{
    const char *rest = guardroute_rest(route, req->raw_uri);
    while (*rest == '/')
        rest++;
    bool bucket = *rest == '\0' || *rest == '?';
    QueryCheck q = {NULL, NULL, S3_OP_NONE, !bucket, method};
    if (query_has(req, "AWSAccessKeyId") && query_has(req, "Signature")) {
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s, s:i}", "s3_code", "InvalidRequest", "s3_status", 400),
                         "%s", "The authorization mechanism you have provided is not supported. Please use "
                               "AWS4-HMAC-SHA256: this is a Signature Version 2 presigned URL; presign with "
                               "Signature Version 4 (boto3: Config(signature_version=\"s3v4\"))");
        return S3_OP_NONE;
    }
    /* The server's parser reads a %00 as DEL (http.c: so that no name is cut
     * short), and the guard forwards what it parsed: the store would be asked
     * for a value the client neither sent nor signed. No S3 parameter holds a
     * NUL. */
    const char *query = strchr(req->raw_uri, '?');
    if (query && strstr(query, "%00")) {
        bad(req, "query", "%s",
            "the query holds %00 (a NUL byte), which no S3 parameter takes and the guard does not forward");
        return S3_OP_NONE;
    }
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, find_query, &q);
    if (q.bad_override) {
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_BAD_REQUEST,
                         json_pack("{s:s, s:s, s:i}", "field", q.bad_override, "s3_code", "InvalidArgument",
                                   "s3_status", 400),
                         "%.60s is not in the set of overridable response headers. Please refer to the S3 API "
                         "documentation for a complete list of overridable response headers.",
                         q.bad_override);
        return S3_OP_NONE;
    }
    if (q.bad) {
        bool multipart = !strcmp(q.bad, "uploads") || !strcmp(q.bad, "uploadId");
        char what[160];
        snprintf(what, sizeof what, "%s with ?%.60s%s", method, q.bad,
                 multipart ? " (a multipart upload)" : bucket ? " (on the bucket)" : "");
        not_implemented(req, what);
        return S3_OP_NONE;
    }
    const char *authorization = http_header(req, "Authorization");
    if (!keys && authorization && strncmp(authorization, "AWS4-HMAC-SHA256 ", 17)) {
        bad(req, "Authorization", "%s",
            "the guard verifies only AWS Signature Version 4 (AWS4-HMAC-SHA256) made with a lease, or takes "
            "the lease in Fencing-Lease");
        return S3_OP_NONE;
    }
    bool copy = !strcmp(method, "PUT") && http_header(req, "x-amz-copy-source");
    AmzCheck amz = {NULL, NULL, !strcmp(method, "PUT") || !strcmp(method, "POST"), copy};
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, find_amz, &amz);
    if (amz.bad) {
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", amz.bad),
                         "header %s is not forwarded to S3: %s", amz.bad, amz.why);
        return S3_OP_NONE;
    }
    if (bucket) {
        if (!strcmp(method, "HEAD"))
            return S3_OP_HEAD_BUCKET;
        if (!strcmp(method, "PUT"))
            return S3_OP_CREATE_BUCKET;
        if (strcmp(method, "GET") != 0) {
            not_implemented(req, "an operation on the bucket other than GET, HEAD or PUT");
            return S3_OP_NONE;
        }
        if (query_has(req, "location"))
            return S3_OP_LOCATION;
        const char *lt = http_query(req, "list-type");
        if (lt && strcmp(lt, "2") != 0) {
            bad(req, "list-type", "list-type=%.20s is not a listing S3 has (2, or none for the first)", lt);
            return S3_OP_NONE;
        }
        return lt ? S3_OP_LIST_V2 : S3_OP_LIST_V1;
    }
    if (!strcmp(rest, S3_PROBE_KEY) || !strncmp(rest, S3_PROBE_KEY "?", sizeof S3_PROBE_KEY)) {
        bad(req, "path", "%s is the key the guard checks the store with, not for clients", S3_PROBE_KEY);
        return S3_OP_NONE;
    }
    bool upload = query_has(req, "uploadId"), part = query_has(req, "partNumber");
    if (query_has(req, "uploads")) {
        if (!strcmp(method, "POST") && !upload && !part)
            return S3_OP_MP_CREATE;
        not_implemented(req, "?uploads on an object other than a POST");
        return S3_OP_NONE;
    }
    if (upload) {
        if (!strcmp(method, "GET") && !part)
            return S3_OP_MP_LIST_PARTS;
        if (!strcmp(method, "DELETE") && !part)
            return S3_OP_MP_ABORT;
        if (!strcmp(method, "POST") && !part)
            return S3_OP_MP_COMPLETE;
        if (!strcmp(method, "PUT") && part && copy)
            return copy_without_body(req) ? S3_OP_MP_PART_COPY : S3_OP_NONE;
        if (!strcmp(method, "PUT") && part) {
            if (!http_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
                req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
                http_reply_error(req, ERR_LENGTH_REQUIRED, json_pack("{s:s}", "field", "Content-Length"),
                                 "an UploadPart needs Content-Length");
                return S3_OP_NONE;
            }
            return S3_OP_MP_PART;
        }
        not_implemented(req, "this request on a multipart upload");
        return S3_OP_NONE;
    }
    if (query_has(req, "tagging")) {
        /* GetObjectTagging is a read (aws s3 cp reads a source's tags for a copy in parts);
         * a write of tags would not be fenced. */
        if (!strcmp(method, "GET") && !part)
            return S3_OP_READ_TAGGING;
        not_implemented(req, "?tagging other than a GET (GetObjectTagging)");
        return S3_OP_NONE;
    }
    if (part && strcmp(method, "GET") && strcmp(method, "HEAD")) {
        not_implemented(req, "?partNumber without ?uploadId");
        return S3_OP_NONE;
    }
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD"))
        return S3_OP_READ;
    if (!strcmp(method, "DELETE"))
        return S3_OP_DELETE;
    if (strcmp(method, "PUT") != 0) {
        not_implemented(req, "POST on an object without ?uploads or ?uploadId");
        return S3_OP_NONE;
    }
    static const char *const CONDITIONS[] = {"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"};
    for (size_t i = 0; i < sizeof CONDITIONS / sizeof CONDITIONS[0]; i++) {
        if (http_header(req, CONDITIONS[i])) {
            bad(req, CONDITIONS[i], "a PUT through the guard may not carry %s: the guard sets the precondition "
                                    "itself, from the object's fence",
                CONDITIONS[i]);
            return S3_OP_NONE;
        }
    }
    if (copy) {
        if (http_header(req, "x-amz-copy-source-range")) {
            bad(req, "x-amz-copy-source-range", "%s",
                "a range of a source is copied by UploadPartCopy only (?partNumber and ?uploadId)");
            return S3_OP_NONE;
        }
        return copy_without_body(req) ? S3_OP_COPY : S3_OP_NONE;
    }
    if (!http_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_LENGTH_REQUIRED, json_pack("{s:s}", "field", "Content-Length"),
                         "a PUT to S3 needs Content-Length (S3 takes no chunked upload without signing each chunk)");
        return S3_OP_NONE;
    }
    return S3_OP_PUT;
}

bool s3req_signed(Request *req)
{
    const char *a = http_header(req, "Authorization");
    const char *q = strchr(req->raw_uri, '?');
    return (a && !strncmp(a, "AWS4-HMAC-SHA256 ", 17)) || (q && sigv4_query_signed(q + 1));
}

bool s3req_overrides_allowed(Request *req, bool checked)
{
    if (checked || req->srv->auth)
        return true;
    for (const char *const *p = S3REQ_OVERRIDES; *p; p++) {
        if (query_has(req, *p)) {
            req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
            http_reply_error(req, ERR_BAD_REQUEST,
                             json_pack("{s:s, s:i}", "s3_code", "InvalidRequest", "s3_status", 400),
                             "Request specific response headers cannot be used for anonymous GET requests. (%s "
                             "needs a request signed with a lease of the object's lock: this one's signature, if "
                             "any, was not checked)",
                             *p);
            return false;
        }
    }
    return true;
}

/* Is a line "Name;" (libcurl's form of a header with an empty value)? */
static bool empty_line(const struct curl_slist *headers)
{
    for (const struct curl_slist *l = headers; l; l = l->next) {
        size_t n = strcspn(l->data, ":;");
        if (n && l->data[n] == ';' && !l->data[n + 1])
            return true;
    }
    return false;
}

bool s3req_sign(void *ud, void *curl_easy, struct curl_slist **headers)
{
    S3Sign *sign = ud;
    AwsCreds creds;
    s3_credentials(sign->s3, &creds);
    bool ok = sign->method && sign->url && empty_line(*headers)
                  ? s3sign_lines(sign->route, &creds, sign->method, sign->url, time(NULL), headers)
                  : s3_sign_easy(curl_easy, sign->route, &creds, headers);
    explicit_bzero(&creds, sizeof creds);
    return ok;
}

bool s3req_write_signs(S3Write *w, const char *method, const char *call_url)
{
    w->call_method = method;
    return (w->call_url = strdup(call_url)) != NULL;
}

S3Write *s3req_write_new(S3 *s3, Proxy *proxy, Request *req, const GuardRoute *route, const char *url,
                         const char *lock, uint64_t token)
{
    S3Write *w = calloc(1, sizeof *w);
    if (!w || !(w->url = strdup(url))) {
        free(w);
        return NULL;
    }
    w->s3 = s3;
    w->proxy = proxy;
    w->req = req;
    w->route = route;
    w->token = token;
    snprintf(w->lock, sizeof w->lock, "%s", lock);
    return w;
}

void s3req_write_free(S3Write *w)
{
    if (!w)
        return;
    if (w->head)
        proxy_call_free(w->head); /* its report never comes */
    free(w->url);
    free(w->source_url);
    free(w->source);
    free(w->part_url);
    free(w->call_url);
    free(w);
}

bool s3req_write_copies_part(S3Write *w, const char *part_url)
{
    return w && (w->part_url = strdup(part_url)) != NULL;
}

bool s3req_write_copies(S3Write *w, const char *source_url, const char *source, bool carry)
{
    if (!w || !(w->source_url = strdup(source_url)) || !(w->source = strdup(source)))
        return false;
    w->carry = carry;
    return true;
}

/* The value of header `name` among "Name: value" lines, into out; false when absent. */
static bool header_value(const struct curl_slist *lines, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    for (const struct curl_slist *l = lines; l; l = l->next) {
        if (strncasecmp(l->data, name, n) || l->data[n] != ':')
            continue;
        const char *v = l->data + n + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(out, outlen, "%s", v);
        return true;
    }
    return false;
}

/* The object's fence from its HEAD: 0 when it has none; false when it is
 * not a number (the object was written by something else than a token). */
static bool fence_of(const struct curl_slist *lines, uint64_t *fence)
{
    char v[32];
    *fence = 0;
    if (!header_value(lines, FENCE_META, v, sizeof v))
        return true;
    char *end;
    errno = 0;
    unsigned long long f = strtoull(v, &end, 10);
    if (errno || end == v || *end)
        return false;
    *fence = f;
    return true;
}

/* The object as the client names it (never the store's URL). */
static int path_len(const S3Write *w) { return (int)strcspn(w->req->raw_uri, "?"); }

static void reply_store_failed(S3Write *w, long status, const char *when)
{
    if (status)
        http_reply_error(w->req, ERR_BAD_GATEWAY, json_pack("{s:s, s:I}", "lock", w->lock, "status", (json_int_t)status),
                         "the store answered %ld to the HEAD of %.*s %s", status, path_len(w), w->req->raw_uri, when);
    else
        http_reply_error(w->req, ERR_BAD_GATEWAY, json_pack("{s:s}", "lock", w->lock),
                         "the store could not be reached for the HEAD of %.*s %s", path_len(w), w->req->raw_uri, when);
}

static void reply_fence_above(S3Write *w, uint64_t fence)
{
    Server *s = w->req->srv;
    s->metrics.guard_rejected_stale++;
    s->metrics.guard_refused[GUARD_REFUSED_STALE]++;
    const Lock *l = locktab_get(s->locks, KIND_LOCK, w->lock);
    const Holder *first = l ? locktab_holder(l) : NULL;
    json_t *holder = first ? json_integer((json_int_t)first->token) : json_null();
    http_reply_error(w->req, ERR_STALE_TOKEN,
                     json_pack("{s:s, s:I, s:I, s:o, s:I, s:s}", "lock", w->lock, "token", (json_int_t)w->token,
                               "max_token", (json_int_t)fence, "holder_token", holder, "fence", (json_int_t)fence,
                               "reason", "store_fence"),
                     "fencing token %llu is stale: the object %.*s was written with fencing-token %llu, above it; "
                     "nothing was written",
                     (unsigned long long)w->token, path_len(w), w->req->raw_uri, (unsigned long long)fence);
}

static bool start_head(S3Write *w, ProxyResult fn);
static bool is_tombstone(const struct curl_slist *headers);
static bool start_head_of(S3Write *w, const char *url, ProxyResult fn);
static void source_read(void *ud, long status, const struct curl_slist *headers);

/* The HEAD before the PUT is in: the precondition, or a refusal. */
static void prepared(void *ud, long status, const struct curl_slist *headers)
{
    S3Write *w = ud;
    w->head = NULL; /* freed by the proxy after this */
    if (!guardq_preparing(w->gw))
        return; /* refused meanwhile */
    uint64_t fence;
    char etag[256], line[300];
    bool ok = false;
    if (status == 404) {
        ok = proxy_call_add_header(w->req->guard->call, "If-None-Match: *");
    } else if (status == 200 && header_value(headers, "ETag", etag, sizeof etag) && fence_of(headers, &fence)) {
        if (fence > w->token) {
            reply_fence_above(w, fence);
            guardq_prepared(w->gw, false);
            return;
        }
        if (w->completes && !w->if_match_ok) {
            w->req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
            http_reply_error(w->req, ERR_BAD_REQUEST,
                             json_pack("{s:s, s:s, s:i}", "lock", w->lock, "s3_code", "NotImplemented", "s3_status",
                                       501),
                             "the object %.*s exists (or was deleted: its tombstone keeps the fence), and this "
                             "store ignores If-Match on CompleteMultipartUpload (the guard's probe found): a "
                             "multipart upload may only create an object here; write it with one PUT",
                             path_len(w), w->req->raw_uri);
            guardq_prepared(w->gw, false);
            return;
        }
        snprintf(line, sizeof line, "If-Match: %s", etag);
        ok = proxy_call_add_header(w->req->guard->call, line);
        w->existed = true;
        snprintf(w->etag, sizeof w->etag, "%s", etag);
        w->fence = fence;
        if (!header_value(headers, "Last-Modified", w->modified, sizeof w->modified))
            w->modified[0] = '\0';
    } else {
        reply_store_failed(w, status, status == 200 ? "before the write (its answer had no ETag, or a fencing-token "
                                                      "that is not a number)"
                                                    : "before the write");
        guardq_prepared(w->gw, false);
        return;
    }
    if (ok && w->source_url) {
        ok = start_head_of(w, w->source_url, source_read); /* a copy's source next */
        if (ok)
            return;
    }
    /* Its last header is in: signed now. */
    S3Sign sign = {w->s3, w->route, w->call_method, w->call_url};
    if (ok && w->call_url)
        ok = proxy_call_configure(w->req->guard->call, s3req_sign, &sign);
    if (!ok)
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
    guardq_prepared(w->gw, ok);
}

/* 412 PreconditionFailed, as S3 answers a copy whose source's conditions do not hold. */
static void reply_source_condition(S3Write *w, const char *why)
{
    w->req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
    http_reply_error(w->req, ERR_BAD_REQUEST,
                     json_pack("{s:s, s:s, s:i}", "lock", w->lock, "s3_code", "PreconditionFailed", "s3_status", 412),
                     "At least one of the pre-conditions you specified did not hold: %s", why);
}

/* Do the client's own conditions on the source hold for the version read?
 * x-amz-copy-source-if-match is the guard's to send (pinned to that
 * version), so the client's is checked here; so is its
 * x-amz-copy-source-if-unmodified-since, which S3 ignores once an if-match
 * holds. Answers 412 otherwise. */
static bool source_conditions_hold(S3Write *w, const char *etag, const struct curl_slist *headers)
{
    const char *match = http_header(w->req, "x-amz-copy-source-if-match");
    if (match) {
        if (s3copy_etag_matches(match, etag))
            return true;
        reply_source_condition(w, "x-amz-copy-source-if-match names another ETag than the source's");
        return false;
    }
    const char *since = http_header(w->req, "x-amz-copy-source-if-unmodified-since");
    char modified[64];
    if (since && header_value(headers, "Last-Modified", modified, sizeof modified)) {
        time_t limit = curl_getdate(since, NULL), at = curl_getdate(modified, NULL);
        if (limit != -1 && at != -1 && at > limit) {
            reply_source_condition(w, "the source was modified after x-amz-copy-source-if-unmodified-since");
            return false;
        }
    }
    return true;
}

typedef struct SelfSign {
    S3 *s3;
    const GuardRoute *route;
    const char *url;
} SelfSign;

/* A copy's call signed by the guard (a ProxyConfigure; ud is a SelfSign). */
static bool sign_self(void *ud, void *curl_easy, struct curl_slist **headers)
{
    (void)curl_easy;
    SelfSign *sign = ud;
    AwsCreds creds;
    s3_credentials(sign->s3, &creds);
    bool ok = s3sign_lines(sign->route, &creds, "PUT", sign->url, time(NULL), headers);
    explicit_bzero(&creds, sizeof creds);
    return ok;
}

/* The copy's source read (after the destination's): what the store copies
 * is pinned to this version, and with directive COPY its metadata and
 * content headers go along (the guard sends REPLACE, so the source's
 * fence never does). */
static void source_read(void *ud, long status, const struct curl_slist *headers)
{
    S3Write *w = ud;
    w->head = NULL;
    if (!guardq_preparing(w->gw))
        return; /* refused meanwhile */
    char etag[256], line[320];
    if (status == 404 || (status == 200 && is_tombstone(headers))) {
        w->req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(w->req, ERR_NOT_FOUND, json_pack("{s:s}", "s3_code", "NoSuchKey"),
                         "The specified key does not exist. (the copy source %s)", w->source);
        guardq_prepared(w->gw, false);
        return;
    }
    if (status != 200 || !header_value(headers, "ETag", etag, sizeof etag)) {
        if (status)
            http_reply_error(w->req, ERR_BAD_GATEWAY,
                             json_pack("{s:s, s:I}", "lock", w->lock, "status", (json_int_t)status),
                             "the store answered %ld to the HEAD of the copy source %s", status, w->source);
        else
            http_reply_error(w->req, ERR_BAD_GATEWAY, json_pack("{s:s}", "lock", w->lock),
                             "the store could not be reached for the HEAD of the copy source %s", w->source);
        guardq_prepared(w->gw, false);
        return;
    }
    if (!source_conditions_hold(w, etag, headers)) {
        guardq_prepared(w->gw, false);
        return;
    }
    snprintf(line, sizeof line, "x-amz-copy-source-if-match: %s", etag);
    bool ok = proxy_call_add_header(w->req->guard->call, line);
    for (const struct curl_slist *l = headers; ok && w->carry && l; l = l->next) {
        size_t n = strcspn(l->data, ":");
        if (l->data[n] != ':' || !s3copy_carried(l->data, n))
            continue;
        /* An empty value goes as "Name;": libcurl reads "Name:" as "do not send". */
        if (!l->data[n + 1 + strspn(l->data + n + 1, " \t\r\n")]) {
            char *empty; /* owned here */
            if (asprintf(&empty, "%.*s;", (int)n, l->data) < 0)
                empty = NULL;
            ok = empty && proxy_call_add_header(w->req->guard->call, empty);
            free(empty);
        } else {
            ok = proxy_call_add_header(w->req->guard->call, l->data);
        }
    }
    /* Its last header is in: signed now, by the guard (s3sign.h). */
    SelfSign sign = {w->s3, w->route, w->part_url ? w->part_url : w->url};
    if (!ok || !proxy_call_configure(w->req->guard->call, sign_self, &sign)) {
        ok = false;
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
    }
    guardq_prepared(w->gw, ok);
}

static bool start_head(S3Write *w, ProxyResult fn) { return start_head_of(w, w->url, fn); }

static bool start_head_of(S3Write *w, const char *url, ProxyResult fn)
{
    S3Sign sign = {w->s3, w->route, NULL, NULL};
    w->head = proxy_internal_new(w->proxy, "HEAD", url, fn, w);
    if (!w->head || !proxy_call_configure(w->head, s3req_sign, &sign)) {
        if (w->head)
            proxy_call_free(w->head);
        w->head = NULL;
        return false;
    }
    proxy_call_start(w->head);
    return true;
}

bool s3req_prepare(void *ud, GuardWrite *gw)
{
    S3Write *w = ud;
    w->gw = gw;
    /* A part has no precondition of its own: an UploadPartCopy reads its source only. */
    if (w->part_url ? !start_head_of(w, w->source_url, source_read) : !start_head(w, prepared)) {
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return false;
    }
    return true;
}

void s3req_write_completes(S3Write *w, bool if_match_ok)
{
    if (!w)
        return;
    w->completes = true;
    w->if_match_ok = if_match_ok;
}

/* The object read again right before the write's end leaves: a write that
 * reached the store meanwhile without changing the ETag (a metadata-only
 * copy onto itself raising the fence keeps it) shows in the fence or in
 * Last-Modified, and the write is refused before the store has all of it. */
static void confirmed(void *ud, long status, const struct curl_slist *headers)
{
    S3Write *w = ud;
    w->head = NULL;
    if (!guardq_preparing(w->gw))
        return; /* refused meanwhile */
    uint64_t fence = 0;
    char etag[256] = "", modified[64] = "";
    bool same;
    if (status == 404) {
        same = !w->existed;
    } else if (status == 200 && fence_of(headers, &fence)) {
        header_value(headers, "ETag", etag, sizeof etag);
        header_value(headers, "Last-Modified", modified, sizeof modified);
        same = w->existed && !strcmp(etag, w->etag) && fence == w->fence && !strcmp(modified, w->modified);
    } else {
        reply_store_failed(w, status, "right before the write's end");
        guardq_confirmed(w->gw, false);
        return;
    }
    if (same) {
        guardq_confirmed(w->gw, true);
        return;
    }
    if (fence > w->token)
        reply_fence_above(w, fence);
    else
        http_reply_error(w->req, ERR_WRITE_CONFLICT,
                         json_pack("{s:s, s:I, s:I}", "lock", w->lock, "token", (json_int_t)w->token, "fence",
                                   (json_int_t)fence),
                         "the object %.*s changed while the write's body arrived (another writer, not through this "
                         "gateway?); nothing was written: send the write again with the same lease",
                         path_len(w), w->req->raw_uri);
    guardq_confirmed(w->gw, false);
}

bool s3req_confirm(void *ud, GuardWrite *gw)
{
    S3Write *w = ud;
    w->gw = gw;
    if (!start_head(w, confirmed)) {
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return false;
    }
    return true;
}

/* The object read again after the store refused the precondition. */
static void rechecked(void *ud, long status, const struct curl_slist *headers)
{
    S3Write *w = ud;
    w->head = NULL;
    uint64_t fence = 0;
    if ((status == 200 && fence_of(headers, &fence) && fence > w->token)) {
        reply_fence_above(w, fence);
        return;
    }
    if (status != 200 && status != 404) {
        reply_store_failed(w, status, "after it refused the write's precondition");
        return;
    }
    if (w->source_url) {
        /* A copy's destination as the prepare step read it: the 412 was the source's. */
        char etag[256] = "";
        header_value(headers, "ETag", etag, sizeof etag);
        if (status == 404 ? !w->existed : w->existed && fence == w->fence && !strcmp(etag, w->etag)) {
            reply_source_condition(w, "the copy source changed since the guard read it, or one of its "
                                      "x-amz-copy-source-if-* conditions does not hold");
            return;
        }
    }
    http_reply_error(w->req, ERR_WRITE_CONFLICT,
                     json_pack("{s:s, s:I, s:I}", "lock", w->lock, "token", (json_int_t)w->token, "fence",
                               (json_int_t)fence),
                     "the object %.*s changed between the guard's read and its write (another writer, not through "
                     "this gateway?); nothing was written: send the write again with the same lease",
                     path_len(w), w->req->raw_uri);
}

bool s3req_final(S3Write *w)
{
    if (w->part_url)
        return false; /* an UploadPartCopy: no precondition of the guard's, the store's answer as it is */
    if (w->rechecking) {
        http_suspend_watched(w->req); /* woken early by the finished call: go on waiting */
        return true;
    }
    long status = proxy_call_status(w->req->guard->call);
    if (status != 412 && status != 409)
        return false;
    w->rechecking = true;
    if (!start_head(w, rechecked)) {
        http_reply_error(w->req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return true;
    }
    http_suspend_watched(w->req);
    return true;
}

/* Answers ------------------------------------------------------------------ */

static bool is_tombstone(const struct curl_slist *headers)
{
    char v[8];
    return header_value(headers, S3_TOMBSTONE_META, v, sizeof v);
}

bool s3req_tombstone(const struct curl_slist *headers) { return is_tombstone(headers); }

ProxyAnswerAction s3req_read_head(void *ud, long status, const struct curl_slist *headers)
{
    (void)ud;
    return status >= 300 || is_tombstone(headers) ? PROXY_GATHER : PROXY_PASS;
}

ProxyAnswerAction s3req_write_head(void *ud, long status, const struct curl_slist *headers)
{
    (void)ud;
    (void)headers;
    return status >= 300 ? PROXY_GATHER : PROXY_PASS;
}

ProxyAnswerAction s3req_delete_head(void *ud, long status, const struct curl_slist *headers)
{
    (void)ud;
    (void)status;
    (void)headers;
    return PROXY_GATHER; /* the client asked for a DELETE: 204, not the PUT's answer */
}

void s3req_read_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                         size_t len, bool complete)
{
    const GuardRoute *route = ud;
    if (status < 300 && is_tombstone(headers)) {
        http_reply_error(req, ERR_NOT_FOUND, NULL, "The specified key does not exist.");
        return;
    }
    if (!complete && status < 300) {
        http_reply_error(req, ERR_BAD_GATEWAY, NULL, "the store's answer did not arrive whole");
        return;
    }
    s3err_from_store(req, route, status, body, len);
}

ProxyAnswerAction s3req_copy_head(void *ud, long status, const struct curl_slist *headers)
{
    (void)ud;
    (void)status;
    (void)headers;
    return PROXY_GATHER; /* a result or an error: a small XML document either way */
}

void s3req_copy_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                         size_t len, bool complete)
{
    const GuardRoute *route = ud;
    if (status != 200) {
        s3req_read_gathered(ud, req, status, headers, body, len, complete);
        return;
    }
    if (!s3list_rewrite(req, route, status, body, len, complete, NULL, 0))
        return; /* an <Error> in the 200's body: answered as the error it names */
    static const char *const PASSED[] = {"x-amz-version-id", "x-amz-copy-source-version-id",
                                         "x-amz-server-side-encryption", NULL};
    for (const struct curl_slist *l = headers; l; l = l->next) {
        size_t n = strcspn(l->data, ":");
        if (!l->data[n])
            continue;
        for (const char *const *p = PASSED; *p; p++) {
            if (!prefixed(l->data, n, *p))
                continue;
            char name[128], value[1024];
            const char *v = l->data + n + 1 + strspn(l->data + n + 1, " \t");
            snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), l->data);
            snprintf(value, sizeof value, "%.*s", (int)strcspn(v, "\r\n"), v);
            http_add_header(req, name, value);
            break;
        }
    }
}

void s3req_delete_gathered(void *ud, Request *req, long status, const struct curl_slist *headers, const char *body,
                           size_t len, bool complete)
{
    (void)headers;
    const GuardRoute *route = ud;
    if (status >= 200 && status < 300) {
        http_reply_text(req, 204, "application/xml", NULL, 0);
        return;
    }
    if (!complete && status < 300) {
        http_reply_error(req, ERR_BAD_GATEWAY, NULL, "the store's answer did not arrive whole");
        return;
    }
    s3err_from_store(req, route, status, body, len);
}
