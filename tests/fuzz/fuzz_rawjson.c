/*
 * fuzz_rawjson — values kept as sent (src/net/rawjson.h):
 *
 *  - rawjson_member and rawjson_member_at on arbitrary bytes (in a buffer of
 *    exactly len bytes, so ASan sees any read past it) never read out of
 *    bounds; a span they return lies within the body; a name
 *    rawjson_member_at writes is NUL-terminated within outlen;
 *  - when the input is a JSON object that jansson accepts as the server
 *    reads bodies (json_loadb with JSON_REJECT_DUPLICATES, body.c): for every
 *    top-level key (up to 255 bytes, the longest rawjson matches), the span
 *    rawjson_member returns, kept as the server keeps it (a C string),
 *    parses (JSON_DECODE_ANY) to a value json_equal to jansson's member; a
 *    key that is not there is not found; and rawjson_member_at inside a
 *    member's value names that member (bodies with a NUL byte are refused
 *    by the server before parsing and skipped here);
 *  - rawjson_ref/rawjson_dumps: a body built from the input with
 *    placeholders for raw texts (each placed once, as the server does) dumps
 *    to text that jansson parses back equal to the same body with the raw
 *    values in place of the placeholders;
 *  - jsonw (src/api/jsonw.h): the input bytes as a string are
 *    written exactly as jansson's json_dumps writes them, and refused exactly
 *    when jansson refuses them (not UTF-8).
 */
#include <jansson.h>
#include <stdbool.h>

#include "api/jsonw.h"
#include "fuzz.h"
#include "net/rawjson.h"

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)

static void check_member_at(const char *body, size_t len, size_t pos, size_t outlen)
{
    char *out = malloc(outlen);
    CHECK(out != NULL, "out of memory");
    if (rawjson_member_at(body, len, pos, out, outlen))
        CHECK(memchr(out, '\0', outlen) != NULL, "rawjson_member_at wrote a name without its NUL");
    free(out);
}

/* Properties that hold for any bytes. */
static void any_bytes(const char *body, size_t len, uint8_t sel)
{
    static const char *const KEYS[] = {"metadata", "owner", "a", "", "ttl_ms"};
    for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++) {
        size_t start = 7777, end = 8888;
        if (rawjson_member(body, len, KEYS[k], &start, &end))
            CHECK(start <= end && end <= len, "rawjson_member('%s') span [%zu, %zu) outside the body of %zu bytes",
                  KEYS[k], start, end, len);
    }
    size_t positions[] = {0, len / 2, len ? len - 1 : 0, len, len + 3, (size_t)sel * 3};
    for (size_t k = 0; k < sizeof positions / sizeof positions[0]; k++)
        check_member_at(body, len, positions[k], 1 + (size_t)(sel + k) % 80);
}

/* Properties for bodies that the server reads (body.c): no NUL byte, and
 * jansson accepts them. jansson (2.14) skips a NUL byte after a number or a
 * literal ({"a":1\0}), which rawjson's scanner would keep in a span; body.c
 * refuses any body with a NUL before parsing it. */
static void accepted_bodies(const char *body, size_t len)
{
    if (memchr(body, '\0', len))
        return;
    json_error_t err;
    json_t *obj = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
    if (!obj)
        return;
    if (!json_is_object(obj)) {
        json_decref(obj);
        return;
    }
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value) {
        if (strlen(key) > 255)
            continue;
        size_t start, end;
        bool found = rawjson_member(body, len, key, &start, &end);
        CHECK(found, "rawjson_member does not find key '%s' of %.*s", key, (int)len, body);
        if (!found)
            continue;
        CHECK(start <= end && end <= len, "rawjson_member('%s') span outside the body", key);
        /* what the server keeps: the span as a C string (body_metadata's strndup) */
        char *kept = strndup(body + start, end - start);
        CHECK(kept != NULL, "out of memory");
        json_t *raw = json_loads(kept, JSON_DECODE_ANY, &err);
        CHECK(raw != NULL, "rawjson_member('%s') gives '%s' (as a C string), which does not parse (%s); body %.*s",
              key, kept, err.text, (int)len, body);
        CHECK(json_equal(raw, value), "rawjson_member('%s') gives '%s', jansson's member differs; body %.*s", key,
              kept, (int)len, body);
        json_decref(raw);
        free(kept);
        /* A position inside the value is in this member. */
        char name[256];
        size_t mid = start + (end - start) / 2;
        CHECK(rawjson_member_at(body, len, mid, name, sizeof name) && !strcmp(name, key),
              "rawjson_member_at(%zu) does not name '%s' (value [%zu, %zu)); body %.*s", mid, key, start, end,
              (int)len, body);
    }
    size_t start, end;
    CHECK(!rawjson_member(body, len, "no such key \x01", &start, &end) || json_object_get(obj, "no such key \x01"),
          "rawjson_member finds a key that is not there");
    if (!json_object_get(obj, "metadata"))
        CHECK(!rawjson_member(body, len, "metadata", &start, &end), "rawjson_member finds 'metadata', which is not there: %.*s",
              (int)len, body);
    json_decref(obj);
}

/* ---- rawjson_ref / rawjson_dumps ---- */

static const char *const RAW_TEXTS[] = {
    "{}",
    " { \"who\" : \"a\" , \"n\" : 0.1 } ",
    "{\"n\":0.10000000000000000555,\"big\":\"18446744073709551616\"}",
    "[1,2,{\"x\":null}]",
    "\"str\\\"ing \\\\u0000raw:0\"",
    "\"\\u0001\\u001f\"",
    "12345678901234567",
    "true",
    "{\"nested\":{\"a\":[{\"b\":{}}]}}",
    "\"\\\\u0000raw:1\\\"\"",
};
#define NRAW (sizeof RAW_TEXTS / sizeof RAW_TEXTS[0])

typedef struct Gen {
    FuzzIn in;
    RawRefs refs;
    json_t *values[RAWJSON_MAX_REFS]; /* parsed raw texts, by ref index */
    char *texts[64];                  /* raw texts cut from the input */
    size_t ntexts;
    int nodes;
} Gen;

/* A string from the input: no NUL (rawjson.h: no other string holds one), valid UTF-8 or a fallback. */
static json_t *gen_string(Gen *g)
{
    char buf[16];
    size_t n = fuzz_u8(&g->in) % sizeof buf;
    for (size_t i = 0; i < n; i++) {
        buf[i] = (char)fuzz_u8(&g->in);
        if (!buf[i])
            buf[i] = '"';
    }
    json_t *s = json_stringn(buf, n);
    return s ? s : json_string("\\u0000raw:0\"");
}

static const char *raw_text(Gen *g)
{
    uint8_t b = fuzz_u8(&g->in);
    if (b < 200 || g->in.i >= g->in.n)
        return RAW_TEXTS[b % NRAW];
    /* A piece of the input that jansson accepts as a value. */
    size_t n = 1 + fuzz_u8(&g->in) % 64;
    if (n > g->in.n - g->in.i)
        n = g->in.n - g->in.i;
    const char *p = (const char *)g->in.p + g->in.i;
    g->in.i += n;
    json_t *v = json_loadb(p, n, JSON_DECODE_ANY, NULL);
    if (!v || g->ntexts == sizeof g->texts / sizeof g->texts[0] || memchr(p, '\0', n)) {
        json_decref(v);
        return RAW_TEXTS[b % NRAW];
    }
    json_decref(v);
    char *t = strndup(p, n);
    CHECK(t != NULL, "out of memory");
    g->texts[g->ntexts++] = t;
    return t;
}

/* Builds two trees at once: `with` has placeholders, `expect` the raw values. */
static void gen_value(Gen *g, int depth, json_t **with, json_t **expect)
{
    uint8_t kind = fuzz_u8(&g->in) % 8;
    if (++g->nodes > 200 || (depth > 3 && (kind == 4 || kind == 5)))
        kind = 1;
    switch (kind) {
    case 0:
        *with = gen_string(g);
        *expect = json_deep_copy(*with);
        return;
    case 1:
        *with = json_integer((json_int_t)(int32_t)fuzz_u32(&g->in));
        *expect = json_deep_copy(*with);
        return;
    case 2:
        *with = json_real((double)(int16_t)fuzz_u16(&g->in) / 7.0);
        *expect = json_deep_copy(*with);
        return;
    case 3: {
        uint8_t b = fuzz_u8(&g->in) % 3;
        *with = b == 0 ? json_true() : b == 1 ? json_false() : json_null();
        *expect = json_deep_copy(*with);
        return;
    }
    case 4: {
        *with = json_array();
        *expect = json_array();
        size_t n = fuzz_u8(&g->in) % 4;
        for (size_t i = 0; i < n; i++) {
            json_t *w, *e;
            gen_value(g, depth + 1, &w, &e);
            json_array_append_new(*with, w);
            json_array_append_new(*expect, e);
        }
        return;
    }
    case 5: {
        *with = json_object();
        *expect = json_object();
        size_t n = fuzz_u8(&g->in) % 4;
        for (size_t i = 0; i < n; i++) {
            json_t *k = gen_string(g), *w, *e;
            gen_value(g, depth + 1, &w, &e);
            json_object_set_new(*with, json_string_value(k), w);
            json_object_set_new(*expect, json_string_value(k), e);
            json_decref(k);
        }
        return;
    }
    default: {
        const char *text = raw_text(g);
        size_t idx = g->refs.n;
        json_t *ph = rawjson_ref(&g->refs, text);
        if (!ph) {
            CHECK(g->refs.n == RAWJSON_MAX_REFS, "rawjson_ref failed with %zu refs", g->refs.n);
            *with = json_null();
            *expect = json_null();
            return;
        }
        CHECK(g->refs.n == idx + 1 && g->refs.texts[idx] == text, "rawjson_ref did not record its text");
        CHECK(json_is_string(ph) && json_string_length(ph) > 0 && json_string_value(ph)[0] == '\0',
              "a placeholder is not a string that starts with NUL");
        *with = ph;
        *expect = json_loads(text, JSON_DECODE_ANY, NULL);
        CHECK(*expect != NULL, "harness: raw text does not parse");
        return;
    }
    }
}

static void dumps_roundtrip(const uint8_t *data, size_t size)
{
    static Gen g;
    memset(&g, 0, sizeof g);
    g.in = (FuzzIn){data, size, 0};
    json_t *with = json_object(), *expect = json_object();
    size_t n = 1 + fuzz_u8(&g.in) % 6;
    static const char *const KEYS[] = {"name", "owner", "metadata", "holder", "locks", "token"};
    for (size_t i = 0; i < n; i++) {
        json_t *w, *e;
        gen_value(&g, 0, &w, &e);
        const char *k = KEYS[fuzz_u8(&g.in) % 6];
        json_object_set_new(with, k, w);
        json_object_set_new(expect, k, e);
    }
    char *text = rawjson_dumps(with, &g.refs);
    CHECK(text != NULL, "rawjson_dumps failed");
    json_error_t err;
    json_t *back = json_loads(text, 0, &err);
    CHECK(back != NULL, "rawjson_dumps gave text jansson refuses (%s at %d): %s", err.text, err.position, text);
    if (!json_equal(back, expect)) {
        char *want = json_dumps(expect, JSON_COMPACT);
        fuzz_fail(__FILE__, __LINE__, "json_equal(back, expect)", "rawjson_dumps gave %s, expected %s", text,
                  want ? want : "?");
    }
    json_decref(back);
    free(text);
    json_decref(with);
    json_decref(expect);
    for (size_t i = 0; i < g.ntexts; i++)
        free(g.texts[i]);
}

/* ---- jsonw ---- */

static void jsonw_as_jansson(const uint8_t *data, size_t size)
{
    JsonW w = {0};
    jsonw_string(&w, (const char *)data, size);
    json_t *str = json_stringn_nocheck((const char *)data, size);
    CHECK(str != NULL, "out of memory");
    char *theirs = json_dumps(str, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(str);
    if (!theirs)
        CHECK(w.failed, "jsonw writes a string jansson refuses (%zu bytes)", size);
    else if (w.failed)
        CHECK(false, "jsonw refuses a string jansson writes: %s", theirs);
    else
        CHECK(w.len == strlen(theirs) && memcmp(w.buf, theirs, w.len) == 0, "jsonw wrote %.*s, jansson %s",
              (int)w.len, w.buf, theirs);
    free(w.buf);
    free(theirs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The body in a buffer of exactly its size: no NUL after it. */
    char *body = malloc(size ? size : 1);
    CHECK(body != NULL, "out of memory");
    memcpy(body, data, size);
    any_bytes(body, size, size ? data[0] : 0);
    accepted_bodies(body, size);
    free(body);
    dumps_roundtrip(data, size);
    jsonw_as_jansson(data, size);
    return 0;
}
