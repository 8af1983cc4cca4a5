/*
 * smap — an ordered map from strings to pointers (a skip list).
 *
 * Used for the lock table and the fence marks: lookups by name and listings in
 * byte order, resumable from any key, both O(log n). The map does not own keys
 * or values: a key must stay valid while its entry exists (callers key an entry
 * by a string stored in the value itself).
 */
#ifndef LEASEGATE_SMAP_H
#define LEASEGATE_SMAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct Smap Smap;
typedef struct SmapNode SmapNode;

Smap *smap_new(void); /* NULL on allocation failure */
/* Frees the map; calls free_value (if not NULL) on every value. */
void smap_free(Smap *m, void (*free_value)(void *value));
void *smap_get(const Smap *m, const char *key);
/* Adds a key that is not present yet. Returns false on allocation failure. */
bool smap_insert(Smap *m, const char *key, void *value);
/* Removes key (the value is the caller's). Returns false when absent. */
bool smap_remove(Smap *m, const char *key);
size_t smap_len(const Smap *m);
/* First entry whose key is > after (or the first entry when after is NULL). */
const SmapNode *smap_first_after(const Smap *m, const char *after);
/* First entry whose key is >= key. */
const SmapNode *smap_first_from(const Smap *m, const char *key);
const SmapNode *smap_next(const SmapNode *n);
void *smap_value(const SmapNode *n);
const char *smap_key(const SmapNode *n);

#endif
