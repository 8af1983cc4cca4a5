/*
 * cli_ops — commands for operators: `backup` (a consistent copy of the
 * database: asked of the running server, or made from a stopped server's
 * file) and `healthcheck` (for container health checks and scripts).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "cli/cli.h"
#include "store/store.h"

#define HEALTH_TIMEOUT_MS 5000
#define BACKUP_TIMEOUT_MS (10 * 60 * 1000)
#define BACKUP_USAGE "usage: leasegate backup [--server URL] [--cacert PEM] [--timeout DURATION] DEST, or leasegate backup --data DB DEST"

/* The running server streams a copy (GET /v1/backup, an admin key from
 * $LEASEGATE_KEY); it is written to DEST.partial, synced, checked as a local
 * copy is, and renamed to DEST. */
static int backup_from_server(const char *server, const char *dest, long timeout_ms)
{
    char partial[4096], err[512];
    if (access(dest, F_OK) == 0) {
        fprintf(stderr, "leasegate backup: %s exists; back up to a new file\n", dest);
        return CLI_FAILED;
    }
    if (snprintf(partial, sizeof partial, "%s.partial", dest) >= (int)sizeof partial) {
        fprintf(stderr, "leasegate backup: path too long\n");
        return CLI_FAILED;
    }
    unlink(partial);
    /* Readable by its owner only, whatever the umask: it holds every live lease. */
    int pfd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    FILE *f = pfd >= 0 ? fdopen(pfd, "wb") : NULL;
    if (!f) {
        if (pfd >= 0)
            close(pfd);
        fprintf(stderr, "leasegate backup: cannot create %s: %s\n", partial, strerror(errno));
        return CLI_FAILED;
    }
    long status = 0;
    json_t *reply = NULL;
    int rc = cli_http_download(server, "/v1/backup", f, timeout_ms, &status, &reply, err, sizeof err);
    bool written = rc == 0 && status == 200 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int write_errno = errno;
    if (fclose(f) != 0 && written) {
        written = false;
        write_errno = errno;
    }
    StoreBackupInfo info;
    if (rc != 0)
        fprintf(stderr, "leasegate backup: %s\n", err);
    else if (status != 200) {
        const char *msg = json_string_value(json_object_get(reply, "message"));
        fprintf(stderr, "leasegate backup: %s answered HTTP %ld%s%s\n", server, status, msg ? ": " : "", msg ? msg : "");
    } else if (!written)
        fprintf(stderr, "leasegate backup: cannot write %s: %s\n", partial, strerror(write_errno));
    else if (store_sqlite_check_copy(partial, dest, &info, err, sizeof err))
        fprintf(stderr, "leasegate backup: %s\n", err);
    else {
        json_decref(reply);
        printf("leasegate backup: %s -> %s: %llu locks, last token %llu\n", server, dest,
               (unsigned long long)info.locks, (unsigned long long)info.last_token);
        return CLI_OK;
    }
    json_decref(reply);
    unlink(partial);
    return CLI_FAILED;
}

int cli_backup(int argc, char **argv)
{
    const char *src = NULL, *server = NULL, *dest = NULL;
    int64_t timeout_ms = BACKUP_TIMEOUT_MS;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) {
            src = argv[++i];
        } else if (!strcmp(argv[i], "--server") && i + 1 < argc) {
            server = argv[++i];
        } else if (!strcmp(argv[i], "--first-byte-timeout") && i + 1 < argc) {
            if (!cli_first_byte_arg("backup", argv[++i]))
                return CLI_USAGE;
        } else if (!strcmp(argv[i], "--cacert") && i + 1 < argc) {
            if (!cli_cacert_arg("backup", argv[++i]))
                return CLI_USAGE;
        } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
            if (!cli_duration_arg("backup", "--timeout", argv[++i], &timeout_ms))
                return CLI_USAGE;
        } else if (argv[i][0] != '-' && !dest) {
            dest = argv[i];
        } else {
            fprintf(stderr, "leasegate backup: unexpected argument '%s' (" BACKUP_USAGE ")\n", argv[i]);
            return CLI_USAGE;
        }
    }
    if (!dest || !*dest || (src && !*src) || (src && server) || timeout_ms < 1 || timeout_ms > LONG_MAX) {
        fprintf(stderr, "leasegate backup: %s" BACKUP_USAGE "\n",
                src && server ? "--data (a stopped server's file) and --server (a running one) exclude each other; "
                              : "");
        return CLI_USAGE;
    }
    if (!src)
        return backup_from_server(server ? server : cli_default_server(), dest, (long)timeout_ms);
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
        } else if (!strcmp(argv[i], "--first-byte-timeout") && i + 1 < argc) {
            if (!cli_first_byte_arg("healthcheck", argv[++i]))
                return CLI_USAGE;
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
