/* dispatch — the layers above HTTP; see dispatch.h. */
#include "api/dispatch.h"

#include <string.h>
#include <strings.h>

#include "api/access.h"
#include "api/api.h"
#include "api/event_stream.h"
#include "api/events.h"
#include "api/router.h"
#include "api/watch.h"
#include "guard/guard.h"
#include "guard/s3req.h"

/* Is the declared media type application/json (parameters such as charset
 * allowed)? A page on another origin can send text/plain or a form without
 * asking (no CORS preflight), never application/json: requiring it keeps web
 * pages off the API even on localhost. */
static bool declared_json(const char *ctype)
{
    if (!ctype)
        return false;
    while (*ctype == ' ' || *ctype == '\t')
        ctype++;
    static const char JSON[] = "application/json";
    if (strncasecmp(ctype, JSON, sizeof JSON - 1))
        return false;
    char next = ctype[sizeof JSON - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

/* A guarded request needs a key that may touch every lock it is bound to:
 * its path's, and a COPY's or MOVE's Destination's. A path the guard will
 * refuse anyway (not canonical) is left to it once the key is known. */
static bool guard_allowed(Request *req, const GuardRoute *g, const char *method)
{
    if (!req->srv->auth)
        return true;
    /* An S3 client's signature is made with a lease, which the guard checks
     * (s3auth.h): the lease's key was allowed to take it. */
    if (g->kind == GUARD_S3 && s3req_signed(req))
        return true;
    char locks[2][GUARD_BINDING_MAX + 1];
    size_t n = guard_bound_locks(req, g, method, locks);
    /* An S3 route's bucket itself (a listing): any key that uses locks, and
     * the listing shows only the names it covers (s3list.h). */
    if (g->kind == GUARD_S3 && n == 1 && !locks[0][0])
        return access_check(req, ACCESS_LOCKS, NULL);
    for (size_t i = 0; i < n; i++)
        if (!access_check(req, ACCESS_LOCKS, guard_binding_name(locks[i])))
            return false;
    return true;
}

static void begin(Request *req, const char *method, const char *url)
{
    const GuardRoute *g = guard_match(req->srv, req->raw_uri);
    if (g) {
        if (guard_prepare(req, g) && guard_allowed(req, g, method))
            guard_begin(req, g, method, req->access.key ? req->access.key->name : NULL);
        return;
    }
    RouteMatch m;
    router_match(method, url, &m);
    req->arg = m.arg; /* taken over */
    if (m.result == ROUTE_FOUND) {
        if (!access_check(req, m.access, m.arg))
            return;
        if (m.json && !declared_json(http_header(req, "Content-Type"))) {
            http_reply_invalid(req, ERR_UNSUPPORTED_MEDIA_TYPE, NULL,
                             "the body must be declared Content-Type: application/json (curl: --json '{...}')");
            return;
        }
        req->handler = m.handler;
    } else if (m.result == ROUTE_BAD_METHOD)
        req->allow = m.allow;
}

static void end(Request *req, bool delivered)
{
    guard_request_end(req);
    api_request_end(req, delivered);
    events_request_end(req);
    event_streams_request_end(req);
    watch_request_end(req);
    access_end(req);
}

static const HttpApp app = {begin, api_waiter_left, end};

const HttpApp *dispatch_app(void) { return &app; }
