/* lockspace — a lock space's identity in etcd; see lockspace.h. */
#include "store/lockspace.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

#include "store/jsondump.h"

/* Each attempt waits at most this long for one member, and the check goes
 * round the members until this budget is spent (etcd.h). */
#define CHECK_CALL_MS 2000L
#define CHECK_FIRST_MS 1000L
#define CHECK_BUDGET_MS 10000L
/* Keys looked at under a prefix that is not empty, to name a lock space inside it. */
#define SCAN_KEYS 1000

typedef enum Found { FOUND_NONE, FOUND_VALUE, FOUND_DENIED } Found;

/* A call about `what` failed with why: said as etcd's refusal, or as etcd out of reach. */
static void call_error(const char *what, const char *why, char *err, size_t errlen)
{
    if (!strncmp(why, "etcd ", 5))
        snprintf(err, errlen, "%s: %s", what, why); /* already says what etcd did (a refused login) */
    else if (strstr(why, ": HTTP "))
        snprintf(err, errlen, "etcd refused %s: %s", what, why);
    else
        snprintf(err, errlen, "cannot reach etcd (%s): %s", what, why);
}

/* One key's value: FOUND_VALUE with *value (the caller frees it), FOUND_NONE,
 * FOUND_DENIED when this gateway's etcd role may not read it, or -1 with err. */
static int read_key(EtcdClient *etcd, const char *key, char **value, char *err, size_t errlen)
{
    *value = NULL;
    char *kb = etcd_b64_encode(key, strlen(key));
    json_t *resp;
    char why[800];
    int rc = etcd_call(etcd, "/v3/kv/range", kb ? json_pack("{s:s}", "key", kb) : NULL, &resp, why, sizeof why);
    free(kb);
    if (rc) {
        if (strstr(why, "permission denied"))
            return FOUND_DENIED;
        char what[340];
        snprintf(what, sizeof what, "reading %s", key);
        call_error(what, why, err, errlen);
        return -1;
    }
    const char *v64 = json_string_value(json_object_get(json_array_get(json_object_get(resp, "kvs"), 0), "value"));
    size_t len = 0;
    int found = FOUND_NONE;
    if (json_array_size(json_object_get(resp, "kvs"))) {
        *value = etcd_b64_decode(v64 ? v64 : "", &len);
        found = FOUND_VALUE;
        if (!*value || strlen(*value) != len) {
            free(*value);
            *value = NULL;
            snprintf(err, errlen, "%s: a value etcd's answer does not hold as text", key);
            found = -1;
        }
    }
    json_decref(resp);
    return found;
}

/* The identity's fields from its JSON text: false when it is not one. */
static bool parse_identity(const char *text, LockSpace *out, char *prefix, size_t prefixlen)
{
    json_t *j = json_loads(text, 0, NULL);
    const char *id = json_string_value(json_object_get(j, "id"));
    const json_t *schema = json_object_get(j, "schema"), *at = json_object_get(j, "created_at_ms");
    const char *was = json_string_value(json_object_get(j, "prefix"));
    uuid_t u;
    bool ok = id && uuid_parse(id, u) == 0 && json_is_integer(schema) && json_integer_value(schema) > 0 &&
              json_integer_value(schema) < 1000000 && (!at || json_is_integer(at));
    if (ok) {
        snprintf(out->id, sizeof out->id, "%s", id);
        out->schema = (unsigned)json_integer_value(schema);
        out->created_at_ms = at ? json_integer_value(at) : 0;
        snprintf(prefix, prefixlen, "%s", was ? was : "");
    }
    json_decref(j);
    return ok;
}

/* "lock space ID (schema N)" or, for one older than identities, what marks it. */
static void describe(const char *id_text, char *out, size_t outlen, const char *where)
{
    LockSpace l = {0};
    char was[256];
    if (id_text && parse_identity(id_text, &l, was, sizeof was))
        snprintf(out, outlen, "the lock space at %s (id %s, schema %u)", where, l.id, l.schema);
    else
        snprintf(out, outlen, "the lock space at %s (made by a gateway older than lock-space identities)", where);
}

/* Whether the lock space key `base`/meta/lockspace or `base`/meta/commit
 * exists: 1 (with what it is in `what`), 0, 2 not readable here, -1 err. */
static int lock_space_at(EtcdClient *etcd, const char *base, char *what, size_t whatlen, char *err, size_t errlen)
{
    char key[600];
    char *value;
    snprintf(key, sizeof key, "%s/meta/lockspace", base);
    int rc = read_key(etcd, key, &value, err, errlen);
    if (rc == FOUND_VALUE) {
        describe(value, what, whatlen, base);
        free(value);
        return 1;
    }
    if (rc != FOUND_NONE)
        return rc == FOUND_DENIED ? 2 : -1;
    snprintf(key, sizeof key, "%s/meta/commit", base);
    rc = read_key(etcd, key, &value, err, errlen);
    free(value);
    if (rc == FOUND_VALUE) {
        describe(NULL, what, whatlen, base);
        return 1;
    }
    return rc == FOUND_NONE ? 0 : rc == FOUND_DENIED ? 2 : -1;
}

/* Refuses a prefix that lies inside a lock space: any ancestor cut at a '/'. */
static int check_ancestors(EtcdClient *etcd, const char *prefix, LockSpace *out, char *err, size_t errlen)
{
    for (const char *slash = strchr(prefix, '/'); slash; slash = strchr(slash + 1, '/')) {
        char base[256], what[400];
        snprintf(base, sizeof base, "%.*s", (int)(slash - prefix), prefix);
        int rc = lock_space_at(etcd, base, what, sizeof what, err, errlen);
        if (rc < 0)
            return -1;
        if (rc == 2 && !out->note[0])
            snprintf(out->note, sizeof out->note, "this gateway's etcd role may not read %s/meta/: a lock space "
                     "there is not seen (the role keeps the two apart)", base);
        if (rc == 1) {
            snprintf(err, errlen, "the prefix %s lies inside %s: its gateways would campaign in that lock space's "
                     "election (%s/leader/) and take part in it; use a prefix outside every lock space", prefix,
                     what, base);
            return -1;
        }
    }
    return 0;
}

/* The record kinds of store_etcd.c's key list (PREFIX/KIND/...), the keys'
 * reload mark (PREFIX/auth/reload, election_etcd.c) and the election's
 * candidates (PREFIX/leader/<lease in hex>, below). */
static const char *const KINDS[] = {"meta",   "locks",   "semaphores", "holders", "fences", "guard",
                                    "floors", "revoked", "history",    "audit",   "auth"};

/* What a key under the prefix (rest: the part after "PREFIX/") is: 2 a
 * candidate's (PREFIX/leader/ID), 1 one of a lock space's records, 0
 * another's; *nested_len, whatever it returns, is the length of rest's part
 * that may name a lock space inside the prefix (rest ends in
 * .../meta/lockspace or .../meta/commit), else 0. A record's name
 * may hold '/' (a lock "a/meta/commit"), so such a key may be a lock space's
 * own: only the value at .../meta/lockspace tells (classify_keys). A
 * candidate's key never holds '/': a deeper key under PREFIX/leader/ belongs
 * to a lock space at PREFIX/leader, the collision lockspace.h describes. */
static int own_key(const char *rest, size_t *nested_len)
{
    *nested_len = 0;
    const char *tail = strstr(rest, "/meta/");
    if (tail && (!strcmp(tail, "/meta/lockspace") || !strcmp(tail, "/meta/commit")))
        *nested_len = (size_t)(tail - rest);
    size_t first = strcspn(rest, "/");
    for (size_t i = 0; i < sizeof KINDS / sizeof *KINDS; i++)
        if (strlen(KINDS[i]) == first && !strncmp(rest, KINDS[i], first) && rest[first] == '/')
            return 1;
    if (first == 6 && !strncmp(rest, "leader/", 7) && rest[7] && !strchr(rest + 7, '/'))
        return 2;
    return 0;
}

/* Nested candidates looked at for an identity, at most (a lock space has one
 * .../meta/lockspace; a lock named ".../meta/commit" is rare). */
#define NESTED_CHECKS 8

/* Whether base, the start of a key ending in /meta/lockspace or
 * /meta/commit, is a lock space inside the prefix: its base/meta/lockspace
 * holds an identity, or the key is none of a lock space's own (not_own: a
 * lock space's mark, older than identities if no identity). 1 it is (what
 * names it, for the line), 0 not, -1 err. */
static int nested_lock_space(EtcdClient *etcd, const char *base, bool not_own, char *what, size_t whatlen, char *err,
                             size_t errlen)
{
    char key[600], *value = NULL, was[256];
    snprintf(key, sizeof key, "%s/meta/lockspace", base);
    int rc = read_key(etcd, key, &value, err, errlen);
    if (rc < 0)
        return -1;
    LockSpace l;
    bool identity = rc == FOUND_VALUE && parse_identity(value, &l, was, sizeof was);
    if (identity || not_own)
        describe(identity ? value : NULL, what, whatlen, base);
    free(value);
    return identity || not_own;
}

/* The prefix has no identity: 0 nothing is under it (or only candidates'
 * keys, bound to their gateways' leases: gateways older than identities
 * campaigning, none of which committed yet), 1 a lock space older
 * than identities (only its kinds of keys, own_key, and the commit mark or
 * token counter that such a gateway wrote at its first commit), or -1 with
 * err naming what is there (a lock space inside it, other keys) or why etcd
 * did not answer; *bare: nothing at all is under it. Looks at the first
 * SCAN_KEYS keys: a lock space inside that they do not reach still leaves no
 * commit mark at PREFIX/meta/, so it is refused as other keys. */
static int classify_keys(EtcdClient *etcd, const char *prefix, bool *bare, char *err, size_t errlen)
{
    *bare = false;
    char start[300], end[300];
    snprintf(start, sizeof start, "%s/", prefix);
    snprintf(end, sizeof end, "%s0", prefix); /* '/' + 1: past every key under the prefix */
    char *sb = etcd_b64_encode(start, strlen(start)), *eb = etcd_b64_encode(end, strlen(end));
    json_t *resp;
    char why[800];
    int rc = etcd_call(etcd, "/v3/kv/range",
                       sb && eb ? json_pack("{s:s, s:s, s:i, s:b}", "key", sb, "range_end", eb, "limit", SCAN_KEYS,
                                            "keys_only", 1)
                                : NULL,
                       &resp, why, sizeof why);
    free(sb), free(eb);
    if (rc) {
        char what[340];
        snprintf(what, sizeof what, "reading the keys under %s", start);
        call_error(what, why, err, errlen);
        return -1;
    }
    size_t i, plen = strlen(start), keys = 0, records = 0, checked = 0;
    json_t *kv;
    char foreign[300] = "", what[400] = "";
    int nested = 0;
    json_array_foreach(json_object_get(resp, "kvs"), i, kv)
    {
        size_t len, nested_len;
        const char *k64 = json_string_value(json_object_get(kv, "key"));
        char *k = etcd_b64_decode(k64 ? k64 : "", &len);
        if (!k)
            continue;
        int own = own_key(len > plen ? k + plen : "", &nested_len);
        keys++;
        records += own != 2;
        if (!own && !foreign[0])
            snprintf(foreign, sizeof foreign, "%s", k);
        if (nested_len && !nested && checked++ < NESTED_CHECKS) {
            char base[300];
            snprintf(base, sizeof base, "%.*s", (int)(plen + nested_len), k);
            nested = nested_lock_space(etcd, base, !own, what, sizeof what, err, errlen);
        }
        free(k);
        if (nested < 0)
            break;
    }
    json_decref(resp);
    if (nested < 0)
        return -1;
    if (nested) {
        snprintf(err, errlen, "the prefix %s lies around %s: a lock space here would take that one's keys for its "
                 "own; use a prefix outside every lock space", prefix, what);
        return -1;
    }
    *bare = keys == 0;
    if (!records)
        return 0;
    if (!foreign[0]) {
        /* Only a lock space's kinds of keys: an older one only if its marks are there. */
        const char *marks[] = {"meta/commit", "meta/last_token"};
        for (size_t m = 0; m < sizeof marks / sizeof *marks; m++) {
            char key[300], *value;
            snprintf(key, sizeof key, "%s/%s", prefix, marks[m]);
            int found = read_key(etcd, key, &value, err, errlen);
            free(value);
            if (found == FOUND_VALUE)
                return 1;
            if (found != FOUND_NONE) {
                if (found == FOUND_DENIED)
                    snprintf(err, errlen, "this gateway's etcd role may not read %s", key);
                return -1;
            }
        }
        snprintf(err, errlen, "the prefix %s holds keys that are not a lock space's (%s... without the commit mark "
                 "%s/meta/commit of a lock space older than identities): a lock space is created only on an empty "
                 "prefix (a lock space of gateways older than commit marks: write its last token to "
                 "%s/meta/last_token first)", prefix, start, prefix, prefix);
        return -1;
    }
    snprintf(err, errlen, "the prefix %s holds keys that are not a lock space's (%s, ...): a lock space is "
             "created only on an empty prefix", prefix, foreign);
    return -1;
}

/* What write_identity and open_once return when the creation's compare
 * failed without an identity at the prefix: a lock space that collides was
 * made meanwhile, so the check is made again (and names it). */
#define RACED 1
/* How many times the check is made again after RACED, at most. */
#define RACE_ROUNDS 3

/* A compare of the identity's creation: nothing at key (or, with range_end,
 * in [key, range_end)) was ever created. Appended to `to`; false without memory. */
static bool compare_absent(json_t *to, const char *key, const char *range_end)
{
    char *kb = etcd_b64_encode(key, strlen(key));
    char *eb = range_end ? etcd_b64_encode(range_end, strlen(range_end)) : NULL;
    json_t *c = kb && (eb || !range_end) ? json_pack("{s:s, s:s, s:s, s:s}", "key", kb, "target", "CREATE", "result",
                                                    "EQUAL", "create_revision", "0")
                                         : NULL;
    free(kb);
    bool ok = c && (!eb || json_object_set_new(c, "range_end", json_string(eb)) == 0);
    free(eb);
    if (!ok) {
        json_decref(c);
        return false;
    }
    return json_array_append_new(to, c) == 0; /* takes c, also when it fails */
}

/* The compares of an identity's creation at prefix: its key absent; every
 * ancestor without a lock space (check_ancestors, seen again inside the
 * transaction); with bare, nothing at all under the prefix (classify_keys).
 * Two gateways that create lock spaces at nested prefixes at the same
 * moment so cannot both succeed: whichever commits second fails its
 * compare (the outer one's range, or the inner one's ancestor). NULL without
 * memory. */
static json_t *creation_compares(const char *prefix, bool bare)
{
    json_t *cmp = json_array();
    char key[600], end[300];
    snprintf(key, sizeof key, "%s/meta/lockspace", prefix);
    bool ok = cmp && compare_absent(cmp, key, NULL);
    if (ok && bare) {
        snprintf(key, sizeof key, "%s/", prefix);
        snprintf(end, sizeof end, "%s0", prefix); /* '/' + 1 */
        ok = compare_absent(cmp, key, end);
    }
    for (const char *slash = strchr(prefix, '/'); ok && slash; slash = strchr(slash + 1, '/')) {
        int base = (int)(slash - prefix);
        snprintf(key, sizeof key, "%.*s/meta/lockspace", base, prefix);
        ok = compare_absent(cmp, key, NULL);
        snprintf(key, sizeof key, "%.*s/meta/commit", base, prefix);
        ok = ok && compare_absent(cmp, key, NULL);
    }
    if (!ok) {
        json_decref(cmp);
        return NULL;
    }
    return cmp;
}

/* Writes the identity once (creation_compares). 0 with *out filled (this
 * call's, or one written at the same time by another gateway: then
 * created/adopted stay false), RACED, or -1 with err. */
static int write_identity(EtcdClient *etcd, const char *prefix, bool adopting, bool bare, int schema, LockSpace *out,
                          char *err, size_t errlen)
{
    uuid_t u;
    uuid_generate_random(u);
    char id[37], key[300];
    uuid_unparse_lower(u, id);
    snprintf(key, sizeof key, "%s/meta/lockspace", prefix);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t at = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    json_t *j = json_pack("{s:s, s:i, s:I, s:s, s:s}", "id", id, "schema", schema, "created_at_ms",
                          (json_int_t)at, "prefix", prefix, "created_by", "leasegate " LEASEGATE_VERSION);
    char *text = jsondump_whole(j, JSON_COMPACT);
    json_decref(j);
    char *kb = etcd_b64_encode(key, strlen(key)), *vb = text ? etcd_b64_encode(text, strlen(text)) : NULL;
    free(text);
    json_t *cmp = kb && vb ? creation_compares(prefix, bare && !adopting) : NULL;
    json_t *req = cmp ? json_pack("{s:o, s:[{s:{s:s, s:s}}], s:[{s:{s:s}}]}", "compare", cmp, "success",
                                  "request_put", "key", kb, "value", vb, "failure", "request_range", "key", kb)
                      : NULL;
    free(kb), free(vb);
    json_t *resp;
    char why[800];
    if (etcd_call(etcd, "/v3/kv/txn", req, &resp, why, sizeof why)) {
        char what[340];
        snprintf(what, sizeof what, "writing %s", key);
        call_error(what, why, err, errlen);
        return -1;
    }
    bool mine = json_is_true(json_object_get(resp, "succeeded"));
    const char *v64 = json_string_value(json_object_get(
        json_array_get(json_object_get(
                           json_object_get(json_array_get(json_object_get(resp, "responses"), 0), "response_range"),
                           "kvs"),
                       0),
        "value"));
    size_t len;
    char *theirs = !mine && v64 ? etcd_b64_decode(v64, &len) : NULL;
    json_decref(resp);
    char was[256];
    if (!mine && !theirs)
        return RACED;
    bool ok = mine || parse_identity(theirs, out, was, sizeof was);
    free(theirs);
    if (!ok) {
        snprintf(err, errlen, "%s: etcd's answer to its creation holds no identity", key);
        return -1;
    }
    if (mine) {
        snprintf(out->id, sizeof out->id, "%s", id);
        out->schema = (unsigned)schema;
        out->created_at_ms = at;
        out->created = !adopting;
        out->adopted = adopting;
    }
    return 0;
}

/* PREFIX/meta/layout, the layout the lock space's last leader wrote: 0 with
 * *layout (0 when there is no mark yet), or -1 with err. */
static int read_layout(EtcdClient *etcd, const char *prefix, unsigned *layout, char *err, size_t errlen)
{
    char key[300], *value;
    snprintf(key, sizeof key, "%s/meta/layout", prefix);
    *layout = 0;
    int found = read_key(etcd, key, &value, err, errlen);
    if (found == FOUND_VALUE) {
        char *end;
        unsigned long v = strtoul(value, &end, 10);
        bool ok = *value && !*end && v > 0 && v < 1000000;
        if (!ok)
            snprintf(err, errlen, "%s holds no layout: '%.60s'", key, value);
        free(value);
        if (!ok)
            return -1;
        *layout = (unsigned)v;
    }
    return found < 0 ? -1 : 0;
}

static int check_schema(const char *prefix, const LockSpace *l, char *err, size_t errlen)
{
    if (l->schema <= ETCD_LAYOUT)
        return 0;
    snprintf(err, errlen, "the lock space at %s (id %s) was written by a newer leasegate (layout %u of its records, "
             "its schema; this gateway, leasegate %s, reads layouts 1 to %d): they cannot share it: upgrade this "
             "gateway", prefix, l->id, l->schema, LEASEGATE_VERSION, ETCD_LAYOUT);
    return -1;
}

/* One look at the prefix and, with create, the identity's creation: 0 with
 * *out, RACED, or -1 with err. */
static int open_once(EtcdClient *etcd, const char *prefix, bool create, LockSpace *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int rc = check_ancestors(etcd, prefix, out, err, errlen);
    char key[300], *value = NULL;
    snprintf(key, sizeof key, "%s/meta/lockspace", prefix);
    int found = rc ? -1 : read_key(etcd, key, &value, err, errlen);
    if (found == FOUND_DENIED) {
        snprintf(err, errlen, "this gateway's etcd role may not read %s: grant it readwrite on the prefix %s/ "
                 "(docs/high-availability.md#authentication)", key, prefix);
        rc = -1;
    } else if (found == FOUND_VALUE) {
        char was[256];
        if (!parse_identity(value, out, was, sizeof was)) {
            snprintf(err, errlen, "%s holds no lock-space identity that this gateway can read: '%.120s'", key, value);
            rc = -1;
        } else {
            rc = 0;
            if (was[0] && strcmp(was, prefix))
                snprintf(out->note, sizeof out->note, "the lock space at %s was created at %s (copied from there?)",
                         prefix, was);
        }
    } else if (found == FOUND_NONE) {
        bool bare;
        int kind = classify_keys(etcd, prefix, &bare, err, errlen);
        unsigned layout = 0;
        if (kind == 1 && (rc = read_layout(etcd, prefix, &layout, err, errlen)) == 0) {
            /* Made before identities: its schema is the layout its leaders wrote (1 before the mark). */
            rc = write_identity(etcd, prefix, true, false, layout ? (int)layout : 1, out, err, errlen);
        } else if (kind == 1) {
            rc = -1;
        } else if (kind == 0 && create) {
            rc = write_identity(etcd, prefix, false, bare, ETCD_LAYOUT, out, err, errlen);
        } else if (kind == 0) {
            snprintf(err, errlen, "there is no lock space at %s (nothing is stored under %s/): a new lock space is "
                     "created only when asked (start once with --new-lock-space); if one exists, check the prefix for "
                     "a typo", prefix, prefix);
            rc = -1;
        } else {
            rc = -1;
        }
    } else {
        rc = -1;
    }
    free(value);
    /* The layout now: its last leader's, when one led since (store_etcd.c). */
    unsigned layout = 0;
    if (rc == 0 && (rc = read_layout(etcd, prefix, &layout, err, errlen)) == 0 && layout > out->schema)
        out->schema = layout;
    return rc;
}

int lockspace_open(const EtcdUrl *url, bool create, LockSpace *out, char *err, size_t errlen)
{
    EtcdClient *etcd = etcd_client_new(url, CHECK_CALL_MS);
    if (!etcd) {
        memset(out, 0, sizeof *out);
        snprintf(err, errlen, "out of memory (or libcurl cannot start)");
        return -1;
    }
    etcd_client_retry(etcd, CHECK_FIRST_MS, CHECK_BUDGET_MS);
    const char *prefix = url->prefix;
    int rc = RACED;
    for (int round = 0; rc == RACED && round < RACE_ROUNDS; round++)
        rc = open_once(etcd, prefix, create, out, err, errlen);
    if (rc == RACED) {
        snprintf(err, errlen, "the lock space at %s could not be created: another gateway made a lock space that "
                 "collides with it %d times in a row while this one checked", prefix, RACE_ROUNDS);
        rc = -1;
    }
    etcd_client_free(etcd);
    if (rc == 0)
        return check_schema(prefix, out, err, errlen);
    /* No answer (not a certificate etcd refused, which no retry mends). */
    bool unreached = (strstr(err, "cannot reach etcd") || strstr(err, "etcd did not answer")) &&
                     !strstr(err, "certificate") && !strstr(err, "SSL");
    return unreached ? LOCKSPACE_UNREACHED : -1;
}
