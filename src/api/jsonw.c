/* jsonw — a flat JSON object written straight into text; see jsonw.h. */
#include "api/jsonw.h"

#include <stdlib.h>
#include <string.h>

/* Room for n more bytes; false (and the writer failed) when out of memory. */
static bool reserve(JsonW *w, size_t n)
{
    if (w->failed)
        return false;
    if (n <= w->cap - w->len)
        return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap - w->len < n) {
        if (cap > SIZE_MAX / 2) {
            w->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *buf = realloc(w->buf, cap);
    if (!buf) {
        w->failed = true;
        return false;
    }
    w->buf = buf;
    w->cap = cap;
    return true;
}

static void put(JsonW *w, const char *s, size_t n)
{
    if (!reserve(w, n))
        return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

/* The length of the UTF-8 sequence at s (at most n bytes), or 0 when it is
 * not one jansson accepts (utf.c): no overlong forms, no surrogates, nothing
 * above U+10FFFF, nothing cut short. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* The bytes written as they are (1): printable ASCII but the quote and the
 * backslash. A table: one load a byte where the tests were four. */
#define PLAIN16 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
static const unsigned char PLAIN[256] = {
    [0x20] = 1, 1, 0 /* '"' */, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    PLAIN16, PLAIN16, /* 0x30-0x4F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0 /* '\\' */, 1, 1, 1,
    PLAIN16, PLAIN16, /* 0x60-0x7F */
};

/* How many bytes from p on need no escape (at most n). */
static size_t plain_run(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n && PLAIN[p[i]])
        i++;
    return i;
}

void jsonw_string(JsonW *w, const char *s, size_t n)
{
    static const char HEX[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s;
    /* Each byte becomes at most 6 ("\u001F"). */
    if (n > (SIZE_MAX - 2) / 6 || !reserve(w, 6 * n + 2))
        return;
    char *o = w->buf + w->len;
    *o++ = '"';
    for (size_t i = 0; i < n;) {
        /* Most strings (names, owners, leases) are one plain run: copied whole. */
        size_t run = plain_run(p + i, n - i);
        memcpy(o, p + i, run);
        o += run;
        i += run;
        if (i == n)
            break;
        unsigned char c = p[i];
        if (c >= 0x80) {
            size_t len = utf8_len(p + i, n - i);
            if (!len) {
                w->failed = true;
                return;
            }
            memcpy(o, p + i, len);
            o += len;
            i += len;
            continue;
        }
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else { /* below 0x20: the rest are plain runs */
            *o++ = '\\';
            switch (c) {
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            default:
                memcpy(o, "u00", 3);
                o[3] = HEX[c >> 4];
                o[4] = HEX[c & 0xF];
                o += 5;
            }
        }
        i++;
    }
    *o++ = '"';
    w->len = (size_t)(o - w->buf);
}

/* A member's key and colon, after a comma unless it is the first. A key
 * that needs no escape (every key the answers use) is copied in one step. */
static void key(JsonW *w, const char *k)
{
    size_t n = strlen(k);
    bool comma = w->len > 1;
    if (plain_run((const unsigned char *)k, n) == n && n <= SIZE_MAX - 4 && reserve(w, n + 4)) {
        char *o = w->buf + w->len;
        if (comma)
            *o++ = ',';
        *o++ = '"';
        memcpy(o, k, n);
        o += n;
        *o++ = '"';
        *o++ = ':';
        w->len = (size_t)(o - w->buf);
        return;
    }
    if (comma)
        put(w, ",", 1);
    jsonw_string(w, k, n);
    put(w, ":", 1);
}

void jsonw_begin(JsonW *w)
{
    *w = (JsonW){0};
    put(w, "{", 1);
}

void jsonw_str(JsonW *w, const char *k, const char *value)
{
    key(w, k);
    jsonw_string(w, value, strlen(value));
}

void jsonw_int(JsonW *w, const char *k, int64_t value)
{
    key(w, k);
    char digits[24];
    char *end = digits + sizeof digits, *d = end;
    /* The magnitude as unsigned, so that INT64_MIN has one. */
    uint64_t u = value < 0 ? 0 - (uint64_t)value : (uint64_t)value;
    do {
        *--d = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (value < 0)
        *--d = '-';
    put(w, d, (size_t)(end - d));
}

void jsonw_bool(JsonW *w, const char *k, bool value)
{
    key(w, k);
    put(w, value ? "true" : "false", value ? 4 : 5);
}

void jsonw_raw(JsonW *w, const char *k, const char *value)
{
    key(w, k);
    put(w, value, strlen(value));
}

char *jsonw_end_new(JsonW *w, size_t *len)
{
    put(w, "}", 2); /* the brace and the NUL that ends the text */
    char *text = w->failed ? NULL : w->buf;
    if (text)
        *len = w->len - 1;
    else
        free(w->buf);
    *w = (JsonW){0};
    return text;
}
