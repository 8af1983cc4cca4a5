/* config — flags of `leasegate serve`; see include/leasegate/config.h (a context header). */
#include "leasegate/config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/names.h"
#include "net/listener.h"

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
    c->dead_client_s = 30;
    c->lease_history = 65536;
    c->audit_keep = 10000;
    c->events_keep = 10000;
    c->key_max_held = 100000;
    c->key_max_waiters = 10000;
    c->guard_timeout_s = 30;
    c->guard_max_calls = 256;
    c->guard_lock_max_calls = 16;
    c->guard_key_max_calls = 64;
    c->guard_peer_max_calls = 64;
    c->guard_settle_s = 30;
    c->s3_probe_interval_s = 600;
    c->forget_idle_s = 86400;
    c->leader_ttl_s = 3;
    c->etcd_max_txn_ops = 128; /* etcd's default */
    c->max_value_bytes = 4096;
    c->key_max_value_bytes = 16 << 20;
    c->peer_max_value_bytes = 16 << 20;
    c->etcd_compact_interval_s = 300; /* as Kubernetes' API server compacts its etcd */
    c->etcd_compact_bytes = (size_t)64 << 20;
}

void config_usage(FILE *out)
{
    fprintf(out,
            "usage: leasegate serve [flags]\n"
            "\n"
            "Serves the leasegate HTTP/JSON lock API.\n"
            "\n"
            "  --listen HOST:PORT          address to listen on (default 127.0.0.1:7400; port 0 picks one;\n"
            "                              IPv6 in brackets: [::1]:7400; host names: localhost:7400)\n"
            "  --data PATH                 SQLite database file (default ./leasegate.db; created if missing)\n"
            "  --store etcd://HOST:PORT[,HOST:PORT...]/PREFIX\n"
            "                              keep the lock space in etcd under PREFIX instead of SQLite (not\n"
            "                              with --data): several gateways share it, one leads and serves,\n"
            "                              the others answer 503 until they win; a gateway that loses\n"
            "                              leadership exits (status 1) for its supervisor to restart it;\n"
            "                              etcds://... reaches etcd over TLS\n"
            "  --leader-ttl SECONDS        with --store: the etcd lease behind leadership; a dead leader is\n"
            "                              replaced within about this plus the load (default 3, 2..60;\n"
            "                              shorter: faster failover, but an etcd stall longer than about\n"
            "                              TTL/2 costs leadership)\n"
            "  --etcd-max-txn-ops N        with --store: etcd's --max-txn-ops, when it is set below its\n"
            "                              default: a larger batch is split into transactions of at\n"
            "                              most N operations (default 128, 2..1000000)\n"
            "  --new-lock-space            with --store: create the lock space when nothing is stored under\n"
            "                              PREFIX (without it such a prefix is refused: a typo would start\n"
            "                              an empty lock space at token 1); harmless once it exists\n"
            "  --etcd-cert PEM --etcd-key PEM\n"
            "                              with --store etcds://: the client certificate (chain) and its\n"
            "                              unencrypted key this gateway shows etcd (its --client-cert-auth)\n"
            "  --etcd-auth-file PATH       with --store: USER:PASSWORD of an etcd user (its auth enabled),\n"
            "                              one line; refused when others may write it, warned when others\n"
            "                              may read it (chmod 600 or 640)\n"
            "  --etcd-compact-interval SECONDS\n"
            "                              with --store: the leader compacts etcd's history this often, at\n"
            "                              the revision of one interval before (default 300; 0: never,\n"
            "                              when etcd compacts itself: --auto-compaction-retention)\n"
            "  --etcd-compact-bytes N      with --store: the leader also compacts once it wrote N bytes since\n"
            "                              the last compaction, keeping the newest N/2 of history (default\n"
            "                              67108864, 0: never by size; keep it well under etcd's\n"
            "                              --quota-backend-bytes)\n"
            "  --advertise URL             with --store: this gateway's URL as other gateways and clients\n"
            "                              should reach it (default http://LISTEN address)\n"
            "  --min-token N               tokens issued from now on are larger than N (after restoring a\n"
            "                              backup or losing the database: the last token ever issued)\n"
            "  --access-log PATH           one line per request (time, peer, method, path, status,\n"
            "                              duration) appended to PATH, or - for stdout (default: none)\n"
            "  --log-format text|json      the server's own lines on stderr: text (time, level, message)\n"
            "                              or one JSON object per line (default text)\n"
            "  --drain-seconds N           a planned stop (SIGTERM, SIGINT) first answers /readyz 503\n"
            "                              while it goes on serving for N seconds, so that load balancers\n"
            "                              and clients move away; then it stops (a leader resigns last)\n"
            "                              (default 0, 0..3600; a second signal stops at once)\n"
            "  --max-waiters N             waiting acquires in total, then 503 (default 100000)\n"
            "  --max-waiters-per-lock N    waiting acquires per lock, then 503 (default 10000)\n"
            "  --max-connections N         concurrent client connections, waiting ones included\n"
            "                              (default 16000)\n"
            "  --max-locks N               lock names known at once, then 503 (default 10000000)\n"
            "  --max-fences N              distinct fence resources, then 503 (default 1000000)\n"
            "  --max-value-bytes N         a lock's value (PUT /v1/locks/NAME/value) as sent, at most (default\n"
            "                              4096, 1..60000); a larger one is 413\n"
            "  --idle-timeout SECONDS      close idle keep-alive connections after (default 60)\n"
            "  --dead-client-after SECONDS a waiter whose client vanished without closing (dead host,\n"
            "                              dropped network) leaves the queue within this (TCP keepalive;\n"
            "                              default 30)\n"
            "  --lease-history N           ended leases remembered to explain not_holder (default 65536)\n"
            "  --audit-keep N              audit rows kept (grants, releases, expiries, force-releases,\n"
            "                              fence and guard refusals; GET /v1/audit); 0: none (default 10000)\n"
            "  --events-keep N             events kept in memory for GET /v1/events and its stream;\n"
            "                              0: none (watches still work; default 10000)\n"
            "  --forget-idle-after SECONDS a lock free that long (no holder, no waiter) is forgotten:\n"
            "                              its name and last_token go; tokens still only grow (default 86400)\n"
            "  --guard PREFIX=UPSTREAM[,lock=NAME][,methods=M1+M2+...]\n"
            "                              forward requests under PREFIX (e.g. /store/) to UPSTREAM\n"
            "                              (e.g. http://127.0.0.1:9000/). A write must carry, in header\n"
            "                              Fencing-Lease, the lease that holds the lock its path below PREFIX\n"
            "                              names (/store/a/b -> lock a/b), or lock NAME for every path;\n"
            "                              methods= lists what is forwarded (default\n"
            "                              GET+HEAD+OPTIONS+PUT+POST+PATCH+DELETE; others get 405; COPY and\n"
            "                              MOVE also need the Destination's lease in\n"
            "                              Fencing-Destination-Lease); repeatable, up to 16, a longer PREFIX\n"
            "                              first, each over upstream objects of its own (unless two share\n"
            "                              one lock=NAME)\n"
            "  --guard-timeout SECONDS     upstream silent this long -> 504; a write queued this long\n"
            "                              behind its lock's other writes -> 503 (default 30)\n"
            "  --guard-settle SECONDS      after a write's last byte left and its upstream connection closed\n"
            "                              without an answer (timeout, restart), the lock's next write waits\n"
            "                              this long, the time a backend may still take to apply it\n"
            "                              (default 30; 0 turns the wait off: unsafe, see docs/fencing.md)\n"
            "  --guard PREFIX=s3://BUCKET[/KEYPREFIX][,region=R][,endpoint=URL][,lock=NAME][,methods=...]\n"
            "                              an S3 bucket behind PREFIX: the path below it is the object's key\n"
            "                              (under KEYPREFIX) and names its lock; GET and HEAD pass signed; a\n"
            "                              PUT writes with the token as the object's precondition (If-Match on\n"
            "                              its ETag, the fence in x-amz-meta-fencing-token); region defaults to\n"
            "                              $AWS_REGION, endpoint to AWS's (path-style); credentials from\n"
            "                              AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or\n"
            "                              --s3-credentials; until its store answers and honours preconditions\n"
            "                              the route is closed (writes 503, reads 502), never the server\n"
            "  --s3-credentials FILE       AWS shared credentials file (profile $AWS_PROFILE or default) for\n"
            "                              s3:// routes, re-read on SIGHUP (default: the environment); refused\n"
            "                              when its group or others may write it\n"
            "  --s3-probe-interval SECONDS how often each s3:// route checks again that its store honours\n"
            "                              preconditions (default 600; a closed route every 5 s at most)\n"
            "  --guard-max-calls N         upstream calls in flight at once, then 503 (default 256)\n"
            "  --guard-lock-max-calls N    writes queued or in flight for one lock, then 503 (default 16)\n"
            "  --guard-key-max-calls N     upstream calls of one API key at once, then 429 key_limit\n"
            "                              (default 64)\n"
            "  --guard-peer-max-calls N    upstream calls from one client address at once, then 429\n"
            "                              peer_limit (default 64; behind a reverse proxy every client is\n"
            "                              one peer)\n"
            "  --tls-cert PEM --tls-key PEM\n"
            "                              serve HTTPS (TLS 1.2 and 1.3) with this certificate (chain) and its\n"
            "                              unencrypted private key, both PEM files read at start\n"
            "  --tls-ciphers PRIORITY      a GnuTLS priority string for HTTPS, in place of the default: TLS 1.3,\n"
            "                              and TLS 1.2 with forward-secret AEAD suites only (ECDHE with AES-GCM\n"
            "                              or ChaCha20-Poly1305); e.g. to let TLS 1.2 CBC clients in:\n"
            "                              'NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2'\n"
            "  --cacert PEM                CA certificates that https upstreams (--guard) and, with --store,\n"
            "                              the leader gateway and etcds:// must be signed by (default: the\n"
            "                              system's)\n"
            "  --auth-file PATH            API keys (see leasegate keygen): every request needs\n"
            "                              Authorization: Bearer KEY, within the key's role and lock-name\n"
            "                              prefixes (401 without a known key, 403 out of its scope);\n"
            "                              SIGHUP reloads the file (with --store, on every gateway); while\n"
            "                              it does not load, requests that need a key get 503 (not ready)\n"
            "  --auth-metrics              with --auth-file: /healthz and /metrics need a key too\n"
            "  --key-max-held N            per API key: locks held and waited for together, then 429\n"
            "                              key_limit (default 100000; a key's line may say max_held=N)\n"
            "  --key-max-waiters N         per API key: waiting acquires (default 10000; max_waiters=N)\n"
            "  shares of what every client uses, per API key and per peer (client address; IPv6 by /64;\n"
            "  behind a reverse proxy every client is one peer): past one, 429 key_limit or peer_limit.\n"
            "  Each default is a part of the server-wide limit, but at least the number in brackets\n"
            "  (or all of it when that is smaller); a key's line may set its own (max_names=N, ...):\n"
            "  --key-max-names N           lock names in the table first taken by one key, until forgotten\n"
            "                              (default 1%% of --max-locks [1000])\n"
            "  --peer-max-names N          the same for one peer (default 25%% of --max-locks [1000])\n"
            "  --key-max-fences N          fence resources first raised by one key (1%% of --max-fences [1000])\n"
            "  --peer-max-fences N         the same for one peer (25%% of --max-fences [1000])\n"
            "  --key-max-polls N           long-polls (GET /v1/events), watches and event streams one key\n"
            "                              holds open (25%% of --max-connections [100])\n"
            "  --peer-max-polls N          the same for one peer (25%% of --max-connections [100])\n"
            "  --key-max-watch-bytes N     bytes of the answers one key's watches of locks will get or are\n"
            "                              sending, each counted at the size of its lock's view (default\n"
            "                              67108864, 64 MiB; at least 1048576)\n"
            "  --peer-max-watch-bytes N    the same for one peer (default 64 MiB)\n"
            "  --key-max-value-bytes N     bytes of the locks' values one key wrote, while they are kept\n"
            "                              (default 16777216; a key's line may say max_value_bytes=N)\n"
            "  --peer-max-value-bytes N    the same for one peer (default 16777216)\n"
            "  --peer-max-connections N    open connections of one peer, waiting ones included; more are\n"
            "                              closed as soon as accepted (50%% of --max-connections [100])\n"
            "  --peer-max-half-sent N      requests of one peer begun and not complete (a new connection\n"
            "                              counts until its first request is in): past it, new connections\n"
            "                              are closed and new requests get 429 (12.5%% of --max-connections\n"
            "                              [100])\n"
            "  --insecure-no-auth          listen beyond loopback without --auth-file (refused otherwise)\n"
            "  --allowed-host NAME         also answer requests whose Host is NAME (any port): a name behind a\n"
            "                              reverse proxy or load balancer; repeatable, up to 32. Answered\n"
            "                              anyway: IP addresses, localhost, the hosts of --listen and\n"
            "                              --advertise; any other Host gets 421 (against DNS rebinding).\n"
            "                              '*' turns the check off: unsafe wherever a browser can reach it\n"
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

#define MIN_TOKEN_MAX (UINT64_C(1) << 62)

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return -1;
    *out = v;
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
    if (c->nguards == CONFIG_MAX_GUARDS) {
        snprintf(err, errlen, "--guard: at most %d guards", CONFIG_MAX_GUARDS);
        return -1;
    }
    GuardRoute *g = &c->guards[c->nguards];
    if (!guardroute_parse(spec, g, err, errlen))
        return -1;
    if (prefix_shadows_api(g->prefix)) {
        snprintf(err, errlen, "--guard: prefix '%s' overlaps the API (/v1/, /healthz, /metrics or /)", g->prefix);
        return -1;
    }
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
    {"--audit-keep", 0, 10000000, offsetof(Config, audit_keep), false},
    {"--events-keep", 0, 10000000, offsetof(Config, events_keep), false},
    {"--key-max-held", 1, 100000000, offsetof(Config, key_max_held), false},
    {"--key-max-waiters", 1, 100000000, offsetof(Config, key_max_waiters), false},
    {"--key-max-names", 1, 1000000000, offsetof(Config, key_max_names), false},
    {"--peer-max-names", 1, 1000000000, offsetof(Config, peer_max_names), false},
    {"--key-max-fences", 1, 1000000000, offsetof(Config, key_max_fences), false},
    {"--peer-max-fences", 1, 1000000000, offsetof(Config, peer_max_fences), false},
    {"--key-max-polls", 1, 1000000, offsetof(Config, key_max_polls), false},
    {"--peer-max-polls", 1, 1000000, offsetof(Config, peer_max_polls), false},
    {"--key-max-watch-bytes", CONFIG_MIN_WATCH_BYTES, 1000000000000, offsetof(Config, key_max_watch_bytes), false},
    {"--peer-max-watch-bytes", CONFIG_MIN_WATCH_BYTES, 1000000000000, offsetof(Config, peer_max_watch_bytes), false},
    {"--key-max-value-bytes", 1, 100000000, offsetof(Config, key_max_value_bytes), false},
    {"--peer-max-value-bytes", 1, 100000000, offsetof(Config, peer_max_value_bytes), false},
    {"--max-value-bytes", 1, 60000, offsetof(Config, max_value_bytes), false},
    {"--peer-max-connections", 1, 1000000, offsetof(Config, peer_max_connections), false},
    {"--peer-max-half-sent", 1, 1000000, offsetof(Config, peer_max_half_sent), false},
    {"--idle-timeout", 1, 86400, offsetof(Config, idle_timeout_s), true},
    {"--dead-client-after", 2, 3600, offsetof(Config, dead_client_s), true},
    {"--guard-timeout", 1, 3600, offsetof(Config, guard_timeout_s), true},
    {"--guard-max-calls", 1, 100000, offsetof(Config, guard_max_calls), false},
    {"--guard-lock-max-calls", 1, 100000, offsetof(Config, guard_lock_max_calls), false},
    {"--guard-key-max-calls", 1, 100000, offsetof(Config, guard_key_max_calls), false},
    {"--guard-peer-max-calls", 1, 100000, offsetof(Config, guard_peer_max_calls), false},
    {"--guard-settle", 0, 3600, offsetof(Config, guard_settle_s), true},
    {"--s3-probe-interval", 1, 86400, offsetof(Config, s3_probe_interval_s), true},
    {"--forget-idle-after", 1, 31536000, offsetof(Config, forget_idle_s), true},
    {"--leader-ttl", 2, 60, offsetof(Config, leader_ttl_s), true},
    {"--drain-seconds", 0, 3600, offsetof(Config, drain_s), true},
    {"--etcd-max-txn-ops", 2, 1000000, offsetof(Config, etcd_max_txn_ops), false},
    {"--etcd-compact-interval", 0, 86400, offsetof(Config, etcd_compact_interval_s), true},
    {"--etcd-compact-bytes", 0, (size_t)1 << 40, offsetof(Config, etcd_compact_bytes), false},
};

static const NumFlag *num_flag(const char *name)
{
    for (size_t k = 0; k < sizeof NUM_FLAGS / sizeof NUM_FLAGS[0]; k++)
        if (!strcmp(name, NUM_FLAGS[k].name))
            return &NUM_FLAGS[k];
    return NULL;
}

static const char *const STRING_FLAGS[] = {"--listen",     "--data",  "--guard",     "--min-token",
                                           "--access-log", "--store", "--advertise", "--auth-file",
                                           "--tls-cert",   "--tls-key", "--cacert",  "--allowed-host", "--s3-credentials",
                                           "--tls-ciphers", "--log-format", "--etcd-cert",  "--etcd-key", "--etcd-auth-file"};

/* --allowed-host NAME: a DNS name (letters, digits, '-', '_', '.'), or '*'. */
static int parse_allowed_host(Config *c, const char *v, char *err, size_t errlen)
{
    if (!strcmp(v, "*")) {
        c->any_host = true;
        return 0;
    }
    size_t n = strlen(v);
    bool ok = n > 0 && n <= CONFIG_HOST_NAME_MAX && strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-_.") == n;
    if (!ok) {
        snprintf(err, errlen, "--allowed-host: '%.80s' is not a host name (letters, digits, '-', '_' and '.'; no "
                              "port) or '*'", v);
        return -1;
    }
    if (c->nallowed_hosts == CONFIG_MAX_ALLOWED_HOSTS) {
        snprintf(err, errlen, "--allowed-host: at most %d names", CONFIG_MAX_ALLOWED_HOSTS);
        return -1;
    }
    memcpy(c->allowed_hosts[c->nallowed_hosts++], v, n + 1);
    return 0;
}

static bool known_flag(const char *name)
{
    for (size_t k = 0; k < sizeof STRING_FLAGS / sizeof STRING_FLAGS[0]; k++)
        if (!strcmp(name, STRING_FLAGS[k]))
            return true;
    return num_flag(name) != NULL;
}

/* One flag and its value; -1 with err set when the value is not acceptable. */
static int apply_flag(Config *c, const char *flag, const char *value, char *err, size_t errlen)
{
    if (!strcmp(flag, "--listen")) {
        if (!listener_parse(value, c->listen_host, sizeof c->listen_host, &c->listen_port)) {
            snprintf(err, errlen,
                     "--listen: '%s' is not HOST:PORT (e.g. 127.0.0.1:7400, [::1]:7400, localhost:7400, "
                     "0.0.0.0:7400)",
                     value);
            return -1;
        }
        return 0;
    }
    if (!strcmp(flag, "--auth-file")) {
        if (!*value) {
            snprintf(err, errlen, "--auth-file: empty path");
            return -1;
        }
        c->auth_file = value;
        return 0;
    }
    if (!strcmp(flag, "--data") || !strcmp(flag, "--access-log")) {
        if (!*value) {
            snprintf(err, errlen, "%s: empty path", flag);
            return -1;
        }
        *(!strcmp(flag, "--data") ? &c->data_path : &c->access_log) = value;
        c->data_set |= !strcmp(flag, "--data");
        return 0;
    }
    if (!strcmp(flag, "--guard"))
        return parse_guard(c, value, err, errlen);
    if (!strcmp(flag, "--s3-credentials")) {
        if (!*value) {
            snprintf(err, errlen, "--s3-credentials: empty path");
            return -1;
        }
        c->s3_credentials = value;
        return 0;
    }
    if (!strcmp(flag, "--allowed-host"))
        return parse_allowed_host(c, value, err, errlen);
    if (!strcmp(flag, "--etcd-cert") || !strcmp(flag, "--etcd-key") || !strcmp(flag, "--etcd-auth-file")) {
        if (!*value) {
            snprintf(err, errlen, "%s: empty path", flag);
            return -1;
        }
        *(!strcmp(flag, "--etcd-cert") ? &c->etcd_cert : !strcmp(flag, "--etcd-key") ? &c->etcd_key
                                                                                     : &c->etcd_auth_file) = value;
        return 0;
    }
    if (!strcmp(flag, "--tls-ciphers")) {
        if (!*value || strlen(value) > CONFIG_TLS_CIPHERS_MAX) {
            snprintf(err, errlen, "--tls-ciphers: a GnuTLS priority string of 1..%d bytes", CONFIG_TLS_CIPHERS_MAX);
            return -1;
        }
        c->tls_ciphers = value;
        return 0;
    }
    if (!strcmp(flag, "--log-format")) {
        if (!log_format_parse(value, &c->log_format)) {
            snprintf(err, errlen, "--log-format: '%s' is not text or json", value);
            return -1;
        }
        return 0;
    }
    if (!strcmp(flag, "--tls-cert") || !strcmp(flag, "--tls-key") || !strcmp(flag, "--cacert")) {
        if (!*value) {
            snprintf(err, errlen, "%s: empty path", flag);
            return -1;
        }
        *(!strcmp(flag, "--tls-cert") ? &c->tls_cert : !strcmp(flag, "--tls-key") ? &c->tls_key : &c->cacert) = value;
        return 0;
    }
    if (!strcmp(flag, "--store")) {
        c->store_url = value;
        return etcd_url_parse(value, &c->etcd, err, errlen) ? 0 : -1;
    }
    if (!strcmp(flag, "--advertise")) {
        if ((strncmp(value, "http://", 7) && strncmp(value, "https://", 8)) || strlen(value) >= sizeof c->advertise) {
            snprintf(err, errlen, "--advertise: '%s' is not an http:// or https:// URL", value);
            return -1;
        }
        snprintf(c->advertise, sizeof c->advertise, "%s", value);
        return 0;
    }
    if (!strcmp(flag, "--min-token")) {
        /* Room for 2^62 more tokens: the counter can never run out. */
        if (parse_u64(value, MIN_TOKEN_MAX, &c->min_token)) {
            snprintf(err, errlen, "--min-token: '%s' is not an integer in 0..%llu", value,
                     (unsigned long long)MIN_TOKEN_MAX);
            return -1;
        }
        return 0;
    }
    const NumFlag *nf = num_flag(flag);
    size_t v;
    if (parse_size(value, nf->min, nf->max, &v)) {
        snprintf(err, errlen, "%s: '%s' is not %s in %zu..%zu", flag, value,
                 nf->seconds ? "a number of seconds" : "an integer", nf->min, nf->max);
        return -1;
    }
    char *field = (char *)c + nf->offset;
    if (nf->seconds)
        *(unsigned *)(void *)field = (unsigned)v;
    else
        *(size_t *)(void *)field = v;
    return 0;
}

/* A share not given: part of the server-wide limit, but at least `floor` of
 * it (all of it when it is smaller): shares matter for large tables, and a
 * small one (a test's, a small deployment's) is not cut into slivers. */
static void default_share(size_t *share, size_t total, size_t divisor, size_t floor)
{
    if (*share)
        return;
    *share = total / divisor;
    if (*share < floor)
        *share = total < floor ? total : floor;
}

ConfigResult config_parse_serve(Config *c, int argc, char **argv, char *err, size_t errlen)
{
    bool leader_flag = false;
    for (int i = 0; i < argc; i++) {
        const char *flag = argv[i];
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help"))
            return CONFIG_HELP;
        if (!strcmp(flag, "--auth-metrics") || !strcmp(flag, "--insecure-no-auth")) {
            *(!strcmp(flag, "--auth-metrics") ? &c->auth_metrics : &c->insecure_no_auth) = true;
            continue;
        }
        if (!strcmp(flag, "--new-lock-space")) {
            c->new_lock_space = leader_flag = true;
            continue;
        }
        if (strncmp(flag, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (flags start with --; see leasegate serve --help)", flag);
            return CONFIG_ERROR;
        }
        if (!known_flag(flag)) {
            snprintf(err, errlen, "unknown flag %s (see leasegate serve --help)", flag);
            return CONFIG_ERROR;
        }
        if (i + 1 >= argc) {
            snprintf(err, errlen, "flag %s needs a value (see leasegate serve --help)", flag);
            return CONFIG_ERROR;
        }
        if (apply_flag(c, flag, argv[++i], err, errlen))
            return CONFIG_ERROR;
        leader_flag |= !strcmp(flag, "--advertise") || !strcmp(flag, "--leader-ttl") || !strncmp(flag, "--etcd-", 7);
    }
    if (c->store_url && c->data_set) {
        snprintf(err, errlen, "--store and --data exclude each other: the lock space lives either in etcd or in "
                              "one SQLite file");
        return CONFIG_ERROR;
    }
    if (c->tls_ciphers && !c->tls_cert) {
        snprintf(err, errlen, "--tls-ciphers needs --tls-cert and --tls-key: it chooses what HTTPS accepts");
        return CONFIG_ERROR;
    }
    if (!c->tls_cert != !c->tls_key) {
        snprintf(err, errlen, "--tls-cert and --tls-key go together: the certificate and its private key");
        return CONFIG_ERROR;
    }
    if (c->tls_cert && !strncmp(c->advertise, "http://", 7)) {
        snprintf(err, errlen, "--advertise %s: with --tls-cert this gateway serves https://", c->advertise);
        return CONFIG_ERROR;
    }
    c->etcd.cacert = c->cacert;
    if (!c->store_url && leader_flag) {
        snprintf(err, errlen, "--advertise, --leader-ttl, --new-lock-space and the --etcd-* flags need --store "
                              "etcd://...");
        return CONFIG_ERROR;
    }
    if (!c->etcd_cert != !c->etcd_key) {
        snprintf(err, errlen, "--etcd-cert and --etcd-key go together: the client certificate and its private key");
        return CONFIG_ERROR;
    }
    if (c->etcd_cert && strncmp(c->etcd.endpoints[0], "https://", 8)) {
        snprintf(err, errlen, "--etcd-cert: etcd is reached over plain HTTP (etcd://); a client certificate needs "
                              "TLS: --store etcds://...");
        return CONFIG_ERROR;
    }
    if (c->etcd_compact_bytes && c->etcd_compact_bytes < 65536) {
        snprintf(err, errlen, "--etcd-compact-bytes: %zu is below 65536 (a compaction after nearly every commit); "
                              "0 turns compaction by size off", c->etcd_compact_bytes);
        return CONFIG_ERROR;
    }
    c->etcd.cert = c->etcd_cert;
    c->etcd.key = c->etcd_key;
    if (c->auth_metrics && !c->auth_file) {
        snprintf(err, errlen, "--auth-metrics needs --auth-file");
        return CONFIG_ERROR;
    }
    bool s3 = false;
    for (size_t i = 0; i < c->nguards; i++) {
        if (!guardroute_finish_s3(&c->guards[i], getenv("AWS_REGION"), err, errlen))
            return CONFIG_ERROR;
        s3 |= c->guards[i].kind == GUARD_S3;
    }
    for (size_t i = 0; i < c->nguards; i++)
        for (size_t j = i + 1; j < c->nguards; j++)
            if (!guardroute_compatible(&c->guards[i], &c->guards[j], err, errlen))
                return CONFIG_ERROR;
    if (c->s3_credentials && !s3) {
        snprintf(err, errlen, "--s3-credentials needs a --guard PREFIX=s3://... route");
        return CONFIG_ERROR;
    }
    default_share(&c->key_max_names, c->max_locks, 100, 1000);
    default_share(&c->peer_max_names, c->max_locks, 4, 1000);
    default_share(&c->key_max_fences, c->max_fences, 100, 1000);
    default_share(&c->peer_max_fences, c->max_fences, 4, 1000);
    default_share(&c->key_max_polls, c->max_connections, 4, 100);
    default_share(&c->peer_max_polls, c->max_connections, 4, 100);
    if (!c->key_max_watch_bytes)
        c->key_max_watch_bytes = CONFIG_DEFAULT_WATCH_BYTES;
    if (!c->peer_max_watch_bytes)
        c->peer_max_watch_bytes = CONFIG_DEFAULT_WATCH_BYTES;
    default_share(&c->peer_max_connections, c->max_connections, 2, 100);
    default_share(&c->peer_max_half_sent, c->max_connections, 8, 100);
    if (c->auth_file && c->insecure_no_auth) {
        snprintf(err, errlen, "--auth-file and --insecure-no-auth exclude each other");
        return CONFIG_ERROR;
    }
    if (!c->auth_file && !c->insecure_no_auth && listener_beyond_loopback(c->listen_host)) {
        snprintf(err, errlen,
                 "--listen %s reaches beyond this machine, and without --auth-file anyone who reaches it may "
                 "take or release any lock: give --auth-file PATH (see leasegate keygen), or --insecure-no-auth "
                 "if a firewall or a private network already keeps others out",
                 c->listen_host);
        return CONFIG_ERROR;
    }
    return CONFIG_OK;
}
