/*
 * cli_cmds — the script subcommands: acquire, renew, release, status, list.
 * Each prints the server's JSON answer on stdout and exits 0, or prints the
 * server's error on stderr and exits with the code of include/leasegate/cli.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leasegate/cli.h"
#include "leasegate/jsondump.h"
#include "leasegate/names.h"

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
        if (!strcmp(argv[i], "--cacert")) { /* every command's */
            if (i + 1 >= argc) {
                fprintf(stderr, "leasegate %s: --cacert needs a value\n", cmd);
                return false;
            }
            if (!cli_cacert_arg(cmd, argv[++i]))
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

static bool need(const char *cmd, const char *flag, const char *value)
{
    if (value)
        return true;
    fprintf(stderr, "leasegate %s: %s is required\n", cmd, flag);
    return false;
}

static bool valid_lock(const char *cmd, const char *lock)
{
    const char *problem = name_problem(lock);
    if (!problem)
        return true;
    fprintf(stderr, "leasegate %s: lock name '%s' %s\n", cmd, lock, problem);
    return false;
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
        fprintf(stderr, "leasegate %s: %s (HTTP %ld): %s\n", cmd, err ? err : "error", status,
                msg ? msg : "unexpected answer");
        code = err && !strcmp(err, "lock_held")    ? CLI_NOT_ACQUIRED
               : err && !strcmp(err, "not_holder") ? CLI_NOT_HOLDER
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
    const char *server = cli_default_server(), *lock = NULL, *owner = NULL, *metadata = NULL, *lease = NULL;
    int64_t ttl = -1, wait = -1;
    const Opt opts[] = {{"--server", OPT_STRING, &server},     {"--lock", OPT_STRING, &lock},
                        {"--owner", OPT_STRING, &owner},       {"--ttl", OPT_DURATION, &ttl},
                        {"--wait", OPT_DURATION, &wait},       {"--metadata", OPT_STRING, &metadata},
                        {"--lease", OPT_STRING, &lease}};
    if (!parse_opts("acquire", argc, argv, opts, sizeof opts / sizeof opts[0]) || !need("acquire", "--lock", lock) ||
        !valid_lock("acquire", lock))
        return CLI_USAGE;
    json_t *body = json_pack("{s:s}", "owner", owner ? owner : "leasegate-cli");
    if (ttl >= 0)
        json_object_set_new(body, "ttl_ms", json_integer(ttl));
    if (wait >= 0)
        json_object_set_new(body, "wait_ms", json_integer(wait));
    if (lease)
        json_object_set_new(body, "lease", json_string(lease));
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
    snprintf(path, sizeof path, "/v1/locks/%s/acquire", lock);
    return call("acquire", server, "POST", path, body, HTTP_TIMEOUT_MS + (wait > 0 ? (long)wait : 0));
}

static int lease_call(const char *cmd, int argc, char **argv, bool with_ttl)
{
    const char *server = cli_default_server(), *lock = NULL, *lease = NULL;
    int64_t ttl = -1;
    const Opt opts[] = {{"--server", OPT_STRING, &server},
                        {"--lock", OPT_STRING, &lock},
                        {"--lease", OPT_STRING, &lease},
                        {"--ttl", OPT_DURATION, &ttl}};
    size_t nopts = with_ttl ? 4 : 3;
    if (!parse_opts(cmd, argc, argv, opts, nopts) || !need(cmd, "--lock", lock) || !need(cmd, "--lease", lease) ||
        !valid_lock(cmd, lock))
        return CLI_USAGE;
    json_t *body = json_pack("{s:s}", "lease", lease);
    if (ttl >= 0)
        json_object_set_new(body, "ttl_ms", json_integer(ttl));
    char path[512];
    snprintf(path, sizeof path, "/v1/locks/%s/%s", lock, cmd);
    return call(cmd, server, "POST", path, body, HTTP_TIMEOUT_MS);
}

int cli_renew(int argc, char **argv) { return lease_call("renew", argc, argv, true); }
int cli_release(int argc, char **argv) { return lease_call("release", argc, argv, false); }

int cli_status(int argc, char **argv)
{
    const char *server = cli_default_server(), *lock = NULL;
    const Opt opts[] = {{"--server", OPT_STRING, &server}, {"--lock", OPT_STRING, &lock}};
    if (!parse_opts("status", argc, argv, opts, 2) || !need("status", "--lock", lock) || !valid_lock("status", lock))
        return CLI_USAGE;
    char path[512];
    snprintf(path, sizeof path, "/v1/locks/%s", lock);
    return call("status", server, "GET", path, NULL, HTTP_TIMEOUT_MS);
}

int cli_list(int argc, char **argv)
{
    const char *server = cli_default_server(), *prefix = NULL, *after = NULL, *limit = NULL;
    const Opt opts[] = {{"--server", OPT_STRING, &server},
                        {"--prefix", OPT_STRING, &prefix},
                        {"--after", OPT_STRING, &after},
                        {"--limit", OPT_STRING, &limit}};
    if (!parse_opts("list", argc, argv, opts, 4))
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
    snprintf(path, sizeof path, "/v1/locks?limit=%s%s%s%s%s", limit ? limit : "100", prefix ? "&prefix=" : "",
             prefix ? prefix : "", after ? "&after=" : "", after ? after : "");
    return call("list", server, "GET", path, NULL, HTTP_TIMEOUT_MS);
}

void cli_usage(FILE *out)
{
    fprintf(out,
            "client commands (--server URL[,URL...] defaults to $LEASEGATE_SERVER, then http://127.0.0.1:7400;\n"
            "the next URL is tried when one cannot be reached or answers 503; https:// URLs are verified\n"
            "against --cacert PEM, else $LEASEGATE_CACERT, else the system's CAs;\n"
            "durations: 250ms, 15s, 2m, 1h, 1.5s, never a bare number; a server with --auth-file needs the API key\n"
            "in $LEASEGATE_KEY):\n"
            "  run --lock NAME [--ttl 15s] [--wait 60s | --no-wait] [--grace D] [--timeout D]\n"
            "      [--owner LABEL] [--metadata JSON] [--exit-codes compat|distinct] -- CMD [ARGS...]\n"
            "      hold the lock while CMD runs; CMD gets LEASEGATE_LOCK, LEASEGATE_TOKEN,\n"
            "      LEASEGATE_LEASE, LEASEGATE_SERVER; exits with CMD's status (leasegate help run)\n"
            "  acquire --lock NAME [--owner LABEL] [--ttl D] [--wait D] [--metadata JSON] [--lease ID]\n"
            "  renew   --lock NAME --lease ID [--ttl D]\n"
            "  release --lock NAME --lease ID\n"
            "  status  --lock NAME\n"
            "  list    [--prefix P] [--after NAME] [--limit N]\n"
            "operator commands:\n"
            "  backup [--data DB] DEST   consistent copy of a database, also while a server uses it\n"
            "                            (DB defaults to ./leasegate.db; DEST must not exist)\n"
            "  healthcheck [--server URL] [--cacert PEM]   exit 0 when the server answers /healthz ok, else 1\n"
            "  keygen NAME ROLE [PREFIX...] a new API key for --auth-file (ROLE: client, fence, admin;\n"
            "                            PREFIX: lock names it may touch, * for all): prints the key\n"
            "                            (shown once), then the line to append to the file\n"
            "  --version                 print the version\n"
            "exit codes: 0 ok, 1 server unreachable or unexpected answer, 2 usage, 3 not acquired\n"
            "(lock held), 4 not holder; run: CMD's status (128+N if killed by signal N), 75 when\n"
            "the lease was lost and CMD's process group was stopped, 124 at --timeout\n");
}
