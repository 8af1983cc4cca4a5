/*
 * cli_ops — commands for operators: `backup` (a consistent copy of a live
 * database) and `healthcheck` (for container health checks and scripts).
 */
#include <stdio.h>
#include <string.h>

#include "leasegate/cli.h"
#include "leasegate/store.h"

#define HEALTH_TIMEOUT_MS 5000

int cli_backup(int argc, char **argv)
{
    const char *src = "./leasegate.db", *dest = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) {
            src = argv[++i];
        } else if (argv[i][0] != '-' && !dest) {
            dest = argv[i];
        } else {
            fprintf(stderr, "leasegate backup: unexpected argument '%s' (usage: leasegate backup [--data DB] DEST)\n",
                    argv[i]);
            return CLI_USAGE;
        }
    }
    if (!dest || !*dest || !*src) {
        fprintf(stderr, "leasegate backup: usage: leasegate backup [--data DB] DEST\n");
        return CLI_USAGE;
    }
    char err[512];
    StoreBackupInfo info;
    if (store_sqlite_backup(src, dest, &info, err, sizeof err)) {
        fprintf(stderr, "leasegate backup: %s\n", err);
        return CLI_FAILED;
    }
    printf("leasegate backup: %s -> %s: %llu locks, last token %llu\n", src, dest, (unsigned long long)info.locks,
           (unsigned long long)info.last_token);
    return CLI_OK;
}

int cli_healthcheck(int argc, char **argv)
{
    const char *server = cli_default_server();
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--server") && i + 1 < argc) {
            server = argv[++i];
        } else if (!strcmp(argv[i], "--cacert") && i + 1 < argc) {
            if (!cli_cacert_arg("healthcheck", argv[++i]))
                return CLI_USAGE;
        } else {
            fprintf(stderr, "leasegate healthcheck: unexpected argument '%s' (usage: leasegate healthcheck "
                            "[--server URL] [--cacert PEM])\n",
                    argv[i]);
            return CLI_USAGE;
        }
    }
    long status = 0;
    json_t *reply = NULL;
    char err[512];
    if (cli_http(server, "GET", "/healthz", NULL, HEALTH_TIMEOUT_MS, &status, &reply, err, sizeof err)) {
        fprintf(stderr, "leasegate healthcheck: %s\n", err);
        return CLI_FAILED;
    }
    const char *state = json_string_value(json_object_get(reply, "status"));
    int code = status == 200 && state && !strcmp(state, "ok") ? CLI_OK : CLI_FAILED;
    if (code == CLI_OK)
        printf("leasegate healthcheck: %s is ok\n", server);
    else
        fprintf(stderr, "leasegate healthcheck: %s answered HTTP %ld\n", server, status);
    json_decref(reply);
    return code;
}
