/* peers — connections and half-sent requests per peer; see peers.h. */
#include "net/peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/smap.h"

struct Peer {
    uint64_t connections, half_sent;
    char name[]; /* the map's key */
};

struct Peers {
    Smap *by_addr; /* name -> Peer, while it has a connection */
    size_t max_connections, max_half_sent;
    uint64_t refused_connections, refused_half_sent;
};

Peers *peers_new(size_t max_connections, size_t max_half_sent)
{
    Peers *p = calloc(1, sizeof *p);
    if (!p || !(p->by_addr = smap_new())) {
        free(p);
        return NULL;
    }
    p->max_connections = max_connections;
    p->max_half_sent = max_half_sent;
    return p;
}

void peers_free(Peers *p)
{
    if (!p)
        return;
    smap_free(p->by_addr, free);
    free(p);
}

/* An IPv4 address (4 bytes, network order) as a peer. */
static void ipv4_peer(const void *addr, char out[PEERS_ADDR_MAX])
{
    if (((const uint8_t *)addr)[0] == 127)
        snprintf(out, PEERS_ADDR_MAX, PEERS_LOOPBACK4);
    else if (!inet_ntop(AF_INET, addr, out, PEERS_ADDR_MAX))
        snprintf(out, PEERS_ADDR_MAX, "-");
}

void peers_addr(const struct sockaddr *sa, char out[PEERS_ADDR_MAX])
{
    if (sa && sa->sa_family == AF_INET) {
        ipv4_peer(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, out);
        return;
    }
    if (!sa || sa->sa_family != AF_INET6) {
        snprintf(out, PEERS_ADDR_MAX, "-");
        return;
    }
    struct in6_addr a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) { /* a dual-stack socket's IPv4 client: the same peer as over IPv4 */
        ipv4_peer(&a.s6_addr[12], out);
        return;
    }
    if (IN6_IS_ADDR_LOOPBACK(&a)) {
        snprintf(out, PEERS_ADDR_MAX, "::1");
        return;
    }
    memset(&a.s6_addr[8], 0, 8); /* one /64: what one machine or network usually has */
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &a, text, sizeof text);
    snprintf(out, PEERS_ADDR_MAX, "%s/64", text);
}

bool peers_admit(Peers *p, const struct sockaddr *sa)
{
    char name[PEERS_ADDR_MAX];
    peers_addr(sa, name);
    const Peer *peer = smap_get(p->by_addr, name);
    if (!peer)
        return true;
    if (peer->connections >= p->max_connections) {
        p->refused_connections++;
        return false;
    }
    if (peer->half_sent >= p->max_half_sent) {
        p->refused_half_sent++;
        return false;
    }
    return true;
}

Peer *peers_open(Peers *p, const struct sockaddr *sa, bool sending)
{
    char name[PEERS_ADDR_MAX];
    peers_addr(sa, name);
    Peer *peer = smap_get(p->by_addr, name);
    if (!peer) {
        size_t len = strlen(name);
        if (!(peer = calloc(1, sizeof *peer + len + 1)))
            return NULL;
        memcpy(peer->name, name, len + 1);
        if (!smap_insert(p->by_addr, peer->name, peer)) {
            free(peer);
            return NULL;
        }
    }
    peer->connections++;
    peer->half_sent += sending;
    return peer;
}

void peers_close(Peers *p, Peer *peer, bool sending)
{
    if (!peer)
        return;
    peer->connections--;
    if (sending)
        peer->half_sent--;
    if (!peer->connections) {
        smap_remove(p->by_addr, peer->name);
        free(peer);
    }
}

bool peers_request_begins(Peers *p, Peer *peer)
{
    if (!peer)
        return true;
    bool within = peer->half_sent < p->max_half_sent;
    peer->half_sent++;
    return within;
}

void peers_request_done(Peers *p, Peer *peer)
{
    (void)p;
    if (peer && peer->half_sent)
        peer->half_sent--;
}

uint64_t peers_refused_connections(const Peers *p) { return p->refused_connections; }
uint64_t peers_refused_half_sent(const Peers *p) { return p->refused_half_sent; }
size_t peers_count(const Peers *p) { return smap_len(p->by_addr); }
