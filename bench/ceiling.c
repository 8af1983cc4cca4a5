/*
 * ceiling — the fastest this stack can answer leasegate's acquire and release:
 * libmicrohttpd 0.9.75 and jansson, run as leasegate runs them, with no lock
 * table, no storage and no commit.
 *
 *   ceiling [--listen 127.0.0.1:PORT]    prints "ceiling: listening on http://127.0.0.1:PORT"
 *
 * One thread, an epoll loop around libmicrohttpd's own epoll set
 * (MHD_USE_EPOLL | MHD_USE_TURBO | MHD_ALLOW_SUSPEND_RESUME, a 16 KiB
 * connection pool), as src/net/http.c and src/runloop.c set it up. Every
 * POST /v1/locks/NAME/acquire or /release has its JSON body read with
 * jansson and its answer (the fields leasegate answers, written with
 * snprintf) made at once, and then takes the path an answer that waits for
 * its commit takes in leasegate: the connection is suspended, the batch of
 * this turn is "handed over" by an eventfd write, and when the loop wakes on
 * that eventfd it resumes each connection, whose next callback queues the
 * answer. What leasegate adds to this is the lock table, the lease ids, the
 * group commit (a writer thread, SQLite and the fsync) and its bookkeeping.
 * Any other request is 404. Stops on SIGINT or SIGTERM.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define POOL_BYTES (16 * 1024)
#define MAX_BODY 65536

typedef struct Call {
    char *body; /* owned */
    size_t len;
    bool too_large;
    struct MHD_Response *answer; /* owned until queued */
    unsigned status;
    struct MHD_Connection *conn;
    struct Call *next; /* in a batch */
} Call;

static Call *pending, *handed; /* this turn's suspended calls; the batch handed over */
static uint64_t tokens;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The answer leasegate gives, with made-up values of the same size. */
static struct MHD_Response *answer_for(const char *url, json_t *req, unsigned *status)
{
    static const char prefix[] = "/v1/locks/";
    size_t plen = sizeof prefix - 1;
    const char *slash = strrchr(url, '/');
    if (strncmp(url, prefix, plen) != 0 || !slash || slash < url + plen + 1 || !json_is_object(req))
        return NULL;
    int nlen = (int)(slash - (url + plen));
    const char *name = url + plen, *action = slash + 1;
    char text[1024];
    int n;
    if (!strcmp(action, "acquire")) {
        const char *owner = json_string_value(json_object_get(req, "owner"));
        json_int_t ttl = json_integer_value(json_object_get(req, "ttl_ms"));
        if (!owner)
            return NULL;
        if (ttl <= 0)
            ttl = 30000;
        uint64_t t = ++tokens;
        int64_t at = now_ms();
        n = snprintf(text, sizeof text,
                     "{\"name\":\"%.*s\",\"owner\":\"%s\",\"lease\":\"%08llx-0000-4000-8000-%012llx\",\"token\":%llu,"
                     "\"ttl_ms\":%lld,\"acquired_at_ms\":%lld,\"expires_at_ms\":%lld,\"count\":1,\"metadata\":{}}",
                     nlen, name, owner, (unsigned long long)t, (unsigned long long)t, (unsigned long long)t,
                     (long long)ttl, (long long)at, (long long)(at + ttl));
    } else if (!strcmp(action, "release")) {
        if (!json_string_value(json_object_get(req, "lease")))
            return NULL;
        n = snprintf(text, sizeof text, "{\"name\":\"%.*s\",\"released\":true,\"count\":0}", nlen, name);
    } else {
        return NULL;
    }
    if (n < 0 || (size_t)n >= sizeof text)
        return NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer((size_t)n, text, MHD_RESPMEM_MUST_COPY);
    if (r && (MHD_add_response_header(r, "Content-Type", "application/json") != MHD_YES ||
              MHD_add_response_header(r, "Cache-Control", "no-store") != MHD_YES)) {
        MHD_destroy_response(r);
        return NULL;
    }
    *status = 200;
    return r;
}

static enum MHD_Result queue_plain(struct MHD_Connection *conn, unsigned status, const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **ctx)
{
    (void)cls, (void)version;
    Call *c = *ctx;
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            return MHD_NO;
        c->conn = conn;
        *ctx = c;
        return MHD_YES;
    }
    if (*upload_size) {
        if (c->len + *upload_size > MAX_BODY) {
            c->too_large = true;
        } else {
            char *b = realloc(c->body, c->len + *upload_size + 1);
            if (!b)
                return MHD_NO;
            memcpy(b + c->len, upload, *upload_size);
            c->body = b;
            c->len += *upload_size;
            c->body[c->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->answer) { /* resumed: the batch it waited for is "durable" */
        enum MHD_Result rc = MHD_queue_response(conn, c->status, c->answer);
        MHD_destroy_response(c->answer);
        c->answer = NULL;
        return rc;
    }
    if (strcmp(method, "POST") != 0 || c->too_large || !c->body)
        return queue_plain(conn, 404, "{\"error\":\"not_found\",\"message\":\"no such operation\"}");
    json_t *req = json_loadb(c->body, c->len, 0, NULL);
    c->answer = answer_for(url, req, &c->status);
    json_decref(req);
    if (!c->answer)
        return queue_plain(conn, 404, "{\"error\":\"not_found\",\"message\":\"no such operation\"}");
    MHD_suspend_connection(conn);
    c->next = pending;
    pending = c;
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **ctx, enum MHD_RequestTerminationCode code)
{
    (void)cls, (void)conn, (void)code;
    Call *c = *ctx;
    if (!c)
        return;
    if (c->answer)
        MHD_destroy_response(c->answer);
    free(c->body);
    free(c);
    *ctx = NULL;
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:0";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--listen") && i + 1 < argc)
            listen = argv[++i];
        else {
            fprintf(stderr, "usage: ceiling [--listen 127.0.0.1:PORT]\n");
            return 2;
        }
    }
    const char *colon = strrchr(listen, ':');
    if (!colon || strncmp(listen, "127.0.0.1", (size_t)(colon - listen)) != 0) {
        fprintf(stderr, "ceiling: --listen must be 127.0.0.1:PORT\n");
        return 2;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_TURBO | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, on_request, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, 60000u,
        MHD_OPTION_CONNECTION_TIMEOUT, 300u, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_BYTES,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    const union MHD_DaemonInfo *ei = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    const union MHD_DaemonInfo *pi = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (!ei || !pi || sigfd < 0 || efd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ei->epoll_fd, &ev) ||
        (ev.data.fd = efd, epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev)) ||
        (ev.data.fd = sigfd, epoll_ctl(ep, EPOLL_CTL_ADD, sigfd, &ev))) {
        fprintf(stderr, "ceiling: cannot start: %s\n", strerror(errno));
        return 1;
    }
    printf("ceiling: listening on http://127.0.0.1:%u\n", (unsigned)pi->port);
    fflush(stdout);
    for (;;) {
        MHD_UNSIGNED_LONG_LONG to;
        int timeout = MHD_get_timeout(d, &to) == MHD_YES ? (to > 1000 ? 1000 : (int)to) : 1000;
        struct epoll_event got[8];
        int n = epoll_wait(ep, got, 8, timeout);
        bool stop = false, woke = false;
        for (int i = 0; i < n; i++) {
            if (got[i].data.fd == sigfd)
                stop = true;
            else if (got[i].data.fd == efd)
                woke = true;
        }
        if (stop)
            break;
        if (woke) {
            uint64_t v;
            if (read(efd, &v, sizeof v) < 0 && errno != EAGAIN)
                return 1;
            for (Call *c = handed, *next; c; c = next) {
                next = c->next;
                MHD_resume_connection(c->conn);
            }
            handed = NULL;
        }
        MHD_run(d);
        /* The turn's answers are "committed": handed over, and the loop woken. */
        if (pending && !handed) {
            handed = pending;
            pending = NULL;
            uint64_t one = 1;
            if (write(efd, &one, sizeof one) < 0)
                return 1;
        }
    }
    MHD_stop_daemon(d);
    return 0;
}
