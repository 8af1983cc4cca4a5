/*
 * cli_cmds — the script subcommands: acquire, renew, release, status, list,
 * leader (an election's; `leader NAME --watch` follows it, cli_observe.c).
 * Each prints the server's JSON answer on stdout and exits 0, or prints the
 * server's error on stderr and exits with the code of cli.h.
 * Each acts on a lock (--lock NAME, --read for a shared one) or a semaphore
 * (--semaphore NAME, with --limit N to acquire).
 */
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>

#include "cli/cli.h"
#include "core/names.h"
#include "store/jsondump.h"

#define HTTP_TIMEOUT_MS 30000

typedef enum OptKind { OPT_STRING, OPT_DURATION, OPT_FLAG } OptKind;

typedef struct Opt {
    const char *name;
    OptKind kind;
    void *dest; /* const char **, int64_t * (ms, -1 = unset) or bool * */
} Opt;

/* Parses --name value pairs; on error prints one line and returns false. */
static bool parse_opts(const char *cmd, int argc, char **argv, const Opt *opts, size_t nopts)
{
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--cacert") || !strcmp(argv[i], "--first-byte-timeout")) { /* every command's */
            if (i + 1 >= argc) {
                fprintf(stderr, "leasegate %s: %s needs a value\n", cmd, argv[i]);
                return false;
            }
            const char *flag = argv[i], *v = argv[++i];
            if (!(!strcmp(flag, "--cacert") ? cli_cacert_arg(cmd, v) : cli_first_byte_arg(cmd, v)))
                return false;
            continue;
        }
        const Opt *o = NULL;
        for (size_t k = 0; k < nopts; k++)
            if (!strcmp(argv[i], opts[k].name))
                o = &opts[k];
        if (!o) {
            fprintf(stderr, "leasegate %s: unknown argument '%s' (see leasegate help)\n", cmd, argv[i]);
            return false;
        }
        if (o->kind == OPT_FLAG) {
            *(bool *)o->dest = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "leasegate %s: %s needs a value\n", cmd, o->name);
            return false;
        }
        const char *v = argv[++i];
        if (o->kind == OPT_STRING) {
            *(const char **)o->dest = v;
        } else if (!cli_duration_arg(cmd, o->name, v, o->dest)) {
            return false;
        }
    }
    return true;
}

/* The longest lease text read from a file or the environment (a lease is a
 * UUID, 36 characters; room for whitespace around it). */
#define LEASE_TEXT_MAX 128

/* The lease of a command: --lease (on the command line, where ps shows it to
 * every user of the machine: warned about), else --lease-file PATH (- for
 * stdin), else, when from_env, $LEASEGATE_LEASE (what `leasegate run` gives
 * its command). *lease is NULL when none was given; false after saying why
 * it cannot be read. */
static bool lease_arg(const char *cmd, const char *arg, const char *file, bool from_env, char buf[LEASE_TEXT_MAX],
                      const char **lease)
{
    *lease = NULL;
    if (arg && file) {
        fprintf(stderr, "leasegate %s: give --lease or --lease-file, not both\n", cmd);
        return false;
    }
    if (arg) {
        fprintf(stderr, "leasegate %s: warning: --lease puts the lease on the command line, where every user of "
                        "this machine can read it (ps): use $LEASEGATE_LEASE or --lease-file\n",
                cmd);
        *lease = arg;
        return true;
    }
    if (!file) {
        const char *env = from_env ? getenv("LEASEGATE_LEASE") : NULL;
        *lease = env && *env ? env : NULL;
        return true;
    }
    FILE *f = strcmp(file, "-") ? fopen(file, "r") : stdin;
    size_t n = f ? fread(buf, 1, LEASE_TEXT_MAX - 1, f) : 0;
    bool failed = !f || ferror(f) || (n == LEASE_TEXT_MAX - 1 && fgetc(f) != EOF);
    if (f && f != stdin)
        fclose(f);
    if (failed) {
        fprintf(stderr, "leasegate %s: --lease-file %s: %s\n", cmd, file,
                !f ? strerror(errno) : "cannot be read, or longer than a lease");
        return false;
    }
    buf[n] = '\0';
    char *start = buf;
    while (*start == ' ' || *start == '\t' || *start == '\n' || *start == '\r')
        start++;
    size_t len = strlen(start);
    while (len && (start[len - 1] == ' ' || start[len - 1] == '\t' || start[len - 1] == '\n' || start[len - 1] == '\r'))
        start[--len] = '\0';
    if (!len) {
        fprintf(stderr, "leasegate %s: --lease-file %s is empty\n", cmd, file);
        return false;
    }
    *lease = start;
    return true;
}

static bool valid_lock(const char *cmd, const char *lock)
{
    const char *problem = name_problem(lock);
    if (!problem)
        return true;
    fprintf(stderr, "leasegate %s: lock name '%s' %s\n", cmd, lock, problem);
    return false;
}

/* What a command acts on: --lock NAME or --semaphore NAME, exactly one. */
typedef struct Target {
    const char *lock, *semaphore;
} Target;

static bool target(const char *cmd, const Target *t, const char **name, bool *semaphore)
{
    if (!t->lock == !t->semaphore) {
        fprintf(stderr, "leasegate %s: give --lock NAME or --semaphore NAME (one of them)\n", cmd);
        return false;
    }
    *semaphore = t->semaphore != NULL;
    *name = *semaphore ? t->semaphore : t->lock;
    return valid_lock(cmd, *name);
}

static const char *base_path(bool semaphore) { return semaphore ? "/v1/semaphores/" : "/v1/locks/"; }

bool cli_target_flags(const char *cmd, bool semaphore, const char *limit, const char *permits, bool read,
                      int64_t lock_delay_ms, bool lease, long *limit_out, long *permits_out)
{
    *limit_out = 0;
    *permits_out = 1;
    if (!semaphore) {
        if (!limit && !permits)
            return true;
        fprintf(stderr, "leasegate %s: %s is a semaphore's (--semaphore NAME --limit N)\n", cmd,
                limit ? "--limit" : "--permits");
        return false;
    }
    if (read || lock_delay_ms >= 0 || lease) {
        fprintf(stderr, "leasegate %s: %s is a lock's, not a semaphore's\n", cmd,
                read ? "--read" : lock_delay_ms >= 0 ? "--lock-delay" : "a reentry lease");
        return false;
    }
    char *end = NULL;
    long v = limit ? strtol(limit, &end, 10) : 0;
    if (!limit || !*limit || *end || strspn(limit, "0123456789") != strlen(limit) || v < 1 || v > 10000) {
        fprintf(stderr, "leasegate %s: --semaphore needs --limit N, the number of permits (1..10000)\n", cmd);
        return false;
    }
    *limit_out = v;
    if (!permits)
        return true;
    long p = strspn(permits, "0123456789") == strlen(permits) && *permits && strlen(permits) <= 5
                 ? strtol(permits, NULL, 10)
                 : 0;
    if (p < 1 || p > v) {
        fprintf(stderr, "leasegate %s: --permits '%s' must be a number of permits from 1 to --limit (%ld)\n", cmd,
                permits, v);
        return false;
    }
    *permits_out = p;
    return true;
}

/* Prints the answer; returns the exit code. Takes over reply. */
static int finish(const char *cmd, long status, json_t *reply)
{
    int code = CLI_OK;
    if (status >= 200 && status < 300 && reply) {
        char *text = jsondump_whole(reply, JSON_COMPACT); /* never a text with parts missing */
        if (text) {
            printf("%s\n", text);
        } else {
            fprintf(stderr, "leasegate %s: out of memory printing the answer\n", cmd);
            code = CLI_FAILED;
        }
        free(text);
    } else {
        const char *err = json_string_value(json_object_get(reply, "error"));
        const char *msg = json_string_value(json_object_get(reply, "message"));
        /* The server's advice names the API's query parameter; this command's is a flag. */
        const char *query = !strcmp(cmd, "list") && status == 403 && msg ? strstr(msg, "?prefix=") : NULL;
        if (query)
            fprintf(stderr, "leasegate %s: %s (HTTP %ld): %.*s--prefix PREFIX%s\n", cmd, err ? err : "error", status,
                    (int)(query - msg), msg, query + strlen("?prefix="));
        else
            fprintf(stderr, "leasegate %s: %s (HTTP %ld): %s%s\n", cmd, err ? err : "error", status,
                    msg ? msg : "unexpected answer", status == 401 ? cli_key_hint() : "");
        code = err && (!strcmp(err, "lock_held") || !strcmp(err, "semaphore_full")) ? CLI_NOT_ACQUIRED
               : err && !strcmp(err, "not_holder")                                   ? CLI_NOT_HOLDER
                                                                                     : CLI_FAILED;
    }
    json_decref(reply);
    return code;
}

static int call(const char *cmd, const char *server, const char *method, const char *path, json_t *body,
                long timeout_ms)
{
    long status = 0;
    json_t *reply;
    char err[512];
    int rc = cli_http(server, method, path, body, timeout_ms, &status, &reply, err, sizeof err);
    json_decref(body);
    if (rc) {
        fprintf(stderr, "leasegate %s: %s\n", cmd, err);
        return CLI_FAILED;
    }
    return finish(cmd, status, reply);
}

int cli_acquire(int argc, char **argv)
{
    const char *server = cli_default_server(), *owner = NULL, *metadata = NULL, *lease_opt = NULL,
               *lease_file = NULL, *lease, *limit_s = NULL, *permits_s = NULL, *name;
    Target t = {NULL, NULL};
    int64_t ttl = -1, wait = -1, delay = -1;
    bool read = false, semaphore;
    char lease_buf[LEASE_TEXT_MAX];
    const Opt opts[] = {{"--server", OPT_STRING, &server},     {"--lock", OPT_STRING, &t.lock},
                        {"--semaphore", OPT_STRING, &t.semaphore}, {"--limit", OPT_STRING, &limit_s},
                        {"--permits", OPT_STRING, &permits_s},  {"--read", OPT_FLAG, &read},           {"--lock-delay", OPT_DURATION, &delay},
                        {"--owner", OPT_STRING, &owner},       {"--ttl", OPT_DURATION, &ttl},
                        {"--wait", OPT_DURATION, &wait},       {"--metadata", OPT_STRING, &metadata},
                        {"--lease", OPT_STRING, &lease_opt},   {"--lease-file", OPT_STRING, &lease_file}};
    /* A reentry's lease is never taken from $LEASEGATE_LEASE: an acquire inside
     * `leasegate run` would then re-enter run's lock instead of taking its own. */
    if (!parse_opts("acquire", argc, argv, opts, sizeof opts / sizeof opts[0]) ||
        !target("acquire", &t, &name, &semaphore) ||
        !lease_arg("acquire", lease_opt, lease_file, false, lease_buf, &lease))
        return CLI_USAGE;
    long limit = 0, permits = 1;
    if (!cli_target_flags("acquire", semaphore, limit_s, permits_s, read, delay, lease != NULL, &limit, &permits))
        return CLI_USAGE;
    char default_owner[CLI_OWNER_MAX];
    if (!owner)
        cli_default_owner(default_owner);
    json_t *body = json_pack("{s:s}", "owner", owner ? owner : default_owner);
    if (ttl >= 0)
        json_object_set_new(body, "ttl_ms", json_integer(ttl));
    if (wait >= 0)
        json_object_set_new(body, "wait_ms", json_integer(wait));
    if (lease)
        json_object_set_new(body, "lease", json_string(lease));
    if (semaphore)
        json_object_set_new(body, "limit", json_integer(limit));
    if (permits > 1) /* 1 is the default: a server older than permits takes this acquire too */
        json_object_set_new(body, "permits", json_integer(permits));
    if (read)
        json_object_set_new(body, "mode", json_string("read"));
    if (delay >= 0)
        json_object_set_new(body, "lock_delay_ms", json_integer(delay));
    /* The same id on every server tried: a retry after a lost answer gets the grant it made. */
    char request_id[CLI_REQUEST_ID_LEN];
    cli_new_request_id(request_id);
    json_object_set_new(body, "request_id", json_string(request_id));
    if (metadata) {
        json_t *m = json_loads(metadata, 0, NULL);
        if (!json_is_object(m)) {
            fprintf(stderr, "leasegate acquire: --metadata must be a JSON object\n");
            json_decref(m);
            json_decref(body);
            return CLI_USAGE;
        }
        json_object_set_new(body, "metadata", m);
    }
    char path[512];
    snprintf(path, sizeof path, "%s%s/acquire", base_path(semaphore), name);
    return call("acquire", server, "POST", path, body, HTTP_TIMEOUT_MS + (wait > 0 ? (long)wait : 0));
}

static int lease_call(const char *cmd, int argc, char **argv, bool with_ttl)
{
    const char *server = cli_default_server(), *lease_opt = NULL, *lease_file = NULL, *lease, *name;
    Target t = {NULL, NULL};
    bool semaphore;
    int64_t ttl = -1;
    char lease_buf[LEASE_TEXT_MAX];
    const Opt opts[] = {{"--server", OPT_STRING, &server},
                        {"--lock", OPT_STRING, &t.lock},
                        {"--semaphore", OPT_STRING, &t.semaphore},
                        {"--lease", OPT_STRING, &lease_opt},
                        {"--lease-file", OPT_STRING, &lease_file},
                        {"--ttl", OPT_DURATION, &ttl}};
    size_t nopts = with_ttl ? 6 : 5;
    if (!parse_opts(cmd, argc, argv, opts, nopts) || !target(cmd, &t, &name, &semaphore) ||
        !lease_arg(cmd, lease_opt, lease_file, true, lease_buf, &lease))
        return CLI_USAGE;
    if (!lease) {
        fprintf(stderr, "leasegate %s: no lease: set $LEASEGATE_LEASE, or give --lease-file PATH (- for stdin)\n", cmd);
        return CLI_USAGE;
    }
    json_t *body = json_pack("{s:s}", "lease", lease);
    if (ttl >= 0)
        json_object_set_new(body, "ttl_ms", json_integer(ttl));
    char path[512];
    snprintf(path, sizeof path, "%s%s/%s", base_path(semaphore), name, cmd);
    return call(cmd, server, "POST", path, body, HTTP_TIMEOUT_MS);
}

int cli_renew(int argc, char **argv) { return lease_call("renew", argc, argv, true); }
int cli_release(int argc, char **argv) { return lease_call("release", argc, argv, false); }

int cli_status(int argc, char **argv)
{
    const char *server = cli_default_server(), *name;
    Target t = {NULL, NULL};
    bool semaphore;
    const Opt opts[] = {{"--server", OPT_STRING, &server}, {"--lock", OPT_STRING, &t.lock},
                        {"--semaphore", OPT_STRING, &t.semaphore}};
    if (!parse_opts("status", argc, argv, opts, 3) || !target("status", &t, &name, &semaphore))
        return CLI_USAGE;
    char path[512];
    snprintf(path, sizeof path, "%s%s", base_path(semaphore), name);
    return call("status", server, "GET", path, NULL, HTTP_TIMEOUT_MS);
}

int cli_leader(int argc, char **argv)
{
    const char *server = cli_default_server();
    bool watch = false;
    const Opt opts[] = {{"--server", OPT_STRING, &server}, {"--watch", OPT_FLAG, &watch}};
    const char *name = argc > 0 ? argv[0] : NULL;
    if (!name || !strncmp(name, "--", 2)) {
        fprintf(stderr, "leasegate leader: give the election's name: leasegate leader NAME [--watch]\n");
        return CLI_USAGE;
    }
    if (!parse_opts("leader", argc - 1, argv + 1, opts, 2))
        return CLI_USAGE;
    const char *problem = name_election_problem(name);
    if (problem) {
        fprintf(stderr, "leasegate leader: election name '%s' %s\n", name, problem);
        return CLI_USAGE;
    }
    if (watch)
        return cli_observe(server, name);
    char path[512];
    snprintf(path, sizeof path, "/v1/elections/%s", name);
    return call("leader", server, "GET", path, NULL, HTTP_TIMEOUT_MS);
}

int cli_list(int argc, char **argv)
{
    const char *server = cli_default_server(), *prefix = NULL, *after = NULL, *limit = NULL;
    bool semaphores = false;
    const Opt opts[] = {{"--server", OPT_STRING, &server},
                        {"--prefix", OPT_STRING, &prefix},
                        {"--after", OPT_STRING, &after},
                        {"--limit", OPT_STRING, &limit},
                        {"--semaphores", OPT_FLAG, &semaphores}};
    if (!parse_opts("list", argc, argv, opts, 5))
        return CLI_USAGE;
    if ((prefix && name_problem(prefix)) || (after && name_problem(after))) {
        fprintf(stderr, "leasegate list: --prefix and --after must follow the lock name rule\n");
        return CLI_USAGE;
    }
    if (limit && strspn(limit, "0123456789") != strlen(limit)) {
        fprintf(stderr, "leasegate list: --limit must be a number\n");
        return CLI_USAGE;
    }
    char path[1024];
    snprintf(path, sizeof path, "/v1/%s?limit=%s%s%s%s%s", semaphores ? "semaphores" : "locks", limit ? limit : "100",
             prefix ? "&prefix=" : "", prefix ? prefix : "", after ? "&after=" : "", after ? after : "");
    return call("list", server, "GET", path, NULL, HTTP_TIMEOUT_MS);
}

void cli_usage(FILE *out)
{
    fprintf(out,
            "client commands (--server URL[,URL...] defaults to $LEASEGATE_SERVER, then http://127.0.0.1:7400;\n"
            "the next URL is tried when one cannot be reached or answers 503; https:// URLs are verified\n"
            "against --cacert PEM, else $LEASEGATE_CACERT, else the system's CAs; a server that has not\n"
            "accepted or begun to answer within --first-byte-timeout D (else $LEASEGATE_FIRST_BYTE_TIMEOUT,\n"
            "else 2s) is asked GET /readyz, and left for the next unless it says it is ready;\n"
            "durations: 250ms, 15s, 2m, 1h, 1.5s, never a bare number; a server with --auth-file needs the API\n"
            "key in $LEASEGATE_KEY, or in the file $LEASEGATE_KEY_FILE names):\n"
            "  run --lock NAME [--read] [--lock-delay D] | --semaphore NAME --limit N [--permits P]\n"
            "      [--ttl 15s] [--wait 60s | --no-wait] [--grace D] [--timeout D]\n"
            "      [--owner LABEL] [--metadata JSON] [--exit-codes compat|distinct] -- CMD [ARGS...]\n"
            "      hold the lock (or permits) while CMD runs; CMD gets LEASEGATE_LOCK (or\n"
            "      LEASEGATE_SEMAPHORE), LEASEGATE_TOKEN, LEASEGATE_LEASE, LEASEGATE_SERVER; exits\n"
            "      with CMD's status (leasegate help run)\n"
            "  campaign NAME [--value TEXT | --value-json JSON] [flags] -- CMD [ARGS...]\n"
            "      wait to lead election NAME, then run CMD as its leader with run's guarantees;\n"
            "      CMD gets LEASEGATE_ELECTION, LEASEGATE_TERM (= LEASEGATE_TOKEN), LEASEGATE_LEASE\n"
            "      (leasegate help campaign)\n"
            "  leader NAME [--watch]   the election's leader (or null) and candidates; --watch: a\n"
            "      JSON line per new leader, proclaimed value or vacancy, until interrupted\n"
            "  acquire --lock NAME [--read] [--lock-delay D] | --semaphore NAME --limit N [--permits P]\n"
            "          [--owner LABEL] [--ttl D] [--wait D] [--metadata JSON]\n"
            "          [--lease-file PATH | --lease ID]   with a lease: reentry (never from $LEASEGATE_LEASE)\n"
            "          --read: a lock shared with other readers; --lock-delay D: when the lease is lost\n"
            "          (expires, force-released), nobody gets the lock for D after (0..60s);\n"
            "          --semaphore NAME --limit N: one of the N permits (1..10000) of a semaphore,\n"
            "          or P of them in one lease (--permits P, 1..N; FIFO: a large request is not passed)\n"
            "  renew   --lock NAME | --semaphore NAME [--lease-file PATH | --lease ID] [--ttl D]\n"
            "  release --lock NAME | --semaphore NAME [--lease-file PATH | --lease ID]\n"
            "          the lease: from --lease-file PATH (- for stdin), else $LEASEGATE_LEASE (what run\n"
            "          gives CMD); --lease ID puts it where ps shows it to every user, and warns\n"
            "  status  --lock NAME | --semaphore NAME\n"
            "  list    [--prefix P] [--after NAME] [--limit N] [--semaphores]\n"
            "operator commands:\n"
            "  backup [--server URL] [--cacert PEM] [--timeout D] DEST\n"
            "                            consistent copy of the running server's database (asked of it\n"
            "                            with an admin key, checked, renamed into place; DEST must not exist)\n"
            "  backup --data DB DEST     the same from the database file of a stopped server\n"
            "  healthcheck [--server URL] [--cacert PEM]   exit 0 when the server answers /healthz ok, else 1\n"
            "  keygen NAME ROLE [PREFIX...] a new API key for --auth-file (ROLE: client, fence, admin;\n"
            "                            PREFIX: lock names it may touch, * for all): prints the key\n"
            "                            (shown once), then the line to append to the file\n"
            "  --version                 print the version\n"
            "exit codes: 0 ok, 1 server unreachable or unexpected answer, 2 usage, 3 not acquired\n"
            "(lock held, semaphore full, not elected), 4 not holder; run: CMD's status (128+N if killed by signal N), 75 when\n"
            "the lease was lost and CMD's process group was stopped, 124 at --timeout\n");
}
