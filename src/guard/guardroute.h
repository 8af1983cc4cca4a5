/*
 * guardroute — one --guard route: its prefix, its upstream, what a write
 * under it is bound to, and which methods it forwards. Pure data and its
 * parser, so that the flags (config.h) and the guard share one definition.
 *
 * Spec: PREFIX=UPSTREAM[,lock=NAME | ,election=NAME][,methods=M1+M2+...], or for an S3
 * bucket PREFIX=s3://BUCKET[/KEYPREFIX][,region=R][,endpoint=URL][,lock=NAME]
 * [,methods=...] (s3.h: the object's key is KEYPREFIX/ and the path below
 * PREFIX; region defaults to $AWS_REGION, which the caller fills in; the
 * endpoint to the region's AWS endpoint; methods only narrow GET+HEAD+PUT).
 *  - a path under PREFIX is bound to the lock its path below PREFIX names, or
 *    with lock=NAME every path is bound to lock NAME (the whole subtree is
 *    one resource: collection operations are allowed there), or with
 *    election=NAME (http(s) routes) to election NAME: a write needs the lease
 *    of its leader now (issue 40). Such a binding is keyed "@NAME"
 *    (GUARD_ELECTION_MARK: no lock name has it), so that its write order and
 *    its mark are apart from lock NAME's;
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
/* The first byte of a binding to an election (GuardRoute.lock): a byte no name has. */
#define GUARD_ELECTION_MARK '@'
/* The longest binding: the mark and a name of NAME_MAX_BYTES (names.h). */
#define GUARD_BINDING_MAX 257
#define GUARD_METHOD_MAX 15 /* bytes of a method name */

typedef enum GuardKind { GUARD_HTTP, GUARD_S3 } GuardKind;

typedef struct GuardRoute {
    GuardKind kind;
    char prefix[256];
    char upstream[1024]; /* as given: http(s)://... or s3://BUCKET[/KEYPREFIX] */
    /* S3 routes only. */
    char bucket[64];
    char keyprefix[512]; /* without leading or trailing '/'; "" for none */
    char region[64];     /* "" until the caller fills it from $AWS_REGION */
    char endpoint[512];  /* scheme://host[:port], no trailing '/'; "" until the region is known */
    char lock[258]; /* "" : bound by path; "@NAME": bound to election NAME */
    char methods[GUARD_MAX_METHODS][GUARD_METHOD_MAX + 1];
    size_t nmethods;
    char allow[GUARD_MAX_METHODS * (GUARD_METHOD_MAX + 2)]; /* "GET, HEAD, ..." for 405's Allow */
} GuardRoute;

/* Parses one --guard value into *r. False with one line in err otherwise.
 * Does not check the prefix against the API's paths (config's rule). */
bool guardroute_parse(const char *spec, GuardRoute *r, char *err, size_t errlen);
/* An S3 route without region= takes this one (from $AWS_REGION; NULL when
 * unset) and the endpoint follows. False with one line in err otherwise. */
bool guardroute_finish_s3(GuardRoute *r, const char *env_region, char *err, size_t errlen);
/* Routes given in this order (a before b) that cannot stand together: b
 * is never reached (a's prefix covers b's: the first matching route takes a
 * request), or the two reach the same backend objects (one upstream
 * path is within the other, by whole segments; an S3 route's objects are
 * its endpoint's /BUCKET/KEYPREFIX/) under different bindings, so that one
 * object would be protected by two locks. Upstreams are compared as written
 * but for the case of scheme and host. Both routes are finished
 * (guardroute_finish_s3). False with one line in err then. */
bool guardroute_compatible(const GuardRoute *a, const GuardRoute *b, char *err, size_t errlen);
/* The part of raw_uri (a request target the route matched) below the
 * route's prefix: "" or "?..." for an S3 route's bucket itself, which its
 * clients name without the prefix's last '/'. */
const char *guardroute_rest(const GuardRoute *route, const char *raw_uri);
/* Does the route forward `method`? */
bool guardroute_allows(const GuardRoute *r, const char *method);
/* GET, HEAD and OPTIONS: pass without a lease, never with a body. */
bool guardroute_is_read(const char *method);
/* The first of the n routes whose prefix the raw target (path and query, as
 * sent) is under, in the order given, or NULL. */
const GuardRoute *guardroute_match(const GuardRoute *routes, size_t n, const char *raw_uri);

#endif
