/*
 * valwrites — the writes of a lock's value that a retry may still repeat:
 * the request_ids of the most recent writes of the grant that wrote the
 * value last (at most VALWRITES_MAX, oldest first), each with the version
 * that write made and a digest of what it wrote (and from which API key).
 *
 * Why a list and not the last write's id alone: a client's first attempt of
 * write 1 may arrive after its retry was answered and write 2 made (a slow
 * link or proxy, a follower forwarding it). With only write 2's id kept, that
 * late attempt was a new write and put the older value back over the newer
 * one. With the list it is recognised as write 1 and answered what write 1
 * was (its version), writing nothing, as long as write 1 is one of the last
 * VALWRITES_MAX writes of the grant; beyond that an if_version refuses it.
 *
 * The list belongs to one grant (the value's token): a write by another
 * grant starts a new one, and ids are never compared across grants. A write
 * without a request_id by the same grant keeps the list as it is (it takes
 * a version, so the list's versions need not be consecutive).
 *
 * The digest is the first VALWRITE_DIGEST_BYTES of a SHA-256 (the API's,
 * api_values.c) of the writer's API key and the value's text: a retry must
 * send the same value from the same key. It guards against a client's
 * mistake (an id used twice), not an adversary: whoever holds the lease may
 * write anyway, so 128 bits are plenty.
 *
 * Storage keeps the list as text (valwrites_format): one line per write,
 * oldest first, "VERSION DIGEST REQUEST_ID\n" (decimal, lower-case hex, the
 * id as sent: 1..VALWRITE_ID_MAX bytes, no control characters, so no
 * newline). At most VALWRITES_TEXT_MAX bytes: about 1.9 KB per lock, 1.2 KB
 * with UUIDs for ids. When you change the format, also change the stores'
 * notes (store_sqlite.c's schema 14, store_etcd.c's value record).
 *
 * No HTTP, JSON or SQL here.
 */
#ifndef LEASEGATE_VALWRITES_H
#define LEASEGATE_VALWRITES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VALWRITES_MAX 16
#define VALWRITE_ID_MAX 64 /* bytes of a request_id (the API's REQUEST_ID_MAX_BYTES) */
#define VALWRITE_DIGEST_BYTES 16
/* The longest text of a list, its terminating NUL included: per write, 20
 * digits, a space, the digest in hex, a space, the id and a newline. */
#define VALWRITES_TEXT_MAX (VALWRITES_MAX * (20 + 1 + 2 * VALWRITE_DIGEST_BYTES + 1 + VALWRITE_ID_MAX + 1) + 1)

typedef struct ValueWrite {
    uint64_t version;                      /* the value's version that write made */
    uint8_t digest[VALWRITE_DIGEST_BYTES]; /* of its API key and value text (see above) */
    char request_id[VALWRITE_ID_MAX + 1];  /* NUL-terminated, 1..VALWRITE_ID_MAX bytes */
} ValueWrite;

typedef struct ValueWrites {
    ValueWrite *at; /* owned; oldest first; NULL when len is 0 */
    uint8_t len;    /* 0..VALWRITES_MAX */
} ValueWrites;

/* The remembered write with this request_id, or NULL. */
const ValueWrite *valwrites_find(const ValueWrites *ws, const char *request_id);
/* The list after a write: `restart` (another grant than the one that wrote
 * last) empties it first; then w, when given (a write with a request_id not
 * in the list), is appended, the oldest dropped past VALWRITES_MAX. False
 * when out of memory, and then nothing changed. */
bool valwrites_add(ValueWrites *ws, bool restart, const ValueWrite *w);
/* *to_new = a copy of *from. False when out of memory (*to_new is then empty). */
bool valwrites_copy(ValueWrites *to_new, const ValueWrites *from);
/* Frees the list; it is empty after. */
void valwrites_clear(ValueWrites *ws);
/* A well-formed list of a value at `version`: at most VALWRITES_MAX
 * writes, versions rising and none past `version`, ids well-formed and
 * each once. */
bool valwrites_valid(const ValueWrites *ws, uint64_t version);

/* The list's text into buf (VALWRITES_TEXT_MAX bytes), NUL-terminated; its
 * length (0: an empty list, which storage keeps as none). */
size_t valwrites_format(const ValueWrites *ws, char buf[VALWRITES_TEXT_MAX]);
/* Reads a list's text (NULL or "": empty) of a value at `version` into
 * *out_new (owned by the caller; NULL: only check it). False when the text
 * is not a valid list (valwrites_valid) or out of memory; *out_new is then
 * empty. */
bool valwrites_parse(const char *text, uint64_t version, ValueWrites *out_new);

#endif
