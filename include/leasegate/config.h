/*
 * config — `leasegate serve` flags into one validated Config, with defaults.
 * A context header: every layer may read it (data, no code of its own).
 */
#ifndef LEASEGATE_CONFIG_H
#define LEASEGATE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/log.h"
#include "guard/guardroute.h"
#include "store/etcd.h"

#define CONFIG_MAX_GUARDS 16
#define CONFIG_MAX_ALLOWED_HOSTS 32
#define CONFIG_HOST_NAME_MAX 253
#define CONFIG_TLS_CIPHERS_MAX 1024
/* --key-max-watch-bytes and --peer-max-watch-bytes: the default, and the
 * least, which holds one watch of the largest view of a lock (100 holders
 * with 4 KiB of metadata each, about 450 KB). */
#define CONFIG_DEFAULT_WATCH_BYTES ((size_t)64 * 1024 * 1024)
#define CONFIG_MIN_WATCH_BYTES ((size_t)1024 * 1024)

typedef struct Config {
    char listen_host[256];        /* an IPv4 or IPv6 address (no brackets) or a host name */
    uint16_t listen_port;
    const char *data_path;        /* borrowed from argv or a literal */
    bool data_set;                /* --data was given */
    const char *store_url;        /* --store etcd://...: borrowed; NULL: SQLite at data_path */
    EtcdUrl etcd;                 /* store_url parsed */
    unsigned leader_ttl_s;        /* the etcd lease behind leadership */
    size_t etcd_max_txn_ops;      /* etcd's --max-txn-ops: no transaction of ours carries more */
    bool new_lock_space;          /* --new-lock-space: create the lock space on an empty prefix (lockspace.h) */
    const char *etcd_cert;        /* --etcd-cert PEM: the client certificate shown to etcd; borrowed */
    const char *etcd_key;         /* --etcd-key PEM, given with --etcd-cert */
    const char *etcd_auth_file;   /* --etcd-auth-file: USER:PASSWORD of an etcd user; borrowed */
    unsigned etcd_compact_interval_s; /* the leader compacts etcd's history this often; 0: never */
    size_t etcd_compact_bytes;    /* ... and once it wrote this much since the last compaction */
    char advertise[512];          /* the URL other gateways and clients see; "" until known */
    const char *access_log;       /* borrowed; NULL: none, "-": stdout */
    unsigned drain_s;             /* --drain-seconds: a planned stop is not ready but serves this long first */
    LogFormat log_format;         /* --log-format text|json: how log lines are written (core/log.h) */
    uint64_t min_token;           /* tokens issued from now on are above this */
    size_t max_waiters;           /* in total */
    size_t max_waiters_per_lock;
    size_t max_connections;
    size_t max_locks;
    size_t max_fences;
    unsigned idle_timeout_s;      /* idle keep-alive connections are closed after this */
    unsigned dead_client_s;       /* a waiter whose client vanished leaves the queue within this */
    size_t lease_history;         /* ended leases remembered for not_holder reasons */
    size_t audit_keep;            /* audit rows kept (newest); 0: no audit trail */
    size_t events_keep;           /* events kept in memory for GET /v1/events; 0: none */
    unsigned forget_idle_s;       /* a lock free (no holder, no waiter) this long is forgotten */
    GuardRoute guards[CONFIG_MAX_GUARDS];
    size_t nguards;
    unsigned guard_timeout_s;     /* upstream silent this long -> 504 */
    size_t guard_max_calls;       /* upstream calls at once, then 503 */
    size_t guard_lock_max_calls;  /* writes queued or in flight for one lock, then 503 */
    size_t guard_key_max_calls;   /* upstream calls of one API key, then 429 key_limit */
    size_t guard_peer_max_calls;  /* upstream calls of one peer address, then 429 peer_limit */
    unsigned guard_settle_s;      /* a write whose end left may still be applied this long after its
                                     upstream connection closed: the lock's next write waits */
    const char *s3_credentials;   /* --s3-credentials FILE, borrowed; NULL: the environment */
    unsigned s3_probe_interval_s; /* how often s3:// routes check their store again */
    const char *tls_cert;         /* --tls-cert PEM path, borrowed; NULL: plain HTTP */
    const char *tls_key;          /* --tls-key PEM path, given with --tls-cert */
    const char *tls_ciphers;      /* --tls-ciphers: a GnuTLS priority string; NULL: forward-secret AEAD only */
    const char *cacert;           /* --cacert: CAs that outbound https calls trust; NULL: the system's */
    const char *auth_file;        /* --auth-file: borrowed; NULL: no API keys */
    bool auth_metrics;            /* --auth-metrics: /, /healthz and /metrics need a key too */
    bool insecure_no_auth;        /* --insecure-no-auth: listen beyond loopback without keys */
    size_t key_max_held;          /* per API key: locks held and waited for, unless its line says */
    size_t key_max_waiters;       /* per API key: waiting acquires, unless its line says */
    /* Shares per API key and per peer (quota.h, peers.h); 0 until parsed: then
     * the flag's value, or a fraction of the server-wide limit. */
    size_t key_max_names, peer_max_names;   /* lock names in the table (of --max-locks) */
    size_t key_max_fences, peer_max_fences; /* fence resources (of --max-fences) */
    size_t key_max_polls, peer_max_polls;   /* long-polls, watches and streams held open */
    size_t key_max_watch_bytes, peer_max_watch_bytes; /* bytes of watch answers (quota.h) */
    size_t key_max_value_bytes, peer_max_value_bytes; /* bytes of the locks' values written, while kept */
    size_t max_value_bytes;       /* --max-value-bytes: one lock's value, as sent (issue 40) */
    size_t peer_max_connections;            /* open connections of one peer (of --max-connections) */
    size_t peer_max_half_sent;              /* requests of one peer begun and not complete */
    /* --allowed-host: more names this server answers for (hostcheck.h) */
    char allowed_hosts[CONFIG_MAX_ALLOWED_HOSTS][CONFIG_HOST_NAME_MAX + 1];
    size_t nallowed_hosts;
    bool any_host;                /* --allowed-host '*': no Host check */
} Config;

typedef enum ConfigResult { CONFIG_OK, CONFIG_HELP, CONFIG_ERROR } ConfigResult;

void config_defaults(Config *c);
/* Parses the arguments after "serve". On CONFIG_ERROR err holds one line. */
ConfigResult config_parse_serve(Config *c, int argc, char **argv, char *err, size_t errlen);
void config_usage(FILE *out);

#endif
