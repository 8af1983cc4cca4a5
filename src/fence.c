/* fence — high-water marks in an ordered map; see include/leasegate/fence.h. */
#include "leasegate/fence.h"

#include <stdlib.h>
#include <string.h>

#include "leasegate/smap.h"

typedef struct Mark {
    uint64_t max_token;
    char resource[]; /* the map's key */
} Mark;

struct Fence {
    Smap *marks; /* resource -> Mark, owns the marks */
    size_t max_resources;
};

Fence *fence_new(size_t max_resources)
{
    Fence *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->marks = smap_new();
    if (!f->marks) {
        free(f);
        return NULL;
    }
    f->max_resources = max_resources;
    return f;
}

void fence_free(Fence *f)
{
    if (!f)
        return;
    smap_free(f->marks, free);
    free(f);
}

/* limit: refuse a new resource beyond max_resources (not for marks loaded from storage). */
static FenceResult find_or_create(Fence *f, const char *resource, bool limit, Mark **out)
{
    Mark *m = smap_get(f->marks, resource);
    if (!m) {
        if (limit && smap_len(f->marks) >= f->max_resources)
            return FENCE_OVERLOADED;
        size_t n = strlen(resource) + 1;
        m = malloc(sizeof *m + n);
        if (!m)
            return FENCE_NOMEM;
        m->max_token = 0;
        memcpy(m->resource, resource, n);
        if (!smap_insert(f->marks, m->resource, m)) {
            free(m);
            return FENCE_NOMEM;
        }
    }
    *out = m;
    return FENCE_ACCEPTED;
}

FenceResult fence_load(Fence *f, const char *resource, uint64_t max_token)
{
    Mark *m;
    FenceResult r = find_or_create(f, resource, false, &m);
    if (r == FENCE_ACCEPTED && max_token > m->max_token)
        m->max_token = max_token;
    return r;
}

FenceResult fence_check(Fence *f, const char *resource, uint64_t token, uint64_t *max_token,
                        bool *raised)
{
    *raised = false;
    Mark *m = smap_get(f->marks, resource);
    if (m && token < m->max_token) {
        *max_token = m->max_token;
        return FENCE_STALE;
    }
    FenceResult r = find_or_create(f, resource, true, &m);
    if (r != FENCE_ACCEPTED)
        return r;
    *raised = token > m->max_token;
    m->max_token = token;
    *max_token = token;
    return FENCE_ACCEPTED;
}

size_t fence_count(const Fence *f) { return smap_len(f->marks); }

void fence_remove(Fence *f, const char *resource)
{
    Mark *m = smap_get(f->marks, resource);
    if (m && smap_remove(f->marks, resource))
        free(m);
}

uint64_t fence_max(const Fence *f, const char *resource)
{
    const Mark *m = smap_get(f->marks, resource);
    return m ? m->max_token : 0;
}
