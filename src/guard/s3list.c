/* s3list — an S3 route's bucket; see s3list.h. */
#include "guard/s3list.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard/s3err.h"
#include "guard/s3scope.h"
#include "guard/s3xml.h"
#include "guard/sigv4.h"
#include "net/auth.h"
#include "net/http.h"

void s3list_bucket_name(const GuardRoute *route, char *out, size_t outlen)
{
    const char *p = route->prefix;
    while (*p == '/')
        p++;
    size_t n = strlen(p);
    while (n && p[n - 1] == '/')
        n--;
    snprintf(out, outlen, "%.*s", (int)n, p);
}

static void reply_xml_text(Request *req, unsigned status, S3Out *o)
{
    size_t len = 0;
    char *text = s3out_take(o, &len);
    if (!text) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    http_reveals_nothing(req);
    http_reply_text(req, status, "application/xml", text, len);
}

void s3list_answer_bucket(Request *req, const GuardRoute *route, const char *method, bool location)
{
    S3Out o = {0};
    if (location) {
        /* us-east-1 is the empty LocationConstraint. */
        s3out_str(&o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<LocationConstraint "
                      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
        if (strcmp(route->region, "us-east-1") != 0)
            s3out_escaped(&o, route->region);
        s3out_str(&o, "</LocationConstraint>");
    }
    (void)method;
    reply_xml_text(req, 200, &o);
    http_add_header(req, "x-amz-bucket-region", route->region);
}

/* Appends the key `s` to o as a listing's encoding-type=url has it: every
 * byte but A-Za-z0-9-._~ and '/' as %XX. */
static void key_url_encoded(S3Out *o, const char *s)
{
    static const char HEX[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '.' || *p == '_' || *p == '~' || *p == '/') {
            s3out_add(o, (const char *)p, 1);
        } else {
            char e[3] = {'%', HEX[*p >> 4], HEX[*p & 15]};
            s3out_add(o, e, 3);
        }
    }
}

static void key_prefix(const GuardRoute *route, S3Out *o)
{
    if (route->keyprefix[0]) {
        s3out_str(o, route->keyprefix);
        s3out_str(o, "/");
    }
}

char *s3list_url(Request *req, const GuardRoute *route, bool v2, const char *prefix)
{
    S3Out o = {0};
    s3out_str(&o, route->endpoint);
    s3out_str(&o, "/");
    s3out_str(&o, route->bucket);
    s3out_str(&o, "?");
    /* In the order SigV4 sorts them (by name), each once, each value encoded
     * as SigV4 canonicalizes it: the query as written is its canonical one,
     * which is what libcurl 7.88 signs and what S3 computes (sigv4.h). */
    static const char *const V2[] = {"continuation-token", "delimiter", "list-type", "max-keys", "prefix",
                                     "start-after", NULL};
    static const char *const V1[] = {"delimiter", "marker", "max-keys", "prefix", NULL};
    bool first = true;
    for (const char *const *k = v2 ? V2 : V1; *k; k++) {
        bool is_prefix = !strcmp(*k, "prefix");
        const char *v = !strcmp(*k, "list-type") ? "2" : is_prefix ? (*prefix ? prefix : NULL) : http_query(req, *k);
        bool within = is_prefix || !strcmp(*k, "start-after") || !strcmp(*k, "marker");
        /* The store is always asked within the key prefix, also when the client names none. */
        if (!v && !(is_prefix && route->keyprefix[0]))
            continue;
        s3out_str(&o, first ? "" : "&");
        first = false;
        s3out_str(&o, *k);
        s3out_str(&o, "=");
        S3Out val = {0};
        if (within)
            key_prefix(route, &val);
        s3out_str(&val, v ? v : "");
        size_t n;
        char *t = s3out_take(&val, &n);
        if (!t) {
            free(s3out_take(&o, &n));
            return NULL;
        }
        char *e = malloc(3 * n + 1);
        if (!e) {
            free(t);
            free(s3out_take(&o, &n));
            return NULL;
        }
        sigv4_encode(e, t, n);
        s3out_str(&o, e);
        free(e);
        free(t);
    }
    size_t n;
    return s3out_take(&o, &n);
}

/* `s` without the route's key prefix, or NULL when it is not within it. */
static const char *below(const GuardRoute *route, const char *s)
{
    size_t n = strlen(route->keyprefix);
    if (!n)
        return s;
    return !strncmp(s, route->keyprefix, n) && s[n] == '/' ? s + n + 1 : NULL;
}

/* May the request's key read `name` (a key), or some key under `prefix`? */
static bool readable(const Request *req, const GuardRoute *route, const char *name, bool is_prefix)
{
    const AuthKey *k = req->access.key;
    if (!req->srv->auth || !k || k->every_name || route->lock[0])
        return true; /* no keys; or on a lock=NAME route the access check covered the one lock */
    if (auth_covers(k, name))
        return true;
    if (is_prefix)
        for (size_t i = 0; i < k->nprefixes; i++)
            if (!strncmp(k->prefixes[i], name, strlen(name)))
                return true;
    return false;
}

/* Takes x's Owner and Initiator out: on S3 they name the gateway's account
 * and principal (an IAM user's ARN), which are the store's, not the
 * client's. */
static void drop_owner(S3Xml *x)
{
    static const char *const WHO[] = {"Owner", "Initiator"};
    for (size_t i = 0; i < sizeof WHO / sizeof WHO[0]; i++)
        for (S3Xml *c; (c = s3xml_child(x, WHO[i]));)
            s3xml_remove(x, c);
}

/* Sets x's text to `s` stripped of the key prefix, URL-encoded when asked. */
static bool set_client(S3Xml *x, const char *s, bool url)
{
    if (!url)
        return s3xml_set_text(x, s);
    S3Out o = {0};
    key_url_encoded(&o, s);
    size_t n;
    char *t = s3out_take(&o, &n);
    bool ok = t && s3xml_set_text(x, t);
    free(t);
    return ok;
}

static bool strip_field(const GuardRoute *route, S3Xml *root, const char *name, bool url)
{
    S3Xml *f = s3xml_child(root, name);
    if (!f)
        return true;
    const char *b = below(route, f->text);
    char *copy = strdup(b ? b : "");
    bool ok = copy && set_client(f, copy, url);
    free(copy);
    return ok;
}

/* Does the request's key read only some names (so that its listings are scoped, s3scope.h)? */
static const AuthKey *narrow_key(const Request *req, const GuardRoute *route)
{
    const AuthKey *k = req->access.key;
    return req->srv->auth && k && !k->every_name && !route->lock[0] ? k : NULL;
}

static const char *query_or(Request *req, const char *name, const char *otherwise)
{
    const char *v = http_query(req, name);
    return v ? v : otherwise;
}

/* A page the guard makes itself: no keys, the common prefixes in `common`
 * (n of them, sorted) after the client's marker, each once, at most
 * max-keys. */
static void reply_made(Request *req, const GuardRoute *route, bool v2, char (*common)[AUTH_PREFIX_MAX + 1], size_t n)
{
    const char *et = http_query(req, "encoding-type");
    bool url = et && !strcmp(et, "url");
    const char *after = v2 ? query_or(req, "continuation-token", query_or(req, "start-after", ""))
                           : query_or(req, "marker", "");
    const char *mk = http_query(req, "max-keys");
    long max = mk ? strtol(mk, NULL, 10) : 1000;
    if (max < 0 || max > 1000)
        max = 1000;
    char bucket[256];
    s3list_bucket_name(route, bucket, sizeof bucket);
    S3Xml *root = s3xml_new("ListBucketResult");
    bool ok = root && s3xml_add(root, "Name", bucket);
    S3Xml *x;
    ok = ok && (x = s3xml_add(root, "Prefix", "")) && set_client(x, query_or(req, "prefix", ""), url);
    if (ok && http_query(req, "delimiter"))
        ok = (x = s3xml_add(root, "Delimiter", "")) && set_client(x, http_query(req, "delimiter"), url);
    char num[24];
    snprintf(num, sizeof num, "%ld", max);
    ok = ok && s3xml_add(root, "MaxKeys", num);
    size_t shown = 0;
    const char *last = NULL;
    bool truncated = false;
    for (size_t i = 0; ok && i < n; i++) {
        if (strcmp(common[i], after) <= 0 || (i && !strcmp(common[i], common[i - 1])))
            continue;
        if ((long)shown == max) {
            truncated = true;
            break;
        }
        S3Xml *cp = s3xml_add(root, "CommonPrefixes", "");
        ok = cp && (x = s3xml_add(cp, "Prefix", "")) && set_client(x, common[i], url);
        last = common[i];
        shown++;
    }
    ok = ok && s3xml_add(root, "IsTruncated", truncated ? "true" : "false");
    if (ok && truncated)
        ok = (x = s3xml_add(root, v2 ? "NextContinuationToken" : "NextMarker", "")) && set_client(x, last, url && !v2);
    if (ok && v2) {
        snprintf(num, sizeof num, "%zu", shown);
        ok = s3xml_add(root, "KeyCount", num) != NULL;
    }
    if (ok && url)
        ok = s3xml_add(root, "EncodingType", "url") != NULL;
    S3Out o = {0};
    if (ok)
        s3xml_write(&o, root);
    s3xml_free(root);
    if (!ok) {
        free(o.s);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    reply_xml_text(req, 200, &o);
}

static int compare_names(const void *a, const void *b) { return strcmp(a, b); }

bool s3list_scope(Request *req, const GuardRoute *route, bool v2, char *prefix, size_t len)
{
    const char *asked = query_or(req, "prefix", "");
    snprintf(prefix, len, "%s", asked);
    const AuthKey *k = narrow_key(req, route);
    if (!k)
        return true;
    const char *delimiter = query_or(req, "delimiter", "");
    size_t which, n = 0;
    char (*common)[AUTH_PREFIX_MAX + 1] = NULL; /* owned */
    switch (s3scope_plan(k->prefixes, k->nprefixes, asked, delimiter, &which)) {
    case S3SCOPE_ALL:
        return true;
    case S3SCOPE_NARROW:
        snprintf(prefix, len, "%s", k->prefixes[which]);
        return true;
    case S3SCOPE_PREFIXES:
        if (!(common = calloc(k->nprefixes, sizeof *common))) {
            http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
            return false;
        }
        for (size_t i = 0; i < k->nprefixes; i++)
            if (s3scope_common(k->prefixes[i], asked, delimiter, common[n], sizeof common[n]))
                n++;
        qsort(common, n, sizeof *common, compare_names);
        reply_made(req, route, v2, common, n);
        free(common);
        return false;
    case S3SCOPE_NOTHING:
        reply_made(req, route, v2, NULL, 0);
        return false;
    case S3SCOPE_REFUSED:
    default:
        req->srv->metrics.guard_refused[GUARD_REFUSED_REQUEST]++;
        http_reply_error(req, ERR_FORBIDDEN, NULL,
                         "this API key reads only names under its prefixes, and a listing of prefix '%.200s' would "
                         "reach past them: list with a prefix within one of them, or with a delimiter that ends "
                         "each of them",
                         asked);
        return false;
    }
}

void s3list_reply(Request *req, const GuardRoute *route, bool v2, long status, const char *body, size_t len,
                  bool complete)
{
    if (status != 200 || !complete) {
        if (complete)
            s3err_from_store(req, route, status, body, len);
        else
            http_reply_error(req, ERR_BAD_GATEWAY, NULL, "the store's listing did not arrive whole");
        return;
    }
    S3Xml *root = s3xml_parse(body, len);
    if (!root || strcmp(root->name, "ListBucketResult") != 0) {
        s3xml_free(root);
        http_reply_error(req, ERR_BAD_GATEWAY, NULL, "the store's listing is not a ListBucketResult");
        return;
    }
    const char *et = http_query(req, "encoding-type");
    bool url = et && !strcmp(et, "url");
    char bucket[256];
    s3list_bucket_name(route, bucket, sizeof bucket);
    bool ok = true;
    S3Xml *name = s3xml_child(root, "Name");
    if (name)
        ok = s3xml_set_text(name, bucket);
    size_t count = 0;
    char last[1100] = "";
    for (S3Xml *c = root->first, *next; ok && c; c = next) {
        next = c->next;
        bool contents = !strcmp(c->name, "Contents"), common = !strcmp(c->name, "CommonPrefixes");
        if (!contents && !common)
            continue;
        S3Xml *k = s3xml_child(c, contents ? "Key" : "Prefix");
        const char *b = k ? below(route, k->text) : NULL;
        /* The page's last entry, key or common prefix, shown or not: where the next page begins. */
        if (k && strcmp(k->text, last) > 0)
            snprintf(last, sizeof last, "%s", k->text);
        bool hide = !b || !*b || !readable(req, route, b, common);
        if (contents && b && !hide) {
            const char *size = s3xml_text(c, "Size"), *etag = s3xml_text(c, "ETag");
            hide = !strcmp(b, S3_PROBE_KEY) ||
                   (size && etag && !strcmp(size, "72") && !strcmp(etag, S3_TOMBSTONE_ETAG));
        }
        if (hide) {
            s3xml_remove(root, c);
            continue;
        }
        char *copy = strdup(b);
        ok = copy && set_client(k, copy, url);
        free(copy);
        drop_owner(c);
        count++;
    }
    /* The client's prefix, as it asked (the store may have been asked with a longer one, s3scope.h). */
    S3Xml *pf = s3xml_child(root, "Prefix");
    ok = ok && (!pf || set_client(pf, query_or(req, "prefix", ""), url)) &&
         strip_field(route, root, "StartAfter", url) && strip_field(route, root, "Marker", url);
    S3Xml *delim = s3xml_child(root, "Delimiter");
    if (ok && delim && url) {
        char *copy = strdup(delim->text);
        ok = copy && set_client(delim, copy, true);
        free(copy);
    }
    S3Xml *kc = s3xml_child(root, "KeyCount");
    if (ok && kc) {
        char n[24];
        snprintf(n, sizeof n, "%zu", count);
        ok = s3xml_set_text(kc, n);
    }
    /* A truncated page of ListObjects goes on after its last entry: S3's
     * NextMarker, which is that entry's name (moto's is a token of its own,
     * which would not go through the key prefix). */
    const char *trunc = s3xml_text(root, "IsTruncated");
    for (S3Xml *nm; !v2 && (nm = s3xml_child(root, "NextMarker"));)
        s3xml_remove(root, nm);
    if (ok && !v2 && trunc && !strcmp(trunc, "true") && last[0]) {
        S3Xml *nm = s3xml_add(root, "NextMarker", "");
        const char *b = below(route, last);
        ok = nm && set_client(nm, b ? b : "", url);
    }
    if (ok && url && !s3xml_child(root, "EncodingType"))
        ok = s3xml_add(root, "EncodingType", "url") != NULL;
    S3Out o = {0};
    if (ok)
        s3xml_write(&o, root);
    s3xml_free(root);
    if (!ok) {
        free(o.s);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    size_t n;
    char *text = s3out_take(&o, &n);
    if (!text) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    http_reply_text(req, 200, "application/xml", text, n);
}

/* The HTTP status of an error code a store sends in a 200's body (S3 does
 * for CompleteMultipartUpload). */
static long status_of(const char *code)
{
    static const struct {
        const char *code;
        long status;
    } S[] = {{"PreconditionFailed", 412}, {"NoSuchUpload", 404}, {"NoSuchKey", 404}, {"InvalidPart", 400},
             {"InvalidPartOrder", 400}, {"EntityTooSmall", 400}, {"AccessDenied", 403}, {"SlowDown", 503}};
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++)
        if (!strcmp(S[i].code, code))
            return S[i].status;
    return 500;
}

bool s3list_rewrite(Request *req, const GuardRoute *route, long status, const char *body, size_t len, bool complete,
                    char *upload_id, size_t id_len)
{
    if (!complete) {
        http_reply_error(req, ERR_BAD_GATEWAY, NULL, "the store's answer did not arrive whole");
        return false;
    }
    S3Xml *root = status == 200 && len ? s3xml_parse(body, len) : NULL;
    if (status != 200 || !root || !strcmp(root->name, "Error")) {
        const char *code = root ? s3xml_text(root, "Code") : NULL;
        s3err_from_store(req, route, status == 200 ? (code ? status_of(code) : 502) : status, body, len);
        s3xml_free(root);
        return false;
    }
    char bucket[256];
    s3list_bucket_name(route, bucket, sizeof bucket);
    bool ok = true;
    for (S3Xml *c = root->first; ok && c; c = c->next) {
        if (!strcmp(c->name, "Bucket")) {
            ok = s3xml_set_text(c, bucket);
        } else if (!strcmp(c->name, "Key")) {
            const char *b = below(route, c->text);
            char *copy = strdup(b ? b : "");
            ok = copy && s3xml_set_text(c, copy);
            free(copy);
        } else if (!strcmp(c->name, "Location")) {
            char loc[1200];
            snprintf(loc, sizeof loc, "%.*s", (int)strcspn(req->raw_uri, "?"), req->raw_uri);
            ok = s3xml_set_text(c, loc);
        } else if (!strcmp(c->name, "UploadId") && upload_id) {
            snprintf(upload_id, id_len, "%s", c->text);
        }
    }
    drop_owner(root);
    S3Out o = {0};
    if (ok)
        s3xml_write(&o, root);
    s3xml_free(root);
    size_t n;
    char *text = ok ? s3out_take(&o, &n) : NULL;
    if (!text) {
        free(o.s);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return false;
    }
    http_reply_text(req, 200, "application/xml", text, n);
    return true;
}
