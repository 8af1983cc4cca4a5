/*
 * watchdog — the process between `leasegate run` and its command. It owns the
 * command's process group and stops it (SIGTERM and SIGCONT, then SIGKILL) by
 * its own clock: before the lease's deadline, when --timeout passes, when run
 * asks, and when run dies. So run may be SIGKILLed or SIGSTOPped: nothing of the
 * command runs past the lease all the same.
 *
 * The lease's bound (a lower bound of its expiry, CLOCK_BOOTTIME ms) is one
 * shared word that run raises after each renewal: the watchdog reads it
 * whenever it wakes, so no renewal ever waits for the watchdog, and a stopped
 * watchdog cannot make run wait either. Everything else goes over a
 * SOCK_SEQPACKET pair, one WatchMsg per packet. run -> watchdog: WATCH_SIGNAL
 * (arg: a signal for the group), WATCH_STOP (the lease is gone: stop now).
 * watchdog -> run: WATCH_STARTED first (value: the command's pid, which is
 * its process group, or -errno when it could not be forked), WATCH_DONE once the whole group is gone (arg: a WatchEnd,
 * value: the command's wait status). End of file from run (it died) stops the
 * group at once.
 *
 * The watchdog is in a process group of its own (signals for run's group, such
 * as the terminal's, do not reach it) and ignores every signal but SIGKILL and
 * SIGSTOP; if it dies anyway, the command gets SIGKILL (PR_SET_PDEATHSIG) and
 * run stops what is left of the group.
 */
#ifndef LEASEGATE_WATCHDOG_H
#define LEASEGATE_WATCHDOG_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum WatchKind { WATCH_SIGNAL, WATCH_STOP, WATCH_STARTED, WATCH_DONE } WatchKind;

/* Why the group ended. */
typedef enum WatchEnd {
    WATCH_END_EXITED,  /* the command exited (what it left behind was stopped) */
    WATCH_END_LEASE,   /* stopped: the lease's deadline came without a renewal */
    WATCH_END_LOST,    /* stopped: run said the lease is gone (WATCH_STOP) */
    WATCH_END_TIMEOUT, /* stopped: it ran past --timeout */
} WatchEnd;

typedef struct WatchMsg {
    int32_t kind; /* WatchKind */
    int32_t arg;
    int64_t value;
} WatchMsg;

/* The word run and the watchdog share (MAP_SHARED): the lease's bound. */
typedef struct WatchShared {
    _Atomic int64_t stop_by_ms;
} WatchShared;

typedef struct WatchdogArgs {
    char **cmd;               /* argv of the command, run with execvp */
    int64_t stop_by_ms;       /* lower bound of the lease's expiry, CLOCK_BOOTTIME ms */
    int64_t grace_ms;         /* SIGTERM at stop_by - grace, SIGKILL at stop_by - grace/2 */
    int64_t timeout_ms;       /* 0: none */
    const sigset_t *cmd_mask; /* the signal mask the command starts with */
} WatchdogArgs;

/* Whether a member of process group pgid can still run (zombies do not
 * count). */
bool watchdog_group_running(pid_t pgid);

/* CLOCK_BOOTTIME in ms: shared by run and the watchdog, counts while suspended. */
int64_t watchdog_clock_ms(void);

/* Forks the watchdog, which forks the command. Returns the watchdog's pid and
 * sets *sock (run's end of the channel, close-on-exec), *pgid (the command's
 * process group) and *shared (the bound to raise; unmapped at exit); -1 with
 * errno on failure. */
pid_t watchdog_start(const WatchdogArgs *a, int *sock, pid_t *pgid, WatchShared **shared);

#endif
