/* prefixidx — subscribers by name prefix; see prefixidx.h. */
#include "core/prefixidx.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/smap.h"

/* The subscribers of one prefix. */
typedef struct PrefixGroup {
    DList subs;    /* PrefixSub.link */
    size_t len;    /* strlen(prefix) */
    char prefix[]; /* the map's key */
} PrefixGroup;

struct PrefixIndex {
    Smap *groups;                         /* prefix -> PrefixGroup, while it has subscribers */
    uint32_t by_len[PREFIXIDX_MAX + 1];   /* groups per prefix length: the lengths worth looking up */
    size_t count;                         /* subscribers */
};

PrefixIndex *prefixidx_new(void)
{
    PrefixIndex *x = calloc(1, sizeof *x);
    if (!x || !(x->groups = smap_new())) {
        free(x);
        return NULL;
    }
    return x;
}

void prefixidx_free(PrefixIndex *x)
{
    if (!x)
        return;
    smap_free(x->groups, free);
    free(x);
}

bool prefixidx_add(PrefixIndex *x, PrefixSub *sub, const char *prefix)
{
    if (!prefix)
        prefix = "";
    size_t len = strlen(prefix);
    if (len > PREFIXIDX_MAX)
        return false;
    PrefixGroup *g = smap_get(x->groups, prefix);
    if (!g) {
        if (!(g = calloc(1, sizeof *g + len + 1)))
            return false;
        memcpy(g->prefix, prefix, len + 1);
        g->len = len;
        if (!smap_insert(x->groups, g->prefix, g)) {
            free(g);
            return false;
        }
        x->by_len[len]++;
    }
    dlist_append(&g->subs, &sub->link);
    sub->on = g;
    x->count++;
    return true;
}

void prefixidx_remove(PrefixIndex *x, PrefixSub *sub)
{
    PrefixGroup *g = sub->on;
    if (!g)
        return;
    dlist_remove(&g->subs, &sub->link);
    sub->on = NULL;
    x->count--;
    if (g->subs.len)
        return;
    x->by_len[g->len]--;
    smap_remove(x->groups, g->prefix);
    free(g);
}

void prefixidx_match(const PrefixIndex *x, const char *name, void (*fn)(void *ud, PrefixSub *sub), void *ud)
{
    if (!x->count)
        return;
    char key[PREFIXIDX_MAX + 1];
    size_t n = strnlen(name, PREFIXIDX_MAX);
    memcpy(key, name, n);
    key[n] = '\0';
    for (size_t len = 0; len <= n; len++) {
        if (!x->by_len[len])
            continue;
        char kept = key[len];
        key[len] = '\0';
        PrefixGroup *g = smap_get(x->groups, key);
        key[len] = kept;
        if (!g)
            continue;
        for (DLink *l = g->subs.head; l; l = l->next)
            fn(ud, DLIST_ITEM(l, PrefixSub, link));
    }
}
