/* Unit tests of the deadline heap: order, moves, removal from the middle. */
#include <stdlib.h>

#include "check.h"
#include "core/heap.h"

#define N 1000

int main(void)
{
    Heap h;
    heap_init(&h);
    static HeapEntry e[N];
    srand(42);
    for (int i = 0; i < N; i++) {
        heap_entry_init(&e[i]);
        CHECK(heap_set(&h, &e[i], rand() % 10000));
    }
    /* Move some, remove some from the middle. */
    for (int i = 0; i < N; i += 7)
        CHECK(heap_set(&h, &e[i], rand() % 10000));
    for (int i = 3; i < N; i += 11)
        heap_remove(&h, &e[i]);
    for (int i = 3; i < N; i += 11)
        CHECK(!heap_queued(&e[i]));
    int64_t last = -1;
    size_t popped = 0;
    HeapEntry *x;
    bool ordered = true;
    while ((x = heap_pop(&h))) {
        ordered &= x->deadline_ms >= last;
        last = x->deadline_ms;
        popped++;
        CHECK(!heap_queued(x));
    }
    CHECK(ordered);
    CHECK(popped == N - (N - 3 + 10) / 11);
    CHECK(heap_peek(&h) == NULL);
    CHECK(heap_ms_until_first(&h, 0) == -1);
    HeapEntry t;
    heap_entry_init(&t);
    CHECK(heap_set(&h, &t, 500));
    CHECK(heap_ms_until_first(&h, 200) == 300);
    CHECK(heap_ms_until_first(&h, 500) == 0);
    CHECK(heap_ms_until_first(&h, 900) == 0);
    heap_clear(&h);
    return check_report("heap");
}
