/*
 * guardroute — one --guard route: its prefix, its upstream, what a write
 * under it is bound to, and which methods it forwards. Pure data and its
 * parser, so that the flags (config.h) and the guard share one definition.
 *
 * Spec: PREFIX=UPSTREAM[,lock=NAME][,methods=M1+M2+...]
 *  - a path under PREFIX is bound to the lock its path below PREFIX names, or
 *    with lock=NAME every path is bound to lock NAME (the whole subtree is
 *    one resource: collection operations are allowed there);
 *  - methods= replaces the default list GET, HEAD, OPTIONS, PUT, POST, PATCH,
 *    DELETE. GET, HEAD and OPTIONS are reads; every other listed method is a
 *    write, which needs the bound lock's lease. A method not listed gets 405.
 *    CONNECT and TRACE are never forwarded (a tunnel; an echo of the request).
 */
#ifndef LEASEGATE_GUARDROUTE_H
#define LEASEGATE_GUARDROUTE_H

#include <stdbool.h>
#include <stddef.h>

#define GUARD_MAX_METHODS 16
#define GUARD_METHOD_MAX 15 /* bytes of a method name */

typedef struct GuardRoute {
    char prefix[256];
    char upstream[1024];
    char lock[257]; /* "" : bound by path */
    char methods[GUARD_MAX_METHODS][GUARD_METHOD_MAX + 1];
    size_t nmethods;
    char allow[GUARD_MAX_METHODS * (GUARD_METHOD_MAX + 2)]; /* "GET, HEAD, ..." for 405's Allow */
} GuardRoute;

/* Parses one --guard value into *r. False with one line in err otherwise.
 * Does not check the prefix against the API's paths (config's rule). */
bool guardroute_parse(const char *spec, GuardRoute *r, char *err, size_t errlen);
/* Does the route forward `method`? */
bool guardroute_allows(const GuardRoute *r, const char *method);
/* GET, HEAD and OPTIONS: pass without a lease, never with a body. */
bool guardroute_is_read(const char *method);

#endif
