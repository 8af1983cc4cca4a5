/*
 * etcd_grpc_lock — acquire+release pairs with etcd's own lock API spoken as
 * gRPC, the way etcd's Go clients (etcdctl lock, clientv3/concurrency) call
 * it, for bench/scaleout.sh. lgbench drives the same API through etcd's JSON
 * gateway, which costs etcd more per request; since leasegate's gateways
 * commit as gRPC, this is the fair comparison.
 *
 *   etcd_grpc_lock --port P [--clients 64] [--seconds 5] [--warmup 0.5]
 *
 * Each client is a thread with its own HTTP/2 connection: a lease granted
 * before timing (LeaseGrant, TTL 60 s), then Lock(name, lease) + Unlock(key)
 * in a loop, on a lock name of its own. Prints one line of key=value pairs as
 * lgbench does (pairs_per_s, p50_ms, p99_ms, errors, client_cpu_pct).
 * Everything goes to 127.0.0.1; every loop ends with the run.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "store/pb.h"

#define MAX_CLIENTS 1024
#define MAX_SAMPLES 200000 /* per client */

typedef struct Client {
    pthread_t thread;
    int id;
    CURL *curl;
    struct curl_slist *headers;
    bool connected; /* a kept HTTP/2 connection (see the store's etcd.c: libcurl 7.88.1) */
    double *samples;
    size_t nsamples;
    long pairs, errors;
} Client;

static int g_port;
static atomic_int g_measuring, g_stop;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    pb_raw(ud, p, size * n);
    return size * n;
}

static size_t on_header(char *line, size_t size, size_t n, void *ud)
{
    if (size * n > 12 && !strncasecmp(line, "grpc-status:", 12))
        *(int *)ud = atoi(line + 12);
    return size * n;
}

/* One unary call: 0 with *answer the message, -1 on any failure. */
static int call(Client *c, const char *method, const PbBuf *req, PbBuf *answer)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", g_port, method);
    PbBuf frame = {0}, body = {0};
    unsigned char prefix[5] = {0, (unsigned char)(req->len >> 24), (unsigned char)(req->len >> 16),
                               (unsigned char)(req->len >> 8), (unsigned char)req->len};
    pb_raw(&frame, prefix, 5);
    pb_raw(&frame, req->data, req->len);
    int status = -1;
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_HTTP_VERSION,
                     c->connected ? (long)CURL_HTTP_VERSION_2_0 : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    curl_easy_setopt(c->curl, CURLOPT_FRESH_CONNECT, c->connected ? 0L : 1L);
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, (const char *)frame.data);
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)frame.len);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, &status);
    CURLcode rc = curl_easy_perform(c->curl);
    long version = 0;
    curl_easy_getinfo(c->curl, CURLINFO_HTTP_VERSION, &version);
    c->connected = rc == CURLE_OK && version == CURL_HTTP_VERSION_2_0;
    pb_free(&frame);
    int ok = rc == CURLE_OK && status == 0 && !body.nomem && body.len >= 5 && !frame.nomem;
    if (ok)
        pb_raw(answer, body.data + 5, body.len - 5);
    pb_free(&body);
    return ok && !answer->nomem ? 0 : -1;
}

/* The first field `number` of a message: its varint, or its bytes. */
static bool field(const PbBuf *m, uint32_t number, PbField *out)
{
    PbReader r = pb_reader(m->data, m->len);
    while (pb_next(&r, out) == 1)
        if (out->number == number)
            return true;
    return false;
}

static void *run(void *arg)
{
    Client *c = arg;
    PbBuf req = {0}, ans = {0};
    PbField f;
    pb_varint(&req, 1, 60); /* TTL */
    int64_t lease = 0;
    if (call(c, "/etcdserverpb.Lease/LeaseGrant", &req, &ans) == 0 && field(&ans, 2, &f))
        lease = (int64_t)f.value;
    pb_free(&req);
    pb_free(&ans);
    if (!lease) {
        c->errors++;
        return NULL;
    }
    char name[64];
    int nlen = snprintf(name, sizeof name, "bench/grpc/%d", c->id);
    while (!atomic_load(&g_stop)) {
        double t0 = now_s();
        pb_varint(&req, 2, (uint64_t)lease);
        pb_bytes(&req, 1, name, (size_t)nlen);
        int ok = call(c, "/v3lockpb.Lock/Lock", &req, &ans) == 0 && field(&ans, 2, &f);
        pb_free(&req);
        if (ok) {
            PbBuf unlocked = {0};
            pb_bytes(&req, 1, f.data, f.len);
            ok = call(c, "/v3lockpb.Lock/Unlock", &req, &unlocked) == 0;
            pb_free(&req);
            pb_free(&unlocked);
        }
        pb_free(&ans);
        if (!atomic_load(&g_measuring))
            continue;
        if (!ok) {
            c->errors++;
            continue;
        }
        c->pairs++;
        if (c->nsamples < MAX_SAMPLES)
            c->samples[c->nsamples++] = (now_s() - t0) * 1000;
    }
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
    int clients = 64;
    double seconds = 5, warmup = 0.5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            g_port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--clients"))
            clients = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = atof(argv[i + 1]);
    }
    if (g_port <= 0 || clients < 1 || clients > MAX_CLIENTS || seconds <= 0 || warmup < 0) {
        fprintf(stderr, "usage: etcd_grpc_lock --port P [--clients 1..%d] [--seconds S] [--warmup S]\n", MAX_CLIENTS);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Client *cs = calloc((size_t)clients, sizeof *cs);
    if (!cs)
        return 1;
    for (int i = 0; i < clients; i++) {
        cs[i].id = i;
        cs[i].curl = curl_easy_init();
        cs[i].headers = curl_slist_append(curl_slist_append(NULL, "Content-Type: application/grpc"), "TE: trailers");
        cs[i].samples = malloc(MAX_SAMPLES * sizeof(double));
        if (!cs[i].curl || !cs[i].headers || !cs[i].samples)
            return 1;
        /* the options every call shares, set once: a benchmark client should cost little */
        curl_easy_setopt(cs[i].curl, CURLOPT_HTTPHEADER, cs[i].headers);
        curl_easy_setopt(cs[i].curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(cs[i].curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(cs[i].curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(cs[i].curl, CURLOPT_TIMEOUT_MS, 10000L);
        if (pthread_create(&cs[i].thread, NULL, run, &cs[i]))
            return 1;
    }
    usleep((useconds_t)(warmup * 1e6));
    double t0 = now_s(), c0 = cpu_s();
    atomic_store(&g_measuring, 1);
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&g_measuring, 0);
    double t1 = now_s(), c1 = cpu_s();
    atomic_store(&g_stop, 1);
    long pairs = 0, errors = 0;
    size_t n = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(cs[i].thread, NULL);
        pairs += cs[i].pairs;
        errors += cs[i].errors;
        n += cs[i].nsamples;
    }
    double *all = malloc((n ? n : 1) * sizeof *all);
    if (!all)
        return 1;
    size_t k = 0;
    for (int i = 0; i < clients; i++) {
        memcpy(all + k, cs[i].samples, cs[i].nsamples * sizeof *all);
        k += cs[i].nsamples;
        free(cs[i].samples);
        curl_easy_cleanup(cs[i].curl);
        curl_slist_free_all(cs[i].headers);
    }
    qsort(all, n, sizeof *all, by_value);
    double w = t1 - t0;
    printf("target=etcd-grpc mode=pairs clients=%d seconds=%.2f pairs=%ld pairs_per_s=%.0f p50_ms=%.3g p99_ms=%.3g "
           "errors=%ld client_cpu_pct=%.0f\n",
           clients, w, pairs, pairs / w, n ? all[n / 2] : 0.0, n ? all[n * 99 / 100] : 0.0, errors,
           100 * (c1 - c0) / w);
    free(all);
    free(cs);
    curl_global_cleanup();
    return 0;
}
