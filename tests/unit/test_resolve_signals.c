/* Unit test of resolve: no thread it starts runs with a stop signal
 * unblocked. The gateway blocks SIGINT, SIGTERM and SIGHUP in every thread
 * and reads them from its event loop's signalfd, their action left at the
 * default (the process ends): one such signal delivered to a thread that
 * does not block it ends the gateway, SIGHUP (reload) included. Found by
 * review: glibc's getaddrinfo_a ran its notification on a thread whose mask
 * glibc empties (gai_start_notify_thread), and a process that looked names
 * up through resolve_tcp while SIGHUPs came died of one.
 *
 * The threads' masks are read where they all pass: this program's free()
 * (glibc's and resolve's own frees go through it). */
#include <dlfcn.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "procthreads.h"
#include "store/resolve.h"

/* free runs before AddressSanitizer has its shadow memory: not instrumented. */
#define NOT_SANITIZED __attribute__((no_sanitize_address, no_sanitize_undefined))

static void (*real_free)(void *);
static _Atomic int resolving;
static _Atomic int armed;
static _Thread_local bool is_main;
static _Atomic int frees_elsewhere; /* frees on other threads while armed */
static _Atomic int frees_exposed;   /* of those, on a thread with a stop signal unblocked */

NOT_SANITIZED void free(void *p)
{
    if (!real_free) {
        if (atomic_exchange(&resolving, 1))
            return; /* dlsym's own, while it finds free: kept */
        real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
        atomic_store(&resolving, 0);
    }
    if (atomic_load(&armed) && !is_main) {
        sigset_t now;
        pthread_sigmask(SIG_BLOCK, NULL, &now);
        atomic_fetch_add(&frees_elsewhere, 1);
        if (!sigismember(&now, SIGINT) || !sigismember(&now, SIGTERM) || !sigismember(&now, SIGHUP))
            atomic_fetch_add(&frees_exposed, 1);
    }
    real_free(p);
}

int main(void)
{
    is_main = true;
    /* As the gateway's main.c. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    atomic_store(&armed, 1);

    char err[300];
    for (int i = 0; i < 5; i++) {
        struct addrinfo *res = NULL;
        ResolveResult r = resolve_tcp("localhost", "2379", -1, 100, NULL, NULL, NULL, &res, err, sizeof err);
        CHECK(r == RESOLVE_OK && res != NULL);
        if (r != RESOLVE_OK)
            fprintf(stderr, "resolve_tcp: %s\n", err);
        if (res)
            freeaddrinfo(res);
    }
    /* Every thread a lookup started has ended (at most 20 s). */
    for (int i = 0; i < 2000 && proc_threads() > 1; i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    CHECK(proc_threads() == 1);
    CHECK(atomic_load(&frees_elsewhere) > 0); /* the lookups' threads were seen */
    CHECK(atomic_load(&frees_exposed) == 0);
    if (atomic_load(&frees_exposed))
        fprintf(stderr, "%d of %d frees on the lookups' threads ran with a stop signal unblocked\n",
                atomic_load(&frees_exposed), atomic_load(&frees_elsewhere));
    return check_report("resolve_signals");
}
