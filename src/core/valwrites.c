/* valwrites — the writes of a value that a retry may repeat; see valwrites.h. */
#include "core/valwrites.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ValueWrite *valwrites_find(const ValueWrites *ws, const char *request_id)
{
    for (uint8_t i = 0; request_id && i < ws->len; i++)
        if (strcmp(ws->at[i].request_id, request_id) == 0)
            return &ws->at[i];
    return NULL;
}

bool valwrites_add(ValueWrites *ws, bool restart, const ValueWrite *w)
{
    if (restart && !w) {
        valwrites_clear(ws);
        return true;
    }
    if (!w)
        return true;
    if (restart) {
        ValueWrite *one = malloc(sizeof *one);
        if (!one)
            return false;
        *one = *w;
        valwrites_clear(ws);
        ws->at = one;
        ws->len = 1;
        return true;
    }
    if (ws->len == VALWRITES_MAX) { /* full: the oldest makes room */
        memmove(ws->at, ws->at + 1, (VALWRITES_MAX - 1) * sizeof *ws->at);
        ws->at[VALWRITES_MAX - 1] = *w;
        return true;
    }
    ValueWrite *grown = realloc(ws->at, (ws->len + 1u) * sizeof *grown);
    if (!grown)
        return false;
    ws->at = grown;
    ws->at[ws->len++] = *w;
    return true;
}

bool valwrites_copy(ValueWrites *to_new, const ValueWrites *from)
{
    *to_new = (ValueWrites){NULL, 0};
    if (!from->len)
        return true;
    ValueWrite *at = malloc(from->len * sizeof *at);
    if (!at)
        return false;
    memcpy(at, from->at, from->len * sizeof *at);
    *to_new = (ValueWrites){at, from->len};
    return true;
}

void valwrites_clear(ValueWrites *ws)
{
    free(ws->at);
    *ws = (ValueWrites){NULL, 0};
}

/* 1..VALWRITE_ID_MAX bytes, none a control character (as the API takes them). */
static bool id_ok(const char *id, size_t len)
{
    if (len == 0 || len > VALWRITE_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)id[i] < 0x20 || id[i] == 0x7f)
            return false;
    return true;
}

bool valwrites_valid(const ValueWrites *ws, uint64_t version)
{
    if (ws->len > VALWRITES_MAX || (ws->len == 0) != (ws->at == NULL))
        return false;
    for (uint8_t i = 0; i < ws->len; i++) {
        const ValueWrite *w = &ws->at[i];
        size_t len = strnlen(w->request_id, sizeof w->request_id);
        if (!id_ok(w->request_id, len) || len == sizeof w->request_id || w->version == 0 || w->version > version ||
            (i > 0 && w->version <= ws->at[i - 1].version))
            return false;
        for (uint8_t j = 0; j < i; j++)
            if (strcmp(ws->at[j].request_id, w->request_id) == 0)
                return false;
    }
    return true;
}

size_t valwrites_format(const ValueWrites *ws, char buf[VALWRITES_TEXT_MAX])
{
    size_t len = 0;
    buf[0] = '\0';
    for (uint8_t i = 0; i < ws->len; i++) {
        const ValueWrite *w = &ws->at[i];
        len += (size_t)snprintf(buf + len, VALWRITES_TEXT_MAX - len, "%llu ", (unsigned long long)w->version);
        for (size_t b = 0; b < VALWRITE_DIGEST_BYTES; b++)
            len += (size_t)snprintf(buf + len, VALWRITES_TEXT_MAX - len, "%02x", w->digest[b]);
        len += (size_t)snprintf(buf + len, VALWRITES_TEXT_MAX - len, " %s\n", w->request_id);
    }
    return len;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One line "VERSION DIGEST REQUEST_ID\n" at *p into *w; *p moves past it. */
static bool parse_line(const char **p, ValueWrite *w)
{
    const char *s = *p;
    uint64_t v = 0;
    size_t digits = 0;
    for (; *s >= '0' && *s <= '9'; s++, digits++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (digits == 0 || *s++ != ' ')
        return false;
    for (size_t b = 0; b < VALWRITE_DIGEST_BYTES; b++) {
        int hi = hex_digit(s[2 * b]), lo = hi < 0 ? -1 : hex_digit(s[2 * b + 1]);
        if (hi < 0 || lo < 0)
            return false;
        w->digest[b] = (uint8_t)(hi << 4 | lo);
    }
    s += 2 * VALWRITE_DIGEST_BYTES;
    if (*s++ != ' ')
        return false;
    const char *end = strchr(s, '\n');
    if (!end || !id_ok(s, (size_t)(end - s)))
        return false;
    memcpy(w->request_id, s, (size_t)(end - s));
    w->request_id[end - s] = '\0';
    w->version = v;
    *p = end + 1;
    return true;
}

bool valwrites_parse(const char *text, uint64_t version, ValueWrites *out_new)
{
    ValueWrite at[VALWRITES_MAX];
    uint8_t n = 0;
    if (out_new)
        *out_new = (ValueWrites){NULL, 0};
    for (const char *p = text ? text : ""; *p; n++)
        if (n == VALWRITES_MAX || !parse_line(&p, &at[n]))
            return false;
    ValueWrites read = {n ? at : NULL, n};
    if (!valwrites_valid(&read, version))
        return false;
    return !out_new || valwrites_copy(out_new, &read);
}
