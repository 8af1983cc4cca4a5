/*
 * leaseid — new lease ids: random (RFC 4122 version 4) UUIDs.
 *
 * A lease id is the holder's secret, so its bytes come from the kernel's
 * CSPRNG (getrandom). They are drawn 4 KiB at a time, not one system call per
 * lease (libuuid's uuid_generate_random makes six per id); bytes are used
 * once and wiped as they are taken. Not thread-safe: one per loop thread.
 */
#ifndef LEASEGATE_LEASEID_H
#define LEASEGATE_LEASEID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LEASEID_BUFFER 4096

/* All zero (static or memset) is a valid empty buffer: nothing is given out
 * before the first read of the CSPRNG. */
typedef struct LeaseIds {
    uint8_t buf[LEASEID_BUFFER];
    size_t avail; /* the last `avail` bytes of buf are fresh */
} LeaseIds;

/* A fresh version 4 id in out; false only when the kernel gives no random bytes. */
bool leaseid_next(LeaseIds *ids, uint8_t out[16]);

#endif
