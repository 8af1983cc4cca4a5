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
/* SIGHUP: loads --auth-file again; a file that does not load keeps the keys
 * there were (and says why on stderr). */
void gateway_reload_keys(Server *s);

#endif
