/* guardshare — calls per key and per peer; see guardshare.h. */
#include "guard/guardshare.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/smap.h"

/* One key's or one peer's count; in its map only while it is above zero. */
struct ShareUse {
    Smap *map;
    size_t calls;
    char name[]; /* the map's key */
};

struct GuardShares {
    Smap *keys, *peers, *routes;
};

GuardShares *guardshare_new(void)
{
    GuardShares *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->keys = smap_new();
    g->peers = smap_new();
    g->routes = smap_new();
    if (!g->keys || !g->peers || !g->routes) {
        guardshare_free(g);
        return NULL;
    }
    return g;
}

void guardshare_free(GuardShares *g)
{
    if (!g)
        return;
    smap_free(g->keys, free);
    smap_free(g->peers, free);
    smap_free(g->routes, free);
    free(g);
}

static size_t calls_of(Smap *map, const char *name)
{
    const ShareUse *u = name ? smap_get(map, name) : NULL;
    return u ? u->calls : 0;
}

static ShareUse *use_of(Smap *map, const char *name)
{
    ShareUse *u = smap_get(map, name);
    if (u)
        return u;
    size_t n = strlen(name) + 1;
    if (!(u = calloc(1, sizeof *u + n)))
        return NULL;
    u->map = map;
    memcpy(u->name, name, n);
    if (!smap_insert(map, u->name, u)) {
        free(u);
        return NULL;
    }
    return u;
}

static void drop(ShareUse *u)
{
    if (u && --u->calls == 0) {
        smap_remove(u->map, u->name);
        free(u);
    }
}

ShareResult guardshare_take(GuardShares *g, const char *key, size_t key_max, const char *peer, size_t peer_max,
                            const char *route, size_t route_max, GuardTicket *t)
{
    if (key && calls_of(g->keys, key) >= key_max)
        return SHARE_KEY_FULL;
    if (calls_of(g->peers, peer) >= peer_max)
        return SHARE_PEER_FULL;
    if (calls_of(g->routes, route) >= route_max)
        return SHARE_ROUTE_FULL;
    ShareUse *k = key ? use_of(g->keys, key) : NULL;
    if (key && !k)
        return SHARE_NOMEM;
    if (k)
        k->calls++;
    ShareUse *p = use_of(g->peers, peer);
    if (!p) {
        drop(k);
        return SHARE_NOMEM;
    }
    p->calls++;
    ShareUse *r = use_of(g->routes, route);
    if (!r) {
        drop(k);
        drop(p);
        return SHARE_NOMEM;
    }
    r->calls++;
    t->key = k;
    t->peer = p;
    t->route = r;
    return SHARE_OK;
}

void guardshare_give(GuardTicket *t)
{
    drop(t->key);
    drop(t->peer);
    drop(t->route);
    t->key = t->peer = t->route = NULL;
}

