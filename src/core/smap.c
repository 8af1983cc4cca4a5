/* smap — skip list keyed by strings; see smap.h. */
#include "core/smap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEVEL 32

struct SmapNode {
    const char *key;
    void *value;
    struct SmapNode *next[]; /* one per level of this node */
};

struct Smap {
    SmapNode *head; /* sentinel with MAX_LEVEL links */
    int level;      /* levels in use */
    size_t len;
    uint64_t rng;   /* xorshift state for node heights */
};

Smap *smap_new(void)
{
    Smap *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->head = calloc(1, sizeof *m->head + MAX_LEVEL * sizeof(SmapNode *));
    if (!m->head) {
        free(m);
        return NULL;
    }
    m->level = 1;
    m->rng = 0x9e3779b97f4a7c15ULL;
    return m;
}

void smap_free(Smap *m, void (*free_value)(void *value))
{
    if (!m)
        return;
    SmapNode *n = m->head->next[0];
    while (n) {
        SmapNode *next = n->next[0];
        if (free_value)
            free_value(n->value);
        free(n);
        n = next;
    }
    free(m->head);
    free(m);
}

/* Height with P(h > k) = 4^-k: about 1.33 links per node. */
static int random_level(Smap *m)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    uint64_t bits = m->rng;
    int level = 1;
    while (level < MAX_LEVEL && (bits & 3) == 0) {
        level++;
        bits >>= 2;
    }
    return level;
}

/* Fills update[] with the last node before key on every level; returns the
 * first node whose key is >= key (or NULL). */
static SmapNode *find_ge(const Smap *m, const char *key, SmapNode **update)
{
    SmapNode *x = m->head;
    for (int i = m->level - 1; i >= 0; i--) {
        while (x->next[i] && strcmp(x->next[i]->key, key) < 0)
            x = x->next[i];
        if (update)
            update[i] = x;
    }
    return x->next[0];
}

void *smap_get(const Smap *m, const char *key)
{
    SmapNode *n = find_ge(m, key, NULL);
    return n && strcmp(n->key, key) == 0 ? n->value : NULL;
}

bool smap_insert(Smap *m, const char *key, void *value)
{
    SmapNode *update[MAX_LEVEL];
    find_ge(m, key, update);
    int level = random_level(m);
    SmapNode *n = malloc(sizeof *n + (size_t)level * sizeof(SmapNode *));
    if (!n)
        return false;
    n->key = key;
    n->value = value;
    for (int i = m->level; i < level; i++)
        update[i] = m->head;
    if (level > m->level)
        m->level = level;
    for (int i = 0; i < level; i++) {
        n->next[i] = update[i]->next[i];
        update[i]->next[i] = n;
    }
    m->len++;
    return true;
}

bool smap_remove(Smap *m, const char *key)
{
    SmapNode *update[MAX_LEVEL];
    SmapNode *n = find_ge(m, key, update);
    if (!n || strcmp(n->key, key) != 0)
        return false;
    for (int i = 0; i < m->level && update[i]->next[i] == n; i++)
        update[i]->next[i] = n->next[i];
    while (m->level > 1 && !m->head->next[m->level - 1])
        m->level--;
    m->len--;
    free(n);
    return true;
}

size_t smap_len(const Smap *m) { return m->len; }

const SmapNode *smap_first_after(const Smap *m, const char *after)
{
    if (!after)
        return m->head->next[0];
    SmapNode *n = find_ge(m, after, NULL);
    if (n && strcmp(n->key, after) == 0)
        n = n->next[0];
    return n;
}

const SmapNode *smap_first_from(const Smap *m, const char *key) { return find_ge(m, key, NULL); }

const SmapNode *smap_next(const SmapNode *n) { return n->next[0]; }
void *smap_value(const SmapNode *n) { return n->value; }
const char *smap_key(const SmapNode *n) { return n->key; }
