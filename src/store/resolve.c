/* resolve — a host name's TCP addresses, within a deadline; see resolve.h. */
#include "store/resolve.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One getaddrinfo_a request. Two references: the caller's, and glibc's
 * notification at the end of the request (lookup_done, on a thread of its
 * own); the last one dropped frees it. A request glibc cancelled before it
 * started sends no notification: the caller drops both. So when
 * getaddrinfo_a fails: EAI_AGAIN is a request queued all the same whose
 * notification glibc could not record (none comes: the caller holds both
 * references); any other failure queued nothing, and glibc notifies at once
 * (if it can start the notification's thread: the caller drops its own
 * only). A running request without a notification that the caller gives
 * up on is left to glibc, not freed under it. */
typedef struct Lookup {
    atomic_int refs;
    struct gaicb req;
    struct addrinfo hints;
    char host[256], port[32];
} Lookup;

static void lookup_release(Lookup *l, int refs)
{
    if (atomic_fetch_sub(&l->refs, refs) != refs)
        return;
    if (l->req.ar_result)
        freeaddrinfo(l->req.ar_result);
    free(l);
}

static void lookup_done(union sigval v) { lookup_release(v.sival_ptr, 1); }

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static ResolveResult failed(int gai, const char *host, char *err, size_t errlen)
{
    snprintf(err, errlen, "cannot resolve %s: %s", host, gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
    return gai == EAI_MEMORY ? RESOLVE_NOMEM : RESOLVE_FAILED;
}

ResolveResult resolve_tcp(const char *host, const char *port, int64_t deadline_ms, int poll_ms,
                          bool (*cancelled)(void *ud), void *ud, struct addrinfo **res, char *err, size_t errlen)
{
    *res = NULL;
    /* A numeric address asks no resolver: converted here, at once. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    int gai = getaddrinfo(host, port, &hints, res);
    if (gai != EAI_NONAME)
        return gai ? failed(gai, host, err, errlen) : RESOLVE_OK;
    if (strlen(host) >= sizeof ((Lookup *)0)->host || strlen(port) >= sizeof ((Lookup *)0)->port) {
        snprintf(err, errlen, "cannot resolve %s: the name is too long", host);
        return RESOLVE_FAILED;
    }
    Lookup *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return RESOLVE_NOMEM;
    }
    atomic_init(&l->refs, 2);
    snprintf(l->host, sizeof l->host, "%s", host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->hints = (struct addrinfo){.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    l->req = (struct gaicb){.ar_name = l->host, .ar_service = l->port, .ar_request = &l->hints};
    struct gaicb *list[1] = {&l->req};
    struct sigevent done = {.sigev_notify = SIGEV_THREAD, .sigev_notify_function = lookup_done};
    done.sigev_value.sival_ptr = l;
    gai = getaddrinfo_a(GAI_NOWAIT, list, 1, &done);
    bool notified = gai != EAI_AGAIN; /* see Lookup */
    if (gai && notified) {
        lookup_release(l, 1);
        return failed(gai, host, err, errlen);
    }
    int mine = notified ? 1 : 2; /* the references the caller drops once the request ended */
    ResolveResult why = RESOLVE_OK;
    while ((gai = gai_error(&l->req)) == EAI_INPROGRESS) {
        int64_t left = deadline_ms < 0 ? poll_ms : deadline_ms - mono_ms();
        if (left <= 0) {
            why = RESOLVE_TIMEOUT;
            break;
        }
        if (left > poll_ms)
            left = poll_ms;
        struct timespec wait = {left / 1000, (long)(left % 1000) * 1000000L};
        const struct gaicb *const waiting[1] = {&l->req};
        gai_suspend(waiting, 1, &wait); /* any return: gai_error says whether it ended */
        if (gai_error(&l->req) == EAI_INPROGRESS && cancelled && cancelled(ud)) {
            why = RESOLVE_CANCELLED;
            break;
        }
    }
    if (why != RESOLVE_OK) {
        snprintf(err, errlen, why == RESOLVE_TIMEOUT ? "no address for %s in time (the name lookup hangs)"
                                                     : "cancelled while looking %s up",
                 host);
        /* Still queued: glibc drops it, no notification comes. Running or
         * done: its notification frees it (without one, done: the caller). */
        int c = gai_cancel(&l->req);
        lookup_release(l, c == EAI_CANCELED || (c == EAI_ALLDONE && !notified) ? 2 : 1);
        return why;
    }
    if (gai) {
        ResolveResult r = failed(gai, host, err, errlen);
        lookup_release(l, mine);
        return r;
    }
    *res = l->req.ar_result;
    l->req.ar_result = NULL; /* the caller's now; the notification frees only the rest */
    lookup_release(l, mine);
    return RESOLVE_OK;
}
