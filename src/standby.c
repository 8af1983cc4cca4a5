/* standby — the non-leader's answers; see standby.h. */
#include "standby.h"

#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/etcdmetrics.h"
#include "api/router.h"
#include "api/selfmetrics.h"
#include "core/headbytes.h"
#include "core/log.h"
#include "guard/guardroute.h"
#include "net/forward.h"
#include "net/httphead.h"
#include "store/jsondump.h"

/* A follower is ready only while its leader says it is (its /readyz): asked
 * at most this often, and given this long to answer. */
#define LEADER_PROBE_CACHE_MS 500
#define LEADER_PROBE_TIMEOUT_MS 1000L
/* Failed forwards are logged at most once per this, with their count. */
#define FORWARD_LOG_MS 5000

struct Standby {
    struct MHD_Daemon *daemon;
    Election *election;
    ForwardPool *pool;
    const Config *cfg;
    const HostCheck *hosts; /* the Host names answered for: checked before anything else */
    const EtcdStats *etcd_stats;
    const char *cacert;     /* for the leader probe, as for forwards */
    _Atomic bool stopping;  /* forwards in flight give up: the socket goes to the real server */
    _Atomic uint64_t forwards, forward_failures; /* for /metrics */
    pthread_mutex_t mu;     /* guards the fields below */
    AuthTable *keys;        /* a reference, or NULL without --auth-file */
    char keys_error[512];   /* "" or why the key file did not load at the last reload */
    bool draining;
    int64_t failures_logged_at; /* mono ms of the last failed-forward line */
    uint64_t failures_unlogged; /* failures since, not yet in a line */
    char last_failure[700];     /* the latest of those */
    pthread_mutex_t probe_mu;   /* one leader probe at a time; guards the fields below */
    int64_t probed_at;          /* mono ms; 0: never */
    char probed_leader[512];
    bool probe_ready;
    char probe_why[300];
};

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A forward goes on only while this gateway follows the leader it went to. */
static bool forward_should_stop(void *ud, const char *leader)
{
    Standby *sb = ud;
    if (atomic_load(&sb->stopping))
        return true;
    char now[512];
    return election_role(sb->election, now, sizeof now) != ROLE_FOLLOWER || strcmp(now, leader) != 0;
}

/* A forward that failed: counted, and logged at most once per FORWARD_LOG_MS
 * (a failover fails every forward in flight, and every new one until the
 * new leader is seen): the first at once, the others as one line with their
 * count. */
static void forward_failed(Standby *sb, const char *method, const char *uri, const char *leader, const char *why)
{
    atomic_fetch_add(&sb->forward_failures, 1);
    pthread_mutex_lock(&sb->mu);
    snprintf(sb->last_failure, sizeof sb->last_failure, "%.16s %.200s to the leader %.200s: %.250s", method, uri,
             leader[0] ? leader : "(unknown)", why);
    sb->failures_unlogged++;
    int64_t now = mono_ms();
    if (!sb->failures_logged_at || now - sb->failures_logged_at >= FORWARD_LOG_MS) {
        if (sb->failures_unlogged == 1)
            log_line(LEVEL_WARN, "a forward failed: %s (further failures are counted, one line per %d s)",
                     sb->last_failure, FORWARD_LOG_MS / 1000);
        else
            log_line(LEVEL_WARN, "%llu forwards failed in the last %lld ms; the last: %s",
                     (unsigned long long)sb->failures_unlogged, (long long)(now - sb->failures_logged_at),
                     sb->last_failure);
        sb->failures_unlogged = 0;
        sb->failures_logged_at = now;
    }
    pthread_mutex_unlock(&sb->mu);
}

/* The raw target of every request, before libmicrohttpd parses it: what is
 * forwarded (path and query exactly as sent). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls, (void)conn;
    return forward_new(uri);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)conn, (void)toe;
    forward_release(*con_cls);
    *con_cls = NULL;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    char *text = jsondump_whole(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    enum MHD_Result r = httphead_add_answer_fields(resp, status, "application/json")
                            ? MHD_queue_response(conn, status, resp)
                            : MHD_NO;
    MHD_destroy_response(resp);
    return r;
}

/* An error answer {error, message}, with the leader's URL when known. */
static enum MHD_Result answer_error(struct MHD_Connection *conn, unsigned status, const char *code, const char *why,
                                    const char *leader)
{
    json_t *body = json_pack("{s:s, s:s}", "error", code, "message", why);
    if (body && leader && leader[0] && json_object_set_new(body, "leader", json_string(leader)))
        json_decref(body), body = NULL;
    return answer(conn, status, body);
}

/* Whether the leader at url serves: its /readyz answers 200 within
 * LEADER_PROBE_TIMEOUT_MS, or 503 draining (it is stopping but serves until
 * its --drain-seconds end, and a follower must not leave its load balancer
 * for that); why when not. A leader that is paused, dead, cut off from etcd
 * or stopping is not, and neither is a follower of it. */
static bool probe_leader(const Standby *sb, const char *url, char *why, size_t len)
{
    char target[600];
    snprintf(target, sizeof target, "%s/readyz", url);
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(why, len, "out of memory");
        return false;
    }
    HeadBytes body = {.len = 0};
    if (sb->cacert)
        curl_easy_setopt(h, CURLOPT_CAINFO, sb->cacert);
    curl_easy_setopt(h, CURLOPT_URL, target);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, LEADER_PROBE_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, headbytes_keep);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    long status = 0;
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK) {
        snprintf(why, len, "the leader %s does not answer /readyz: %s", url, curl_easy_strerror(rc));
        return false;
    }
    if (status == 200)
        return true;
    json_t *j = json_loads(body.text, 0, NULL);
    const char *reason = json_string_value(json_object_get(j, "reason"));
    bool serving = status == 503 && reason && !strcmp(reason, "draining");
    snprintf(why, len, "the leader %s is not ready (%ld%s%s)", url, status, reason ? ": " : "", reason ? reason : "");
    json_decref(j);
    return serving;
}

/* The leader's readiness, asked at most every LEADER_PROBE_CACHE_MS (load
 * balancers probe every gateway often; the leader need not hear each). */
static bool leader_ready(Standby *sb, const char *url, char *why, size_t len)
{
    pthread_mutex_lock(&sb->probe_mu);
    int64_t now = mono_ms();
    if (!sb->probed_at || now - sb->probed_at >= LEADER_PROBE_CACHE_MS || strcmp(sb->probed_leader, url)) {
        sb->probe_ready = probe_leader(sb, url, sb->probe_why, sizeof sb->probe_why);
        sb->probed_at = mono_ms();
        snprintf(sb->probed_leader, sizeof sb->probed_leader, "%s", url);
    }
    bool ready = sb->probe_ready;
    snprintf(why, len, "%s", sb->probe_why);
    pthread_mutex_unlock(&sb->probe_mu);
    return ready;
}

/* Whether this gateway can serve now: NULL when it can, else the reason's
 * code (openapi.yaml, /readyz) with a sentence in why. */
static const char *not_ready(Standby *sb, ElectionRole role, const char *leader, char *why, size_t len)
{
    pthread_mutex_lock(&sb->mu);
    bool draining = sb->draining;
    bool keys_broken = sb->keys_error[0] != '\0';
    if (keys_broken)
        snprintf(why, len, "the key file did not load at its last reload: %.400s", sb->keys_error);
    pthread_mutex_unlock(&sb->mu);
    if (draining) {
        snprintf(why, len, "this gateway is stopping: it still forwards for a moment (--drain-seconds)");
        return "draining";
    }
    if (keys_broken)
        return "keys";
    if (!election_renewed(sb->election)) {
        snprintf(why, len, "this gateway cannot reach etcd (its lease is not renewed)");
        return "etcd_unreachable";
    }
    if (role != ROLE_FOLLOWER) {
        snprintf(why, len, "no gateway leads the lock space yet");
        return "no_leader";
    }
    return leader_ready(sb, leader, why, len) ? NULL : "leader_not_ready";
}

static enum MHD_Result answer_readyz(Standby *sb, struct MHD_Connection *conn, ElectionRole role, const char *leader)
{
    char why[500];
    const char *reason = not_ready(sb, role, leader, why, sizeof why);
    json_t *body = reason ? json_pack("{s:s, s:s, s:s, s:s, s:s}", "status", "not_ready", "error", "not_ready",
                                      "reason", reason, "message", why, "role", election_role_name(role))
                          : json_pack("{s:s, s:s}", "status", "ready", "role", election_role_name(role));
    if (body && leader[0] && json_object_set_new(body, "leader", json_string(leader)))
        json_decref(body), body = NULL;
    return answer(conn, reason ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, body);
}

/* A standby's own /metrics: its role, its etcd traffic and its forwards. The
 * lock space's metrics are the leader's (its /metrics). */
static enum MHD_Result answer_metrics(Standby *sb, struct MHD_Connection *conn, ElectionRole role,
                                      const char *leader)
{
    char why[500];
    bool ready = !not_ready(sb, role, leader, why, sizeof why);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return MHD_NO;
    etcdmetrics_write(f, sb->election, sb->etcd_stats, ready);
    pthread_mutex_lock(&sb->mu);
    AuthTable *keys = sb->keys && !sb->keys_error[0] ? auth_ref(sb->keys) : NULL;
    pthread_mutex_unlock(&sb->mu);
    if (keys)
        auth_write_metrics(f, keys);
    auth_unref(keys);
    fprintf(f, "# HELP leasegate_forwards_total Requests forwarded to the leader.\n# TYPE leasegate_forwards_total "
               "counter\nleasegate_forwards_total %llu\n",
            (unsigned long long)atomic_load(&sb->forwards));
    fprintf(f, "# HELP leasegate_forward_failures_total Forwards the leader gave no answer to (503 to the client).\n"
               "# TYPE leasegate_forward_failures_total counter\nleasegate_forward_failures_total %llu\n",
            (unsigned long long)atomic_load(&sb->forward_failures));
    selfmetrics_write(f);
    if (fclose(f) != 0) {
        free(text);
        return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    enum MHD_Result r = httphead_add_answer_fields(resp, MHD_HTTP_OK, "text/plain; version=0.0.4")
                            ? MHD_queue_response(conn, MHD_HTTP_OK, resp)
                            : MHD_NO;
    MHD_destroy_response(resp);
    return r;
}

/* Answered by the standby itself, whatever its role. */
static bool local_path(const char *url, const char *method)
{
    return (!strcmp(method, "GET") || !strcmp(method, "HEAD")) &&
           (!strcmp(url, "/healthz") || !strcmp(url, "/readyz") || !strcmp(url, "/metrics"));
}

/* Whether the leader would ask this request for a key (dispatch.c): a
 * guarded path, or a route whose access is more than the dashboard's (and
 * than /healthz's and /metrics', unless --auth-metrics). Paths the leader
 * answers 404 or 405 need none. */
static bool needs_key(const Standby *sb, const char *method, const char *url, const char *raw_uri)
{
    if (!strcmp(url, "/readyz"))
        return false;
    if (guardroute_match(sb->cfg->guards, sb->cfg->nguards, raw_uri))
        return true;
    RouteMatch m;
    router_match(method, url, &m);
    free(m.arg);
    return m.result == ROUTE_FOUND && m.access != ACCESS_PAGE && (m.access != ACCESS_OPEN || sb->cfg->auth_metrics);
}

/* With --auth-file: the request's key checked against this gateway's own
 * keys. true when it may go on; else *status and the body's code and why are
 * the refusal: 401 for a key this gateway does not know, 503 while its key
 * file does not load. */
static bool key_known(Standby *sb, struct MHD_Connection *conn, unsigned *status, const char **code, char *why,
                      size_t len)
{
    pthread_mutex_lock(&sb->mu);
    AuthTable *t = sb->keys ? auth_ref(sb->keys) : NULL;
    bool broken = sb->keys_error[0] != '\0';
    if (broken)
        snprintf(why, len, "this gateway's key file did not load at its last reload (%.400s): it lets no request that "
                           "needs a key through until it does; retry",
                 sb->keys_error);
    pthread_mutex_unlock(&sb->mu);
    bool ok = !t;
    if (broken) {
        *status = MHD_HTTP_SERVICE_UNAVAILABLE, *code = "overloaded";
        ok = false;
    } else if (t) {
        const char *reason;
        ok = auth_find_bearer(t, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"), NULL, &reason);
        if (!ok) {
            *status = MHD_HTTP_UNAUTHORIZED, *code = "unauthorized";
            snprintf(why, len, "%s", reason);
        }
    }
    auth_unref(t);
    return ok;
}

/* A follower starts the forward on the first call (headers only), so that the
 * body streams to the leader as it arrives and the answer streams back;
 * con_cls is the Forward made by on_uri. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    Standby *sb = cls;
    Forward *f = *con_cls;
    if (!f)
        return MHD_NO; /* out of memory in on_uri */
    char leader[512];
    const char *forwarded = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, FORWARD_HEADER);
    const char *why = "no gateway leads yet; retry";
    if (forward_first_call(f)) {
        /* Refused here as the leader would (http.c): such a field cannot be
         * passed on, and dropping it would change the request. */
        if (!httphead_names_are_tokens(conn))
            return answer_error(conn, MHD_HTTP_BAD_REQUEST, "bad_request", HTTPHEAD_NAME_NOT_TOKEN, NULL);
        /* As the leader would (http.c), for this gateway's own names: a
         * forward goes out with the leader's name as Host and no Origin. */
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        switch (hostcheck_request(sb->hosts, method, host,
                                  MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"))) {
        case HOST_MISDIRECTED: {
            json_t *body = json_pack("{s:s, s:s, s:s}", "error", "misdirected_request", "message",
                                     "this server does not answer for this Host (against DNS rebinding): use its "
                                     "address, or start it with --allowed-host NAME",
                                     "field", "host");
            return answer(conn, 421, body);
        }
        case HOST_BAD_ORIGIN: {
            json_t *body = json_pack("{s:s, s:s, s:s}", "error", "forbidden", "message",
                                     "a write from a page whose Origin is not a host this server answers for is "
                                     "refused",
                                     "reason", "origin");
            return answer(conn, MHD_HTTP_FORBIDDEN, body);
        }
        case HOST_OK:
            break;
        }
        ElectionRole role = election_role(sb->election, leader, sizeof leader);
        if (role == ROLE_FOLLOWER && !forwarded && !local_path(url, method) && !atomic_load(&sb->stopping)) {
            if (needs_key(sb, method, url, forward_uri(f))) {
                unsigned status;
                const char *code;
                char refusal[600];
                if (!key_known(sb, conn, &status, &code, refusal, sizeof refusal))
                    return answer_error(conn, status, code, refusal, NULL);
            }
            atomic_fetch_add(&sb->forwards, 1);
            if (!forward_start(f, sb->pool, conn, method, leader, forward_should_stop, sb, &why))
                forward_failed(sb, method, forward_uri(f), leader, why);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (forward_started(f))
            forward_add_body(f, upload_data, *upload_data_size);
        *upload_data_size = 0; /* not forwarded: dropped, the answer is 503 below */
        return MHD_YES;
    }
    if (forward_started(f)) {
        unsigned status;
        struct MHD_Response *resp = forward_answer(f, &status, &why);
        if (resp) {
            enum MHD_Result r = MHD_queue_response(conn, status, resp);
            MHD_destroy_response(resp);
            return r;
        }
        char was[512];
        election_role(sb->election, was, sizeof was);
        forward_failed(sb, method, forward_uri(f), was, why);
    }
    ElectionRole role = election_role(sb->election, leader, sizeof leader);
    if (local_path(url, method) && !strcmp(url, "/readyz"))
        return answer_readyz(sb, conn, role, leader); /* never needs a key: load balancers ask it */
    if (local_path(url, method) && sb->cfg->auth_metrics) {
        unsigned status;
        const char *code;
        char refusal[600];
        if (!key_known(sb, conn, &status, &code, refusal, sizeof refusal))
            return answer_error(conn, status, code, refusal, NULL);
    }
    if (local_path(url, method) && !strcmp(url, "/metrics"))
        return answer_metrics(sb, conn, role, leader);
    if (local_path(url, method)) {
        json_t *body = json_pack("{s:s, s:s}", "status", "ok", "role", election_role_name(role));
        if (body && leader[0] && json_object_set_new(body, "leader", json_string(leader)))
            json_decref(body), body = NULL;
        return answer(conn, MHD_HTTP_OK, body);
    }
    if (forward_started(f))
        why = "the leader could not answer; retry";
    else if (forwarded && leader[0])
        why = "this gateway is not the leader and does not forward a forwarded request; retry";
    return answer_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded", why, leader);
}

Standby *standby_start(int listen_fd, Election *e, const StandbyOptions *o)
{
    Standby *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->election = e;
    sb->cfg = o->cfg;
    sb->hosts = o->hosts;
    sb->etcd_stats = o->etcd_stats;
    sb->cacert = o->tls->cacert;
    sb->keys = o->keys ? auth_ref(o->keys) : NULL;
    pthread_mutex_init(&sb->mu, NULL);
    pthread_mutex_init(&sb->probe_mu, NULL);
    if (!(sb->pool = forward_pool_new(o->tls->cacert))) {
        standby_stop(sb);
        return NULL;
    }
    /* ITC: MHD_quiesce_daemon needs it to give the socket back. A thread per
     * connection: a forward blocks for as long as the leader takes. */
    struct MHD_OptionItem tls_options[TLS_MHD_OPTIONS];
    tls_mhd_options(o->tls, tls_options);
    sb->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                      MHD_USE_ITC | tls_mhd_flags(o->tls),
                                  0, NULL, NULL, on_request, sb, MHD_OPTION_ARRAY, tls_options,
                                  MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_CONNECTION_LIMIT,
                                  (unsigned)o->cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                                  o->cfg->idle_timeout_s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
                                  MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!sb->daemon) {
        standby_stop(sb);
        return NULL;
    }
    return sb;
}

void standby_set_keys(Standby *sb, AuthTable *keys, const char *error)
{
    pthread_mutex_lock(&sb->mu);
    if (error) {
        snprintf(sb->keys_error, sizeof sb->keys_error, "%s", error);
    } else {
        sb->keys_error[0] = '\0';
        AuthTable *old = sb->keys;
        sb->keys = keys ? auth_ref(keys) : NULL;
        auth_unref(old);
    }
    pthread_mutex_unlock(&sb->mu);
}

void standby_drain(Standby *sb)
{
    pthread_mutex_lock(&sb->mu);
    sb->draining = true;
    pthread_mutex_unlock(&sb->mu);
}

bool standby_stop(Standby *sb)
{
    /* Forwards in flight end within a second (their progress checks), so
     * the stop below does not wait for a long-poll. Quiesced, MHD no longer
     * accepts and leaves the socket open on stop. */
    atomic_store(&sb->stopping, true);
    bool kept = true;
    if (sb->daemon) {
        kept = MHD_quiesce_daemon(sb->daemon) != MHD_INVALID_SOCKET;
        MHD_stop_daemon(sb->daemon); /* joins every connection's thread, and so ends every forward */
    }
    if (sb->failures_unlogged)
        log_line(LEVEL_WARN, "%llu forwards failed since the last line; the last: %s",
                 (unsigned long long)sb->failures_unlogged, sb->last_failure);
    if (sb->pool)
        forward_pool_free(sb->pool);
    auth_unref(sb->keys);
    pthread_mutex_destroy(&sb->mu);
    pthread_mutex_destroy(&sb->probe_mu);
    free(sb);
    return kept;
}
