/*
 * router — the static route table: method + path -> handler.
 * Lock names may contain '/', so for /v1/locks/... the action is the last
 * path segment. Unknown paths are 404; known paths with another method 405.
 */
#ifndef LEASEGATE_ROUTER_H
#define LEASEGATE_ROUTER_H

#include "api/access.h"
#include "net/http.h"

typedef enum RouteResult { ROUTE_FOUND, ROUTE_NOT_FOUND, ROUTE_BAD_METHOD } RouteResult;

typedef struct RouteMatch {
    RouteResult result;
    Handler handler;
    char *arg;         /* owned by the caller: the name or resource in the path, or NULL */
    const char *allow; /* for ROUTE_BAD_METHOD */
    Access access;     /* for ROUTE_FOUND: who may call it (access.h) */
    bool json;         /* for ROUTE_FOUND: its body must be declared application/json */
} RouteMatch;

void router_match(const char *method, const char *url, RouteMatch *m);

#endif
