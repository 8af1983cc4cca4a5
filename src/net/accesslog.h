/*
 * accesslog — `serve --access-log`: one line per request, for operators.
 *
 *   2026-11-23T07:44:05.123Z 127.0.0.1:50412 POST /v1/locks/a/acquire 200 0.412ms
 *
 * Time (UTC, when the request ended), peer, method, path as sent, status, and
 * how long the request took; "000" when no answer was sent, and " undelivered"
 * when an answer was built but did not reach the client. Never a header or a
 * body, so never a lease id. Spaces, control bytes and bytes outside ASCII in
 * the path are written as %XX, so one request is always one line.
 */
#ifndef LEASEGATE_ACCESSLOG_H
#define LEASEGATE_ACCESSLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "-" is stdout; anything else a file opened for appending. NULL with the
 * reason in err on failure. */
FILE *accesslog_open(const char *path, char *err, size_t errlen);
void accesslog_close(FILE *f);
void accesslog_write(FILE *f, const char *peer, const char *method, const char *path, unsigned status,
                     bool delivered, int64_t duration_us);

#endif
