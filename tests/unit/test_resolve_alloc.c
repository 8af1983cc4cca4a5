/* Unit test of resolve when glibc's getaddrinfo_a fails half-way (found by
 * review): it may have queued the lookup all the same (the record of its
 * notification could not be allocated: EAI_AGAIN, the lookup running on its
 * helper thread, no notification coming), or queued nothing and notified at
 * once (EAI_SYSTEM). Either way resolve_tcp freed the lookup that glibc's
 * threads went on using (the plain build crashed in glibc's helper thread,
 * the sanitized one reports the use after free). The two allocations are
 * failed here for real, in glibc 2.36, by this program's own malloc
 * (glibc's allocations go through it). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "store/resolve.h"

/* glibc 2.36's allocations to fail (x86-64): the first getaddrinfo_a's
 * table of request rows (realloc of 8 pointers), and the notification's
 * bookkeeping for a list of one request (struct async_waitlist). */
#define POOL_TABLE_SIZE 64
#define ASYNC_WAITLIST_SIZE 104

/* The allocator's functions run before AddressSanitizer has its shadow
 * memory: not instrumented. */
#define NOT_SANITIZED __attribute__((no_sanitize_address, no_sanitize_undefined))

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);

static _Alignas(16) char boot[16384];
static size_t boot_used;
static _Atomic int resolving;

static _Thread_local bool is_main;
static _Atomic size_t fail_size; /* 0: none; else the main thread's next allocation of this size fails */
static _Atomic int failed;       /* allocations failed so far */

NOT_SANITIZED static void *boot_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (boot_used + n > sizeof boot)
        return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
}

NOT_SANITIZED static bool in_boot(const void *p)
{
    return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

NOT_SANITIZED static void resolve_real(void)
{
    atomic_store(&resolving, 1);
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    atomic_store(&resolving, 0);
}

/* True when this allocation is the one to fail. */
NOT_SANITIZED static bool fail_now(size_t n)
{
    if (!is_main)
        return false;
    size_t want = atomic_load(&fail_size);
    if (want && n == want && atomic_compare_exchange_strong(&fail_size, &want, 0)) {
        atomic_fetch_add(&failed, 1);
        errno = ENOMEM;
        return true;
    }
    return false;
}

NOT_SANITIZED void *malloc(size_t n)
{
    if (!real_malloc) {
        if (atomic_load(&resolving))
            return boot_alloc(n);
        resolve_real();
    }
    return fail_now(n) ? NULL : real_malloc(n);
}

NOT_SANITIZED void *calloc(size_t n, size_t size)
{
    if (!real_calloc) {
        if (atomic_load(&resolving))
            return size && n > SIZE_MAX / size ? NULL : boot_alloc(n * size); /* boot is zeroed */
        resolve_real();
    }
    return fail_now(n * size) ? NULL : real_calloc(n, size);
}

NOT_SANITIZED void *realloc(void *p, size_t n)
{
    if (!real_realloc)
        resolve_real();
    if (in_boot(p)) {
        void *q = real_malloc(n);
        if (q)
            memcpy(q, p, n < (size_t)(boot + sizeof boot - (char *)p) ? n : (size_t)(boot + sizeof boot - (char *)p));
        return q;
    }
    return n && fail_now(n) ? NULL : real_realloc(p, n);
}

NOT_SANITIZED void free(void *p)
{
    if (!p || in_boot(p))
        return;
    if (!real_free)
        resolve_real();
    real_free(p);
}

/* LeakSanitizer tells the dynamic loader's allocations (a thread's TLS
 * vector, kept for the next thread) by their caller: here this calloc. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:allocate_dtv\n"; }

/* The threads of this process. */
static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* Waits (at most 20 s) until only this thread is left: glibc's helper and
 * notification threads have done all they do (a helper idles 1 s first). */
static bool wait_alone(void)
{
    for (int i = 0; i < 2000 && threads() > 1; i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    return threads() == 1;
}

int main(void)
{
    is_main = true;
    char err[300];
    struct addrinfo *res = NULL;

    /* The first getaddrinfo_a queues nothing (no row for its request):
     * glibc notifies at once, on a thread of the notification's own. */
    atomic_store(&fail_size, POOL_TABLE_SIZE);
    ResolveResult r = resolve_tcp("localhost", "2379", -1, 100, NULL, NULL, &res, err, sizeof err);
    if (atomic_load(&failed) != 1) {
        printf("SKIPPED: glibc's getaddrinfo_a made no allocation of %d bytes (not glibc 2.36 on x86-64?)\n",
               POOL_TABLE_SIZE);
        return 77;
    }
    CHECK(r != RESOLVE_OK && res == NULL);
    CHECK(wait_alone());

    /* The record of the notification fails after the lookup was queued:
     * it runs on, with no notification, and its answer is the caller's. */
    atomic_store(&fail_size, ASYNC_WAITLIST_SIZE);
    r = resolve_tcp("localhost", "2379", -1, 100, NULL, NULL, &res, err, sizeof err);
    CHECK(atomic_load(&failed) == 2);
    CHECK(r == RESOLVE_OK && res != NULL);
    if (res)
        freeaddrinfo(res);
    CHECK(wait_alone());

    /* And a lookup goes through afterwards. */
    r = resolve_tcp("localhost", "2379", -1, 100, NULL, NULL, &res, err, sizeof err);
    CHECK(r == RESOLVE_OK && res != NULL);
    if (res)
        freeaddrinfo(res);
    return check_report("resolve_alloc");
}
