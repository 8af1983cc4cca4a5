/*
 * cli_run — `leasegate run --lock NAME -- CMD`: acquire, run CMD in its own
 * process group with the token in its environment, renew, release.
 *
 * The safety rule: nothing of CMD may still run once the lease can have
 * expired on the server. The supervisor keeps a lower bound of the lease's
 * expiry on its own monotonic clock: a renewal sent at time S makes the
 * server's expiry at least S + ttl (the server extends from when it receives
 * it). If renewals fail, CMD's group gets SIGTERM at (bound - grace) and
 * SIGKILL at (bound - grace/2), so it is gone before the bound. A renewal
 * answered not_holder means the lease is already gone: the group is stopped
 * at once. Orphaned grandchildren are reparented to the supervisor
 * (PR_SET_CHILD_SUBREAPER) and reaped; when CMD exits, what is left of its
 * group is stopped before the lock is released.
 *
 * The supervisor itself: SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed to
 * CMD's group; SIGTSTP/SIGTTIN/SIGTTOU are ignored: a stopped supervisor could
 * neither renew nor kill, and a stopped CMD would hold the lock while its lease
 * is renewed (CMD is not the terminal's job, so it must not read the
 * terminal); if the supervisor dies anyway
 * (SIGKILL, OOM), CMD gets SIGKILL (PR_SET_PDEATHSIG). Time is CLOCK_BOOTTIME,
 * which keeps counting while the machine sleeps. Limits: a descendant that
 * leaves the process group (setsid) is out of reach.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "leasegate/cli.h"
#include "leasegate/names.h"

#define RENEW_RETRY_MS 250
#define RELEASE_TIMEOUT_MS 5000
#define GRACE_MIN_MS 100

typedef struct Run {
    const char *server, *lock, *owner, *metadata;
    int64_t ttl_ms, wait_ms, grace_ms;
    char **cmd;
    char lease[64];
    long long token;
    pid_t child;       /* CMD, leader of its own process group */
    int child_status;  /* valid once child_exited */
    bool child_exited;
    int64_t expiry_lb; /* lower bound of the server's expiry, monotonic ms */
    int64_t next_renew;
    int64_t term_at, kill_at; /* when to escalate while stopping */
    bool stopping;     /* SIGTERM sent to the group */
    bool killed;       /* SIGKILL sent */
    bool lease_lost;   /* stopped because of the lease, not because CMD ended */
    const char *lost_why;
} Run;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool group_alive(pid_t pgid) { return kill(-pgid, 0) == 0 || errno != ESRCH; }

static void stop_group(Run *r, int64_t now, int64_t kill_at, const char *why)
{
    if (!r->stopping) {
        r->stopping = true;
        kill(-r->child, SIGTERM);
        if (why)
            fprintf(stderr, "leasegate run: %s; stopping %s (process group %d)\n", why, r->cmd[0], (int)r->child);
    }
    if (kill_at < now)
        kill_at = now;
    if (!r->kill_at || kill_at < r->kill_at)
        r->kill_at = kill_at;
}

/* Renews once. Returns 1 renewed, 0 failed (retry), -1 the lease is gone. */
static int renew(Run *r, int64_t timeout_ms)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "/v1/locks/%s/renew", r->lock);
    json_t *body = json_pack("{s:s, s:I}", "lease", r->lease, "ttl_ms", (json_int_t)r->ttl_ms);
    int64_t sent = mono_ms();
    long status = 0;
    json_t *reply;
    int rc = cli_http(r->server, "POST", path, body, (long)timeout_ms, &status, &reply, err, sizeof err);
    json_decref(body);
    int result = 0;
    if (rc == 0 && status == 200) {
        r->expiry_lb = sent + r->ttl_ms;
        r->next_renew = sent + r->ttl_ms / 3;
        result = 1;
    } else if (rc == 0 && status == 409) {
        const char *reason = json_string_value(json_object_get(reply, "reason"));
        static char why[128];
        snprintf(why, sizeof why, "lease lost (%s)", reason ? reason : "not_holder");
        r->lost_why = why;
        result = -1;
    } else {
        r->next_renew = mono_ms() + RENEW_RETRY_MS;
    }
    json_decref(reply);
    return result;
}

static int acquire(Run *r)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "/v1/locks/%s/acquire", r->lock);
    json_t *body = json_pack("{s:s, s:I, s:I}", "owner", r->owner, "ttl_ms", (json_int_t)r->ttl_ms, "wait_ms",
                             (json_int_t)r->wait_ms);
    if (r->metadata) {
        json_t *m = json_loads(r->metadata, 0, NULL);
        if (!json_is_object(m)) {
            fprintf(stderr, "leasegate run: --metadata must be a JSON object\n");
            json_decref(m);
            json_decref(body);
            return CLI_USAGE;
        }
        json_object_set_new(body, "metadata", m);
    }
    long status = 0;
    json_t *reply;
    int rc = cli_http(r->server, "POST", path, body, (long)r->wait_ms + 30000, &status, &reply, err, sizeof err);
    json_decref(body);
    if (rc) {
        fprintf(stderr, "leasegate run: %s\n", err);
        return CLI_FAILED;
    }
    int code = CLI_OK;
    const char *error = json_string_value(json_object_get(reply, "error"));
    if (status == 200 && json_is_string(json_object_get(reply, "lease"))) {
        snprintf(r->lease, sizeof r->lease, "%s", json_string_value(json_object_get(reply, "lease")));
        r->token = (long long)json_integer_value(json_object_get(reply, "token"));
    } else if (status == 409 && error && !strcmp(error, "lock_held")) {
        json_t *h = json_object_get(reply, "holder");
        fprintf(stderr, "leasegate run: lock '%s' not acquired within %lldms: held by '%s' (token %lld)\n", r->lock,
                (long long)r->wait_ms, h ? json_string_value(json_object_get(h, "owner")) : "?",
                h ? (long long)json_integer_value(json_object_get(h, "token")) : 0LL);
        code = CLI_NOT_ACQUIRED;
    } else {
        const char *msg = json_string_value(json_object_get(reply, "message"));
        fprintf(stderr, "leasegate run: acquire failed (HTTP %ld): %s\n", status, msg ? msg : "unexpected answer");
        code = CLI_FAILED;
    }
    json_decref(reply);
    return code;
}

static void release(Run *r)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "/v1/locks/%s/release", r->lock);
    json_t *body = json_pack("{s:s}", "lease", r->lease);
    long status;
    json_t *reply;
    if (cli_http(r->server, "POST", path, body, RELEASE_TIMEOUT_MS, &status, &reply, err, sizeof err) == 0)
        json_decref(reply);
    json_decref(body);
}

static pid_t spawn(Run *r, const sigset_t *oldmask)
{
    char token[32];
    snprintf(token, sizeof token, "%lld", r->token);
    pid_t supervisor = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        /* If the supervisor dies, nothing may go on holding what it held. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != supervisor)
            _exit(127);
        sigprocmask(SIG_SETMASK, oldmask, NULL);
        setenv("LEASEGATE_LOCK", r->lock, 1);
        setenv("LEASEGATE_TOKEN", token, 1);
        setenv("LEASEGATE_LEASE", r->lease, 1);
        setenv("LEASEGATE_SERVER", r->server, 1);
        execvp(r->cmd[0], r->cmd);
        fprintf(stderr, "leasegate run: cannot run %s: %s\n", r->cmd[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no window where a signal misses the group */
    return pid;
}

static void reap(Run *r)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == r->child) {
            r->child_exited = true;
            r->child_status = status;
        }
    }
}

/* Runs until CMD and everything left in its group are gone. */
static void supervise(Run *r, int sigfd)
{
    for (;;) {
        int64_t now = mono_ms();
        bool alive = group_alive(r->child);
        if (r->child_exited && !alive)
            return;
        if (r->child_exited && !r->stopping) { /* CMD is done: its leftovers go too, before the bound */
            int64_t kill_at = now + r->grace_ms;
            if (kill_at > r->expiry_lb - r->grace_ms / 2)
                kill_at = r->expiry_lb - r->grace_ms / 2;
            stop_group(r, now, kill_at, NULL);
        }
        if (r->stopping && !r->killed && now >= r->kill_at) {
            kill(-r->child, SIGKILL);
            r->killed = true;
        }
        if (!r->stopping && now >= r->expiry_lb - r->grace_ms) {
            r->lease_lost = true;
            stop_group(r, now, r->expiry_lb - r->grace_ms / 2, "lease could not be renewed before it expires");
        }
        if (!r->stopping && now >= r->next_renew) {
            int64_t budget = r->expiry_lb - r->grace_ms - now;
            int rc = renew(r, budget > 50 ? budget : 50);
            if (rc < 0) {
                r->lease_lost = true;
                now = mono_ms();
                stop_group(r, now, now + r->grace_ms / 2, r->lost_why);
            }
            continue;
        }
        int64_t wake = r->stopping ? (r->killed ? now + 100 : r->kill_at)
                                   : (r->next_renew < r->expiry_lb - r->grace_ms ? r->next_renew
                                                                                  : r->expiry_lb - r->grace_ms);
        int timeout = wake > now ? (int)(wake - now) : 0;
        struct pollfd p = {sigfd, POLLIN, 0};
        if (poll(&p, 1, timeout) > 0) {
            struct signalfd_siginfo si;
            while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGCHLD)
                    reap(r);
                else if (si.ssi_signo == SIGTSTP || si.ssi_signo == SIGTTIN || si.ssi_signo == SIGTTOU)
                    continue; /* see the top of this file */
                else
                    kill(-r->child, (int)si.ssi_signo); /* SIGINT, SIGTERM, SIGHUP, SIGQUIT */
            }
        }
        reap(r);
    }
}

int cli_run(int argc, char **argv)
{
    Run r = {0};
    r.server = cli_default_server();
    r.ttl_ms = 15000;
    r.wait_ms = 60000;
    r.grace_ms = -1;
    bool no_wait = false;
    int i = 0;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--no-wait")) {
            no_wait = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = v != NULL;
        if (ok && !strcmp(f, "--lock"))
            r.lock = v;
        else if (ok && !strcmp(f, "--server"))
            r.server = v;
        else if (ok && !strcmp(f, "--owner"))
            r.owner = v;
        else if (ok && !strcmp(f, "--metadata"))
            r.metadata = v;
        else if (ok && (!strcmp(f, "--ttl") || !strcmp(f, "--wait") || !strcmp(f, "--grace"))) {
            int64_t *dest = !strcmp(f, "--ttl") ? &r.ttl_ms : !strcmp(f, "--wait") ? &r.wait_ms : &r.grace_ms;
            if (!cli_duration_arg("run", f, v, dest))
                return CLI_USAGE;
        } else
            ok = false;
        if (!ok) {
            fprintf(stderr, "leasegate run: bad argument '%s'%s (see leasegate help)\n", f, v ? "" : " (missing value)");
            return CLI_USAGE;
        }
        i++;
    }
    if (i >= argc - 1) {
        fprintf(stderr, "leasegate run: no command: leasegate run --lock NAME -- CMD [ARGS...]\n");
        return CLI_USAGE;
    }
    r.cmd = argv + i + 1;
    if (!r.lock || name_problem(r.lock)) {
        fprintf(stderr, "leasegate run: --lock NAME is required and must follow the name rule\n");
        return CLI_USAGE;
    }
    if (r.ttl_ms < 300 || r.ttl_ms > 86400000 || r.wait_ms > 3600000) {
        fprintf(stderr, "leasegate run: --ttl must be in 300ms..24h and --wait at most 1h\n");
        return CLI_USAGE;
    }
    if (r.grace_ms < 0)
        r.grace_ms = r.ttl_ms / 4 < 2000 ? (r.ttl_ms / 4 > GRACE_MIN_MS ? r.ttl_ms / 4 : GRACE_MIN_MS) : 2000;
    if (r.grace_ms < GRACE_MIN_MS || r.grace_ms > r.ttl_ms / 2) {
        fprintf(stderr, "leasegate run: --grace must be in %dms..half of --ttl\n", GRACE_MIN_MS);
        return CLI_USAGE;
    }
    if (no_wait)
        r.wait_ms = 0;
    char owner[128];
    if (!r.owner) {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(owner, sizeof owner, "%s:%d", host, (int)getpid());
        r.owner = owner;
    }

    /* Signals go to the signalfd from now on; the child gets the old mask back. */
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigaddset(&mask, SIGTSTP);
    sigaddset(&mask, SIGTTIN);
    sigaddset(&mask, SIGTTOU);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    int sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd < 0) {
        perror("leasegate run: signalfd");
        return CLI_FAILED;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    int code = acquire(&r);
    if (code != CLI_OK)
        return code;
    /* Pin down the expiry bound: the grant happened somewhere during the wait. */
    if (renew(&r, r.ttl_ms / 2) != 1) {
        fprintf(stderr, "leasegate run: could not confirm the lease on '%s'; not running %s\n", r.lock, r.cmd[0]);
        release(&r);
        return r.lost_why ? CLI_LEASE_LOST : CLI_FAILED;
    }
    r.child = spawn(&r, &oldmask);
    if (r.child < 0) {
        perror("leasegate run: fork");
        release(&r);
        return CLI_FAILED;
    }
    supervise(&r, sigfd);
    release(&r);
    close(sigfd);
    if (r.lease_lost) {
        fprintf(stderr, "leasegate run: %s was stopped because the lease on '%s' was lost\n", r.cmd[0], r.lock);
        return CLI_LEASE_LOST;
    }
    if (WIFEXITED(r.child_status))
        return WEXITSTATUS(r.child_status);
    return 128 + WTERMSIG(r.child_status);
}
