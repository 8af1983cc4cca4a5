/*
 * fuzz_formscan — the guard's search for a method override (src/guard/formscan.h)
 * on arbitrary bytes, as a query string or an urlencoded form body, and as a
 * multipart body:
 *
 *  - fed in pieces of any sizes (the first bytes of the input choose them),
 *    the scan finds exactly what it finds fed at once: a name cut between two
 *    pieces is still found;
 *  - urlencoded: it finds an override exactly when a reference written from
 *    formscan.h does: the fields are split on '&', a field's name is what
 *    comes before its first '=', decoded ('+' a space, a well-formed %XX its
 *    byte, any other '%' as it is), and an override is `_method` or the name
 *    of an override header, in any case;
 *  - multipart: exactly when the lower-cased bytes hold `name="_method"`, or
 *    `name=_method` followed by ';', CR or LF, after ';', a space or a tab;
 *  - nothing is read past the input (ASan sees it).
 */
#include <ctype.h>
#include <stdbool.h>
#include <strings.h>

#include "fuzz.h"
#include "guard/formscan.h"

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool override_name(const char *name, size_t len)
{
    static const char *const NAMES[] = {"_method", "x-http-method-override", "x-http-method", "x-method-override"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strlen(NAMES[i]) == len && !strncasecmp(name, NAMES[i], len))
            return true;
    return false;
}

static bool reference_urlencoded(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i <= n) {
        size_t end = i;
        while (end < n && p[end] != '&')
            end++;
        size_t name_end = i;
        while (name_end < end && p[name_end] != '=')
            name_end++;
        char name[64];
        size_t len = 0;
        bool fits = true;
        for (size_t k = i; k < name_end; k++) {
            int c = p[k];
            if (c == '%' && k + 2 < name_end && hexval(p[k + 1]) >= 0 && hexval(p[k + 2]) >= 0) {
                c = hexval(p[k + 1]) * 16 + hexval(p[k + 2]);
                k += 2;
            } else if (c == '+') {
                c = ' ';
            }
            if (len < sizeof name)
                name[len++] = (char)c;
            else
                fits = false;
        }
        if (fits && len && override_name(name, len))
            return true;
        i = end + 1;
    }
    return false;
}

static bool marker_at(const char *low, size_t n, size_t at, const char *marker)
{
    size_t m = strlen(marker);
    if (at + m > n || memcmp(low + at, marker, m))
        return false;
    return at > 0 && (low[at - 1] == ';' || low[at - 1] == ' ' || low[at - 1] == '\t');
}

static bool reference_multipart(const uint8_t *p, size_t n)
{
    char *low = malloc(n + 1);
    if (!low)
        abort();
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower(p[i]);
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        found = marker_at(low, n, i, "name=\"_method\"");
        for (const char *end = ";\r\n"; !found && *end; end++) {
            char m[16] = "name=_method";
            size_t l = strlen(m);
            m[l] = *end;
            m[l + 1] = '\0';
            found = marker_at(low, n, i, m);
        }
    }
    free(low);
    return found;
}

/* The scan of body fed whole, and in the pieces `cuts` says (sizes 1..64). */
static void scan(FormKind kind, const uint8_t *body, size_t n, FuzzIn *cuts, bool *whole, bool *pieces)
{
    FormScan f;
    formscan_init(&f, kind);
    formscan_feed(&f, (const char *)body, n);
    *whole = formscan_finish(&f);
    formscan_init(&f, kind);
    for (size_t off = 0; off < n;) {
        size_t take = 1 + fuzz_u8(cuts) % 64;
        if (take > n - off)
            take = n - off;
        formscan_feed(&f, (const char *)body + off, take);
        off += take;
    }
    *pieces = formscan_finish(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    FuzzIn cuts = {data, 8, 0}; /* the first 8 bytes choose the pieces (then ones) */
    const uint8_t *body = data + 8;
    size_t n = size - 8;
    bool whole, pieces;
    scan(FORM_URLENCODED, body, n, &cuts, &whole, &pieces);
    CHECK(whole == pieces, "urlencoded: whole %d, in pieces %d", whole, pieces);
    bool want = reference_urlencoded(body, n);
    CHECK(whole == want, "urlencoded: found %d, the reference %d", whole, want);
    cuts.i = 0;
    scan(FORM_MULTIPART, body, n, &cuts, &whole, &pieces);
    CHECK(whole == pieces, "multipart: whole %d, in pieces %d", whole, pieces);
    want = reference_multipart(body, n);
    CHECK(whole == want, "multipart: found %d, the reference %d", whole, want);
    return 0;
}
