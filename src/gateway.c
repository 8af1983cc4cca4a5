/* gateway — start-up and shutdown in order; see gateway.h. */
#include "gateway.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <microhttpd.h>

#include "api/api.h"
#include "api/dispatch.h"
#include "api/event_stream.h"
#include "api/events.h"
#include "api/quota.h"
#include "api/rekey.h"
#include "api/trail.h"
#include "api/watch.h"
#include "core/auditlog.h"
#include "core/leasehist.h"
#include "guard/guard.h"
#include "guard/proxy.h"
#include "net/accesslog.h"
#include "net/http.h"
#include "net/listener.h"
#include "net/loop.h"
#include "net/peers.h"
#include "standby.h"

/* Lock-table hooks. */

/* The change exists only in memory and cannot be made durable: stop before
 * anything reveals it. Storage still holds a consistent state. */
static void cannot_record(void)
{
    fprintf(stderr, "leasegate: out of memory recording a change; exiting\n");
    _exit(70);
}

static void on_changed(void *ud, const Lock *lock)
{
    Server *s = ud;
    if (!commit_lock(s->commit, lock))
        cannot_record();
    /* Every change that moves a lock's index wakes its watchers, also those
     * that report no event (one reentry released). Only marks them: they are
     * asked on the loop's tick, outside the lock table. */
    if (lock->kind == KIND_LOCK)
        watch_note(s, lock->name);
}

/* A reader's or a permit's own record. */
static void on_holder_changed(void *ud, const Lock *lock, const Holder *h)
{
    Server *s = ud;
    if (!commit_holder(s->commit, lock, h))
        cannot_record();
    if (lock->kind == KIND_LOCK)
        watch_note(s, lock->name);
}

/* A forgotten lock takes its guard mark along (the store deletes both rows):
 * the next grant of the name has a larger token than any mark it had. */
static void on_forgotten(void *ud, const Lock *lock)
{
    Server *s = ud;
    quota_named(s, &lock->charge, -1);
    if (lock->kind == KIND_LOCK)
        fence_remove(s->guard_marks, lock->name);
    if (!commit_forget(s->commit, (LockKind)lock->kind, lock->name, locktab_last_token(s->locks)))
        cannot_record();
    /* Its last_token is gone from GET and its index moves (forget_index):
     * watchers of the name are told. */
    if (lock->kind == KIND_LOCK)
        watch_note(s, lock->name);
}

/* Fence hook: an idle resource goes, its mark lives on in its bucket's floor. */
static void on_fence_forgotten(void *ud, const char *resource, uint32_t bucket, uint64_t floor, const Charge *charge)
{
    Server *s = ud;
    quota_fenced(s, charge, -1);
    if (!commit_fence_forget(s->commit, resource, bucket, floor)) {
        fprintf(stderr, "leasegate: out of memory recording a change; exiting\n");
        _exit(70);
    }
}

static void on_ended(void *ud, const Lock *lock, const Holder *h, int how, uint64_t seq)
{
    Server *s = ud;
    /* From the grant's announced time, on the wall clock: the only time a
     * grant keeps across restarts (a lease loaded from the store has no
     * earlier reading of the boot clock). */
    if (how >= LEASE_END_EXPIRED && how <= LEASE_END_REVOKED)
        histogram_observe(&s->metrics.hold[how - 1], (double)(clock_now().wall_ms - h->acquired_at_ms) / 1000);
    quota_held(s, h->key, -1);
    /* A writer's end is in its lock's record (changed comes next); a
     * reader's or a permit's record goes. */
    bool shared = lock->kind == KIND_SEMAPHORE || h->mode == MODE_READ;
    if (!commit_ended(s->commit, (LockKind)lock->kind, lock->name, h->lease, h->token, how, seq) ||
        (shared && !commit_holder_gone(s->commit, (LockKind)lock->kind, lock->name, h->token)))
        cannot_record();
    /* After the change is recorded: its event waits for the batch that holds it. */
    trail_ended(s, lock, h, how);
}

static void on_granted(void *ud, void *waiter_ctx, const Lock *lock, const Holder *h)
{
    (void)ud;
    api_waiter_granted(waiter_ctx, lock, h);
}

static void on_timed_out(void *ud, void *waiter_ctx, const Lock *lock)
{
    (void)ud;
    api_waiter_timed_out(waiter_ctx, lock);
}

/* Loading. */

typedef struct LoadCtx {
    Server *s;
    Now now;
    size_t locks, held, dropped;
} LoadCtx;

/* Who made a name is not stored: a held one counts against its first
 * holder's key (the writer's, or the oldest reader's or permit's). */
static void charge_by_holder(Server *s, LockKind kind, const char *name, const Holder *h)
{
    const Lock *lock = locktab_get(s->locks, kind, name);
    if (!h || !h->key || !lock || lock->charge.key || lock->charge.peer)
        return;
    Charge c = quota_charge_of_key(s, h->key);
    locktab_set_charge(s->locks, kind, name, c);
    quota_named(s, &c, +1);
}

static int load_lock(void *ud, const StoreLock *l)
{
    LoadCtx *ctx = ud;
    ctx->locks++;
    if (locktab_load(ctx->s->locks, (LockKind)l->kind, l->name, l->last_token, l->limit, l->delay_until_ms,
                     &ctx->now) != LOCK_OK ||
        (l->held && locktab_load_holder(ctx->s->locks, KIND_LOCK, l->name, &l->holder, &ctx->now) != LOCK_OK))
        return -1;
    ctx->held += l->held;
    if (l->held)
        quota_held(ctx->s, l->holder.key, +1);
    charge_by_holder(ctx->s, (LockKind)l->kind, l->name, l->held ? &l->holder : NULL);
    return 0;
}

/* Readers and permits come by token, oldest first. One that cannot hold
 * beside the grants loaded before it (a reader beside a writer, a permit
 * past the limit) is younger than they are, and can only come from an etcd
 * batch that was cut between its parts (store_etcd.c, order_ops): no answer
 * revealed it, so it is dropped; the older grants may have been revealed. */
static int load_holder(void *ud, const StoreHolder *r)
{
    LoadCtx *ctx = ud;
    LockResult rc = locktab_load_holder(ctx->s->locks, (LockKind)r->kind, r->name, &r->holder, &ctx->now);
    if (rc == LOCK_BUSY) {
        fprintf(stderr, "leasegate: dropped %s token %llu of %s '%s': it cannot hold beside older grants (a batch "
                        "cut short, never revealed)\n",
                r->kind == KIND_SEMAPHORE ? "permit" : "reader", (unsigned long long)r->holder.token,
                r->kind == KIND_SEMAPHORE ? "semaphore" : "lock", r->name);
        ctx->dropped++;
        return 0;
    }
    if (rc != LOCK_OK)
        return -1;
    ctx->held++;
    quota_held(ctx->s, r->holder.key, +1);
    charge_by_holder(ctx->s, (LockKind)r->kind, r->name, &r->holder);
    return 0;
}

static int load_fence(void *ud, const StoreMark *m)
{
    LoadCtx *ctx = ud;
    return fence_load(ctx->s->fence, m->name, m->max_token, &ctx->now) == FENCE_ACCEPTED ? 0 : -1;
}

static int load_guard_mark(void *ud, const StoreMark *m)
{
    LoadCtx *ctx = ud;
    return fence_load(ctx->s->guard_marks, m->name, m->max_token, &ctx->now) == FENCE_ACCEPTED &&
                   guard_restore(ctx->s->guard, m->name, m->at_ms, &ctx->now)
               ? 0
               : -1;
}

static int load_history_seq(void *ud, uint64_t seq)
{
    LoadCtx *ctx = ud;
    locktab_continue_history(ctx->s->locks, seq);
    return 0;
}

static int load_ended(void *ud, const StoreEnded *e)
{
    LoadCtx *ctx = ud;
    locktab_load_ended(ctx->s->locks, (LockKind)e->kind, e->lock, e->lease, e->token, e->how, e->seq);
    return 0;
}

static int load_revoked(void *ud, uint64_t token)
{
    LoadCtx *ctx = ud;
    return revoked_add(ctx->s->revoked, token) ? 0 : -1;
}

static int load_audit(void *ud, const AuditRow *row)
{
    LoadCtx *ctx = ud;
    return auditlog_load(ctx->s->audit, row) ? 0 : -1;
}

/* A stored audit row past its key's --audit-keep: storage deletes it too. */
static void on_audit_dropped(void *ud, const char *key, uint64_t seq)
{
    Server *s = ud;
    if (!commit_audit_drop(s->commit, key, seq, auditlog_gone_below(s->audit))) {
        fprintf(stderr, "leasegate: out of memory recording a change; exiting\n");
        _exit(70);
    }
}

static int load_floor(void *ud, const StoreFloor *f)
{
    LoadCtx *ctx = ud;
    fence_load_floor(ctx->s->fence, f->bucket, f->floor);
    return 0;
}

/* Leadership over etcd. */

/* Called on the election's thread, once, when this gateway led and etcd says
 * its lease is gone. Nothing held can be answered any more (no barrier can
 * succeed): the loop answers 503 to every request it holds and exits 1
 * (runloop.c); a supervisor restarts the gateway as a candidate. Before the
 * loop runs (while loading) the event waits for it. */
static void on_leadership_lost(void *ud, const char *why)
{
    Server *s = ud;
    fprintf(stderr, "leasegate: leadership lost: %s; answering 503 to every request held, then exiting with status 1 "
                    "(restart this gateway: it becomes a candidate)\n", why);
    uint64_t one = 1;
    if (write(s->deposed_fd, &one, sizeof one) != (ssize_t)sizeof one)
        _exit(1); /* cannot tell the loop: stop at once, answering nothing */
}

/* SIGINT and SIGTERM are blocked in every thread (main.c), so a stop asked
 * for while campaigning is pending until the loop reads it; see it here. */
static bool stop_requested(void *ud)
{
    (void)ud;
    sigset_t pending;
    return sigpending(&pending) == 0 && (sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1);
}

/* The candidate phase: listen, answer 503 (standby.h) while campaigning, and
 * once this gateway leads, open the store fenced on its leader key. *listen_fd
 * is the socket, still listening, for the real server. */
static int become_leader(Server *s, const Config *cfg, int *listen_fd)
{
    char err[512];
    int fd = listener_open(cfg->listen_host, cfg->listen_port, 1024, err, sizeof err);
    if (fd < 0) {
        fprintf(stderr, "leasegate: %s\n", err);
        return -1;
    }
    char addr[300], advertise[sizeof cfg->advertise + 8];
    listener_name(fd, addr, sizeof addr);
    snprintf(advertise, sizeof advertise, "%s%s", cfg->advertise[0] ? "" : tls_on(&s->tls) ? "https://" : "http://",
             cfg->advertise[0] ? cfg->advertise : addr);
    /* The follower and the leader this gateway may become answer for its advertised name. */
    hostcheck_init(&s->hosts, cfg, advertise);
    s->deposed_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->deposed_fd < 0) {
        fprintf(stderr, "leasegate: eventfd: %s\n", strerror(errno));
        close(fd);
        return -1;
    }
    s->election =
        election_new(&cfg->etcd, advertise, cfg->leader_ttl_s, on_leadership_lost, s, err, sizeof err);
    if (!s->election) {
        fprintf(stderr, "leasegate: --store %s: %s\n", cfg->store_url, err);
        close(fd);
        return -1;
    }
    Standby *sb = standby_start(fd, s->election, (unsigned)cfg->max_connections, cfg->idle_timeout_s, &s->tls,
                                cfg->auth_metrics ? s->auth : NULL, &s->hosts);
    const char *why = tls_mhd_started(&s->tls);
    if (!sb) {
        fprintf(stderr, "leasegate: cannot start the %s server on %s: %s\n", tls_on(&s->tls) ? "HTTPS" : "HTTP",
                addr, *why ? why : "libmicrohttpd refused its options");
        close(fd);
        return -1;
    }
    printf("leasegate: listening on %s://%s\n", tls_scheme(&s->tls), addr);
    fflush(stdout);
    fprintf(stderr, "leasegate: candidate for leadership of %s (advertised as %s); answering 503 until elected\n",
            cfg->store_url, advertise);
    int rc = election_campaign(s->election, stop_requested, NULL, err, sizeof err);
    if (!standby_stop(sb)) {
        fprintf(stderr, "leasegate: cannot take the listening socket back from the standby server\n");
        return -1;
    }
    if (rc) {
        /* Only a stop ends a campaign: a clean one, with nothing to undo. */
        fprintf(stderr, "leasegate: %s\n", err);
        s->stopping = true;
        close(fd);
        return -1;
    }
    *listen_fd = fd;
    fprintf(stderr, "leasegate: elected leader of %s (leader key revision %lld); loading the lock space\n",
            cfg->store_url, election_revision(s->election));
    s->store = store_etcd_open(&cfg->etcd, s->election, cfg->etcd_max_txn_ops, err, sizeof err);
    if (!s->store) {
        fprintf(stderr, "leasegate: %s\n", err);
        return -1;
    }
    return 0;
}

/* Upper bounds, in seconds. A wait is allowed up to an hour (wait_ms); a lease
 * is renewed for as long as its holder likes, so its buckets reach a day. */
static const double WAIT_BOUNDS_S[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                       2.5,   5,     10,   30,    60,   300, 900,  3600};
static const double HOLD_BOUNDS_S[] = {0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400};

static void metrics_init(Metrics *m)
{
    histogram_init(&m->acquire_wait, WAIT_BOUNDS_S, sizeof WAIT_BOUNDS_S / sizeof *WAIT_BOUNDS_S);
    for (size_t i = 0; i < sizeof m->hold / sizeof *m->hold; i++)
        histogram_init(&m->hold[i], HOLD_BOUNDS_S, sizeof HOLD_BOUNDS_S / sizeof *HOLD_BOUNDS_S);
}

int gateway_open(Server *s, const Config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    metrics_init(&s->metrics);
    s->listen_fd = -1;
    s->deposed_fd = -1;
    char err[512];
    /* Before anything listens: a bad certificate or key stops the start. */
    if (!tls_load(&s->tls, cfg->tls_cert, cfg->tls_key, cfg->cacert, err, sizeof err)) {
        fprintf(stderr, "leasegate: %s\n", err);
        return -1;
    }
    if (cfg->auth_file) {
        if (!(s->auth = auth_load(cfg->auth_file, err, sizeof err))) {
            fprintf(stderr, "leasegate: --auth-file %s\n", err);
            return -1;
        }
        fprintf(stderr, "leasegate: %zu API keys from %s; every request needs one\n", auth_count(s->auth),
                cfg->auth_file);
    } else if (cfg->insecure_no_auth) {
        fprintf(stderr, "leasegate: WARNING: --insecure-no-auth: anyone who reaches %s may take or release any "
                        "lock\n",
                cfg->listen_host);
    }
    hostcheck_init(&s->hosts, cfg, NULL);
    if (cfg->store_url) {
        if (become_leader(s, cfg, &s->listen_fd))
            return -1;
    } else {
        char boot_id[CLOCK_BOOT_ID_LEN + 1];
        bool have_boot = clock_boot_id(boot_id);
        if (!have_boot)
            fprintf(stderr, "leasegate: the kernel does not say which boot this is: leases held across a restart "
                            "keep what the wall clock says is left of them\n");
        char narrowed[1200];
        int n = store_sqlite_narrow(cfg->data_path, narrowed, sizeof narrowed, err, sizeof err);
        if (n < 0) {
            fprintf(stderr, "leasegate: %s\n", err);
            return -1;
        }
        if (n > 0)
            fprintf(stderr, "leasegate: made %s readable by its owner only (0600): the database holds every live "
                            "lease\n",
                    narrowed);
        s->store = store_sqlite_open(cfg->data_path, have_boot ? boot_id : NULL, err, sizeof err);
        if (!s->store) {
            fprintf(stderr, "leasegate: cannot open database %s\n", err);
            return -1;
        }
    }
    const char *where = cfg->store_url ? cfg->store_url : cfg->data_path;
    s->commit = commit_new(s->store, err, sizeof err);
    LocktabLimits limits = {cfg->max_locks, cfg->max_waiters, cfg->max_waiters_per_lock, cfg->lease_history,
                            (int64_t)cfg->forget_idle_s * 1000};
    LocktabHooks hooks = {s, on_changed, on_granted, on_timed_out, on_forgotten, on_ended, on_holder_changed};
    s->locks = locktab_new(&limits, &hooks);
    FenceHooks fence_hooks = {s, on_fence_forgotten};
    s->fence = fence_new(cfg->max_fences, (int64_t)cfg->forget_idle_s * 1000, &fence_hooks);
    /* Guard marks go with their lock (on_forgotten), never on their own. */
    s->guard_marks = fence_new(cfg->max_locks, 0, NULL);
    s->revoked = revoked_new();
    s->audit = auditlog_new(cfg->audit_keep);
    s->events = events_new(cfg->events_keep);
    s->streams = event_streams_new();
    s->watches = watches_new();
    /* Before the load: a lock written less than --guard-settle ago waits out the rest. */
    s->guard = guard_new(s);
    s->guard_refused = trail_guard_refused;
    if (!s->commit || !s->locks || !s->fence || !s->guard_marks || !s->revoked || !s->audit || !s->events || !s->streams ||
        !s->watches || !s->guard) {
        fprintf(stderr, "leasegate: start-up failed: %s\n", s->commit ? "out of memory" : err);
        return -1;
    }
    LoadCtx ctx = {s, clock_now(), 0, 0, 0};
    /* From the wall clock, as event seqs (events.c): a lock's index from
     * before a restart stays below its index after. */
    locktab_start_index(s->locks, (uint64_t)ctx.now.wall_ms * 1000);
    StoreLoad cb = {.ud = &ctx,
                    .lock = load_lock,
                    .holder = load_holder,
                    .fence = load_fence,
                    .guard_mark = load_guard_mark,
                    .floor = load_floor,
                    .history_seq = load_history_seq,
                    .ended = load_ended,
                    .revoked = load_revoked,
                    .audit = load_audit};
    commit_keep_history(s->commit, cfg->lease_history);
    uint64_t last_token;
    if (store_load(s->store, &cb, &last_token)) {
        fprintf(stderr, "leasegate: cannot load %s: %s\n", where, store_error(s->store));
        return -1;
    }
    if (!auditlog_load_done(s->audit, on_audit_dropped, s)) {
        fprintf(stderr, "leasegate: cannot load %s: out of memory for the audit trail\n", where);
        return -1;
    }
    locktab_raise_last_token(s->locks, last_token);
    locktab_tick(s->locks, &ctx.now); /* ends the leases that expired while the server was down */
    fprintf(stderr, "leasegate: loaded %zu locks and semaphores (%zu leases held, %zu expired while down), last token "
                    "%llu, from %s\n",
            ctx.locks, locktab_held(s->locks), ctx.held - locktab_held(s->locks),
            (unsigned long long)locktab_last_token(s->locks), where);
    if (cfg->min_token > locktab_last_token(s->locks)) {
        /* The floor is durable before anything can reveal a token above it. */
        locktab_raise_last_token(s->locks, cfg->min_token);
        commit_counter(s->commit, cfg->min_token);
        if (commit_sync(s->commit) < 0) {
            fprintf(stderr, "leasegate: cannot store --min-token %llu: %s\n", (unsigned long long)cfg->min_token,
                    commit_error(s->commit));
            return -1;
        }
        fprintf(stderr, "leasegate: --min-token %llu: the next token is %llu\n", (unsigned long long)cfg->min_token,
                (unsigned long long)cfg->min_token + 1);
    }
    if (cfg->access_log && !(s->access_log = accesslog_open(cfg->access_log, err, sizeof err))) {
        fprintf(stderr, "leasegate: %s\n", err);
        return -1;
    }
    s->app = dispatch_app();
    if (!(s->peers = peers_new(cfg->peer_max_connections, cfg->peer_max_half_sent))) {
        fprintf(stderr, "leasegate: start-up failed: out of memory\n");
        return -1;
    }
    if (http_start(s))
        return -1;
    s->loop = loop_new();
    if (!s->loop) {
        fprintf(stderr, "leasegate: event loop setup: %s\n", strerror(errno));
        return -1;
    }
    s->proxy = proxy_new(s->loop, cfg->guard_timeout_s, cfg->cacert);
    if (!s->proxy) {
        fprintf(stderr, "leasegate: cannot initialise libcurl (or out of memory)\n");
        return -1;
    }
    if (!guard_open(s->guard, err, sizeof err)) {
        fprintf(stderr, "leasegate: %s\n", err);
        return -1;
    }
    for (size_t i = 0; i < cfg->nguards; i++)
        fprintf(stderr, "leasegate: guard %s -> %s\n", cfg->guards[i].prefix, cfg->guards[i].upstream);
    char hosts[sizeof s->hosts.names + 200];
    hostcheck_describe(&s->hosts, hosts, sizeof hosts);
    fprintf(stderr, "leasegate: answering %s\n", hosts);
    return 0;
}

void gateway_close(Server *s)
{
    /* On every way out (also a failed loop) MHD must not stop with suspended
     * connections: drop them and let MHD take them back once. Stopping: a
     * request MHD still runs now cannot become a waiter. */
    s->stopping = true;
    if (s->daemon) {
        if (s->proxy)
            proxy_abort_all(s->proxy);
        /* A round may suspend what it resumed (a reply held for its commit):
         * repeat until nothing is suspended; each round closes connections. */
        for (int round = 0; round < 100; round++) {
            http_close_suspended(s);
            MHD_run(s->daemon);
            if (s->suspended.len == 0 && s->parked.len == 0)
                break;
        }
    }
    http_stop(s);
    peers_free(s->peers); /* after the last connection closed */
    if (s->listen_fd >= 0)
        close(s->listen_fd); /* never handed to MHD */
    /* Stopping MHD completes the last connections, which may release grants
     * that were never delivered: make that durable too. */
    if (s->commit && commit_sync(s->commit) < 0)
        fprintf(stderr, "leasegate: storage failure at shutdown: %s\n", commit_error(s->commit));
    proxy_free(s->proxy);
    guard_free(s->guard);
    loop_free(s->loop);
    commit_free(s->commit);
    locktab_free(s->locks);
    fence_free(s->fence);
    fence_free(s->guard_marks);
    revoked_free(s->revoked);
    auditlog_free(s->audit);
    events_free(s->events);
    event_streams_free(s->streams);
    watches_free(s->watches);
    quota_free(s);
    if (s->store)
        store_close(s->store);
    /* Last: resigning lets the next gateway lead, after everything is committed. */
    election_free(s->election);
    if (s->deposed_fd >= 0)
        close(s->deposed_fd);
    accesslog_close(s->access_log);
    tls_clear(&s->tls);
    auth_unref(s->auth);
}

void gateway_reload_keys(Server *s)
{
    char err[512];
    /* S3 routes are probed again, those closed for good too. */
    if (!guard_reload(s->guard, err, sizeof err))
        fprintf(stderr, "leasegate: SIGHUP: keeping the S3 credentials loaded before: %s\n", err);
    else if (s->cfg.s3_credentials)
        fprintf(stderr, "leasegate: SIGHUP: S3 credentials read again from %s\n", s->cfg.s3_credentials);
    if (!s->cfg.auth_file)
        return;
    AuthTable *t = auth_load(s->cfg.auth_file, err, sizeof err);
    if (!t) {
        fprintf(stderr, "leasegate: SIGHUP: keeping the %zu API keys loaded before: %s\n", auth_count(s->auth), err);
        return;
    }
    auth_unref(s->auth); /* requests that began under it hold their own reference */
    s->auth = t;
    fprintf(stderr, "leasegate: SIGHUP: %zu API keys from %s\n", auth_count(t), s->cfg.auth_file);
    /* What a removed or narrowed key holds open ends now, not when it times out. */
    rekey_reloaded(s);
}
