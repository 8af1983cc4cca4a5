/* body — request body validation; see body.h. */
#include "api/body.h"

#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "core/names.h"
#include "net/rawjson.h"

static void bad_field(Request *req, const char *field, const char *fmt, const char *detail)
{
    char message[300];
    snprintf(message, sizeof message, fmt, field, detail);
    http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", field), "%s", message);
}

/* A field's name as an answer shows it: at most outlen - 1 bytes, cut before a
 * character, never inside one (the name is UTF-8, as jansson checked), so that
 * the answer can always name it. */
static void shown_field(char *out, size_t outlen, const char *name)
{
    size_t n = strlen(name);
    if (n >= outlen) {
        n = outlen - 1;
        while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(out, name, n);
    out[n] = '\0';
}

/* The name of the top-level member whose value holds byte `pos`, shown as
 * shown_field does; false when there is none (or no memory to read it). */
static bool field_at(const Request *req, size_t pos, char *out, size_t outlen)
{
    char *name = malloc(req->body_len + 1); /* a name is never longer than the body */
    bool found = name && rawjson_member_at(req->body, req->body_len, pos, name, req->body_len + 1);
    if (found)
        shown_field(out, outlen, name);
    free(name);
    return found;
}

/* Is the number that ends at byte `end` (where jansson reports an overflow) a
 * real (a fraction or an exponent), not an integer? jansson reads a number
 * before it looks at what stands right before it (true99999999999999999999,
 * 1.5-99999999999999999999: integers that overflow), so the scan back stops
 * where the number starts: at a sign that does not follow an exponent mark,
 * at a '.' or an exponent mark that does not follow a digit. */
static bool real_number_before(const Request *req, size_t end)
{
    const char *b = req->body;
    bool real = false;
    for (size_t i = end < req->body_len ? end : req->body_len; i > 0; i--) {
        char ch = b[i - 1];
        bool after_digit = i > 1 && b[i - 2] >= '0' && b[i - 2] <= '9';
        bool after_mark = i > 1 && (b[i - 2] == 'e' || b[i - 2] == 'E');
        if ((ch == '.' || ch == 'e' || ch == 'E') && after_digit)
            real = true;
        else if (!(ch >= '0' && ch <= '9') && !((ch == '+' || ch == '-') && after_mark))
            break;
    }
    return real;
}

json_t *body_object_new(Request *req, const char *const *allowed)
{
    if (!req->body || req->body_len == 0) {
        http_reply_invalid(req, ERR_BAD_REQUEST, NULL, "request body must be a JSON object");
        return NULL;
    }
    /* A NUL byte is never valid JSON text, but jansson skips one after a number
     * or a literal; refused here, no member (metadata is kept as sent) can hold one. */
    const char *nul = memchr(req->body, '\0', req->body_len);
    if (nul) {
        http_reply_invalid(req, ERR_BAD_REQUEST, NULL, "malformed JSON: a NUL byte at offset %zu",
                         (size_t)(nul - req->body));
        return NULL;
    }
    json_error_t err;
    json_t *obj = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &err);
    if (!obj) {
        if (json_error_code(&err) == json_error_out_of_memory) {
            http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory while reading the body; retry");
            return NULL;
        }
        char field[80];
        if (json_error_code(&err) == json_error_numeric_overflow &&
            field_at(req, (size_t)err.position, field, sizeof field)) {
            bool real = real_number_before(req, (size_t)err.position);
            http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", field),
                             "field '%s' holds %s (line %d column %d)%s", field,
                             real ? "a number beyond the range of a double" : "an integer that does not fit in 64 bits",
                             err.line, err.column, strcmp(field, "metadata") ? "" : "; put such numbers in strings");
            return NULL;
        }
        http_reply_invalid(req, ERR_BAD_REQUEST, NULL, "malformed JSON at line %d column %d: %s", err.line,
                         err.column, err.text);
        return NULL;
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        http_reply_invalid(req, ERR_BAD_REQUEST, NULL, "request body must be a JSON object");
        return NULL;
    }
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value) {
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++)
            known = strcmp(*a, key) == 0;
        if (!known) {
            char field[80];
            shown_field(field, sizeof field, key);
            json_decref(obj);
            bad_field(req, field, "unknown field '%s'%s", "");
            return NULL;
        }
    }
    return obj;
}

bool body_string(Request *req, json_t *obj, const char *field, size_t max, bool required, const char **out)
{
    json_t *v = json_object_get(obj, field);
    *out = NULL;
    if (!v) {
        if (required)
            bad_field(req, field, "missing required field '%s'%s", "");
        return !required;
    }
    if (!json_is_string(v)) {
        bad_field(req, field, "field '%s' must be a string%s", "");
        return false;
    }
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > max) {
        char detail[64];
        snprintf(detail, sizeof detail, " of 1..%zu bytes", max);
        bad_field(req, field, "field '%s' must be a string%s", detail);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) {
            bad_field(req, field, "field '%s' must not contain control characters%s", "");
            return false;
        }
    }
    *out = s;
    return true;
}

bool body_int(Request *req, json_t *obj, const char *field, json_int_t min, json_int_t max, json_int_t dflt,
              bool required, json_int_t *out)
{
    json_t *v = json_object_get(obj, field);
    *out = dflt;
    if (!v) {
        if (required)
            bad_field(req, field, "missing required field '%s'%s", "");
        return !required;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        char detail[80];
        snprintf(detail, sizeof detail, " in %lld..%lld", (long long)min, (long long)max);
        bad_field(req, field, "field '%s' must be an integer%s", detail);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

bool body_lease(Request *req, json_t *obj, bool required, uint8_t out[LEASE_ID_BYTES], bool *present)
{
    const char *s;
    *present = false;
    if (!body_string(req, obj, "lease", 64, required, &s))
        return false;
    if (!s)
        return true;
    uuid_t id;
    if (strlen(s) != 36 || uuid_parse(s, id) != 0) {
        bad_field(req, "lease", "field '%s' must be a lease id (a UUID as returned by acquire)%s", "");
        return false;
    }
    memcpy(out, id, LEASE_ID_BYTES);
    *present = true;
    return true;
}

/* Nesting depth of a JSON value: a scalar is 0, [] or {} is 1. */
static int depth_of(json_t *v, int limit)
{
    int deepest = 0;
    if (limit < 0)
        return 1;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            int d = depth_of(x, limit - 1);
            deepest = d > deepest ? d : deepest;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int d = depth_of(x, limit - 1);
            deepest = d > deepest ? d : deepest;
        }
    } else {
        return 0;
    }
    return deepest + 1;
}

bool body_metadata(Request *req, json_t *obj, size_t max, char **out_new)
{
    json_t *v = json_object_get(obj, "metadata");
    *out_new = NULL;
    if (!v)
        return true;
    if (!json_is_object(v)) {
        bad_field(req, "metadata", "field '%s' must be a JSON object%s", "");
        return false;
    }
    /* Every reader of the lock gets it back: keep it easy to parse anywhere. */
    if (depth_of(v, METADATA_MAX_DEPTH) > METADATA_MAX_DEPTH) {
        char detail[64];
        snprintf(detail, sizeof detail, " nested at most %d levels deep", METADATA_MAX_DEPTH);
        bad_field(req, "metadata", "field '%s' must be an object%s", detail);
        return false;
    }
    /* Kept as sent (rawjson.h): the bytes of the value in the body. */
    size_t start, end;
    if (!rawjson_member(req->body, req->body_len, "metadata", &start, &end)) {
        http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "metadata"),
                         "field 'metadata' could not be located in the body");
        return false;
    }
    if (end - start > max) {
        char detail[64];
        snprintf(detail, sizeof detail, " of at most %zu bytes as sent", max);
        bad_field(req, "metadata", "field '%s' must be an object%s", detail);
        return false;
    }
    char *text = strndup(req->body + start, end - start);
    if (!text) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory");
        return false;
    }
    *out_new = text;
    return true;
}

bool body_json(Request *req, json_t *obj, const char *field, size_t max, bool *present, char **out_new)
{
    json_t *v = json_object_get(obj, field);
    *out_new = NULL;
    *present = v != NULL;
    if (!v || json_is_null(v))
        return true;
    if (depth_of(v, METADATA_MAX_DEPTH) > METADATA_MAX_DEPTH) {
        char detail[64];
        snprintf(detail, sizeof detail, " nested at most %d levels deep", METADATA_MAX_DEPTH);
        bad_field(req, field, "field '%s' must be JSON%s", detail);
        return false;
    }
    size_t start, end;
    if (!rawjson_member(req->body, req->body_len, field, &start, &end)) {
        http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", field),
                           "field '%s' could not be located in the body", field);
        return false;
    }
    if (end - start > max) {
        http_reply_invalid(req, ERR_PAYLOAD_TOO_LARGE, json_pack("{s:s, s:I}", "field", field, "max_bytes", (json_int_t)max),
                           "field '%s' is %zu bytes as sent; at most %zu are kept", field, end - start, max);
        return false;
    }
    char *text = strndup(req->body + start, end - start);
    if (!text) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory");
        return false;
    }
    *out_new = text;
    return true;
}

bool body_check_name(Request *req, const char *what, const char *name)
{
    const char *problem = strcmp(what, "name") == 0       ? name_lock_problem(name)
                          : strcmp(what, "election") == 0 ? name_election_problem(name)
                                                          : name_problem(name);
    if (!strcmp(what, "election"))
        what = "name";
    if (!problem)
        return true;
    http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", what), "%s '%.300s' %s", what, name,
                     problem);
    return false;
}
