/*
 * fuzz_cli — the command-line parsers on arbitrary argv split from the input
 * (at NUL bytes; a one-byte argument below 0x20 stands for a known flag):
 *
 *  - cli_parse_duration (src/cli/cli.h, src/cli/cli_http.c) accepts
 *    exactly DIGITS followed by ms, s, m or h whose value in milliseconds
 *    fits in int64_t, and then gives that exact value (>= 0, no overflow);
 *  - listener_parse (src/net/listener.h) agrees with a reference:
 *    HOST:PORT with no other ':' or [HOST]:PORT, a non-empty host that fits
 *    hostlen (buffers of exactly hostlen bytes), 1 to 5 digits of port up to
 *    65535; host and port are the ones in the spec;
 *  - config_parse_serve (include/leasegate/config.h, src/config.c): never
 *    crashes; on CONFIG_OK every numeric field is within its flag's range
 *    (the last value given, or the default), min_token <= 2^62, the listen
 *    address is the last --listen's, paths are non-empty, every guard has a
 *    '/' prefix that does not shadow the API, an http(s) upstream, and an
 *    empty or valid lock name; on CONFIG_ERROR a NUL-terminated message
 *    that fits errlen.
 */
#include <stdbool.h>
#include <stddef.h>

#include "cli/cli.h"
#include "core/names.h"
#include "fuzz.h"
#include "leasegate/config.h"
#include "net/listener.h"

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)
#define MAX_ARGS 40

/* ---- durations ---- */

/* The reference: DIGITS[.DIGITS] then ms, s, m or h, a whole number of
 * milliseconds up to CLI_DURATION_MAX_MS, computed exactly (128-bit). */
static void check_duration(const char *s)
{
    int64_t ms = -12345;
    bool ok = cli_parse_duration(s, &ms);
    static const char DIGITS[] = "0123456789";
    size_t wd = strspn(s, DIGITS);
    const char *p = s + wd, *frac = p;
    size_t fd = 0;
    bool well = wd > 0;
    if (*p == '.') {
        frac = p + 1;
        fd = strspn(frac, DIGITS);
        p = frac + fd;
        well = well && fd > 0;
    }
    unsigned __int128 unit = !strcmp(p, "ms") ? 1 : !strcmp(p, "s") ? 1000 : !strcmp(p, "m") ? 60000
                           : !strcmp(p, "h") ? 3600000 : 0;
    bool want = well && unit > 0;
    /* Leading zeros of the whole part and trailing zeros of the fraction change nothing. */
    const char *w = s;
    while (wd > 1 && *w == '0')
        w++, wd--;
    while (fd > 0 && frac[fd - 1] == '0')
        fd--;
    unsigned __int128 value = 0;
    if (want && (wd > 20 || fd > 20))
        want = false; /* over 2^53 ms, or a fraction of a millisecond */
    if (want) {
        unsigned __int128 whole = 0, f = 0, scale = 1;
        for (size_t i = 0; i < wd; i++)
            whole = whole * 10 + (unsigned)(w[i] - '0');
        for (size_t i = 0; i < fd; i++)
            f = f * 10 + (unsigned)(frac[i] - '0'), scale *= 10;
        want = (f * unit) % scale == 0;
        value = whole * unit + f * unit / scale;
        want = want && value <= (unsigned __int128)CLI_DURATION_MAX_MS;
    }
    if (ok)
        CHECK(ms >= 0, "cli_parse_duration('%s') = %lld ms, negative", s, (long long)ms);
    if (want) {
        CHECK(ok, "cli_parse_duration refuses '%s' (%lld ms)", s, (long long)value);
        CHECK(ms == (int64_t)value, "cli_parse_duration('%s') = %lld ms, expected %lld", s, (long long)ms,
              (long long)value);
    } else {
        CHECK(!ok, "cli_parse_duration accepts '%s' as %lld ms (malformed, a fraction of a millisecond, or over "
                   "2^53 - 1 ms)", s, (long long)ms);
    }
}

/* ---- listen addresses ---- */

static bool ref_listen(const char *spec, size_t hostlen, char *host, uint16_t *port)
{
    const char *h, *hend, *colon;
    if (spec[0] == '[') {
        h = spec + 1;
        hend = strchr(h, ']');
        if (!hend || hend[1] != ':')
            return false;
        colon = hend + 1;
    } else {
        colon = strchr(spec, ':');
        if (!colon || strchr(colon + 1, ':'))
            return false;
        h = spec;
        hend = colon;
    }
    size_t n = (size_t)(hend - h);
    const char *p = colon + 1;
    size_t digits = strspn(p, "0123456789");
    if (n == 0 || n >= hostlen || digits == 0 || digits > 5 || p[digits])
        return false;
    long v = 0;
    for (size_t i = 0; i < digits; i++)
        v = v * 10 + (p[i] - '0');
    if (v > 65535)
        return false;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (uint16_t)v;
    return true;
}

static void check_listen(const char *spec, size_t hostlen)
{
    char *host = malloc(hostlen);
    char want_host[1024];
    CHECK(host != NULL, "out of memory");
    uint16_t port = 1, want_port = 2;
    bool ok = listener_parse(spec, host, hostlen, &port);
    bool want = ref_listen(spec, hostlen < sizeof want_host ? hostlen : sizeof want_host, want_host, &want_port);
    CHECK(ok == want, "listener_parse('%s', hostlen %zu) %s it, the reference %s it", spec, hostlen,
          ok ? "accepts" : "refuses", want ? "accepts" : "refuses");
    if (ok) {
        CHECK(memchr(host, '\0', hostlen) != NULL, "listener_parse wrote a host without its NUL");
        CHECK(!strcmp(host, want_host), "listener_parse('%s') host '%s', expected '%s'", spec, host, want_host);
        CHECK(port == want_port, "listener_parse('%s') port %u, expected %u", spec, port, want_port);
    }
    free(host);
}

/* ---- serve flags ---- */

static const char *const FLAGS[] = {
    "--listen",        "--data",        "--guard",       "--min-token",           "--access-log",
    "--max-waiters",   "--max-waiters-per-lock", "--max-connections", "--max-locks", "--max-fences",
    "--lease-history", "--idle-timeout", "--dead-client-after", "--guard-timeout", "--guard-max-calls",
    "--forget-idle-after", "--max-value-bytes", "-h", "--help", "serve", "--",
};
#define NFLAGS (sizeof FLAGS / sizeof FLAGS[0])

typedef struct Range {
    const char *flag;
    size_t offset;
    bool seconds;
    unsigned long long min, max;
} Range;

/* From `leasegate serve --help` and config.c's table. */
static const Range RANGES[] = {
    {"--max-waiters", offsetof(Config, max_waiters), false, 1, 10000000},
    {"--max-waiters-per-lock", offsetof(Config, max_waiters_per_lock), false, 1, 10000000},
    {"--max-connections", offsetof(Config, max_connections), false, 16, 1000000},
    {"--max-locks", offsetof(Config, max_locks), false, 1, 1000000000},
    {"--max-fences", offsetof(Config, max_fences), false, 1, 1000000000},
    {"--lease-history", offsetof(Config, lease_history), false, 1, 100000000},
    {"--idle-timeout", offsetof(Config, idle_timeout_s), true, 1, 86400},
    {"--dead-client-after", offsetof(Config, dead_client_s), true, 2, 3600},
    {"--guard-timeout", offsetof(Config, guard_timeout_s), true, 1, 3600},
    {"--guard-max-calls", offsetof(Config, guard_max_calls), false, 1, 100000},
    {"--forget-idle-after", offsetof(Config, forget_idle_s), true, 1, 31536000},
    {"--max-value-bytes", offsetof(Config, max_value_bytes), false, 1, 60000},
};
#define NRANGES (sizeof RANGES / sizeof RANGES[0])

static unsigned long long field_of(const Config *c, const Range *r)
{
    const char *p = (const char *)c + r->offset;
    if (r->seconds) {
        unsigned v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    size_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static bool in_argv(const char *p, int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (p == argv[i])
            return true;
    return false;
}

/* Flags that take no value. */
static bool boolean_flag(const char *a) { return !strcmp(a, "--auth-metrics") || !strcmp(a, "--insecure-no-auth"); }

/* The value of the last `flag` in an accepted argv (boolean flags take none), or NULL. */
static const char *last_value(int argc, char **argv, const char *flag)
{
    const char *last = NULL;
    for (int i = 0; i < argc; i += boolean_flag(argv[i]) ? 1 : 2)
        if (!boolean_flag(argv[i]) && i + 1 < argc && !strcmp(argv[i], flag))
            last = argv[i + 1];
    return last;
}

static bool has_flag(int argc, char **argv, const char *flag)
{
    for (int i = 0; i < argc; i += boolean_flag(argv[i]) ? 1 : 2)
        if (!strcmp(argv[i], flag))
            return true;
    return false;
}

static void check_config(int argc, char **argv, size_t errlen)
{
    Config c;
    config_defaults(&c);
    char *err = malloc(errlen);
    CHECK(err != NULL, "out of memory");
    memset(err, 'x', errlen);
    ConfigResult r = config_parse_serve(&c, argc, argv, err, errlen);
    if (r == CONFIG_ERROR) {
        CHECK(memchr(err, '\0', errlen) != NULL, "config_parse_serve's error is not NUL-terminated in %zu bytes",
              errlen);
        CHECK(errlen == 1 || err[0] != '\0', "config_parse_serve failed with an empty message");
    }
    free(err);
    if (r != CONFIG_OK)
        return;
    int i = 0;
    for (; i < argc; i += boolean_flag(argv[i]) ? 1 : 2) /* flags; the others are their values */
        CHECK(strcmp(argv[i], "-h") && strcmp(argv[i], "--help"), "config_parse_serve ignored %s", argv[i]);
    CHECK(i == argc, "config_parse_serve accepted %d arguments: a flag without its value", argc);
    CHECK(c.auth_metrics == has_flag(argc, argv, "--auth-metrics") &&
              c.insecure_no_auth == has_flag(argc, argv, "--insecure-no-auth"),
          "a boolean flag's field does not say whether the flag was given");
    CHECK(!c.auth_metrics || c.auth_file, "--auth-metrics accepted without --auth-file");
    Config d;
    config_defaults(&d);
    for (size_t k = 0; k < NRANGES; k++) {
        const Range *rg = &RANGES[k];
        unsigned long long v = field_of(&c, rg);
        CHECK(v >= rg->min && v <= rg->max, "%s is %llu, outside %llu..%llu", rg->flag, v, rg->min, rg->max);
        /* the last value given for the flag, else the default */
        const char *last = last_value(argc, argv, rg->flag);
        if (!last) {
            CHECK(v == field_of(&d, rg), "%s changed from its default without the flag", rg->flag);
        } else if (strspn(last, "0123456789") == strlen(last)) {
            CHECK(v == strtoull(last, NULL, 10), "%s is %llu, the argument was '%s'", rg->flag, v, last);
        }
    }
    CHECK(c.min_token <= (UINT64_C(1) << 62), "min_token %llu above 2^62", (unsigned long long)c.min_token);
    CHECK(memchr(c.listen_host, '\0', sizeof c.listen_host) && c.listen_host[0], "listen host empty or unterminated");
    const char *last_listen = last_value(argc, argv, "--listen");
    if (last_listen) {
        char host[sizeof c.listen_host];
        uint16_t port;
        CHECK(ref_listen(last_listen, sizeof host, host, &port), "--listen '%s' accepted, the reference refuses it",
              last_listen);
        CHECK(!strcmp(host, c.listen_host) && port == c.listen_port, "--listen '%s' gave %s port %u", last_listen,
              c.listen_host, c.listen_port);
    } else {
        CHECK(!strcmp(c.listen_host, d.listen_host) && c.listen_port == d.listen_port, "listen address changed");
    }
    CHECK(c.data_path && c.data_path[0] && (c.data_path == d.data_path || in_argv(c.data_path, argc, argv)),
          "data path empty or not from argv");
    CHECK(!c.access_log || (c.access_log[0] && in_argv(c.access_log, argc, argv)), "access log path empty");
    CHECK(c.nguards <= CONFIG_MAX_GUARDS, "%zu guards", c.nguards);
    for (size_t g = 0; g < c.nguards; g++) {
        const GuardRoute *gr = &c.guards[g];
        CHECK(memchr(gr->prefix, '\0', sizeof gr->prefix) && memchr(gr->upstream, '\0', sizeof gr->upstream) &&
                  memchr(gr->lock, '\0', sizeof gr->lock),
              "guard %zu: a field is not NUL-terminated", g);
        CHECK(gr->prefix[0] == '/', "guard prefix '%s' does not start with '/'", gr->prefix);
        CHECK(strcmp(gr->prefix, "/") && strncmp(gr->prefix, "/v1/", 4) && strncmp(gr->prefix, "/healthz", 8) &&
                  strncmp(gr->prefix, "/metrics", 8) && strncmp("/v1/", gr->prefix, strlen(gr->prefix)) &&
                  strncmp("/healthz", gr->prefix, strlen(gr->prefix)) &&
                  strncmp("/metrics", gr->prefix, strlen(gr->prefix)),
              "guard prefix '%s' shadows the API", gr->prefix);
        CHECK(!strncmp(gr->upstream, "http://", 7) || !strncmp(gr->upstream, "https://", 8),
              "guard upstream '%s' is not http(s)", gr->upstream);
        CHECK(!gr->lock[0] || !name_lock_problem(gr->lock), "guard lock '%s' is not a lock name", gr->lock);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    /* argv: the rest split at NUL bytes, each argument in its own exact-size buffer */
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    size_t i = 1;
    while (i <= size && argc < MAX_ARGS) {
        size_t j = i;
        while (j < size && data[j])
            j++;
        if (j == size && i == size)
            break;
        size_t n = j - i;
        const char *src = (const char *)data + i;
        if (n == 1 && (unsigned char)src[0] < 0x20) { /* a known flag */
            src = FLAGS[(unsigned char)src[0] % NFLAGS];
            n = strlen(src);
        }
        char *a = malloc(n + 1);
        CHECK(a != NULL, "out of memory");
        memcpy(a, src, n);
        a[n] = '\0';
        argv[argc++] = a;
        i = j + 1;
    }
    argv[argc] = NULL;
    int64_t ms;
    CHECK(!cli_parse_duration(NULL, &ms), "cli_parse_duration(NULL) accepted");
    for (int k = 0; k < argc; k++) {
        check_duration(argv[k]);
        check_listen(argv[k], 1 + (size_t)(sel + k) % 40);
        check_listen(argv[k], 256);
    }
    check_config(argc, argv, sel % 8 == 0 ? 1 : 1 + (size_t)sel);
    for (int k = 0; k < argc; k++)
        free(argv[k]);
    return 0;
}
