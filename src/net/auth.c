/* auth — API keys; see auth.h. */
#include "net/auth.h"

#include <errno.h>
#include <stdatomic.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "leasegate/config.h"

#define KEY_PREFIX "lgk_"
#define KEY_RANDOM_BYTES 32

struct AuthTable {
    _Atomic int refs; /* a standby's threads take and drop references too (standby.c) */
    AuthKey *keys; /* owned, with their prefixes */
    size_t nkeys;
    char file_sha256[65]; /* of the file's bytes as loaded, in hex (auth_write_metrics) */
};

static const char *const ROLE_NAMES[] = {[AUTH_CLIENT] = "client", [AUTH_FENCE] = "fence", [AUTH_ADMIN] = "admin"};

const char *auth_role_name(AuthRole r) { return ROLE_NAMES[r]; }

bool auth_role_parse(const char *s, AuthRole *out)
{
    for (int r = AUTH_CLIENT; r <= AUTH_ADMIN; r++)
        if (!strcmp(s, ROLE_NAMES[r])) {
            *out = (AuthRole)r;
            return true;
        }
    return false;
}

static bool sha256(const void *data, size_t len, uint8_t out[32])
{
    return gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, out) == 0;
}

bool auth_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > AUTH_NAME_MAX)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '_' || *p == '-'))
            return false;
    return true;
}

/* A prefix: 1..AUTH_PREFIX_MAX bytes, no control bytes or spaces (it is one field). */
static bool valid_prefix(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > AUTH_PREFIX_MAX || s[0] == '#') /* '#' starts a comment in the file */
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return false;
    return true;
}

static bool parse_hash(const char *s, uint8_t out[32])
{
    static const char TAG[] = "sha256:";
    if (strncmp(s, TAG, sizeof TAG - 1) || strlen(s) != sizeof TAG - 1 + 64)
        return false;
    s += sizeof TAG - 1;
    for (int i = 0; i < 32; i++) {
        int v = 0;
        for (int j = 0; j < 2; j++) {
            char c = s[2 * i + j];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                return false;
            v = v * 16 + d;
        }
        out[i] = (uint8_t)v;
    }
    return true;
}

static void free_key(AuthKey *k)
{
    for (size_t i = 0; i < k->nprefixes; i++)
        free(k->prefixes[i]);
    free(k->prefixes);
}

static void table_free(AuthTable *t)
{
    for (size_t i = 0; i < t->nkeys; i++)
        free_key(&t->keys[i]);
    free(t->keys);
    free(t);
}

AuthTable *auth_ref(AuthTable *t)
{
    atomic_fetch_add(&t->refs, 1);
    return t;
}

void auth_unref(AuthTable *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1)
        table_free(t);
}

size_t auth_count(const AuthTable *t) { return t->nkeys; }

/* Fills k from the fields of one line; false with err. */
static bool parse_fields(char **f, size_t nf, AuthKey *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    if (nf < 3) {
        snprintf(err, errlen, "expected NAME ROLE sha256:HEX PREFIX...");
        return false;
    }
    if (!auth_name_ok(f[0])) {
        snprintf(err, errlen, "key name '%.80s' is not 1..%d of [A-Za-z0-9._-]", f[0], AUTH_NAME_MAX);
        return false;
    }
    snprintf(k->name, sizeof k->name, "%s", f[0]);
    if (!auth_role_parse(f[1], &k->role)) {
        snprintf(err, errlen, "role '%.40s' is not client, fence or admin", f[1]);
        return false;
    }
    /* One secret, or two separated by a comma (a rotation). */
    for (const char *h = f[2];; h++) {
        const char *comma = strchr(h, ',');
        char one[80];
        size_t n = comma ? (size_t)(comma - h) : strlen(h);
        if (k->nhashes == AUTH_MAX_SECRETS || n >= sizeof one) {
            snprintf(err, errlen, "'%.160s' is not sha256:HEX, or two of them separated by a comma (a key has at "
                                  "most %d secrets at once)",
                     f[2], AUTH_MAX_SECRETS);
            return false;
        }
        memcpy(one, h, n);
        one[n] = '\0';
        if (!parse_hash(one, k->hash[k->nhashes])) {
            snprintf(err, errlen, "'%.80s' is not sha256: and 64 lower-case hex digits", one);
            return false;
        }
        if (k->nhashes && !memcmp(k->hash[0], k->hash[1], sizeof k->hash[0])) {
            snprintf(err, errlen, "the same secret twice");
            return false;
        }
        k->nhashes++;
        if (!comma)
            break;
        h = comma;
    }
    size_t nprefix = 0;
    for (size_t i = 3; i < nf; i++)
        nprefix += !strchr(f[i], '=');
    if (nprefix == 0 && k->role != AUTH_ADMIN) {
        snprintf(err, errlen, "a %s key needs at least one name prefix (or *)", f[1]);
        return false;
    }
    for (size_t i = 3; i < nf; i++) {
        if (strchr(f[i], '=')) { /* never in a prefix: '=' is not a lock-name character */
            static const char *const OPTS[] = {"max_held=",   "max_waiters=",     "max_names=",
                                               "max_fences=", "max_polls=",       "max_watch_bytes=",
                                               "max_value_bytes="};
            size_t *const dest[] = {&k->max_held,   &k->max_waiters,     &k->max_names,
                                    &k->max_fences, &k->max_polls,       &k->max_watch_bytes,
                                    &k->max_value_bytes};
            /* A byte count: its own range (config.h's). */
            size_t *const bytes = &k->max_watch_bytes;
            size_t *limit = NULL;
            const char *v = NULL;
            for (size_t o = 0; o < sizeof OPTS / sizeof OPTS[0]; o++)
                if (!strncmp(f[i], OPTS[o], strlen(OPTS[o]))) {
                    limit = dest[o];
                    v = f[i] + strlen(OPTS[o]);
                }
            char *end = NULL;
            unsigned long long n = v && *v >= '1' && *v <= '9' ? strtoull(v, &end, 10) : 0;
            if (!limit || !end || *end || (limit != bytes && n > 100000000) ||
                (limit == bytes && (n < CONFIG_MIN_WATCH_BYTES || n > 1000000000000ULL))) {
                snprintf(err, errlen,
                         "'%.80s' is not max_held=N, max_waiters=N, max_names=N, max_fences=N, max_polls=N or "
                         "max_value_bytes=N (N in 1..100000000), or max_watch_bytes=N (N in 1048576..1000000000000)",
                         f[i]);
                return false;
            }
            *limit = (size_t)n;
            continue;
        }
        if (!valid_prefix(f[i])) {
            snprintf(err, errlen,
                     "prefix '%.80s' is not 1..%d bytes without spaces or control bytes, not starting with '#'",
                     f[i], AUTH_PREFIX_MAX);
            return false;
        }
        if (k->role == AUTH_ADMIN && strcmp(f[i], "*")) {
            snprintf(err, errlen, "an admin key touches every lock: its prefix can only be *");
            return false;
        }
    }
    k->every_name = k->role == AUTH_ADMIN;
    k->prefixes = calloc(nf - 3 + 1, sizeof *k->prefixes);
    if (!k->prefixes) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    for (size_t i = 3; i < nf; i++) {
        if (strchr(f[i], '='))
            continue;
        if (!strcmp(f[i], "*"))
            k->every_name = true;
        if (!(k->prefixes[k->nprefixes] = strdup(f[i]))) {
            free_key(k);
            snprintf(err, errlen, "out of memory");
            return false;
        }
        k->nprefixes++;
    }
    return true;
}

/* Parses text (NUL-terminated) into t; false with err naming the line. */
static bool parse_text(AuthTable *t, char *text, char *err, size_t errlen)
{
    size_t cap = 0;
    unsigned lineno = 0;
    for (char *line = text, *next; line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r')
            line[--len] = '\0';
        char *f[3 + 64];
        size_t nf = 0;
        char *save = NULL;
        for (char *tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
            if (tok[0] == '#') /* a comment, also after the fields: never a prefix */
                break;
            if (nf == sizeof f / sizeof f[0]) {
                snprintf(err, errlen, "line %u: more than %zu prefixes", lineno, sizeof f / sizeof f[0] - 3);
                return false;
            }
            f[nf++] = tok;
        }
        if (nf == 0)
            continue;
        if (t->nkeys == AUTH_MAX_KEYS) {
            snprintf(err, errlen, "more than %d keys", AUTH_MAX_KEYS);
            return false;
        }
        if (t->nkeys == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            AuthKey *k = realloc(t->keys, ncap * sizeof *k);
            if (!k) {
                snprintf(err, errlen, "out of memory");
                return false;
            }
            t->keys = k;
            cap = ncap;
        }
        char why[300];
        AuthKey *k = &t->keys[t->nkeys];
        if (!parse_fields(f, nf, k, why, sizeof why)) {
            snprintf(err, errlen, "line %u: %s", lineno, why);
            return false;
        }
        t->nkeys++;
        for (size_t i = 0; i + 1 < t->nkeys; i++) {
            if (!strcmp(t->keys[i].name, k->name)) {
                snprintf(err, errlen, "line %u: key name '%s' is used twice", lineno, k->name);
                return false;
            }
            for (size_t a = 0; a < t->keys[i].nhashes; a++)
                for (size_t b = 0; b < k->nhashes; b++)
                    if (!memcmp(t->keys[i].hash[a], k->hash[b], sizeof k->hash[b])) {
                        snprintf(err, errlen, "line %u: the same key hash as '%s'", lineno, t->keys[i].name);
                        return false;
                    }
        }
    }
    return true;
}

AuthTable *auth_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    /* Whoever may write the file may give themselves an admin key. */
    struct stat st;
    bool stat_ok = fstat(fileno(f), &st) == 0;
    if (!stat_ok || (st.st_mode & 022)) {
        if (stat_ok)
            snprintf(err, errlen, "%s: refused: it is writable by %s (mode %04o), so they could add a key of their "
                                  "own; chmod go-w %s",
                     path, (st.st_mode & 022) == 022 ? "its group and others" : st.st_mode & 020 ? "its group" : "others",
                     (unsigned)(st.st_mode & 07777), path);
        else
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    char *text = malloc(AUTH_MAX_FILE + 1);
    size_t n = text ? fread(text, 1, AUTH_MAX_FILE + 1, f) : 0;
    bool read_error = ferror(f);
    fclose(f);
    if (!text || read_error || n > AUTH_MAX_FILE) {
        snprintf(err, errlen, "%s: %s", path,
                 !text ? "out of memory" : read_error ? "cannot be read" : "larger than 1 MiB");
        free(text);
        return NULL;
    }
    text[n] = '\0';
    if (memchr(text, '\0', n)) {
        snprintf(err, errlen, "%s: holds a NUL byte", path);
        free(text);
        return NULL;
    }
    AuthTable *t = calloc(1, sizeof *t);
    char why[400];
    if (!t || !parse_text(t, text, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, t ? why : "out of memory");
        free(text);
        if (t)
            table_free(t);
        return NULL;
    }
    uint8_t h[32];
    bool hashed = sha256(text, n, h);
    free(text);
    if (!hashed) {
        snprintf(err, errlen, "%s: cannot hash it (out of memory?)", path);
        table_free(t);
        return NULL;
    }
    for (size_t i = 0; i < sizeof h; i++)
        snprintf(t->file_sha256 + 2 * i, 3, "%02x", h[i]);
    t->refs = 1;
    return t;
}

void auth_write_metrics(FILE *f, const AuthTable *t)
{
    fprintf(f, "# HELP leasegate_key_file_info The --auth-file in use, by the first 16 hex digits of its SHA-256: "
               "every gateway of a lock space should show the same.\n# TYPE leasegate_key_file_info gauge\n"
               "leasegate_key_file_info{sha256=\"%.16s\"} 1\n",
            t->file_sha256);
}

const AuthKey *auth_find(const AuthTable *t, const char *key, size_t len, unsigned *secret)
{
    uint8_t h[32];
    if (len == 0 || len > AUTH_KEY_MAX || !sha256(key, len, h))
        return NULL;
    /* Every stored hash is compared in full: no early exit that would time
     * how far a guess matched, or which key (or which of its secrets) it was. */
    const AuthKey *found = NULL;
    unsigned which = 0;
    for (size_t i = 0; i < t->nkeys; i++) {
        for (size_t s = 0; s < t->keys[i].nhashes; s++) {
            uint8_t diff = 0;
            for (size_t j = 0; j < sizeof h; j++)
                diff |= (uint8_t)(h[j] ^ t->keys[i].hash[s][j]);
            if (diff == 0) {
                found = &t->keys[i];
                which = (unsigned)s;
            }
        }
    }
    if (secret)
        *secret = which;
    return found;
}

const AuthKey *auth_find_bearer(const AuthTable *t, const char *h, unsigned *secret, const char **why)
{
    if (!h) {
        *why = "this server needs an API key: send Authorization: Bearer KEY";
        return NULL;
    }
    if (strncasecmp(h, "Bearer ", 7)) {
        *why = "the Authorization header must be Bearer KEY";
        return NULL;
    }
    const char *key = h + 7;
    while (*key == ' ')
        key++;
    size_t len = strlen(key);
    while (len && key[len - 1] == ' ')
        len--;
    const AuthKey *k = auth_find(t, key, len, secret);
    if (!k)
        *why = "unknown API key";
    return k;
}

const AuthKey *auth_find_same(const AuthTable *t, const AuthKey *old, unsigned secret)
{
    for (size_t i = 0; i < t->nkeys; i++) {
        if (strcmp(t->keys[i].name, old->name))
            continue;
        for (size_t s = 0; s < t->keys[i].nhashes; s++)
            if (!memcmp(t->keys[i].hash[s], old->hash[secret], sizeof old->hash[secret]))
                return &t->keys[i];
        return NULL; /* the name has other secrets now */
    }
    return NULL;
}

bool auth_covers(const AuthKey *k, const char *name)
{
    if (k->every_name)
        return true;
    for (size_t i = 0; i < k->nprefixes; i++)
        if (!strncmp(name, k->prefixes[i], strlen(k->prefixes[i])))
            return true;
    return false;
}

static void base64url(const uint8_t *in, size_t n, char *out)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        size_t chars = n - i >= 3 ? 4 : n - i + 1;
        for (size_t c = 0; c < chars; c++)
            out[o++] = A[(v >> (18 - 6 * c)) & 63];
    }
    out[o] = '\0';
}

int auth_keygen(const char *name, const char *role, char *const *prefixes, size_t nprefixes, char **key_new,
                char **line_new, char *err, size_t errlen)
{
    *key_new = *line_new = NULL;
    char *fields[3 + 64];
    if (nprefixes > 64) {
        snprintf(err, errlen, "at most 64 prefixes");
        return -1;
    }
    char hash_text[8 + 64] = "sha256:";
    uint8_t raw[KEY_RANDOM_BYTES], h[32];
    char key[sizeof KEY_PREFIX + (KEY_RANDOM_BYTES * 4 + 2) / 3];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        snprintf(err, errlen, "no randomness: %s", strerror(errno));
        return -1;
    }
    strcpy(key, KEY_PREFIX);
    base64url(raw, sizeof raw, key + strlen(KEY_PREFIX));
    if (!sha256(key, strlen(key), h)) {
        snprintf(err, errlen, "SHA-256 failed");
        return -1;
    }
    for (int i = 0; i < 32; i++)
        snprintf(hash_text + 7 + 2 * i, 3, "%02x", h[i]);
    /* The line is checked as the server will read it. */
    fields[0] = (char *)name;
    fields[1] = (char *)role;
    fields[2] = hash_text;
    for (size_t i = 0; i < nprefixes; i++)
        fields[3 + i] = prefixes[i];
    AuthKey k;
    if (!parse_fields(fields, 3 + nprefixes, &k, err, errlen))
        return -1;
    free_key(&k);
    size_t len = strlen(name) + strlen(role) + strlen(hash_text) + 4;
    for (size_t i = 0; i < nprefixes; i++)
        len += strlen(prefixes[i]) + 1;
    char *line = malloc(len + 2);
    *key_new = strdup(key);
    if (!line || !*key_new) {
        free(line);
        free(*key_new);
        *key_new = NULL;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int o = snprintf(line, len + 2, "%s %s %s", name, role, hash_text);
    bool prefix = false;
    for (size_t i = 0; i < nprefixes; i++) {
        o += snprintf(line + o, len + 2 - (size_t)o, " %s", prefixes[i]);
        prefix |= !strchr(prefixes[i], '=');
    }
    if (!prefix) /* an admin's: every name */
        snprintf(line + o, len + 2 - (size_t)o, " *");
    *line_new = line;
    return 0;
}
