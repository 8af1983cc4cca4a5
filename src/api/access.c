/* access — who may make which request; see access.h. */
#include "api/access.h"

#include <string.h>

#include "api/quota.h"
#include "net/auth.h"

/* The answer names the scheme (WWW-Authenticate): httphead's rule for every 401. */
static void unauthorized(Request *req, const char *why) { http_reply_invalid(req, ERR_UNAUTHORIZED, NULL, "%s", why); }

static void forbidden(Request *req, const AuthKey *k, const char *what, const char *name)
{
    http_reply_invalid(req, ERR_FORBIDDEN, json_pack("{s:s}", "key", k->name), "key '%s' (role %s) may not %s%s%s%s",
                     k->name, auth_role_name(k->role), what, name ? " '" : "", name ? name : "", name ? "'" : "");
}

/* The key the request presents (Authorization: Bearer KEY), or NULL after answering 401. */
static const AuthKey *presented_key(Request *req, AuthTable *t, unsigned *secret)
{
    const char *why;
    const AuthKey *k = auth_find_bearer(t, http_header(req, "Authorization"), secret, &why);
    if (!k)
        unauthorized(req, why);
    return k;
}

bool access_check(Request *req, Access need, const char *name)
{
    AuthTable *t = req->srv->auth;
    if (!t || need == ACCESS_PAGE || (need == ACCESS_OPEN && !req->srv->cfg.auth_metrics))
        return true;
    if (req->srv->auth_error[0]) {
        /* The keys loaded before may hold one that was just revoked: none is
         * trusted until the file loads (gateway_reload_keys). */
        http_reply_invalid(req, ERR_OVERLOADED, NULL,
                           "this server's key file did not load at its last reload (%.300s): no request that needs "
                           "a key is served until it does; retry",
                           req->srv->auth_error);
        return false;
    }
    unsigned secret;
    const AuthKey *k = presented_key(req, t, &secret);
    if (!k)
        return false;
    bool ok;
    const char *what;
    switch (need) {
    case ACCESS_OPEN:
        ok = true, what = "";
        break;
    case ACCESS_LOCKS:
        ok = k->role != AUTH_FENCE && (!name || auth_covers(k, name));
        what = k->role == AUTH_FENCE ? "use locks (role fence has /v1/fence only)" : "touch lock";
        if (k->role == AUTH_FENCE)
            name = NULL;
        break;
    case ACCESS_FENCE:
        ok = k->role != AUTH_CLIENT && auth_covers(k, name);
        what = k->role == AUTH_CLIENT ? "raise fences (only roles fence and admin may)" : "fence resource";
        if (k->role == AUTH_CLIENT)
            name = NULL;
        break;
    case ACCESS_ADMIN:
    default:
        ok = k->role == AUTH_ADMIN, what = "do this (role admin only)";
        break;
    }
    if (!ok) {
        forbidden(req, k, what, need == ACCESS_ADMIN ? NULL : name);
        return false;
    }
    /* One reference however many checks pass (a COPY's Destination is a
     * second lock): taken before the one held is given back. */
    AuthTable *held = req->access.table;
    req->access.table = auth_ref(t);
    auth_unref(held);
    req->access.key = k;
    req->access.secret = secret;
    return true;
}

bool access_check_listing(Request *req, const char *prefix)
{
    const AuthKey *k = req->access.key;
    if (!k || k->every_name)
        return true;
    for (size_t i = 0; i < k->nprefixes; i++)
        if (!strncmp(prefix, k->prefixes[i], strlen(k->prefixes[i])))
            return true;
    forbidden(req, k, "list locks outside its prefixes: add ?prefix= within", k->prefixes[0]);
    return false;
}

void access_end(Request *req)
{
    quota_wait_stop(req); /* a waiter that ended some other way (the server stopping) */
    quota_poll_stop(req);
    auth_unref(req->access.table);
    req->access.table = NULL;
    req->access.key = NULL;
}
