/*
 * listener — the server's listening socket: HOST:PORT resolved (IPv4, IPv6
 * in brackets, or a host name), bound and listening, with the reason in
 * words when that fails. libmicrohttpd accepts on the socket it is given.
 */
#ifndef LEASEGATE_LISTENER_H
#define LEASEGATE_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "HOST:PORT" or "[IPV6]:PORT" into host (without brackets) and port; false
 * when malformed. Resolution happens in listener_open. */
bool listener_parse(const char *spec, char *host, size_t hostlen, uint16_t *port);

/* Does host reach beyond loopback: it resolves, and to some address other
 * than 127.0.0.0/8 or ::1 (also IPv4-mapped)? A name that does not resolve
 * is false here: listener_open says why it cannot listen there. */
bool listener_beyond_loopback(const char *host);

/* A non-blocking socket listening on host:port (the first address the name
 * resolves to that can be bound), or -1 with the reason in err. */
int listener_open(const char *host, uint16_t port, int backlog, char *err, size_t errlen);

/* "127.0.0.1:7400" or "[::1]:7400" for the address fd is bound to; "?" when unknown. */
void listener_name(int fd, char *out, size_t outlen);

#endif
