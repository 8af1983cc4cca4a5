/* etcd_auth — the etcd user of --etcd-auth-file; see etcd_auth.h. */
#include "store/etcd_auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* volatile: the compiler may not drop the stores to memory about to be freed. */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *b = p;
    while (n--)
        *b++ = 0;
}

/* The first line of text (without its end, and without a trailing '\r') as
 * USER:PASSWORD into a; false with why in err. */
static bool parse(EtcdAuth *a, const char *text, char *err, size_t errlen)
{
    size_t len = strcspn(text, "\n");
    if (len && text[len - 1] == '\r')
        len--;
    const char *colon = memchr(text, ':', len);
    size_t ulen = colon ? (size_t)(colon - text) : 0, plen = colon ? len - ulen - 1 : 0;
    if (!colon || ulen == 0 || plen == 0) {
        snprintf(err, errlen, "the first line is not USER:PASSWORD");
        return false;
    }
    if (ulen >= sizeof a->user || plen >= sizeof a->password) {
        snprintf(err, errlen, "the user name (at most %zu bytes) or the password (at most %zu) is too long",
                 sizeof a->user - 1, sizeof a->password - 1);
        return false;
    }
    memcpy(a->user, text, ulen);
    memcpy(a->password, colon + 1, plen);
    return true;
}

EtcdAuth *etcd_auth_load(const char *path, char *warn, size_t warnlen, char *err, size_t errlen)
{
    warn[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    bool stat_ok = fstat(fileno(f), &st) == 0;
    if (!stat_ok || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: %s", path, !stat_ok ? strerror(errno) : "not a regular file");
        fclose(f);
        return NULL;
    }
    /* Whoever may write it may log the gateways in as a user of their own. */
    if (st.st_mode & 022) {
        snprintf(err, errlen, "%s: refused: it is writable by %s (mode %04o); chmod 600 %s", path,
                 (st.st_mode & 022) == 022 ? "its group and others" : st.st_mode & 020 ? "its group" : "others",
                 (unsigned)(st.st_mode & 07777), path);
        fclose(f);
        return NULL;
    }
    /* Its group may read it: the service's own group, as the packaged unit
     * runs (a root-owned 0640 file). */
    if (st.st_mode & 004)
        snprintf(warn, warnlen, "%s may be read by others (mode %04o): it holds an etcd password; chmod o-r %s",
                 path, (unsigned)(st.st_mode & 07777), path);
    char text[ETCD_AUTH_MAX_FILE + 1];
    size_t n = fread(text, 1, sizeof text - 1, f);
    bool bad = ferror(f) || !feof(f);
    fclose(f);
    text[n] = '\0';
    EtcdAuth *a = bad || memchr(text, '\0', n) ? NULL : calloc(1, sizeof *a);
    char why[200];
    if (!a || !parse(a, text, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path,
                 bad ? "cannot be read whole (at most 4 KiB)" : !a && !memchr(text, '\0', n) ? "out of memory"
                 : !a ? "holds a NUL byte" : why);
        wipe(text, sizeof text);
        etcd_auth_free(a);
        return NULL;
    }
    wipe(text, sizeof text);
    a->path = path;
    return a;
}

void etcd_auth_free(EtcdAuth *a)
{
    if (!a)
        return;
    wipe(a, sizeof *a);
    free(a);
}

bool etcd_auth_retry(const char *err)
{
    return strstr(err, "invalid auth token") || strstr(err, "revision of auth store is old") ||
           strstr(err, "user name is empty");
}

bool etcd_auth_off(const char *err) { return strstr(err, "authentication is not enabled") != NULL; }
