/* standby — the non-leader's answers; see standby.h. */
#include "standby.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/selfmetrics.h"
#include "net/forward.h"
#include "net/httphead.h"
#include "net/tls.h"
#include "store/jsondump.h"

struct Standby {
    struct MHD_Daemon *daemon;
    Election *election;
    ForwardPool *pool;
    const AuthTable *metrics_keys; /* with --auth-metrics: /healthz and /metrics need one */
    const HostCheck *hosts;        /* the Host names answered for: checked before anything else */
    _Atomic bool stopping; /* forwards in flight give up: the socket goes to the real server */
    _Atomic uint64_t forwards, forward_failures; /* for /metrics */
};

/* A forward goes on only while this gateway follows the leader it went to. */
static bool forward_should_stop(void *ud, const char *leader)
{
    Standby *sb = ud;
    if (atomic_load(&sb->stopping))
        return true;
    char now[512];
    return election_role(sb->election, now, sizeof now) != ROLE_FOLLOWER || strcmp(now, leader) != 0;
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

/* A standby's own /metrics: its role and its forwards. The lock space's
 * metrics are the leader's (its /metrics). */
static enum MHD_Result answer_metrics(Standby *sb, struct MHD_Connection *conn, ElectionRole role)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return MHD_NO;
    fprintf(f, "# HELP leasegate_leader 1 when this gateway leads the etcd prefix.\n# TYPE leasegate_leader gauge\n"
               "leasegate_leader 0\n");
    fprintf(f, "# HELP leasegate_role This gateway's role (1 for the current one).\n# TYPE leasegate_role gauge\n");
    for (ElectionRole r = ROLE_CANDIDATE; r <= ROLE_LEADER; r++)
        fprintf(f, "leasegate_role{role=\"%s\"} %d\n", election_role_name(r), r == role);
    fprintf(f, "# HELP leasegate_leader_seen_seconds Time since this gateway last saw the leadership change.\n"
               "# TYPE leasegate_leader_seen_seconds gauge\nleasegate_leader_seen_seconds %lld\n",
            (long long)(election_leader_seen_ms(sb->election) / 1000));
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
    return (!strcmp(method, "GET") || !strcmp(method, "HEAD")) && (!strcmp(url, "/healthz") || !strcmp(url, "/metrics"));
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
            return answer(conn, MHD_HTTP_BAD_REQUEST,
                          json_pack("{s:s, s:s}", "error", "bad_request", "message", HTTPHEAD_NAME_NOT_TOKEN));
        /* As the leader would (http.c), for this gateway's own names: a
         * forward goes out with the leader's name as Host and no Origin. */
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        switch (hostcheck_request(sb->hosts, method, host,
                                  MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"))) {
        case HOST_MISDIRECTED:
            return answer(conn, 421,
                          json_pack("{s:s, s:s, s:s}", "error", "misdirected_request", "message",
                                    "this server does not answer for this Host (against DNS rebinding): use its "
                                    "address, or start it with --allowed-host NAME",
                                    "field", "host"));
        case HOST_BAD_ORIGIN:
            return answer(conn, MHD_HTTP_FORBIDDEN,
                          json_pack("{s:s, s:s, s:s}", "error", "forbidden", "message",
                                    "a write from a page whose Origin is not a host this server answers for is "
                                    "refused",
                                    "reason", "origin"));
        case HOST_OK:
            break;
        }
        ElectionRole role = election_role(sb->election, leader, sizeof leader);
        if (role == ROLE_FOLLOWER && !forwarded && !local_path(url, method) && !atomic_load(&sb->stopping)) {
            atomic_fetch_add(&sb->forwards, 1);
            if (!forward_start(f, sb->pool, conn, method, leader, forward_should_stop, sb, &why)) {
                atomic_fetch_add(&sb->forward_failures, 1);
                fprintf(stderr, "leasegate: forward of %s %s to the leader %s: %s\n", method, url, leader, why);
            }
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
        atomic_fetch_add(&sb->forward_failures, 1);
        fprintf(stderr, "leasegate: forward of %s %s to the leader: %s\n", method, forward_uri(f), why);
    }
    ElectionRole role = election_role(sb->election, leader, sizeof leader);
    json_t *body;
    if (local_path(url, method) && sb->metrics_keys &&
        !auth_find_bearer(sb->metrics_keys, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
                          &why)) {
        body = json_pack("{s:s, s:s}", "error", "unauthorized", "message", why);
        return answer(conn, MHD_HTTP_UNAUTHORIZED, body);
    }
    if (local_path(url, method) && !strcmp(url, "/metrics"))
        return answer_metrics(sb, conn, role);
    if (local_path(url, method)) {
        body = json_pack("{s:s, s:s}", "status", "ok", "role", election_role_name(role));
        if (body && leader[0] && json_object_set_new(body, "leader", json_string(leader)))
            json_decref(body), body = NULL;
        return answer(conn, MHD_HTTP_OK, body);
    }
    if (forward_started(f))
        why = "the leader could not answer; retry";
    else if (forwarded && leader[0])
        why = "this gateway is not the leader and does not forward a forwarded request; retry";
    body = json_pack("{s:s, s:s}", "error", "overloaded", "message", why);
    if (body && leader[0] && json_object_set_new(body, "leader", json_string(leader)))
        json_decref(body), body = NULL;
    return answer(conn, MHD_HTTP_SERVICE_UNAVAILABLE, body);
}

Standby *standby_start(int listen_fd, Election *e, unsigned max_connections, unsigned idle_timeout_s, Tls *tls,
                       const AuthTable *metrics_keys, const HostCheck *hosts)
{
    Standby *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->election = e;
    sb->metrics_keys = metrics_keys;
    sb->hosts = hosts;
    if (!(sb->pool = forward_pool_new(tls->cacert))) {
        free(sb);
        return NULL;
    }
    /* ITC: MHD_quiesce_daemon needs it to give the socket back. A thread per
     * connection: a forward blocks for as long as the leader takes. */
    struct MHD_OptionItem tls_options[TLS_MHD_OPTIONS];
    tls_mhd_options(tls, tls_options);
    sb->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                      MHD_USE_ITC | tls_mhd_flags(tls),
                                  0, NULL, NULL, on_request, sb, MHD_OPTION_ARRAY, tls_options,
                                  MHD_OPTION_LISTEN_SOCKET, listen_fd,
                                  MHD_OPTION_CONNECTION_LIMIT, max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                                  idle_timeout_s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
                                  MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!sb->daemon) {
        forward_pool_free(sb->pool);
        free(sb);
        return NULL;
    }
    return sb;
}

bool standby_stop(Standby *sb)
{
    /* Forwards in flight end within a second (their progress checks), so
     * the stop below does not wait for a long-poll. Quiesced, MHD no longer
     * accepts and leaves the socket open on stop. */
    atomic_store(&sb->stopping, true);
    bool kept = MHD_quiesce_daemon(sb->daemon) != MHD_INVALID_SOCKET;
    MHD_stop_daemon(sb->daemon); /* joins every connection's thread, and so ends every forward */
    forward_pool_free(sb->pool);
    free(sb);
    return kept;
}
