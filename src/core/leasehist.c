/* leasehist — ring of ended leases with a chained hash index; see leasehist.h. */
#include "core/leasehist.h"

#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX

typedef struct Entry {
    uint8_t id[16];
    uint64_t lock_id;
    uint64_t token;
    uint32_t next; /* next entry in the same bucket, or NIL */
    uint8_t how;   /* 0 = slot unused */
} Entry;

struct LeaseHist {
    Entry *ring;
    uint32_t *buckets;
    size_t capacity; /* ring slots */
    size_t mask;     /* buckets - 1 (a power of two >= capacity) */
    size_t pos;      /* next slot to overwrite */
    uint64_t seq;    /* the last sequence number given */
};

LeaseHist *leasehist_new(size_t capacity)
{
    if (capacity == 0 || capacity >= NIL)
        return NULL;
    LeaseHist *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    size_t nb = 1;
    while (nb < capacity)
        nb <<= 1;
    h->ring = calloc(capacity, sizeof *h->ring);
    h->buckets = malloc(nb * sizeof *h->buckets);
    if (!h->ring || !h->buckets) {
        leasehist_free(h);
        return NULL;
    }
    for (size_t i = 0; i < nb; i++)
        h->buckets[i] = NIL;
    h->capacity = capacity;
    h->mask = nb - 1;
    return h;
}

void leasehist_free(LeaseHist *h)
{
    if (!h)
        return;
    free(h->ring);
    free(h->buckets);
    free(h);
}

static size_t bucket_of(const LeaseHist *h, const uint8_t id[16])
{
    uint64_t v;
    memcpy(&v, id, sizeof v);
    return (size_t)(v & h->mask);
}

static void unlink_slot(LeaseHist *h, uint32_t slot)
{
    uint32_t *link = &h->buckets[bucket_of(h, h->ring[slot].id)];
    while (*link != NIL) {
        if (*link == slot) {
            *link = h->ring[slot].next;
            return;
        }
        link = &h->ring[*link].next;
    }
}

uint64_t leasehist_add(LeaseHist *h, const uint8_t id[16], uint64_t lock_id, uint64_t token, LeaseEnd how)
{
    uint32_t slot = (uint32_t)h->pos;
    Entry *e = &h->ring[slot];
    if (e->how)
        unlink_slot(h, slot);
    memcpy(e->id, id, sizeof e->id);
    e->lock_id = lock_id;
    e->token = token;
    e->how = (uint8_t)how;
    size_t b = bucket_of(h, id);
    e->next = h->buckets[b];
    h->buckets[b] = slot;
    h->pos = (h->pos + 1) % h->capacity;
    return ++h->seq;
}

void leasehist_continue_after(LeaseHist *h, uint64_t seq)
{
    if (seq > h->seq)
        h->seq = seq;
}

void leasehist_load(LeaseHist *h, const uint8_t id[16], uint64_t lock_id, uint64_t token, LeaseEnd how,
                    uint64_t seq)
{
    uint64_t last = h->seq;
    leasehist_add(h, id, lock_id, token, how);
    h->seq = seq > last ? seq : last; /* a replay gives no new numbers */
}

bool leasehist_find(const LeaseHist *h, const uint8_t id[16], uint64_t *lock_id, uint64_t *token,
                    LeaseEnd *how)
{
    for (uint32_t s = h->buckets[bucket_of(h, id)]; s != NIL; s = h->ring[s].next) {
        const Entry *e = &h->ring[s];
        if (memcmp(e->id, id, sizeof e->id) == 0) {
            *lock_id = e->lock_id;
            *token = e->token;
            *how = (LeaseEnd)e->how;
            return true;
        }
    }
    return false;
}
