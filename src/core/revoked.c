/* revoked — force-released tokens; see revoked.h. */
#include "core/revoked.h"

#include <stdlib.h>

/* A sorted array: force-releases are rare admin acts, lookups are a binary search. */
struct Revoked {
    uint64_t *tokens; /* owned, ascending */
    size_t n, cap;
};

Revoked *revoked_new(void) { return calloc(1, sizeof(Revoked)); }

void revoked_free(Revoked *r)
{
    if (r) {
        free(r->tokens);
        free(r);
    }
}

/* The index of the first token >= t. */
static size_t lower_bound(const Revoked *r, uint64_t t)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->tokens[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool revoked_has(const Revoked *r, uint64_t token)
{
    size_t i = lower_bound(r, token);
    return i < r->n && r->tokens[i] == token;
}

bool revoked_add(Revoked *r, uint64_t token)
{
    size_t i = lower_bound(r, token);
    if (i < r->n && r->tokens[i] == token)
        return true;
    if (r->n == REVOKED_MAX)
        return false;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        uint64_t *t = realloc(r->tokens, cap * sizeof *t);
        if (!t)
            return false;
        r->tokens = t;
        r->cap = cap;
    }
    for (size_t j = r->n; j > i; j--)
        r->tokens[j] = r->tokens[j - 1];
    r->tokens[i] = token;
    r->n++;
    return true;
}

size_t revoked_count(const Revoked *r) { return r->n; }
