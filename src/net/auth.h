/*
 * auth — API keys (--auth-file): who a request's key is, its role, and the
 * lock names it may touch.
 *
 * The file holds one key per line, fields separated by spaces or tabs:
 *
 *     NAME ROLE sha256:HEX[,sha256:HEX] PREFIX... [max_held=N] [max_waiters=N]
 *                                    [max_names=N] [max_fences=N] [max_polls=N]
 *                                    [max_watch_bytes=N] [max_value_bytes=N]
 *
 * NAME is 1..64 bytes of [A-Za-z0-9._-], unique in the file; ROLE is client,
 * fence or admin; HEX is the SHA-256 of the key (64 lower-case hex digits):
 * the file never holds a key itself. A key may have two secrets at once, for
 * a rotation: either is that one key (one name, one share, one audit
 * identity); the old one is dropped from the line when every client has the
 * new one. A secret belongs to one key only. Each PREFIX is a start of lock (or, for
 * fence, resource) names the key may touch, 1..256 bytes; `*` is every name.
 * An admin's prefixes are `*`. max_held bounds the locks the key's requests
 * hold and wait for together, max_waiters its waiting acquires, max_names,
 * max_fences, max_polls, max_watch_bytes and max_value_bytes its shares of
 * lock names, fence resources, requests held open, bytes of watch answers
 * and bytes of the locks' values it wrote (quota.h); without them the
 * server's --key-max-* flags apply.
 * Blank lines and lines starting with '#' are
 * skipped. A file over AUTH_MAX_FILE bytes or AUTH_MAX_KEYS keys, or with any
 * line that does not parse, is refused whole (with the line number); so is a
 * file its group or others may write (whoever can write it can add a key).
 *
 * Keys are 256 random bits ("lgk_" + 43 base64url characters), so one
 * unsalted SHA-256 is what storing them needs (as for any random API token);
 * a presented key is hashed and compared with every stored hash in constant
 * time, so an answer's timing does not depend on which key matched.
 *
 * A table is shared by reference: SIGHUP loads a new one while requests that
 * began under the old one keep theirs until they end. References may be
 * taken and dropped on any thread (atomically); the table never changes.
 */
#ifndef LEASEGATE_AUTH_H
#define LEASEGATE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define AUTH_MAX_FILE (1024 * 1024)
#define AUTH_MAX_KEYS 10000
#define AUTH_NAME_MAX 64
#define AUTH_PREFIX_MAX 256
#define AUTH_KEY_MAX 256 /* longest key text a request may present */
#define AUTH_MAX_SECRETS 2 /* secrets of one key at once: the old and the new during a rotation */

typedef enum AuthRole { AUTH_CLIENT, AUTH_FENCE, AUTH_ADMIN } AuthRole;

typedef struct AuthKey {
    char name[AUTH_NAME_MAX + 1];
    AuthRole role;
    uint8_t hash[AUTH_MAX_SECRETS][32]; /* the SHA-256 of each of its secrets */
    size_t nhashes;                     /* 1, or 2 during a rotation */
    bool every_name;  /* a `*` prefix */
    char **prefixes;  /* owned by the table */
    size_t nprefixes;
    size_t max_held;    /* 0: the server's default */
    size_t max_waiters; /* 0: the server's default */
    size_t max_names;   /* 0: the server's default (--key-max-names) */
    size_t max_fences;  /* 0: the server's default (--key-max-fences) */
    size_t max_polls;   /* 0: the server's default (--key-max-polls) */
    size_t max_watch_bytes; /* 0: the server's default (--key-max-watch-bytes) */
    size_t max_value_bytes; /* 0: the server's default (--key-max-value-bytes) */
} AuthKey;

typedef struct AuthTable AuthTable;

/* Reads and checks the file. A table with one reference, or NULL with one
 * line in err. */
AuthTable *auth_load(const char *path, char *err, size_t errlen);
AuthTable *auth_ref(AuthTable *t);
void auth_unref(AuthTable *t);
size_t auth_count(const AuthTable *t);
/* The series leasegate_key_file_info{sha256="..."} 1: which file t was read
 * from (a hash of its bytes, which name keys only by their hashes), so that
 * /metrics shows a gateway whose file differs from the others'. */
void auth_write_metrics(FILE *f, const AuthTable *t);

/* The key whose text is `key` (len bytes), or NULL; *secret (may be NULL)
 * is the index of the secret it matched in the key's hash. */
const AuthKey *auth_find(const AuthTable *t, const char *key, size_t len, unsigned *secret);
/* The key an Authorization header value names ("Bearer KEY"), or NULL with
 * the reason (no header, another scheme, an unknown key) in *why; *secret as
 * for auth_find. */
const AuthKey *auth_find_bearer(const AuthTable *t, const char *authorization, unsigned *secret, const char **why);
/* Is s a valid key name (1..AUTH_NAME_MAX of [A-Za-z0-9._-])? */
bool auth_name_ok(const char *s);
/* The key in t that is old as a request presented it (its secret-th
 * secret): the same name, still with that secret (NULL when the reloaded
 * file no longer has the key, or no longer that secret of it). */
const AuthKey *auth_find_same(const AuthTable *t, const AuthKey *old, unsigned secret);
/* May k touch `name`? */
bool auth_covers(const AuthKey *k, const char *name);

const char *auth_role_name(AuthRole r);
bool auth_role_parse(const char *s, AuthRole *out);

/* A new key for `leasegate keygen`: *key_new is the key's text, *line_new the
 * file line for it (both malloc'd; the caller frees). -1 with err when an
 * argument is invalid or there is no randomness or memory. */
int auth_keygen(const char *name, const char *role, char *const *prefixes, size_t nprefixes, char **key_new,
                char **line_new, char *err, size_t errlen);

#endif
