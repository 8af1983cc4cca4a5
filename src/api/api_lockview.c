/*
 * api_lockview — the reads: GET /v1/locks/NAME (with ?index= a watch),
 * GET /v1/semaphores/NAME, and their listings GET /v1/locks and
 * GET /v1/semaphores. Never a lease id (lockview.h).
 */
#include <string.h>

#include "api/access.h"
#include "api/api.h"
#include "api/body.h"
#include "api/listing.h"
#include "api/lockview.h"
#include "api/query.h"
#include "api/quota.h"
#include "api/watch.h"

#define WATCH_MAX_MS 300000 /* as long as a long-poll on events */
#define QUEUE_SHOWN 100     /* waiters listed by GET of one name (`waiters` counts them all) */

static void reply_nomem(Request *req) { http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry later"); }

typedef struct Queue {
    json_t *list;
    bool semaphore; /* its waiters have no mode */
    bool failed;
} Queue;

static void queue_one(void *ud, const WaiterView *v)
{
    Queue *q = ud;
    json_t *w = q->failed ? NULL : json_pack("{s:s, s:I}", "owner", v->owner, "since_ms", (json_int_t)v->since_ms);
    if (w && !q->semaphore && json_object_set_new(w, "mode", json_string(lockview_mode_name(v->mode))))
        json_decref(w), w = NULL;
    if (w && q->semaphore && json_object_set_new(w, "permits", json_integer(v->permits)))
        json_decref(w), w = NULL;
    if (!w || json_array_append_new(q->list, w))
        q->failed = true;
}

/* While etcd refuses writes (Server.stalled), a read reveals only names that
 * no batch not yet durable touches (http.h): true when this one may. */
static bool stall_clean(Request *req, LockKind kind, const char *name)
{
    return !req->srv->stalled || !commit_touches(req->srv->commit, kind, name);
}

/* One name as GET shows it: its state, its holders and the head of its
 * queue, as JSON text (malloc'd, *len bytes); NULL when out of memory. */
static char *view_text(Server *s, LockKind kind, const char *name, size_t *len)
{
    const Lock *lock = locktab_get(s->locks, kind, name);
    RawRefs refs = {.n = 0};
    Now now = clock_now();
    json_t *state = lockview_state_new(s->locks, kind, name, lock, true, &now, &refs);
    Queue q = {json_array(), kind == KIND_SEMAPHORE, false};
    if (q.list && lock)
        locktab_each_waiter(lock, QUEUE_SHOWN, queue_one, &q);
    if (!state || !q.list || q.failed) {
        json_decref(q.list);
        json_decref(state);
        return NULL;
    }
    if (json_object_set_new(state, "queue", q.list)) { /* takes q.list even when it fails */
        json_decref(state);
        return NULL;
    }
    char *text = rawjson_dumps(state, &refs);
    json_decref(state);
    if (text)
        *len = strlen(text);
    return text;
}

static void reply_one(Request *req, LockKind kind, const char *name)
{
    if (!stall_clean(req, kind, name)) {
        http_reply_stalled(req);
        return;
    }
    http_stall_ok(req);
    size_t len;
    char *text = view_text(req->srv, kind, name, &len);
    if (!text) {
        reply_nomem(req);
        return;
    }
    http_reply_json_text(req, 200, text, len);
}

/* A watch (?index=N) is due once the lock's index is past N, or when N is
 * beyond every index of this run (it came from before a restart). */
static bool index_past(const Request *req, const char *name, uint64_t index)
{
    const Locktab *lt = req->srv->locks;
    return locktab_index(lt, KIND_LOCK, name) > index || index > locktab_index_now(lt);
}

static bool watch_due(Request *req) { return index_past(req, req->poll->watch.name, req->poll->watch.index); }

/* The view moves with the lock's index (locktab.h: every change a reader can see). */
static uint64_t watch_version(const Server *s, const char *name) { return locktab_index(s->locks, KIND_LOCK, name); }

static SharedText *watch_build(Server *s, const char *name)
{
    size_t len = 0;
    char *text = view_text(s, KIND_LOCK, name, &len);
    return sharedtext_new(text, len);
}

static const WatchCalls WATCH = {watch_due, watch_version, watch_build};

void api_get_lock(Request *req)
{
    long long index, wait_ms;
    if (!body_check_name(req, "name", req->arg) || !query_int(req, "index", 0, INT64_MAX, 0, &index) ||
        !query_int(req, "wait_ms", 0, WATCH_MAX_MS, 0, &wait_ms))
        return;
    if (!http_query(req, "index") || wait_ms == 0 || index_past(req, req->arg, (uint64_t)index) ||
        req->srv->stopping) {
        reply_one(req, KIND_LOCK, req->arg);
        return;
    }
    if (!quota_poll_start(req))
        return;
    if (!request_poll(req)) {
        reply_nomem(req);
        return;
    }
    req->poll->watch.index = (uint64_t)index;
    watch_start(req, KIND_LOCK, wait_ms, &WATCH);
}

void api_get_semaphore(Request *req)
{
    if (body_check_name(req, "name", req->arg))
        reply_one(req, KIND_SEMAPHORE, req->arg);
}

static json_t *state_view(const Locktab *lt, LockKind kind, const Lock *lock, const Now *now, RawRefs *refs)
{
    return lockview_state_new(lt, kind, lock->name, lock, false, now, refs);
}

void api_list_locks(Request *req) { listing_reply(req, KIND_LOCK, "locks", state_view); }
void api_list_semaphores(Request *req) { listing_reply(req, KIND_SEMAPHORE, "semaphores", state_view); }
