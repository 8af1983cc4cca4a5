/*
 * cli — the client side of leasegate: `run` (hold a lock, or a permit of a
 * semaphore, while a command runs) and the script subcommands (acquire,
 * renew, release, status, list).
 *
 * Exit codes (documented in README and `leasegate help`):
 *   0 success; 1 the server could not be reached or answered unexpectedly;
 *   2 usage; 3 the lock was not acquired (held by another past --wait; a
 *   semaphore's permits all held);
 *   4 the lease does not hold the lock (not_holder);
 *   run: the command's own status (128+N if killed by signal N), 75 when
 *   the lease was lost and the command's process group was stopped, 124 at
 *   --timeout; `--exit-codes distinct` moves run's own outcomes to 64..79
 *   (cli_run_usage lists them).
 */
#ifndef LEASEGATE_CLI_H
#define LEASEGATE_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum {
    CLI_OK = 0,
    CLI_FAILED = 1,
    CLI_USAGE = 2,
    CLI_NOT_ACQUIRED = 3,
    CLI_NOT_HOLDER = 4,
    CLI_LEASE_LOST = 75,
};

/* Durations: DIGITS[.DIGITS] then ms, s, m or h ("250ms", "15s", "2m", "1h",
 * "1.5s"), a whole number of milliseconds up to CLI_DURATION_MAX_MS; nothing else
 * (no sign, space or exponent; a bare number is refused). The Python and Node
 * clients read the same grammar (clients/python/leasegate/durations.py,
 * clients/node/src/duration.js): change the three together. false when malformed. */
#define CLI_DURATION_MAX_MS ((INT64_C(1) << 53) - 1)
bool cli_parse_duration(const char *s, int64_t *ms);
#define CLI_REQUEST_ID_LEN 37
/* A new random acquire request_id (UUID text): sent on every try of one acquire. */
void cli_new_request_id(char out[CLI_REQUEST_ID_LEN]);
/* The API key to send: $LEASEGATE_KEY, else the first word of the file
 * $LEASEGATE_KEY_FILE names (in buf), else NULL (no key, also when that file
 * cannot be read: a server without keys needs none). */
#define CLI_KEY_MAX 300
const char *cli_key(char buf[CLI_KEY_MAX]);
/* For a 401: where the key sent came from, or why none was sent. */
const char *cli_key_hint(void);
/* --server, else $LEASEGATE_SERVER, else http://127.0.0.1:7400. */
const char *cli_default_server(void);
/* The owner label a grant gets when --owner is not given: "HOST:PID" of this
 * process, so that a reader of the lock sees which machine and process hold it. */
#define CLI_OWNER_MAX 128
void cli_default_owner(char out[CLI_OWNER_MAX]);
/* --cacert PATH: https servers must have a certificate for their name signed
 * by a CA in this PEM bundle (else $LEASEGATE_CACERT, else the system's
 * bundle). false (after saying why) when the file cannot be read. */
bool cli_cacert_arg(const char *cmd, const char *path);
/* --first-byte-timeout D (else $LEASEGATE_FIRST_BYTE_TIMEOUT, else 2s): a
 * server that has not accepted the connection, or not begun its answer,
 * within D is asked GET /readyz; unless it says it is ready (a long-poll is
 * waiting there), the request moves on to the next server. false (after
 * saying why) when D is not a duration of at least 100ms. */
bool cli_first_byte_arg(const char *cmd, const char *value);

/* One HTTP request with a JSON body (or none) to `servers`, one base URL or
 * several separated by commas: they are tried in order, moving on when one
 * cannot be reached or answers 503, all within timeout_ms. On success returns
 * 0 and sets *status and *reply_new (parsed JSON, or NULL when the body is not
 * JSON). -1 when no server could be reached in time (the last error in err). */
int cli_http(const char *servers, const char *method, const char *path, json_t *body, long timeout_ms,
             long *status, json_t **reply_new, char *err, size_t errlen);
/* A blocked, pending SIGINT/SIGTERM/SIGHUP/SIGQUIT ends a cli_http request
 * (run blocks them while it waits for a lock). cli_http_shared is the same,
 * except that each server gets an equal share of the time left, so one that
 * hangs (accepts, never answers) leaves the next its turn, and signals do not
 * end it. Not for long-polls, which must be given the whole wait. */
int cli_http_shared(const char *servers, const char *method, const char *path, json_t *body, long timeout_ms,
                    long *status, json_t **reply_new, char *err, size_t errlen);
/* GET path as cli_http does, except that a 200's body is written to `to`
 * (emptied first for every server tried), not parsed; another status's body
 * is parsed as JSON into *reply_new. */
int cli_http_download(const char *servers, const char *path, FILE *to, long timeout_ms, long *status,
                      json_t **reply_new, char *err, size_t errlen);

/* The flags beside --lock or --semaphore of acquire and run, checked
 * together: a semaphore needs --limit N (1..10000), takes --permits P (1..N,
 * how many of them one lease holds; NULL: 1) and no --read, --lock-delay
 * (lock_delay_ms -1: not given) or reentry lease; a lock takes no --limit or
 * --permits. *limit_out is N, *permits_out P; false after saying why. */
bool cli_target_flags(const char *cmd, bool semaphore, const char *limit, const char *permits, bool read,
                      int64_t lock_delay_ms, bool lease, long *limit_out, long *permits_out);

int cli_acquire(int argc, char **argv);
int cli_renew(int argc, char **argv);
int cli_release(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_list(int argc, char **argv);
int cli_run(int argc, char **argv);
/* `leasegate campaign NAME [--value TEXT | --value-json JSON] [run's flags] -- CMD`:
 * run's guarantees, CMD running while this process leads election NAME. */
int cli_campaign(int argc, char **argv);
/* `leasegate leader NAME [--watch]`: the election's state, or (--watch) its
 * observers' events, one JSON line each, until interrupted. */
int cli_leader(int argc, char **argv);
/* Follows GET /v1/elections/NAME/observe on servers until interrupted, one
 * line per `leader` or `vacant` event ({"event": ..., the event's fields});
 * reconnects (to the next server) with Last-Event-ID, so none is printed
 * twice or missed; when the server no longer keeps the ones missed (410), it
 * says so on stderr and goes on from the current state. Returns the exit
 * code when it cannot go on (no server reachable for a minute, a refusal). */
int cli_observe(const char *servers, const char *name);
int cli_backup(int argc, char **argv);
int cli_healthcheck(int argc, char **argv);
int cli_keygen(int argc, char **argv);
/* Parses a duration flag's value; on failure prints why (a missing unit is
 * named) and returns false. */
bool cli_duration_arg(const char *cmd, const char *flag, const char *value, int64_t *ms);
void cli_usage(FILE *out);
/* `leasegate help run`: run's flags and exit statuses. */
void cli_run_usage(FILE *out);
/* `leasegate help campaign`. */
void cli_campaign_usage(FILE *out);
/* --cacert's file, else $LEASEGATE_CACERT; NULL: the system's CAs. */
const char *cli_cacert(void);
/* --first-byte-timeout, else $LEASEGATE_FIRST_BYTE_TIMEOUT, else 2s, in ms:
 * also how long a connection may take. */
long cli_first_byte_ms(void);

#endif
