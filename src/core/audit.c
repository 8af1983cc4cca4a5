/* audit — the trail in memory; see audit.h. */
#include "core/audit.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Each row's strings live in a fixed slot of a mapping made at start, not on
 * the heap: rows that live long among short-lived allocations would pin
 * freed heap pages (a flood of locks could not give its memory back), and a
 * slot is reused in place when the ring wraps. Two mappings, both touched
 * only where written: a small slot per row, where the strings of almost every
 * row fit (an event of a waiter joining: the lock and owner, key and peer
 * empty), and a large one per row with room for the longest lock name (256),
 * owner (128), key name (64), peer address and reason (32), each
 * NUL-terminated, used only by the rows that need it. A row then costs the memory of its row and small
 * slot, 128 bytes, not 592 (10,000 waiters joining fill 10,000 events). */
#define SMALL_BYTES 64
#define SLOT_BYTES 560
static const size_t FIELD_MAX[5] = {256, 128, 64, 64, 32}; /* lock, owner, key, peer, reason: longer is cut */

struct Audit {
    AuditRow *rows; /* owned */
    char *small;    /* owned mapping: keep slots of SMALL_BYTES */
    char *large;    /* owned mapping: keep slots of SLOT_BYTES */
    size_t keep;
    size_t head, n; /* the oldest is rows[head] */
    uint64_t next_seq;
};

static const char *const KINDS[] = {[AUDIT_GRANTED] = "granted",
                                    [AUDIT_RELEASED] = "released",
                                    [AUDIT_EXPIRED] = "expired",
                                    [AUDIT_REVOKED] = "revoked",
                                    [AUDIT_FENCE_REFUSED] = "fence_refused",
                                    [AUDIT_GUARD_REFUSED] = "guard_refused",
                                    [AUDIT_REENTERED] = "reentered",
                                    [AUDIT_RENEWED] = "renewed",
                                    [AUDIT_WAITER_JOINED] = "waiter_joined",
                                    [AUDIT_WAITER_LEFT] = "waiter_left",
                                    [AUDIT_FENCE_RAISED] = "fence_raised",
                                    [AUDIT_VALUE_SET] = "value_set",
                                    [AUDIT_PROCLAIMED] = "proclaimed"};

const char *audit_kind_name(int kind)
{
    return kind >= AUDIT_GRANTED && kind <= AUDIT_PROCLAIMED ? KINDS[kind] : "unknown";
}

const char *audit_object_name(int object)
{
    return object == AUDIT_OF_SEMAPHORE  ? "semaphore"
           : object == AUDIT_OF_FENCE    ? "fence"
           : object == AUDIT_OF_ELECTION ? "election"
                                         : "lock";
}

const char *audit_mode_name(int mode)
{
    return mode == AUDIT_MODE_WRITE ? "write" : mode == AUDIT_MODE_READ ? "read" : NULL;
}

static char *map_slots(size_t keep, size_t bytes)
{
    void *m = mmap(NULL, keep * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

Audit *audit_new(size_t keep)
{
    Audit *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->keep = keep;
    a->next_seq = 1;
    if (keep) {
        a->small = map_slots(keep, SMALL_BYTES);
        a->large = map_slots(keep, SLOT_BYTES);
        if (!a->small || !a->large || !(a->rows = calloc(keep, sizeof *a->rows))) {
            audit_free(a);
            return NULL;
        }
    }
    return a;
}

void audit_free(Audit *a)
{
    if (!a)
        return;
    if (a->small)
        munmap(a->small, a->keep * SMALL_BYTES);
    if (a->large)
        munmap(a->large, a->keep * SLOT_BYTES);
    for (size_t i = 0; a->rows && i < a->keep; i++)
        free((char *)a->rows[i].value);
    free(a->rows);
    free(a);
}

bool audit_enabled(const Audit *a) { return a->keep > 0; }

/* Stores a copy of row as the newest, evicting the oldest when full. */
static void put(Audit *a, const AuditRow *row)
{
    size_t slot = (a->head + a->n) % a->keep;
    if (a->n == a->keep) {
        slot = a->head;
        a->head = (a->head + 1) % a->keep;
        a->n--;
    }
    AuditRow *r = &a->rows[slot];
    /* A leader's value lives on the heap (rows with one are few: elections'
     * grants and proclamations), the slot's previous one goes. A copy that
     * cannot be made leaves the row without it (null). */
    free((char *)r->value);
    *r = *row;
    r->value = row->value ? strdup(row->value) : NULL;
    const char *src[5] = {row->lock, row->owner, row->key, row->peer, row->reason};
    const char **dst[5] = {&r->lock, &r->owner, &r->key, &r->peer, &r->reason};
    size_t len[5], total = 0;
    for (int i = 0; i < 5; i++) {
        len[i] = strnlen(src[i] ? src[i] : "", FIELD_MAX[i]);
        total += len[i] + 1;
    }
    char *mem = total <= SMALL_BYTES ? a->small + slot * SMALL_BYTES : a->large + slot * SLOT_BYTES;
    for (int i = 0; i < 5; i++) {
        memcpy(mem, src[i] ? src[i] : "", len[i]);
        mem[len[i]] = '\0';
        *dst[i] = mem;
        mem += len[i] + 1;
    }
    a->n++;
}

uint64_t audit_add(Audit *a, const AuditRow *row)
{
    if (!a->keep)
        return 0;
    AuditRow copy = *row;
    copy.seq = a->next_seq;
    put(a, &copy);
    return a->next_seq++;
}

void audit_start_seq(Audit *a, uint64_t first)
{
    if (!a->n)
        a->next_seq = first;
}

bool audit_list(const Audit *a, const char *lock, bool prefix, uint64_t after, size_t limit,
                void (*fn)(void *ud, const AuditRow *row), void *ud, uint64_t *looked)
{
    size_t plen = lock && prefix ? strlen(lock) : 0;
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
    bool more = false;
    for (i = lo; i < a->n; i++) {
        const AuditRow *r = &a->rows[(a->head + i) % a->keep];
        if (lock && (prefix ? strncmp(lock, r->lock, plen) : strcmp(lock, r->lock)))
            continue;
        if (given == limit) {
            more = true;
            break;
        }
        fn(ud, r);
        given++;
    }
    if (looked)
        *looked += i - lo;
    return more;
}

uint64_t audit_oldest(const Audit *a) { return a->n ? a->rows[a->head].seq : 0; }

uint64_t audit_latest(const Audit *a) { return a->next_seq - 1; }
