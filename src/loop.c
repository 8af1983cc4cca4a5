/*
 * loop — the event loop thread; see include/leasegate/loop.h.
 *
 * Only this file calls MHD_run and locktab_tick. Each turn:
 *   sleep in epoll_wait for min(next lock-table deadline, MHD's timeout);
 *   collect a finished commit (releasing held responses), signals, hang-ups;
 *   fire due deadlines; run MHD; hand the pending batch to the writer.
 */
#include "leasegate/loop.h"

#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "leasegate/http.h"
#include "leasegate/park.h"
#include "leasegate/proxy.h"
#include "leasegate/server.h"

#define MAX_EVENTS 256
#define SHUTDOWN_DRAIN_MS 3000
/* After a wave of at least this many parked connections has mostly gone, the
 * freed memory is handed back to the OS (glibc keeps it in the heap). */
#define TRIM_WAVE 1000
#define TRIM_WAVE_LOCKS 10000

struct Loop {
    Server *s;
    int epfd;
    int sigfd;
    size_t suspended_peak; /* since the last trim */
    size_t locks_peak;     /* lock names known, since the last trim */
    LoopSource mhd_src, commit_src, signal_src;
};

static bool add_fd(Loop *l, int fd, uint32_t events, LoopSource *src)
{
    struct epoll_event ev = {.events = events, .data.ptr = src};
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

Loop *loop_new(Server *s)
{
    Loop *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->s = s;
    l->mhd_src.kind = LOOP_MHD;
    l->commit_src.kind = LOOP_COMMIT;
    l->signal_src.kind = LOOP_SIGNAL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    l->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (l->epfd < 0 || l->sigfd < 0 || !info || !add_fd(l, info->epoll_fd, EPOLLIN, &l->mhd_src) ||
        !add_fd(l, commit_fd(s->commit), EPOLLIN, &l->commit_src) ||
        !add_fd(l, l->sigfd, EPOLLIN, &l->signal_src)) {
        fprintf(stderr, "leasegate: event loop setup: %s\n", strerror(errno));
        loop_free(l);
        return NULL;
    }
    return l;
}

void loop_free(Loop *l)
{
    if (!l)
        return;
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->sigfd >= 0)
        close(l->sigfd);
    free(l);
}

bool loop_watch(Loop *l, int fd, LoopSource *src) { return add_fd(l, fd, EPOLLRDHUP, src); }

bool loop_watch_events(Loop *l, int fd, uint32_t events, LoopSource *src) { return add_fd(l, fd, events, src); }

bool loop_rewatch(Loop *l, int fd, uint32_t events, LoopSource *src)
{
    struct epoll_event ev = {.events = events, .data.ptr = src};
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void loop_unwatch(Loop *l, int fd) { epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL); }

static int next_timeout_ms(Loop *l, int cap_ms)
{
    Now now = clock_now();
    int64_t t = locktab_next_timeout_ms(l->s->locks, &now);
    int64_t fence_ms = fence_next_timeout_ms(l->s->fence, &now);
    if (fence_ms >= 0 && (t < 0 || fence_ms < t))
        t = fence_ms;
    int64_t curl_ms = proxy_next_timeout_ms(l->s->proxy, &now);
    if (curl_ms >= 0 && (t < 0 || curl_ms < t))
        t = curl_ms;
    int64_t park_ms = park_next_timeout_ms(l->s, &now);
    if (park_ms >= 0 && (t < 0 || park_ms < t))
        t = park_ms;
    MHD_UNSIGNED_LONG_LONG mhd_ms;
    if (MHD_get_timeout(l->s->daemon, &mhd_ms) == MHD_YES && (t < 0 || (int64_t)mhd_ms < t))
        t = (int64_t)mhd_ms;
    if (cap_ms >= 0 && (t < 0 || t > cap_ms))
        t = cap_ms;
    return t > 1000000 ? 1000000 : (int)t;
}

/* A wave of long-polls, or of lock names, leaves its memory resident in the
 * heap (freed, but not returned): give it back once the wave has mostly gone. */
static bool wave_gone(size_t now, size_t *peak, size_t wave)
{
    if (now > *peak)
        *peak = now;
    if (*peak < wave || now >= *peak / 4)
        return false;
    *peak = now;
    return true;
}

static void trim_after_wave(Loop *l)
{
    bool conns = wave_gone(l->s->suspended.len + l->s->parked.len, &l->suspended_peak, TRIM_WAVE);
    bool names = wave_gone(locktab_locks(l->s->locks), &l->locks_peak, TRIM_WAVE_LOCKS);
    if (conns || names)
        malloc_trim(0);
}

/* One turn of the loop. Returns -1 when storage failed (nothing more may be sent). */
static int turn(Loop *l, int cap_ms)
{
    Server *s = l->s;
    struct epoll_event events[MAX_EVENTS];
    int n = epoll_wait(l->epfd, events, MAX_EVENTS, next_timeout_ms(l, cap_ms));
    if (n < 0 && errno != EINTR) {
        fprintf(stderr, "leasegate: epoll_wait: %s\n", strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        LoopSource *src = events[i].data.ptr;
        switch (src->kind) {
        case LOOP_MHD:
            break; /* MHD_run below */
        case LOOP_COMMIT:
            if (commit_done(s->commit) < 0) {
                fprintf(stderr, "leasegate: storage failure, stopping without replying: %s\n",
                        commit_error(s->commit));
                s->storage_failed = true;
                return -1;
            }
            break;
        case LOOP_SIGNAL: {
            struct signalfd_siginfo si;
            while (read(l->sigfd, &si, sizeof si) == (ssize_t)sizeof si)
                s->stopping = true;
            break;
        }
        case LOOP_REQUEST:
            http_socket_event((Request *)src, events[i].events);
            break;
        case LOOP_CURL:
            proxy_socket_event(s->proxy, src, events[i].events);
            break;
        }
    }
    Now now = clock_now();
    locktab_tick(s->locks, &now);
    fence_tick(s->fence, &now);
    proxy_tick(s->proxy, &now);
    park_tick(s, &now);
    /* Parked answers made ready by commits and deadlines go out before MHD
     * runs (their connections rejoin it), those made ready inside it after. */
    park_flush(s);
    MHD_run(s->daemon);
    park_flush(s);
    commit_flush(s->commit);
    http_flush_log(s);
    trim_after_wave(l);
    return 0;
}

int loop_run(Loop *l)
{
    Server *s = l->s;
    while (!s->stopping)
        if (turn(l, -1) < 0)
            return 1;
    /* Ordered shutdown: answer the waiters, let held replies go out once their
     * batch is durable, and resume every suspended connection before MHD stops. */
    http_cancel_waiters(s);
    Now start = clock_now();
    bool aborted = false;
    for (;;) {
        if (turn(l, 10) < 0)
            return 1;
        Now now = clock_now();
        bool drained = s->suspended.len == 0 && s->parked.len == 0 && !commit_pending(s->commit);
        if (drained)
            break;
        if (now.mono_ms - start.mono_ms > SHUTDOWN_DRAIN_MS && !aborted) {
            /* Upstream calls still running: cut them so their clients can be closed. */
            proxy_abort_all(s->proxy);
            aborted = true;
        } else if (now.mono_ms - start.mono_ms > 2 * SHUTDOWN_DRAIN_MS) {
            break;
        }
    }
    /* MHD may not stop with connections suspended: drop whatever is left. */
    proxy_abort_all(s->proxy);
    http_close_suspended(s);
    /* A few more turns so that queued responses reach the sockets. */
    for (int i = 0; i < 5; i++)
        if (turn(l, 10) < 0)
            return 1;
    http_close_suspended(s);
    if (commit_sync(s->commit) < 0) {
        fprintf(stderr, "leasegate: storage failure at shutdown: %s\n", commit_error(s->commit));
        return 1;
    }
    return 0;
}
