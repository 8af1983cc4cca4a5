/*
 * guardpath — what the guard lets through to an upstream, as pure functions:
 * canonical request targets, the lock a path is bound to, and header values.
 *
 * A target is forwarded only in canonical form, so that the upstream cannot
 * resolve it to an object other than the one its lock protects: no dot
 * segments ("." or "..", also percent-encoded), no empty segments ("a//b",
 * which servers merge), no backslash, no ";" path parameters, no encoded
 * "/", "\", ";", "%", NUL or control byte, no needlessly encoded unreserved
 * character ("%41"), and nothing outside RFC 3986's path characters.
 */
#ifndef LEASEGATE_GUARDPATH_H
#define LEASEGATE_GUARDPATH_H

#include <stdbool.h>
#include <stddef.h>

/* `rest` is the request target after the guard's prefix (path, then
 * optionally "?query"). NULL when canonical, else what is wrong. */
const char *guardpath_problem(const char *rest);
/* guardpath_problem for the rest after `prefix`, which may leave the rest a
 * leading '/' only when it does not end in one itself: "/store/" + "/a" is
 * "/store//a", an empty segment, and a route with a longer prefix
 * ("/store/a/") would never see the path that names its resources. */
const char *guardpath_rest_problem(const char *prefix, const char *rest);
/* The lock a write to `rest` is bound to when the guard has no fixed lock:
 * the path below the prefix without its query (one leading "/" dropped, each
 * "%3A" read as the ':' it encodes), if it is a valid lock name. NULL and *problem set when the path cannot name a
 * lock. */
const char *guardpath_lock(const char *rest, char *out, size_t outlen, const char **problem);
/* in[0..n) with each "%3A" (either case) read as the ':' it encodes, into
 * out (outlen bytes, NUL-terminated), its length in *len: the one form in
 * which the guard names the object of a path that may spell ':' either way.
 * False when it does not fit (out then holds no string). */
bool guardpath_colons(const char *in, size_t n, char *out, size_t outlen, size_t *len);
/* NULL when a header value of len bytes may be forwarded, else what is wrong
 * (a CR, LF, NUL or other control byte except TAB). */
const char *guardpath_header_problem(const char *value, size_t len);
/* The Destination of a COPY or MOVE: it must be an absolute path under
 * `prefix` (matched by whole segments, as guard routes are; the rest judged
 * by guardpath_rest_problem) or an absolute
 * http(s) URI whose authority is exactly `host` (the request's Host, compared
 * without regard to case; NULL: none was sent), canonical by the rules above,
 * without a query or fragment. Then the part of its path below the prefix is
 * copied to `rest` and returned; NULL with *problem set otherwise. */
const char *guardpath_destination(const char *dest, const char *host, const char *prefix, char *rest,
                                  size_t restlen, const char **problem);
/* Do two canonical rests (each up to its '?', if any) name one resource as
 * a backend decodes them: equal but for percent-encodings ("a*b", "a%2Ab"
 * and "a%2ab" are one file to nginx)? */
bool guardpath_same_resource(const char *a, const char *b);
/* Does a WebDAV If header (RFC 4918 10.4) name a resource of its own: a
 * tagged list ("<URI> (...)"), rather than only state tokens of the target
 * ("(<urn:...>)")? True also for what does not parse. */
bool guardpath_if_names_resource(const char *value);

#endif
