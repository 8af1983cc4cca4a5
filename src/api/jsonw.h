/*
 * jsonw — a flat JSON object written straight into text, for the answers of
 * the lock requests every client makes (a grant, a renewal, a release).
 *
 * Building those answers as jansson values and dumping them cost more than
 * the rest of the request: jansson formats every integer with snprintf,
 * checks for loops with a hash table per object, and calls its output
 * callback once per run of characters (about 26,000 instructions per grant
 * answer, measured with callgrind; jsonw writes it in about 1,500). Every
 * other answer is built with jansson.
 *
 * The text is exactly what jansson's json_dumps(JSON_COMPACT) writes for the
 * same object (tests/unit/test_jsonw.c and fuzz_rawjson check it): strings
 * escaped as jansson escapes them, and a string that is not valid UTF-8
 * fails the whole text, as it fails in jansson.
 */
#ifndef LEASEGATE_JSONW_H
#define LEASEGATE_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct JsonW {
    char *buf; /* owned until jsonw_end_new hands it over */
    size_t len, cap;
    bool failed; /* out of memory, or a string that is not UTF-8 */
} JsonW;

/* Starts an object ('{'). */
void jsonw_begin(JsonW *w);
/* Members, in the order written. Keys are written as strings are. */
void jsonw_str(JsonW *w, const char *key, const char *value);
void jsonw_int(JsonW *w, const char *key, int64_t value);
void jsonw_bool(JsonW *w, const char *key, bool value);
/* value is JSON text already (kept as a client sent it: rawjson.h), written as is. */
void jsonw_raw(JsonW *w, const char *key, const char *value);
/* Ends the object: its text (malloc'd, NUL-terminated, *len bytes), or NULL
 * if any step failed. The writer is empty afterwards either way. */
char *jsonw_end_new(JsonW *w, size_t *len);

/* Appends s (n bytes) to w as a JSON string, quotes included. */
void jsonw_string(JsonW *w, const char *s, size_t n);

#endif
