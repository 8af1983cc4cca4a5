/*
 * gateway — the whole server put together, and taken apart, in order:
 * storage -> commit writer -> lock table and fences loaded from storage ->
 * HTTP -> loop, the guard and its upstream calls; and back. The only module
 * that knows every other one (with runloop.h, which runs it).
 */
#ifndef LEASEGATE_GATEWAY_H
#define LEASEGATE_GATEWAY_H

#include "leasegate/config.h"
#include "leasegate/server.h"

/* Opens storage, loads state, starts the commit writer, HTTP and the loop.
 * With --store etcd:// it first campaigns, answering 503 until elected.
 * 0 or -1 (message on stderr; s->stopping set when a stop signal ended the
 * campaign); gateway_close undoes what was done either way. */
int gateway_open(Server *s, const Config *cfg);
void gateway_close(Server *s);
/* Loads --auth-file (and --s3-credentials) again: on SIGHUP (announce: over
 * etcd every other gateway is told to reload its own file), or when another
 * gateway reloaded. A file that does not load is not ignored: requests that
 * need a key get 503 and /readyz says so until a reload succeeds (the keys
 * loaded before may hold one just revoked). */
void gateway_reload_keys(Server *s, bool announce);
/* SIGTERM or SIGINT: with --drain-seconds, the first starts draining (not
 * ready, still serving: s->draining until s->drain_until_ms); otherwise, or
 * at the second, s->stopping. */
void gateway_stop_asked(Server *s);

#endif
