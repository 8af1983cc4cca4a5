/*
 * headbytes — the first bytes of an answer, kept in a fixed buffer.
 *
 * Probes of another gateway (its /readyz or /healthz) read only a short
 * status body; a peer that sends more cannot make the caller allocate: the
 * rest is counted as consumed and dropped. The buffer is always a C string.
 */
#ifndef LEASEGATE_HEADBYTES_H
#define LEASEGATE_HEADBYTES_H

#include <stddef.h>

typedef struct HeadBytes {
    char text[512];
    size_t len;
} HeadBytes;

/* A write callback in libcurl's shape (ud is a HeadBytes, zeroed before the
 * first call): keeps what fits, returns size * nmemb so the transfer goes on. */
size_t headbytes_keep(char *ptr, size_t size, size_t nmemb, void *ud);

#endif
