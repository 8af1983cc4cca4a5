/* arena — chunked bump allocator; see arena.h. */
#include "store/arena.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (64 * 1024)

struct ArenaChunk {
    ArenaChunk *next;
    size_t used;
    size_t size;
    char data[];
};

void arena_init(Arena *a) { a->chunks = NULL; }

void arena_clear(Arena *a)
{
    while (a->chunks) {
        ArenaChunk *next = a->chunks->next;
        free(a->chunks);
        a->chunks = next;
    }
}

void arena_reset(Arena *a)
{
    if (!a->chunks)
        return;
    /* Keep the oldest chunk and reuse it for the next batch. */
    ArenaChunk *keep = a->chunks;
    while (keep->next) {
        ArenaChunk *next = keep->next;
        free(keep);
        keep = next;
    }
    keep->used = 0;
    a->chunks = keep;
}

void *arena_alloc(Arena *a, size_t n)
{
    ArenaChunk *c = a->chunks;
    if (!c || c->size - c->used < n) {
        size_t size = n > CHUNK_BYTES ? n : CHUNK_BYTES;
        c = malloc(sizeof *c + size);
        if (!c)
            return NULL;
        c->used = 0;
        c->size = size;
        c->next = a->chunks;
        a->chunks = c;
    }
    char *p = c->data + c->used;
    c->used += n;
    return p;
}

char *arena_strdup(Arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}
