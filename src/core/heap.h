/*
 * heap — a binary min-heap of deadlines.
 *
 * Entries are embedded in their owners (a lease, a waiter) and store their own
 * position, so removing or moving an entry is O(log n) without a search.
 * Invariants: entry->index == position in the array while queued and
 * HEAP_NOT_QUEUED otherwise; every parent's deadline <= its children's.
 */
#ifndef LEASEGATE_HEAP_H
#define LEASEGATE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HEAP_NOT_QUEUED ((size_t)-1)

typedef struct HeapEntry {
    int64_t deadline_ms; /* monotonic clock */
    size_t index;        /* position in the heap, or HEAP_NOT_QUEUED */
} HeapEntry;

typedef struct Heap {
    HeapEntry **items;
    size_t len;
    size_t cap;
} Heap;

void heap_init(Heap *h);
void heap_clear(Heap *h); /* frees the array, not the entries */
void heap_entry_init(HeapEntry *e);
bool heap_queued(const HeapEntry *e);
/* Inserts e, or moves it if already queued. Returns false on allocation failure. */
bool heap_set(Heap *h, HeapEntry *e, int64_t deadline_ms);
void heap_remove(Heap *h, HeapEntry *e); /* no-op when not queued */
HeapEntry *heap_peek(const Heap *h);     /* NULL when empty */
/* Milliseconds from now_ms to the first deadline (0 when due), -1 when empty:
 * what each module's next-timeout function gives the loop. */
int64_t heap_ms_until_first(const Heap *h, int64_t now_ms);
HeapEntry *heap_pop(Heap *h);
size_t heap_len(const Heap *h);

#endif
