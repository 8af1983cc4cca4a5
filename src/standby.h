/*
 * standby — what a gateway on etcd answers while it is not the leader. A
 * follower (one that knows the leader) forwards every request to the leader
 * (forward.h) and gives its answer back, so clients may use any gateway; a
 * candidate, a follower that cannot reach the leader, and one asked to
 * forward a request already forwarded answer 503 overloaded with
 * Retry-After: 1. GET /healthz is always answered here: the role (candidate
 * or follower) and the leader's URL when known. Nothing of the lock space is
 * answered from here: a standby holds none of it.
 *
 * It runs libmicrohttpd on a thread of its own on the gateway's listening
 * socket, so that the main thread can campaign; when the gateway wins,
 * standby_stop hands the socket back, still listening, to the real server
 * (connections the standby had open are closed; clients retry).
 */
#ifndef LEASEGATE_STANDBY_H
#define LEASEGATE_STANDBY_H

#include <stdbool.h>

#include "net/auth.h"
#include "net/hostcheck.h"
#include "net/tls.h"
#include "store/election.h"

typedef struct Standby Standby;

/* Serves on listen_fd (not taken over), over HTTPS when tls says so (the
 * port's clients must not see its scheme change when this gateway wins);
 * forwards trust tls->cacert. NULL when libmicrohttpd refused
 * (tls_mhd_started says why). tls is borrowed until standby_stop. */
/* metrics_keys: with --auth-metrics, the keys /healthz and /metrics need
 * (read-only while the standby runs: SIGHUP is read only once serving), else NULL.
 * hosts: the Host names answered for (hostcheck.h), borrowed until standby_stop. */
Standby *standby_start(int listen_fd, Election *e, unsigned max_connections, unsigned idle_timeout_s, Tls *tls,
                       const AuthTable *metrics_keys, const HostCheck *hosts);
/* Stops answering and frees sb. true when the listening socket is still
 * open; false when libmicrohttpd could not let go of it (then it is closed). */
bool standby_stop(Standby *sb);

#endif
