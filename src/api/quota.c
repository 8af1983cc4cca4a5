/* quota — the shares of keys and peers; see quota.h. */
#include "api/quota.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/smap.h"
#include "leasegate/container.h"
#include "net/auth.h"

/* What one key or one peer uses now. Freed when every count is back at zero:
 * whatever points at an entry (a lock's or a resource's Charge, a held
 * request) holds one of its counts. */
typedef struct Use {
    bool peer;
    uint64_t n[SHARE_KINDS]; /* SHARE_HELD and SHARE_WAITERS: keys only */
    char name[];             /* the map's key: the key's name, or the peer's address */
} Use;

static Smap **map_of(Server *s, bool peer) { return peer ? &s->peer_use : &s->key_use; }

/* The entry of `name`, created at zero; NULL when out of memory. */
static Use *use_of(Server *s, bool peer, const char *name)
{
    Smap **m = map_of(s, peer);
    if (!*m && !(*m = smap_new()))
        return NULL;
    Use *u = smap_get(*m, name);
    if (u)
        return u;
    size_t len = strlen(name);
    if (!(u = calloc(1, sizeof *u + len + 1)))
        return NULL;
    u->peer = peer;
    memcpy(u->name, name, len + 1);
    if (!smap_insert(*m, u->name, u)) {
        free(u);
        return NULL;
    }
    return u;
}

static void drop_if_unused(Server *s, Use *u)
{
    for (int k = 0; k < SHARE_KINDS; k++)
        if (u->n[k])
            return;
    smap_remove(*map_of(s, u->peer), u->name);
    free(u);
}

/* delta 0: nothing counted (a name that was not made after all); the
 * entry goes if nothing else counts on it. */
static void count(Server *s, Use *u, ShareKind k, int delta)
{
    if (!u)
        return;
    if (delta > 0)
        u->n[k]++;
    else if (delta < 0 && u->n[k])
        u->n[k]--;
    drop_if_unused(s, u);
}

static void count_refusal(Server *s, ShareKind k, bool peer) { s->metrics.share_refused[peer][k]++; }

/* A share as large as the whole is no share: the server-wide limit answers
 * (503, naming it) when it is reached. */
static uint64_t below(uint64_t share, uint64_t whole) { return share < whole ? share : UINT64_MAX; }

static uint64_t limit_of_raw(const Server *s, const AuthKey *key, ShareKind k);

/* The size of share k for key k (its line's, else the server's), or for a
 * peer (key NULL); UINT64_MAX when it does not limit anything. */
static uint64_t limit_of(const Server *s, const AuthKey *key, ShareKind k)
{
    uint64_t v = limit_of_raw(s, key, k);
    return k == SHARE_NAMES ? below(v, s->cfg.max_locks) : k == SHARE_FENCES ? below(v, s->cfg.max_fences) : v;
}

static uint64_t limit_of_raw(const Server *s, const AuthKey *key, ShareKind k)
{
    const Config *c = &s->cfg;
    if (!key) {
        switch (k) {
        case SHARE_NAMES:
            return c->peer_max_names;
        case SHARE_FENCES:
            return c->peer_max_fences;
        case SHARE_POLLS:
            return c->peer_max_polls;
        case SHARE_WATCH_BYTES:
            return c->peer_max_watch_bytes;
        case SHARE_VALUE_BYTES:
            return c->peer_max_value_bytes;
        default:
            return UINT64_MAX;
        }
    }
    switch (k) {
    case SHARE_HELD:
        return key->max_held ? key->max_held : c->key_max_held;
    case SHARE_WAITERS:
        return key->max_waiters ? key->max_waiters : c->key_max_waiters;
    case SHARE_NAMES:
        return key->max_names ? key->max_names : c->key_max_names;
    case SHARE_FENCES:
        return key->max_fences ? key->max_fences : c->key_max_fences;
    case SHARE_POLLS:
        return key->max_polls ? key->max_polls : c->key_max_polls;
    case SHARE_WATCH_BYTES:
        return key->max_watch_bytes ? key->max_watch_bytes : c->key_max_watch_bytes;
    case SHARE_VALUE_BYTES:
        return key->max_value_bytes ? key->max_value_bytes : c->key_max_value_bytes;
    default:
        return UINT64_MAX;
    }
}

static const char *const WHAT[SHARE_KINDS] = {
    [SHARE_HELD] = "release a lock (or stop waiting) first",
    [SHARE_WAITERS] = "stop waiting somewhere first",
    [SHARE_NAMES] = "lock names are counted until forgotten (--forget-idle-after): reuse names",
    [SHARE_FENCES] = "fence resources are counted until forgotten (--forget-idle-after)",
    [SHARE_POLLS] = "end a long-poll, watch or event stream first",
    [SHARE_WATCH_BYTES] = "each watch counts the size of its lock's view: end watches, or watch smaller locks",
    [SHARE_VALUE_BYTES] = "a lock's value counts against the key (and client) that wrote it until another is "
                          "written: write smaller values, or null",
};

static void over(Request *req, const AuthKey *key, const char *peer, ShareKind k, uint64_t value)
{
    count_refusal(req->srv, k, key == NULL);
    if (key)
        http_reply_error(req, ERR_KEY_LIMIT,
                         json_pack("{s:s, s:s, s:I}", "key", key->name, "limit", share_limit_name(k), "value",
                                   (json_int_t)value),
                         "key '%s' is at its %s of %llu: %s", key->name, share_limit_name(k),
                         (unsigned long long)value, WHAT[k]);
    else
        http_reply_error(req, ERR_PEER_LIMIT,
                         json_pack("{s:s, s:s, s:I}", "peer", peer, "limit", share_limit_name(k), "value",
                                   (json_int_t)value),
                         "this client (%s) is at its %s of %llu: %s (behind a reverse proxy every client is "
                         "one peer: see --peer-max-%s)",
                         peer, share_limit_name(k), (unsigned long long)value, WHAT[k],
                         k == SHARE_NAMES    ? "names"
                         : k == SHARE_FENCES ? "fences"
                         : k == SHARE_POLLS  ? "polls"
                         : k == SHARE_WATCH_BYTES ? "watch-bytes"
                                                 : "value-bytes");
}

static void out_of_memory(Request *req) { http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry"); }

/* The entries of req's key (if any) and peer, created at zero, with room for
 * `bytes` more of share k in both, less `old_bytes` that go from the entries
 * `old` holds when they are req's own: false after answering 429 (or 503). */
static bool room_for_bytes(Request *req, ShareKind k, const Charge *old, size_t old_bytes, size_t bytes,
                           Use **key_use, Use **peer_use)
{
    Server *s = req->srv;
    const AuthKey *key = req->access.key;
    char peer[HTTP_PEER_MAX];
    http_peer_address(req, peer, sizeof peer);
    *key_use = key ? use_of(s, false, key->name) : NULL;
    *peer_use = use_of(s, true, peer);
    if ((key && !*key_use) || !*peer_use) {
        if (*key_use)
            drop_if_unused(s, *key_use);
        if (*peer_use)
            drop_if_unused(s, *peer_use);
        out_of_memory(req);
        return false;
    }
    uint64_t kmax = limit_of(s, key, k), pmax = limit_of(s, NULL, k);
    uint64_t kfreed = old->key == *key_use ? old_bytes : 0, pfreed = old->peer == *peer_use ? old_bytes : 0;
    bool key_over = key && (*key_use)->n[k] - kfreed + bytes > kmax;
    bool peer_over = (*peer_use)->n[k] - pfreed + bytes > pmax;
    if (!key_over && !peer_over)
        return true;
    over(req, key_over ? key : NULL, peer, k, key_over ? kmax : pmax);
    if (*key_use)
        drop_if_unused(s, *key_use);
    drop_if_unused(s, *peer_use);
    return false;
}

/* Room for one more of share k, nothing freed (room_for_bytes). */
static bool room_for(Request *req, ShareKind k, Use **key_use, Use **peer_use)
{
    static const Charge NOTHING = {NULL, NULL};
    return room_for_bytes(req, k, &NOTHING, 0, 1, key_use, peer_use);
}

bool quota_admit(Request *req, LockKind kind, const char *name, int mode, uint32_t limit, uint32_t permits, bool wait,
                 const char *owner, const char *request_id, const Now *now, Charge *charge)
{
    const AuthKey *k = req->access.key;
    Server *s = req->srv;
    *charge = (Charge){NULL, NULL};
    /* A holder whose lease ran out but that the tick has not ended yet is
     * ended by the acquire itself, which may then be granted: judge the
     * name as it will be (locktab_preview), not as the table still shows it,
     * at the same instant as the acquire that follows: a later clock could
     * end a lease the preview still counted, and grant past the key's limit. */
    LockResult r = locktab_preview(s->locks, kind, name, (uint8_t)mode, limit, permits, owner, request_id,
                                   k ? k->name : NULL, now);
    if (r == LOCK_REPLAYED || r == LOCK_LIMIT_MISMATCH)
        return true; /* a retry of a current grant (by its own key), or refused: nothing new */
    bool queued = r == LOCK_BUSY;
    if (queued && !wait)
        return true; /* answered lock_held: nothing new */
    if (!locktab_get(s->locks, kind, name)) {
        /* A new name: the key's and the peer's share of the table. */
        Use *ku, *pu;
        if (!room_for(req, SHARE_NAMES, &ku, &pu))
            return false;
        *charge = (Charge){ku, pu};
    }
    if (!k)
        return true;
    Use *u = use_of(s, false, k->name);
    if (!u) {
        out_of_memory(req);
        return false;
    }
    uint64_t max_held = limit_of(s, k, SHARE_HELD), max_waiters = limit_of(s, k, SHARE_WAITERS);
    ShareKind refused = u->n[SHARE_HELD] + u->n[SHARE_WAITERS] >= max_held       ? SHARE_HELD
                        : queued && u->n[SHARE_WAITERS] >= max_waiters ? SHARE_WAITERS
                                                                        : SHARE_KINDS;
    if (refused == SHARE_KINDS)
        return true;
    over(req, k, NULL, refused, refused == SHARE_HELD ? max_held : max_waiters);
    drop_if_unused(s, u);
    if (charge->peer)
        drop_if_unused(s, charge->peer);
    *charge = (Charge){NULL, NULL};
    return false;
}

void quota_named(Server *s, const Charge *c, int delta)
{
    count(s, c->key, SHARE_NAMES, delta);
    count(s, c->peer, SHARE_NAMES, delta);
}

bool quota_admit_fence(Request *req, Charge *charge)
{
    Use *ku, *pu;
    *charge = (Charge){NULL, NULL};
    if (!room_for(req, SHARE_FENCES, &ku, &pu))
        return false;
    *charge = (Charge){ku, pu};
    return true;
}

void quota_fenced(Server *s, const Charge *c, int delta)
{
    count(s, c->key, SHARE_FENCES, delta);
    count(s, c->peer, SHARE_FENCES, delta);
}

Charge quota_charge_of_key(Server *s, const char *key)
{
    return (Charge){key ? use_of(s, false, key) : NULL, NULL};
}

void quota_held(Server *s, const char *key, int delta)
{
    Use *u;
    if (!key || !(u = use_of(s, false, key)))
        return; /* out of memory: this grant goes uncounted (the limit errs on the lenient side) */
    count(s, u, SHARE_HELD, delta);
}

/* A request with a key that waits or is held open is listed for SIGHUP. */
static void list_keyed(Request *req)
{
    RequestAccess *a = &req->access;
    bool keyed = a->key && (a->waiting || a->polling);
    if (keyed && !a->listed) {
        a->listed = true;
        dlist_append(&req->srv->keyed, &a->link);
    } else if (!keyed && a->listed) {
        a->listed = false;
        dlist_remove(&req->srv->keyed, &a->link);
    }
}

void quota_wait_start(Request *req)
{
    Use *u;
    if (!req->access.key || req->access.waiting || !(u = use_of(req->srv, false, req->access.key->name)))
        return;
    count(req->srv, u, SHARE_WAITERS, +1);
    req->access.waiting = true;
    list_keyed(req);
}

void quota_wait_stop(Request *req)
{
    if (!req->access.waiting)
        return;
    req->access.waiting = false;
    list_keyed(req);
    count(req->srv, use_of(req->srv, false, req->access.key->name), SHARE_WAITERS, -1);
}

bool quota_poll_start(Request *req)
{
    Use *ku, *pu;
    if (req->access.polling)
        return true;
    if (!room_for(req, SHARE_POLLS, &ku, &pu))
        return false;
    count(req->srv, ku, SHARE_POLLS, +1);
    count(req->srv, pu, SHARE_POLLS, +1);
    req->access.key_use = ku;
    req->access.peer_use = pu;
    req->access.polling = true;
    list_keyed(req);
    return true;
}

/* Adds (or takes away) `delta` bytes of watch answers on u. */
static void count_bytes(Use *u, int64_t delta)
{
    if (!u)
        return;
    uint64_t *n = &u->n[SHARE_WATCH_BYTES];
    *n = delta >= 0 ? *n + (uint64_t)delta : *n >= (uint64_t)-delta ? *n - (uint64_t)-delta : 0;
}

bool quota_watch_start(Request *req, uint64_t bytes)
{
    RequestAccess *a = &req->access;
    Server *s = req->srv;
    const AuthKey *key = a->key;
    Use *ku = a->key_use, *pu = a->peer_use;
    uint64_t kmax = limit_of(s, key, SHARE_WATCH_BYTES), pmax = limit_of(s, NULL, SHARE_WATCH_BYTES);
    bool key_over = ku && ku->n[SHARE_WATCH_BYTES] + bytes > kmax;
    bool peer_over = pu && pu->n[SHARE_WATCH_BYTES] + bytes > pmax;
    if (key_over || peer_over) {
        char peer[HTTP_PEER_MAX];
        http_peer_address(req, peer, sizeof peer);
        over(req, key_over ? key : NULL, peer, SHARE_WATCH_BYTES, key_over ? kmax : pmax);
        return false;
    }
    quota_watch_answer(req, bytes);
    return true;
}

void quota_watch_answer(Request *req, uint64_t bytes)
{
    RequestAccess *a = &req->access;
    if (!a->polling)
        return;
    int64_t delta = (int64_t)bytes - (int64_t)a->watch_bytes;
    count_bytes(a->key_use, delta);
    count_bytes(a->peer_use, delta);
    a->watch_bytes = bytes;
}

/* Adds `bytes` (or takes them away) on u, counted in share k. */
static void add_bytes(Server *s, Use *u, ShareKind k, int64_t bytes)
{
    if (!u)
        return;
    uint64_t *n = &u->n[k];
    *n = bytes >= 0 ? *n + (uint64_t)bytes : *n >= (uint64_t)-bytes ? *n - (uint64_t)-bytes : 0;
    drop_if_unused(s, u);
}

bool quota_admit_value(Request *req, const Charge *old, size_t old_bytes, size_t bytes, Charge *charge)
{
    Server *s = req->srv;
    Use *ku, *pu;
    *charge = (Charge){NULL, NULL};
    if (!room_for_bytes(req, SHARE_VALUE_BYTES, old, old_bytes, bytes, &ku, &pu))
        return false;
    if (bytes == 0) { /* null: nothing to count, no entry held */
        if (ku)
            drop_if_unused(s, ku);
        drop_if_unused(s, pu);
        return true;
    }
    /* Taken now: counted from here on (the caller takes the old value's away once it is written over). */
    add_bytes(s, ku, SHARE_VALUE_BYTES, (int64_t)bytes);
    add_bytes(s, pu, SHARE_VALUE_BYTES, (int64_t)bytes);
    *charge = (Charge){ku, pu};
    return true;
}

void quota_value_counted(Server *s, const Charge *c, size_t bytes, int sign)
{
    add_bytes(s, c->key, SHARE_VALUE_BYTES, sign * (int64_t)bytes);
    add_bytes(s, c->peer, SHARE_VALUE_BYTES, sign * (int64_t)bytes);
}

void quota_poll_stop(Request *req)
{
    RequestAccess *a = &req->access;
    if (!a->polling)
        return;
    quota_watch_answer(req, 0);
    a->polling = false;
    list_keyed(req);
    count(req->srv, a->key_use, SHARE_POLLS, -1);
    count(req->srv, a->peer_use, SHARE_POLLS, -1);
    a->key_use = a->peer_use = NULL;
}

void quota_each_keyed(Server *s, void (*fn)(void *ud, Request *req), void *ud)
{
    /* The next one is read first: fn may end (and unlist) the one it is given. */
    for (DLink *l = s->keyed.head, *next; l; l = next) {
        next = l->next;
        fn(ud, CONTAINER_OF(l, Request, access.link));
    }
}

void quota_free(Server *s)
{
    smap_free(s->key_use, free);
    smap_free(s->peer_use, free);
    s->key_use = s->peer_use = NULL;
}
