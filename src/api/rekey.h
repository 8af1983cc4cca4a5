/*
 * rekey — SIGHUP loaded a new key table (s->auth): what a key removed from
 * it, or narrowed so that it no longer covers it, holds open ends now, not
 * when it times out: waiting acquires, long-polls and watches answer 401
 * (the key was removed, or the file gives its name another key) or 403 (out
 * of its role or prefixes now); event streams get an `event: unauthorized`
 * and end. Requests a key still covers go on under the key they came with.
 */
#ifndef LEASEGATE_REKEY_H
#define LEASEGATE_REKEY_H

#include "net/http.h"

void rekey_reloaded(Server *s);

#endif
