/*
 * cli_run — `leasegate run --lock NAME -- CMD`: acquire, run CMD under a
 * watchdog with the token in its environment, renew, release. The same for
 * a semaphore's permits (--semaphore NAME --limit N [--permits P]) and for
 * the leadership of an election (`leasegate campaign NAME -- CMD`: campaign,
 * renew, resign; the term is the token).
 *
 * The safety rule: nothing of CMD may still run once the lease can have
 * expired on the server. run keeps a lower bound of the lease's expiry on the
 * boot clock: a renewal sent at time S makes the server's expiry at least
 * S + ttl (the server extends from when it receives it). After each renewal it
 * raises the bound it shares with the watchdog (watchdog.h), the process that owns CMD's
 * process group and stops it before the bound by itself. So the rule holds when
 * run is SIGKILLed (the watchdog sees its end of the channel close and stops the
 * group at once) or SIGSTOPped (no new bound arrives). If the watchdog dies
 * instead, run kills the group. A renewal answered not_holder means the lease is
 * already gone: the group is stopped at once.
 *
 * Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed to CMD's group;
 * SIGTSTP/SIGTTIN/SIGTTOU are ignored (CMD is not the terminal's job, and a
 * stopped CMD would hold the lock while its lease is renewed). Before CMD
 * starts, SIGINT/SIGTERM/SIGHUP/SIGQUIT end the wait for the lock.
 *
 * Limits: a descendant of CMD that leaves the process group (setsid, setpgid)
 * or runs as another user is out of reach; so is CMD when run and the watchdog
 * are both stopped or killed.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/watchdog.h"
#include "core/names.h"

#define RENEW_RETRY_MS 250
#define RELEASE_TIMEOUT_MS 2000
#define LOST_RELEASE_TIMEOUT_MS 500 /* after a lost lease: one short try, then exit */
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000
#define GRACE_MIN_MS 100
#define TIMEOUT_MAX_MS (366LL * 86400000) /* --timeout: a year, so that no sum overflows */
/* Clocks of two machines run at slightly different rates: the bound keeps
 * 1/DRIFT_DIVISOR of the ttl (1 ms per second, far more than any NTP-disciplined
 * or even free-running quartz clock drifts) in hand. */
#define DRIFT_DIVISOR 1000

/* run's own outcomes, in the two numbering schemes (`--exit-codes`). */
typedef enum Outcome { OUT_UNREACHABLE, OUT_USAGE, OUT_NOT_ACQUIRED, OUT_LOST, OUT_TIMEOUT, OUT_INTERNAL } Outcome;
static const int CODES_COMPAT[] = {1, 2, 3, 75, 124, 1};
static const int CODES_DISTINCT[] = {69, 64, 73, 75, 79, 70};
#define DISTINCT_LOW 64
#define DISTINCT_HIGH 79

typedef struct Run {
    const char *cmdname; /* "run" or "campaign", for messages */
    const char *servers, *lock, *owner, *metadata; /* lock: the lock's, the semaphore's or the election's name */
    const char *base;   /* "/v1/locks/", "/v1/semaphores/" or "/v1/elections/" */
    bool semaphore;     /* --semaphore NAME: --permits of its --limit permits */
    long limit, permits;
    bool election;      /* campaign NAME: its leadership */
    json_t *value;      /* campaign --value or --value-json: the leader's value (owned); NULL: none */
    bool read;          /* --read: a shared lock */
    int64_t lock_delay_ms; /* --lock-delay; -1: not given */
    const char *cacert; /* --cacert, passed on to CMD as LEASEGATE_CACERT */
    int64_t ttl_ms, wait_ms, grace_ms, timeout_ms;
    bool distinct; /* --exit-codes distinct */
    char **cmd;
    char lease[64];
    char request_id[CLI_REQUEST_ID_LEN];
    long long token;
    int sigfd;
    pid_t watchdog, pgid;
    int sock;          /* to the watchdog; -1 once it is done or gone */
    WatchShared *shared; /* the bound the watchdog reads */
    bool watchdog_exited; /* reaped: the group it owned is gone, and pgid may be reused */
    bool keep_lease;   /* something of CMD may still run: let the lease run out, no release */
    int64_t expiry_lb; /* lower bound of the server's expiry, boot clock ms */
    int64_t next_renew;
    bool lease_lost;   /* no renewal can help any more: stop renewing */
    bool gone;         /* the server said not_holder: no release either */
    char lost_why[128];
} Run;

static int code(const Run *r, Outcome o) { return r->distinct ? CODES_DISTINCT[o] : CODES_COMPAT[o]; }

/* One line on stderr, "leasegate run: " or "leasegate campaign: " first. */
__attribute__((format(printf, 2, 3))) static void say(const Run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "leasegate %s: ", r->cmdname);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* A termination signal that is blocked and pending (run blocks them for the
 * signalfd), or 0. */
static int pending_stop_signal(void)
{
    sigset_t p;
    sigpending(&p);
    static const int SIGS[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof SIGS / sizeof SIGS[0]; i++)
        if (sigismember(&p, SIGS[i]))
            return SIGS[i];
    return 0;
}

/* Never blocks: a stopped watchdog must not stop run. A signal or a stop
 * that cannot be sent, run delivers to the group itself. */
static void tell_watchdog(Run *r, WatchKind kind, int32_t arg, int64_t value)
{
    WatchMsg m = {(int32_t)kind, arg, value};
    if (r->sock >= 0 && send(r->sock, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof m)
        return;
    if (kind == WATCH_SIGNAL && !r->watchdog_exited)
        kill(-r->pgid, arg);
    if (kind == WATCH_STOP && !r->watchdog_exited) {
        kill(-r->pgid, SIGTERM);
        kill(-r->pgid, SIGCONT);
    }
}

/* Reaps every child (the watchdog, and what it left if it died). */
static void reap(Run *r)
{
    pid_t pid;
    while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
        if (pid == r->watchdog)
            r->watchdog_exited = true;
}

/* Renews once within timeout_ms. Returns 1 renewed, 0 failed (retry), -1 the lease is gone. */
static int renew(Run *r, int64_t timeout_ms)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s%s/renew", r->base, r->lock);
    json_t *body = json_pack("{s:s, s:I}", "lease", r->lease, "ttl_ms", (json_int_t)r->ttl_ms);
    int64_t sent = watchdog_clock_ms();
    long status = 0;
    json_t *reply;
    int rc = cli_http_shared(r->servers, "POST", path, body, (long)timeout_ms, &status, &reply, err, sizeof err);
    json_decref(body);
    int result = 0;
    if (rc == 0 && status == 200) {
        r->expiry_lb = sent + r->ttl_ms - r->ttl_ms / DRIFT_DIVISOR;
        r->next_renew = sent + r->ttl_ms / 3;
        if (r->shared)
            atomic_store(&r->shared->stop_by_ms, r->expiry_lb);
        result = 1;
    } else if (rc == 0 && status == 409) {
        const char *reason = json_string_value(json_object_get(reply, "reason"));
        snprintf(r->lost_why, sizeof r->lost_why, "lease lost (%s)", reason ? reason : "not_holder");
        result = -1;
    } else {
        r->next_renew = watchdog_clock_ms() + RENEW_RETRY_MS;
    }
    json_decref(reply);
    return result;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* One acquire, retried with backoff while no server can be reached or they
 * answer 503 or another 5xx, until --wait runs out. Every try carries the same
 * request_id, so a retry after a lost answer gets the grant that answer held. */
static int acquire(Run *r)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s%s/%s", r->base, r->lock, r->election ? "campaign" : "acquire");
    json_t *metadata = NULL;
    if (r->metadata) {
        metadata = json_loads(r->metadata, 0, NULL);
        if (!json_is_object(metadata)) {
            say(r, "--metadata must be a JSON object\n");
            json_decref(metadata);
            return code(r, OUT_USAGE);
        }
    }
    cli_new_request_id(r->request_id);
    int64_t deadline = watchdog_clock_ms() + r->wait_ms, backoff = BACKOFF_FIRST_MS;
    for (;;) {
        int64_t left = deadline - watchdog_clock_ms();
        if (left < 0)
            left = 0;
        json_t *body = json_pack("{s:s, s:I, s:I, s:s}", "owner", r->owner, "ttl_ms", (json_int_t)r->ttl_ms,
                                 "wait_ms", (json_int_t)left, "request_id", r->request_id);
        if (metadata)
            json_object_set(body, "metadata", metadata);
        if (r->semaphore)
            json_object_set_new(body, "limit", json_integer(r->limit));
        if (r->permits > 1) /* 1 is the default: a server older than permits takes this acquire too */
            json_object_set_new(body, "permits", json_integer(r->permits));
        if (r->value)
            json_object_set(body, "value", r->value);
        if (r->read)
            json_object_set_new(body, "mode", json_string("read"));
        if (r->lock_delay_ms >= 0)
            json_object_set_new(body, "lock_delay_ms", json_integer(r->lock_delay_ms));
        long status = 0;
        json_t *reply;
        int rc = cli_http(r->servers, "POST", path, body, (long)left + 30000, &status, &reply, err, sizeof err);
        json_decref(body);
        const char *error = json_string_value(json_object_get(reply, "error"));
        int result = -1; /* retry */
        int sig = pending_stop_signal();
        if (sig) {
            say(r, "interrupted while acquiring '%s'; %s not run\n", r->lock, r->cmd[0]);
            result = 128 + sig;
        } else if (rc == 0 && status == 200 && json_is_string(json_object_get(reply, "lease"))) {
            snprintf(r->lease, sizeof r->lease, "%s", json_string_value(json_object_get(reply, "lease")));
            r->token = (long long)json_integer_value(json_object_get(reply, "token"));
            result = CLI_OK;
        } else if (rc == 0 && status == 409 && error && !strcmp(error, "lock_held")) {
            json_t *h = json_object_get(reply, "holder");
            if (json_is_object(h))
                say(r, "lock '%s' not acquired within %lldms: held by '%s' (token %lld)\n",
                        r->lock, (long long)r->wait_ms, json_string_value(json_object_get(h, "owner")),
                        (long long)json_integer_value(json_object_get(h, "token")));
            else
                say(r, "lock '%s' not acquired within %lldms: %s\n", r->lock,
                        (long long)r->wait_ms, json_string_value(json_object_get(reply, "message")));
            result = code(r, OUT_NOT_ACQUIRED);
        } else if (rc == 0 && status == 409 && error && !strcmp(error, "semaphore_full")) {
            long long limit = (long long)json_integer_value(json_object_get(reply, "limit"));
            if (r->permits == 1)
                say(r, "no permit of semaphore '%s' within %lldms: all %lld are held\n", r->lock,
                    (long long)r->wait_ms, limit);
            else
                say(r, "%ld permits of semaphore '%s' not acquired within %lldms: %lld of %lld are free\n", r->permits,
                    r->lock, (long long)r->wait_ms,
                    (long long)json_integer_value(json_object_get(reply, "available")), limit);
            result = code(r, OUT_NOT_ACQUIRED);
        } else if (rc == 0 && status == 409 && error && !strcmp(error, "not_leader")) {
            json_t *l = json_object_get(reply, "leader");
            if (json_is_object(l))
                say(r, "not elected in '%s' within %lldms: led by '%s' (term %lld)\n", r->lock, (long long)r->wait_ms,
                    json_string_value(json_object_get(l, "owner")),
                    (long long)json_integer_value(json_object_get(l, "term")));
            else
                say(r, "not elected in '%s' within %lldms: %s\n", r->lock, (long long)r->wait_ms,
                    json_string_value(json_object_get(reply, "message")));
            result = code(r, OUT_NOT_ACQUIRED);
        } else if (rc == 0 && status < 500) {
            const char *msg = json_string_value(json_object_get(reply, "message"));
            say(r, "%s failed (HTTP %ld): %s\n", r->election ? "campaign" : "acquire", status,
                msg ? msg : "unexpected answer");
            result = code(r, OUT_UNREACHABLE);
        } else if (rc == 0) {
            const char *msg = json_string_value(json_object_get(reply, "message"));
            snprintf(err, sizeof err, "HTTP %ld: %s", status, msg ? msg : "server error");
        }
        json_decref(reply);
        if (result >= 0) {
            json_decref(metadata);
            return result;
        }
        if (watchdog_clock_ms() + backoff > deadline) {
            say(r, "could not acquire '%s' within %lldms: %s\n", r->lock,
                    (long long)r->wait_ms, err);
            json_decref(metadata);
            return code(r, OUT_UNREACHABLE);
        }
        sleep_ms(backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
}

static void release(Run *r, long timeout_ms)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s%s/%s", r->base, r->lock, r->election ? "resign" : "release");
    json_t *body = json_pack("{s:s}", "lease", r->lease);
    long status;
    json_t *reply;
    if (cli_http_shared(r->servers, "POST", path, body, timeout_ms, &status, &reply, err, sizeof err) == 0)
        json_decref(reply);
    json_decref(body);
}

/* The watchdog died: nothing owns the group any more, so run ends it. run is
 * a subreaper, so what the watchdog left is reparented here and reaped. */
static void kill_orphaned_group(Run *r)
{
    say(r, "the watchdog of %s died; killing process group %d\n", r->cmd[0], (int)r->pgid);
    for (int i = 0; i < 500; i++) {
        reap(r);
        if (!watchdog_group_running(r->pgid))
            return;
        kill(-r->pgid, SIGKILL);
        sleep_ms(10);
    }
    /* Still there (uninterruptible sleep, or not ours to kill): the lock is
     * not released, so that its lease runs out only after they are gone or
     * its TTL has passed. */
    say(r, "process group %d did not go away; the lease is left to expire\n", (int)r->pgid);
    r->keep_lease = true;
}

/* Renews and passes signals on until the watchdog reports the group gone.
 * Returns false when the watchdog died instead. */
static bool supervise(Run *r, WatchMsg *done)
{
    for (;;) {
        /* First whether the watchdog is gone: once it is, pgid may name
         * someone else's group, and nothing of run's may be signalled. */
        reap(r);
        int64_t now = watchdog_clock_ms();
        if (!r->lease_lost && now >= r->expiry_lb - r->grace_ms) {
            /* The watchdog is stopping the group by itself at this very bound. */
            r->lease_lost = true;
            snprintf(r->lost_why, sizeof r->lost_why, "lease could not be renewed before it expires");
            say(r, "%s; stopping %s (process group %d)\n", r->lost_why, r->cmd[0],
                    (int)r->pgid);
        }
        if (r->lease_lost && now >= r->expiry_lb - r->grace_ms / 2 && !r->watchdog_exited)
            kill(-r->pgid, SIGKILL); /* only if the watchdog could not (it is stopped) */
        if (!r->lease_lost && now >= r->next_renew) {
            int64_t budget = r->expiry_lb - r->grace_ms - now;
            if (renew(r, budget > 50 ? budget : 50) < 0) {
                r->lease_lost = r->gone = true;
                tell_watchdog(r, WATCH_STOP, 0, 0);
                say(r, "%s; stopping %s (process group %d)\n", r->lost_why, r->cmd[0],
                        (int)r->pgid);
            }
            continue;
        }
        int64_t wake = r->lease_lost ? r->expiry_lb - r->grace_ms / 2
                                     : (r->next_renew < r->expiry_lb - r->grace_ms ? r->next_renew
                                                                                   : r->expiry_lb - r->grace_ms);
        if (wake <= now)
            wake = now + 20;
        struct pollfd p[2] = {{r->sock, POLLIN, 0}, {r->sigfd, POLLIN, 0}};
        if (poll(p, 2, (int)(wake - now)) <= 0)
            continue;
        if (p[0].revents) {
            ssize_t n = recv(r->sock, done, sizeof *done, 0);
            if (n == (ssize_t)sizeof *done && done->kind == WATCH_DONE)
                return true;
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                return false;
        }
        struct signalfd_siginfo si;
        while (read(r->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            int sig = (int)si.ssi_signo;
            if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT)
                tell_watchdog(r, WATCH_SIGNAL, sig, 0);
            /* SIGCHLD: reaped below; SIGTSTP/SIGTTIN/SIGTTOU: see the top of this file. */
        }
        /* The watchdog's DONE, if it sent one, stays readable after it is reaped. */
        reap(r);
    }
}

static int command_status(const Run *r, int wait_status)
{
    int status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
    if (r->distinct && status >= DISTINCT_LOW && status <= DISTINCT_HIGH) {
        say(r, "%s exited with status %d, reported as 1 (%d-%d are run's own with "
                        "--exit-codes distinct)\n", r->cmd[0], status, DISTINCT_LOW, DISTINCT_HIGH);
        return 1;
    }
    return status;
}

void cli_run_usage(FILE *out)
{
    fprintf(out,
            "leasegate run --lock NAME [--read] [--lock-delay D] [flags] -- CMD [ARGS...]\n"
            "leasegate run --semaphore NAME --limit N [--permits P] [flags] -- CMD [ARGS...]\n"
            "  Holds the lock (shared with other readers with --read), or one of the N\n"
            "  permits of the semaphore (P of them in one lease with --permits P, 1..N),\n"
            "  while CMD runs. CMD gets LEASEGATE_LOCK (or LEASEGATE_SEMAPHORE), LEASEGATE_TOKEN,\n"
            "  LEASEGATE_LEASE and LEASEGATE_SERVER (and LEASEGATE_CACERT with --cacert). The\n"
            "  lease is renewed at a third of the TTL; a watchdog process owns CMD's process\n"
            "  group and stops it (SIGTERM, then SIGKILL) before the lease can expire, also\n"
            "  when run itself is killed or stopped.\n"
            "flags:\n"
            "  --server URL[,URL...]  servers, tried in order on connection failure or 503\n"
            "                         (default $LEASEGATE_SERVER, then http://127.0.0.1:7400)\n"
            "  --cacert PEM   CAs that an https server's certificate must be signed by\n"
            "                 (default $LEASEGATE_CACERT, then the system's)\n"
            "  --first-byte-timeout D   a server that has not accepted or begun to answer\n"
            "                 within D is asked GET /readyz and left for the next unless\n"
            "                 it is ready (default $LEASEGATE_FIRST_BYTE_TIMEOUT, then 2s)\n"
            "  --ttl D        lease TTL (default 15s; 300ms..24h)\n"
            "  --wait D       how long to wait for the lock, retrying unreachable servers (default 60s)\n"
            "  --no-wait      try once\n"
            "  --grace D      SIGTERM this long before the lease's bound, SIGKILL at half of it\n"
            "                 (default ttl/4, at most 2s)\n"
            "  --timeout D    stop CMD (SIGTERM, SIGKILL after --grace) when it runs longer;\n"
            "                 a stopped CMD counts too\n"
            "  --owner LABEL, --metadata JSON   shown to readers of the lock\n"
            "  --lock-delay D if the lease is lost (expires, force-released), nobody gets the\n"
            "                 lock for D after (0..60s)\n"
            "  --exit-codes compat|distinct\n"
            "exit status:            compat  distinct\n"
            "  CMD's own status        its status (128+N if killed by signal N); with distinct,\n"
            "                          a status in %d-%d is reported as 1\n"
            "  server unreachable      1       69\n"
            "  usage error             2       64\n"
            "  not acquired in --wait  3       73\n"
            "  lease lost: CMD stopped 75      75\n"
            "  --timeout: CMD stopped  124     79\n"
            "  run's own failure       1       70\n",
            DISTINCT_LOW, DISTINCT_HIGH);
}

void cli_campaign_usage(FILE *out)
{
    fprintf(out,
            "leasegate campaign NAME [--value TEXT | --value-json JSON] [flags] -- CMD [ARGS...]\n"
            "  Waits to lead election NAME (after the candidates before it), then runs CMD\n"
            "  as its leader with run's guarantees: CMD gets LEASEGATE_ELECTION,\n"
            "  LEASEGATE_TERM (the term, also in LEASEGATE_TOKEN: the fencing token),\n"
            "  LEASEGATE_LEASE and LEASEGATE_SERVER; the lease is renewed, and CMD is\n"
            "  stopped before it can expire (leadership lost: status 75). When CMD ends,\n"
            "  the leader resigns, and the election's observers see it vacant.\n"
            "  --value TEXT       the leader's value, as a JSON string (what GET\n"
            "                     /v1/elections/NAME and its observers show)\n"
            "  --value-json JSON  the leader's value, any JSON\n"
            "  --server, --cacert, --first-byte-timeout, --ttl, --wait, --no-wait, --grace,\n"
            "  --timeout, --owner, --metadata, --exit-codes: as run's (leasegate help run)\n"
            "exit status: as run's; not elected within --wait: 3 (73 with --exit-codes distinct)\n");
}

/* Parses flags into r; returns -1 when fine, else the exit code. */
static int parse(Run *r, int argc, char **argv)
{
    bool no_wait = false;
    const char *exit_codes = NULL, *lock = NULL, *semaphore = NULL, *limit = NULL, *permits = NULL, *value = NULL,
               *value_json = NULL;
    for (int j = 0; j < argc && strcmp(argv[j], "--") != 0; j++)
        if (!strcmp(argv[j], "--exit-codes") && j + 1 < argc)
            exit_codes = argv[j + 1];
    if (exit_codes && strcmp(exit_codes, "compat") && strcmp(exit_codes, "distinct")) {
        say(r, "--exit-codes must be compat or distinct\n");
        return CODES_COMPAT[OUT_USAGE];
    }
    r->distinct = exit_codes && !strcmp(exit_codes, "distinct");
    int usage = code(r, OUT_USAGE);
    int i = 0;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--no-wait")) {
            no_wait = true;
            continue;
        }
        if (!strcmp(f, "--read")) {
            r->read = true;
            continue;
        }
        if (!strcmp(f, "--help")) {
            (r->election ? cli_campaign_usage : cli_run_usage)(stdout);
            return CLI_OK;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = v != NULL;
        if (ok && !strcmp(f, "--lock"))
            lock = v;
        else if (ok && !strcmp(f, "--semaphore"))
            semaphore = v;
        else if (ok && !strcmp(f, "--limit"))
            limit = v;
        else if (ok && !strcmp(f, "--permits"))
            permits = v;
        else if (ok && r->election && !strcmp(f, "--value"))
            value = v;
        else if (ok && r->election && !strcmp(f, "--value-json"))
            value_json = v;
        else if (ok && !strcmp(f, "--server"))
            r->servers = v;
        else if (ok && !strcmp(f, "--owner"))
            r->owner = v;
        else if (ok && !strcmp(f, "--metadata"))
            r->metadata = v;
        else if (ok && !strcmp(f, "--cacert")) {
            if (!cli_cacert_arg(r->cmdname, v))
                return usage;
            r->cacert = v;
        } else if (ok && !strcmp(f, "--first-byte-timeout")) {
            if (!cli_first_byte_arg(r->cmdname, v))
                return usage;
        }
        else if (ok && !strcmp(f, "--exit-codes"))
            ;
        else if (ok && (!strcmp(f, "--ttl") || !strcmp(f, "--wait") || !strcmp(f, "--grace") ||
                        !strcmp(f, "--timeout") || !strcmp(f, "--lock-delay"))) {
            int64_t *dest = !strcmp(f, "--ttl")     ? &r->ttl_ms
                            : !strcmp(f, "--wait")  ? &r->wait_ms
                            : !strcmp(f, "--grace") ? &r->grace_ms
                            : !strcmp(f, "--lock-delay") ? &r->lock_delay_ms
                                                    : &r->timeout_ms;
            if (!cli_duration_arg(r->cmdname, f, v, dest))
                return usage;
        } else
            ok = false;
        if (!ok) {
            say(r, "bad argument '%s'%s (see leasegate help %s)\n", f, v ? "" : " (missing value)", r->cmdname);
            return usage;
        }
        i++;
    }
    if (i >= argc - 1) {
        say(r, "no command: leasegate %s -- CMD [ARGS...]\n",
            r->election ? "campaign NAME [--value TEXT]" : "run --lock NAME");
        return usage;
    }
    r->cmd = argv + i + 1;
    if (r->election) {
        const char *problem = name_election_problem(r->lock);
        const char *lockish = lock ? "--lock" : semaphore ? "--semaphore" : limit ? "--limit" : permits ? "--permits" : r->read ? "--read"
                              : r->lock_delay_ms >= 0 ? "--lock-delay" : NULL;
        if (problem || lockish || (value && value_json)) {
            if (problem)
                say(r, "election name '%s' %s\n", r->lock, problem);
            else if (lockish)
                say(r, "%s is a lock's or a semaphore's, not an election's\n", lockish);
            else
                say(r, "give --value or --value-json, not both\n");
            return usage;
        }
        r->value = value ? json_string(value) : value_json ? json_loads(value_json, JSON_DECODE_ANY, NULL) : NULL;
        if ((value || value_json) && !r->value) {
            say(r, value ? "--value must be UTF-8 text\n" : "--value-json must be one JSON value\n");
            return usage;
        }
        r->base = "/v1/elections/";
    } else {
        if (!lock == !semaphore || name_problem(lock ? lock : semaphore)) {
            say(r, "--lock NAME or --semaphore NAME is required (one of them) and must follow the name rule\n");
            return usage;
        }
        r->semaphore = semaphore != NULL;
        r->lock = semaphore ? semaphore : lock;
        r->base = r->semaphore ? "/v1/semaphores/" : "/v1/locks/";
        if (!cli_target_flags("run", r->semaphore, limit, permits, r->read, r->lock_delay_ms, false, &r->limit,
                              &r->permits))
            return usage;
    }
    if (r->lock_delay_ms > 60000) {
        say(r, "--lock-delay must be at most 60s\n");
        return usage;
    }
    if (r->ttl_ms < 300 || r->ttl_ms > 86400000 || r->wait_ms > 3600000) {
        say(r, "--ttl must be in 300ms..24h and --wait at most 1h\n");
        return usage;
    }
    if (r->grace_ms < 0)
        r->grace_ms = r->ttl_ms / 4 < 2000 ? (r->ttl_ms / 4 > GRACE_MIN_MS ? r->ttl_ms / 4 : GRACE_MIN_MS) : 2000;
    if (r->grace_ms < GRACE_MIN_MS || r->grace_ms > r->ttl_ms / 2) {
        say(r, "--grace must be in %dms..half of --ttl\n", GRACE_MIN_MS);
        return usage;
    }
    if (r->timeout_ms < 0 || r->timeout_ms > TIMEOUT_MAX_MS) {
        say(r, "--timeout must be a duration of at most 366 days\n");
        return usage;
    }
    if (no_wait)
        r->wait_ms = 0;
    return -1;
}

/* Waits for the lock, confirms the lease's bound and starts the watchdog.
 * Returns -1 when CMD runs, else the exit code. */
static int start(Run *r, const sigset_t *oldmask)
{
    int rc = acquire(r);
    if (rc != CLI_OK)
        return rc;
    /* Pin down the expiry bound: the grant happened somewhere during the wait. */
    r->expiry_lb = watchdog_clock_ms() + r->ttl_ms / 2; /* renew's own budget */
    if (renew(r, r->ttl_ms / 2) != 1) {
        int sig = pending_stop_signal();
        if (sig) {
            say(r, "interrupted while acquiring '%s'; %s not run\n", r->lock, r->cmd[0]);
            release(r, LOST_RELEASE_TIMEOUT_MS);
            return 128 + sig;
        }
        say(r, "could not confirm the lease on '%s'; not running %s\n", r->lock, r->cmd[0]);
        if (!r->lost_why[0])
            release(r, LOST_RELEASE_TIMEOUT_MS);
        return code(r, r->lost_why[0] ? OUT_LOST : OUT_UNREACHABLE);
    }
    char token[32];
    snprintf(token, sizeof token, "%lld", r->token);
    if (setenv(r->election ? "LEASEGATE_ELECTION" : r->semaphore ? "LEASEGATE_SEMAPHORE" : "LEASEGATE_LOCK", r->lock,
               1) ||
        setenv("LEASEGATE_TOKEN", token, 1) || (r->election && setenv("LEASEGATE_TERM", token, 1)) ||
        setenv("LEASEGATE_LEASE", r->lease, 1) || setenv("LEASEGATE_SERVER", r->servers, 1) ||
        (r->cacert && setenv("LEASEGATE_CACERT", r->cacert, 1))) {
        say(r, "setenv: %s\n", strerror(errno));
        release(r, RELEASE_TIMEOUT_MS);
        return code(r, OUT_INTERNAL);
    }
    WatchdogArgs wa = {r->cmd, r->expiry_lb, r->grace_ms, r->timeout_ms, oldmask};
    r->watchdog = watchdog_start(&wa, &r->sock, &r->pgid, &r->shared);
    if (r->watchdog < 0) {
        say(r, "cannot start the watchdog: %s\n", strerror(errno));
        release(r, RELEASE_TIMEOUT_MS);
        return code(r, OUT_INTERNAL);
    }
    return -1;
}

/* run's and campaign's flags in argc/argv, then the whole of it: the exit code. */
static int hold(Run *r, int argc, char **argv)
{
    int rc = parse(r, argc, argv);
    if (rc >= 0)
        return rc;
    char owner[CLI_OWNER_MAX];
    if (!r->owner) {
        cli_default_owner(owner);
        r->owner = owner;
    }

    /* Signals go to the signalfd from now on; CMD gets the old mask back.
     * A signal the caller ignores (nohup) is left out: it stays ignored, for
     * run and for CMD, instead of pending and being passed on. */
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    static const int SIGS[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU};
    for (size_t i = 0; i < sizeof SIGS / sizeof SIGS[0]; i++) {
        struct sigaction now;
        if (sigaction(SIGS[i], NULL, &now) == 0 && now.sa_handler == SIG_IGN && SIGS[i] != SIGCHLD)
            continue;
        sigaddset(&mask, SIGS[i]);
    }
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    r->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (r->sigfd < 0) {
        say(r, "signalfd: %s\n", strerror(errno));
        return code(r, OUT_INTERNAL);
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* the watchdog's orphans, if it dies, come here */

    rc = start(r, &oldmask);
    if (rc >= 0) {
        close(r->sigfd);
        return rc;
    }
    WatchMsg done = {0};
    bool reported = supervise(r, &done);
    if (!reported) {
        kill_orphaned_group(r);
        rc = code(r, OUT_INTERNAL);
    } else if (done.arg == WATCH_END_LEASE || done.arg == WATCH_END_LOST) {
        say(r, "%s was stopped because the lease on '%s' was lost\n", r->cmd[0], r->lock);
        rc = code(r, OUT_LOST);
    } else if (done.arg == WATCH_END_TIMEOUT) {
        say(r, "%s ran longer than --timeout and was stopped\n", r->cmd[0]);
        rc = code(r, OUT_TIMEOUT);
    } else {
        rc = command_status(r, (int)done.value);
    }
    /* A lease the server said is gone needs no release; one that could not be
     * renewed gets one short try. */
    if (!r->gone && !r->keep_lease)
        release(r, r->lease_lost ? LOST_RELEASE_TIMEOUT_MS : RELEASE_TIMEOUT_MS);
    close(r->sock);
    reap(r);
    close(r->sigfd);
    return rc;
}

static int hold_and_free(Run *r, int argc, char **argv)
{
    int rc = hold(r, argc, argv);
    json_decref(r->value);
    return rc;
}

int cli_run(int argc, char **argv)
{
    Run r = {.cmdname = "run", .servers = cli_default_server(), .ttl_ms = 15000, .wait_ms = 60000, .grace_ms = -1,
             .sock = -1, .lock_delay_ms = -1, .permits = 1};
    return hold_and_free(&r, argc, argv);
}

int cli_campaign(int argc, char **argv)
{
    Run r = {.cmdname = "campaign", .election = true, .servers = cli_default_server(), .ttl_ms = 15000,
             .wait_ms = 60000, .grace_ms = -1, .sock = -1, .lock_delay_ms = -1, .permits = 1};
    if (argc < 1 || !strncmp(argv[0], "--", 2)) {
        say(&r, "give the election's name first: leasegate campaign NAME [--value TEXT] [flags] -- CMD [ARGS...]\n");
        return CLI_USAGE;
    }
    r.lock = argv[0];
    return hold_and_free(&r, argc - 1, argv + 1);
}
