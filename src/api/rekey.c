/* rekey — a key removed or narrowed ends what it holds open; see rekey.h. */
#include "api/rekey.h"

#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "api/event_stream.h"
#include "api/events.h"
#include "api/quota.h"
#include "api/watch.h"
#include "net/auth.h"
#include "net/dormant.h"

/* Does k still cover what req holds open: a lock name, or a listing's prefix? */
static bool still_covers(const AuthKey *k, const char *name, bool listing)
{
    if (k->role == AUTH_FENCE)
        return false;
    if (!listing || k->every_name)
        return auth_covers(k, name);
    for (size_t i = 0; i < k->nprefixes; i++)
        if (!strncmp(name, k->prefixes[i], strlen(k->prefixes[i])))
            return true;
    return false;
}

/* Whether access, which holds `name` open (a listing's prefix with
 * `listing`), lost it at this reload: then *code and why say how. */
static bool lost(const Server *s, const RequestAccess *access, const char *name, bool listing, ErrCode *code,
                 char *why, size_t whylen)
{
    const AuthKey *old = access->key, *now = s->auth ? auth_find_same(s->auth, old, access->secret) : NULL;
    if (now && !s->auth_error[0] && still_covers(now, name, listing))
        return false;
    *code = s->auth_error[0] ? ERR_OVERLOADED : now ? ERR_FORBIDDEN : ERR_UNAUTHORIZED;
    if (s->auth_error[0])
        snprintf(why, whylen, "the key file did not load at its last reload: no key is trusted until it does");
    else if (now)
        snprintf(why, whylen, "key '%s' no longer covers '%s' (the key file was reloaded)", old->name, name);
    else
        snprintf(why, whylen,
                 "key '%s', or the secret of it this request presented, was removed (the key file was reloaded)",
                 old->name);
    return true;
}

static void recheck(void *ud, Request *req)
{
    Server *s = ud;
    const char *name;
    bool listing = false;
    const RequestPoll *p = req->poll; /* NULL unless a long-poll */
    if (req->wait.waiter)
        name = locktab_waiter_lock(req->wait.waiter);
    else if (p && p->watch.on)
        name = p->watch.name;
    else if (p && (p->events.waiting || p->events.stream)) {
        const char *prefix = p->events.stream ? event_streams_prefix(req) : p->events.prefix;
        name = prefix ? prefix : "";
        listing = true;
    } else
        return; /* answered already: only its end is to come */
    ErrCode code;
    char why[300];
    if (!lost(s, &req->access, name, listing, &code, why, sizeof why))
        return;
    if (req->wait.waiter)
        api_waiter_revoked(req, code, why);
    else if (p && p->watch.on)
        watch_end(req, code, why);
    else if (p && p->events.waiting)
        events_end_poll(req, code, why);
    else
        event_streams_end(req, code, why);
}

/* A dormant waiter's key (dormant.h: off Server.keyed while it dozes): woken
 * only when it is to be answered. Those to answer are taken out of
 * Server.dormant first, as answering one may wake others (a hand-off). */
static void recheck_dormant(Server *s)
{
    DList lost_list = {0};
    for (DLink *l = s->dormant.head, *next; l; l = next) {
        next = l->next;
        Dormant *d = DLIST_ITEM(l, Dormant, link);
        ErrCode code;
        char why[300];
        if (d->access.key && d->waiter &&
            lost(s, &d->access, locktab_waiter_lock(d->waiter), false, &code, why, sizeof why)) {
            dlist_remove(&s->dormant, &d->link);
            d->list = &lost_list;
            dlist_append(&lost_list, &d->link);
        }
    }
    while (lost_list.head) {
        Dormant *d = DLIST_ITEM(lost_list.head, Dormant, link);
        ErrCode code;
        char why[300];
        /* Decided again: the reasons were not kept for the moment in between. */
        bool gone = lost(s, &d->access, locktab_waiter_lock(d->waiter), false, &code, why, sizeof why);
        Request *req = dormant_wake(d); /* leaves lost_list, woken or doomed (closed once it can be) */
        if (req && gone)
            api_waiter_revoked(req, code, why);
    }
}

void rekey_reloaded(Server *s)
{
    recheck_dormant(s);
    quota_each_keyed(s, recheck, s);
}
