/* audit — the trail in memory; see include/leasegate/audit.h. */
#include "leasegate/audit.h"

#include <stdlib.h>
#include <string.h>

struct Audit {
    AuditRow *rows; /* owned, each with its strings in one allocation (strings) */
    char **strings; /* owned: rows[i]'s strings */
    size_t keep;
    size_t head, n; /* the oldest is rows[head] */
    uint64_t next_seq;
};

static const char *const KINDS[] = {[AUDIT_GRANTED] = "granted",
                                    [AUDIT_RELEASED] = "released",
                                    [AUDIT_EXPIRED] = "expired",
                                    [AUDIT_REVOKED] = "revoked",
                                    [AUDIT_FENCE_REFUSED] = "fence_refused",
                                    [AUDIT_GUARD_REFUSED] = "guard_refused"};

const char *audit_kind_name(int kind)
{
    return kind >= AUDIT_GRANTED && kind <= AUDIT_GUARD_REFUSED ? KINDS[kind] : "unknown";
}

Audit *audit_new(size_t keep)
{
    Audit *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->keep = keep;
    a->next_seq = 1;
    if (keep && (!(a->rows = calloc(keep, sizeof *a->rows)) || !(a->strings = calloc(keep, sizeof *a->strings)))) {
        audit_free(a);
        return NULL;
    }
    return a;
}

void audit_free(Audit *a)
{
    if (!a)
        return;
    for (size_t i = 0; a->strings && i < a->keep; i++)
        free(a->strings[i]);
    free(a->strings);
    free(a->rows);
    free(a);
}

bool audit_enabled(const Audit *a) { return a->keep > 0; }

/* Stores a copy of row as the newest, evicting the oldest when full. */
static bool put(Audit *a, const AuditRow *row)
{
    const char *src[4] = {row->lock, row->owner, row->key, row->peer};
    size_t len[4], total = 0;
    for (int i = 0; i < 4; i++)
        total += (len[i] = strlen(src[i] ? src[i] : "")) + 1;
    char *mem = malloc(total);
    if (!mem)
        return false;
    size_t slot = (a->head + a->n) % a->keep;
    if (a->n == a->keep) {
        slot = a->head;
        a->head = (a->head + 1) % a->keep;
        a->n--;
    }
    free(a->strings[slot]);
    a->strings[slot] = mem;
    AuditRow *r = &a->rows[slot];
    *r = *row;
    const char **dst[4] = {&r->lock, &r->owner, &r->key, &r->peer};
    for (int i = 0; i < 4; i++) {
        memcpy(mem, src[i] ? src[i] : "", len[i] + 1);
        *dst[i] = mem;
        mem += len[i] + 1;
    }
    a->n++;
    return true;
}

uint64_t audit_add(Audit *a, const AuditRow *row)
{
    if (!a->keep)
        return 0;
    AuditRow copy = *row;
    copy.seq = a->next_seq;
    if (!put(a, &copy))
        return 0;
    return a->next_seq++;
}

bool audit_load(Audit *a, const AuditRow *row)
{
    if (!a->keep)
        return true;
    if (!put(a, row))
        return false;
    if (row->seq >= a->next_seq)
        a->next_seq = row->seq + 1;
    return true;
}

bool audit_list(const Audit *a, const char *lock, uint64_t after, size_t limit,
                void (*fn)(void *ud, const AuditRow *row), void *ud)
{
    size_t i = 0;
    /* Rows are in seq order: skip to the first after `after` by bisection. */
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->rows[(a->head + mid) % a->keep].seq <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t given = 0;
    for (i = lo; i < a->n; i++) {
        const AuditRow *r = &a->rows[(a->head + i) % a->keep];
        if (lock && strcmp(lock, r->lock))
            continue;
        if (given == limit)
            return true;
        fn(ud, r);
        given++;
    }
    return false;
}

uint64_t audit_oldest(const Audit *a) { return a->n ? a->rows[a->head].seq : 0; }
