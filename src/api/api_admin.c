/*
 * api_admin — health, Prometheus metrics and the dashboard page.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/etcdmetrics.h"
#include "api/event_stream.h"
#include "api/events.h"
#include "api/selfmetrics.h"
#include "api/watch.h"
#include "core/leasehist.h"
#include "net/dormant.h"
#include "net/park.h"
#include "guard/guard.h"
#include "guard/proxy.h"
#include "leasegate/web_assets.h"
#include "net/auth.h"
#include "net/peers.h"
#include "store/etcd.h"

/* Each S3 route's state: its store may be unreached or ignore
 * preconditions, which closes that route only; the lock service is as
 * healthy as before. (An http route's upstream is not probed.) NULL when
 * out of memory. */
static json_t *guard_routes_new(Server *s)
{
    json_t *routes = json_array();
    for (size_t i = 0; routes && i < s->cfg.nguards; i++) {
        if (s->cfg.guards[i].kind != GUARD_S3)
            continue;
        char detail[256];
        GuardRouteUp st = guard_route_state(s->guard, i, detail, sizeof detail);
        json_t *r = json_pack("{s:s, s:s, s:s, s:s}", "route", s->cfg.guards[i].prefix, "kind",
                              s->cfg.guards[i].kind == GUARD_S3 ? "s3" : "http", "state", guard_route_state_name(st),
                              "detail", detail);
        if (json_array_append_new(routes, r)) {
            json_decref(routes);
            routes = NULL;
        }
    }
    return routes;
}

static bool guard_has_s3(const Server *s)
{
    for (size_t i = 0; i < s->cfg.nguards; i++)
        if (s->cfg.guards[i].kind == GUARD_S3)
            return true;
    return false;
}

/* leasegate_guard_route_up{route}: 1 while an S3 route's store answers and
 * honours preconditions. Prefixes are escaped as label values. */
static void guard_route_metrics(FILE *f, Server *s)
{
    bool any = false;
    for (size_t i = 0; i < s->cfg.nguards; i++) {
        if (s->cfg.guards[i].kind != GUARD_S3)
            continue;
        if (!any)
            fprintf(f, "# HELP leasegate_guard_route_up 1 while the S3 route's store answers and honours "
                       "preconditions (writes go), else 0.\n# TYPE leasegate_guard_route_up gauge\n");
        any = true;
        fputs("leasegate_guard_route_up{route=\"", f);
        for (const char *p = s->cfg.guards[i].prefix; *p; p++) {
            if (*p == '\\' || *p == '"')
                fputc('\\', f);
            fputc(*p, f);
        }
        fprintf(f, "\"} %d\n", guard_route_state(s->guard, i, NULL, 0) == GUARD_ROUTE_OPEN);
    }
}

/* Over etcd, also the role (here always leader: a follower's answers come
 * from standby.c) and the leader's URL. With --guard, each route's state
 * (guard_routes_new): still 200, since the locks are served. */
void api_healthz(Request *req)
{
    Election *e = req->srv->election;
    http_reveals_nothing(req);
    json_t *body = json_pack("{s:s}", "status", "ok");
    if (body && guard_has_s3(req->srv) && json_object_set_new(body, "guard", guard_routes_new(req->srv))) {
        json_decref(body);
        body = NULL;
    }
    if (body && e) {
        char leader[512];
        ElectionRole role = election_role(e, leader, sizeof leader);
        if (json_object_set_new(body, "role", json_string(election_role_name(role))) ||
            json_object_set_new(body, "leader", json_string(leader)) ||
            (req->srv->stalled &&
             json_object_set_new(body, "etcd_alarm", json_string(etcd_alarm_name(req->srv->stall_why)
                                                                       ? etcd_alarm_name(req->srv->stall_why)
                                                                       : "NOSPACE")))) {
            json_decref(body);
            body = NULL;
        }
    }
    http_reply_json_new(req, 200, body);
}

const char *api_not_ready(const Server *s, char *why, size_t len)
{
    if (s->deposed) {
        snprintf(why, len, "this gateway no longer leads (or cannot know that it does): it stops");
        return "deposed";
    }
    if (s->stopping) {
        snprintf(why, len, "this gateway is stopping: it answers what it holds and takes nothing new");
        return "stopping";
    }
    if (s->draining) {
        snprintf(why, len, "this gateway is stopping: it still serves for a moment (--drain-seconds)");
        return "draining";
    }
    if (s->auth_error[0]) {
        snprintf(why, len, "the key file did not load at its last reload: %.400s", s->auth_error);
        return "keys";
    }
    if (s->election && !election_renewed(s->election)) {
        snprintf(why, len, "this gateway cannot reach etcd (its lease went unrenewed for its TTL): another gateway "
                           "may lead");
        return "etcd_unreachable";
    }
    return NULL;
}

/* Readiness: 200 while this gateway serves; 503 with the reason while it
 * cannot (openapi.yaml). Never needs a key (a load balancer asks it). */
void api_readyz(Request *req)
{
    Server *s = req->srv;
    http_reveals_nothing(req);
    char why[500];
    const char *reason = api_not_ready(s, why, sizeof why);
    json_t *body = reason ? json_pack("{s:s, s:s, s:s, s:s}", "status", "not_ready", "error", "not_ready", "reason",
                                      reason, "message", why)
                          : json_pack("{s:s}", "status", "ready");
    if (body && s->election) {
        char leader[512];
        ElectionRole role = election_role(s->election, leader, sizeof leader);
        if (json_object_set_new(body, "role", json_string(election_role_name(role))) ||
            json_object_set_new(body, "leader", json_string(leader))) {
            json_decref(body);
            body = NULL;
        }
    }
    http_reply_json_new(req, reason ? 503 : 200, body);
}

void api_dashboard(Request *req)
{
    http_reveals_nothing(req);
    http_reply_static(req, 200, "text/html; charset=utf-8", WEB_INDEX_HTML, WEB_INDEX_HTML_LEN);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(FILE *f, const char *name, const char *help, uint64_t v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

/* One histogram's series; labels is "" or 'name="value",' to go before le. */
static void histogram(FILE *f, const char *name, const char *labels, const Histogram *h)
{
    for (size_t i = 0; i < h->n; i++)
        fprintf(f, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, h->bounds[i], (unsigned long long)h->le[i]);
    fprintf(f, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)h->count);
    size_t bare = strlen(labels);
    if (bare) /* without the trailing comma, in braces */
        fprintf(f, "%s_sum{%.*s} %.6f\n%s_count{%.*s} %llu\n", name, (int)bare - 1, labels, h->sum, name,
                (int)bare - 1, labels, (unsigned long long)h->count);
    else
        fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

void api_metrics(Request *req)
{
    Server *s = req->srv;
    const Metrics *m = &s->metrics;
    http_reveals_nothing(req); /* counts, no lock's state: exempt from the barrier (http.h) */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory");
        return;
    }
    fprintf(f, "# HELP leasegate_lock_metrics_start_time_seconds When the lock space's counters below began at zero "
               "(Unix time): this server's start, or over etcd when this gateway became leader; a failover restarts "
               "them on the new leader.\n# TYPE leasegate_lock_metrics_start_time_seconds gauge\n"
               "leasegate_lock_metrics_start_time_seconds %.3f\n",
            (double)m->since_ms / 1000);
    counter(f, "leasegate_http_requests_total", "HTTP requests received.", m->requests);
    fprintf(f, "# HELP leasegate_http_responses_total HTTP responses by status class.\n"
               "# TYPE leasegate_http_responses_total counter\n");
    for (int c = 2; c <= 5; c++)
        fprintf(f, "leasegate_http_responses_total{class=\"%dxx\"} %llu\n", c,
                (unsigned long long)m->responses[c]);
    char why[500];
    bool ready = !api_not_ready(s, why, sizeof why);
    if (s->election)
        etcdmetrics_write(f, s->election, &s->etcd_stats, ready); /* a follower's come from standby.c */
    else
        gauge(f, "leasegate_ready", "1 when this server is ready to serve (what GET /readyz answers).", ready);
    if (s->auth && !s->auth_error[0])
        auth_write_metrics(f, s->auth);
    counter(f, "leasegate_grants_total", "Fresh grants (immediate or after waiting).", m->grants);
    fprintf(f, "# HELP leasegate_grants_by_kind_total Fresh grants by what they grant.\n"
               "# TYPE leasegate_grants_by_kind_total counter\n"
               "leasegate_grants_by_kind_total{kind=\"lock\",mode=\"write\"} %llu\n"
               "leasegate_grants_by_kind_total{kind=\"lock\",mode=\"read\"} %llu\n"
               "leasegate_grants_by_kind_total{kind=\"semaphore\",mode=\"\"} %llu\n"
               "leasegate_grants_by_kind_total{kind=\"election\",mode=\"\"} %llu\n",
            (unsigned long long)m->grants_of[0], (unsigned long long)m->grants_of[1],
            (unsigned long long)m->grants_of[2], (unsigned long long)m->grants_of[3]);
    counter(f, "leasegate_lock_delays_total", "Lock-delays started (a lease with lock_delay_ms ended uncleanly).",
            locktab_delays(s->locks));
    counter(f, "leasegate_reentries_total", "Reentrant acquires by the holder.", m->reentries);
    counter(f, "leasegate_acquire_replays_total", "Retried acquires answered with the grant of their request_id.",
            m->replays);
    counter(f, "leasegate_renewals_total", "Successful renewals.", m->renewals);
    counter(f, "leasegate_releases_total", "Successful releases.", m->releases);
    counter(f, "leasegate_force_releases_total", "Leases an admin force-released.", m->force_releases);
    counter(f, "leasegate_expiries_total", "Leases ended by their TTL.", locktab_expiries(s->locks));
    counter(f, "leasegate_locks_forgotten_total", "Idle locks forgotten (--forget-idle-after).",
            locktab_forgotten(s->locks));
    counter(f, "leasegate_wait_timeouts_total", "Waiters whose wait_ms passed.", m->wait_timeouts);
    counter(f, "leasegate_waiter_disconnects_total", "Waiters whose client went away.", m->waiter_disconnects);
    counter(f, "leasegate_undelivered_grants_total", "Grants released because the response failed.",
            m->undelivered_grants);
    counter(f, "leasegate_not_holder_total", "Requests answered not_holder.", m->not_holder);
    counter(f, "leasegate_fence_accepted_total", "Fence checks accepted.", m->fence_accepted);
    counter(f, "leasegate_fence_rejected_total", "Fence checks rejected as stale.", m->fence_rejected);
    counter(f, "leasegate_guard_forwarded_total", "Requests the guard forwarded upstream.",
            proxy_stats(s->proxy)->forwarded);
    counter(f, "leasegate_guard_rejected_stale_total", "Guarded writes rejected with 409 stale_token.",
            m->guard_rejected_stale);
    counter(f, "leasegate_guard_rejected_missing_total", "Guarded writes rejected with 428 token_required.",
            m->guard_rejected_missing);
    counter(f, "leasegate_guard_upstream_errors_total", "Upstream calls that failed (502, 504, broken).",
            proxy_stats(s->proxy)->upstream_errors);
    static const char *const REFUSALS[GUARD_REFUSED_COUNT] = {
        [GUARD_REFUSED_STALE] = "stale",           [GUARD_REFUSED_LEASE_MISSING] = "lease_missing",
        [GUARD_REFUSED_METHOD] = "method",         [GUARD_REFUSED_REQUEST] = "bad_request",
        [GUARD_REFUSED_CALLS] = "calls",           [GUARD_REFUSED_LOCK_CALLS] = "lock_calls",
        [GUARD_REFUSED_KEY_CALLS] = "key_calls",   [GUARD_REFUSED_PEER_CALLS] = "peer_calls",
        [GUARD_REFUSED_QUEUE_TIMEOUT] = "queue_timeout", [GUARD_REFUSED_SETTLING] = "settling",
        [GUARD_REFUSED_ROUTE_CLOSED] = "route_closed",
    };
    fprintf(f, "# HELP leasegate_guard_refused_total Guarded requests refused, by reason.\n"
               "# TYPE leasegate_guard_refused_total counter\n");
    for (int i = 0; i < GUARD_REFUSED_COUNT; i++)
        fprintf(f, "leasegate_guard_refused_total{reason=\"%s\"} %llu\n", REFUSALS[i],
                (unsigned long long)m->guard_refused[i]);
    guard_route_metrics(f, s);
    LocktabCounts lc = locktab_counts(s->locks, KIND_LOCK), sc = locktab_counts(s->locks, KIND_SEMAPHORE),
                  ec = locktab_counts(s->locks, KIND_ELECTION);
    gauge(f, "leasegate_locks", "Lock names known (ever granted, not yet forgotten).", lc.names);
    gauge(f, "leasegate_locks_held", "Locks held now (by a writer or by readers).", lc.held);
    gauge(f, "leasegate_read_leases", "Read leases held now (each reader of each lock).", lc.readers);
    gauge(f, "leasegate_lock_values", "Locks with a value (not null) kept: written by a holder, outliving it.",
          lc.values);
    gauge(f, "leasegate_lock_value_bytes", "Bytes of the locks' values kept (each at most --max-value-bytes).",
          lc.value_bytes);
    counter(f, "leasegate_value_writes_total", "Locks' values written by their holders (PUT /v1/locks/NAME/value).",
            m->value_writes);
    counter(f, "leasegate_value_replays_total",
            "Retried writes of a lock's value answered with the write of their request_id (nothing written).",
            m->value_replays);
    fprintf(f, "# HELP leasegate_value_refusals_total Writes of a lock's value refused: a lease that did not hold "
               "the lock as its writer (stale_token), another version (version_mismatch), or the request_id of "
               "a remembered write with another value or key (request_id_reused).\n"
               "# TYPE leasegate_value_refusals_total counter\n"
               "leasegate_value_refusals_total{reason=\"stale_token\"} %llu\n"
               "leasegate_value_refusals_total{reason=\"version_mismatch\"} %llu\n"
               "leasegate_value_refusals_total{reason=\"request_id_reused\"} %llu\n",
            (unsigned long long)m->value_refused[0], (unsigned long long)m->value_refused[1],
            (unsigned long long)m->value_refused[2]);
    gauge(f, "leasegate_elections", "Election names known.", ec.names);
    gauge(f, "leasegate_elections_led", "Elections with a leader now.", ec.held);
    gauge(f, "leasegate_election_candidates", "Campaigns waiting to lead now.", ec.waiters);
    counter(f, "leasegate_proclamations_total", "Values proclaimed by elections' leaders.", m->proclamations);
    gauge(f, "leasegate_semaphores", "Semaphore names known.", sc.names);
    gauge(f, "leasegate_semaphore_permits_held", "Semaphore permits held now (a lease may hold several).",
          sc.permits);
    gauge(f, "leasegate_semaphore_leases", "Semaphore leases held now (each holds one permit or more).", sc.leases);
    gauge(f, "leasegate_waiters", "Acquires and campaigns waiting now (locks, semaphores and elections).", locktab_waiters(s->locks));
    gauge(f, "leasegate_semaphore_waiters", "Acquires of semaphores waiting now.", sc.waiters);
    gauge(f, "leasegate_connections_parked",
          "Connections of waiting acquires, watches and event long-polls held outside libmicrohttpd.",
          park_connections(s));
    gauge(f, "leasegate_waiters_dormant",
          "Parked waiting acquires kept as a compact record while they wait (of leasegate_connections_parked).",
          dormant_count(s));
    gauge(f, "leasegate_event_streams", "Open GET /v1/events/stream answers.", event_streams_open(s));
    gauge(f, "leasegate_event_polls", "GET /v1/events long-polls waiting for events.", events_polls(s));
    counter(f, "leasegate_event_rows_read_total",
            "Events looked at to answer long-polls and streams (a publish looks only at the readers it concerns).",
            events_rows_read(s));
    gauge(f, "leasegate_watches", "GET /v1/locks/NAME?index= requests waiting for their lock to change.",
          watch_count(s));
    counter(f, "leasegate_watch_slices_deferred_total",
            "Turns of the loop that answered a slice of the watches a change woke and left the rest for the next "
            "turn, so as to serve other requests between slices.",
            watch_slices_deferred(s));
    fprintf(f, "# HELP leasegate_share_refusals_total Requests refused 429 because a key or a peer was at its "
               "share (key_limit, peer_limit), by share.\n# TYPE leasegate_share_refusals_total counter\n");
    for (int by = 0; by < 2; by++)
        for (ShareKind k = 0; k < SHARE_KINDS; k++)
            if (!(by == 0 && (k == SHARE_CONNECTIONS || k == SHARE_HALF_SENT)) &&
                !(by == 1 && (k == SHARE_HELD || k == SHARE_WAITERS)))
                fprintf(f, "leasegate_share_refusals_total{by=\"%s\",limit=\"%s\"} %llu\n", by ? "peer" : "key",
                        share_limit_name(k), (unsigned long long)m->share_refused[by][k]);
    fprintf(f, "# HELP leasegate_peer_connections_refused_total Connections closed as soon as accepted: their "
               "peer was at its share of connections or of half-sent requests.\n"
               "# TYPE leasegate_peer_connections_refused_total counter\n"
               "leasegate_peer_connections_refused_total{limit=\"max_connections\"} %llu\n"
               "leasegate_peer_connections_refused_total{limit=\"max_half_sent\"} %llu\n",
            (unsigned long long)peers_refused_connections(s->peers), (unsigned long long)peers_refused_half_sent(s->peers));
    gauge(f, "leasegate_peers", "Peers (client addresses; IPv6 by /64) with a connection open.", peers_count(s->peers));
    gauge(f, "leasegate_last_token", "The last fencing token issued.", locktab_last_token(s->locks));
    gauge(f, "leasegate_fence_resources", "Resources with a fence mark.", fence_count(s->fence));
    const CommitStats *cs = commit_stats(s->commit);
    counter(f, "leasegate_commits_total", "Group commits (transactions with an fsync).", cs->commits);
    counter(f, "leasegate_commit_rows_total", "Rows written by group commits.", cs->rows);
    counter(f, "leasegate_commit_barriers_total",
            "Barriers: transactions fenced on the leader key that change nothing, made for answers that had no "
            "change to commit (etcd only).",
            cs->barriers);
    fprintf(f, "# HELP leasegate_commit_seconds Time to commit one batch.\n"
               "# TYPE leasegate_commit_seconds histogram\n");
    for (int i = 0; i < COMMIT_LATENCY_BUCKETS; i++)
        fprintf(f, "leasegate_commit_seconds_bucket{le=\"%g\"} %llu\n", COMMIT_LATENCY_BOUNDS_MS[i] / 1000,
                (unsigned long long)cs->latency_buckets[i]);
    fprintf(f, "leasegate_commit_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cs->commits);
    fprintf(f, "leasegate_commit_seconds_sum %.6f\n", cs->seconds_total);
    fprintf(f, "leasegate_commit_seconds_count %llu\n", (unsigned long long)cs->commits);
    fprintf(f, "# HELP leasegate_acquire_wait_seconds Time from an acquire's arrival to its grant (fresh grants).\n"
               "# TYPE leasegate_acquire_wait_seconds histogram\n");
    histogram(f, "leasegate_acquire_wait_seconds", "", &m->acquire_wait);
    fprintf(f, "# HELP leasegate_hold_seconds Time a lease held its lock, from its grant to its end, by how it ended.\n"
               "# TYPE leasegate_hold_seconds histogram\n");
    static const char *const ENDS[] = {"end=\"expired\",", "end=\"released\",", "end=\"revoked\","};
    for (int how = LEASE_END_EXPIRED; how <= LEASE_END_REVOKED; how++)
        histogram(f, "leasegate_hold_seconds", ENDS[how - 1], &m->hold[how - 1]);
    selfmetrics_write(f);
    if (fclose(f) != 0 || !text) {
        free(text);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory");
        return;
    }
    http_reply_text(req, 200, "text/plain; version=0.0.4", text, len);
}
