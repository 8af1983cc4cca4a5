/*
 * api_elections — leader election (issue 40) beside what an election shares
 * with a lock (api_locks.c: a campaign is its acquire, a resignation its
 * release, its renewal a lock's): a leader's proclamation, the election as
 * readers see it (GET, with ?index= a watch), the listing, and its
 * observers' stream (observe.h).
 *
 * An election is a FIFO lease in its own namespace (locktab.h): its one
 * holder leads, its term the lease's fencing token (from the one counter, so
 * a term never repeats or goes back, and the leader's lease fences writes at
 * /v1/fence and through the guard as a lock's does); its waiters are the
 * candidates, in the order they campaigned. A candidate whose client went
 * away leaves the queue, and a leadership granted to a campaign whose answer
 * could not be delivered is given up at once (api_request_end), so no
 * campaign is answered a success it did not get: the gap of etcd's
 * Campaign, which can succeed for a caller that has gone (etcd issue 19597).
 */
#include <stdlib.h>
#include <string.h>

#include "api/access.h"
#include "api/api.h"
#include "api/body.h"
#include "api/event_stream.h"
#include "api/events.h"
#include "api/jsonw.h"
#include "api/listing.h"
#include "api/lockview.h"
#include "api/observe.h"
#include "api/query.h"
#include "api/quota.h"
#include "api/trail.h"
#include "api/watch.h"

#define WATCH_MAX_MS 300000 /* as a lock's */

/* What an observer gets of the events (observe.h). */
static const EventStreamView OBSERVE_VIEW = {observed_takes, observed_message_new};

static void reply_nomem(Request *req) { http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry later"); }

void api_proclaim(Request *req)
{
    static const char *const FIELDS[] = {"lease", "value", NULL};
    Server *s = req->srv;
    if (!body_check_name(req, "election", req->arg))
        return;
    json_t *obj = body_object_new(req, FIELDS);
    if (!obj)
        return;
    uint8_t lease[LEASE_ID_BYTES];
    bool present, given;
    char *text = NULL;
    if (!body_lease(req, obj, true, lease, &present) ||
        !body_json(req, obj, "value", s->cfg.max_value_bytes, &given, &text))
        goto out;
    if (!given) {
        http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "value"),
                           "field 'value' is required (null is a value)");
        goto out;
    }
    Now now = clock_now();
    const Lock *lock;
    const Holder *h;
    LockResult r = locktab_proclaim(s->locks, req->arg, lease, text, &now, &lock, &h);
    if (r == LOCK_NOT_HOLDER) {
        api_reply_not_leader(req, req->arg, lease);
    } else if (r != LOCK_OK) {
        reply_nomem(req);
    } else {
        s->metrics.proclamations++;
        trail_note_lease(s, req, AUDIT_PROCLAIMED, lock, h);
        JsonW w;
        jsonw_begin(&w);
        jsonw_str(&w, "name", lock->name);
        jsonw_int(&w, "term", (int64_t)h->token);
        jsonw_raw(&w, "value", h->value ? h->value : "null");
        size_t len;
        char *out = jsonw_end_new(&w, &len);
        http_reply_json_text(req, 200, out, len);
    }
out:
    free(text);
    json_decref(obj);
}

/* The election's view as text, with its candidates; NULL when out of memory. */
static char *view_text(Server *s, const char *name, size_t *len)
{
    RawRefs refs = {.n = 0};
    json_t *state = lockview_election_new(s->locks, name, locktab_get(s->locks, KIND_ELECTION, name), true, &refs);
    char *text = state ? rawjson_dumps(state, &refs) : NULL;
    json_decref(state);
    if (text)
        *len = strlen(text);
    return text;
}

/* As a lock's watch (api_lockview.c): due once the election's index is past
 * the one asked for, or that one is beyond every index of this run. */
static bool index_past(const Request *req, const char *name, uint64_t index)
{
    const Locktab *lt = req->srv->locks;
    return locktab_index(lt, KIND_ELECTION, name) > index || index > locktab_index_now(lt);
}

static bool watch_due(Request *req) { return index_past(req, req->poll->watch.name, req->poll->watch.index); }

static uint64_t watch_version(const Server *s, const char *name)
{
    return locktab_index(s->locks, KIND_ELECTION, name);
}

static SharedText *watch_build(Server *s, const char *name)
{
    size_t len = 0;
    char *text = view_text(s, name, &len);
    return sharedtext_new(text, len);
}

static const WatchCalls WATCH = {watch_due, watch_version, watch_build};

void api_get_election(Request *req)
{
    long long index, wait_ms;
    if (!body_check_name(req, "election", req->arg) || !query_int(req, "index", 0, INT64_MAX, 0, &index) ||
        !query_int(req, "wait_ms", 0, WATCH_MAX_MS, 0, &wait_ms))
        return;
    if (!http_query(req, "index") || wait_ms == 0 || index_past(req, req->arg, (uint64_t)index) ||
        req->srv->stopping) {
        /* While etcd refuses writes, only a name no batch not yet durable touches (http.h). */
        if (req->srv->stalled && commit_touches(req->srv->commit, KIND_ELECTION, req->arg)) {
            http_reply_stalled(req);
            return;
        }
        http_stall_ok(req);
        size_t len;
        char *text = view_text(req->srv, req->arg, &len);
        if (text)
            http_reply_json_text(req, 200, text, len);
        else
            reply_nomem(req);
        return;
    }
    if (!quota_poll_start(req))
        return;
    if (!request_poll(req)) {
        reply_nomem(req);
        return;
    }
    req->poll->watch.index = (uint64_t)index;
    watch_start(req, KIND_ELECTION, wait_ms, &WATCH);
}

static json_t *election_view(const Locktab *lt, LockKind kind, const Lock *lock, const Now *now, RawRefs *refs)
{
    (void)kind;
    (void)now;
    return lockview_election_new(lt, lock->name, lock, false, refs);
}

void api_list_elections(Request *req) { listing_reply(req, KIND_ELECTION, "elections", election_view); }

void api_observe(Request *req)
{
    Server *s = req->srv;
    long long after = 0;
    bool given;
    if (!body_check_name(req, "election", req->arg) || !query_int(req, "after", 0, INT64_MAX, 0, &after) ||
        !event_stream_last_id(req, &after, &given))
        return;
    if (!audit_enabled(events_ring(s))) {
        http_reply_error(req, ERR_NOT_FOUND, NULL,
                         "events are off (--events-keep 0): an election's observers follow its events");
        return;
    }
    uint64_t from;
    char *first = NULL;
    if (given) {
        /* A reconnect: the events after the last it got, none missed, none twice. */
        if (!events_resolve_after(req, (uint64_t)after,
                                  "observe it again without Last-Event-ID (or after): its first message is the "
                                  "election's state",
                                  &from))
            return;
    } else {
        /* The state the events published so far say, as of the latest of them. */
        from = audit_latest(events_ring(s));
        char *state = observed_state_message_new(s, req->arg);
        if (!state || asprintf(&first, "id: %llu\n%s", (unsigned long long)from, state) < 0)
            first = NULL;
        free(state);
        if (!first) {
            reply_nomem(req);
            return;
        }
    }
    if (quota_poll_start(req))
        event_stream_open(req, req->arg, from, &OBSERVE_VIEW, first);
    free(first);
}
