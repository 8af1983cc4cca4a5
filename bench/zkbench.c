/*
 * zkbench — ZooKeeper's standard lock recipe under lgbench's workloads, for
 * bench/compare.sh: a C client on libzookeeper-mt (Debian's libzookeeper-mt-dev).
 *
 *   zkbench --hosts 127.0.0.1:PORT --mode pairs|contend|waiters [--clients N]
 *           [--seconds S] [--warmup S] [--pid PID]
 *
 * The recipe (ZooKeeper's "Locks" recipe, what Curator's InterProcessMutex does):
 * create an EPHEMERAL_SEQUENTIAL node under the lock's node; list the
 * children; the lowest sequence number holds the lock; any other watches only
 * its predecessor (exists with a watch) and looks again when that goes, so a
 * release wakes one waiter (no herd). Releasing deletes the node.
 *
 *  pairs    each client (its own session, its own thread) loops acquire + release on
 *           a lock of its own: create, get children, delete (three round trips, each
 *           a write or read of the one ZooKeeper server; create and delete are logged
 *           and fsynced before they are answered). Reports pairs/s and pair latency.
 *  contend  every client wants ONE lock; on its grant it releases at once and queues
 *           again. Reports grants/s, hand-off latency (the holder's delete sent -> the
 *           next grant seen) and FIFO: grants must come in the order of the sequence
 *           numbers ZooKeeper gave the nodes (the order the requests reached it).
 *  waiters  one client holds the lock, N sessions wait on it; the server's RSS growth
 *           per waiter, each RSS read after a forced full GC (jcmd PID GC.run), so the
 *           JVM's garbage is not counted. Needs --pid.
 *
 * Prints one key=value line as lgbench does. Talks to 127.0.0.1 only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define THREADED /* the synchronous calls of libzookeeper-mt */
#include <zookeeper/zookeeper.h>

/* Every run under a node of its own, so nodes a killed run left (until its
 * sessions expire) never stand in the queue. */
static char ROOT[64];
#define SESSION_MS 30000

static struct {
    const char *hosts, *mode;
    int clients, pid;
    double seconds, warmup;
} opt = {NULL, "pairs", 64, 0, 5, 0.5};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long pairs, grants, errors, fifo_violations, fifo_checked;
static long long last_seq = -1;
static uint64_t release_sent_ns;
static uint32_t *lat, *handoff;
static size_t nlat, caplat, nhand, caphand;
static long *client_grants;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static volatile int phase; /* 0 warm-up, 1 measuring, 2 stop */

/* After the end, calls on closed sessions fail: the thread just stops. */
static void fatal(const char *fmt, ...)
{
    if (phase == 2)
        pthread_exit(NULL);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zkbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void add_sample(uint32_t **v, size_t *n, size_t *cap, uint64_t ns)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 65536;
        *v = realloc(*v, *cap * sizeof **v);
        if (!*v)
            fatal("out of memory");
    }
    (*v)[(*n)++] = (uint32_t)(ns / 1000 > UINT32_MAX ? UINT32_MAX : ns / 1000);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(uint32_t *v, size_t n, double q)
{
    if (!n)
        return -1;
    qsort(v, n, sizeof *v, cmp_u32);
    size_t i = (size_t)(q / 100 * (double)(n - 1) + 0.5);
    return v[i] / 1000.0;
}

static void cpu_ticks(unsigned long long *t)
{
    *t = 0;
    if (opt.pid <= 0)
        return;
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", opt.pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
        *t = ut + st;
}

static long rss_kb(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", opt.pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* ---------------------------------------------------------------- sessions */

typedef struct Session {
    zhandle_t *zh;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool connected, fired;
} Session;

static void on_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)path;
    Session *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE)
        s->connected = true;
    else if (type != ZOO_SESSION_EVENT)
        s->fired = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void session_open(Session *s)
{
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->connected = s->fired = false;
    s->zh = zookeeper_init(opt.hosts, on_event, SESSION_MS, NULL, s, 0);
    if (!s->zh)
        fatal("zookeeper_init: %s", strerror(errno));
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30;
    pthread_mutex_lock(&s->mu);
    while (!s->connected)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT)
            fatal("no session with %s in 30 s", opt.hosts);
    pthread_mutex_unlock(&s->mu);
}

static void ensure(zhandle_t *zh, const char *path)
{
    int rc = zoo_create(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    if (rc != ZOK && rc != ZNODEEXISTS)
        fatal("create %s: %s", path, zerror(rc));
}

static long long seq_of(const char *name)
{
    const char *dash = strrchr(name, '-');
    return dash ? atoll(dash + 1) : -1;
}

/* The recipe: `me` (a full path) was created under dir; returns once it holds
 * the lock: the lowest sequence number, having watched only its predecessor. */
static void wait_turn(Session *s, const char *dir, const char *me)
{
    const char *mine = strrchr(me, '/') + 1;
    long long myseq = seq_of(mine);
    for (;;) {
        struct String_vector kids = {0, NULL};
        int rc = zoo_get_children(s->zh, dir, 0, &kids);
        if (rc != ZOK)
            fatal("get_children %s: %s", dir, zerror(rc));
        long long best = -1;
        const char *pred = NULL;
        for (int i = 0; i < kids.count; i++) {
            long long q = seq_of(kids.data[i]);
            if (q < myseq && q > best) {
                best = q;
                pred = kids.data[i];
            }
        }
        if (!pred) {
            deallocate_String_vector(&kids);
            return;
        }
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, pred);
        deallocate_String_vector(&kids);
        pthread_mutex_lock(&s->mu);
        s->fired = false;
        pthread_mutex_unlock(&s->mu);
        struct Stat st;
        rc = zoo_exists(s->zh, path, 1, &st);
        if (rc == ZNONODE)
            continue; /* gone already: look again */
        if (rc != ZOK)
            fatal("exists %s: %s", path, zerror(rc));
        pthread_mutex_lock(&s->mu);
        while (!s->fired && phase < 2)
            pthread_cond_wait(&s->cv, &s->mu);
        bool stop = !s->fired;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return;
    }
}

/* ---------------------------------------------------------------- workloads */

typedef struct Client {
    int idx;
    Session s;
    pthread_t thread;
} Client;

static void *pairs_main(void *arg)
{
    Client *c = arg;
    char dir[128], prefix[160], me[256];
    snprintf(dir, sizeof dir, "%s/p%d", ROOT, c->idx);
    ensure(c->s.zh, dir);
    snprintf(prefix, sizeof prefix, "%s/lock-", dir);
    while (phase < 2) {
        uint64_t t0 = now_ns();
        int rc = zoo_create(c->s.zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, me, sizeof me);
        if (rc != ZOK)
            fatal("create: %s", zerror(rc));
        wait_turn(&c->s, dir, me);
        rc = zoo_delete(c->s.zh, me, -1);
        if (rc != ZOK)
            fatal("delete: %s", zerror(rc));
        uint64_t t1 = now_ns();
        pthread_mutex_lock(&mu);
        if (phase == 1) {
            pairs++;
            add_sample(&lat, &nlat, &caplat, t1 - t0);
        }
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

static void *contend_main(void *arg)
{
    Client *c = arg;
    char me[256], dir[96], prefix[128];
    snprintf(dir, sizeof dir, "%s/c", ROOT);
    snprintf(prefix, sizeof prefix, "%s/lock-", dir);
    while (phase < 2) {
        int rc = zoo_create(c->s.zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, me, sizeof me);
        if (rc != ZOK)
            fatal("create: %s", zerror(rc));
        wait_turn(&c->s, dir, me);
        if (phase >= 2)
            break;
        uint64_t t = now_ns();
        long long seq = seq_of(me);
        pthread_mutex_lock(&mu);
        /* Grants in the order ZooKeeper numbered the requests. */
        if (seq <= last_seq)
            fifo_violations++;
        fifo_checked++;
        last_seq = seq;
        if (phase == 1) {
            grants++;
            client_grants[c->idx]++;
            if (release_sent_ns)
                add_sample(&handoff, &nhand, &caphand, t - release_sent_ns);
        }
        release_sent_ns = now_ns();
        pthread_mutex_unlock(&mu);
        rc = zoo_delete(c->s.zh, me, -1);
        if (rc != ZOK)
            fatal("delete: %s", zerror(rc));
    }
    return NULL;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static void gc(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "jcmd %d GC.run >/dev/null 2>&1", opt.pid);
    if (system(cmd) != 0)
        fprintf(stderr, "zkbench: jcmd %d GC.run failed (RSS read without a forced GC)\n", opt.pid);
    sleep_s(0.5);
}

static void run_waiters(void)
{
    if (opt.pid <= 0)
        fatal("waiters mode needs --pid");
    Session holder;
    session_open(&holder);
    char dir[96], prefix[128];
    snprintf(dir, sizeof dir, "%s/w", ROOT);
    snprintf(prefix, sizeof prefix, "%s/lock-", dir);
    ensure(holder.zh, ROOT);
    ensure(holder.zh, dir);
    char me[256];
    int rc = zoo_create(holder.zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, me,
                        sizeof me);
    if (rc != ZOK)
        fatal("holder: %s", zerror(rc));
    gc();
    long rss0 = rss_kb();
    int n = opt.clients;
    Session *w = calloc((size_t)n, sizeof *w);
    if (!w)
        fatal("out of memory");
    for (int i = 0; i < n; i++) {
        session_open(&w[i]);
        char mine[256];
        rc = zoo_create(w[i].zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, mine,
                        sizeof mine);
        if (rc != ZOK)
            fatal("waiter %d: %s", i, zerror(rc));
        /* The recipe's wait: a watch on the predecessor (all but the first wait
         * on another waiter). */
        struct String_vector kids = {0, NULL};
        if (zoo_get_children(w[i].zh, dir, 0, &kids) != ZOK)
            fatal("get_children");
        long long myseq = seq_of(mine), best = -1;
        const char *pred = NULL;
        for (int k = 0; k < kids.count; k++) {
            long long q = seq_of(kids.data[k]);
            if (q < myseq && q > best)
                best = q, pred = kids.data[k];
        }
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, pred ? pred : "none");
        deallocate_String_vector(&kids);
        struct Stat st;
        if (!pred || zoo_exists(w[i].zh, path, 1, &st) != ZOK)
            fatal("waiter %d: no predecessor to watch", i);
    }
    gc();
    long rss1 = rss_kb();
    printf("target=zookeeper mode=waiters variant=- clients=%d waiters=%d rss_before_kb=%ld rss_after_kb=%ld "
           "bytes_per_waiter=%.0f errors=0\n",
           n, n, rss0, rss1, (double)(rss1 - rss0) * 1024 / n);
    fflush(stdout);
    phase = 2;
    for (int i = 0; i < n; i++)
        zookeeper_close(w[i].zh);
    zookeeper_close(holder.zh);
}

static void run_threads(bool contend)
{
    int n = opt.clients;
    Client *cl = calloc((size_t)n, sizeof *cl);
    client_grants = calloc((size_t)n, sizeof *client_grants);
    if (!cl || !client_grants)
        fatal("out of memory");
    for (int i = 0; i < n; i++) {
        cl[i].idx = i;
        session_open(&cl[i].s);
    }
    ensure(cl[0].s.zh, ROOT);
    if (contend) {
        char dir[96];
        snprintf(dir, sizeof dir, "%s/c", ROOT);
        ensure(cl[0].s.zh, dir);
    }
    for (int i = 0; i < n; i++)
        if (pthread_create(&cl[i].thread, NULL, contend ? contend_main : pairs_main, &cl[i]))
            fatal("pthread_create");
    sleep_s(opt.warmup);
    unsigned long long c0, c1;
    cpu_ticks(&c0);
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&mu);
    phase = 1;
    pthread_mutex_unlock(&mu);
    sleep_s(opt.seconds);
    pthread_mutex_lock(&mu);
    phase = 2;
    pthread_mutex_unlock(&mu);
    uint64_t t1 = now_ns();
    cpu_ticks(&c1);
    double secs = (double)(t1 - t0) / 1e9;
    double cpu = opt.pid > 0 ? (double)(c1 - c0) / (double)sysconf(_SC_CLK_TCK) / secs * 100 : -1;
    printf("target=zookeeper mode=%s variant=- clients=%d seconds=%.2f ", opt.mode, n, secs);
    if (!contend) {
        printf("pairs=%ld pairs_per_s=%.0f p50_ms=%.3g p99_ms=%.3g ", pairs, pairs / secs, pct_ms(lat, nlat, 50),
               pct_ms(lat, nlat, 99));
    } else {
        long mn = -1, mx = 0;
        for (int i = 0; i < n; i++) {
            if (mn < 0 || client_grants[i] < mn)
                mn = client_grants[i];
            if (client_grants[i] > mx)
                mx = client_grants[i];
        }
        printf("grants=%ld grants_per_s=%.0f handoff_p50_ms=%.3g handoff_p99_ms=%.3g fifo_ok=%d fifo_violations=%ld "
               "grants_min=%ld grants_max=%ld ",
               grants, grants / secs, pct_ms(handoff, nhand, 50), pct_ms(handoff, nhand, 99),
               fifo_violations == 0 && fifo_checked > 0, fifo_violations, mn, mx);
    }
    if (cpu >= 0)
        printf("errors=%ld server_cpu_pct=%.0f server_rss_kb=%ld\n", errors, cpu, rss_kb());
    else
        printf("errors=%ld\n", errors);
    fflush(stdout);
    /* Wake every waiter, then end the sessions (their nodes go with them). */
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&cl[i].s.mu);
        pthread_cond_broadcast(&cl[i].s.cv);
        pthread_mutex_unlock(&cl[i].s.mu);
    }
    for (int i = 0; i < n; i++)
        zookeeper_close(cl[i].s.zh); /* a thread blocked in a call gets an error and stops */
    _exit(0); /* the client threads may still be inside closed handles */
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            fatal("%s needs a value", a);
        if (!strcmp(a, "--hosts"))
            opt.hosts = v;
        else if (!strcmp(a, "--mode"))
            opt.mode = v;
        else if (!strcmp(a, "--clients"))
            opt.clients = atoi(v);
        else if (!strcmp(a, "--seconds"))
            opt.seconds = atof(v);
        else if (!strcmp(a, "--warmup"))
            opt.warmup = atof(v);
        else if (!strcmp(a, "--pid"))
            opt.pid = atoi(v);
        else
            fatal("unknown flag %s (usage: zkbench --hosts 127.0.0.1:PORT --mode pairs|contend|waiters "
                  "[--clients N] [--seconds S] [--warmup S] [--pid PID])",
                  a);
        i++;
    }
    if (!opt.hosts || strncmp(opt.hosts, "127.0.0.1:", 10) != 0)
        fatal("--hosts 127.0.0.1:PORT is required");
    if (opt.clients < 1 || opt.clients > 20000 || opt.seconds <= 0 || opt.warmup < 0)
        fatal("bad --clients, --seconds or --warmup");
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    snprintf(ROOT, sizeof ROOT, "/lgbench-%d", (int)getpid());
    if (!strcmp(opt.mode, "pairs"))
        run_threads(false);
    else if (!strcmp(opt.mode, "contend"))
        run_threads(true);
    else if (!strcmp(opt.mode, "waiters"))
        run_waiters();
    else
        fatal("--mode pairs|contend|waiters");
    return 0;
}
