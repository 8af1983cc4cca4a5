/*
 * standby — what a gateway on etcd answers while it is not the leader. A
 * follower (one that knows the leader) forwards every request to the leader
 * (forward.h) and gives its answer back, so clients may use any gateway; a
 * candidate, a follower that cannot reach the leader, and one asked to
 * forward a request already forwarded answer 503 overloaded with
 * Retry-After: 1. Nothing of the lock space is answered from here: a standby
 * holds none of it.
 *
 * Answered here, whatever the role: GET /healthz (liveness: the role and the
 * leader's URL when known), GET /readyz (200 only while this gateway can
 * serve: it follows a leader whose own /readyz says 200, it reaches etcd,
 * its key file loaded and it is not draining; else 503 with the reason) and
 * GET /metrics.
 *
 * With --auth-file a standby checks every request's key itself before it
 * forwards it (the leader checks it again, with its scope): a key its own
 * file does not have gets 401 here, whatever the leader's file says, so a
 * key revoked on this gateway never passes it. Only whether the key is known
 * is checked here; its role and prefixes are the leader's to judge. While
 * the key file does not load (a reload that failed), requests that need a
 * key get 503 and /readyz says so.
 *
 * It runs libmicrohttpd on a thread of its own on the gateway's listening
 * socket, so that the main thread can campaign; when the gateway wins,
 * standby_stop hands the socket back, still listening, to the real server
 * (connections the standby had open are closed; clients retry).
 */
#ifndef LEASEGATE_STANDBY_H
#define LEASEGATE_STANDBY_H

#include <stdbool.h>

#include "leasegate/config.h"
#include "net/auth.h"
#include "net/hostcheck.h"
#include "net/tls.h"
#include "store/election.h"
#include "store/etcd.h"

typedef struct Standby Standby;

typedef struct StandbyOptions {
    const Config *cfg;      /* the flags (guard routes, --auth-metrics, limits): borrowed until standby_stop */
    Tls *tls;               /* HTTPS when it says so (the port's clients must not see its scheme change when
                               this gateway wins); forwards and leader probes trust tls->cacert. Borrowed. */
    const HostCheck *hosts; /* the Host names answered for (hostcheck.h), borrowed */
    const EtcdStats *etcd_stats; /* for /metrics, borrowed; NULL: none */
    AuthTable *keys;        /* --auth-file's keys (the standby takes a reference of its own), or NULL */
} StandbyOptions;

/* Serves on listen_fd (not taken over). NULL when libmicrohttpd refused
 * (tls_mhd_started says why) or out of memory. */
Standby *standby_start(int listen_fd, Election *e, const StandbyOptions *o);
/* The keys a reload loaded (a reference is taken; the old one dropped), or,
 * with error non-NULL, the reason the key file did not load: requests that
 * need a key are refused (503) until a reload succeeds. Any thread. */
void standby_set_keys(Standby *sb, AuthTable *keys, const char *error);
/* A planned stop began: /readyz answers 503 draining from now on; requests
 * are still forwarded until standby_stop. Any thread. */
void standby_drain(Standby *sb);
/* Stops answering and frees sb. true when the listening socket is still
 * open; false when libmicrohttpd could not let go of it (then it is closed). */
bool standby_stop(Standby *sb);

#endif
