/*
 * Unit tests of lease ids: version 4 UUIDs, all different across several
 * refills of the buffer (a zeroed LeaseIds is empty, never a source of ids),
 * and no byte of a given id left in the buffer.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/leaseid.h"

#define N 3000 /* about twelve refills */

static int cmp16(const void *a, const void *b) { return memcmp(a, b, 16); }

int main(void)
{
    static LeaseIds ids; /* zeroed, as in the server context */
    static uint8_t got[N][16];
    static const uint8_t zero[16];
    for (int i = 0; i < N; i++) {
        CHECK(leaseid_next(&ids, got[i]));
        CHECK((got[i][6] & 0xf0) == 0x40);
        CHECK((got[i][8] & 0xc0) == 0x80);
        CHECK(memcmp(got[i], zero, 16) != 0);
        /* The bytes it came from are wiped. */
        const uint8_t *src = ids.buf + sizeof ids.buf - ids.avail - 16;
        CHECK(memcmp(src, zero, 16) == 0);
    }
    qsort(got, N, 16, cmp16);
    int dups = 0;
    for (int i = 1; i < N; i++)
        dups += memcmp(got[i - 1], got[i], 16) == 0;
    CHECK(dups == 0);
    return check_report("leaseid");
}
