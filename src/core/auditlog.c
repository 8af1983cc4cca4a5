/* auditlog — the audit trail in memory, kept per key; see auditlog.h. */
#include "core/auditlog.h"

#include <stdlib.h>
#include <string.h>

#include "core/smap.h"

static const size_t FIELD_MAX[5] = {256, 128, 64, 64, 32}; /* lock, owner, key, peer, reason: longer is cut */

struct KeyRows;

/* One row and its strings, in one allocation. */
typedef struct Row {
    AuditRow row;
    struct KeyRows *of;
    char strings[];
} Row;

/* One key's rows, oldest first: a ring that grows up to `keep`. */
typedef struct KeyRows {
    Row **ring;
    size_t head, n, cap;
    char name[]; /* the map's key */
} KeyRows;

/* Every row in seq order: a row its key evicted stays as a hole (row NULL)
 * until the holes are half the array, then the array is packed. */
typedef struct Slot {
    uint64_t seq;
    Row *row;
} Slot;

struct AuditLog {
    size_t keep;
    Smap *keys;     /* key name -> KeyRows */
    Slot *all;      /* [start, end) in use */
    size_t start, end, cap, holes;
    uint64_t next_seq;
    uint64_t max_gone;
    Row **loading;  /* start-up: rows loaded, not placed yet */
    size_t nloading, caploading;
};

AuditLog *auditlog_new(size_t keep)
{
    AuditLog *a = calloc(1, sizeof *a);
    if (!a || !(a->keys = smap_new())) {
        free(a);
        return NULL;
    }
    a->keep = keep;
    a->next_seq = 1;
    return a;
}

static void free_key_rows(void *v)
{
    KeyRows *k = v;
    for (size_t i = 0; i < k->n; i++)
        free(k->ring[(k->head + i) % k->cap]);
    free(k->ring);
    free(k);
}

void auditlog_free(AuditLog *a)
{
    if (!a)
        return;
    smap_free(a->keys, free_key_rows);
    for (size_t i = 0; i < a->nloading; i++)
        free(a->loading[i]);
    free(a->loading);
    free(a->all);
    free(a);
}

bool auditlog_enabled(const AuditLog *a) { return a->keep > 0; }

/* A copy of row, its strings cut to the contract's lengths. */
static Row *row_new(const AuditRow *row)
{
    const char *src[5] = {row->lock, row->owner, row->key, row->peer, row->reason};
    size_t len[5], total = 0;
    for (int i = 0; i < 5; i++)
        total += (len[i] = strnlen(src[i] ? src[i] : "", FIELD_MAX[i])) + 1;
    Row *r = malloc(sizeof *r + total);
    if (!r)
        return NULL;
    r->row = *row;
    r->row.value = NULL; /* an event's only, never the trail's */
    r->of = NULL;
    const char **dst[5] = {&r->row.lock, &r->row.owner, &r->row.key, &r->row.peer, &r->row.reason};
    char *mem = r->strings;
    for (int i = 0; i < 5; i++) {
        memcpy(mem, src[i] ? src[i] : "", len[i]);
        mem[len[i]] = '\0';
        *dst[i] = mem;
        mem += len[i] + 1;
    }
    return r;
}

static KeyRows *key_rows(AuditLog *a, const char *key)
{
    KeyRows *k = smap_get(a->keys, key);
    if (k)
        return k;
    size_t len = strlen(key);
    if (!(k = calloc(1, sizeof *k + len + 1)))
        return NULL;
    memcpy(k->name, key, len + 1);
    if (!smap_insert(a->keys, k->name, k)) {
        free(k);
        return NULL;
    }
    return k;
}

/* Room for one more row in k (its ring grows up to keep). */
static bool key_room(AuditLog *a, KeyRows *k)
{
    if (k->n < k->cap || k->cap == a->keep)
        return true;
    size_t cap = k->cap ? k->cap * 2 : 8;
    if (cap > a->keep)
        cap = a->keep;
    Row **ring = malloc(cap * sizeof *ring);
    if (!ring)
        return false;
    for (size_t i = 0; i < k->n; i++)
        ring[i] = k->ring[(k->head + i) % k->cap];
    free(k->ring);
    k->ring = ring;
    k->head = 0;
    k->cap = cap;
    return true;
}

/* Room for one more slot at the end of every row's array. */
static bool all_room(AuditLog *a)
{
    if (a->end < a->cap)
        return true;
    /* Pack: drop the holes and what is before start. */
    size_t live = a->end - a->start - a->holes;
    if (live < a->cap / 2) {
        size_t o = 0;
        for (size_t i = a->start; i < a->end; i++)
            if (a->all[i].row)
                a->all[o++] = a->all[i];
        a->start = 0;
        a->end = o;
        a->holes = 0;
        return true;
    }
    size_t cap = a->cap ? a->cap * 2 : 64;
    Slot *all = realloc(a->all, cap * sizeof *all);
    if (!all)
        return false;
    a->all = all;
    a->cap = cap;
    return true;
}

/* The first slot with seq > after, in [start, end). */
static size_t all_after(const AuditLog *a, uint64_t after)
{
    size_t lo = a->start, hi = a->end;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->all[mid].seq <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Removes k's oldest row (telling dropped), leaving a hole in the array. */
static void evict_oldest(AuditLog *a, KeyRows *k, AuditDropped dropped, void *ud)
{
    Row *r = k->ring[k->head];
    k->head = (k->head + 1) % k->cap;
    k->n--;
    size_t i = all_after(a, r->row.seq - 1);
    if (i < a->end && a->all[i].row == r) {
        a->all[i].row = NULL;
        a->holes++;
    }
    while (a->start < a->end && !a->all[a->start].row) { /* holes at the front simply go */
        a->start++;
        a->holes--;
    }
    if (r->row.seq > a->max_gone)
        a->max_gone = r->row.seq;
    if (dropped)
        dropped(ud, k->name, r->row.seq);
    free(r);
}

/* Places r (numbered) as the newest of its key and of all. */
static bool place(AuditLog *a, Row *r, AuditDropped dropped, void *ud)
{
    KeyRows *k = key_rows(a, r->row.key);
    if (!k || !key_room(a, k) || !all_room(a))
        return false;
    if (k->n == a->keep)
        evict_oldest(a, k, dropped, ud);
    k->ring[(k->head + k->n) % k->cap] = r;
    k->n++;
    r->of = k;
    a->all[a->end++] = (Slot){r->row.seq, r};
    return true;
}

uint64_t auditlog_add(AuditLog *a, const AuditRow *row, AuditDropped dropped, void *ud)
{
    if (!a->keep)
        return 0;
    Row *r = row_new(row);
    if (!r)
        return 0;
    r->row.seq = a->next_seq;
    if (!place(a, r, dropped, ud)) {
        free(r);
        return 0;
    }
    return a->next_seq++;
}

bool auditlog_load(AuditLog *a, const AuditRow *row)
{
    if (!a->keep)
        return true;
    if (a->nloading == a->caploading) {
        size_t cap = a->caploading ? a->caploading * 2 : 1024;
        Row **l = realloc(a->loading, cap * sizeof *l);
        if (!l)
            return false;
        a->loading = l;
        a->caploading = cap;
    }
    Row *r = row_new(row);
    if (!r)
        return false;
    a->loading[a->nloading++] = r;
    return true;
}

static int by_seq(const void *x, const void *y)
{
    const Row *a = *(Row *const *)x, *b = *(Row *const *)y;
    return a->row.seq < b->row.seq ? -1 : a->row.seq > b->row.seq;
}

bool auditlog_load_done(AuditLog *a, AuditDropped dropped, void *ud)
{
    if (a->nloading) /* qsort wants an array, even for none */
        qsort(a->loading, a->nloading, sizeof *a->loading, by_seq);
    uint64_t expect = 1;
    bool ok = true;
    for (size_t i = 0; i < a->nloading; i++) {
        Row *r = a->loading[i];
        if (!ok || (i && r->row.seq == a->loading[i - 1]->row.seq)) { /* a duplicate: a row stored twice */
            free(r);
            continue;
        }
        if (r->row.seq > expect && r->row.seq - 1 > a->max_gone)
            a->max_gone = r->row.seq - 1; /* rows pruned before this start */
        expect = r->row.seq + 1;
        if (r->row.seq >= a->next_seq)
            a->next_seq = r->row.seq + 1;
        if (!place(a, r, dropped, ud)) {
            free(r);
            ok = false;
        }
    }
    free(a->loading);
    a->loading = NULL;
    a->nloading = a->caploading = 0;
    return ok;
}

bool auditlog_list(const AuditLog *a, const char *key, const char *lock, uint64_t after, size_t limit,
                   void (*fn)(void *ud, const AuditRow *row), void *ud)
{
    size_t given = 0;
    if (key) {
        const KeyRows *k = smap_get(a->keys, key);
        if (!k)
            return false;
        size_t lo = 0, hi = k->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (k->ring[(k->head + mid) % k->cap]->row.seq <= after)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo; i < k->n; i++) {
            const AuditRow *r = &k->ring[(k->head + i) % k->cap]->row;
            if (lock && strcmp(lock, r->lock))
                continue;
            if (given == limit)
                return true;
            fn(ud, r);
            given++;
        }
        return false;
    }
    for (size_t i = all_after(a, after); i < a->end; i++) {
        const Row *r = a->all[i].row;
        if (!r || (lock && strcmp(lock, r->row.lock)))
            continue;
        if (given == limit)
            return true;
        fn(ud, &r->row);
        given++;
    }
    return false;
}

uint64_t auditlog_oldest(const AuditLog *a, const char *key)
{
    if (key) {
        const KeyRows *k = smap_get(a->keys, key);
        return k && k->n ? k->ring[k->head]->row.seq : 0;
    }
    return a->start < a->end ? a->all[a->start].seq : 0;
}

uint64_t auditlog_gone_below(const AuditLog *a)
{
    return a->start < a->end ? a->all[a->start].seq : a->next_seq;
}

uint64_t auditlog_max_gone(const AuditLog *a) { return a->max_gone; }
