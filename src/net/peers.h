/*
 * peers — each client address's connections and half-sent requests, so that
 * one peer cannot take every connection the server has (--max-connections):
 * a peer has at most --peer-max-connections open (waiting and parked ones
 * included) and at most --peer-max-half-sent requests begun and not complete
 * (a new connection counts as one until its first request is in: a client
 * that opens connections and sends nothing, or sends slowly, holds them).
 * A connection beyond either is closed as soon as it is accepted (nothing
 * has been asked yet that could be answered); a request that begins on an
 * open connection while its peer is at its half-sent share gets 429
 * peer_limit once its head is in.
 *
 * A peer is an IP address; an IPv6 address counts by its /64 (what one
 * machine or network usually has), and the whole of IPv4's loopback,
 * 127.0.0.0/8, is one peer (PEERS_LOOPBACK4): every address of it is this
 * machine, and a client that picked a new one for each connection would
 * otherwise have a share per address. An IPv4 client of a dual-stack socket
 * (an IPv4-mapped IPv6 address, ::ffff:a.b.c.d) is the peer it is over IPv4;
 * IPv6's loopback ::1 is one address, so one peer of its own. Behind a
 * reverse proxy every client is one peer: the proxy. Only the loop thread
 * calls these.
 */
#ifndef LEASEGATE_PEERS_H
#define LEASEGATE_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PEERS_ADDR_MAX 64
/* The peer every client from 127.0.0.0/8 is. */
#define PEERS_LOOPBACK4 "127.0.0.0/8"

typedef struct Peers Peers;
typedef struct Peer Peer;

/* NULL when out of memory. */
Peers *peers_new(size_t max_connections, size_t max_half_sent);
void peers_free(Peers *p);
/* The peer's name for an address: "1.2.3.4", "127.0.0.0/8" (every IPv4
 * loopback address), "::1", or "2001:db8:1:2::/64". */
void peers_addr(const struct sockaddr *sa, char out[PEERS_ADDR_MAX]);
/* May a new connection from addr be accepted? False when its peer is at a
 * share (counted in refused_connections / refused_half_sent). */
bool peers_admit(Peers *p, const struct sockaddr *sa);
/* A connection opened (sending: it counts as a half-sent request until its
 * first request is in) / closed. NULL when out of memory (not counted). */
Peer *peers_open(Peers *p, const struct sockaddr *sa, bool sending);
void peers_close(Peers *p, Peer *peer, bool sending);
/* A request began (true: within the share) or was complete. */
bool peers_request_begins(Peers *p, Peer *peer);
void peers_request_done(Peers *p, Peer *peer);
uint64_t peers_refused_connections(const Peers *p);
uint64_t peers_refused_half_sent(const Peers *p);
/* Peers with a connection open. */
size_t peers_count(const Peers *p);

#endif
