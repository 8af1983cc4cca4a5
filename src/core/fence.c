/* fence — high-water marks in an ordered map; see fence.h. */
#include "core/fence.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/heap.h"
#include "core/smap.h"
#include "core/threads.h"

typedef struct Mark {
    HeapEntry idle; /* queued while forgetting is on: when to forget */
    uint64_t max_token;
    Charge charge;  /* who it is counted against (share.h): opaque here */
    char resource[]; /* the map's key */
} Mark;

struct Fence {
    Smap *marks; /* resource -> Mark, owns the marks */
    Heap idle;
    size_t max_resources;
    int64_t forget_idle_ms;
    FenceHooks hooks;
    uint64_t floors[FENCE_FLOOR_BUCKETS];
    ThreadOwner owner; /* the loop (threads.h): every change asserts it */
};

/* FNV-1a: fixed across versions and machines, because floors are stored by bucket. */
uint32_t fence_bucket(const char *resource)
{
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)resource; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (uint32_t)(h % FENCE_FLOOR_BUCKETS);
}

Fence *fence_new(size_t max_resources, int64_t forget_idle_ms, const FenceHooks *hooks)
{
    Fence *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->marks = smap_new();
    if (!f->marks) {
        free(f);
        return NULL;
    }
    heap_init(&f->idle);
    thread_own(&f->owner);
    f->max_resources = max_resources;
    f->forget_idle_ms = forget_idle_ms;
    if (hooks)
        f->hooks = *hooks;
    return f;
}

void fence_free(Fence *f)
{
    if (!f)
        return;
    heap_clear(&f->idle);
    smap_free(f->marks, free);
    free(f);
}

static void touch(Fence *f, Mark *m, const Now *now)
{
    /* If the heap cannot grow, the mark is simply kept. */
    if (f->forget_idle_ms > 0)
        heap_set(&f->idle, &m->idle, now->mono_ms + f->forget_idle_ms);
}

/* limit: refuse a new resource beyond max_resources (not for marks loaded from storage). */
static FenceResult find_or_create(Fence *f, const char *resource, bool limit, const Charge *charge, Mark **out)
{
    Mark *m = smap_get(f->marks, resource);
    if (!m) {
        if (limit && smap_len(f->marks) >= f->max_resources)
            return FENCE_OVERLOADED;
        size_t n = strlen(resource) + 1;
        m = malloc(sizeof *m + n);
        if (!m)
            return FENCE_NOMEM;
        heap_entry_init(&m->idle);
        m->charge = charge ? *charge : (Charge){NULL, NULL};
        m->max_token = f->floors[fence_bucket(resource)];
        memcpy(m->resource, resource, n);
        if (!smap_insert(f->marks, m->resource, m)) {
            free(m);
            return FENCE_NOMEM;
        }
    }
    *out = m;
    return FENCE_ACCEPTED;
}

FenceResult fence_load(Fence *f, const char *resource, uint64_t max_token, const Now *now)
{
    assert(thread_owns(&f->owner));
    Mark *m;
    FenceResult r = find_or_create(f, resource, false, NULL, &m);
    if (r != FENCE_ACCEPTED)
        return r;
    if (max_token > m->max_token)
        m->max_token = max_token;
    touch(f, m, now);
    return r;
}

void fence_load_floor(Fence *f, uint32_t bucket, uint64_t floor)
{
    assert(thread_owns(&f->owner));
    if (bucket < FENCE_FLOOR_BUCKETS && floor > f->floors[bucket])
        f->floors[bucket] = floor;
}

FenceResult fence_check(Fence *f, const char *resource, uint64_t token, const Now *now, uint64_t *max_token)
{
    return fence_check_charged(f, resource, token, now, NULL, max_token);
}

bool fence_known(const Fence *f, const char *resource) { return smap_get(f->marks, resource) != NULL; }

FenceResult fence_check_charged(Fence *f, const char *resource, uint64_t token, const Now *now, const Charge *charge,
                                uint64_t *max_token)
{
    assert(thread_owns(&f->owner));
    Mark *m = smap_get(f->marks, resource);
    *max_token = m ? m->max_token : f->floors[fence_bucket(resource)];
    if (token < *max_token) {
        if (m)
            touch(f, m, now);
        return FENCE_STALE;
    }
    FenceResult r = find_or_create(f, resource, true, charge, &m);
    if (r == FENCE_ACCEPTED)
        touch(f, m, now);
    return r;
}

void fence_raise(Fence *f, const char *resource, uint64_t token)
{
    assert(thread_owns(&f->owner));
    Mark *m = smap_get(f->marks, resource);
    if (m && token > m->max_token)
        m->max_token = token;
}

uint64_t fence_max(const Fence *f, const char *resource)
{
    const Mark *m = smap_get(f->marks, resource);
    return m ? m->max_token : f->floors[fence_bucket(resource)];
}

size_t fence_count(const Fence *f) { return smap_len(f->marks); }

static void drop(Fence *f, Mark *m)
{
    heap_remove(&f->idle, &m->idle);
    smap_remove(f->marks, m->resource);
    free(m);
}

void fence_remove(Fence *f, const char *resource)
{
    assert(thread_owns(&f->owner));
    Mark *m = smap_get(f->marks, resource);
    if (m)
        drop(f, m);
}

void fence_tick(Fence *f, const Now *now)
{
    assert(thread_owns(&f->owner));
    HeapEntry *e;
    while ((e = heap_peek(&f->idle)) && e->deadline_ms <= now->mono_ms) {
        Mark *m = (Mark *)(void *)e; /* idle is the first member */
        uint32_t b = fence_bucket(m->resource);
        if (m->max_token > f->floors[b])
            f->floors[b] = m->max_token;
        if (f->hooks.forgotten)
            f->hooks.forgotten(f->hooks.ud, m->resource, b, f->floors[b], &m->charge);
        drop(f, m);
    }
}

int64_t fence_next_timeout_ms(const Fence *f, const Now *now)
{
    return heap_ms_until_first(&f->idle, now->mono_ms);
}

bool fence_parse_token(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > INT64_MAX)
        return false;
    *out = v;
    return true;
}
