/* Unit tests of jsonw: the text it writes is jansson's json_dumps(JSON_COMPACT) of the same object. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonw.h"
#include "check.h"

/* jsonw's text for the string s (n bytes, NUL allowed) equals jansson's, and
 * jsonw refuses it exactly when jansson does. */
static void same_as_jansson(const char *s, size_t n)
{
    JsonW w = {0};
    jsonw_string(&w, s, n);
    json_t *str = json_stringn_nocheck(s, n);
    char *theirs = json_dumps(str, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(str);
    if (!theirs || w.failed) {
        CHECK(!theirs && w.failed);
        if (theirs || !w.failed)
            fprintf(stderr, "  %zu bytes: jansson %s, jsonw %s\n", n, theirs ? theirs : "refuses",
                    w.failed ? "refuses" : "writes it");
    } else {
        bool same = w.len == strlen(theirs) && memcmp(w.buf, theirs, w.len) == 0;
        CHECK(same);
        if (!same)
            fprintf(stderr, "  jansson %s\n  jsonw   %.*s\n", theirs, (int)w.len, w.buf);
    }
    free(w.buf);
    free(theirs);
}

static void test_strings(void)
{
    for (int c = 0; c < 0x80; c++) {
        char s[3] = {'a', (char)c, 'z'};
        same_as_jansson(s, sizeof s);
    }
    static const char *const VALID[] = {"", "lock/a b", "quote \" and \\ backslash", "caf\xc3\xa9", "\xe2\x82\xac",
                                        "\xef\xbf\xbf", "\xf0\x9f\x94\x92", "\xf4\x8f\xbf\xbf", "\xc2\x80\x7f"};
    for (size_t i = 0; i < sizeof VALID / sizeof VALID[0]; i++)
        same_as_jansson(VALID[i], strlen(VALID[i]));
    /* overlong, surrogate, above U+10FFFF, bytes never used, cut short, a stray continuation */
    static const char *const INVALID[] = {"\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xe0\x9f\xbf", "\xed\xa0\x80",
                                          "\xed\xbf\xbf", "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80",
                                          "\xf5\x80\x80\x80", "\xff", "\xc3", "\xe2\x82", "\xf0\x9f\x94", "\x80",
                                          "ok\xc3(", "\xe2\x28\xa1"};
    for (size_t i = 0; i < sizeof INVALID / sizeof INVALID[0]; i++)
        same_as_jansson(INVALID[i], strlen(INVALID[i]));
    /* Plain runs cut by escapes anywhere: every pair of ASCII bytes, between
     * plain text, at the start and at the end. */
    for (int c = 0; c < 0x80; c++)
        for (int d = 0; d < 0x80; d++) {
            char s[6] = {(char)c, 'a', 'b', (char)d, (char)c, (char)d};
            same_as_jansson(s, sizeof s);
        }
    /* A NUL inside a string, and one long enough to make the buffer grow. */
    same_as_jansson("a\0b", 3);
    char big[5000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i % 3 ? 'x' : '\n');
    same_as_jansson(big, sizeof big);
}

/* An answer as the server writes one: members of each kind, in order. */
static void test_object(void)
{
    JsonW w;
    jsonw_begin(&w);
    jsonw_str(&w, "name", "jobs/nightly");
    jsonw_int(&w, "zero", 0);
    jsonw_int(&w, "min", INT64_MIN);
    jsonw_int(&w, "max", INT64_MAX);
    jsonw_int(&w, "neg", -42);
    jsonw_bool(&w, "yes", true);
    jsonw_bool(&w, "no", false);
    jsonw_raw(&w, "metadata", "{\"n\": 0.1, \"big\": 123456789012345678901234567890}");
    size_t len;
    char *mine = jsonw_end_new(&w, &len);
    CHECK(mine != NULL);

    json_t *obj = json_pack("{s:s, s:I, s:I, s:I, s:I, s:b, s:b}", "name", "jobs/nightly", "zero", (json_int_t)0,
                            "min", (json_int_t)INT64_MIN, "max", (json_int_t)INT64_MAX, "neg", (json_int_t)-42,
                            "yes", 1, "no", 0);
    char *theirs = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    /* jansson's text, with the raw member in place of its closing brace */
    const char *raw = ",\"metadata\":{\"n\": 0.1, \"big\": 123456789012345678901234567890}}";
    char *expect = malloc(strlen(theirs) + strlen(raw) + 1);
    strcpy(expect, theirs);
    strcpy(expect + strlen(expect) - 1, raw);
    CHECK(mine && strcmp(mine, expect) == 0 && len == strlen(expect));
    if (mine && strcmp(mine, expect) != 0)
        fprintf(stderr, "  expected %s\n  got      %s\n", expect, mine);
    free(expect);
    free(theirs);
    free(mine);

    jsonw_begin(&w);
    mine = jsonw_end_new(&w, &len);
    CHECK(mine && strcmp(mine, "{}") == 0 && len == 2);
    free(mine);
}

/* Keys are escaped as strings are (the answers' keys never need it, and are
 * copied whole). */
static void test_keys_escaped(void)
{
    JsonW w;
    jsonw_begin(&w);
    jsonw_int(&w, "plain", 1);
    jsonw_str(&w, "quote \" back \\ tab \t caf\xc3\xa9", "v");
    jsonw_bool(&w, "\x01", true);
    size_t len;
    char *mine = jsonw_end_new(&w, &len);
    json_t *obj = json_object();
    json_object_set_new(obj, "plain", json_integer(1));
    json_object_set_new(obj, "quote \" back \\ tab \t caf\xc3\xa9", json_string("v"));
    json_object_set_new(obj, "\x01", json_true());
    char *theirs = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    CHECK(mine && theirs && strcmp(mine, theirs) == 0 && len == strlen(theirs));
    if (mine && theirs && strcmp(mine, theirs) != 0)
        fprintf(stderr, "  expected %s\n  got      %s\n", theirs, mine);
    free(mine);
    free(theirs);
    /* A key that is not UTF-8 fails the text, as a value does. */
    jsonw_begin(&w);
    jsonw_int(&w, "bad \xff", 1);
    CHECK(jsonw_end_new(&w, &len) == NULL);
}

/* A string that is not UTF-8 fails the whole text, whatever comes after it. */
static void test_failure_is_the_whole_text(void)
{
    JsonW w;
    jsonw_begin(&w);
    jsonw_str(&w, "owner", "bad \xff byte");
    jsonw_int(&w, "token", 7);
    size_t len = 99;
    CHECK(jsonw_end_new(&w, &len) == NULL);
    CHECK(len == 99);
    CHECK(w.buf == NULL && w.len == 0 && !w.failed);
}

int main(void)
{
    test_strings();
    test_object();
    test_keys_escaped();
    test_failure_is_the_whole_text();
    return check_report("jsonw");
}
