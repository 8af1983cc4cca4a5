/* Unit test of peers.c: which addresses are one peer, and the one share they then have. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "net/peers.h"

static void expect(int family, const char *ip, const char *peer)
{
    struct sockaddr_storage ss = {.ss_family = (sa_family_t)family};
    void *addr = family == AF_INET ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                                   : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    CHECK(inet_pton(family, ip, addr) == 1);
    char out[PEERS_ADDR_MAX];
    peers_addr((const struct sockaddr *)&ss, out);
    if (strcmp(out, peer))
        fprintf(stderr, "%s: peer %s, expected %s\n", ip, out, peer);
    CHECK(!strcmp(out, peer));
}

static struct sockaddr_storage addr_of(int family, const char *ip)
{
    struct sockaddr_storage ss = {.ss_family = (sa_family_t)family};
    void *addr = family == AF_INET ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                                   : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    CHECK(inet_pton(family, ip, addr) == 1);
    return ss;
}

/* Ten loopback addresses with a half-sent request each: one peer's share, not ten. */
static void test_loopback_shares_one_share(void)
{
    Peers *p = peers_new(100, 3);
    CHECK(p != NULL);
    if (!p)
        return;
    Peer *open[10];
    size_t admitted = 0;
    for (int i = 0; i < 10; i++) {
        char ip[32];
        snprintf(ip, sizeof ip, "127.0.0.%d", i + 2);
        struct sockaddr_storage ss = addr_of(AF_INET, ip);
        if (peers_admit(p, (const struct sockaddr *)&ss))
            open[admitted++] = peers_open(p, (const struct sockaddr *)&ss, true);
    }
    CHECK(admitted == 3);
    CHECK(peers_count(p) == 1);
    CHECK(peers_refused_half_sent(p) == 7);
    /* Over a dual-stack socket, as an IPv4-mapped address: the same peer. */
    struct sockaddr_storage mapped = addr_of(AF_INET6, "::ffff:127.9.9.9");
    CHECK(!peers_admit(p, (const struct sockaddr *)&mapped));
    /* ::1 and any other address are peers of their own. */
    struct sockaddr_storage v6 = addr_of(AF_INET6, "::1"), other = addr_of(AF_INET, "10.0.0.1");
    CHECK(peers_admit(p, (const struct sockaddr *)&v6));
    CHECK(peers_admit(p, (const struct sockaddr *)&other));
    for (size_t i = 0; i < admitted; i++)
        peers_close(p, open[i], true);
    CHECK(peers_count(p) == 0);
    peers_free(p);
}

int main(void)
{
    expect(AF_INET, "127.0.0.1", "127.0.0.0/8");
    expect(AF_INET, "127.0.0.2", "127.0.0.0/8");
    expect(AF_INET, "127.255.255.254", "127.0.0.0/8");
    expect(AF_INET, "128.0.0.1", "128.0.0.1");
    expect(AF_INET, "10.1.2.3", "10.1.2.3");
    expect(AF_INET6, "::ffff:127.0.0.1", "127.0.0.0/8");
    expect(AF_INET6, "::ffff:127.3.2.1", "127.0.0.0/8");
    expect(AF_INET6, "::ffff:10.1.2.3", "10.1.2.3");
    expect(AF_INET6, "::1", "::1");
    expect(AF_INET6, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64");
    char out[PEERS_ADDR_MAX];
    peers_addr(NULL, out);
    CHECK(!strcmp(out, "-"));
    test_loopback_shares_one_share();
    return check_report("test_peers");
}
