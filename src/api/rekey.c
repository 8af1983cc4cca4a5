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
    const AuthKey *old = req->access.key, *now = s->auth ? auth_find_same(s->auth, old, req->access.secret) : NULL;
    if (now && !s->auth_error[0] && still_covers(now, name, listing))
        return;
    ErrCode code = s->auth_error[0] ? ERR_OVERLOADED : now ? ERR_FORBIDDEN : ERR_UNAUTHORIZED;
    char why[300];
    if (s->auth_error[0])
        snprintf(why, sizeof why, "the key file did not load at its last reload: no key is trusted until it does");
    else if (now)
        snprintf(why, sizeof why, "key '%s' no longer covers '%s' (the key file was reloaded)", old->name, name);
    else
        snprintf(why, sizeof why,
                 "key '%s', or the secret of it this request presented, was removed (the key file was reloaded)",
                 old->name);
    if (req->wait.waiter)
        api_waiter_revoked(req, code, why);
    else if (p && p->watch.on)
        watch_end(req, code, why);
    else if (p && p->events.waiting)
        events_end_poll(req, code, why);
    else
        event_streams_end(req, code, why);
}

void rekey_reloaded(Server *s) { quota_each_keyed(s, recheck, s); }

