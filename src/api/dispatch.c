/* dispatch — the layers above HTTP; see include/leasegate/dispatch.h. */
#include "leasegate/dispatch.h"

#include "leasegate/api.h"
#include "leasegate/guard.h"
#include "leasegate/router.h"

static void begin(Request *req, const char *method, const char *url)
{
    const GuardRoute *g = guard_match(req->srv, req->raw_uri);
    if (g) {
        guard_begin(req, g, method);
        return;
    }
    RouteMatch m;
    router_match(method, url, &m);
    req->arg = m.arg; /* taken over */
    if (m.result == ROUTE_FOUND)
        req->handler = m.handler;
    else if (m.result == ROUTE_BAD_METHOD)
        req->allow = m.allow;
}

static void end(Request *req, bool delivered)
{
    guard_request_end(req);
    api_request_end(req, delivered);
}

static const HttpApp app = {begin, api_waiter_left, end};

const HttpApp *dispatch_app(void) { return &app; }
