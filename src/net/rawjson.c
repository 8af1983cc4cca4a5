/* rawjson — values kept as sent; see rawjson.h. */
#include "net/rawjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/jsondump.h"

static size_t skip_ws(const char *p, size_t i, size_t len)
{
    while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    return i;
}

/* p[i] is '"': the index after the closing quote, or len. */
static size_t skip_string(const char *p, size_t i, size_t len)
{
    for (i++; i < len; i++) {
        if (p[i] == '\\')
            i++;
        else if (p[i] == '"')
            return i + 1;
    }
    return len;
}

/* The index after the value that starts at p[i]. */
static size_t skip_value(const char *p, size_t i, size_t len)
{
    if (i >= len)
        return len;
    if (p[i] == '"')
        return skip_string(p, i, len);
    if (p[i] == '{' || p[i] == '[') {
        int depth = 0;
        for (; i < len; i++) {
            if (p[i] == '"') {
                i = skip_string(p, i, len) - 1;
            } else if (p[i] == '{' || p[i] == '[') {
                depth++;
            } else if (p[i] == '}' || p[i] == ']') {
                if (--depth == 0)
                    return i + 1;
            }
        }
        return len;
    }
    while (i < len && !strchr(",}] \t\r\n", p[i]))
        i++;
    return i;
}

/* Walks the top-level members: calls fn(key start, key end, value start,
 * value end) until it returns true. */
static bool each_member(const char *p, size_t len,
                        bool (*fn)(void *ud, const char *p, size_t ks, size_t ke, size_t vs, size_t ve), void *ud)
{
    size_t i = skip_ws(p, 0, len);
    if (i >= len || p[i] != '{')
        return false;
    i = skip_ws(p, i + 1, len);
    while (i < len && p[i] == '"') {
        size_t ks = i, ke = skip_string(p, i, len);
        i = skip_ws(p, ke, len);
        if (i >= len || p[i] != ':')
            return false;
        size_t vs = skip_ws(p, i + 1, len), ve = skip_value(p, vs, len);
        if (fn(ud, p, ks, ke, vs, ve))
            return true;
        i = skip_ws(p, ve, len);
        if (i >= len || p[i] != ',')
            return false;
        i = skip_ws(p, i + 1, len);
    }
    return false;
}

/* The key's text (quotes included) decoded, into out. */
static bool key_text(const char *p, size_t ks, size_t ke, char *out, size_t outlen)
{
    json_t *k = json_loadb(p + ks, ke - ks, JSON_DECODE_ANY, NULL);
    bool ok = json_is_string(k) && json_string_length(k) < outlen;
    if (ok)
        memcpy(out, json_string_value(k), json_string_length(k) + 1);
    json_decref(k);
    return ok;
}

typedef struct Find {
    const char *key;
    size_t pos;
    char *name;
    size_t namelen;
    size_t start, end;
} Find;

static bool match_key(void *ud, const char *p, size_t ks, size_t ke, size_t vs, size_t ve)
{
    Find *f = ud;
    char key[256];
    if (!key_text(p, ks, ke, key, sizeof key) || strcmp(key, f->key) != 0)
        return false;
    f->start = vs;
    f->end = ve;
    return true;
}

bool rawjson_member(const char *body, size_t len, const char *key, size_t *start, size_t *end)
{
    Find f = {.key = key};
    if (!each_member(body, len, match_key, &f))
        return false;
    *start = f.start;
    *end = f.end;
    return true;
}

static bool match_pos(void *ud, const char *p, size_t ks, size_t ke, size_t vs, size_t ve)
{
    (void)vs;
    Find *f = ud;
    return f->pos >= ks && f->pos <= ve && key_text(p, ks, ke, f->name, f->namelen);
}

bool rawjson_member_at(const char *body, size_t len, size_t pos, char *out, size_t outlen)
{
    Find f = {.pos = pos, .name = out, .namelen = outlen};
    return each_member(body, len, match_pos, &f);
}

#define MARK "\\u0000raw:"

json_t *rawjson_ref(RawRefs *refs, const char *text)
{
    if (refs->n == RAWJSON_MAX_REFS)
        return NULL;
    char mark[32];
    snprintf(mark, sizeof mark, "%craw:%zu", '\0', refs->n);
    json_t *s = json_stringn(mark, 5 + strlen(mark + 5));
    if (s)
        refs->texts[refs->n++] = text;
    return s;
}

char *rawjson_dumps(const json_t *body, const RawRefs *refs)
{
    char *text = jsondump_whole(body, JSON_COMPACT);
    if (!text || !refs || refs->n == 0)
        return text;
    size_t extra = 0;
    for (size_t i = 0; i < refs->n; i++)
        extra += strlen(refs->texts[i]);
    char *out = malloc(strlen(text) + extra + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    char *o = out;
    for (const char *p = text; *p;) {
        const char *m = strstr(p, "\"" MARK);
        if (!m) {
            size_t n = strlen(p);
            memcpy(o, p, n);
            o += n;
            break;
        }
        memcpy(o, p, (size_t)(m - p));
        o += m - p;
        char *end;
        unsigned long idx = strtoul(m + 1 + strlen(MARK), &end, 10);
        if (*end != '"' || idx >= refs->n) { /* a mark this body's refs did not make */
            free(text);
            free(out);
            return NULL;
        }
        size_t n = strlen(refs->texts[idx]);
        memcpy(o, refs->texts[idx], n);
        o += n;
        p = end + 1;
    }
    *o = '\0';
    free(text);
    return out;
}
