/* resolve — a host name's TCP addresses, within a deadline; see resolve.h. */
#include "store/resolve.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One lookup, made by a thread of its own. Two references: the caller's
 * and the thread's; the last one dropped frees it (the caller gives up at
 * its deadline, the thread ends when the resolver answers). Not glibc's
 * getaddrinfo_a: its notification runs on a thread whose signal mask glibc
 * empties (gai_start_notify_thread), so a SIGHUP or SIGTERM, blocked in
 * every thread of the gateway and read from the loop's signalfd, could land
 * there and end the process (review; unit_resolve_signals). */
struct ResolvePending {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t ended; /* done became true */
    bool done;
    int gai, sys_errno;      /* getaddrinfo's result, and errno after it (EAI_SYSTEM) */
    struct addrinfo *result; /* owned, until handed to the caller */
    char host[256], port[32];
};
typedef struct ResolvePending Lookup;

static void lookup_release(Lookup *l)
{
    if (atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    if (l->result)
        freeaddrinfo(l->result);
    pthread_cond_destroy(&l->ended);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static void *lookup_run(void *arg)
{
    Lookup *l = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found = NULL;
    int gai = getaddrinfo(l->host, l->port, &hints, &found);
    int sys_errno = errno;
    pthread_mutex_lock(&l->mu);
    l->gai = gai;
    l->sys_errno = sys_errno;
    l->result = found;
    l->done = true;
    pthread_cond_signal(&l->ended);
    pthread_mutex_unlock(&l->mu);
    lookup_release(l);
    return NULL;
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static ResolveResult failed(int gai, int sys_errno, const char *host, char *err, size_t errlen)
{
    snprintf(err, errlen, "cannot resolve %s: %s", host, gai == EAI_SYSTEM ? strerror(sys_errno) : gai_strerror(gai));
    return gai == EAI_MEMORY ? RESOLVE_NOMEM : RESOLVE_FAILED;
}

/* A new Lookup of host:port, its thread started (with every signal
 * blocked: signals are the event loop's): NULL with err when out of memory
 * or threads. */
static Lookup *lookup_start(const char *host, const char *port, ResolveResult *why, char *err, size_t errlen)
{
    *why = RESOLVE_NOMEM;
    Lookup *l = calloc(1, sizeof *l);
    pthread_condattr_t monotonic;
    bool attr = l && pthread_condattr_init(&monotonic) == 0;
    bool made = attr && pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC) == 0 &&
                pthread_cond_init(&l->ended, &monotonic) == 0;
    if (attr)
        pthread_condattr_destroy(&monotonic);
    if (made && pthread_mutex_init(&l->mu, NULL) != 0) {
        pthread_cond_destroy(&l->ended);
        made = false;
    }
    if (!made) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    atomic_init(&l->refs, 2);
    snprintf(l->host, sizeof l->host, "%s", host);
    snprintf(l->port, sizeof l->port, "%s", port);
    pthread_attr_t detached;
    sigset_t all, before;
    sigfillset(&all);
    int rc = pthread_attr_init(&detached);
    if (rc == 0) {
        pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
        pthread_sigmask(SIG_SETMASK, &all, &before); /* the new thread's mask: set before it starts */
        pthread_t thread;
        rc = pthread_create(&thread, &detached, lookup_run, l);
        pthread_sigmask(SIG_SETMASK, &before, NULL);
        pthread_attr_destroy(&detached);
    }
    if (rc) {
        atomic_store(&l->refs, 1);
        lookup_release(l);
        snprintf(err, errlen, "cannot resolve %s: no thread for the lookup: %s", host, strerror(rc));
        *why = rc == ENOMEM ? RESOLVE_NOMEM : RESOLVE_FAILED;
        return NULL;
    }
    return l;
}

void resolve_pending_free(ResolvePending *p)
{
    if (p)
        lookup_release(p);
}

ResolveResult resolve_tcp(const char *host, const char *port, int64_t deadline_ms, int poll_ms,
                          bool (*cancelled)(void *ud), void *ud, ResolvePending **pending, struct addrinfo **res,
                          char *err, size_t errlen)
{
    *res = NULL;
    /* A numeric address asks no resolver: converted here, at once. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    int gai = getaddrinfo(host, port, &hints, res);
    if (gai != EAI_NONAME)
        return gai ? failed(gai, errno, host, err, errlen) : RESOLVE_OK;
    if (strlen(host) >= sizeof ((Lookup *)0)->host || strlen(port) >= sizeof ((Lookup *)0)->port) {
        snprintf(err, errlen, "cannot resolve %s: the name is too long", host);
        return RESOLVE_FAILED;
    }
    ResolveResult why;
    Lookup *l = pending ? *pending : NULL;
    if (pending)
        *pending = NULL;
    if (l && (strcmp(l->host, host) != 0 || strcmp(l->port, port) != 0)) {
        lookup_release(l);
        l = NULL;
    }
    if (!l && !(l = lookup_start(host, port, &why, err, errlen)))
        return why;
    why = RESOLVE_OK;
    pthread_mutex_lock(&l->mu);
    while (!l->done) {
        int64_t left = deadline_ms < 0 ? poll_ms : deadline_ms - mono_ms();
        if (left <= 0) {
            why = RESOLVE_TIMEOUT;
            break;
        }
        if (left > poll_ms)
            left = poll_ms;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += left / 1000;
        until.tv_nsec += (long)(left % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&l->ended, &l->mu, &until); /* any return: done says whether it ended */
        if (!l->done && cancelled && cancelled(ud)) {
            why = RESOLVE_CANCELLED;
            break;
        }
    }
    if (why == RESOLVE_OK && l->gai == 0) {
        *res = l->result;
        l->result = NULL; /* the caller's now */
    } else if (why == RESOLVE_OK) {
        why = failed(l->gai, l->sys_errno, host, err, errlen);
    } else {
        snprintf(err, errlen, why == RESOLVE_TIMEOUT ? "no address for %s in time (the name lookup hangs)"
                                                     : "cancelled while looking %s up",
                 host);
    }
    pthread_mutex_unlock(&l->mu);
    if (why != RESOLVE_OK && why != RESOLVE_FAILED && why != RESOLVE_NOMEM && pending)
        *pending = l; /* given up, still running: the caller's next try waits for it */
    else
        lookup_release(l); /* given up without a slot: the thread frees it when the resolver answers */
    return why;
}
