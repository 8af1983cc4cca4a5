/*
 * fuzz_body — request validation of every JSON endpoint (src/api/body.c as
 * api_acquire, api_renew, api_release and api_fence use it).
 *
 * The input is a request body, in a buffer of exactly its size (ASan sees any
 * read past it). Each endpoint's handler is replayed up to the point where
 * its body is read (replay_*: the same body_* calls, in the same order, with
 * the same field lists, limits and defaults), on a Request whose replies
 * (http_reply_error and http_reply_invalid, defined here) are recorded. The
 * verdict is compared with a reference written from openapi.yaml (AcquireRequest, RenewRequest,
 * ReleaseRequest, FenceRequest and the schemas they use), not from body.c:
 *
 *  - accepted iff the body has no NUL byte, jansson parses it
 *    (JSON_REJECT_DUPLICATES, as the server reads bodies) to an object, it
 *    has only the endpoint's fields, the required ones, each of its type and
 *    within its range or length;
 *  - each body_* helper replies exactly when it fails (body.h), so a refused
 *    request gets exactly one reply and an accepted one none; every refusal is
 *    400 bad_request (503 only for out of memory, which never happens here);
 *    a refusal of a parsed object names in `field` one of the fields at fault
 *    (unknown, missing, wrong type or out of range); an integer beyond 64 bits
 *    is refused naming the top-level member that holds it;
 *  - accepted values are jansson's (owner, ttl_ms, wait_ms, token), the
 *    defaults when absent, the lease's 16 bytes as its hex digits say, and
 *    the metadata kept as sent: exactly the bytes of its value in the body
 *    (found by this file's own scan), at most 4096 of them, parsing back
 *    json_equal to jansson's member;
 *  - body_check_name, on the input's first line taken as a lock name and a
 *    fence resource, against the LockName and ResourceName patterns.
 */
#include <jansson.h>
#include <stdbool.h>

#include "api/body.h"
#include "core/names.h"
#include "fuzz.h"
#include "net/http.h"

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)

/* ==== The HTTP layer as body.c sees it: every reply recorded ==== */

typedef struct Replies {
    int n;             /* replies to the current request */
    ErrCode code;      /* of the last one */
    bool has_field;    /* its `extra` held "field" */
    char field[128];
    char message[512]; /* formatted as http.c does */
} Replies;

static Replies replies;
static Request *current; /* the request being validated */

static void record(Request *req, ErrCode code, json_t *extra, const char *fmt, va_list ap)
{
    CHECK(req == current, "a reply to another request");
    replies.n++;
    replies.code = code;
    int len = vsnprintf(replies.message, sizeof replies.message, fmt, ap);
    CHECK(len > 0, "an empty or unformattable error message");
    replies.has_field = false;
    replies.field[0] = '\0';
    if (extra) {
        CHECK(json_is_object(extra), "extra is not an object");
        json_t *f = json_object_get(extra, "field");
        if (f) {
            CHECK(json_is_string(f) && json_string_length(f) < sizeof replies.field,
                  "extra.field is not a string of fewer than %zu bytes", sizeof replies.field);
            memcpy(replies.field, json_string_value(f), json_string_length(f) + 1);
            replies.has_field = true;
        }
    }
    json_decref(extra); /* taken over, as http.h says */
}

void http_reply_error(Request *req, ErrCode code, json_t *extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(req, code, extra, fmt, ap);
    va_end(ap);
}

/* The body helpers answer their errors with this one (decided from the
 * request alone: http.h); recorded alike. */
void http_reply_invalid(Request *req, ErrCode code, json_t *extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(req, code, extra, fmt, ap);
    va_end(ap);
}

void http_reply_error_raw(Request *req, ErrCode code, json_t *extra, const RawRefs *refs, const char *fmt, ...)
{
    (void)refs;
    va_list ap;
    va_start(ap, fmt);
    record(req, code, extra, fmt, ap);
    va_end(ap);
}

/* Each body_* helper replies exactly when it fails (body.h): one more reply
 * after a failing call, none after a passing one. */
static int steps_seen;

static bool step(bool ok, const char *call)
{
    CHECK(replies.n == steps_seen + (ok ? 0 : 1), "%s returned %s with %d replies (had %d before)", call,
          ok ? "success" : "failure", replies.n, steps_seen);
    steps_seen = replies.n;
    return ok;
}
#define STEP(call) step((call), #call)

/* ==== The handlers' validation, step by step ====
 *
 * The one place that mirrors the handlers: each replay_* is its handler from
 * its first line to the last body_* call, with the same calls in the same
 * order, the same FIELDS, constants and defaults (copied; keep in step with
 * src/api/api_locks.c and src/api/api_fence.c). What a handler does after
 * that (reentry's ttl_ms 0 when absent, the lock table, the fence's "never
 * issued" check against the lock table's last token) is not validation of
 * the body. */

/* src/api/api_locks.c */
#define TTL_MIN_MS 100
#define TTL_MAX_MS 86400000
#define TTL_DEFAULT_MS 30000
#define WAIT_MAX_MS 3600000
#define OWNER_MAX_BYTES 128
#define METADATA_MAX_BYTES 4096
/* src/api/api_fence.c */
#define TOKEN_MAX ((json_int_t)INT64_MAX)

/* What a handler read. The handlers leave these uninitialised (metadata
 * NULL); they are set to sentinels here, so a helper that forgets one shows. */
typedef struct Got {
    json_t *obj; /* body_object_new's, or NULL */
    bool accepted;
    const char *owner;
    json_int_t ttl_ms, wait_ms, token;
    uint8_t lease[LEASE_ID_BYTES];
    bool lease_present;
    char *metadata;
} Got;

/* api_acquire (src/api/api_locks.c) */
static void replay_acquire(Request *req, const char *name, Got *g)
{
    static const char *const FIELDS[] = {"owner", "ttl_ms", "wait_ms", "metadata", "lease", NULL};
    if (!STEP(body_check_name(req, "name", name)))
        return;
    json_t *obj;
    if (!STEP((obj = body_object_new(req, FIELDS)) != NULL))
        return;
    g->obj = obj;
    g->accepted = STEP(body_string(req, obj, "owner", OWNER_MAX_BYTES, true, &g->owner)) &&
                  STEP(body_int(req, obj, "ttl_ms", TTL_MIN_MS, TTL_MAX_MS, TTL_DEFAULT_MS, false, &g->ttl_ms)) &&
                  STEP(body_int(req, obj, "wait_ms", 0, WAIT_MAX_MS, 0, false, &g->wait_ms)) &&
                  STEP(body_lease(req, obj, false, g->lease, &g->lease_present)) &&
                  STEP(body_metadata(req, obj, METADATA_MAX_BYTES, &g->metadata));
}

/* api_renew (src/api/api_locks.c) */
static void replay_renew(Request *req, const char *name, Got *g)
{
    static const char *const FIELDS[] = {"lease", "ttl_ms", NULL};
    if (!STEP(body_check_name(req, "name", name)))
        return;
    json_t *obj;
    if (!STEP((obj = body_object_new(req, FIELDS)) != NULL))
        return;
    g->obj = obj;
    g->accepted = STEP(body_lease(req, obj, true, g->lease, &g->lease_present)) &&
                  STEP(body_int(req, obj, "ttl_ms", TTL_MIN_MS, TTL_MAX_MS, 0, false, &g->ttl_ms));
}

/* api_release (src/api/api_locks.c) */
static void replay_release(Request *req, const char *name, Got *g)
{
    static const char *const FIELDS[] = {"lease", NULL};
    if (!STEP(body_check_name(req, "name", name)))
        return;
    json_t *obj;
    if (!STEP((obj = body_object_new(req, FIELDS)) != NULL))
        return;
    g->obj = obj;
    g->accepted = STEP(body_lease(req, obj, true, g->lease, &g->lease_present));
}

/* api_fence (src/api/api_fence.c) */
static void replay_fence(Request *req, const char *resource, Got *g)
{
    static const char *const FIELDS[] = {"token", NULL};
    if (!STEP(body_check_name(req, "resource", resource)))
        return;
    json_t *obj;
    if (!STEP((obj = body_object_new(req, FIELDS)) != NULL))
        return;
    g->obj = obj;
    g->accepted = STEP(body_int(req, obj, "token", 1, TOKEN_MAX, 0, true, &g->token));
}

/* ==== The reference, from openapi.yaml ==== */

typedef enum Kind {
    K_OWNER,    /* Owner: a string of 1..128 bytes (OWNER_MAX_BYTES counts bytes); no control characters (body.h) */
    K_INT,      /* type: integer (a JSON integer: jansson's), minimum..maximum */
    K_LEASE,    /* LeaseId: ^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$ */
    K_METADATA, /* Metadata: an object, at most 4096 bytes as sent, nested at most 16 levels deep */
} Kind;

typedef struct Rule {
    const char *field;
    Kind kind;
    bool required;
    json_int_t min, max, dflt; /* K_INT */
} Rule;

typedef struct Endpoint {
    const char *name;
    const char *path_name; /* the name or resource in the path: a valid one */
    void (*replay)(Request *req, const char *name, Got *g);
    Rule rules[6]; /* up to an empty field */
} Endpoint;

#define SPEC_METADATA_MAX_BYTES 4096
#define SPEC_METADATA_MAX_DEPTH 16
#define SPEC_OWNER_MAX_BYTES 128

static const Endpoint ENDPOINTS[] = {
    {"acquire",
     "orders/42",
     replay_acquire,
     {{"owner", K_OWNER, true, 0, 0, 0},
      {"ttl_ms", K_INT, false, 100, 86400000, 30000},
      {"wait_ms", K_INT, false, 0, 3600000, 0},
      {"metadata", K_METADATA, false, 0, 0, 0},
      {"lease", K_LEASE, false, 0, 0, 0}}},
    /* renew: ttl_ms omitted keeps the lease's current TTL, which the handler passes on as 0 */
    {"renew", "orders/42", replay_renew, {{"lease", K_LEASE, true, 0, 0, 0}, {"ttl_ms", K_INT, false, 100, 86400000, 0}}},
    {"release", "orders/42", replay_release, {{"lease", K_LEASE, true, 0, 0, 0}}},
    {"fence", "db/invoices", replay_fence, {{"token", K_INT, true, 1, INT64_MAX, 0}}},
};
#define NENDPOINTS (sizeof ENDPOINTS / sizeof ENDPOINTS[0])

/* -- this file's own scan of a JSON object text (not rawjson.c's) -- */

static size_t scan_ws(const char *p, size_t i, size_t n)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    return i;
}

/* p[i] is '"': the index after its closing quote (n when cut off). */
static size_t scan_string(const char *p, size_t i, size_t n)
{
    for (i++; i < n; i++) {
        if (p[i] == '"')
            return i + 1;
        if (p[i] == '\\')
            i++;
    }
    return n;
}

/* The index after the value that starts at p[i] (n when cut off). The text is
 * JSON (jansson accepted it, or a prefix of what it lexed): recursive. */
static size_t scan_value(const char *p, size_t i, size_t n)
{
    if (i >= n)
        return n;
    if (p[i] == '"')
        return scan_string(p, i, n);
    if (p[i] == '{' || p[i] == '[') {
        char close = p[i] == '{' ? '}' : ']';
        i++;
        for (;;) {
            i = scan_ws(p, i, n);
            if (i >= n)
                return n;
            if (p[i] == close)
                return i + 1;
            if (p[i] == ',' || p[i] == ':')
                i++;
            else
                i = scan_value(p, i, n);
        }
    }
    while (i < n && !strchr(",:]} \t\r\n", p[i]))
        i++;
    return i;
}

typedef struct Member {
    char *key; /* decoded by jansson; NULL if it does not decode (a cut-off text) */
    size_t vs, ve;
} Member;

/* The top-level members of p[0..n), in order, with their values' spans as
 * sent (no whitespace around). A member cut off by the end of the text has
 * its value run to the end. Returns how many, in *out (free_members). */
static size_t scan_members(const char *p, size_t n, Member **outp)
{
    size_t count = 0, max = n / 4 + 1; /* a member takes at least 4 bytes: "":0 */
    Member *out = malloc(max * sizeof *out);
    CHECK(out != NULL, "out of memory");
    *outp = out;
    size_t i = scan_ws(p, 0, n);
    if (i >= n || p[i] != '{')
        return 0;
    i = scan_ws(p, i + 1, n);
    while (count < max && i < n && p[i] == '"') {
        size_t ks = i, ke = scan_string(p, i, n);
        i = scan_ws(p, ke, n);
        if (i >= n || p[i] != ':')
            break;
        size_t vs = scan_ws(p, i + 1, n), ve = scan_value(p, vs, n);
        json_t *k = json_loadb(p + ks, ke - ks, JSON_DECODE_ANY, NULL);
        out[count].key = json_is_string(k) ? strndup(json_string_value(k), json_string_length(k)) : NULL;
        json_decref(k);
        out[count].vs = vs;
        out[count].ve = ve;
        count++;
        i = scan_ws(p, ve, n);
        if (i >= n || p[i] != ',')
            break;
        i = scan_ws(p, i + 1, n);
    }
    return count;
}

static void free_members(Member *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(m[i].key);
    free(m);
}

/* Nesting depth: a scalar is 0, [] and {} are 1. */
static int ref_depth(const json_t *v)
{
    int deepest = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int d = ref_depth(x);
            deepest = d > deepest ? d : deepest;
        }
        return deepest + 1;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int d = ref_depth(x);
            deepest = d > deepest ? d : deepest;
        }
        return deepest + 1;
    }
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The LeaseId pattern; out gets the 16 bytes its hex digits spell. */
static bool ref_lease(const char *s, size_t n, uint8_t out[LEASE_ID_BYTES])
{
    if (n != 36)
        return false;
    size_t b = 0;
    for (size_t i = 0; i < 36;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
            i++;
            continue;
        }
        int hi = hexval(s[i]), lo = hexval(s[i + 1]);
        if (hi < 0 || lo < 0 || i + 1 == 8 || i + 1 == 13 || i + 1 == 18 || i + 1 == 23)
            return false;
        out[b++] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }
    return b == LEASE_ID_BYTES;
}

/* The metadata's value as sent: its span, by this file's scan. */
static bool ref_span(const char *body, size_t len, const char *key, size_t *vs, size_t *ve)
{
    Member *m;
    size_t n = scan_members(body, len, &m);
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        if (m[i].key && !strcmp(m[i].key, key)) {
            *vs = m[i].vs;
            *ve = m[i].ve;
            found = true;
        }
    }
    free_members(m, n);
    return found;
}

/* Is the (present) value valid for the rule? */
static bool ref_valid(const Rule *r, json_t *v, const char *body, size_t len)
{
    switch (r->kind) {
    case K_OWNER: {
        if (!json_is_string(v))
            return false;
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n < 1 || n > SPEC_OWNER_MAX_BYTES)
            return false;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
                return false;
        return true;
    }
    case K_INT:
        return json_is_integer(v) && json_integer_value(v) >= r->min && json_integer_value(v) <= r->max;
    case K_LEASE: {
        uint8_t bytes[LEASE_ID_BYTES];
        return json_is_string(v) && ref_lease(json_string_value(v), json_string_length(v), bytes);
    }
    case K_METADATA: {
        if (!json_is_object(v) || ref_depth(v) > SPEC_METADATA_MAX_DEPTH)
            return false;
        size_t vs, ve;
        CHECK(ref_span(body, len, r->field, &vs, &ve), "harness: the scan does not find '%s'", r->field);
        return ve - vs <= SPEC_METADATA_MAX_BYTES;
    }
    }
    return false;
}

static const Rule *rule_of(const Endpoint *e, const char *field)
{
    for (const Rule *r = e->rules; r->field; r++)
        if (!strcmp(r->field, field))
            return r;
    return NULL;
}

/* Does a refusal that names `named` name the field `fault`? A client's field
 * name can be as long as the body; an answer may echo it cut to its first
 * FIELD_ECHO_MAX bytes (body.c's unknown-field message does), or up to 3
 * fewer (cut before a UTF-8 character that would not fit whole). */
#define FIELD_ECHO_MAX 79
static bool names_fault(const char *named, const char *fault)
{
    size_t n = strlen(fault), m = strlen(named);
    if (n <= FIELD_ECHO_MAX)
        return !strcmp(named, fault);
    return m <= FIELD_ECHO_MAX && m + 3 >= FIELD_ECHO_MAX && !memcmp(named, fault, m);
}

/* How the reference sees the body, once per input. */
typedef struct Ref {
    bool has_nul;
    json_t *obj;          /* jansson's parse as the server does it, or NULL */
    json_error_t err;
    bool overflow_named;  /* an integer beyond 64 bits inside a top-level member: */
    char *overflow_field; /* that member's key */
} Ref;

/* Replays one endpoint and checks it against the reference. */
static void check_endpoint(const Endpoint *e, const char *body, size_t len, const Ref *ref)
{
    Request req;
    memset(&req, 0, sizeof req);
    req.body = (char *)body;
    req.body_len = len;
    current = &req;
    memset(&replies, 0, sizeof replies);
    steps_seen = 0;

    static const char SENTINEL[] = "sentinel";
    Got g = {.owner = SENTINEL, .ttl_ms = -777, .wait_ms = -777, .token = -777, .lease_present = true};
    memset(g.lease, 0xa5, sizeof g.lease);
    e->replay(&req, e->path_name, &g);

    /* The reference verdict, and the fields at fault. */
    const char *faults[64];
    size_t nfaults = 0;
    bool expect = !ref->has_nul && ref->obj && json_is_object(ref->obj);
    if (expect) {
        const char *key;
        json_t *v;
        json_object_foreach(ref->obj, key, v) {
            const Rule *r = rule_of(e, key);
            if ((!r || !ref_valid(r, v, body, len)) && nfaults < 64)
                faults[nfaults++] = key;
        }
        for (const Rule *r = e->rules; r->field; r++)
            if (r->required && !json_object_get(ref->obj, r->field) && nfaults < 64)
                faults[nfaults++] = r->field;
        expect = nfaults == 0;
    }
    if (fuzz_tracing())
        fprintf(stderr, "%s: %s (reference: %s, %zu fields at fault%s%s%s); %d replies%s%s%s%s\n", e->name,
                g.accepted ? "accepted" : "refused", expect ? "accept" : "refuse", nfaults,
                ref->overflow_named ? ", an integer beyond 64 bits in '" : "",
                ref->overflow_named ? ref->overflow_field : "", ref->overflow_named ? "'" : "", replies.n,
                replies.n ? ": " : "", replies.n ? replies.message : "", replies.has_field ? " field=" : "",
                replies.field);

    CHECK(g.accepted == expect, "%s %s a body the reference would %s (%s); body %.*s", e->name,
          g.accepted ? "accepted" : "refused", expect ? "accept" : "refuse",
          replies.n ? replies.message : "no reply", (int)(len < 600 ? len : 600), body);

    if (!g.accepted) {
        CHECK(replies.n == 1, "%s refused a body with %d replies; body %.*s", e->name, replies.n,
              (int)(len < 600 ? len : 600), body);
        CHECK(replies.code == ERR_BAD_REQUEST, "%s refused a body with error %d, not bad_request (%s)", e->name,
              (int)replies.code, replies.message);
        if (ref->obj && json_is_object(ref->obj) && !ref->has_nul) {
            /* A parsed object: one or more fields are at fault; one is named. */
            CHECK(replies.has_field,
                  "%s refused a body without naming a field (%s); body %.*s", e->name, replies.message,
                  (int)(len < 600 ? len : 600), body);
            bool among = !replies.has_field; /* tolerated just above */
            for (size_t i = 0; i < nfaults && !among; i++)
                among = names_fault(replies.field, faults[i]);
            CHECK(among, "%s named field '%s', which is not at fault (%s); body %.*s", e->name, replies.field,
                  replies.message, (int)(len < 600 ? len : 600), body);
        } else if (ref->overflow_named) {
            const char *fault = ref->overflow_field;
            CHECK(replies.has_field && names_fault(replies.field, fault),
                  "%s refused an integer beyond 64 bits in '%s' naming %s%s%s (%s); body %.*s", e->name,
                  ref->overflow_field, replies.has_field ? "'" : "no field", replies.field,
                  replies.has_field ? "'" : "", replies.message, (int)(len < 600 ? len : 600), body);
        }
    } else {
        CHECK(replies.n == 0, "%s accepted a body but replied %d times", e->name, replies.n);
        /* Every value as jansson reads it, or the default. */
        for (const Rule *r = e->rules; r->field; r++) {
            json_t *v = json_object_get(ref->obj, r->field);
            switch (r->kind) {
            case K_OWNER:
                CHECK(g.owner && g.owner != SENTINEL && strlen(g.owner) == json_string_length(v) &&
                          !memcmp(g.owner, json_string_value(v), json_string_length(v)),
                      "%s: owner read as '%s', jansson reads '%s'", e->name, g.owner ? g.owner : "(null)",
                      json_string_value(v));
                break;
            case K_INT: {
                json_int_t got = !strcmp(r->field, "ttl_ms") ? g.ttl_ms : !strcmp(r->field, "wait_ms") ? g.wait_ms : g.token;
                json_int_t want = v ? json_integer_value(v) : r->dflt;
                CHECK(got == want, "%s: %s read as %lld, expected %lld", e->name, r->field, (long long)got,
                      (long long)want);
                break;
            }
            case K_LEASE: {
                uint8_t want[LEASE_ID_BYTES];
                CHECK(g.lease_present == (v != NULL), "%s: lease present %d, in the body %d", e->name,
                      g.lease_present, v != NULL);
                if (v) {
                    CHECK(ref_lease(json_string_value(v), json_string_length(v), want), "harness: lease");
                    CHECK(!memcmp(g.lease, want, LEASE_ID_BYTES), "%s: lease '%s' read as other bytes", e->name,
                          json_string_value(v));
                }
                break;
            }
            case K_METADATA:
                if (!v) {
                    CHECK(g.metadata == NULL, "%s: metadata '%s' read from a body without it", e->name, g.metadata);
                    break;
                }
                CHECK(g.metadata != NULL, "%s: metadata given but not read", e->name);
                size_t vs, ve;
                CHECK(ref_span(body, len, "metadata", &vs, &ve), "harness: metadata not found");
                size_t n = strlen(g.metadata);
                CHECK(n == ve - vs && !memcmp(g.metadata, body + vs, n),
                      "%s: metadata kept as '%s', sent as '%.*s'", e->name, g.metadata, (int)(ve - vs), body + vs);
                CHECK(n <= SPEC_METADATA_MAX_BYTES, "%s: metadata of %zu bytes kept", e->name, n);
                json_error_t err;
                json_t *back = json_loads(g.metadata, 0, &err);
                CHECK(back && json_equal(back, v), "%s: metadata kept as '%s' does not parse back equal (%s)",
                      e->name, g.metadata, back ? "differs" : err.text);
                json_decref(back);
                break;
            }
        }
    }
    free(g.metadata);
    json_decref(g.obj);
    current = NULL;
}

/* The LockName / ResourceName patterns: [A-Za-z0-9._~:/-]{1,256}, and for a
 * lock not (^|/)(acquire|renew|release|history|value)$. */
static bool ref_name(const char *s, bool lock)
{
    size_t n = strlen(s);
    if (n < 1 || n > 256)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '~' || c == ':' || c == '/' || c == '-';
        if (!ok)
            return false;
    }
    if (!lock)
        return true;
    const char *last = s;
    for (const char *p = s; *p; p++)
        if (*p == '/')
            last = p + 1;
    return strcmp(last, "acquire") && strcmp(last, "renew") && strcmp(last, "release") && strcmp(last, "history") &&
           strcmp(last, "value");
}

static void check_name(const char *name, const char *what)
{
    Request req;
    memset(&req, 0, sizeof req);
    current = &req;
    memset(&replies, 0, sizeof replies);
    steps_seen = 0;
    bool lock = !strcmp(what, "name");
    bool ok = STEP(body_check_name(&req, what, name));
    CHECK(ok == ref_name(name, lock), "body_check_name(%s, '%s') %s it", what, name, ok ? "accepts" : "refuses");
    if (!ok)
        CHECK(replies.code == ERR_BAD_REQUEST && replies.has_field && !strcmp(replies.field, what),
              "body_check_name(%s) refused '%s' with error %d naming '%s'", what, name, (int)replies.code,
              replies.field);
    current = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The body in a buffer of exactly its size: no NUL after it. */
    char *body = malloc(size ? size : 1);
    CHECK(body != NULL, "out of memory");
    memcpy(body, data, size);

    Ref ref;
    memset(&ref, 0, sizeof ref);
    ref.has_nul = memchr(body, '\0', size) != NULL;
    ref.obj = json_loadb(body, size, JSON_REJECT_DUPLICATES, &ref.err);
    if (!ref.obj && !ref.has_nul && json_error_code(&ref.err) == json_error_numeric_overflow) {
        /* jansson stops right after the number: the member whose value holds its last byte. */
        size_t pos = (size_t)ref.err.position;
        CHECK(pos >= 1 && pos <= size, "harness: overflow position %zu of %zu", pos, size);
        Member *m;
        size_t n = scan_members(body, pos, &m);
        for (size_t i = 0; i < n; i++) {
            if (m[i].key && m[i].vs < pos && pos <= m[i].ve && !ref.overflow_named) {
                ref.overflow_named = true;
                ref.overflow_field = strdup(m[i].key);
            }
        }
        free_members(m, n);
    }
    for (size_t i = 0; i < NENDPOINTS; i++)
        check_endpoint(&ENDPOINTS[i], body, size, &ref);
    json_decref(ref.obj);
    free(ref.overflow_field);

    /* The first line of the input as a lock name and as a fence resource. */
    size_t line = 0;
    while (line < size && line < 300 && data[line] != '\n' && data[line] != '\0')
        line++;
    char *name = strndup((const char *)data, line);
    CHECK(name != NULL, "out of memory");
    check_name(name, "name");
    check_name(name, "resource");
    free(name);
    free(body);
    return 0;
}
