/* Unit tests of the ordered map: lookup, byte order, resumable iteration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "leasegate/smap.h"

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
    smap_free(m, NULL);
    return check_report("smap");
}
