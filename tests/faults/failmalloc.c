/*
 * failmalloc — allocation failures for tests, as an LD_PRELOAD library.
 *
 * Counting starts when the process gets SIGUSR2 (so start-up is left alone);
 * the FAILMALLOC_NTH-th call to malloc, calloc or realloc after that returns
 * NULL with errno ENOMEM, once. With FAILMALLOC_REPORT=PATH the number of
 * calls counted is written to PATH at exit (to size a sweep).
 *
 * Calls go on to the next definition (libc's, or AddressSanitizer's when the
 * program is built with it: set ASAN_OPTIONS=verify_asan_link_order=0). The
 * few allocations dlsym makes before that is known come from a static buffer.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);

static _Alignas(16) char boot[16384];
static size_t boot_used;
static _Atomic int resolving;

static _Atomic int armed;
static _Atomic unsigned long counted;
static unsigned long nth;

static void *boot_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (boot_used + n > sizeof boot)
        return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
}

static int in_boot(const void *p) { return (const char *)p >= boot && (const char *)p < boot + sizeof boot; }

static void resolve(void)
{
    atomic_store(&resolving, 1);
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    atomic_store(&resolving, 0);
}

/* True when this call is the one to fail. */
static int fail_now(void)
{
    if (!atomic_load(&armed))
        return 0;
    unsigned long n = atomic_fetch_add(&counted, 1) + 1;
    if (nth && n == nth) {
        errno = ENOMEM;
        return 1;
    }
    return 0;
}

void *malloc(size_t n)
{
    if (!real_malloc) {
        if (atomic_load(&resolving))
            return boot_alloc(n);
        resolve();
    }
    return fail_now() ? NULL : real_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    if (!real_calloc) {
        if (atomic_load(&resolving))
            return size && n > SIZE_MAX / size ? NULL : boot_alloc(n * size); /* boot is zeroed */
        resolve();
    }
    return fail_now() ? NULL : real_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    if (!real_realloc)
        resolve();
    if (in_boot(p)) {
        void *q = real_malloc(n);
        if (q)
            memcpy(q, p, n < (size_t)(boot + sizeof boot - (char *)p) ? n : (size_t)(boot + sizeof boot - (char *)p));
        return q;
    }
    return n && fail_now() ? NULL : real_realloc(p, n);
}

void free(void *p)
{
    if (!p || in_boot(p))
        return;
    if (!real_free)
        resolve();
    real_free(p);
}

static void on_arm(int sig)
{
    (void)sig;
    atomic_store(&armed, 1);
}

__attribute__((constructor)) static void start(void)
{
    const char *n = getenv("FAILMALLOC_NTH");
    nth = n ? strtoul(n, NULL, 10) : 0;
    signal(SIGUSR2, on_arm);
}

__attribute__((destructor)) static void finish(void)
{
    const char *path = getenv("FAILMALLOC_REPORT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%lu\n", atomic_load(&counted));
        fclose(f);
    }
}
