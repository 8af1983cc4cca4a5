/*
 * jsondump — a jansson value as compact JSON text, whole or not at all.
 *
 * jansson 2.14's json_dumps drops an object key whose copy fails for lack of
 * memory and goes on, so a failed allocation can yield a text with a member
 * missing its name ("seq":3,":1795516541892) instead of NULL. Sent to a
 * client that is a malformed answer; stored (the etcd store's records) it is
 * a lock space the next leader cannot load. jsondump_whole measures the
 * text with json_dumpb, then writes it into a buffer of exactly that size,
 * which allocates nothing for the text itself: a drop in either pass makes
 * the two sizes differ, and the result is NULL.
 */
#ifndef LEASEGATE_JSONDUMP_H
#define LEASEGATE_JSONDUMP_H

#include <jansson.h>

/* A new NUL-terminated text (the caller frees it), or NULL when out of
 * memory or json is NULL. flags as for json_dumps. */
char *jsondump_whole(const json_t *json, size_t flags);

#endif
