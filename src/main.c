/*
 * main — argv -> config -> server (storage, lock table, HTTP, loop) -> runloop ->
 * ordered shutdown. Exit status: 0 after a clean stop, 1 on a runtime or
 * storage failure, 2 on bad usage.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/log.h"
#include "gateway.h"
#include "leasegate/config.h"
#include "runloop.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: leasegate <command> [flags]\n"
                 "\n"
                 "commands:\n"
                 "  serve     run the lock gateway (leasegate serve --help for its flags)\n"
                 "  run       hold a lock while a command runs\n"
                 "  campaign  run a command while leading an election\n"
                 "  acquire, renew, release, status, list, leader   one request each, JSON on stdout\n"
                 "  backup    a consistent copy of the database (asked of the running server)\n"
                 "  healthcheck   exit 0 when a server answers /healthz ok\n"
                 "  help      show this help\n\n");
    cli_usage(out);
}

/* Each waiting client holds a socket: allow as many as the hard limit. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int serve(int argc, char **argv)
{
    Config cfg;
    config_defaults(&cfg);
    char err[256];
    switch (config_parse_serve(&cfg, argc, argv, err, sizeof err)) {
    case CONFIG_HELP:
        config_usage(stdout);
        return 0;
    case CONFIG_ERROR:
        fprintf(stderr, "leasegate serve: %s\n", err);
        return 2;
    case CONFIG_OK:
        break;
    }
    log_set_format(cfg.log_format); /* before any thread starts (log.h) */
    raise_fd_limit();
    signal(SIGPIPE, SIG_IGN);
    /* Block the stop signals in every thread; the loop reads them from a signalfd. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP); /* reloads --auth-file (runloop.c); never ends the server */
    pthread_sigmask(SIG_BLOCK, &mask, NULL);

    Server s;
    int status = 1;
    if (gateway_open(&s, &cfg) == 0)
        status = runloop_run(&s);
    else if (s.stopping)
        status = 0; /* stopped while a candidate (--store etcd://) */
    if (s.storage_failed)
        _exit(1); /* reveal nothing more: no orderly shutdown of connections */
    gateway_close(&s);
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } CLIENT[] = {{"run", cli_run},         {"acquire", cli_acquire}, {"renew", cli_renew},
                  {"release", cli_release}, {"status", cli_status},   {"list", cli_list},
                  {"campaign", cli_campaign}, {"leader", cli_leader},
                  {"backup", cli_backup},   {"healthcheck", cli_healthcheck}, {"keygen", cli_keygen}};
    if (!strcmp(cmd, "serve"))
        return serve(argc - 2, argv + 2);
    for (size_t i = 0; i < sizeof CLIENT / sizeof CLIENT[0]; i++)
        if (!strcmp(cmd, CLIENT[i].name))
            return CLIENT[i].fn(argc - 2, argv + 2);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("leasegate %s\n", LEASEGATE_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") && argc > 2 && !strcmp(argv[2], "run")) {
        cli_run_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "help") && argc > 2 && !strcmp(argv[2], "campaign")) {
        cli_campaign_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "help") && argc > 2 && !strcmp(argv[2], "serve")) {
        config_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        fprintf(stdout, "\n");
        config_usage(stdout);
        return 0;
    }
    fprintf(stderr, "leasegate: unknown command '%s' (try leasegate --help)\n", cmd);
    return 2;
}
