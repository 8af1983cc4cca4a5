/*
 * runloop — the server's turn and its shutdown; see runloop.h.
 * Only this file calls MHD_run and the ticks of the lock table, fences, the
 * proxy and parked waiters.
 */
#include "runloop.h"

#include <assert.h>
#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "api/event_stream.h"
#include "api/events.h"
#include "api/watch.h"
#include "core/log.h"
#include "gateway.h"
#include "guard/guard.h"
#include "guard/proxy.h"
#include "leasegate/container.h"
#include "net/http.h"
#include "net/loop.h"
#include "net/dormant.h"
#include "net/park.h"

#define SHUTDOWN_DRAIN_MS 3000
/* A deposed gateway's 503s go out within this, then it exits (deposed_drain). */
#define DEPOSED_DRAIN_MS 1000
/* After a wave of at least this many parked connections has mostly gone, the
 * freed memory is handed back to the OS (glibc keeps it in the heap). */
#define TRIM_WAVE 1000
#define TRIM_WAVE_LOCKS 10000

typedef struct Run {
    Server *s;
    int sigfd;
    size_t suspended_peak; /* since the last trim */
    size_t locks_peak;     /* lock names known, since the last trim */
    int stop_signal;       /* what stopped the server (SIGTERM, SIGINT), or 0 */
    LoopSource mhd, commit, signal, deposed, reload;
} Run;

static int mhd_ready(LoopSource *src, uint32_t events)
{
    (void)src, (void)events;
    return 0; /* MHD_run, once per turn */
}

/* Over etcd: this gateway no longer leads, or cannot know that it does.
 * From here on every answer is 503 (http.h); what waits for a commit or a
 * barrier is answered 503 now, and no batch goes to the writer again. */
static void depose(Server *s)
{
    if (s->deposed)
        return;
    s->deposed = true;
    commit_fail_holds(s->commit);
}

/* The commit writer began or ended a stall (commit.h: etcd refuses writes
 * for an alarm). Begun: every waiter and every answer held for a batch not
 * yet durable gets 503 naming the alarm (a grant among them is released at
 * once: undelivered), and from now on changes are refused before they are
 * made, reads of what is committed are answered after a fenced read, and no
 * lease expires: an expiry could not be recorded, nor anything revealed that
 * depends on it (leases past their time end as soon as etcd takes writes
 * again). Ended: everything goes on; the reads held for a fenced read wait
 * for an ordinary barrier. */
static void note_stall(Server *s)
{
    char why[sizeof s->stall_why];
    bool stalled = commit_stalled(s->commit, why, sizeof why);
    if (stalled == s->stalled || s->deposed)
        return;
    s->stalled = stalled;
    atomic_store(&s->etcd_stats.alarm, stalled); /* leasegate_etcd_alarm */
    if (stalled) {
        memcpy(s->stall_why, why, sizeof why);
        s->stalled_since_ms = clock_now().mono_ms;
        log_line(LEVEL_WARN, "%s: answering 503 to every change (and to what waited for this batch) while etcd "
                             "refuses writes, reads of what is committed go on; trying again every second",
                 why);
        http_stall_waiters(s);
        commit_stall_fail_answers(s->commit);
        return;
    }
    log_line(LEVEL_INFO, "etcd takes writes again after %lld s; the batch it refused is committed",
             (long long)(clock_now().mono_ms - s->stalled_since_ms) / 1000);
    commit_stall_end(s->commit);
}

/* The batch in flight is durable (or failed): its holds run. -1 when
 * storage failed (nothing more may be sent). */
static int collect_commit(Server *s)
{
    if (s->deposed)
        return 0; /* its holds were answered 503 already */
    if (commit_done(s->commit) < 0) {
        if (s->election) {
            /* Another gateway may lead (a failed fence), or this one cannot
             * tell (etcd did not answer within the commit's budget): what was
             * held is answered 503, never from memory. */
            log_line(LEVEL_ERROR, "a commit failed (%s): this gateway cannot know that it still leads; "
                                  "answering 503 to every request held, then exiting with status 1 (restart this "
                                  "gateway: it becomes a candidate)",
                     commit_error(s->commit));
            depose(s);
            return 0;
        }
        log_line(LEVEL_ERROR, "storage failure, stopping without replying: %s", commit_error(s->commit));
        s->storage_failed = true;
        return -1; /* nothing more may be sent */
    }
    note_stall(s);
    /* The next batch (what came while this one committed, and what its
     * answers just recorded: hand-offs to waiters) goes to the writer now,
     * not at the end of the turn: the answers this turn sends, a few
     * milliseconds of work for hundreds of clients, then overlap its commit
     * instead of leaving the writer idle (on etcd, at 256 clients, 30 % of
     * the time). Nothing is revealed earlier: every answer still waits for
     * its own batch. */
    commit_flush(s->commit);
    return 0;
}

static int commit_ready(LoopSource *src, uint32_t events)
{
    (void)events;
    return collect_commit(CONTAINER_OF(src, Run, commit)->s);
}

static int64_t elapsed_ns(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)(t.tv_sec - t0->tv_sec) * 1000000000 + (t.tv_nsec - t0->tv_nsec);
}

/* Instead of sleeping until the writer's eventfd, polls for the end of a
 * short commit (commit.h: commit_poll_begin) and for the loop's sources,
 * yielding the CPU between polls. 1 when something was done (the commit
 * collected, or sources called), 0 when nothing was (sleep as usual), -1
 * when storage failed or a source stopped the loop. */
static int poll_commit(Run *r, int timeout_ms)
{
    Server *s = r->s;
    if (timeout_ms == 0 || s->deposed || !commit_poll_begin(s->commit))
        return 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int called = 0;
    int64_t window = commit_poll_window_ns(s->commit);
    while (!commit_poll_done(s->commit) && elapsed_ns(&t0) < window) {
        called = loop_wait(s->loop, 0);
        if (called != 0)
            break;
        sched_yield();
    }
    bool done = commit_poll_end(s->commit);
    if (called < 0)
        return -1;
    if (done && collect_commit(s) < 0)
        return -1;
    return called > 0 || done;
}

/* The election's thread says leadership is lost (gateway.c wrote why). */
static int deposed_ready(LoopSource *src, uint32_t events)
{
    (void)events;
    Run *r = CONTAINER_OF(src, Run, deposed);
    uint64_t n;
    while (read(r->s->deposed_fd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    depose(r->s);
    return 0;
}

/* The election's thread says another gateway reloaded its keys. */
static int reload_ready(LoopSource *src, uint32_t events)
{
    (void)events;
    Run *r = CONTAINER_OF(src, Run, reload);
    uint64_t n;
    while (read(r->s->reload_fd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    gateway_reload_keys(r->s, false);
    return 0;
}

static int signal_ready(LoopSource *src, uint32_t events)
{
    (void)events;
    Run *r = CONTAINER_OF(src, Run, signal);
    struct signalfd_siginfo si;
    while (read(r->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            gateway_reload_keys(r->s, true);
        } else {
            if (!r->stop_signal)
                r->stop_signal = (int)si.ssi_signo;
            gateway_stop_asked(r->s);
        }
    }
    return 0;
}

static int64_t earliest(int64_t a, int64_t b) { return b >= 0 && (a < 0 || b < a) ? b : a; }

static int next_timeout_ms(Server *s, int cap_ms)
{
    Now now = clock_now();
    /* While stalled the lock table and fences do not tick (note_stall). */
    int64_t t = s->stalled ? -1 : locktab_next_timeout_ms(s->locks, &now);
    t = earliest(t, s->stalled ? -1 : fence_next_timeout_ms(s->fence, &now));
    t = earliest(t, proxy_next_timeout_ms(s->proxy, &now));
    t = earliest(t, guard_next_timeout_ms(s->guard, &now));
    t = earliest(t, park_next_timeout_ms(s, &now));
    t = earliest(t, dormant_next_timeout_ms(s));
    t = earliest(t, events_next_timeout_ms(s, &now));
    t = earliest(t, event_streams_next_timeout_ms(s, &now));
    t = earliest(t, watch_next_timeout_ms(s, &now));
    MHD_UNSIGNED_LONG_LONG mhd_ms;
    if (MHD_get_timeout(s->daemon, &mhd_ms) == MHD_YES)
        t = earliest(t, mhd_ms > INT64_MAX ? INT64_MAX : (int64_t)mhd_ms);
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

static void trim_after_wave(Run *r)
{
    bool conns = wave_gone(r->s->suspended.len + park_connections(r->s), &r->suspended_peak, TRIM_WAVE);
    bool names = wave_gone(locktab_locks(r->s->locks), &r->locks_peak, TRIM_WAVE_LOCKS);
    if (conns || names)
        malloc_trim(0);
}

/* One turn. Returns -1 when storage failed (nothing more may be sent). */
static int turn(Run *r, int cap_ms)
{
    Server *s = r->s;
    assert(thread_owns(&s->owner));
    int timeout_ms = next_timeout_ms(s, cap_ms);
    int polled = poll_commit(r, timeout_ms);
    if (polled < 0 || (polled == 0 && loop_wait(s->loop, timeout_ms) < 0))
        return -1;
    Now now = clock_now();
    if (!s->stalled) {
        locktab_tick(s->locks, &now);
        fence_tick(s->fence, &now);
    }
    proxy_tick(s->proxy, &now);
    guard_tick(s->guard, &now);
    park_tick(s, &now);
    events_tick(s, &now);
    event_streams_tick(s, &now);
    watch_tick(s, &now);
    /* Parked answers made ready by commits and deadlines go out before MHD
     * runs (their connections rejoin it), those made ready inside it after;
     * the loop's batch is over, so woken dormant waiters' records may go and
     * the doomed be ended (dormant.h), by the flush after each. */
    dormant_flush(s);
    park_flush(s);
    MHD_run(s->daemon);
    dormant_flush(s);
    park_flush(s);
    if (!s->deposed)
        commit_flush(s->commit);
    http_flush_log(s);
    trim_after_wave(r);
    return 0;
}

/* A deposed gateway's way out: every request it holds gets 503 (waiters,
 * event long-polls and watches; held answers were failed by depose), its
 * upstream calls are cut off (no write's end goes to a backend), and once
 * those answers are written, or DEPOSED_DRAIN_MS has passed, it exits 1
 * without the orderly shutdown: that would commit and resign, and nothing
 * may be committed or revealed any more. */
static int deposed_drain(Run *r)
{
    Server *s = r->s;
    http_cancel_waiters(s);
    events_drain(s);
    watch_drain(s);
    proxy_abort_all(s->proxy);
    Now start = clock_now();
    for (;;) {
        if (turn(r, 10) < 0)
            break;
        if ((s->suspended.len == 0 && park_connections(s) == 0) || clock_now().mono_ms - start.mono_ms > DEPOSED_DRAIN_MS)
            break;
    }
    /* A few more turns so that the 503s queued last reach the sockets. */
    for (int i = 0; i < 3; i++)
        if (turn(r, 10) < 0)
            break;
    s->storage_failed = true; /* main: _exit(1), no orderly shutdown */
    return 1;
}

/* Ordered shutdown: answer the waiters, let held replies go out once their
 * batch is durable, and resume every suspended connection before MHD stops. */
static int drain(Run *r)
{
    Server *s = r->s;
    /* The batch etcd refuses would never be written: it fails, and the
     * gateway stops as a deposed one, answering 503 to what it holds. */
    if (s->stalled)
        commit_stall_give_up(s->commit);
    http_cancel_waiters(s);
    events_drain(s);
    watch_drain(s);
    Now start = clock_now();
    bool aborted = false;
    for (;;) {
        if (turn(r, 10) < 0)
            return 1;
        if (s->deposed)
            return deposed_drain(r);
        Now now = clock_now();
        bool drained = s->suspended.len == 0 && park_connections(s) == 0 && !commit_pending(s->commit);
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
        if (turn(r, 10) < 0)
            return 1;
    http_close_suspended(s);
    if (commit_sync(s->commit) < 0) {
        log_line(LEVEL_ERROR, "storage failure at shutdown: %s", commit_error(s->commit));
        return 1;
    }
    return 0;
}

int runloop_run(Server *s)
{
    char addr[300];
    http_address(s, addr, sizeof addr);
    /* Over etcd the candidate said so already, on the same socket. */
    printf(s->election ? "leasegate: leading; serving on %s://%s\n" : "leasegate: listening on %s://%s\n",
           tls_scheme(&s->tls), addr);
    fflush(stdout);
    Run r = {.s = s, .mhd = {mhd_ready}, .commit = {commit_ready}, .signal = {signal_ready},
             .deposed = {deposed_ready}, .reload = {reload_ready}};
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    r.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    int mhd_fd = info ? info->epoll_fd : -1;
    int status = 0;
    if (r.sigfd < 0 || mhd_fd < 0 || !loop_watch(s->loop, mhd_fd, EPOLLIN, &r.mhd) ||
        !loop_watch(s->loop, commit_fd(s->commit), EPOLLIN, &r.commit) ||
        !loop_watch(s->loop, r.sigfd, EPOLLIN, &r.signal) ||
        (s->deposed_fd >= 0 && !loop_watch(s->loop, s->deposed_fd, EPOLLIN, &r.deposed)) ||
        (s->reload_fd >= 0 && !loop_watch(s->loop, s->reload_fd, EPOLLIN, &r.reload))) {
        log_line(LEVEL_ERROR, "event loop setup: %s", strerror(errno));
        status = 1;
    }
    while (!s->stopping && !s->deposed && status == 0) {
        /* Draining (--drain-seconds): serving as ever, not ready, until its end. */
        int64_t left = s->draining ? s->drain_until_ms - clock_now().mono_ms : -1;
        if (s->draining && left <= 0) {
            s->stopping = true;
            break;
        }
        if (turn(&r, left > INT32_MAX ? INT32_MAX : (int)left) < 0)
            status = 1;
    }
    if (status == 0)
        status = s->deposed ? deposed_drain(&r) : drain(&r);
    /* An orderly stop says so, once (supervisors and journals show why the
     * server went away, and that it went cleanly). */
    if (status == 0 && !s->deposed)
        log_line(LEVEL_INFO, "stopped on %s: every request held was answered or closed, every change is durable "
                             "(last token %llu)",
                 r.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)locktab_last_token(s->locks));
    /* Unwatching what was never watched fails harmlessly. */
    loop_unwatch(s->loop, mhd_fd);
    loop_unwatch(s->loop, commit_fd(s->commit));
    loop_unwatch(s->loop, r.sigfd);
    if (s->deposed_fd >= 0)
        loop_unwatch(s->loop, s->deposed_fd);
    if (s->reload_fd >= 0)
        loop_unwatch(s->loop, s->reload_fd);
    if (r.sigfd >= 0)
        close(r.sigfd);
    return status;
}
