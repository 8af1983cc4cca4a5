/*
 * rawjson — JSON text kept as the client sent it, for values the server
 * never interprets (a lock's metadata): found in a request body by position,
 * and put back into answers byte for byte. Re-encoding through jansson would
 * change numbers (0.1 becomes 0.10000000000000001) and refuse integers
 * beyond 64 bits.
 *
 * Answers are built with jansson as usual; a raw text goes in as a
 * placeholder string (rawjson_ref) that rawjson_dumps replaces with the text.
 * A placeholder starts with a NUL character, which no other string in an
 * answer can hold (names, owners and messages exclude control characters).
 */
#ifndef LEASEGATE_RAWJSON_H
#define LEASEGATE_RAWJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* In `body` (a JSON object, len bytes), the bytes of the value of top-level
 * key `key`: true and [*start, *end) when found. The body need not have been
 * accepted by jansson (a too-large integer), but must be JSON in shape. */
bool rawjson_member(const char *body, size_t len, const char *key, size_t *start, size_t *end);
/* The top-level key whose value holds byte `pos` of body, into out; false when none. */
bool rawjson_member_at(const char *body, size_t len, size_t pos, char *out, size_t outlen);

#define RAWJSON_MAX_REFS 1024

typedef struct RawRefs {
    const char *texts[RAWJSON_MAX_REFS]; /* borrowed: must outlive rawjson_dumps */
    size_t n;
} RawRefs;

/* A placeholder for `text` (a new reference), or NULL when refs is full or
 * out of memory. */
json_t *rawjson_ref(RawRefs *refs, const char *text);
/* Compact JSON text of body with every placeholder replaced (refs may be
 * NULL: none); malloc'd, NULL on failure, never a partial text. */
char *rawjson_dumps(const json_t *body, const RawRefs *refs);

#endif
