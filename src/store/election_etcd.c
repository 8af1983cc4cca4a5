/* election_etcd — leadership over etcd; see include/leasegate/election.h. */
#include "leasegate/election.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct Election {
    EtcdUrl url;
    char *name_b64;      /* PREFIX/leader, owned */
    char *advertise_b64; /* owned */
    char lease_id[32];   /* decimal, as etcd's gateway writes int64s */
    unsigned ttl_s;
    void (*on_lost)(const char *why);
    EtcdClient *keeper_etcd; /* the keepalive thread's */
    pthread_t keeper;
    bool keeper_started;
    pthread_mutex_t mu;  /* guards stop (with cv) and leader_url */
    pthread_cond_t cv;
    bool stop;
    char leader_url[512]; /* the leader's advertised URL, as last observed */
    int64_t leader_seen;  /* monotonic ms at which leader_url last changed (guarded by mu) */
    /* Monotonic ms: the lease lives at least until alive_until; reads are
     * safe until fresh_until (election.h). Written by the keeper only. */
    _Atomic int64_t alive_until, fresh_until;
    _Atomic bool leading;
    /* Set once by election_campaign before leading turns true. */
    char *key_b64;
    long long revision;
    int64_t leading_since; /* monotonic ms */
};

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

const char *election_role_name(ElectionRole r)
{
    return r == ROLE_LEADER ? "leader" : r == ROLE_FOLLOWER ? "follower" : "candidate";
}

/* One keepalive, sent at `sent`: the bounds move on when etcd renewed the
 * lease. 1 renewed, 0 the lease is gone, -1 no answer (err). */
static int keep_alive(Election *e, int64_t sent, char *err, size_t errlen)
{
    json_t *resp;
    if (etcd_call(e->keeper_etcd, "/v3/lease/keepalive", json_pack("{s:s}", "ID", e->lease_id), &resp, err, errlen))
        return -1;
    long long ttl = 0;
    bool ok = etcd_int_field(json_object_get(resp, "result"), "TTL", &ttl);
    json_decref(resp);
    if (!ok) {
        snprintf(err, errlen, "a keepalive answer without a TTL");
        return -1;
    }
    if (ttl <= 0)
        return 0;
    int64_t t_ms = (ttl < (long long)e->ttl_s ? ttl : (long long)e->ttl_s) * 1000;
    atomic_store(&e->alive_until, sent + t_ms);
    atomic_store(&e->fresh_until, sent + t_ms - t_ms / 5);
    return 1;
}

/* Who leads, for /healthz while this gateway does not. */
static void observe_leader(Election *e)
{
    json_t *resp;
    char err[300], url[sizeof e->leader_url] = "";
    if (!etcd_call(e->keeper_etcd, "/v3/election/leader", json_pack("{s:s}", "name", e->name_b64), &resp, err,
                   sizeof err)) {
        const char *v64 = json_string_value(json_object_get(json_object_get(resp, "kv"), "value"));
        size_t len;
        char *v = v64 ? etcd_b64_decode(v64, &len) : NULL;
        if (v && strlen(v) == len && len < sizeof url)
            memcpy(url, v, len + 1);
        free(v);
    }
    json_decref(resp);
    pthread_mutex_lock(&e->mu);
    if (strcmp(e->leader_url, url)) {
        memcpy(e->leader_url, url, sizeof url);
        e->leader_seen = mono_ms();
    }
    pthread_mutex_unlock(&e->mu);
}

/* How often a gateway that does not lead asks who does: a follower forwards
 * to the old leader's URL (and answers 503 for it) until it sees the new one. */
#define OBSERVE_MS 250

static void *keeper_main(void *arg)
{
    Election *e = arg;
    const int64_t interval_ms = (int64_t)e->ttl_s * 1000 / 3;
    int64_t next_keepalive = mono_ms();
    for (;;) {
        if (mono_ms() >= next_keepalive) {
            char err[400];
            int64_t sent = mono_ms();
            next_keepalive = sent + interval_ms;
            int rc = keep_alive(e, sent, err, sizeof err);
            char why[600] = "";
            if (rc == 0)
                snprintf(why, sizeof why, "the etcd lease %s expired (keepalive answered TTL 0)", e->lease_id);
            else if (rc < 0 && mono_ms() >= atomic_load(&e->alive_until))
                snprintf(why, sizeof why, "no keepalive of the etcd lease %s succeeded within its TTL (%s)",
                         e->lease_id, err);
            if (why[0]) {
                atomic_store(&e->fresh_until, 0);
                e->on_lost(why);
                return NULL;
            }
        }
        bool leading = atomic_load(&e->leading);
        if (!leading)
            observe_leader(e);
        /* The leader wakes for its keepalives only; the others also every
         * OBSERVE_MS, to see a new leader soon after a failover. */
        int64_t wait_ms = next_keepalive - mono_ms();
        if (!leading && wait_ms > OBSERVE_MS)
            wait_ms = OBSERVE_MS;
        if (wait_ms < 0)
            wait_ms = 0;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + (wait_ms % 1000) * 1000000;
        until.tv_sec += (time_t)(wait_ms / 1000 + ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        pthread_mutex_lock(&e->mu);
        while (!e->stop && pthread_cond_timedwait(&e->cv, &e->mu, &until) == 0)
            ;
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop)
            return NULL;
    }
}

static int grant_lease(Election *e, char *err, size_t errlen)
{
    json_t *resp;
    char why[400];
    int64_t sent = mono_ms();
    if (etcd_call(e->keeper_etcd, "/v3/lease/grant", json_pack("{s:I}", "TTL", (json_int_t)e->ttl_s), &resp, why,
                  sizeof why)) {
        snprintf(err, errlen, "cannot reach etcd to take a lease: %s", why);
        return -1;
    }
    long long id = 0, ttl = 0;
    bool ok = etcd_int_field(resp, "ID", &id) && etcd_int_field(resp, "TTL", &ttl) && id != 0 && ttl > 0;
    json_decref(resp);
    if (!ok) {
        snprintf(err, errlen, "etcd granted no lease");
        return -1;
    }
    snprintf(e->lease_id, sizeof e->lease_id, "%lld", id);
    int64_t t_ms = (ttl < (long long)e->ttl_s ? ttl : (long long)e->ttl_s) * 1000;
    /* Granted after it was asked for: a lower bound, as for a keepalive. */
    atomic_store(&e->alive_until, sent + t_ms);
    return 0;
}

Election *election_new(const EtcdUrl *url, const char *advertise, unsigned ttl_s, void (*on_lost)(const char *why),
                       char *err, size_t errlen)
{
    Election *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->url = *url;
    e->ttl_s = ttl_s;
    e->leader_seen = mono_ms();
    e->on_lost = on_lost;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    char name[300];
    snprintf(name, sizeof name, "%s/leader", url->prefix);
    e->name_b64 = etcd_b64_encode(name, strlen(name));
    e->advertise_b64 = etcd_b64_encode(advertise, strlen(advertise));
    /* A keepalive must come back well within the lease's life. */
    e->keeper_etcd = etcd_client_new(url, (long)ttl_s * 1000 / 4);
    if (!e->name_b64 || !e->advertise_b64 || !e->keeper_etcd) {
        snprintf(err, errlen, "out of memory (or libcurl cannot start)");
        election_free(e);
        return NULL;
    }
    if (grant_lease(e, err, errlen)) {
        election_free(e);
        return NULL;
    }
    int rc = pthread_create(&e->keeper, NULL, keeper_main, e);
    if (rc) {
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        election_free(e);
        return NULL;
    }
    e->keeper_started = true;
    return e;
}

void election_free(Election *e)
{
    if (!e)
        return;
    if (e->keeper_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->keeper, NULL);
    }
    if (e->lease_id[0] && e->keeper_etcd) {
        /* Revoking the lease deletes our key: the next candidate wins now,
         * not a TTL later. If it fails, the lease simply expires. */
        json_t *resp;
        char err[300];
        if (etcd_call(e->keeper_etcd, "/v3/lease/revoke", json_pack("{s:s}", "ID", e->lease_id), &resp, err,
                      sizeof err))
            fprintf(stderr, "leasegate: could not resign leadership (the lease expires by itself): %s\n", err);
        json_decref(resp);
    }
    etcd_client_free(e->keeper_etcd);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e->name_b64);
    free(e->advertise_b64);
    free(e->key_b64);
    free(e);
}

/* A candidate's calls: each attempt waits at most this long for one member
 * before the next is tried (etcd.h). A member that is paused (SIGSTOP) or cut
 * off accepts the connection and never answers; one call without a bound
 * waiting on it would keep this gateway from leading for ever. */
#define CAMPAIGN_CALL_MS 1000L
/* How often a candidate asks whether an older candidate's key is left: the
 * time a failover adds to the old leader's lease running out, half of it on
 * average. A range a few times a second per candidate costs etcd little. */
#define CAMPAIGN_POLL_MS 100L
/* After a call that failed on every member: the pause before the next. */
#define CAMPAIGN_RETRY_MS 500L

/* Puts this gateway's candidate key, bound to its lease: 0 with *rev its
 * create revision, or -1 with the reason in err. Safe to apply twice and late
 * (etcd.h): a copy finds the key and writes the same value over it (its
 * create revision stays), or finds the lease gone and is refused. A plain
 * put, not a transaction: a gateway's first /v3/kv/txn is its store's first
 * commit mark (test_etcd.py holds it back to replay it late). */
static int create_key(Election *e, EtcdClient *etcd, const char *key_b64, long long *rev, char *err, size_t errlen)
{
    json_t *req = json_pack("{s:s, s:s, s:s, s:b}", "key", key_b64, "value", e->advertise_b64, "lease", e->lease_id,
                            "prev_kv", 1),
           *resp;
    if (etcd_call(etcd, "/v3/kv/put", req, &resp, err, errlen))
        return -1;
    /* The key as it was, when a copy of this put (its answer lost) made it;
     * else it was made by this put, at the revision in the header. */
    const json_t *prev = json_object_get(resp, "prev_kv");
    bool ok = prev ? etcd_int_field(prev, "create_revision", rev)
                   : etcd_int_field(json_object_get(resp, "header"), "revision", rev);
    json_decref(resp);
    if (!ok || *rev <= 0) {
        snprintf(err, errlen, "etcd's answer to the put of the candidate key has no revision");
        return -1;
    }
    return 0;
}

/* Whether this gateway's key (key_b64, created at *rev) is the oldest under
 * PREFIX/leader/, the rule of etcd's election API: 1 it leads, 0 an older key
 * is left, -1 with the reason in err when etcd did not answer or the key is
 * gone (then *rev is 0: it must be created again). The range is
 * linearizable (etcd's default): a member cut off from the others answers
 * nothing rather than an old state in which the previous leader's key is gone. */
static int key_is_oldest(EtcdClient *etcd, const char *range_b64[2], const char *key_b64, long long *rev, char *err,
                         size_t errlen)
{
    json_t *req = json_pack("{s:s, s:s, s:s, s:s, s:i, s:b}", "key", range_b64[0], "range_end", range_b64[1],
                            "sort_order", "ASCEND", "sort_target", "CREATE", "limit", 1, "keys_only", 1),
           *resp;
    if (etcd_call(etcd, "/v3/kv/range", req, &resp, err, errlen))
        return -1;
    int rc;
    const json_t *oldest = json_array_get(json_object_get(resp, "kvs"), 0);
    const char *key = json_string_value(json_object_get(oldest, "key"));
    long long created = 0;
    if (oldest && (!key || !etcd_int_field(oldest, "create_revision", &created) || created <= 0)) {
        rc = -1;
        snprintf(err, errlen, "a candidate key without a create revision in etcd's answer");
    } else if (oldest && created < *rev) {
        rc = 0;
    } else if (oldest && created == *rev && !strcmp(key, key_b64)) {
        rc = 1;
    } else {
        rc = -1;
        snprintf(err, errlen, "this gateway's candidate key is gone (deleted, or its lease expired)");
        *rev = 0;
    }
    json_decref(resp);
    return rc;
}

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, ms % 1000 * 1000000L};
    nanosleep(&t, NULL);
}

/* Not with etcd's /v3/election/campaign: that call answers only once this
 * gateway leads, so it cannot be bounded, and a member paused or cut off
 * while it waits would keep the gateway from leading for ever, however
 * healthy the other members. Giving up such a call is no cure: etcd resigns a
 * campaign whose caller left, deleting its key, even one another copy of the
 * campaign (sent to the next member) found and leads with. So the candidate
 * does what that call does, in short calls that each move on to the next
 * member when one does not answer: it creates its key, named by its lease as
 * etcd's election names it (PREFIX/leader/<lease in hex>, so gateways that
 * still campaign with etcd's call take part in the same election), and leads
 * once no older key is left. */
int election_campaign(Election *e, bool (*cancelled)(void *ud), void *ud, char *err, size_t errlen)
{
    char prefix[sizeof e->url.prefix + 16], key[sizeof prefix + 24], end[sizeof prefix];
    snprintf(prefix, sizeof prefix, "%s/leader/", e->url.prefix);
    /* etcd gives positive lease ids only (grant_lease wrote this one). */
    snprintf(key, sizeof key, "%s%llx", prefix, (unsigned long long)strtoll(e->lease_id, NULL, 10));
    snprintf(end, sizeof end, "%s/leader0", e->url.prefix); /* '/' + 1: past every key under prefix */
    EtcdClient *etcd = etcd_client_new(&e->url, CAMPAIGN_CALL_MS);
    char *key_b64 = etcd_b64_encode(key, strlen(key)), *prefix_b64 = etcd_b64_encode(prefix, strlen(prefix)),
         *end_b64 = etcd_b64_encode(end, strlen(end));
    if (!etcd || !key_b64 || !prefix_b64 || !end_b64) {
        etcd_client_free(etcd);
        free(key_b64), free(prefix_b64), free(end_b64);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    etcd_client_cancel_when(etcd, cancelled, ud);
    const char *range_b64[2] = {prefix_b64, end_b64};
    long long rev = 0; /* the key's create revision; 0: not known to exist */
    int rc = -1;
    char why[400] = "";
    while (!cancelled(ud)) {
        int standing = rev ? 0 : create_key(e, etcd, key_b64, &rev, why, sizeof why);
        if (standing == 0)
            standing = key_is_oldest(etcd, range_b64, key_b64, &rev, why, sizeof why);
        if (standing == 1) {
            e->key_b64 = key_b64;
            key_b64 = NULL;
            e->revision = rev;
            e->leading_since = mono_ms();
            rc = 0;
            break;
        }
        if (standing < 0 && !cancelled(ud))
            fprintf(stderr, "leasegate: campaign: %s; retrying\n", why);
        pause_ms(standing < 0 ? CAMPAIGN_RETRY_MS : CAMPAIGN_POLL_MS);
    }
    free(key_b64), free(prefix_b64), free(end_b64);
    etcd_client_free(etcd);
    if (rc == 0)
        atomic_store(&e->leading, true);
    else
        snprintf(err, errlen, "stopped while campaigning%s%s", why[0] ? ": " : "", why);
    return rc;
}

bool election_fresh(const Election *e)
{
    return atomic_load(&e->leading) && mono_ms() < atomic_load(&e->fresh_until);
}

ElectionRole election_role(Election *e, char *leader_url, size_t len)
{
    if (atomic_load(&e->leading)) {
        size_t n;
        char *url = etcd_b64_decode(e->advertise_b64, &n);
        snprintf(leader_url, len, "%s", url ? url : "");
        free(url);
        return ROLE_LEADER;
    }
    pthread_mutex_lock(&e->mu);
    snprintf(leader_url, len, "%s", e->leader_url);
    pthread_mutex_unlock(&e->mu);
    return leader_url[0] ? ROLE_FOLLOWER : ROLE_CANDIDATE;
}

const char *election_key_b64(const Election *e) { return e->key_b64; }
long long election_revision(const Election *e) { return e->revision; }

int64_t election_leading_ms(const Election *e)
{
    return atomic_load(&e->leading) ? mono_ms() - e->leading_since : 0;
}

int64_t election_leader_seen_ms(Election *e)
{
    if (atomic_load(&e->leading))
        return mono_ms() - e->leading_since;
    pthread_mutex_lock(&e->mu);
    int64_t since = e->leader_seen;
    pthread_mutex_unlock(&e->mu);
    return mono_ms() - since;
}
