/* router — the route table; see router.h. */
#include "api/router.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/event_stream.h"
#include "api/events.h"
#include "core/names.h"

typedef enum Shape {
    EXACT,       /* the path is exactly `path` */
    LOCK_ACTION, /* `path` + NAME + "/" + action */
    LOCK_NAME,   /* `path` + NAME, whose last segment is not an action */
    ELECTION_NAME, /* `path` + NAME, whose last segment is not an election's action */
    RESOURCE,    /* `path` + NAME */
} Shape;

typedef struct Route {
    const char *method;
    Shape shape;
    const char *path;
    const char *action;
    Handler handler;
    const char *allow; /* every method this path shape accepts */
    Access access;
    bool json;         /* takes a JSON body (declared application/json) */
} Route;

static const Route ROUTES[] = {
    {"GET", EXACT, "/", NULL, api_dashboard, "GET, HEAD", ACCESS_PAGE, false},
    {"GET", EXACT, "/healthz", NULL, api_healthz, "GET, HEAD", ACCESS_OPEN, false},
    {"GET", EXACT, "/readyz", NULL, api_readyz, "GET, HEAD", ACCESS_PAGE, false},
    {"GET", EXACT, "/metrics", NULL, api_metrics, "GET, HEAD", ACCESS_OPEN, false},
    {"GET", EXACT, "/v1/locks", NULL, api_list_locks, "GET, HEAD", ACCESS_LOCKS, false},
    {"GET", EXACT, "/v1/semaphores", NULL, api_list_semaphores, "GET, HEAD", ACCESS_LOCKS, false},
    {"GET", EXACT, "/v1/audit", NULL, api_audit, "GET, HEAD", ACCESS_ADMIN, false},
    {"GET", EXACT, "/v1/backup", NULL, api_backup, "GET, HEAD", ACCESS_ADMIN, false},
    {"GET", EXACT, "/v1/events", NULL, api_events, "GET, HEAD", ACCESS_LOCKS, false},
    {"GET", EXACT, "/v1/events/stream", NULL, api_events_stream, "GET, HEAD", ACCESS_LOCKS, false},
    {"POST", LOCK_ACTION, "/v1/locks/", "acquire", api_acquire, "POST", ACCESS_LOCKS, true},
    {"POST", LOCK_ACTION, "/v1/locks/", "renew", api_renew, "POST", ACCESS_LOCKS, true},
    {"POST", LOCK_ACTION, "/v1/locks/", "release", api_release, "POST", ACCESS_LOCKS, true},
    {"GET", LOCK_ACTION, "/v1/locks/", "history", api_lock_history, "GET, HEAD", ACCESS_LOCKS, false},
    {"PUT", LOCK_ACTION, "/v1/locks/", "value", api_set_value, "GET, HEAD, PUT", ACCESS_LOCKS, true},
    {"GET", LOCK_ACTION, "/v1/locks/", "value", api_get_value, "GET, HEAD, PUT", ACCESS_LOCKS, false},
    {"GET", LOCK_NAME, "/v1/locks/", NULL, api_get_lock, "GET, HEAD, DELETE", ACCESS_LOCKS, false},
    {"DELETE", LOCK_NAME, "/v1/locks/", NULL, api_force_release, "GET, HEAD, DELETE", ACCESS_ADMIN, false},
    {"POST", LOCK_ACTION, "/v1/semaphores/", "acquire", api_semaphore_acquire, "POST", ACCESS_LOCKS, true},
    {"POST", LOCK_ACTION, "/v1/semaphores/", "renew", api_semaphore_renew, "POST", ACCESS_LOCKS, true},
    {"POST", LOCK_ACTION, "/v1/semaphores/", "release", api_semaphore_release, "POST", ACCESS_LOCKS, true},
    {"GET", LOCK_ACTION, "/v1/semaphores/", "history", api_semaphore_history, "GET, HEAD", ACCESS_LOCKS, false},
    {"GET", LOCK_NAME, "/v1/semaphores/", NULL, api_get_semaphore, "GET, HEAD, DELETE", ACCESS_LOCKS, false},
    {"DELETE", LOCK_NAME, "/v1/semaphores/", NULL, api_semaphore_force_release, "GET, HEAD, DELETE", ACCESS_ADMIN,
     false},
    {"POST", RESOURCE, "/v1/fence/", NULL, api_fence, "POST", ACCESS_FENCE, true},
    {"GET", EXACT, "/v1/elections", NULL, api_list_elections, "GET, HEAD", ACCESS_LOCKS, false},
    {"POST", LOCK_ACTION, "/v1/elections/", "campaign", api_campaign, "POST", ACCESS_LOCKS, true},
    {"POST", LOCK_ACTION, "/v1/elections/", "proclaim", api_proclaim, "POST", ACCESS_LOCKS, true},
    {"POST", LOCK_ACTION, "/v1/elections/", "resign", api_resign, "POST", ACCESS_LOCKS, true},
    {"POST", LOCK_ACTION, "/v1/elections/", "renew", api_election_renew, "POST", ACCESS_LOCKS, true},
    {"GET", LOCK_ACTION, "/v1/elections/", "observe", api_observe, "GET, HEAD", ACCESS_LOCKS, false},
    {"GET", ELECTION_NAME, "/v1/elections/", NULL, api_get_election, "GET, HEAD, DELETE", ACCESS_LOCKS, false},
    {"DELETE", ELECTION_NAME, "/v1/elections/", NULL, api_election_force_release, "GET, HEAD, DELETE", ACCESS_ADMIN,
     false},
};

/* Does url have this route's shape? On success *arg_out is the name part (owned). */
static bool shape_matches(const Route *r, const char *url, char **arg_out)
{
    *arg_out = NULL;
    size_t plen = strlen(r->path);
    if (r->shape == EXACT)
        return strcmp(url, r->path) == 0;
    if (strncmp(url, r->path, plen) != 0 || url[plen] == '\0')
        return false;
    const char *rest = url + plen;
    size_t len = strlen(rest);
    const char *slash = strrchr(rest, '/');
    const char *last = slash ? slash + 1 : rest;
    switch (r->shape) {
    case LOCK_ACTION:
        if (!slash || slash == rest || strcmp(last, r->action) != 0)
            return false;
        len = (size_t)(slash - rest);
        break;
    case LOCK_NAME:
        if (name_is_action(last))
            return false;
        break;
    case ELECTION_NAME:
        if (name_is_election_action(last))
            return false;
        break;
    default:
        break;
    }
    *arg_out = strndup(rest, len);
    return *arg_out != NULL;
}

void router_match(const char *method, const char *url, RouteMatch *m)
{
    memset(m, 0, sizeof *m);
    m->result = ROUTE_NOT_FOUND;
    /* HEAD is served by the GET handler; MHD leaves the body out. */
    const char *as = strcmp(method, "HEAD") == 0 ? "GET" : method;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const Route *r = &ROUTES[i];
        char *arg;
        if (!shape_matches(r, url, &arg))
            continue;
        if (strcmp(as, r->method) == 0) {
            free(m->arg);
            m->result = ROUTE_FOUND;
            m->handler = r->handler;
            m->arg = arg;
            m->access = r->access;
            m->json = r->json;
            return;
        }
        free(arg);
        if (m->result == ROUTE_NOT_FOUND) {
            m->result = ROUTE_BAD_METHOD;
            m->allow = r->allow;
        }
    }
}
