/* selfmetrics — build and process metrics; see selfmetrics.h. */
#include "api/selfmetrics.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct ProcStat {
    unsigned long long utime, stime; /* clock ticks */
    unsigned long long starttime;    /* clock ticks after boot */
    unsigned long long vsize;        /* bytes */
    long long rss;                   /* pages */
} ProcStat;

/* /proc/self/stat: the fields after the command name, which is in parentheses
 * and may itself hold spaces and parentheses (so: after the last ')'). */
static bool read_stat(ProcStat *ps)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    /* Fields 3 (state) to 24 (rss); 14, 15, 22, 23 and 24 are kept. */
    return p && sscanf(p + 1,
                       " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu %llu %lld",
                       &ps->utime, &ps->stime, &ps->starttime, &ps->vsize, &ps->rss) == 5;
}

/* The boot time in Unix seconds (btime in /proc/stat), or -1. */
static long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return -1;
    char line[256];
    long long btime = -1;
    while (btime < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lld", &btime) != 1)
            btime = -1;
    fclose(f);
    return btime;
}

/* Entries of /proc/self/fd, less the one this opendir holds; -1 if unreadable. */
static long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long long n = 0;
    const struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n > 0 ? n - 1 : 0;
}

static void gauge(FILE *f, const char *name, const char *help, double v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

void selfmetrics_write(FILE *f)
{
    fprintf(f, "# HELP leasegate_build_info The version of this leasegate (always 1).\n"
               "# TYPE leasegate_build_info gauge\nleasegate_build_info{version=\"%s\"} 1\n",
            LEASEGATE_VERSION);
    long ticks = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    ProcStat ps;
    if (ticks > 0 && page > 0 && read_stat(&ps)) {
        fprintf(f, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                   "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.17g\n",
                (double)(ps.utime + ps.stime) / (double)ticks);
        gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.", (double)ps.rss * (double)page);
        gauge(f, "process_virtual_memory_bytes", "Virtual memory size in bytes.", (double)ps.vsize);
        long long btime = boot_time();
        if (btime >= 0)
            gauge(f, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                  (double)btime + (double)ps.starttime / (double)ticks);
    }
    long long fds = open_fds();
    if (fds >= 0)
        gauge(f, "process_open_fds", "Number of open file descriptors.", (double)fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        gauge(f, "process_max_fds", "Maximum number of open file descriptors.", (double)rl.rlim_cur);
}
