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
#include "procthreads.h"
#include "store/h2c.h"
#include "store/resolve.h"

/* Not in /etc/hosts: asked of the DNS server. */
#define HANGING_NAME "lookup-hangs.leasegate-test"

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

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

/* /etc/resolv.conf, in this namespace only, names 127.0.0.1 with a long
 * timeout; dns is the bound, silent server socket. */
static bool silent_dns(const char *dir, int *dns, char *why, size_t len)
{
    char conf[4200];
    snprintf(conf, sizeof conf, "%s/resolv.conf", dir);
    if (!write_file(conf, "nameserver 127.0.0.1\noptions timeout:20 attempts:1\n") ||
        mount(conf, "/etc/resolv.conf", NULL, MS_BIND, NULL) != 0) {
        snprintf(why, len, "bind-mount resolv.conf: %s", strerror(errno));
        unlink(conf);
        return false;
    }
    unlink(conf); /* the mount keeps it */
    *dns = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (*dns < 0 || bind(*dns, (struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(why, len, "bind 127.0.0.1:53: %s", strerror(errno));
        return false;
    }
    return true;
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
    close(dns);
    return check_report("resolve");
}
