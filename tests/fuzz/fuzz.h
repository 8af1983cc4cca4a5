/*
 * fuzz.h — what every fuzz target shares: the libFuzzer entry point's
 * prototype, a reader that turns the input into small numbers, and FUZZ_CHECK,
 * which reports a violated property (with where and why) and aborts, so that
 * libFuzzer keeps the input as a crash.
 */
#ifndef LEASEGATE_FUZZ_H
#define LEASEGATE_FUZZ_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__attribute__((noreturn, format(printf, 4, 5))) static inline void fuzz_fail(const char *file, int line,
                                                                             const char *cond, const char *fmt, ...)
{
    fprintf(stderr, "\n%s:%d: property violated: %s\n  ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* FUZZ_CHECK(cond, "format", args...): the format is required. */
#define FUZZ_CHECK(cond, ...)                                   \
    do {                                                        \
        if (!(cond))                                            \
            fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);  \
    } while (0)

/* The input, read as a stream of small numbers; zeros once it is used up. */
typedef struct FuzzIn {
    const uint8_t *p;
    size_t n, i;
} FuzzIn;

static inline uint8_t fuzz_u8(FuzzIn *in) { return in->i < in->n ? in->p[in->i++] : 0; }

static inline uint16_t fuzz_u16(FuzzIn *in)
{
    uint16_t hi = fuzz_u8(in);
    return (uint16_t)(hi << 8 | fuzz_u8(in));
}

static inline uint32_t fuzz_u32(FuzzIn *in)
{
    uint32_t hi = fuzz_u16(in);
    return hi << 16 | fuzz_u16(in);
}

static inline int fuzz_more(const FuzzIn *in) { return in->i < in->n; }

/* Trace output for reading a reproducer: set LEASEGATE_FUZZ_TRACE=1. */
static inline int fuzz_tracing(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("LEASEGATE_FUZZ_TRACE");
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on;
}

#endif
