/* accesslog — one line per request; see accesslog.h. */
#include "net/accesslog.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* Lines are buffered and written when the buffer fills or the loop flushes
 * it (once per turn), not one system call per request. */
#define BUFFER_BYTES (64 * 1024)

FILE *accesslog_open(const char *path, char *err, size_t errlen)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "ae") : stdout;
    if (!f) {
        snprintf(err, errlen, "cannot open access log %s: %s", path, strerror(errno));
        return NULL;
    }
    setvbuf(f, NULL, _IOFBF, BUFFER_BYTES);
    return f;
}

void accesslog_close(FILE *f)
{
    if (!f)
        return;
    if (f == stdout)
        fflush(f);
    else
        fclose(f);
}

static void put_escaped(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p <= 0x20 || *p >= 0x7f)
            fprintf(f, "%%%02X", *p);
        else
            putc(*p, f);
    }
}

void accesslog_write(FILE *f, const char *peer, const char *method, const char *path, unsigned status,
                     bool delivered, int64_t duration_us)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(f, "%s.%03ldZ %s ", when, ts.tv_nsec / 1000000, peer);
    put_escaped(f, method);
    putc(' ', f);
    put_escaped(f, path);
    fprintf(f, " %03u %lld.%03lldms%s\n", status, (long long)(duration_us / 1000), (long long)(duration_us % 1000),
            status && !delivered ? " undelivered" : "");
}
