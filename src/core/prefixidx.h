/*
 * prefixidx — subscribers by name prefix: who wants to hear of a name.
 *
 * Readers of the events (long-polls and streams, events.h) each follow the
 * lock names that start with one prefix ("" for every name). A published
 * event must reach exactly the readers whose prefix starts its lock's name,
 * and cost nothing for the others, however many there are: so readers are
 * kept by prefix, and an event looks up each prefix of its name for which at
 * least one reader exists (at most NAME_MAX + 1 lengths, each an O(log n)
 * lookup), never the readers one by one.
 *
 * Subscribers are embedded in their owners (a PrefixSub), which say when
 * they come and go. No HTTP, JSON or SQL; only the loop thread uses it.
 */
#ifndef LEASEGATE_PREFIXIDX_H
#define LEASEGATE_PREFIXIDX_H

#include <stdbool.h>
#include <stddef.h>

#include "leasegate/dlist.h"

/* The longest prefix: a lock name's length (names.h). */
#define PREFIXIDX_MAX 256

typedef struct PrefixIndex PrefixIndex;

typedef struct PrefixSub {
    DLink link;             /* in its prefix's list, while subscribed */
    struct PrefixGroup *on; /* the prefix's entry; NULL while not subscribed */
} PrefixSub;

/* NULL when out of memory. */
PrefixIndex *prefixidx_new(void);
/* After every subscriber left. */
void prefixidx_free(PrefixIndex *x);
/* sub follows names starting with prefix ("" or NULL: every name; at most
 * PREFIXIDX_MAX bytes). False when out of memory (sub is not subscribed). */
bool prefixidx_add(PrefixIndex *x, PrefixSub *sub, const char *prefix);
/* No-op when sub is not subscribed. */
void prefixidx_remove(PrefixIndex *x, PrefixSub *sub);
/* Calls fn for every subscriber whose prefix starts `name`, longest prefix
 * last. fn must not add or remove subscribers. */
void prefixidx_match(const PrefixIndex *x, const char *name, void (*fn)(void *ud, PrefixSub *sub), void *ud);

#endif
