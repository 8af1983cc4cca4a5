/* lgbench — load generator for leasegate and its peers (Redis, etcd).
 *
 * One single-threaded epoll client, non-blocking sockets, a minimal HTTP/1.1 client
 * (keep-alive, Content-Length and chunked bodies) and a minimal RESP client. libc only.
 *
 *   lgbench --target leasegate|redis|etcd --mode pairs|contend|waiters|startup
 *           [--variant txn|lock|lockkeep|read|readlock|semaphore] [--clients N] [--seconds S]
 *           [--warmup S] [--count N]
 *           [--source-ips N]   (connections from 127.0.0.1..N: past one address's ephemeral ports)
 *           [--url http://127.0.0.1:PORT | --host H --port P] [--pid PID]
 *           [--name LOCKNAME] [--bin PATH --data FILE]   (startup)
 *
 * Prints exactly one line of key=value pairs on stdout (diagnostics go to stderr).
 * Exit status: 0 when the run completed (even if it found FIFO violations or errors:
 * those are reported in the line), 1 when the run could not be carried out, 2 for usage.
 *
 * Workloads
 *  pairs    every client loops acquire+release on its own lock; a "pair" is one acquire
 *           and one release; latency is the pair's round trip (acquire sent -> release
 *           answered).  leasegate: POST acquire + POST release; --variant readlock: every
 *           client takes the ONE lock --name in read mode (shared); --variant semaphore:
 *           every client takes a permit of the ONE semaphore --name, whose limit is the
 *           number of clients (so no acquire waits).  redis: SET k v NX PX 30000 +
 *           EVALSHA compare-and-delete.  etcd --variant txn: one lease per client (granted
 *           before timing), txn put-if-absent (create_revision == 0) with that lease +
 *           deleterange.  etcd --variant lock: lease grant + /v3/lock/lock +
 *           /v3/lock/unlock + lease revoke per pair.  etcd --variant lockkeep: one lease
 *           per client (granted before timing), /v3/lock/lock + /v3/lock/unlock per pair.
 *           leasegate --variant read: one GET /v1/locks/NAME per "pair" (a read that changes
 *           nothing: on etcd it waits for a barrier, src/store/commit.h).
 *  contend  all clients want ONE lock.  leasegate: long-polling acquire (wait_ms), release
 *           on grant, re-queue after the release answer.  etcd: /v3/lock/lock (blocking),
 *           unlock on grant, lock again.  redis: spin on SET NX until granted, then
 *           EVALSHA release.  The initial queue is built one waiter at a time (checked via
 *           the server's own waiter count) so that the expected FIFO order is exact.
 *           Reports grants/s, handoff latency (release sent -> next grant received),
 *           a FIFO check and token monotonicity (leasegate token; etcd header revision).
 *           FIFO (fifo_by=server_events, leasegate): the control connection follows the
 *           lock's events (GET /v1/events) and checks that every grant goes to the head
 *           of the server's queue as its waiter_joined/waiter_left events build it, and
 *           that the server's grants are the ones the clients saw, in the same order.
 *           The order acquires were sent in is no FIFO order once the chain runs: two
 *           acquires sent back to back on two connections may be read by the server in
 *           either order (send_order_inversions counts those, for information).
 *           etcd (and leasegate with --fifo-events 0): fifo_by=send_order, with that
 *           caveat.
 *  waiters  one client holds a lock, N clients wait on it; server RSS delta / N.
 *  startup  (leasegate) exec BIN serve --listen 127.0.0.1:P --data FILE; time until
 *           GET /healthz answers 200.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ utilities */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lgbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        fatal("out of memory");
    return q;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct {
    uint32_t *v; /* microseconds */
    size_t n, cap;
} Samples;

typedef struct {
    int *v;
    size_t head, len, cap;
} IdxQueue;

static void samples_add(Samples *s, uint64_t ns)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    uint64_t us = ns / 1000;
    s->v[s->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile in milliseconds; -1 when there are no samples. */
static double samples_pct(Samples *s, double q)
{
    if (!s->n)
        return -1;
    qsort(s->v, s->n, sizeof *s->v, cmp_u32);
    size_t rank = (size_t)(q / 100.0 * (double)s->n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    return s->v[rank - 1] / 1000.0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64(const char *in, char *out)
{
    size_t n = strlen(in), o = 0;
    const unsigned char *p = (const unsigned char *)in;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[o++] = B64[v >> 18 & 63];
        out[o++] = B64[v >> 12 & 63];
        out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = 0;
}

/* Naive JSON field lookups (first occurrence of "field":). Good enough for the known
 * response shapes of leasegate and the etcd gateway. */
static const char *json_find(const char *body, size_t len, const char *field)
{
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\":", field);
    if (pl <= 0 || (size_t)pl >= sizeof pat || len < (size_t)pl)
        return NULL;
    const char *p = memmem(body, len, pat, (size_t)pl);
    return p ? p + pl : NULL;
}

static int json_str(const char *body, size_t len, const char *field, char *out, size_t outlen)
{
    const char *p = json_find(body, len, field);
    if (!p || *p != '"')
        return -1;
    p++;
    const char *end = body + len;
    size_t o = 0;
    while (p < end && *p != '"') {
        if (o + 1 >= outlen)
            return -1;
        out[o++] = *p++;
    }
    out[o] = 0;
    return p < end ? 0 : -1;
}

/* Integer field, bare or quoted (etcd encodes int64 as strings). */
static int json_int(const char *body, size_t len, const char *field, long long *v)
{
    const char *p = json_find(body, len, field);
    if (!p)
        return -1;
    if (*p == '"')
        p++;
    if (!isdigit((unsigned char)*p) && *p != '-')
        return -1;
    *v = strtoll(p, NULL, 10);
    return 0;
}

/* ------------------------------------------------------------------ /proc */

static long g_clk_tck;

static int proc_cpu_ticks(int pid, unsigned long long *ticks)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    /* after ") ": field 3 is state; utime is field 14, stime field 15 */
    unsigned long long ut = 0, st = 0;
    int field = 2;
    char *save = NULL;
    for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        field++;
        if (field == 14)
            ut = strtoull(tok, NULL, 10);
        else if (field == 15) {
            st = strtoull(tok, NULL, 10);
            break;
        }
    }
    if (field != 15)
        return -1;
    *ticks = ut + st;
    return 0;
}

static long proc_rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* ------------------------------------------------------------------ options */

enum { T_LG, T_REDIS, T_ETCD };
enum { M_PAIRS, M_CONTEND, M_WAITERS, M_STARTUP };

static struct {
    int target, mode;
    const char *target_s, *mode_s, *variant;
    int clients;
    double seconds, warmup, timeout;
    char host[64];
    int port;
    int pid;
    char name[200];
    const char *bin, *data;
    long wait_ms;
    int fifo_events; /* contend, leasegate: check FIFO against the server's events (default 1) */
    long count; /* pairs/contend: end after this many (at most --seconds); 0: run --seconds */
    int source_ips; /* > 1: connections come from 127.0.0.1 .. 127.0.0.N in turn (more than one
                     * address's ephemeral ports, for 100,000 waiters) */
} opt = {.clients = 64, .seconds = 5, .warmup = 0.5, .timeout = 120, .host = "127.0.0.1", .variant = "-", .fifo_events = 1};

/* ------------------------------------------------------------------ connections */

enum {
    OP_NONE,
    OP_LG_ACQ, OP_LG_REL, OP_LG_GET, OP_LG_READ, OP_LG_EVENTS, OP_LG_EVENTS_START,
    OP_R_SET, OP_R_DEL,
    OP_E_GRANT, OP_E_TXN, OP_E_DEL, OP_E_LOCK, OP_E_UNLOCK, OP_E_REVOKE, OP_E_COUNT,
};

typedef struct Conn {
    int fd, idx;
    int connected, dead, want_out;
    int op; /* response expected, OP_NONE when idle */
    char *w;
    size_t wlen, woff, wcap;
    char *r;
    size_t rlen, rcap;
    uint64_t t_pair;    /* start of the current pair */
    char lease[128];    /* leasegate lease / redis value / etcd lock key (base64) */
    char elease[32];    /* etcd lease id */
    unsigned long long nreq;
    long grants;
    int held;
} Conn;

typedef struct {
    int status; /* HTTP status; for RESP: '+', '-', ':', '$', '*' */
    const char *body;
    size_t blen;
    long long ival;
    int nil;
} Resp;

static int g_ep;
static Conn *g_conns;
static int g_nconns;
static int g_resp_proto; /* 0 HTTP, 1 RESP */
static struct sockaddr_in g_addr;
static char g_chunk_scratch_dummy;
static char *g_chunk;
static size_t g_chunk_cap;

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void ep_update(Conn *c)
{
    struct epoll_event ev = {.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_open(Conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        fatal("socket: %s (raise ulimit -n?)", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (opt.source_ips > 1) {
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)(c->idx % opt.source_ips));
        if (bind(c->fd, (struct sockaddr *)&src, sizeof src))
            fatal("bind to 127.0.0.%d: %s", 1 + c->idx % opt.source_ips, strerror(errno));
    }
    int rc = connect(c->fd, (struct sockaddr *)&g_addr, sizeof g_addr);
    if (rc == 0)
        c->connected = 1;
    else if (errno != EINPROGRESS)
        fatal("connect %s:%d: %s", opt.host, opt.port, strerror(errno));
    c->want_out = !c->connected;
    struct epoll_event ev = {.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(g_ep, EPOLL_CTL_ADD, c->fd, &ev))
        fatal("epoll_ctl: %s", strerror(errno));
}

static void conn_close(Conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->dead = 1;
    c->op = OP_NONE;
}

static long g_conn_errors;

static void conn_fail(Conn *c, const char *why)
{
    if (!c->dead) {
        g_conn_errors++;
        if (g_conn_errors <= 5)
            fprintf(stderr, "lgbench: connection %d: %s\n", c->idx, why);
    }
    conn_close(c);
}

static void conn_flush(Conn *c)
{
    if (!c->connected || c->dead)
        return;
    while (c->woff < c->wlen) {
        ssize_t n = send(c->fd, c->w + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
        if (n > 0) {
            c->woff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->want_out) {
                c->want_out = 1;
                ep_update(c);
            }
            return;
        }
        conn_fail(c, n < 0 ? strerror(errno) : "send returned 0");
        return;
    }
    c->wlen = c->woff = 0;
    if (c->want_out) {
        c->want_out = 0;
        ep_update(c);
    }
}

static void conn_append(Conn *c, const char *data, size_t n)
{
    if (c->wlen + n > c->wcap) {
        c->wcap = (c->wlen + n) * 2 + 256;
        c->w = xrealloc(c->w, c->wcap);
    }
    memcpy(c->w + c->wlen, data, n);
    c->wlen += n;
}

static void http_send(Conn *c, int op, const char *method, const char *path, const char *body)
{
    char hdr[1024];
    size_t bl = body ? strlen(body) : 0;
    int n;
    if (body)
        n = snprintf(hdr, sizeof hdr,
                     "%s %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, opt.host, opt.port, bl);
    else
        n = snprintf(hdr, sizeof hdr, "%s %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n", method, path, opt.host,
                     opt.port);
    if (n < 0 || (size_t)n >= sizeof hdr)
        fatal("request header too long");
    conn_append(c, hdr, (size_t)n);
    if (bl)
        conn_append(c, body, bl);
    c->op = op;
    c->nreq++;
    conn_flush(c);
}

static void resp_send(Conn *c, int op, int argc, const char *const *argv)
{
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, "*%d\r\n", argc);
    conn_append(c, tmp, (size_t)n);
    for (int i = 0; i < argc; i++) {
        size_t l = strlen(argv[i]);
        n = snprintf(tmp, sizeof tmp, "$%zu\r\n", l);
        conn_append(c, tmp, (size_t)n);
        conn_append(c, argv[i], l);
        conn_append(c, "\r\n", 2);
    }
    c->op = op;
    c->nreq++;
    conn_flush(c);
}

/* HTTP response parser. Returns bytes consumed (>0) when a whole response is in buf,
 * 0 when more is needed, -1 on a protocol error. */
static long parse_http(const char *buf, size_t len, Resp *out)
{
    const char *he = memmem(buf, len, "\r\n\r\n", 4);
    if (!he)
        return len > 65536 ? -1 : 0;
    size_t hlen = (size_t)(he - buf) + 4;
    if (len < 12 || memcmp(buf, "HTTP/1.", 7))
        return -1;
    out->status = atoi(buf + 9);
    long long clen = -1;
    int chunked = 0;
    for (const char *l = memchr(buf, '\n', hlen); l && l < he; l = memchr(l, '\n', (size_t)(he - l))) {
        l++;
        if (!strncasecmp(l, "content-length:", 15))
            clen = strtoll(l + 15, NULL, 10);
        else if (!strncasecmp(l, "transfer-encoding:", 18)) {
            const char *v = l + 18;
            while (*v == ' ')
                v++;
            chunked = !strncasecmp(v, "chunked", 7);
        }
    }
    if (!chunked) {
        if (clen < 0)
            clen = 0; /* all our peers send Content-Length; treat missing as empty */
        if (len < hlen + (size_t)clen)
            return 0;
        out->body = buf + hlen;
        out->blen = (size_t)clen;
        return (long)(hlen + (size_t)clen);
    }
    /* chunked: decode into scratch */
    size_t p = hlen, o = 0;
    for (;;) {
        const char *le = memmem(buf + p, len - p, "\r\n", 2);
        if (!le)
            return 0;
        unsigned long sz = strtoul(buf + p, NULL, 16);
        p = (size_t)(le - buf) + 2;
        if (sz == 0) {
            const char *te = memmem(buf + p, len - p, "\r\n", 2); /* no trailers expected */
            if (!te)
                return 0;
            p = (size_t)(te - buf) + 2;
            break;
        }
        if (len < p + sz + 2)
            return 0;
        if (o + sz > g_chunk_cap) {
            g_chunk_cap = (o + sz) * 2;
            g_chunk = xrealloc(g_chunk, g_chunk_cap);
        }
        memcpy(g_chunk + o, buf + p, sz);
        o += sz;
        p += sz + 2;
    }
    out->body = g_chunk ? g_chunk : &g_chunk_scratch_dummy;
    out->blen = o;
    return (long)p;
}

/* RESP reply parser (one reply; arrays are skipped element by element). */
static long parse_resp(const char *buf, size_t len, Resp *out)
{
    const char *le = memmem(buf, len, "\r\n", 2);
    if (!le)
        return 0;
    size_t line = (size_t)(le - buf) + 2;
    out->status = buf[0];
    out->nil = 0;
    out->body = buf + 1;
    out->blen = (size_t)(le - buf) - 1;
    switch (buf[0]) {
    case '+':
    case '-':
        return (long)line;
    case ':':
        out->ival = strtoll(buf + 1, NULL, 10);
        return (long)line;
    case '$': {
        long long n = strtoll(buf + 1, NULL, 10);
        if (n < 0) {
            out->nil = 1;
            return (long)line;
        }
        if (len < line + (size_t)n + 2)
            return 0;
        out->body = buf + line;
        out->blen = (size_t)n;
        return (long)(line + (size_t)n + 2);
    }
    case '*': {
        long long n = strtoll(buf + 1, NULL, 10);
        size_t p = line;
        for (long long i = 0; i < n; i++) {
            Resp sub;
            long k = parse_resp(buf + p, len - p, &sub);
            if (k <= 0)
                return k;
            p += (size_t)k;
        }
        out->nil = n < 0;
        return (long)p;
    }
    default:
        return -1;
    }
}

/* ------------------------------------------------------------------ blocking helpers */

/* One request/response on a fresh blocking connection with a timeout. Returns status
 * (HTTP) or RESP type char, -1 on failure. Body copied to out (NUL-terminated). */
static int sync_call(const char *req, size_t reqlen, int resp_proto, char *out, size_t outlen, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&g_addr, sizeof g_addr)) {
        close(fd);
        return -1;
    }
    size_t off = 0;
    while (off < reqlen) {
        ssize_t n = send(fd, req + off, reqlen - off, MSG_NOSIGNAL);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    size_t cap = 65536, len = 0;
    char *buf = xrealloc(NULL, cap);
    int result = -1;
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        Resp r = {0};
        long k = resp_proto ? parse_resp(buf, len, &r) : parse_http(buf, len, &r);
        if (k < 0)
            break;
        if (k > 0) {
            result = r.status;
            if (out && outlen) {
                size_t m = r.blen < outlen - 1 ? r.blen : outlen - 1;
                memcpy(out, r.body, m);
                out[m] = 0;
            }
            break;
        }
    }
    free(buf);
    close(fd);
    return result;
}

static int sync_http(const char *method, const char *path, const char *body, char *out, size_t outlen,
                     int timeout_ms)
{
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, opt.host, opt.port, body ? strlen(body) : 0, body ? body : "");
    if (n < 0 || (size_t)n >= sizeof req)
        return -1;
    return sync_call(req, (size_t)n, 0, out, outlen, timeout_ms);
}

/* ------------------------------------------------------------------ run state */

static struct {
    int phase; /* 0 setup, 1 running (warmup or measuring), 2 done */
    int measuring;
    uint64_t t_measure0, t_measure1;
    int ready;          /* clients done with their setup */
    long pairs;         /* completed in the measuring window */
    long grants;        /* contend: grants in window */
    long attempts;      /* redis contend: SET attempts in window */
    long errors;        /* unexpected answers */
    Samples lat, handoff;
    /* contend */
    uint64_t t_release_sent;
    long long last_token;
    long token_violations, fifo_violations, fifo_checked;
    long send_inversions; /* grants out of the order acquires were sent in (fifo_grant) */
    IdxQueue sent;      /* client idx in the order their acquires were sent */
    /* leasegate: its events followed on the control connection (fifo_event) */
    int follow_events;  /* 1 following, 0 not (--fifo-events 0, or not leasegate) */
    int events_lost;    /* the events could not be followed to the end: no FIFO verdict */
    int events_polling; /* an events request is out on the control connection */
    int events_caught_up; /* after the run: an answer brought nothing new */
    long long events_after;
    IdxQueue server_q;  /* the server's queue, from its events */
    IdxQueue seen;      /* grants the clients saw, not yet matched with the server's */
    IdxQueue server_grants; /* the server's grants, not yet matched with the clients' */
    int ramp_i;         /* next client to enqueue during the ramp (-1 when done) */
    int ramp_wait;      /* control conn is polling for ramp_i */
    char sha[64];
    char name_b64[512], prefix_b64[512], rangeend_b64[512];
    long long ctl_count;
    int holder;         /* who currently holds (contend), -1 none */
    long self_regrants;
} S = {.holder = -1};

static long long g_ttl_s = 60;

/* A queue of client indexes (a ring): the order acquires were sent in, or
 * the server's own queue as its events tell it. */
static void q_push(IdxQueue *q, int idx)
{
    if (q->len == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 128;
        int *nv = xrealloc(NULL, ncap * sizeof *nv);
        for (size_t i = 0; i < q->len; i++)
            nv[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = nv;
        q->head = 0;
        q->cap = ncap;
    }
    q->v[(q->head + q->len++) % q->cap] = idx;
}

/* Takes idx out of q wherever it is; its position (0: the head), or -1. */
static long q_take(IdxQueue *q, int idx)
{
    for (size_t i = 0; i < q->len; i++) {
        if (q->v[(q->head + i) % q->cap] != idx)
            continue;
        for (size_t j = i; j + 1 < q->len; j++)
            q->v[(q->head + j) % q->cap] = q->v[(q->head + j + 1) % q->cap];
        q->len--;
        return (long)i;
    }
    return -1;
}

static void fifo_push(int idx) { q_push(&S.sent, idx); }

/* The clients' and the server's sequences of grants, matched as they come:
 * the clients see grants one at a time (each releases before the next can
 * be granted), so both must be the same sequence. */
static void grant_seen(IdxQueue *mine, IdxQueue *other, int idx, const char *who)
{
    if (other->len == 0) {
        q_push(mine, idx);
        return;
    }
    int expected = other->v[other->head];
    q_take(other, expected);
    if (expected != idx && ++S.fifo_violations <= 5)
        fprintf(stderr, "lgbench: %s saw a grant to %d where the other side's next was to %d\n", who, idx, expected);
}

/* A grant for idx arrived: compared with the order the acquires were sent
 * in. For leasegate that is not the FIFO check: two acquires sent back to
 * back on two connections may reach the server in either order (both
 * sockets readable in the same turn of its loop, read in its own connection
 * order), so an inversion here says nothing about the server, and the FIFO
 * check is the server's own order (fifo_event). etcd has no such events:
 * there the send order is all there is, with that caveat. */
static void fifo_grant(int idx)
{
    long at = q_take(&S.sent, idx);
    if (at != 0)
        S.send_inversions++;
    if (S.follow_events) {
        grant_seen(&S.seen, &S.server_grants, idx, "the clients");
        return;
    }
    if (at != 0 && ++S.fifo_violations <= 5)
        fprintf(stderr, "lgbench: FIFO violation (send order): grant to client %d at place %ld\n", idx, at);
    S.fifo_checked++;
}

/* One event of the server's about the contended lock, in the server's own
 * order (GET /v1/events: published in commit order, each batch's in the
 * order its changes were made). Its queue is rebuilt from waiter_joined and
 * waiter_left; a granted event must grant the head of that queue, or a
 * newcomer while the queue is empty, and be the grant the clients saw. */
static void fifo_event(const char *kind, int idx)
{
    if (!strcmp(kind, "waiter_joined")) {
        q_push(&S.server_q, idx);
    } else if (!strcmp(kind, "waiter_left")) {
        q_take(&S.server_q, idx);
    } else if (!strcmp(kind, "granted")) {
        long at = q_take(&S.server_q, idx);
        if ((at > 0 || (at < 0 && S.server_q.len > 0)) && ++S.fifo_violations <= 5)
            fprintf(stderr, "lgbench: FIFO violation: the server granted client %d, %s %ld of its queue\n", idx,
                    at < 0 ? "not queued, with waiters: place" : "at place", at);
        grant_seen(&S.server_grants, &S.seen, idx, "the server");
        S.fifo_checked++;
    }
}

static int running(void) { return S.phase == 1; }

static void bad_answer(Conn *c, const Resp *r, const char *what)
{
    S.errors++;
    if (S.errors <= 5) {
        int bl = (int)(r->blen > 300 ? 300 : r->blen);
        fprintf(stderr, "lgbench: client %d: unexpected answer to %s: %d %.*s\n", c->idx, what, r->status, bl,
                r->body ? r->body : "");
    }
}

/* ------------------------------------------------------------------ request makers */

static bool lg_semaphore(void) { return opt.target == T_LG && !strcmp(opt.variant, "semaphore"); }
static bool lg_readlock(void) { return opt.target == T_LG && !strcmp(opt.variant, "readlock"); }

static void lg_path(char *out, size_t n, const char *name, const char *action)
{
    snprintf(out, n, "/v1/%s/%s/%s", lg_semaphore() ? "semaphores" : "locks", name, action);
}

static void lg_acquire(Conn *c, const char *name, long wait_ms, long ttl_ms)
{
    char path[512], body[256], extra[64] = "";
    lg_path(path, sizeof path, name, "acquire");
    if (lg_semaphore())
        snprintf(extra, sizeof extra, ",\"limit\":%d", opt.clients);
    else if (lg_readlock())
        snprintf(extra, sizeof extra, ",\"mode\":\"read\"");
    snprintf(body, sizeof body, "{\"owner\":\"lgbench-%d\",\"ttl_ms\":%ld,\"wait_ms\":%ld%s}", c->idx, ttl_ms,
             wait_ms, extra);
    http_send(c, OP_LG_ACQ, "POST", path, body);
}

static void lg_release(Conn *c, const char *name)
{
    char path[512], body[256];
    lg_path(path, sizeof path, name, "release");
    snprintf(body, sizeof body, "{\"lease\":\"%s\"}", c->lease);
    http_send(c, OP_LG_REL, "POST", path, body);
}

static void conn_lock_name(const Conn *c, char *out, size_t n)
{
    if (opt.mode == M_PAIRS && !lg_readlock() && !lg_semaphore())
        snprintf(out, n, "%s-%d", opt.name, c->idx);
    else
        snprintf(out, n, "%s", opt.name);
}

static void r_set(Conn *c)
{
    char key[256], val[64];
    conn_lock_name(c, key, sizeof key);
    snprintf(val, sizeof val, "%d-%llu", c->idx, c->nreq);
    snprintf(c->lease, sizeof c->lease, "%s", val);
    const char *argv[] = {"SET", key, val, "NX", "PX", "30000"};
    resp_send(c, OP_R_SET, 6, argv);
}

static void r_release(Conn *c)
{
    char key[256];
    conn_lock_name(c, key, sizeof key);
    const char *argv[] = {"EVALSHA", S.sha, "1", key, c->lease};
    resp_send(c, OP_R_DEL, 5, argv);
}

static void e_grant(Conn *c)
{
    char body[64];
    snprintf(body, sizeof body, "{\"TTL\":%lld}", g_ttl_s);
    http_send(c, OP_E_GRANT, "POST", "/v3/lease/grant", body);
}

static void e_revoke(Conn *c)
{
    char body[96];
    snprintf(body, sizeof body, "{\"ID\":\"%s\"}", c->elease);
    http_send(c, OP_E_REVOKE, "POST", "/v3/lease/revoke", body);
}

static void e_key_b64(const Conn *c, char *out)
{
    char key[256];
    conn_lock_name(c, key, sizeof key);
    b64(key, out);
}

static void e_txn(Conn *c)
{
    char k[512], body[1536];
    e_key_b64(c, k);
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"create_revision\":\"0\"}],"
             "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%s\"}}]}",
             k, k, "bGdiZW5jaA==", c->elease);
    http_send(c, OP_E_TXN, "POST", "/v3/kv/txn", body);
}

static void e_del(Conn *c)
{
    char k[512], body[640];
    e_key_b64(c, k);
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", k);
    http_send(c, OP_E_DEL, "POST", "/v3/kv/deleterange", body);
}

static void e_lock(Conn *c)
{
    char k[512], body[700];
    e_key_b64(c, k);
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"lease\":\"%s\"}", k, c->elease);
    http_send(c, OP_E_LOCK, "POST", "/v3/lock/lock", body);
}

static void e_unlock(Conn *c)
{
    char body[400];
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", c->lease);
    http_send(c, OP_E_UNLOCK, "POST", "/v3/lock/unlock", body);
}

static void ctl_poll(Conn *ctl)
{
    if (opt.target == T_LG) {
        char path[512];
        snprintf(path, sizeof path, "/v1/locks/%s", opt.name);
        http_send(ctl, OP_LG_GET, "GET", path, NULL);
    } else {
        char body[1400];
        snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}", S.prefix_b64,
                 S.rangeend_b64);
        http_send(ctl, OP_E_COUNT, "POST", "/v3/kv/range", body);
    }
}

/* The contended lock's events after S.events_after: a long-poll while the
 * run goes on, then at once until one brings nothing new. */
static void events_poll(Conn *ctl)
{
    char path[600];
    snprintf(path, sizeof path, "/v1/events?after=%lld&prefix=%s&limit=1000&wait_ms=%d", S.events_after, opt.name,
             S.phase == 2 ? 20 : 200);
    S.events_polling = 1;
    http_send(ctl, OP_LG_EVENTS, "GET", path, NULL);
}

/* An answer of GET /v1/events: each event's kind and client, in order. */
static void on_events(Conn *ctl, const Resp *r)
{
    S.events_polling = 0;
    long long next = 0;
    if (r->status != 200 || json_int(r->body, r->blen, "next", &next)) {
        if (!S.events_lost)
            fprintf(stderr, "lgbench: events not followed (HTTP %d): no FIFO verdict\n", r->status);
        S.events_lost = 1;
        return;
    }
    const char *p = r->body, *end = r->body + r->blen;
    int n = 0;
    static const char KIND[] = "\"kind\":\"", OWNER[] = "\"owner\":\"lgbench-";
    while ((p = memmem(p, (size_t)(end - p), KIND, sizeof KIND - 1))) {
        p += sizeof KIND - 1;
        char kind[32];
        size_t k = 0;
        while (p < end && *p != '"' && k + 1 < sizeof kind)
            kind[k++] = *p++;
        kind[k] = 0;
        const char *o = memmem(p, (size_t)(end - p), OWNER, sizeof OWNER - 1);
        if (!o) {
            S.events_lost = 1;
            return;
        }
        p = o + sizeof OWNER - 1;
        fifo_event(kind, (int)strtol(p, NULL, 10));
        n++;
    }
    S.events_after = next;
    if (S.phase == 2 && n == 0)
        S.events_caught_up = 1;
    else
        events_poll(ctl);
}

/* ------------------------------------------------------------------ scenario logic */

static int g_nclients; /* clients are conns 0..g_nclients-1; conn g_nclients is control */
static Conn *g_ctl;

/* start one pair / one contend cycle for client c */
static void client_start(Conn *c)
{
    if (c->dead)
        return;
    c->t_pair = now_ns();
    switch (opt.target) {
    case T_LG:
        if (opt.mode == M_PAIRS && !strcmp(opt.variant, "read")) {
            char name[256], path[512];
            conn_lock_name(c, name, sizeof name);
            snprintf(path, sizeof path, "/v1/locks/%s", name);
            http_send(c, OP_LG_READ, "GET", path, NULL);
        } else if (opt.mode == M_PAIRS) {
            char name[256];
            conn_lock_name(c, name, sizeof name);
            lg_acquire(c, name, 0, 30000);
        } else {
            fifo_push(c->idx);
            lg_acquire(c, opt.name, opt.wait_ms, 30000);
        }
        break;
    case T_REDIS:
        r_set(c);
        break;
    case T_ETCD:
        if (opt.mode == M_PAIRS && !strcmp(opt.variant, "txn"))
            e_txn(c);
        else if (opt.mode == M_PAIRS && !strcmp(opt.variant, "lockkeep"))
            e_lock(c);
        else if (opt.mode == M_PAIRS)
            e_grant(c);
        else {
            fifo_push(c->idx);
            e_lock(c);
        }
        break;
    }
}

static void pair_done(Conn *c)
{
    if (S.measuring) {
        S.pairs++;
        samples_add(&S.lat, now_ns() - c->t_pair);
    }
    if (running())
        client_start(c);
}

/* contend: client c was granted the lock */
static void contend_granted(Conn *c, long long token)
{
    uint64_t t = now_ns();
    if (S.holder >= 0 && S.holder != c->idx) {
        S.errors++;
        fprintf(stderr, "lgbench: MUTUAL EXCLUSION: client %d granted while %d holds\n", c->idx, S.holder);
    }
    S.holder = c->idx;
    c->held = 1;
    if (opt.target != T_REDIS) {
        fifo_grant(c->idx);
        if (token <= S.last_token) {
            S.token_violations++;
            if (S.token_violations <= 5)
                fprintf(stderr, "lgbench: token went backwards: %lld after %lld\n", token, S.last_token);
        }
        S.last_token = token;
    }
    if (S.measuring) {
        S.grants++;
        c->grants++;
        if (S.t_release_sent)
            samples_add(&S.handoff, t - S.t_release_sent);
    }
    S.t_release_sent = 0;
    if (!running())
        return; /* ramp: hold the lock until the queue is built; after the end: just stop */
    S.t_release_sent = now_ns();
    S.holder = -1;
    c->held = 0;
    if (opt.target == T_LG)
        lg_release(c, opt.name);
    else if (opt.target == T_ETCD)
        e_unlock(c);
    else
        r_release(c);
}

static void ramp_step(void);

static void on_ctl_answer(Conn *c, const Resp *r)
{
    long long n = 0;
    if (r->status != 200) {
        bad_answer(c, r, "poll");
        return;
    }
    if (opt.target == T_LG)
        json_int(r->body, r->blen, "waiters", &n);
    else if (json_int(r->body, r->blen, "count", &n))
        n = 0; /* proto3 JSON omits zero */
    S.ctl_count = n;
    ramp_step();
}

static void on_answer(Conn *c, const Resp *r)
{
    int op = c->op;
    c->op = OP_NONE;
    if (c == g_ctl && op == OP_LG_EVENTS_START) {
        /* where the server's events are now ("latest"; 410 too_old says it too) */
        S.events_polling = 0;
        if ((r->status != 200 && r->status != 410) || json_int(r->body, r->blen, "latest", &S.events_after))
            S.events_lost = 1;
        return;
    }
    if (c == g_ctl && op == OP_LG_EVENTS) {
        on_events(c, r);
        return;
    }
    if (c == g_ctl) {
        on_ctl_answer(c, r);
        return;
    }
    switch (op) {
    case OP_LG_ACQ:
        if (r->status != 200 || json_str(r->body, r->blen, "lease", c->lease, sizeof c->lease)) {
            bad_answer(c, r, "acquire");
            if (running() && opt.mode == M_PAIRS)
                client_start(c);
            else if (opt.mode != M_PAIRS)
                conn_close(c); /* a waiter/holder that was refused is out of the game */
            return;
        }
        if (opt.mode == M_PAIRS) {
            char name[256];
            conn_lock_name(c, name, sizeof name);
            lg_release(c, name);
        } else if (opt.mode == M_CONTEND) {
            long long tok = 0;
            json_int(r->body, r->blen, "token", &tok);
            contend_granted(c, tok);
        } else {
            c->held = 1; /* waiters: the holder, or a woken waiter */
        }
        return;
    case OP_LG_READ:
        if (r->status != 200)
            bad_answer(c, r, "read");
        pair_done(c);
        return;
    case OP_LG_REL:
        if (r->status != 200) {
            bad_answer(c, r, "release");
            if (running())
                client_start(c);
            return;
        }
        if (opt.mode == M_PAIRS)
            pair_done(c);
        else if (running())
            client_start(c);
        return;
    case OP_R_SET:
        if (S.measuring)
            S.attempts++;
        if (r->status == '+') {
            if (opt.mode == M_PAIRS)
                r_release(c);
            else
                contend_granted(c, 0);
        } else if (r->status == '$' && r->nil) {
            if (opt.mode == M_PAIRS)
                bad_answer(c, r, "SET NX (distinct key was taken)");
            if (running())
                r_set(c); /* spin */
        } else {
            bad_answer(c, r, "SET");
            if (running())
                r_set(c);
        }
        return;
    case OP_R_DEL:
        if (r->status != ':' || r->ival != 1)
            bad_answer(c, r, "EVALSHA release");
        if (opt.mode == M_PAIRS)
            pair_done(c);
        else if (running())
            r_set(c);
        return;
    case OP_E_GRANT:
        if (r->status != 200 || json_str(r->body, r->blen, "ID", c->elease, sizeof c->elease)) {
            bad_answer(c, r, "lease grant");
            conn_close(c);
            return;
        }
        if (opt.mode == M_PAIRS && !strcmp(opt.variant, "lock")) {
            e_lock(c); /* lock-API pair: grant -> lock -> unlock -> revoke */
            return;
        }
        S.ready++; /* setup done for this client */
        if (opt.mode == M_WAITERS && c->idx > 0)
            e_lock(c);
        return;
    case OP_E_TXN:
        if (r->status != 200 || !json_find(r->body, r->blen, "succeeded")) {
            bad_answer(c, r, "txn put-if-absent");
            if (running())
                client_start(c);
            return;
        }
        e_del(c);
        return;
    case OP_E_DEL:
        if (r->status != 200)
            bad_answer(c, r, "deleterange");
        pair_done(c);
        return;
    case OP_E_LOCK:
        if (r->status != 200 || json_str(r->body, r->blen, "key", c->lease, sizeof c->lease)) {
            bad_answer(c, r, "lock");
            conn_close(c);
            return;
        }
        if (opt.mode == M_PAIRS)
            e_unlock(c);
        else if (opt.mode == M_CONTEND) {
            long long rev = 0;
            json_int(r->body, r->blen, "revision", &rev);
            contend_granted(c, rev);
        } else
            c->held = 1;
        return;
    case OP_E_UNLOCK:
        if (r->status != 200)
            bad_answer(c, r, "unlock");
        if (opt.mode == M_PAIRS && !strcmp(opt.variant, "lockkeep"))
            pair_done(c); /* the lease is kept for the next pair */
        else if (opt.mode == M_PAIRS)
            e_revoke(c);
        else if (running())
            client_start(c);
        return;
    case OP_E_REVOKE:
        if (r->status != 200)
            bad_answer(c, r, "lease revoke");
        pair_done(c);
        return;
    default:
        bad_answer(c, r, "(nothing outstanding)");
    }
}

static void conn_read(Conn *c)
{
    for (;;) {
        if (c->rcap - c->rlen < 4096) {
            c->rcap = c->rcap ? c->rcap * 2 : 8192;
            c->r = xrealloc(c->r, c->rcap);
        }
        ssize_t n = recv(c->fd, c->r + c->rlen, c->rcap - c->rlen, 0);
        if (n > 0) {
            c->rlen += (size_t)n;
            if ((size_t)n < c->rcap - c->rlen + (size_t)n)
                break; /* short read: socket drained */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        conn_fail(c, n == 0 ? "closed by server" : strerror(errno));
        return;
    }
    size_t off = 0;
    while (off < c->rlen && !c->dead) {
        Resp r = {0};
        long k = g_resp_proto ? parse_resp(c->r + off, c->rlen - off, &r) : parse_http(c->r + off, c->rlen - off, &r);
        if (k < 0) {
            conn_fail(c, "protocol error");
            return;
        }
        if (k == 0)
            break;
        off += (size_t)k;
        on_answer(c, &r);
    }
    if (c->dead)
        return;
    memmove(c->r, c->r + off, c->rlen - off);
    c->rlen -= off;
}

static void loop_once(int timeout_ms)
{
    struct epoll_event evs[256];
    int n = epoll_wait(g_ep, evs, 256, timeout_ms);
    for (int i = 0; i < n; i++) {
        Conn *c = evs[i].data.ptr;
        if (c->dead)
            continue;
        if (!c->connected && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
            if (err) {
                conn_fail(c, strerror(err));
                continue;
            }
            c->connected = 1;
        }
        if (evs[i].events & EPOLLOUT)
            conn_flush(c);
        if (!c->dead && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
            conn_read(c);
    }
}

/* run the loop until cond() or the deadline; returns 0 when cond() became true */
static int loop_until(int (*cond)(void), uint64_t deadline)
{
    while (!cond()) {
        uint64_t t = now_ns();
        if (t >= deadline)
            return -1;
        uint64_t left_ms = (deadline - t) / 1000000 + 1;
        loop_once(left_ms > 50 ? 50 : (int)left_ms);
    }
    return 0;
}

static int cond_never(void) { return 0; }
static int cond_counted(void) { return opt.count > 0 && S.pairs + S.grants >= opt.count; }
static int cond_all_ready(void) { return S.ready >= g_nclients; }
static int cond_one_ready(void) { return S.ready >= 1; }
static int cond_ramp_done(void) { return S.ramp_i < 0; }
static int cond_events_idle(void) { return !S.events_polling || g_ctl->dead; }
/* After the run: the server's events read up to the last one, and every
 * grant matched (the last grant's answer may still be on its way). */
static int cond_events_done(void)
{
    if (g_ctl->dead) {
        S.events_lost = 1;
        return 1;
    }
    if (S.events_lost)
        return 1;
    if (!S.events_caught_up)
        return 0;
    if (S.seen.len == 0 && S.server_grants.len == 0)
        return 1;
    if (S.seen.len && !S.events_polling) {
        /* a grant the clients saw whose event came after the last read */
        S.events_caught_up = 0;
        events_poll(g_ctl);
    }
    return 0;
}

static int g_nconnected_target;
static int cond_all_connected(void)
{
    for (int i = 0; i < g_nconnected_target; i++)
        if (!g_conns[i].connected && !g_conns[i].dead)
            return 0;
    return 1;
}

/* ------------------------------------------------------------------ ramp (contend) */

static void ramp_step(void)
{
    if (S.ramp_i < 0)
        return;
    if (S.ramp_wait) {
        /* control answered: S.ctl_count is the queue length (lg: waiters; etcd: keys incl. holder) */
        long long want = opt.target == T_LG ? S.ramp_i : S.ramp_i + 1;
        if (S.ctl_count < want) {
            ctl_poll(g_ctl);
            return;
        }
        S.ramp_wait = 0;
        S.ramp_i++;
    }
    if (S.ramp_i >= g_nclients) {
        S.ramp_i = -1;
        return;
    }
    client_start(&g_conns[S.ramp_i]);
    S.ramp_wait = 1;
    ctl_poll(g_ctl);
}

static int cond_holder_granted(void) { return g_conns[0].held || g_conns[0].dead; }

/* ------------------------------------------------------------------ output */

static char g_line[4096];
static size_t g_linelen;

static void out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (g_linelen)
        g_line[g_linelen++] = ' ';
    int n = vsnprintf(g_line + g_linelen, sizeof g_line - g_linelen, fmt, ap);
    va_end(ap);
    if (n > 0)
        g_linelen += (size_t)n;
    if (g_linelen >= sizeof g_line)
        g_linelen = sizeof g_line - 1;
}

static void out_ms(const char *key, double v)
{
    if (v < 0)
        out("%s=-", key);
    else
        out("%s=%.3f", key, v);
}

static void out_head(void)
{
    out("target=%s", opt.target_s);
    out("mode=%s", opt.mode_s);
    out("variant=%s", opt.variant);
    out("clients=%d", opt.clients);
}

/* ------------------------------------------------------------------ setup helpers */

static void connect_clients(int n, int with_ctl)
{
    g_nclients = n;
    g_nconns = n + (with_ctl ? 1 : 0);
    g_conns = calloc((size_t)g_nconns, sizeof *g_conns);
    if (!g_conns)
        fatal("out of memory");
    for (int i = 0; i < g_nconns; i++) {
        g_conns[i].idx = i;
        g_conns[i].fd = -1;
        conn_open(&g_conns[i]);
    }
    g_ctl = with_ctl ? &g_conns[n] : NULL;
    g_nconnected_target = g_nconns;
    if (loop_until(cond_all_connected, now_ns() + (uint64_t)(opt.timeout * 1e9)))
        fatal("timed out connecting");
}

static void redis_setup(void)
{
    static const char script[] =
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    char req[512];
    int n = snprintf(req, sizeof req, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%zu\r\n%s\r\n", strlen(script), script);
    int st = sync_call(req, (size_t)n, 1, S.sha, sizeof S.sha, 5000);
    if (st != '$' || strlen(S.sha) != 40)
        fatal("redis SCRIPT LOAD failed (%d)", st);
}

struct cpu_snap {
    unsigned long long ticks;
    uint64_t t;
    struct rusage self;
};

static void cpu_snap(struct cpu_snap *s)
{
    s->ticks = 0;
    if (opt.pid > 0)
        proc_cpu_ticks(opt.pid, &s->ticks);
    s->t = now_ns();
    getrusage(RUSAGE_SELF, &s->self);
}

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + tv.tv_usec / 1e6; }

static void out_cpu(const struct cpu_snap *a, const struct cpu_snap *b)
{
    double wall = (double)(b->t - a->t) / 1e9;
    if (opt.pid > 0 && wall > 0)
        out("server_cpu_pct=%.0f", 100.0 * (double)(b->ticks - a->ticks) / (double)g_clk_tck / wall);
    else
        out("server_cpu_pct=-");
    double self = tv_s(b->self.ru_utime) + tv_s(b->self.ru_stime) - tv_s(a->self.ru_utime) - tv_s(a->self.ru_stime);
    out("client_cpu_pct=%.0f", wall > 0 ? 100.0 * self / wall : 0);
    out("server_rss_kb=%ld", opt.pid > 0 ? proc_rss_kb(opt.pid) : -1L);
}

/* ------------------------------------------------------------------ modes */

static void run_pairs_or_contend(void)
{
    int contend = opt.mode == M_CONTEND;
    int need_ctl = contend && opt.target != T_REDIS;
    connect_clients(opt.clients, need_ctl);
    if (opt.target == T_REDIS)
        redis_setup();
    uint64_t setup_deadline = now_ns() + (uint64_t)(opt.timeout * 1e9);

    /* per-client setup: etcd leases (txn and lockkeep pairs and contend reuse one lease per client) */
    if (opt.target == T_ETCD && (contend || !strcmp(opt.variant, "txn") || !strcmp(opt.variant, "lockkeep"))) {
        for (int i = 0; i < g_nclients; i++)
            e_grant(&g_conns[i]);
        if (loop_until(cond_all_ready, setup_deadline))
            fatal("timed out granting etcd leases");
    }
    S.follow_events = need_ctl && opt.target == T_LG && opt.fifo_events;
    if (S.follow_events) {
        /* the events from now on: those of the lock (a fresh name) are all to come */
        S.events_after = 0;
        S.events_polling = 1;
        char path[600];
        snprintf(path, sizeof path, "/v1/events?after=0&limit=1&prefix=%s", opt.name);
        http_send(g_ctl, OP_LG_EVENTS_START, "GET", path, NULL);
        if (loop_until(cond_events_idle, setup_deadline) || S.events_lost)
            fatal("cannot follow the server's events (--fifo-events 0 to check FIFO by send order only)");
    }
    if (need_ctl) {
        /* ramp: client 0 takes the lock and holds it, then 1..N-1 queue one at a time */
        S.phase = 0;
        client_start(&g_conns[0]);
        if (loop_until(cond_holder_granted, setup_deadline) || g_conns[0].dead)
            fatal("ramp: client 0 never got the lock");
        S.ramp_i = 1;
        ramp_step();
        if (loop_until(cond_ramp_done, setup_deadline))
            fatal("ramp: queue not built in time (%lld queued)", S.ctl_count);
        if (S.follow_events)
            events_poll(g_ctl);
    }

    S.phase = 1;
    uint64_t t0 = now_ns();
    uint64_t tm0 = t0 + (uint64_t)(opt.warmup * 1e9);
    uint64_t tm1 = tm0 + (uint64_t)(opt.seconds * 1e9);
    if (need_ctl) {
        /* the holder releases: the chain starts */
        Conn *h = &g_conns[0];
        S.t_release_sent = now_ns();
        S.holder = -1;
        h->held = 0;
        if (opt.target == T_LG)
            lg_release(h, opt.name);
        else
            e_unlock(h);
    } else {
        for (int i = 0; i < g_nclients; i++)
            client_start(&g_conns[i]);
    }
    loop_until(cond_never, tm0);
    struct cpu_snap a, b;
    cpu_snap(&a);
    S.measuring = 1;
    loop_until(cond_counted, tm1);
    S.measuring = 0;
    cpu_snap(&b);
    S.phase = 2;
    double secs = (double)(b.t - a.t) / 1e9;
    if (S.follow_events && loop_until(cond_events_done, now_ns() + (uint64_t)(opt.timeout * 1e9)))
        S.events_lost = 1;

    out_head();
    out("seconds=%.2f", secs);
    if (!contend) {
        out("pairs=%ld", S.pairs);
        out("pairs_per_s=%.0f", S.pairs / secs);
        out_ms("p50_ms", samples_pct(&S.lat, 50));
        out_ms("p99_ms", samples_pct(&S.lat, 99));
    } else {
        out("grants=%ld", S.grants);
        out("grants_per_s=%.0f", S.grants / secs);
        out_ms("handoff_p50_ms", samples_pct(&S.handoff, 50));
        out_ms("handoff_p99_ms", samples_pct(&S.handoff, 99));
        if (opt.target == T_REDIS) {
            out("fifo_ok=-");
            out("attempts_per_grant=%.1f", S.grants ? (double)S.attempts / (double)S.grants : 0.0);
        } else {
            if (S.follow_events && S.events_lost)
                out("fifo_ok=-");
            else
                out("fifo_ok=%d", S.fifo_violations == 0 && S.fifo_checked > 0);
            out("fifo_violations=%ld", S.fifo_violations);
            out("fifo_by=%s", S.follow_events ? "server_events" : "send_order");
            out("fifo_checked=%ld", S.fifo_checked);
            out("send_order_inversions=%ld", S.send_inversions);
            out("token_ok=%d", S.token_violations == 0);
        }
        long mn = -1, mx = 0;
        for (int i = 0; i < g_nclients; i++) {
            long gi = g_conns[i].grants;
            if (mn < 0 || gi < mn)
                mn = gi;
            if (gi > mx)
                mx = gi;
        }
        out("grants_min=%ld", mn < 0 ? 0 : mn);
        out("grants_max=%ld", mx);
    }
    out("errors=%ld", S.errors + g_conn_errors);
    out_cpu(&a, &b);
}

static int cond_waiters_sent(void)
{
    for (int i = 1; i < g_nconnected_target; i++) {
        Conn *c = &g_conns[i];
        if (c->dead)
            continue;
        if (!c->connected || c->wlen || (opt.target == T_ETCD && c->op == OP_E_GRANT))
            return 0;
    }
    return 1;
}

/* poll the server's waiter count (blocking, on a fresh connection) until it is `want` */
static long long poll_queue(long long want, double secs)
{
    uint64_t dl = now_ns() + (uint64_t)(secs * 1e9);
    char body[4096], path[512];
    long long n = -1;
    do {
        /* keep the event loop serviced so that queued writes drain */
        loop_once(0);
        if (opt.target == T_LG) {
            snprintf(path, sizeof path, "/v1/locks/%s", opt.name);
            if (sync_http("GET", path, NULL, body, sizeof body, 5000) == 200)
                json_int(body, strlen(body), "waiters", &n);
        } else {
            char rq[1400];
            snprintf(rq, sizeof rq, "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}", S.prefix_b64,
                     S.rangeend_b64);
            if (sync_http("POST", "/v3/kv/range", rq, body, sizeof body, 5000) == 200) {
                if (json_int(body, strlen(body), "count", &n))
                    n = 0;
                n -= 1; /* the holder's key */
            }
        }
        if (n == want)
            return n;
        for (int i = 0; i < 20; i++)
            loop_once(5);
    } while (now_ns() < dl);
    return n;
}

static void run_waiters(void)
{
    if (opt.target == T_REDIS)
        fatal("waiters mode: redis has no waiting primitive (clients spin)");
    int n = opt.clients;
    g_nclients = n + 1;
    g_nconns = n + 1;
    g_conns = calloc((size_t)g_nconns, sizeof *g_conns);
    if (!g_conns)
        fatal("out of memory");
    for (int i = 0; i < g_nconns; i++) {
        g_conns[i].idx = i;
        g_conns[i].fd = -1;
    }
    uint64_t dl = now_ns() + (uint64_t)(opt.timeout * 1e9);
    /* holder */
    conn_open(&g_conns[0]);
    g_nconnected_target = 1;
    if (loop_until(cond_all_connected, dl))
        fatal("holder: connect timed out");
    if (opt.target == T_LG)
        lg_acquire(&g_conns[0], opt.name, 0, 3600000);
    else {
        e_grant(&g_conns[0]);
        if (loop_until(cond_one_ready, dl))
            fatal("holder: lease grant timed out");
        e_lock(&g_conns[0]);
    }
    if (loop_until(cond_holder_granted, dl) || g_conns[0].dead)
        fatal("holder never got the lock");
    sleep_ms(300);
    long rss0 = opt.pid > 0 ? proc_rss_kb(opt.pid) : -1;
    uint64_t t_open = now_ns();
    /* open waiters in batches, so the listen backlog never overflows */
    const int batch = 200;
    for (int i = 1; i <= n; i += batch) {
        int end = i + batch - 1 < n ? i + batch - 1 : n;
        for (int j = i; j <= end; j++)
            conn_open(&g_conns[j]);
        g_nconnected_target = end + 1;
        if (loop_until(cond_all_connected, dl))
            fatal("timed out connecting waiters (%d)", end);
        for (int j = i; j <= end; j++) {
            if (g_conns[j].dead)
                continue;
            if (opt.target == T_LG)
                lg_acquire(&g_conns[j], opt.name, opt.wait_ms, 30000);
            else
                e_grant(&g_conns[j]); /* -> lock on answer */
        }
        if (loop_until(cond_waiters_sent, dl))
            fatal("timed out sending waiters (%d)", end);
    }
    long long queued = poll_queue(n, opt.timeout);
    double setup_s = (double)(now_ns() - t_open) / 1e9;
    /* let the allocator settle, then measure */
    for (int i = 0; i < 100; i++)
        loop_once(5);
    long rss1 = opt.pid > 0 ? proc_rss_kb(opt.pid) : -1;
    int dead = 0;
    for (int i = 1; i <= n; i++)
        dead += g_conns[i].dead || g_conns[i].held;
    /* wake one: the holder releases; time until the first waiter's grant arrives */
    S.phase = 2; /* nobody re-queues */
    uint64_t tw = now_ns();
    if (opt.target == T_LG)
        lg_release(&g_conns[0], opt.name);
    else
        e_unlock(&g_conns[0]);
    double wake_ms = -1;
    uint64_t wdl = now_ns() + 10000000000ull;
    int woke = -1;
    while (now_ns() < wdl && woke < 0) {
        loop_once(5);
        for (int i = 1; i <= n; i++)
            if (g_conns[i].held) {
                woke = i;
                break;
            }
    }
    if (woke > 0)
        wake_ms = (double)(now_ns() - tw) / 1e6;
    /* close every waiter; the server must drop them from the queue */
    for (int i = 1; i <= n; i++)
        conn_close(&g_conns[i]);
    long long left = poll_queue(0, 30);
    sleep_ms(500);
    long rss2 = opt.pid > 0 ? proc_rss_kb(opt.pid) : -1;

    out_head();
    out("waiters=%d", n);
    out("queued=%lld", queued);
    out("setup_s=%.2f", setup_s);
    out("rss_before_kb=%ld", rss0);
    out("rss_after_kb=%ld", rss1);
    out("bytes_per_waiter=%.0f", (rss0 >= 0 && rss1 >= 0 && n) ? (double)(rss1 - rss0) * 1024.0 / n : -1.0);
    out("wake_ms=%.3f", wake_ms);
    out("queue_after_close=%lld", left);
    out("rss_after_close_kb=%ld", rss2);
    out("errors=%ld", S.errors + g_conn_errors + dead);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &al))
        fatal("cannot find a free port");
    close(fd);
    return ntohs(a.sin_port);
}

static void run_startup(void)
{
    if (opt.target != T_LG || !opt.bin || !opt.data)
        fatal("startup mode needs --target leasegate --bin PATH --data FILE");
    opt.clients = 0;
    opt.port = free_port();
    g_addr.sin_port = htons((uint16_t)opt.port);
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", opt.port);
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC))
        fatal("pipe: %s", strerror(errno));
    uint64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0)
        fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(pfd[1], 1);
        execl(opt.bin, opt.bin, "serve", "--listen", listen, "--data", opt.data, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    set_nonblock(pfd[0]);
    opt.pid = pid;
    uint64_t dl = t0 + (uint64_t)(opt.timeout * 1e9);
    double listening_ms = -1, healthz_ms = -1;
    char line[512];
    size_t ll = 0;
    int polls = 0;
    while (now_ns() < dl) {
        if (listening_ms < 0) {
            ssize_t k = read(pfd[0], line + ll, sizeof line - 1 - ll);
            if (k > 0) {
                ll += (size_t)k;
                line[ll] = 0;
                if (strstr(line, "listening on"))
                    listening_ms = (double)(now_ns() - t0) / 1e6;
            }
        }
        int st = waitpid(pid, NULL, WNOHANG);
        if (st == pid)
            fatal("leasegate exited during start-up");
        polls++;
        char body[256];
        if (sync_http("GET", "/healthz", NULL, body, sizeof body, 2000) == 200) {
            healthz_ms = (double)(now_ns() - t0) / 1e6;
            break;
        }
        sleep_ms(1);
    }
    if (healthz_ms < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fatal("leasegate did not answer /healthz within %.0f s", opt.timeout);
    }
    if (listening_ms < 0) {
        for (int i = 0; i < 100 && listening_ms < 0; i++) {
            ssize_t k = read(pfd[0], line + ll, sizeof line - 1 - ll);
            if (k > 0) {
                ll += (size_t)k;
                line[ll] = 0;
                if (strstr(line, "listening on"))
                    listening_ms = (double)(now_ns() - t0) / 1e6;
            } else
                sleep_ms(1);
        }
    }
    /* how many locks did it load? */
    static char metrics[1 << 16];
    long long locks = -1, held = -1;
    if (sync_http("GET", "/metrics", NULL, metrics, sizeof metrics, 5000) == 200) {
        char *p = strstr(metrics, "\nleasegate_locks ");
        if (p)
            locks = strtoll(p + 17, NULL, 10);
        p = strstr(metrics, "\nleasegate_locks_held ");
        if (p)
            held = strtoll(p + 22, NULL, 10);
    }
    unsigned long long ticks = 0;
    proc_cpu_ticks(pid, &ticks);
    long rss = proc_rss_kb(pid);
    kill(pid, SIGTERM);
    int status = 0;
    uint64_t kdl = now_ns() + 10000000000ull;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_ns() > kdl) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        sleep_ms(5);
    }
    close(pfd[0]);
    out_head();
    out_ms("startup_ms", healthz_ms);
    out_ms("listening_ms", listening_ms);
    out("locks=%lld", locks);
    out("locks_held=%lld", held);
    out("server_cpu_s=%.2f", (double)ticks / (double)g_clk_tck);
    out("server_rss_kb=%ld", rss);
    out("exit_status=%d", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

/* ------------------------------------------------------------------ main */

static void usage(void)
{
    fprintf(stderr,
            "usage: lgbench --target leasegate|redis|etcd --mode pairs|contend|waiters|startup\n"
            "               [--variant txn|lock|lockkeep|read|readlock|semaphore] [--clients N]\n"
            "               [--seconds S] [--warmup S] [--count N] [--source-ips N]\n"
            "               [--url http://127.0.0.1:PORT | --host H --port P] [--pid PID]\n"
            "               [--name LOCK] [--wait-ms MS] [--fifo-events 0|1] [--timeout S] [--bin PATH --data FILE]\n"
            "       lgbench --free-port\n");
    exit(2);
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv)
{
    g_clk_tck = sysconf(_SC_CLK_TCK);
    signal(SIGPIPE, SIG_IGN);
    if (argc == 2 && !strcmp(argv[1], "--free-port")) {
        printf("%d\n", free_port()); /* helper for compare.sh: a free loopback port */
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(s) (!strcmp(a, s) && v && (i++, 1))
        if (ARG("--target"))
            opt.target_s = v;
        else if (ARG("--mode"))
            opt.mode_s = v;
        else if (ARG("--variant"))
            opt.variant = v;
        else if (ARG("--clients"))
            opt.clients = atoi(v);
        else if (ARG("--seconds"))
            opt.seconds = atof(v);
        else if (ARG("--warmup"))
            opt.warmup = atof(v);
        else if (ARG("--count"))
            opt.count = atol(v);
        else if (ARG("--source-ips"))
            opt.source_ips = atoi(v);
        else if (ARG("--timeout"))
            opt.timeout = atof(v);
        else if (ARG("--host"))
            snprintf(opt.host, sizeof opt.host, "%s", v);
        else if (ARG("--port"))
            opt.port = atoi(v);
        else if (ARG("--pid"))
            opt.pid = atoi(v);
        else if (ARG("--name"))
            snprintf(opt.name, sizeof opt.name, "%s", v);
        else if (ARG("--wait-ms"))
            opt.wait_ms = atol(v);
        else if (ARG("--fifo-events"))
            opt.fifo_events = atoi(v) != 0;
        else if (ARG("--bin"))
            opt.bin = v;
        else if (ARG("--data"))
            opt.data = v;
        else if (ARG("--url")) {
            if (sscanf(v, "http://%63[^:/]:%d", opt.host, &opt.port) != 2)
                usage();
        } else
            usage();
#undef ARG
    }
    if (!opt.target_s || !opt.mode_s)
        usage();
    if (!strcmp(opt.target_s, "leasegate"))
        opt.target = T_LG;
    else if (!strcmp(opt.target_s, "redis"))
        opt.target = T_REDIS;
    else if (!strcmp(opt.target_s, "etcd"))
        opt.target = T_ETCD;
    else
        usage();
    if (!strcmp(opt.mode_s, "pairs"))
        opt.mode = M_PAIRS;
    else if (!strcmp(opt.mode_s, "contend"))
        opt.mode = M_CONTEND;
    else if (!strcmp(opt.mode_s, "waiters"))
        opt.mode = M_WAITERS;
    else if (!strcmp(opt.mode_s, "startup"))
        opt.mode = M_STARTUP;
    else
        usage();
    if (opt.target == T_ETCD && opt.mode == M_PAIRS && !strcmp(opt.variant, "-"))
        opt.variant = "txn";
    if (strcmp(opt.variant, "-") && strcmp(opt.variant, "txn") && strcmp(opt.variant, "lock") &&
        strcmp(opt.variant, "lockkeep") && strcmp(opt.variant, "read") && strcmp(opt.variant, "readlock") &&
        strcmp(opt.variant, "semaphore"))
        usage();
    /* read, readlock and semaphore are leasegate's, for pairs (an etcd or Redis client would ignore
     * them); a semaphore's limit, the number of clients, is at most 10000. */
    if ((!strcmp(opt.variant, "read") || !strcmp(opt.variant, "readlock") || !strcmp(opt.variant, "semaphore")) &&
        (opt.target != T_LG || opt.mode != M_PAIRS || (lg_semaphore() && opt.clients > 10000)))
        usage();
    if (opt.clients < 1 || opt.clients > 100000 || opt.seconds <= 0 || opt.warmup < 0 || opt.timeout <= 0 ||
        opt.source_ips < 0 || opt.source_ips > 254)
        usage();
    if (!opt.name[0])
        snprintf(opt.name, sizeof opt.name, "lgbench-%d-%llu", (int)getpid(),
                 (unsigned long long)(now_ns() / 1000000 % 100000000));
    if (!opt.wait_ms)
        opt.wait_ms = (long)((opt.seconds + opt.warmup + opt.timeout) * 1000) + 60000;
    if (opt.wait_ms > 3600000)
        opt.wait_ms = 3600000;
    g_ttl_s = (long long)(opt.seconds + opt.warmup + opt.timeout) + 60;
    g_resp_proto = opt.target == T_REDIS;
    raise_nofile();
    g_addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, opt.host, &g_addr.sin_addr) != 1)
        fatal("--host must be an IPv4 address");
    if (opt.mode == M_STARTUP) {
        run_startup();
        printf("%s\n", g_line);
        return 0;
    }
    if (opt.port <= 0 || opt.port > 65535)
        fatal("--port or --url is required");
    g_addr.sin_port = htons((uint16_t)opt.port);
    {
        char pfx[300];
        b64(opt.name, S.name_b64);
        snprintf(pfx, sizeof pfx, "%s/", opt.name);
        b64(pfx, S.prefix_b64);
        snprintf(pfx, sizeof pfx, "%s0", opt.name);
        b64(pfx, S.rangeend_b64);
    }
    g_ep = epoll_create1(EPOLL_CLOEXEC);
    if (g_ep < 0)
        fatal("epoll_create1: %s", strerror(errno));
    if (opt.mode == M_WAITERS)
        run_waiters();
    else
        run_pairs_or_contend();
    printf("%s\n", g_line);
    fflush(stdout);
    return 0;
}
