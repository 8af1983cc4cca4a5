/*
 * watchdog — owns the command's process group for `leasegate run` (see
 * watchdog.h for the protocol and the rules).
 *
 * Invariant: once stopping starts, SIGKILL goes to the group no later than
 * stop_by - grace/2, so the group is gone before the lease's lower bound; a
 * deadline, a timeout, run's request and run's death only ever bring that
 * moment closer.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/watchdog.h"

#define GONE_POLL_MS 20 /* how often to look whether a killed group is gone */

typedef struct Watch {
    int sock;   /* to run; -1 once run is gone */
    WatchShared *shared;
    int sigfd;  /* SIGCHLD */
    pid_t pgid; /* the command's pid and process group */
    int64_t stop_by, grace, timeout_at;
    bool cmd_exited;
    int cmd_status;
    bool stopping, killed;
    int64_t kill_at;
    WatchEnd end;
} Watch;

int64_t watchdog_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool watchdog_group_running(pid_t pgid)
{
    /* kill(-pgid, 0) counts zombies, and a zombie whose parent never reaps it
     * (a parent that left the group) would keep the group "alive" for ever:
     * look for a member that can still run instead. */
    DIR *d = opendir("/proc");
    if (!d)
        return kill(-pgid, 0) == 0 || errno != ESRCH;
    bool running = false;
    struct dirent *e;
    while (!running && (e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[16 + sizeof e->d_name], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue; /* gone meanwhile */
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* pid (comm) state ppid pgrp ...: comm may hold anything, so parse after the last ')' */
        const char *rest = strrchr(buf, ')');
        char state;
        int ppid, pgrp;
        if (rest && sscanf(rest + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid && state != 'Z' &&
            state != 'X')
            running = true;
    }
    closedir(d);
    return running;
}

static void send_msg(int sock, WatchKind kind, int32_t arg, int64_t value)
{
    WatchMsg m = {(int32_t)kind, arg, value};
    if (sock >= 0)
        (void)!send(sock, &m, sizeof m, MSG_NOSIGNAL);
}

/* Starts stopping the group (once) and brings the SIGKILL to kill_at or sooner. */
static void stop_group(Watch *w, int64_t now, int64_t kill_at, WatchEnd end)
{
    if (!w->stopping) {
        w->stopping = true;
        w->end = end;
        kill(-w->pgid, SIGTERM);
        kill(-w->pgid, SIGCONT); /* a stopped process handles SIGTERM only once continued */
        w->kill_at = kill_at;
    }
    if (kill_at > w->stop_by - w->grace / 2)
        kill_at = w->stop_by - w->grace / 2;
    if (kill_at < w->kill_at)
        w->kill_at = kill_at;
    if (w->kill_at < now)
        w->kill_at = now;
}

static void reap(Watch *w)
{
    int status;
    pid_t pid;
    /* A subreaper: the command's orphans are reaped here too, so that a
     * zombie never keeps the group "alive". */
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == w->pgid) {
            w->cmd_exited = true;
            w->cmd_status = status;
        }
    }
}

static void on_message(Watch *w, const WatchMsg *m, int64_t now)
{
    switch ((WatchKind)m->kind) {
    case WATCH_SIGNAL:
        if (!w->killed)
            kill(-w->pgid, m->arg);
        break;
    case WATCH_STOP:
        stop_group(w, now, now + w->grace / 2, WATCH_END_LOST);
        break;
    case WATCH_STARTED:
    case WATCH_DONE:
        break;
    }
}

static void read_run(Watch *w, int64_t now)
{
    for (;;) {
        WatchMsg m;
        ssize_t n = recv(w->sock, &m, sizeof m, MSG_DONTWAIT);
        if (n == (ssize_t)sizeof m) {
            on_message(w, &m, now);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        /* End of file (or a broken channel): run is gone, and with it every
         * renewal. The group goes now, gently if there is time. */
        close(w->sock);
        w->sock = -1;
        stop_group(w, now, now + w->grace, WATCH_END_LEASE);
        return;
    }
}

static int64_t next_wake(const Watch *w, int64_t now)
{
    if (w->killed)
        return now + GONE_POLL_MS;
    if (w->stopping)
        return w->kill_at;
    if (w->cmd_exited) /* leftovers are still running */
        return now;
    int64_t wake = w->stop_by - w->grace;
    return w->timeout_at < wake ? w->timeout_at : wake;
}

static void watch(Watch *w)
{
    for (;;) {
        int64_t now = watchdog_clock_ms();
        /* What came while this process was stopped first: a raised bound, a
         * stop. Once stopping has begun, no bound moves the SIGKILL later. */
        if (w->sock >= 0)
            read_run(w, now);
        int64_t bound = atomic_load(&w->shared->stop_by_ms);
        if (!w->stopping && bound > w->stop_by)
            w->stop_by = bound;
        if (w->cmd_exited && !watchdog_group_running(w->pgid)) {
            send_msg(w->sock, WATCH_DONE, (int32_t)w->end, w->cmd_status);
            return;
        }
        if (!w->stopping && w->cmd_exited)
            stop_group(w, now, now + w->grace, WATCH_END_EXITED);
        if (!w->stopping && now >= w->stop_by - w->grace)
            stop_group(w, now, w->stop_by - w->grace / 2, WATCH_END_LEASE);
        if (!w->stopping && now >= w->timeout_at)
            stop_group(w, now, now + w->grace, WATCH_END_TIMEOUT);
        if (w->stopping && !w->killed && now >= w->kill_at) {
            kill(-w->pgid, SIGKILL);
            w->killed = true;
        }
        int64_t wake = next_wake(w, now);
        struct pollfd p[2] = {{w->sigfd, POLLIN, 0}, {w->sock, POLLIN, 0}};
        int n = poll(p, w->sock >= 0 ? 2 : 1, wake > now ? (int)(wake - now) : 0);
        now = watchdog_clock_ms();
        if (n > 0 && p[0].revents) {
            struct signalfd_siginfo si;
            while (read(w->sigfd, &si, sizeof si) == (ssize_t)sizeof si)
                ;
        }
        if (n > 0 && w->sock >= 0 && p[1].revents)
            read_run(w, now);
        reap(w);
    }
}

/* In the command's process, after fork: never returns. */
static void exec_command(const WatchdogArgs *a, pid_t watchdog)
{
    setpgid(0, 0);
    /* If the watchdog dies, nothing may go on holding what it held. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != watchdog)
        _exit(127);
    /* Dispositions are the caller's (neither run nor the watchdog changes
     * them): what it ignored (nohup) stays ignored, as exec keeps it. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, a->cmd_mask ? a->cmd_mask : &none, NULL);
    execvp(a->cmd[0], a->cmd);
    fprintf(stderr, "leasegate run: cannot run %s: %s\n", a->cmd[0], strerror(errno));
    _exit(127);
}

/* In the watchdog's process, after fork: never returns. */
static void watchdog_main(const WatchdogArgs *a, int sock, WatchShared *shared)
{
    setpgid(0, 0); /* out of run's group: the terminal's signals are run's to pass on */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL); /* every signal but SIGKILL and SIGSTOP waits, unread */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    Watch w = {.sock = sock,
               .shared = shared,
               .sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC),
               .stop_by = a->stop_by_ms,
               .grace = a->grace_ms,
               .timeout_at = a->timeout_ms > 0 && a->timeout_ms < INT64_MAX / 2 ? watchdog_clock_ms() + a->timeout_ms
                                                                                 : INT64_MAX};
    pid_t self = getpid();
    pid_t pid = w.sigfd < 0 ? -1 : fork();
    if (pid == 0) {
        close(sock);
        exec_command(a, self);
    }
    if (pid < 0) {
        send_msg(sock, WATCH_STARTED, 0, -(int64_t)errno);
        _exit(1);
    }
    setpgid(pid, pid); /* also here: no window where a signal misses the group */
    w.pgid = pid;
    send_msg(sock, WATCH_STARTED, 0, pid);
    watch(&w);
    _exit(0);
}

pid_t watchdog_start(const WatchdogArgs *a, int *sock, pid_t *pgid, WatchShared **shared_out)
{
    int sv[2];
    WatchShared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        return -1;
    atomic_init(&shared->stop_by_ms, a->stop_by_ms);
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        munmap(shared, sizeof *shared);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        munmap(shared, sizeof *shared);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        watchdog_main(a, sv[1], shared);
    }
    close(sv[1]);
    /* The command may run as soon as it is forked: if the watchdog does not
     * say so in time (it was stopped), it is killed, and its death signal
     * takes the command with it, before the lease's bound. */
    WatchMsg m;
    ssize_t n = -1;
    struct pollfd p = {sv[0], POLLIN, 0};
    int64_t wait_until = a->stop_by_ms - a->grace_ms;
    for (;;) {
        int64_t left = wait_until - watchdog_clock_ms();
        int ready = poll(&p, 1, left > 0 ? (int)left : 0);
        if (ready > 0) {
            n = recv(sv[0], &m, sizeof m, MSG_DONTWAIT);
            break;
        }
        if (ready == 0 || errno != EINTR)
            break;
    }
    if (n != (ssize_t)sizeof m || m.kind != WATCH_STARTED || m.value <= 0) {
        close(sv[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        munmap(shared, sizeof *shared);
        errno = n == (ssize_t)sizeof m && m.value < 0 ? (int)-m.value : ECHILD;
        return -1;
    }
    *sock = sv[0];
    *pgid = (pid_t)m.value;
    *shared_out = shared;
    return pid;
}
