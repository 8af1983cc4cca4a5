/* quota — per-key limits; see include/leasegate/quota.h. */
#include "leasegate/quota.h"

#include <stdlib.h>
#include <string.h>

#include "leasegate/auth.h"
#include "leasegate/clock.h"
#include "leasegate/smap.h"

typedef struct KeyUse {
    char name[AUTH_NAME_MAX + 1]; /* the map's key */
    uint64_t held, waiting;
} KeyUse;

/* The counts of key `name`, created at zero; NULL when out of memory. */
static KeyUse *use_of(Server *s, const char *name)
{
    if (!s->key_use && !(s->key_use = smap_new()))
        return NULL;
    KeyUse *u = smap_get(s->key_use, name);
    if (u)
        return u;
    if (!(u = calloc(1, sizeof *u)))
        return NULL;
    snprintf(u->name, sizeof u->name, "%s", name);
    if (!smap_insert(s->key_use, u->name, u)) {
        free(u);
        return NULL;
    }
    return u;
}

static void over(Request *req, const char *key, const char *limit, uint64_t value)
{
    http_reply_error(req, ERR_KEY_LIMIT,
                     json_pack("{s:s, s:s, s:I}", "key", key, "limit", limit, "value", (json_int_t)value),
                     "key '%s' is at its %s of %llu: release a lock (or stop waiting) first", key, limit,
                     (unsigned long long)value);
}

bool quota_admit(Request *req, LockKind kind, const char *name, int mode, uint32_t limit, bool wait, const char *owner,
                 const char *request_id)
{
    const AuthKey *k = req->access.key;
    Server *s = req->srv;
    if (!k)
        return true;
    /* A holder whose lease ran out but that the tick has not ended yet is
     * ended by the acquire itself, which may then be granted: judge the
     * name as it will be (locktab_preview), not as the table still shows it. */
    Now now = clock_now();
    LockResult r = locktab_preview(s->locks, kind, name, (uint8_t)mode, limit, owner, request_id, &now);
    if (r == LOCK_REPLAYED || r == LOCK_LIMIT_MISMATCH)
        return true; /* a retry of a current grant, or refused: nothing new */
    bool queued = r == LOCK_BUSY;
    if (queued && !wait)
        return true; /* answered lock_held: nothing new */
    KeyUse *u = use_of(s, k->name);
    if (!u) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return false;
    }
    uint64_t max_held = k->max_held ? k->max_held : s->cfg.key_max_held;
    uint64_t max_waiters = k->max_waiters ? k->max_waiters : s->cfg.key_max_waiters;
    if (u->held + u->waiting >= max_held) {
        over(req, k->name, "max_held", max_held);
        return false;
    }
    if (queued && u->waiting >= max_waiters) {
        over(req, k->name, "max_waiters", max_waiters);
        return false;
    }
    return true;
}

void quota_held(Server *s, const char *key, int delta)
{
    KeyUse *u;
    if (!key || !(u = use_of(s, key)))
        return; /* out of memory: this grant goes uncounted (the limit errs on the lenient side) */
    if (delta > 0)
        u->held++;
    else if (u->held)
        u->held--;
}

void quota_wait_start(Request *req)
{
    KeyUse *u;
    if (!req->access.key || req->access.waiting || !(u = use_of(req->srv, req->access.key->name)))
        return;
    u->waiting++;
    req->access.waiting = true;
}

void quota_wait_stop(Request *req)
{
    KeyUse *u;
    if (!req->access.waiting)
        return;
    req->access.waiting = false;
    if ((u = use_of(req->srv, req->access.key->name)) && u->waiting)
        u->waiting--;
}

void quota_free(Server *s)
{
    smap_free(s->key_use, free);
    s->key_use = NULL;
}
