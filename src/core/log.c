/* log — timestamped, levelled log lines; see log.h. */
#include "core/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096

/* Written once by main before any thread runs (log.h); read-only after. */
static LogFormat format = LOG_FORMAT_TEXT;

void log_set_format(LogFormat f) { format = f; }

bool log_format_parse(const char *s, LogFormat *out)
{
    if (!strcmp(s, "text"))
        *out = LOG_FORMAT_TEXT;
    else if (!strcmp(s, "json"))
        *out = LOG_FORMAT_JSON;
    else
        return false;
    return true;
}

static const char *level_name(LogLevel l) { return l == LEVEL_ERROR ? "error" : l == LEVEL_WARN ? "warn" : "info"; }

/* msg as the inside of a JSON string, into out (at most cap bytes with the NUL). */
static size_t json_escape(const char *msg, char *out, size_t cap)
{
    static const char HEX[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[o++] = '\\';
            out[o++] = (char)*p;
        } else if (*p == '\n') {
            out[o++] = '\\', out[o++] = 'n';
        } else if (*p < 0x20 || *p == 0x7f) {
            memcpy(out + o, "\\u00", 4);
            out[o + 4] = HEX[*p >> 4];
            out[o + 5] = HEX[*p & 15];
            o += 6;
        } else {
            out[o++] = (char)*p; /* UTF-8 passes as it is; other bytes too (a log, not a contract) */
        }
    }
    out[o] = '\0';
    return o;
}

void log_line(LogLevel level, const char *fmt, ...)
{
    int saved = errno; /* a caller may still want it after logging */
    char msg[LINE_MAX_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    size_t len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
    while (len && msg[len - 1] == '\n')
        msg[--len] = '\0';
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof when - w, ".%03ldZ", ts.tv_nsec / 1000000);
    char line[2 * LINE_MAX_BYTES];
    int out;
    if (format == LOG_FORMAT_JSON) {
        char esc[sizeof line - 128];
        json_escape(msg, esc, sizeof esc);
        out = snprintf(line, sizeof line, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", when,
                       level_name(level), esc);
    } else {
        out = snprintf(line, sizeof line, "%s %s leasegate: %s\n", when, level_name(level), msg);
    }
    size_t total = out < 0 ? 0 : (size_t)out < sizeof line ? (size_t)out : sizeof line - 1;
    if (total && line[total - 1] != '\n')
        line[total - 1] = '\n'; /* cut: still one line */
    for (size_t done = 0; done < total;) {
        ssize_t k = write(STDERR_FILENO, line + done, total - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break; /* stderr gone: nothing else to tell it with */
        done += (size_t)k;
    }
    errno = saved;
}
