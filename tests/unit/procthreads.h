/* procthreads — how many threads this process has now (/proc/self/task), for
 * the unit tests that check a thread is or is not left behind. */
#ifndef LEASEGATE_TEST_PROCTHREADS_H
#define LEASEGATE_TEST_PROCTHREADS_H

#include <dirent.h>

static inline int proc_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

#endif
