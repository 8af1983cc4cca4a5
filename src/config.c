/* config — flags of `leasegate serve`; see include/leasegate/config.h. */
#include "leasegate/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void config_defaults(Config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
    c->listen_port = 7400;
    c->data_path = "./leasegate.db";
    c->max_waiters = 100000;
    c->max_waiters_per_lock = 10000;
    c->max_connections = 16000;
    c->max_locks = 10000000;
    c->max_fences = 1000000;
    c->idle_timeout_s = 60;
    c->lease_history = 65536;
    c->guard_timeout_s = 30;
    c->forget_idle_s = 86400;
}

void config_usage(FILE *out)
{
    fprintf(out,
            "usage: leasegate serve [flags]\n"
            "\n"
            "Serves the leasegate HTTP/JSON lock API.\n"
            "\n"
            "  --listen HOST:PORT          address to listen on (default 127.0.0.1:7400; port 0 picks one)\n"
            "  --data PATH                 SQLite database file (default ./leasegate.db; created if missing)\n"
            "  --max-waiters N             waiting acquires in total, then 503 (default 100000)\n"
            "  --max-waiters-per-lock N    waiting acquires per lock, then 503 (default 10000)\n"
            "  --max-connections N         concurrent client connections, waiting ones included\n"
            "                              (default 16000)\n"
            "  --max-locks N               lock names known at once, then 503 (default 10000000)\n"
            "  --max-fences N              distinct fence resources, then 503 (default 1000000)\n"
            "  --idle-timeout SECONDS      close idle keep-alive connections after (default 60)\n"
            "  --lease-history N           ended leases remembered to explain not_holder (default 65536)\n"
            "  --forget-idle-after SECONDS a lock free that long (no holder, no waiter) is forgotten:\n"
            "                              its name and last_token go; tokens still only grow (default 86400)\n"
            "  --guard PREFIX=UPSTREAM     forward requests under PREFIX (e.g. /store/) to UPSTREAM\n"
            "                              (e.g. http://127.0.0.1:9000/); writes need a current fencing\n"
            "                              token (headers Fencing-Token, Fencing-Lock); repeatable, up to 16\n"
            "  --guard-timeout SECONDS     upstream silent this long -> 504 (default 30)\n"
            "  -h, --help                  show this help\n");
}

static int parse_size(const char *s, size_t min, size_t max, size_t *out)
{
    if (!s || !*s || *s == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_listen(Config *c, const char *s)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof c->listen_host)
        return -1;
    char host[sizeof c->listen_host];
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    struct in_addr addr;
    size_t port;
    if (inet_pton(AF_INET, host, &addr) != 1 || parse_size(colon + 1, 0, 65535, &port))
        return -1;
    memcpy(c->listen_host, host, sizeof host);
    c->listen_port = (uint16_t)port;
    return 0;
}

/* The API's own paths can not be shadowed by a guard prefix. */
static bool prefix_shadows_api(const char *prefix)
{
    static const char *const API[] = {"/v1/", "/healthz", "/metrics"};
    if (!strcmp(prefix, "/"))
        return true;
    for (size_t i = 0; i < sizeof API / sizeof API[0]; i++)
        if (!strncmp(prefix, API[i], strlen(prefix) < strlen(API[i]) ? strlen(prefix) : strlen(API[i])))
            return true;
    return false;
}

static int parse_guard(Config *c, const char *spec, char *err, size_t errlen)
{
    const char *eq = strchr(spec, '=');
    size_t plen = eq ? (size_t)(eq - spec) : 0;
    if (!eq || plen == 0 || spec[0] != '/' || plen >= sizeof c->guards[0].prefix) {
        snprintf(err, errlen, "--guard: '%s' is not PREFIX=UPSTREAM with PREFIX starting with / (e.g. /store/=http://127.0.0.1:9000/)", spec);
        return -1;
    }
    const char *up = eq + 1;
    if ((strncmp(up, "http://", 7) && strncmp(up, "https://", 8)) || strlen(up) >= sizeof c->guards[0].upstream) {
        snprintf(err, errlen, "--guard: upstream '%s' must be an http:// or https:// URL", up);
        return -1;
    }
    if (c->nguards == CONFIG_MAX_GUARDS) {
        snprintf(err, errlen, "--guard: at most %d guards", CONFIG_MAX_GUARDS);
        return -1;
    }
    GuardRoute *g = &c->guards[c->nguards];
    memcpy(g->prefix, spec, plen);
    g->prefix[plen] = '\0';
    if (prefix_shadows_api(g->prefix)) {
        snprintf(err, errlen, "--guard: prefix '%s' overlaps the API (/v1/, /healthz, /metrics or /)", g->prefix);
        return -1;
    }
    snprintf(g->upstream, sizeof g->upstream, "%s", up);
    c->nguards++;
    return 0;
}

/* The numeric flags: a size_t field, or (seconds) an unsigned field. */
typedef struct NumFlag {
    const char *name;
    size_t min, max;
    size_t offset;
    bool seconds;
} NumFlag;

static const NumFlag NUM_FLAGS[] = {
    {"--max-waiters", 1, 10000000, offsetof(Config, max_waiters), false},
    {"--max-waiters-per-lock", 1, 10000000, offsetof(Config, max_waiters_per_lock), false},
    {"--max-connections", 16, 1000000, offsetof(Config, max_connections), false},
    {"--max-locks", 1, 1000000000, offsetof(Config, max_locks), false},
    {"--max-fences", 1, 1000000000, offsetof(Config, max_fences), false},
    {"--lease-history", 1, 100000000, offsetof(Config, lease_history), false},
    {"--idle-timeout", 1, 86400, offsetof(Config, idle_timeout_s), true},
    {"--guard-timeout", 1, 3600, offsetof(Config, guard_timeout_s), true},
    {"--forget-idle-after", 1, 31536000, offsetof(Config, forget_idle_s), true},
};

ConfigResult config_parse_serve(Config *c, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 0; i < argc; i++) {
        const char *flag = argv[i];
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help"))
            return CONFIG_HELP;
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value || strncmp(flag, "--", 2) != 0) {
            snprintf(err, errlen, strncmp(flag, "--", 2) ? "unexpected argument '%s'" : "flag %s needs a value",
                     flag);
            return CONFIG_ERROR;
        }
        i++;
        if (!strcmp(flag, "--listen")) {
            if (parse_listen(c, value)) {
                snprintf(err, errlen, "--listen: '%s' is not IPv4-ADDRESS:PORT (e.g. 127.0.0.1:7400)", value);
                return CONFIG_ERROR;
            }
            continue;
        }
        if (!strcmp(flag, "--data")) {
            if (!*value) {
                snprintf(err, errlen, "--data: empty path");
                return CONFIG_ERROR;
            }
            c->data_path = value;
            continue;
        }
        if (!strcmp(flag, "--guard")) {
            if (parse_guard(c, value, err, errlen))
                return CONFIG_ERROR;
            continue;
        }
        const NumFlag *nf = NULL;
        for (size_t k = 0; k < sizeof NUM_FLAGS / sizeof NUM_FLAGS[0]; k++)
            if (!strcmp(flag, NUM_FLAGS[k].name))
                nf = &NUM_FLAGS[k];
        if (!nf) {
            snprintf(err, errlen, "unknown flag %s (see leasegate serve --help)", flag);
            return CONFIG_ERROR;
        }
        size_t v;
        if (parse_size(value, nf->min, nf->max, &v)) {
            snprintf(err, errlen, "%s: '%s' is not %s in %zu..%zu", flag, value,
                     nf->seconds ? "a number of seconds" : "an integer", nf->min, nf->max);
            return CONFIG_ERROR;
        }
        char *field = (char *)c + nf->offset;
        if (nf->seconds)
            *(unsigned *)(void *)field = (unsigned)v;
        else
            *(size_t *)(void *)field = v;
    }
    return CONFIG_OK;
}
