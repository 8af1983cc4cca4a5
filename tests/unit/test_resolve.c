/* Unit test of resolve and of h2c's connect: a name lookup that hangs does
 * not hold a call past its bounds (found by review: getaddrinfo ran before
 * any deadline). The hang is real: the test runs in network and mount
 * namespaces of its own, where /etc/resolv.conf names a DNS server on
 * 127.0.0.1 that this test binds and never answers. Skipped (77) where
 * the namespaces cannot be made (an unprivileged container). */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "monoms.h"
#include "procthreads.h"
#include "store/h2c.h"
#include "store/resolve.h"

/* Not in /etc/hosts: asked of the DNS server. */
#define HANGING_NAME "lookup-hangs.leasegate-test"
/* In /etc/hosts, with MANY_ADDRESSES addresses from 127.0.0.MANY_FIRST on. */
#define MANY_NAME "many.leasegate-test"
#define MANY_ADDRESSES 6
#define MANY_FIRST 2

static bool write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return false;
    bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    return close(fd) == 0 && ok;
}

/* Namespaces of our own, as root in them when not root outside: false
 * (with why) when the system does not allow them. */
static bool enter_namespaces(char *why, size_t len)
{
    if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) {
        uid_t uid = getuid();
        gid_t gid = getgid();
        char map[64];
        if (unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS) != 0) {
            snprintf(why, len, "unshare: %s", strerror(errno));
            return false;
        }
        snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
        bool ok = write_file("/proc/self/setgroups", "deny") && write_file("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
        if (!ok || !write_file("/proc/self/gid_map", map)) {
            snprintf(why, len, "user namespace maps: %s", strerror(errno));
            return false;
        }
    }
    /* The bind mount below must stay in this namespace. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, len, "private mounts: %s", strerror(errno));
        return false;
    }
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    bool up = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags |= IFF_UP, ioctl(s, SIOCSIFFLAGS, &ifr) == 0);
    if (s >= 0)
        close(s);
    if (!up) {
        snprintf(why, len, "loopback up: %s", strerror(errno));
        return false;
    }
    return true;
}

/* target, in this namespace only, reads text (a file of dir's, bind-mounted). */
static bool mount_file(const char *dir, const char *target, const char *text, char *why, size_t len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, strrchr(target, '/') + 1);
    if (!write_file(path, text) || mount(path, target, NULL, MS_BIND, NULL) != 0) {
        snprintf(why, len, "bind-mount %s: %s", target, strerror(errno));
        unlink(path);
        return false;
    }
    unlink(path); /* the mount keeps it */
    return true;
}

/* /etc/resolv.conf, in this namespace only, names 127.0.0.1 with a long
 * timeout; dns is the bound, silent server socket. /etc/hosts gives
 * MANY_NAME the addresses MANY_FIRST.. (MANY_ADDRESSES of them). */
static bool silent_dns(const char *dir, int *dns, char *why, size_t len)
{
    char hosts[512] = "127.0.0.1 localhost\n";
    for (int i = 0; i < MANY_ADDRESSES; i++)
        snprintf(hosts + strlen(hosts), sizeof hosts - strlen(hosts), "127.0.0.%d %s\n", MANY_FIRST + i, MANY_NAME);
    if (!mount_file(dir, "/etc/resolv.conf", "nameserver 127.0.0.1\noptions timeout:20 attempts:1\n", why, len) ||
        !mount_file(dir, "/etc/hosts", hosts, why, len))
        return false;
    *dns = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (*dns < 0 || bind(*dns, (struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(why, len, "bind 127.0.0.1:53: %s", strerror(errno));
        return false;
    }
    return true;
}

/* A listener on 127.0.0.last:port (port "0": a free one, then written
 * there) whose accept queue is full (backlog 0, and *filler's connection in
 * it, never accepted): it drops every further SYN, so a connect to it
 * hangs. -1 on failure. */
static int full_listener(int last, char *port, int *filler)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)),
                            .sin_addr.s_addr = htonl(0x7f000000u | (unsigned)last)};
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    *filler = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || *filler < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 0) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0 || connect(*filler, (struct sockaddr *)&a, al) != 0) {
        fprintf(stderr, "listener on 127.0.0.%d: %s\n", last, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(port, 16, "%u", (unsigned)ntohs(a.sin_port));
    return fd;
}

static bool cancel_now(void *ud)
{
    int *asked = ud;
    ++*asked;
    return true;
}

int main(void)
{
    char dir[] = "/tmp/lg-resolve-XXXXXX", why[300];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int dns = -1;
    bool ready = enter_namespaces(why, sizeof why) && silent_dns(dir, &dns, why, sizeof why);
    rmdir(dir);
    if (!ready) {
        printf("SKIPPED: no namespaces to make a DNS server hang in (%s)\n", why);
        return 77;
    }
    char err[300];
    struct addrinfo *res = NULL;

    /* A numeric address asks no resolver (the one here would hang). */
    CHECK(resolve_tcp("127.0.0.1", "2379", -1, 100, NULL, NULL, NULL, &res, err, sizeof err) == RESOLVE_OK);
    CHECK(res && res->ai_family == AF_INET);
    freeaddrinfo(res);
    CHECK(resolve_tcp("::1", "2379", -1, 100, NULL, NULL, NULL, &res, err, sizeof err) == RESOLVE_OK);
    CHECK(res && res->ai_family == AF_INET6);
    freeaddrinfo(res);
    /* A name of /etc/hosts, looked up on glibc's thread, its answer handed over. */
    CHECK(resolve_tcp("localhost", "2379", mono_ms() + 10000, 100, NULL, NULL, NULL, &res, err, sizeof err) ==
          RESOLVE_OK);
    CHECK(res != NULL);
    freeaddrinfo(res);

    /* A lookup that hangs ends at the deadline, and when cancelled. */
    ResolveResult r = resolve_tcp(HANGING_NAME, "2379", mono_ms() + 300, 100, NULL, NULL, NULL, &res, err, sizeof err);
    CHECK(r == RESOLVE_TIMEOUT && res == NULL);
    CHECK(strstr(err, HANGING_NAME) != NULL);
    int asked = 0;
    r = resolve_tcp(HANGING_NAME, "2379", -1, 100, cancel_now, &asked, NULL, &res, err, sizeof err);
    CHECK(r == RESOLVE_CANCELLED && asked == 1);

    /* A slot keeps the lookup given up on: the next try of the same name waits for
     * it, so a hung resolver holds one thread, not one more at every try. */
    ResolvePending *pending = NULL;
    int before = proc_threads();
    for (int i = 0; i < 5; i++) {
        r = resolve_tcp(HANGING_NAME, "2379", mono_ms() + 100, 50, NULL, NULL, &pending, &res, err, sizeof err);
        CHECK(r == RESOLVE_TIMEOUT && pending != NULL);
    }
    CHECK(proc_threads() == before + 1);
    /* Another name drops it and starts its own. */
    r = resolve_tcp("localhost", "2379", mono_ms() + 10000, 100, NULL, NULL, &pending, &res, err, sizeof err);
    CHECK(r == RESOLVE_OK && res != NULL && pending == NULL);
    freeaddrinfo(res);
    resolve_pending_free(pending);

    /* h2c: the connect's bound covers the lookup; so does the call's. */
    H2c *h = h2c_new(NULL);
    H2cAnswer a;
    CHECK(h != NULL);
    H2cFailure f = h2c_call(h, HANGING_NAME, "2379", "/etcdserverpb.KV/Txn", NULL, "", 0, 300, 0, NULL, NULL, &a,
                            err, sizeof err);
    CHECK(f == H2C_TIMEOUT);
    if (f != H2C_TIMEOUT)
        fprintf(stderr, "h2c_call (connect bound): %d: %s\n", (int)f, err);
    f = h2c_call(h, HANGING_NAME, "2379", "/etcdserverpb.KV/Txn", NULL, "", 0, 60000, 300, NULL, NULL, &a, err,
                 sizeof err);
    CHECK(f == H2C_TIMEOUT);
    h2c_free(h);

    /* h2c: one deadline for the whole connect, not one per address (found by
     * the transport review): every address of MANY_NAME takes no connection
     * (a listener whose accept queue is full drops the SYN), and the connect
     * ends by its bound (2 s; allowed 8 s, CPU is shared), not after 2 s for
     * each of the 6 addresses. */
    int listeners[MANY_ADDRESSES], fillers[MANY_ADDRESSES];
    char port[16] = "0";
    bool full = true;
    for (int i = 0; i < MANY_ADDRESSES; i++) {
        listeners[i] = full_listener(MANY_FIRST + i, port, &fillers[i]);
        full = full && listeners[i] >= 0;
    }
    CHECK(full);
    CHECK(resolve_tcp(MANY_NAME, port, mono_ms() + 10000, 100, NULL, NULL, NULL, &res, err, sizeof err) == RESOLVE_OK);
    int found = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        found++;
    freeaddrinfo(res);
    CHECK(found == MANY_ADDRESSES);
    h = h2c_new(NULL);
    CHECK(h != NULL);
    int64_t t0 = mono_ms();
    f = h2c_call(h, MANY_NAME, port, "/etcdserverpb.KV/Txn", NULL, "", 0, 2000, 0, NULL, NULL, &a, err, sizeof err);
    int64_t took = mono_ms() - t0;
    printf("connect to %d addresses that take no connection: %d after %lld ms: %s\n", found, (int)f,
           (long long)took, err);
    CHECK(f == H2C_TIMEOUT);
    CHECK(took < 8000);
    h2c_free(h);
    for (int i = 0; i < MANY_ADDRESSES; i++) {
        if (listeners[i] >= 0)
            close(listeners[i]);
        if (fillers[i] >= 0)
            close(fillers[i]);
    }
    close(dns);
    return check_report("resolve");
}
