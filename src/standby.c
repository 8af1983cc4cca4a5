/* standby — the non-leader's answers; see include/leasegate/standby.h. */
#include "leasegate/standby.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

struct Standby {
    struct MHD_Daemon *daemon;
    Election *election;
};

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

/* The body, if any, is read and dropped before the answer (MHD answers after
 * the last callback); con_cls marks a request seen once. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version, (void)upload_data;
    Standby *sb = cls;
    static int seen;
    if (!*con_cls) {
        *con_cls = &seen;
        return MHD_YES;
    }
    if (*upload_data_size) {
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
    body = json_pack("{s:s, s:s}", "error", "overloaded", "message",
                     leader[0] ? "this gateway is not the leader; retry, or ask the leader" : "no gateway leads yet; retry");
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
    /* ITC: MHD_quiesce_daemon needs it to give the socket back. */
    sb->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC, 0, NULL, NULL,
                                  on_request, sb, MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_CONNECTION_LIMIT,
                                  max_connections, MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout_s, MHD_OPTION_END);
    if (!sb->daemon) {
        free(sb);
        return NULL;
    }
    return sb;
}

bool standby_stop(Standby *sb)
{
    /* Quiesced, MHD no longer accepts and leaves the socket open on stop. */
    bool kept = MHD_quiesce_daemon(sb->daemon) != MHD_INVALID_SOCKET;
    MHD_stop_daemon(sb->daemon);
    free(sb);
    return kept;
}
