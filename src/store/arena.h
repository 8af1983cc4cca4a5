/*
 * arena — a bump allocator for strings that live exactly as long as a batch.
 * Allocations never move; arena_reset keeps the first chunk for reuse.
 */
#ifndef LEASEGATE_ARENA_H
#define LEASEGATE_ARENA_H

#include <stddef.h>

typedef struct ArenaChunk ArenaChunk;

typedef struct Arena {
    ArenaChunk *chunks; /* newest first */
} Arena;

void arena_init(Arena *a);
void arena_clear(Arena *a);  /* frees everything */
void arena_reset(Arena *a);  /* forgets every allocation, keeps one chunk */
/* n bytes (not aligned: for strings and byte arrays), or NULL on allocation failure. */
void *arena_alloc(Arena *a, size_t n);
/* A copy of s in the arena, or NULL on allocation failure. */
char *arena_strdup(Arena *a, const char *s);

#endif
