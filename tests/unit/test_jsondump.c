/* Unit test of jsondump: when any one allocation fails, the text is NULL or
 * whole, never one with a member's name missing (jansson 2.14's json_dumps
 * writes such a text, and the etcd store once stored one: found by
 * test_alloc_failures on etcd, a record the next leader could not load). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "store/jsondump.h"

static long allocations, fail_at;

static void *failing_malloc(size_t n)
{
    return ++allocations == fail_at ? NULL : malloc(n);
}

/* An audit group as the etcd store writes it: an array of flat objects. */
static json_t *audit_group(void)
{
    json_t *rows = json_array();
    for (int i = 0; rows && i < 3; i++)
        json_array_append_new(rows, json_pack("{s:I, s:I, s:i, s:s, s:s, s:I, s:s, s:s}", "seq", (json_int_t)i,
                                              "at_ms", (json_int_t)1795516541892, "kind", 2, "lock", "fa", "owner",
                                              "a", "token", (json_int_t)1, "key", "", "peer", "127.0.0.1:53066"));
    return rows;
}

int main(void)
{
    json_t *group = audit_group();
    char *whole = jsondump_whole(group, JSON_COMPACT);
    char *reference = json_dumps(group, JSON_COMPACT);
    CHECK(whole && reference && !strcmp(whole, reference));
    json_set_alloc_funcs(failing_malloc, free);
    int partial = 0, refused = 0;
    for (fail_at = 1; fail_at < 200; fail_at++) {
        allocations = 0;
        char *text = jsondump_whole(group, JSON_COMPACT);
        CHECK(!text || !strcmp(text, reference));
        if (text && strcmp(text, reference))
            fprintf(stderr, "  allocation %ld failed: %s\n", fail_at, text);
        refused += !text;
        free(text);
        allocations = 0;
        char *theirs = json_dumps(group, JSON_COMPACT);
        partial += theirs && strcmp(theirs, reference) != 0;
        free(theirs);
    }
    json_set_alloc_funcs(malloc, free);
    CHECK(jsondump_whole(NULL, JSON_COMPACT) == NULL);
    printf("jsondump: %d failed allocations refused; json_dumps wrote %d partial texts\n", refused, partial);
    free(whole);
    free(reference);
    json_decref(group);
    return check_report("jsondump");
}
