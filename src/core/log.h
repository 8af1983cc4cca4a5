/*
 * log — the server's log lines, on stderr, each with its time (UTC, to the
 * millisecond) and its level:
 *
 *     2026-11-30T12:00:00.123Z info leasegate: loaded 3 locks ...
 *
 * or, with --log-format json, one JSON object per line:
 *
 *     {"time":"2026-11-30T12:00:00.123Z","level":"info","msg":"loaded 3 locks ..."}
 *
 * Levels: error (something failed that an operator must look at: a start
 * that cannot go on, storage that failed, leadership given up), warn
 * (something degraded that the server rides out: etcd not answering, a
 * reload refused, forwards failing) and info (what happened: start, leadership,
 * reloads, stops).
 *
 * Each line is one write(2), so the lines of the server's threads never
 * interleave. The format is the one process-wide setting kept outside the
 * server context, as stderr itself is: set once by main before any thread
 * starts (log_set_format), only read afterwards. The client commands write
 * their own messages, not through this.
 */
#ifndef LEASEGATE_LOG_H
#define LEASEGATE_LOG_H

#include <stdbool.h>

typedef enum LogLevel { LEVEL_ERROR, LEVEL_WARN, LEVEL_INFO } LogLevel;
typedef enum LogFormat { LOG_FORMAT_TEXT, LOG_FORMAT_JSON } LogFormat;

/* Before any thread starts. */
void log_set_format(LogFormat f);
/* "text" or "json" into *out; false for anything else. */
bool log_format_parse(const char *s, LogFormat *out);
/* One line: fmt as printf's, without the "leasegate: " prefix or a newline
 * (a trailing one is dropped). A line longer than 4 KiB is cut. */
void log_line(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
