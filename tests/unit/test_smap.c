/* Unit tests of the ordered map: lookup, byte order, resumable iteration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/smap.h"

#define N 5000

int main(void)
{
    Smap *m = smap_new();
    CHECK(m != NULL);
    static char keys[N][16];
    /* Insert in a scrambled order. */
    for (int i = 0; i < N; i++) {
        int k = (i * 7919) % N;
        snprintf(keys[k], sizeof keys[k], "k%05d", k);
        CHECK(smap_insert(m, keys[k], keys[k]));
    }
    CHECK(smap_len(m) == N);
    CHECK(smap_get(m, "k04999") == keys[4999]);
    CHECK(smap_get(m, "k5") == NULL);
    int seen = 0;
    const char *prev = "";
    bool ordered = true;
    for (const SmapNode *n = smap_first_after(m, NULL); n; n = smap_next(n)) {
        ordered &= strcmp(prev, smap_key(n)) < 0;
        prev = smap_key(n);
        seen++;
    }
    CHECK(ordered);
    CHECK(seen == N);
    const SmapNode *n = smap_first_after(m, "k00100");
    CHECK(n && strcmp(smap_key(n), "k00101") == 0);
    n = smap_first_after(m, "k00100x");
    CHECK(n && strcmp(smap_key(n), "k00101") == 0);
    n = smap_first_from(m, "k00100");
    CHECK(n && strcmp(smap_key(n), "k00100") == 0);
    CHECK(smap_first_after(m, "k04999") == NULL);
    /* Removal: every other key, then order and lookups still hold. */
    for (int k = 0; k < N; k += 2)
        CHECK(smap_remove(m, keys[k]));
    CHECK(!smap_remove(m, "k00000"));
    CHECK(smap_len(m) == N / 2);
    CHECK(smap_get(m, "k00002") == NULL && smap_get(m, "k00003") == keys[3]);
    seen = 0;
    prev = "";
    ordered = true;
    for (const SmapNode *x = smap_first_after(m, NULL); x; x = smap_next(x)) {
        ordered &= strcmp(prev, smap_key(x)) < 0 && (smap_key(x)[5] - '0') % 2 == 1;
        prev = smap_key(x);
        seen++;
    }
    CHECK(ordered && seen == N / 2);
    smap_free(m, NULL);
    return check_report("smap");
}
