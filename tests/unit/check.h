/* check — a minimal test harness: CHECK records failures and goes on; main returns their count. */
#ifndef LEASEGATE_TEST_CHECK_H
#define LEASEGATE_TEST_CHECK_H

#include <stdio.h>

static int check_failures;
static int check_passed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            check_passed++;                                                          \
        } else {                                                                     \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

static inline int check_report(const char *suite)
{
    printf("%s: %d passed, %d failed\n", suite, check_passed, check_failures);
    return check_failures ? 1 : 0;
}

#endif
