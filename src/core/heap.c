/* heap — min-heap of embedded deadline entries; see heap.h. */
#include "core/heap.h"

#include <stdlib.h>

void heap_init(Heap *h) { h->items = NULL; h->len = 0; h->cap = 0; }

void heap_clear(Heap *h)
{
    for (size_t i = 0; i < h->len; i++)
        h->items[i]->index = HEAP_NOT_QUEUED;
    free(h->items);
    heap_init(h);
}

void heap_entry_init(HeapEntry *e) { e->deadline_ms = 0; e->index = HEAP_NOT_QUEUED; }

bool heap_queued(const HeapEntry *e) { return e->index != HEAP_NOT_QUEUED; }

size_t heap_len(const Heap *h) { return h->len; }

static void place(Heap *h, size_t i, HeapEntry *e)
{
    h->items[i] = e;
    e->index = i;
}

static void sift_up(Heap *h, size_t i)
{
    HeapEntry *e = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent]->deadline_ms <= e->deadline_ms)
            break;
        place(h, i, h->items[parent]);
        i = parent;
    }
    place(h, i, e);
}

static void sift_down(Heap *h, size_t i)
{
    HeapEntry *e = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && h->items[child + 1]->deadline_ms < h->items[child]->deadline_ms)
            child++;
        if (e->deadline_ms <= h->items[child]->deadline_ms)
            break;
        place(h, i, h->items[child]);
        i = child;
    }
    place(h, i, e);
}

bool heap_set(Heap *h, HeapEntry *e, int64_t deadline_ms)
{
    if (heap_queued(e)) {
        int64_t old = e->deadline_ms;
        e->deadline_ms = deadline_ms;
        if (deadline_ms < old)
            sift_up(h, e->index);
        else
            sift_down(h, e->index);
        return true;
    }
    if (h->len == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        HeapEntry **items = realloc(h->items, cap * sizeof *items);
        if (!items)
            return false;
        h->items = items;
        h->cap = cap;
    }
    e->deadline_ms = deadline_ms;
    place(h, h->len++, e);
    sift_up(h, e->index);
    return true;
}

void heap_remove(Heap *h, HeapEntry *e)
{
    if (!heap_queued(e))
        return;
    size_t i = e->index;
    e->index = HEAP_NOT_QUEUED;
    h->len--;
    if (i == h->len)
        return;
    HeapEntry *moved = h->items[h->len];
    place(h, i, moved);
    /* The moved entry may belong above or below its new slot. */
    sift_up(h, i);
    sift_down(h, moved->index);
}

HeapEntry *heap_peek(const Heap *h) { return h->len ? h->items[0] : NULL; }

int64_t heap_ms_until_first(const Heap *h, int64_t now_ms)
{
    const HeapEntry *e = heap_peek(h);
    if (!e)
        return -1;
    return e->deadline_ms > now_ms ? e->deadline_ms - now_ms : 0;
}

HeapEntry *heap_pop(Heap *h)
{
    HeapEntry *top = heap_peek(h);
    if (top)
        heap_remove(h, top);
    return top;
}
