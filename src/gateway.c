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
#include "api/observe.h"
#include "api/quota.h"
#include "api/rekey.h"
#include "api/trail.h"
#include "api/watch.h"
#include "core/auditlog.h"
#include "core/leasehist.h"
#include "core/log.h"
#include "core/valwrites.h"
#include "guard/guard.h"
#include "guard/proxy.h"
#include "net/accesslog.h"
#include "net/http.h"
#include "net/listener.h"
#include "net/dormant.h"
#include "net/loop.h"
#include "net/park.h"
#include "net/peers.h"
#include "standby.h"
#include "store/etcd_auth.h"
#include "store/lockspace.h"

/* Lock-table hooks. */

/* The change exists only in memory and cannot be made durable: stop before
 * anything reveals it. Storage still holds a consistent state. */
static void cannot_record(void)
{
    log_line(LEVEL_ERROR, "out of memory recording a change; exiting");
    _exit(70);
}

/* The hooks record one change each: the name's record, a lease's record,
 * a lease's end. Every change that moves a lock's index wakes its watchers,
 * also those that report no event (one reentry released); a waiter's
 * coming and going is noted by its event (events_note_of). Only marks them:
 * they are asked on the loop's tick, outside the lock table. */
static void on_changed(void *ud, const Lock *lock)
{
    Server *s = ud;
    if (!commit_lock(s->commit, lock))
        cannot_record();
    if (lock->kind != KIND_SEMAPHORE)
        watch_note(s, (LockKind)lock->kind, lock->name);
}

static void on_holder_changed(void *ud, const Lock *lock, const Holder *h)
{
    Server *s = ud;
    if (!commit_holder(s->commit, lock, h))
        cannot_record();
    if (lock->kind != KIND_SEMAPHORE)
        watch_note(s, (LockKind)lock->kind, lock->name);
}

static void on_value_changed(void *ud, const Lock *lock)
{
    Server *s = ud;
    if (!commit_value(s->commit, lock))
        cannot_record();
    watch_note(s, KIND_LOCK, lock->name);
}

/* A forgotten lock takes its guard mark along: the next grant of the name
 * has a larger token than any mark it had; and its value record, which
 * only a value of null (written) leaves to a name that can be forgotten. */
static void on_forgotten(void *ud, const Lock *lock)
{
    Server *s = ud;
    quota_named(s, &lock->charge, -1);
    /* The guard's mark of the name: a lock's by its name, an election's by "@" and its name (guardroute.h). */
    char mark[GUARD_BINDING_MAX + 1];
    if (lock->kind == KIND_ELECTION)
        snprintf(mark, sizeof mark, "%c%s", GUARD_ELECTION_MARK, lock->name);
    else
        snprintf(mark, sizeof mark, "%s", lock->name);
    bool marked = lock->kind != KIND_SEMAPHORE;
    if (marked)
        fence_remove(s->guard_marks, mark);
    if (lock->kind == KIND_ELECTION)
        observed_forgotten(s, lock->name);
    if (!commit_forget(s->commit, (LockKind)lock->kind, lock->name, locktab_last_token(s->locks)) ||
        (marked && !commit_guard_mark_forget(s->commit, mark)) ||
        (lock->value.version && !commit_value_gone(s->commit, lock->name)))
        cannot_record();
    /* Its last_token is gone from GET and its index moves (forget_index):
     * watchers of the name are told. */
    if (lock->kind != KIND_SEMAPHORE)
        watch_note(s, (LockKind)lock->kind, lock->name);
}

/* Fence hook: an idle resource goes, its mark lives on in its bucket's floor. */
static void on_fence_forgotten(void *ud, const char *resource, uint32_t bucket, uint64_t floor, const Charge *charge)
{
    Server *s = ud;
    quota_fenced(s, charge, -1);
    if (!commit_fence_forget(s->commit, resource, bucket, floor)) {
        log_line(LEVEL_ERROR, "out of memory recording a change; exiting");
        _exit(70);
    }
}

static void on_ended(void *ud, void *actor, const Lock *lock, const Holder *h, int how, uint64_t seq)
{
    Server *s = ud;
    /* From the grant's announced time, on the wall clock: the only time a
     * grant keeps across restarts (a lease loaded from the store has no
     * earlier reading of the boot clock). */
    if (how >= LEASE_END_EXPIRED && how <= LEASE_END_REVOKED)
        histogram_observe(&s->metrics.hold[how - 1], (double)(clock_now().wall_ms - h->acquired_at_ms) / 1000);
    quota_held(s, h->key, -1);
    if (!commit_ended(s->commit, (LockKind)lock->kind, lock->name, h->lease, h->token, how, seq) ||
        !commit_holder_gone(s->commit, (LockKind)lock->kind, lock->name, h->token))
        cannot_record();
    if (lock->kind != KIND_SEMAPHORE)
        watch_note(s, (LockKind)lock->kind, lock->name);
    /* After the change is recorded: its event waits for the batch that holds it. */
    trail_ended(s, actor, lock, h, how);
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

/* A dormant waiter (dormant.h) is made a Request before it is answered. */
static void *on_waking(void *ud, void *waiter_ctx)
{
    (void)ud;
    return dormant_request(waiter_ctx);
}

/* Loading. */

typedef struct LoadCtx {
    Server *s;
    Now now;
    size_t locks, held, dropped;
} LoadCtx;

/* Who made a name is not stored: a held one counts against its first
 * holder's key (its oldest lease's). */
static void charge_by_holder(Server *s, LockKind kind, const char *name, const Holder *h)
{
    const Lock *lock = locktab_get(s->locks, kind, name);
    if (!h->key || !lock || lock->charge.key || lock->charge.peer)
        return;
    Charge c = quota_charge_of_key(s, h->key);
    locktab_set_charge(s->locks, kind, name, c);
    quota_named(s, &c, +1);
}

static int load_lock(LoadCtx *ctx, const StoreLock *l)
{
    ctx->locks++;
    return locktab_load(ctx->s->locks, (LockKind)l->kind, l->name, l->last_token, l->limit, l->delay_until_ms,
                        &ctx->now) == LOCK_OK
               ? 0
               : -1;
}

/* A name's leases come by token, oldest first, whatever their mode. One that cannot
 * hold beside the grants loaded before it (a second writer, a reader beside
 * a writer, a permit past the limit) is younger than they are: only an etcd
 * batch cut between its parts could leave one (store_etcd.c, order_ops,
 * says why none should), and no answer revealed it, so it is dropped; the
 * older grants may have been revealed. */
static int load_holder(LoadCtx *ctx, const StoreHolder *r)
{
    LockResult rc = locktab_load_holder(ctx->s->locks, (LockKind)r->kind, r->name, &r->holder, &ctx->now);
    if (rc == LOCK_BUSY) {
        log_line(LEVEL_WARN, "dropped %s token %llu of %s '%s': it cannot hold beside older grants (a batch "
                             "cut short, never revealed)",
                 r->kind == KIND_SEMAPHORE ? "permit" : r->holder.mode == MODE_READ ? "reader" : "writer",
                 (unsigned long long)r->holder.token, r->kind == KIND_SEMAPHORE ? "semaphore" : "lock", r->name);
        ctx->dropped++;
        return 0;
    }
    if (rc != LOCK_OK)
        return -1;
    ctx->held++;
    quota_held(ctx->s, r->holder.key, +1);
    if (r->kind == KIND_ELECTION && !observed_loaded(ctx->s, r->name, &r->holder))
        return -1;
    charge_by_holder(ctx->s, (LockKind)r->kind, r->name, &r->holder);
    return 0;
}

/* A lock's value counts against the key that wrote it (its peer is not stored). */
static int load_value(LoadCtx *ctx, const StoreValue *v)
{
    Server *s = ctx->s;
    LockValue value = {(char *)v->text, v->version, v->token, (char *)v->key, v->at_ms, {NULL, NULL}, {NULL, 0}};
    /* The store checked the list's text; only memory can fail here. */
    if (!valwrites_parse(v->writes, v->version, &value.writes))
        return -1;
    LockResult r = locktab_load_value(s->locks, v->name, &value, &ctx->now);
    valwrites_clear(&value.writes);
    if (r != LOCK_OK)
        return -1;
    if (v->text && v->key) {
        Charge c = quota_charge_of_key(s, v->key);
        locktab_set_value_charge(s->locks, v->name, c);
        quota_value_counted(s, &c, strlen(v->text), +1);
    }
    return 0;
}

static int load_mark(Fence *f, const StoreMark *m, const Now *now)
{
    return fence_load(f, m->name, m->max_token, now) == FENCE_ACCEPTED ? 0 : -1;
}

static int load_history_seq(void *ud, uint64_t seq)
{
    LoadCtx *ctx = ud;
    locktab_continue_history(ctx->s->locks, seq);
    return 0;
}

/* One stored record, each kind to its place (the kinds come in record.h's order). */
static int load_record(void *ud, const StoreRecord *r)
{
    LoadCtx *ctx = ud;
    Server *s = ctx->s;
    switch ((StoreRecordKind)r->kind) {
    case REC_LOCK:
        return load_lock(ctx, &r->lock);
    case REC_HOLDER:
        return load_holder(ctx, &r->holder);
    case REC_VALUE:
        return load_value(ctx, &r->value);
    case REC_FENCE:
        return load_mark(s->fence, &r->fence, &ctx->now);
    case REC_GUARD_MARK:
        return load_mark(s->guard_marks, &r->guard_mark, &ctx->now) == 0 &&
                       guard_restore(s->guard, r->guard_mark.name, r->guard_mark.at_ms, &ctx->now)
                   ? 0
                   : -1;
    case REC_FLOOR:
        fence_load_floor(s->fence, r->floor.bucket, r->floor.floor);
        return 0;
    case REC_ENDED: {
        const StoreEnded *e = &r->ended;
        locktab_load_ended(s->locks, (LockKind)e->kind, e->lock, e->lease, e->token, e->how, e->seq);
        return 0;
    }
    case REC_REVOKED:
        return revoked_add(s->revoked, r->revoked.token) ? 0 : -1;
    case REC_AUDIT:
        return auditlog_load(s->audit, &r->audit) ? 0 : -1;
    case REC_KINDS:
        break;
    }
    return -1;
}

/* A stored audit row past its key's --audit-keep: storage deletes it too. */
static void on_audit_dropped(void *ud, const char *key, uint64_t seq)
{
    Server *s = ud;
    if (!commit_audit_drop(s->commit, key, seq, auditlog_gone_below(s->audit))) {
        log_line(LEVEL_ERROR, "out of memory recording a change; exiting");
        _exit(70);
    }
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
    log_line(LEVEL_ERROR, "leadership lost: %s; answering 503 to every request held, then exiting with status 1 "
                          "(restart this gateway: it becomes a candidate)", why);
    uint64_t one = 1;
    if (write(s->deposed_fd, &one, sizeof one) != (ssize_t)sizeof one)
        _exit(1); /* cannot tell the loop: stop at once, answering nothing */
}

/* Another gateway reloaded its keys (election.h), on the election's thread:
 * the loop, or the campaign, reloads this gateway's own file. */
static void on_keys_reloaded_elsewhere(void *ud)
{
    Server *s = ud;
    uint64_t one = 1;
    if (write(s->reload_fd, &one, sizeof one) != (ssize_t)sizeof one)
        log_line(LEVEL_WARN, "cannot hand another gateway's key reload to this one's loop: %s; send it SIGHUP",
                 strerror(errno));
}

/* Reads --auth-file again (and --s3-credentials). A file that does not load
 * is not ignored: every request that needs a key is refused (503, not
 * ready) until a reload succeeds, since the keys loaded before may include
 * one that was just revoked. sb: the standby to hand the keys to, while one
 * runs. `from` says what asked (for the log). */
static void reload_keys(Server *s, Standby *sb, const char *from)
{
    char err[512];
    /* S3 routes are probed again, those closed for good too. A candidate
     * has none yet (the guard opens when it leads, reading them afresh). */
    if (s->guard && !guard_reload(s->guard, err, sizeof err))
        log_line(LEVEL_WARN, "%s: keeping the S3 credentials loaded before: %s", from, err);
    else if (s->guard && s->cfg.s3_credentials)
        log_line(LEVEL_INFO, "%s: S3 credentials read again from %s", from, s->cfg.s3_credentials);
    if (!s->cfg.auth_file)
        return;
    AuthTable *t = auth_load(s->cfg.auth_file, err, sizeof err);
    if (!t) {
        snprintf(s->auth_error, sizeof s->auth_error, "%s", err);
        log_line(LEVEL_ERROR, "%s: the key file does not load (%s): every request that needs a key is refused "
                              "(503, /readyz not ready) until it does; the keys loaded before are not used",
                 from, err);
        if (sb)
            standby_set_keys(sb, NULL, err);
    } else {
        s->auth_error[0] = '\0';
        auth_unref(s->auth); /* requests that began under it hold their own reference */
        s->auth = t;
        log_line(LEVEL_INFO, "%s: %zu API keys from %s", from, auth_count(t), s->cfg.auth_file);
        if (sb)
            standby_set_keys(sb, t, NULL);
    }
    /* What a removed or narrowed key holds open ends now, not when it times
     * out; with a file that does not load, whatever a key holds open ends. */
    if (s->loop)
        rekey_reloaded(s);
}

void gateway_reload_keys(Server *s, bool announce)
{
    reload_keys(s, NULL, announce ? "SIGHUP" : "another gateway reloaded its keys");
    if (announce && s->election && s->cfg.auth_file)
        election_announce_reload(s->election);
}

static int64_t mono_ms(void) { return clock_now().mono_ms; }

/* A planned stop was asked for (SIGTERM, SIGINT): not ready at once, serving
 * for --drain-seconds more, then stopping; a second signal stops at once. */
void gateway_stop_asked(Server *s)
{
    if (s->draining || !s->cfg.drain_s) {
        s->stopping = true;
        return;
    }
    s->draining = true;
    s->drain_until_ms = mono_ms() + (int64_t)s->cfg.drain_s * 1000;
    log_line(LEVEL_INFO, "stop asked: not ready (/readyz 503) and still serving for %u s (--drain-seconds), then "
                         "stopping; a second signal stops at once",
             s->cfg.drain_s);
}

/* The candidate phase's signals and key reloads. SIGINT, SIGTERM and SIGHUP
 * are blocked in every thread (main.c), so what is asked for while
 * campaigning stays pending until read here; the campaign calls this often
 * (also from inside its etcd calls). A stop resigns the candidacy at once (a
 * draining gateway must not win) and ends the campaign once the drain is
 * over. */
typedef struct Campaign {
    Server *s;
    Standby *sb;
} Campaign;

static bool campaign_cancelled(void *ud)
{
    Campaign *c = ud;
    Server *s = c->s;
    sigset_t wanted;
    sigemptyset(&wanted);
    sigaddset(&wanted, SIGINT);
    sigaddset(&wanted, SIGTERM);
    sigaddset(&wanted, SIGHUP);
    const struct timespec now = {0, 0};
    int sig;
    while ((sig = sigtimedwait(&wanted, NULL, &now)) > 0) {
        if (sig == SIGHUP) {
            reload_keys(s, c->sb, "SIGHUP");
            if (s->cfg.auth_file)
                election_announce_reload(s->election);
            continue;
        }
        bool was_draining = s->draining;
        gateway_stop_asked(s);
        if (!was_draining) {
            standby_drain(c->sb);
            election_resign(s->election);
        }
    }
    uint64_t n;
    if (read(s->reload_fd, &n, sizeof n) == (ssize_t)sizeof n)
        reload_keys(s, c->sb, "another gateway reloaded its keys");
    if (s->draining && mono_ms() >= s->drain_until_ms)
        s->stopping = true;
    return s->stopping;
}

/* How often a gateway that cannot reach etcd says so while it checks the lock space. */
#define LOCK_SPACE_LOG_MS 10000
#define LOCK_SPACE_RETRY_MS 500

/* Before the campaign writes anything under the prefix (its key): the prefix
 * must be this lock space's, and no other's (lockspace.h). Tried again while
 * etcd does not answer (the standby answers 503 meanwhile), as the campaign
 * is. 0 it is, 1 stopped meanwhile (err says so), -1 refused (err). */
static int check_lock_space(const Config *cfg, const EtcdUrl *etcd, Campaign *c, char *err, size_t errlen)
{
    LockSpace space;
    int64_t logged = -LOCK_SPACE_LOG_MS;
    int rc;
    while ((rc = lockspace_open(etcd, cfg->new_lock_space, &space, err, errlen)) == LOCKSPACE_UNREACHED) {
        int64_t now = clock_now().mono_ms;
        if (now - logged >= LOCK_SPACE_LOG_MS) {
            log_line(LEVEL_WARN, "%s; checking the lock space again", err);
            logged = now;
        }
        for (int64_t until = now + LOCK_SPACE_RETRY_MS; clock_now().mono_ms < until;) {
            if (campaign_cancelled(c)) {
                snprintf(err, errlen, "stopped before the lock space at %s was checked", cfg->etcd.prefix);
                return 1;
            }
            struct timespec step = {0, 50 * 1000000L};
            nanosleep(&step, NULL);
        }
    }
    if (rc)
        return -1;
    if (space.note[0])
        log_line(LEVEL_WARN, "note: %s", space.note);
    log_line(LEVEL_INFO, "%s lock space %s (schema %u) at %s",
             space.created ? "created the" : space.adopted ? "gave an identity to the older" : "joining the", space.id,
             space.schema, cfg->etcd.prefix);
    return 0;
}

/* The candidate phase: listen, answer 503 (standby.h) while campaigning, and
 * once this gateway leads, open the store fenced on its leader key. *listen_fd
 * is the socket, still listening, for the real server. */
static int become_leader(Server *s, const Config *cfg, int *listen_fd)
{
    char err[1024];
    int fd = listener_open(cfg->listen_host, cfg->listen_port, 1024, err, sizeof err);
    if (fd < 0) {
        log_line(LEVEL_ERROR, "%s", err);
        return -1;
    }
    char addr[300], advertise[sizeof cfg->advertise + 8];
    listener_name(fd, addr, sizeof addr);
    snprintf(advertise, sizeof advertise, "%s%s", cfg->advertise[0] ? "" : tls_on(&s->tls) ? "https://" : "http://",
             cfg->advertise[0] ? cfg->advertise : addr);
    /* The follower and the leader this gateway may become answer for its advertised name. */
    hostcheck_init(&s->hosts, cfg, advertise);
    s->deposed_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->reload_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->deposed_fd < 0 || s->reload_fd < 0) {
        log_line(LEVEL_ERROR, "eventfd: %s", strerror(errno));
        close(fd);
        return -1;
    }
    /* Every etcd client of this gateway counts in its stats (/metrics). */
    EtcdUrl etcd = cfg->etcd;
    etcd.stats = &s->etcd_stats;
    ElectionHooks hooks = {on_leadership_lost, on_keys_reloaded_elsewhere, s};
    s->election = election_new(&etcd, advertise, cfg->leader_ttl_s, &hooks, err, sizeof err);
    if (!s->election) {
        log_line(LEVEL_ERROR, "--store %s: %s", cfg->store_url, err);
        close(fd);
        return -1;
    }
    StandbyOptions so = {cfg, &s->tls, &s->hosts, &s->etcd_stats, s->auth};
    Standby *sb = standby_start(fd, s->election, &so);
    const char *why = tls_mhd_started(&s->tls);
    if (!sb) {
        log_line(LEVEL_ERROR, "cannot start the %s server on %s: %s", tls_on(&s->tls) ? "HTTPS" : "HTTP", addr,
                 *why ? why : "libmicrohttpd refused its options");
        close(fd);
        return -1;
    }
    printf("leasegate: listening on %s://%s\n", tls_scheme(&s->tls), addr);
    fflush(stdout);
    log_line(LEVEL_INFO, "candidate for leadership of %s (advertised as %s); answering 503 until elected",
             cfg->store_url, advertise);
    Campaign c = {s, sb};
    int rc = check_lock_space(cfg, &etcd, &c, err, sizeof err);
    if (rc < 0) {
        log_line(LEVEL_ERROR, "--store %s: %s", cfg->store_url, err);
        standby_stop(sb);
        close(fd);
        return -1;
    }
    if (rc == 0)
        rc = election_campaign(s->election, campaign_cancelled, &c, err, sizeof err);
    if (rc == 0 && s->draining) {
        /* Won as the stop was asked: it never serves (the keeper's
         * resignation revokes the lease at once). */
        rc = -1;
        s->stopping = true;
        snprintf(err, sizeof err, "stopped as it won the election");
    }
    if (!standby_stop(sb)) {
        log_line(LEVEL_ERROR, "cannot take the listening socket back from the standby server");
        return -1;
    }
    if (rc) {
        /* Only a stop ends a campaign: a clean one, with nothing to undo. */
        log_line(LEVEL_INFO, "%s", err);
        s->stopping = true;
        close(fd);
        return -1;
    }
    *listen_fd = fd;
    log_line(LEVEL_INFO, "elected leader of %s (leader key revision %lld); loading the lock space", cfg->store_url,
             election_revision(s->election));
    /* A key revoked in this gateway's file may not be read yet: the SIGHUP
     * went to another gateway, whose mark (PREFIX/auth/reload) this one looks
     * at only every second, or to none. The leader serves with its file as it
     * is now, never with older keys. */
    reload_keys(s, NULL, "elected");
    s->store = store_etcd_open(&etcd, s->election, cfg->etcd_max_txn_ops, err, sizeof err);
    if (!s->store) {
        log_line(LEVEL_ERROR, "%s", err);
        return -1;
    }
    store_etcd_compaction(s->store, cfg->etcd_compact_interval_s, cfg->etcd_compact_bytes);
    return 0;
}

/* What this gateway shows etcd: its client certificate (checked here, read by
 * libcurl at each connection) and its etcd user (read once; s->cfg.etcd
 * borrows it for every etcd client). -1 with the reason logged. */
static int open_etcd_credentials(Server *s)
{
    char err[600], warn[400];
    if (s->cfg.etcd_cert && !tls_check_client_pair(s->cfg.etcd_cert, s->cfg.etcd_key, err, sizeof err)) {
        log_line(LEVEL_ERROR, "%s", err);
        return -1;
    }
    if (!s->cfg.etcd_auth_file)
        return 0;
    if (!(s->etcd_auth = etcd_auth_load(s->cfg.etcd_auth_file, warn, sizeof warn, err, sizeof err))) {
        log_line(LEVEL_ERROR, "--etcd-auth-file %s", err);
        return -1;
    }
    if (warn[0])
        log_line(LEVEL_WARN, "WARNING: --etcd-auth-file %s", warn);
    s->cfg.etcd.auth = s->etcd_auth;
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
    thread_own(&s->owner); /* the thread that opens the server runs its loop (threads.h) */
    s->cfg = *cfg;
    metrics_init(&s->metrics);
    s->listen_fd = -1;
    s->deposed_fd = -1;
    s->reload_fd = -1;
    char err[512];
    /* Before anything listens: a bad certificate or key stops the start. */
    if (!tls_load(&s->tls, cfg->tls_cert, cfg->tls_key, cfg->cacert, cfg->tls_ciphers, err, sizeof err)) {
        log_line(LEVEL_ERROR, "%s", err);
        return -1;
    }
    if (cfg->auth_file) {
        if (!(s->auth = auth_load(cfg->auth_file, err, sizeof err))) {
            log_line(LEVEL_ERROR, "--auth-file %s", err);
            return -1;
        }
        log_line(LEVEL_INFO, "%zu API keys from %s; every request needs one", auth_count(s->auth),
                 cfg->auth_file);
    } else if (cfg->insecure_no_auth) {
        log_line(LEVEL_WARN, "WARNING: --insecure-no-auth: anyone who reaches %s may take or release any "
                             "lock",
                 cfg->listen_host);
    }
    hostcheck_init(&s->hosts, cfg, NULL);
    if (cfg->store_url && open_etcd_credentials(s))
        return -1;
    if (cfg->store_url) {
        if (become_leader(s, &s->cfg, &s->listen_fd))
            return -1;
    } else {
        char boot_id[CLOCK_BOOT_ID_LEN + 1];
        bool have_boot = clock_boot_id(boot_id);
        if (!have_boot)
            log_line(LEVEL_WARN, "the kernel does not say which boot this is: leases held across a restart "
                                 "keep what the wall clock says is left of them");
        char narrowed[1200];
        int n = store_sqlite_narrow(cfg->data_path, narrowed, sizeof narrowed, err, sizeof err);
        if (n < 0) {
            log_line(LEVEL_ERROR, "%s", err);
            return -1;
        }
        if (n > 0)
            log_line(LEVEL_INFO, "made %s readable by its owner only (0600): the database holds every live "
                                 "lease",
                     narrowed);
        s->store = store_sqlite_open(cfg->data_path, have_boot ? boot_id : NULL, err, sizeof err);
        if (!s->store) {
            log_line(LEVEL_ERROR, "cannot open database %s", err);
            return -1;
        }
    }
    const char *where = cfg->store_url ? cfg->store_url : cfg->data_path;
    s->commit = commit_new(s->store, err, sizeof err);
    LocktabLimits limits = {cfg->max_locks, cfg->max_waiters, cfg->max_waiters_per_lock, cfg->lease_history,
                            (int64_t)cfg->forget_idle_s * 1000};
    LocktabHooks hooks = {.ud = s,
                          .changed = on_changed,
                          .granted = on_granted,
                          .timed_out = on_timed_out,
                          .forgotten = on_forgotten,
                          .ended = on_ended,
                          .holder_changed = on_holder_changed,
                          .value_changed = on_value_changed,
                          .waking = on_waking};
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
    s->observed = observed_new();
    /* Before the load: a lock written less than --guard-settle ago waits out the rest. */
    s->guard = guard_new(s);
    s->guard_refused = trail_guard_refused;
    if (!s->commit || !s->locks || !s->fence || !s->guard_marks || !s->revoked || !s->audit || !s->events || !s->streams ||
        !s->watches || !s->observed || !s->guard) {
        log_line(LEVEL_ERROR, "start-up failed: %s", s->commit ? "out of memory" : err);
        return -1;
    }
    LoadCtx ctx = {s, clock_now(), 0, 0, 0};
    /* From the wall clock, as event seqs (events.c): a lock's index from
     * before a restart stays below its index after. */
    locktab_start_index(s->locks, (uint64_t)ctx.now.wall_ms * 1000);
    StoreLoad cb = {&ctx, load_history_seq, load_record};
    commit_keep_history(s->commit, cfg->lease_history);
    uint64_t last_token;
    if (store_load(s->store, &cb, &last_token)) {
        log_line(LEVEL_ERROR, "cannot load %s: %s", where, store_error(s->store));
        return -1;
    }
    if (!auditlog_load_done(s->audit, on_audit_dropped, s)) {
        log_line(LEVEL_ERROR, "cannot load %s: out of memory for the audit trail", where);
        return -1;
    }
    locktab_raise_last_token(s->locks, last_token);
    s->metrics.since_ms = ctx.now.wall_ms;
    locktab_tick(s->locks, &ctx.now); /* ends the leases that expired while the server was down */
    log_line(LEVEL_INFO, "loaded %zu locks and semaphores (%zu leases held, %zu expired while down), last token "
                         "%llu, from %s",
             ctx.locks, locktab_held(s->locks), ctx.held - locktab_held(s->locks),
             (unsigned long long)locktab_last_token(s->locks), where);
    if (cfg->min_token > locktab_last_token(s->locks)) {
        /* The floor is durable before anything can reveal a token above it. */
        locktab_raise_last_token(s->locks, cfg->min_token);
        commit_counter(s->commit, cfg->min_token);
        if (commit_sync(s->commit) < 0) {
            log_line(LEVEL_ERROR, "cannot store --min-token %llu: %s", (unsigned long long)cfg->min_token,
                     commit_error(s->commit));
            return -1;
        }
        log_line(LEVEL_INFO, "--min-token %llu: the next token is %llu", (unsigned long long)cfg->min_token,
                 (unsigned long long)cfg->min_token + 1);
    }
    if (cfg->access_log && !(s->access_log = accesslog_open(cfg->access_log, err, sizeof err))) {
        log_line(LEVEL_ERROR, "%s", err);
        return -1;
    }
    s->app = dispatch_app();
    if (!(s->peers = peers_new(cfg->peer_max_connections, cfg->peer_max_half_sent))) {
        log_line(LEVEL_ERROR, "start-up failed: out of memory");
        return -1;
    }
    if (http_start(s))
        return -1;
    s->loop = loop_new();
    if (!s->loop) {
        log_line(LEVEL_ERROR, "event loop setup: %s", strerror(errno));
        return -1;
    }
    s->proxy = proxy_new(s->loop, cfg->guard_timeout_s, cfg->cacert);
    if (!s->proxy) {
        log_line(LEVEL_ERROR, "cannot initialise libcurl (or out of memory)");
        return -1;
    }
    if (!guard_open(s->guard, err, sizeof err)) {
        log_line(LEVEL_ERROR, "%s", err);
        return -1;
    }
    for (size_t i = 0; i < cfg->nguards; i++)
        log_line(LEVEL_INFO, "guard %s -> %s", cfg->guards[i].prefix, cfg->guards[i].upstream);
    char hosts[sizeof s->hosts.names + 200];
    hostcheck_describe(&s->hosts, hosts, sizeof hosts);
    log_line(LEVEL_INFO, "answering %s", hosts);
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
            if (s->suspended.len == 0 && park_connections(s) == 0)
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
        log_line(LEVEL_ERROR, "storage failure at shutdown: %s", commit_error(s->commit));
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
    observed_free(s->observed);
    quota_free(s);
    if (s->store)
        store_close(s->store);
    /* Last: resigning lets the next gateway lead, after everything is committed. */
    if (s->election) {
        char leader[512];
        if (election_role(s->election, leader, sizeof leader) == ROLE_LEADER && !s->deposed)
            log_line(LEVEL_INFO, "stopped serving; resigning the leadership of %s (the next candidate leads at once)",
                     s->cfg.store_url);
    }
    election_free(s->election);
    if (s->deposed_fd >= 0)
        close(s->deposed_fd);
    if (s->reload_fd >= 0)
        close(s->reload_fd);
    accesslog_close(s->access_log);
    tls_clear(&s->tls);
    auth_unref(s->auth);
    etcd_auth_free(s->etcd_auth); /* after every etcd client is gone */
}
