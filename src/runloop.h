/*
 * runloop — what the server's one thread does on each wake-up, in order:
 * sleep in the loop (loop.h) until the next deadline (a lease expiry, a wait
 * timeout, an upstream call's, libmicrohttpd's own); take in a finished
 * commit (releasing the replies it held), signals and socket events; fire due
 * deadlines; run libmicrohttpd; hand the pending changes to the commit writer.
 * Then the ordered shutdown.
 */
#ifndef LEASEGATE_RUNLOOP_H
#define LEASEGATE_RUNLOOP_H

#include "leasegate/server.h"

/* Runs until SIGINT/SIGTERM or a storage failure. Returns the exit status. */
int runloop_run(Server *s);

#endif
