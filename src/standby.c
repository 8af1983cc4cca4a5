/* standby — the non-leader's answers; see include/leasegate/standby.h. */
#include "leasegate/standby.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leasegate/forward.h"

struct Standby {
    struct MHD_Daemon *daemon;
    Election *election;
    _Atomic bool stopping; /* forwards in flight give up: the socket goes to the real server */
};

/* What a forward needs to know whether to go on waiting for the leader. */
typedef struct ForwardCtx {
    Standby *sb;
    const char *leader; /* the URL forwarded to */
} ForwardCtx;

static bool forward_should_stop(void *ud)
{
    ForwardCtx *c = ud;
    if (atomic_load(&c->sb->stopping))
        return true;
    char now[512];
    return election_role(c->sb->election, now, sizeof now) != ROLE_FOLLOWER || strcmp(now, c->leader) != 0;
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
    forward_free(*con_cls);
    *con_cls = NULL;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* The body is gathered for the forward (MHD answers after the last
 * callback); con_cls is the Forward made by on_uri. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    Standby *sb = cls;
    Forward *f = *con_cls;
    if (!f)
        return MHD_NO; /* out of memory in on_uri */
    if (forward_first_call(f))
        return MHD_YES;
    if (*upload_data_size) {
        forward_add_body(f, upload_data, *upload_data_size); /* past the limit: 413 below */
        *upload_data_size = 0;
        return MHD_YES;
    }
    char leader[512];
    ElectionRole role = election_role(sb->election, leader, sizeof leader);
    bool health = !strcmp(url, "/healthz") && (!strcmp(method, "GET") || !strcmp(method, "HEAD"));
    json_t *body;
    if (health) {
        body = json_pack("{s:s, s:s}", "status", "ok", "role", election_role_name(role));
        if (body && leader[0] && json_object_set_new(body, "leader", json_string(leader)))
            json_decref(body), body = NULL;
        return answer(conn, MHD_HTTP_OK, body);
    }
    const char *forwarded = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, FORWARD_HEADER);
    const char *why = "no gateway leads yet; retry";
    if (role == ROLE_FOLLOWER && !forwarded && !atomic_load(&sb->stopping)) {
        ForwardCtx ctx = {sb, leader};
        unsigned status;
        struct MHD_Response *resp = forward_run(f, conn, method, leader, forward_should_stop, &ctx, &status, &why);
        if (resp) {
            enum MHD_Result r = MHD_queue_response(conn, status, resp);
            MHD_destroy_response(resp);
            return r;
        }
        fprintf(stderr, "leasegate: forward of %s %s to the leader %s: %s\n", method, forward_uri(f), leader, why);
        why = "the leader could not answer; retry";
    } else if (forwarded && leader[0]) {
        why = "this gateway is not the leader and does not forward a forwarded request; retry";
    }
    body = json_pack("{s:s, s:s}", "error", "overloaded", "message", why);
    if (body && leader[0] && json_object_set_new(body, "leader", json_string(leader)))
        json_decref(body), body = NULL;
    return answer(conn, MHD_HTTP_SERVICE_UNAVAILABLE, body);
}

Standby *standby_start(int listen_fd, Election *e, unsigned max_connections, unsigned idle_timeout_s)
{
    Standby *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->election = e;
    /* ITC: MHD_quiesce_daemon needs it to give the socket back. A thread per
     * connection: a forward blocks for as long as the leader takes. */
    sb->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                      MHD_USE_ITC,
                                  0, NULL, NULL, on_request, sb, MHD_OPTION_LISTEN_SOCKET, listen_fd,
                                  MHD_OPTION_CONNECTION_LIMIT, max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                                  idle_timeout_s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
                                  MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!sb->daemon) {
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
    MHD_stop_daemon(sb->daemon);
    free(sb);
    return kept;
}
