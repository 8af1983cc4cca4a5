/*
 * body — reading request bodies: a JSON object with known fields only, each
 * field checked for type and range. Every helper that fails has already
 * replied 400 naming the field, and returns false (or NULL).
 */
#ifndef LEASEGATE_BODY_H
#define LEASEGATE_BODY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/http.h"

/* Parses req->body; `allowed` is a NULL-terminated list of field names.
 * Returns a new reference, or NULL after replying. */
json_t *body_object_new(Request *req, const char *const *allowed);
/* A string of 1..max bytes without control characters. *out is NULL when the
 * field is absent and not required. */
bool body_string(Request *req, json_t *obj, const char *field, size_t max, bool required, const char **out);
/* A client's request_id (an acquire's, a value write's): body_string of at most this many bytes. */
#define REQUEST_ID_MAX_BYTES 64
bool body_int(Request *req, json_t *obj, const char *field, json_int_t min, json_int_t max, json_int_t dflt,
              bool required, json_int_t *out);
/* A lease id (UUID text). *present says whether the field was given. */
bool body_lease(Request *req, json_t *obj, bool required, uint8_t out[LEASE_ID_BYTES], bool *present);
#define METADATA_MAX_DEPTH 16

/* A JSON object, nested at most METADATA_MAX_DEPTH levels, whose compact form is at most max bytes; *out_new is that form
 * (malloc'd, caller frees) or NULL when absent. */
bool body_metadata(Request *req, json_t *obj, size_t max, char **out_new);
/* Any JSON value, nested at most METADATA_MAX_DEPTH levels, at most max
 * bytes as sent (else 413 naming the field): *out_new is its text as sent
 * (malloc'd, caller frees), or NULL when it is null or absent (*present
 * says which). */
bool body_json(Request *req, json_t *obj, const char *field, size_t max, bool *present, char **out_new);
/* Replies 400 when a path name breaks the name rule: `what` "name" is a
 * lock's or a semaphore's, "election" an election's (the field named "name"). */
bool body_check_name(Request *req, const char *what, const char *name);

#endif
