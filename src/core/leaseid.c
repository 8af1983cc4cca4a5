/* leaseid — version 4 UUIDs from a buffer of CSPRNG bytes; see leaseid.h. */
#include "core/leaseid.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

static bool refill(LeaseIds *ids)
{
    size_t got = 0;
    while (got < sizeof ids->buf) {
        ssize_t n = getrandom(ids->buf + got, sizeof ids->buf - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        got += (size_t)n;
    }
    ids->avail = sizeof ids->buf;
    return true;
}

bool leaseid_next(LeaseIds *ids, uint8_t out[16])
{
    if (ids->avail < 16 && !refill(ids))
        return false;
    uint8_t *p = ids->buf + sizeof ids->buf - ids->avail;
    memcpy(out, p, 16);
    memset(p, 0, 16); /* nothing of a given id stays in the buffer */
    ids->avail -= 16;
    out[6] = (uint8_t)((out[6] & 0x0f) | 0x40); /* version 4 */
    out[8] = (uint8_t)((out[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    return true;
}
