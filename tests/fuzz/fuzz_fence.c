/*
 * fuzz_fence — fence marks (src/core/fence.h) driven by operations
 * decoded from the input, with a fake clock, against a model:
 *
 *  - fence_check accepts exactly the tokens >= the mark (the resource's own,
 *    else its bucket's floor), reports that mark, and changes no mark
 *    (fence_max of every resource is the same before and after);
 *  - a mark never decreases for a resource, also across fence_tick forgetting
 *    it (fence_max then answers the floor, which is >= its last mark) and
 *    across a restart (fence_load, fence_load_floor); only fence_remove may
 *    drop one (documented: its owner is gone);
 *  - fence_raise raises to exactly max(mark, token);
 *  - max_resources: a new resource beyond it is FENCE_OVERLOADED, never
 *    created; fence_count matches the model;
 *  - forgetting: exactly the resources idle for forget_idle_ms, earliest
 *    first, none left due after fence_tick, hooks.forgotten with the right
 *    bucket and new floor; fence_next_timeout_ms matches the model;
 *  - fence_bucket is in range and stable.
 * The resource names include pairs that share a floor bucket.
 */
#include <stdbool.h>

#include "core/fence.h"
#include "fuzz.h"

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)
#define NRES 8
#define MAX_OPS 800

static char names[NRES][32];

typedef struct MRes {
    bool known;
    uint64_t mark;
    int64_t idle_deadline;
    uint64_t seen_max; /* the highest fence_max ever seen since the last fence_remove */
} MRes;

typedef struct Model {
    Fence *f;
    size_t max_resources;
    int64_t forget_ms;
    Now now;
    MRes res[NRES];
    uint64_t floors[NRES]; /* the floor of each resource's bucket (shared within a bucket) */
    uint32_t bucket[NRES];
    bool in_tick;
    bool with_hooks; /* else the model forgets by itself after fence_tick */
    int ops;
} Model;

static Model m;

static void find_names(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    /* Two pairs that share a bucket, and four others. */
    int n = 0;
    for (int pair = 0; pair < 2; pair++) {
        char first[32];
        snprintf(first, sizeof first, "res/%c", 'a' + pair);
        uint32_t b = fence_bucket(first);
        for (unsigned k = 0;; k++) {
            char other[32];
            snprintf(other, sizeof other, "other/%u", k);
            if (fence_bucket(other) == b && strcmp(other, first)) {
                snprintf(names[n++], sizeof names[0], "%s", first);
                snprintf(names[n++], sizeof names[0], "%s", other);
                break;
            }
        }
    }
    static const char *const rest[] = {"orders/42", "x", "a-b.c~d:e", "z"};
    for (int k = 0; n < NRES; k++)
        snprintf(names[n++], sizeof names[0], "%s", rest[k]);
}

static uint64_t floor_of(int i)
{
    uint64_t fl = 0;
    for (int k = 0; k < NRES; k++)
        if (m.bucket[k] == m.bucket[i] && m.floors[k] > fl)
            fl = m.floors[k];
    return fl;
}

static void set_floor(int i, uint64_t v)
{
    for (int k = 0; k < NRES; k++)
        if (m.bucket[k] == m.bucket[i] && v > m.floors[k])
            m.floors[k] = v;
}

static uint64_t model_max(int i) { return m.res[i].known ? m.res[i].mark : floor_of(i); }

static int64_t min_idle(void)
{
    int64_t min = INT64_MAX;
    if (m.forget_ms <= 0)
        return min;
    for (int i = 0; i < NRES; i++)
        if (m.res[i].known && m.res[i].idle_deadline < min)
            min = m.res[i].idle_deadline;
    return min;
}

static int name_index(const char *name)
{
    for (int i = 0; i < NRES; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

static void on_forgotten(void *ud, const char *resource, uint32_t bucket, uint64_t floor, const Charge *charge)
{
    (void)ud;
    (void)charge;
    CHECK(m.in_tick, "hooks.forgotten outside fence_tick");
    int i = name_index(resource);
    CHECK(i >= 0, "hooks.forgotten for an unknown resource '%s'", resource);
    MRes *r = &m.res[i];
    CHECK(r->known, "'%s' forgotten twice or never created", resource);
    CHECK(bucket == m.bucket[i], "'%s' forgotten into bucket %u, fence_bucket says %u", resource, bucket, m.bucket[i]);
    CHECK(r->idle_deadline <= m.now.mono_ms, "'%s' forgotten at %lld before its idle deadline %lld", resource,
          (long long)m.now.mono_ms, (long long)r->idle_deadline);
    CHECK(r->idle_deadline == min_idle(), "'%s' forgotten (deadline %lld) before an earlier one (%lld)", resource,
          (long long)r->idle_deadline, (long long)min_idle());
    uint64_t want = floor_of(i) > r->mark ? floor_of(i) : r->mark;
    CHECK(floor == want, "'%s' (mark %llu) forgotten with floor %llu, expected %llu", resource,
          (unsigned long long)r->mark, (unsigned long long)floor, (unsigned long long)want);
    set_floor(i, floor);
    r->known = false;
}

static void check_all(void)
{
    size_t count = 0;
    for (int i = 0; i < NRES; i++) {
        MRes *r = &m.res[i];
        count += r->known;
        uint64_t got = fence_max(m.f, names[i]);
        CHECK(got == model_max(i), "fence_max('%s') = %llu, model %llu", names[i], (unsigned long long)got,
              (unsigned long long)model_max(i));
        CHECK(got >= r->seen_max, "the mark of '%s' went back from %llu to %llu", names[i],
              (unsigned long long)r->seen_max, (unsigned long long)got);
        r->seen_max = got;
        CHECK(fence_bucket(names[i]) == m.bucket[i] && m.bucket[i] < FENCE_FLOOR_BUCKETS, "fence_bucket unstable");
    }
    CHECK(fence_count(m.f) == count, "fence_count %zu, model %zu", fence_count(m.f), count);
    int64_t min = min_idle();
    int64_t want = min == INT64_MAX ? -1 : min > m.now.mono_ms ? min - m.now.mono_ms : 0;
    int64_t got = fence_next_timeout_ms(m.f, &m.now);
    CHECK(got == want, "fence_next_timeout_ms %lld, model %lld", (long long)got, (long long)want);
}

static uint64_t pick_token(FuzzIn *in, uint64_t cur)
{
    uint8_t b = fuzz_u8(in);
    switch (b % 8) {
    case 0: return cur;
    case 1: return cur + 1;
    case 2: return cur - 1; /* wraps for 0: a huge token */
    case 3: return cur + 1 + b / 8;
    case 4: return cur > b / 8 ? cur - b / 8 : 0;
    case 5: return b / 8;
    case 6: return b & 8 ? UINT64_MAX : (UINT64_C(1) << 62);
    default: return cur + 2;
    }
}

static void touch(int i)
{
    if (m.forget_ms > 0)
        m.res[i].idle_deadline = m.now.mono_ms + m.forget_ms;
}

static void op_check(FuzzIn *in, bool raise)
{
    int i = fuzz_u8(in) % NRES;
    MRes *r = &m.res[i];
    uint64_t cur = model_max(i);
    uint64_t token = pick_token(in, cur);
    size_t count = 0;
    for (int k = 0; k < NRES; k++)
        count += m.res[k].known;
    FenceResult want;
    if (token < cur)
        want = FENCE_STALE;
    else if (!r->known && count >= m.max_resources)
        want = FENCE_OVERLOADED;
    else
        want = FENCE_ACCEPTED;
    uint64_t before[NRES];
    for (int k = 0; k < NRES; k++)
        before[k] = fence_max(m.f, names[k]);
    uint64_t max_token = 12345;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] check%s %s token %llu (mark %llu)\n", m.ops, raise ? "+raise" : "", names[i],
                (unsigned long long)token, (unsigned long long)cur);
    FenceResult got = fence_check(m.f, names[i], token, &m.now, &max_token);
    CHECK(got == want, "fence_check('%s', %llu) = %d, model %d (mark %llu)", names[i], (unsigned long long)token,
          (int)got, (int)want, (unsigned long long)cur);
    CHECK(max_token == cur, "fence_check('%s') reported max_token %llu, the mark is %llu", names[i],
          (unsigned long long)max_token, (unsigned long long)cur);
    for (int k = 0; k < NRES; k++)
        CHECK(fence_max(m.f, names[k]) == before[k], "fence_check('%s') changed the mark of '%s' from %llu to %llu",
              names[i], names[k], (unsigned long long)before[k], (unsigned long long)fence_max(m.f, names[k]));
    if (got == FENCE_ACCEPTED) {
        if (!r->known) {
            r->known = true;
            r->mark = floor_of(i);
        }
        touch(i);
    } else if (got == FENCE_STALE && r->known) {
        touch(i);
    }
    if (got == FENCE_ACCEPTED && raise) {
        fence_raise(m.f, names[i], token);
        if (token > r->mark)
            r->mark = token;
    }
}

static void op_tick(FuzzIn *in)
{
    uint8_t b = fuzz_u8(in);
    int64_t d;
    if (b % 3 == 0) {
        int64_t next = fence_next_timeout_ms(m.f, &m.now);
        d = next < 0 ? 0 : next + (b / 3 % 3) - 1;
        if (d < 0)
            d = 0;
    } else {
        d = b % 3 == 1 ? b / 3 % 10 : b;
    }
    m.now.mono_ms += d;
    m.now.wall_ms += d;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] tick at %lld\n", m.ops, (long long)m.now.mono_ms);
    m.in_tick = true;
    fence_tick(m.f, &m.now);
    m.in_tick = false;
    if (!m.with_hooks)
        for (int i = 0; i < NRES; i++)
            if (m.forget_ms > 0 && m.res[i].known && m.res[i].idle_deadline <= m.now.mono_ms) {
                set_floor(i, m.res[i].mark);
                m.res[i].known = false;
            }
    CHECK(min_idle() > m.now.mono_ms, "after fence_tick at %lld a resource idle since %lld is still there",
          (long long)m.now.mono_ms, (long long)min_idle());
}

static void op_remove(FuzzIn *in)
{
    int i = fuzz_u8(in) % NRES;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] remove %s\n", m.ops, names[i]);
    fence_remove(m.f, names[i]);
    m.res[i].known = false;
    m.res[i].seen_max = 0; /* its owner is gone: the mark may drop to the floor */
}

static void new_fence(void)
{
    FenceHooks hooks = {NULL, on_forgotten};
    m.f = fence_new(m.max_resources, m.forget_ms, m.with_hooks ? &hooks : NULL);
    CHECK(m.f != NULL, "fence_new failed");
}

/* Restart: the durable marks and floors loaded into a new Fence. */
static void op_restart(FuzzIn *in)
{
    int64_t pause = fuzz_u8(in) % 40;
    if (fuzz_tracing())
        fprintf(stderr, "[%d] restart after %lld ms\n", m.ops, (long long)pause);
    fence_free(m.f);
    m.now.mono_ms += pause;
    m.now.wall_ms += pause;
    new_fence();
    for (int i = 0; i < NRES; i++)
        if (m.floors[i])
            fence_load_floor(m.f, m.bucket[i], m.floors[i]);
    fence_load_floor(m.f, FENCE_FLOOR_BUCKETS + fuzz_u8(in), UINT64_MAX); /* out of range: ignored */
    for (int i = 0; i < NRES; i++) {
        if (!m.res[i].known)
            continue;
        FenceResult r = fence_load(m.f, names[i], m.res[i].mark, &m.now);
        CHECK(r == FENCE_ACCEPTED, "fence_load('%s') = %d", names[i], (int)r);
        if (floor_of(i) > m.res[i].mark) /* a stored mark below its floor starts at the floor */
            m.res[i].mark = floor_of(i);
        touch(i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    find_names();
    FuzzIn in = {data, size, 0};
    memset(&m, 0, sizeof m);
    for (int i = 0; i < NRES; i++)
        m.bucket[i] = fence_bucket(names[i]);
    m.max_resources = 1 + fuzz_u8(&in) % 8;
    uint8_t f = fuzz_u8(&in);
    m.forget_ms = f % 4 == 0 ? 0 : 1 + f % 50;
    m.with_hooks = m.forget_ms > 0 && f / 4 % 4 != 0;
    m.now.mono_ms = 500 + fuzz_u8(&in);
    m.now.wall_ms = 1700000000000LL;
    new_fence();
    if (fuzz_tracing())
        fprintf(stderr, "max_resources %zu forget %lld; names %s %s (bucket %u) %s %s (bucket %u)\n", m.max_resources,
                (long long)m.forget_ms, names[0], names[1], m.bucket[0], names[2], names[3], m.bucket[2]);
    for (m.ops = 0; fuzz_more(&in) && m.ops < MAX_OPS; m.ops++) {
        uint8_t op = fuzz_u8(&in);
        switch (op % 8) {
        case 0: case 1: case 2:
            op_check(&in, true);
            break;
        case 3:
            op_check(&in, false);
            break;
        case 4: case 5:
            op_tick(&in);
            break;
        case 6:
            if (op / 8 % 4 == 0)
                op_remove(&in);
            else
                op_check(&in, true);
            break;
        default:
            op_restart(&in);
            break;
        }
        check_all();
    }
    fence_free(m.f);
    return 0;
}
