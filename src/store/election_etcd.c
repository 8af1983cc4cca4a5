/* election_etcd — leadership over etcd; see election.h. */
#include "store/election.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/headbytes.h"
#include "core/log.h"

struct Election {
    EtcdUrl url;
    char *name_b64;      /* PREFIX/leader, owned */
    char *advertise_b64; /* owned */
    unsigned ttl_s;
    void (*on_lost)(void *ud, const char *why);
    void (*on_reload)(void *ud);
    void *on_lost_ud; /* for both */
    char *reload_b64; /* PREFIX/auth/reload, owned: a gateway that reloads its keys bumps it */
    long long reload_seen; /* its mod revision as last seen (0: absent); -1 until first read */
    int64_t reload_checked_at; /* mono ms */
    EtcdClient *keeper_etcd; /* the keepalive thread's */
    pthread_t keeper;
    bool keeper_started;
    pthread_mutex_t mu; /* guards the fields below down to revision (with cv); the keeper is their only writer */
    pthread_cond_t cv;  /* broadcast: the keeper and election_refence both wait on it */
    bool stop;
    bool resigned;        /* election_resign: no lease any more, no campaign */
    bool check_now;       /* election_refence: the store found the leader key gone; look at once */
    bool announce;        /* election_announce_reload: bump the reload key */
    bool lost;            /* on_lost was called */
    char lease_id[32];    /* decimal, as etcd's gateway writes int64s; replaced when etcd ends the lease;
                             "" until etcd first granted one (election_new) and after a resignation */
    char leader_url[512]; /* the leader's advertised URL, as last observed */
    char followed_url[512]; /* the last one observed that is not this gateway's own (defer_to_leader) */
    int64_t leader_seen;  /* monotonic ms at which leader_url last changed */
    char *key_b64;        /* the leader key, once leading; replaced by a re-lead */
    long long revision;   /* its create revision */
    _Atomic bool leading;
    _Atomic uint64_t leases_replaced;
    /* Monotonic ms: the send time of the last keepalive that renewed the
     * lease, plus the TTL (election_renewed). Written by the keeper only. */
    _Atomic int64_t renewed_until;
    int64_t leading_since; /* monotonic ms; set by election_campaign before leading turns true */
};

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits on e->cv (e->mu held) until the CLOCK_MONOTONIC time until: 0 when
 * woken, ETIMEDOUT. The clock is named in the call (glibc's
 * pthread_cond_clockwait) rather than set on the condition: libfaketime
 * 0.9.10, which the clock-step tests run the gateway under
 * (tests/nemesis/test_clock.py), mistimes pthread_cond_timedwait on a
 * monotonic condition (it returns at once), and leaves this call alone. */
static int cv_wait_until(Election *e, const struct timespec *until)
{
    return pthread_cond_clockwait(&e->cv, &e->mu, CLOCK_MONOTONIC, until);
}

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, ms % 1000 * 1000000L};
    nanosleep(&t, NULL);
}

const char *election_role_name(ElectionRole r)
{
    return r == ROLE_LEADER ? "leader" : r == ROLE_FOLLOWER ? "follower" : "candidate";
}

/* After a keepalive, a check or a re-grant that got no answer: the next try
 * (at the next member) comes this soon. */
#define KEEPER_RETRY_MS 250
/* A leader none of whose keepalives was answered for this many TTLs gives
 * leadership up (election.h). */
#define SILENCE_TTLS 2
/* A failing keepalive is logged at most this often. */
#define KEEPER_LOG_MS 5000
/* A candidate whose key became the oldest because the leader's went, while
 * that leader still says it leads, waits this long for it to put a new key
 * (defer_to_leader: etcd may have revoked a live leader's lease), and the
 * leader's re-lead (relead) gives the candidates ahead of its new key this
 * long plus RELEAD_SLACK_MS to step behind it. The leader finds its lease
 * gone at its next keepalive (TTL/3) and needs a few round trips more. */
static int64_t defer_ms(const Election *e) { return (int64_t)e->ttl_s * 1000 / 3 + 500; }
#define RELEAD_SLACK_MS 2000
/* How long a candidate waits for the leader it followed to say whether it still leads. */
#define DEFER_PROBE_MS 500L

/* PREFIX/leader/ and the end of its range, and this gateway's key under it,
 * named by its lease in hex as etcd's election API names it (etcd gives
 * positive lease ids only). */
static void leader_range(const Election *e, char prefix[300], char end[300])
{
    snprintf(prefix, 300, "%s/leader/", e->url.prefix);
    snprintf(end, 300, "%s/leader0", e->url.prefix); /* '/' + 1: past every key under prefix */
}

/* This gateway's key for its current lease, base64 (the caller's), or NULL. */
static char *own_key_b64(Election *e)
{
    char prefix[300], end[300], key[340];
    leader_range(e, prefix, end);
    pthread_mutex_lock(&e->mu);
    snprintf(key, sizeof key, "%s%llx", prefix, (unsigned long long)strtoll(e->lease_id, NULL, 10));
    pthread_mutex_unlock(&e->mu);
    return etcd_b64_encode(key, strlen(key));
}

/* One keepalive: 1 renewed, 0 answered TTL 0 (not believed yet: see
 * lease_verdict), -1 no answer (err). An attempt that gets nothing goes on at
 * the next member (etcd.c); so does the next call after an unclear answer. */
static int keep_alive(Election *e, char *err, size_t errlen)
{
    json_t *resp;
    int64_t sent = mono_ms();
    if (etcd_call(e->keeper_etcd, "/v3/lease/keepalive", json_pack("{s:s}", "ID", e->lease_id), &resp, err, errlen)) {
        if (e->url.stats)
            atomic_fetch_add(&e->url.stats->keepalive_failures, 1);
        return -1;
    }
    /* The answer of a stream: {"result": ...}, or {"error": ...} when the
     * call failed inside etcd (no leader yet, timed out), which etcd's
     * gateway writes into the stream with status 200. TTL 0 is left out of
     * the result (proto3's JSON): etcd_int_field reads it as 0. */
    const json_t *result = json_object_get(resp, "result");
    long long ttl = 0;
    int rc;
    if (!json_is_object(result) || !etcd_int_field(result, "TTL", &ttl)) {
        const char *msg = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
        snprintf(err, errlen, "a keepalive answered %s", msg ? msg : "without a result");
        rc = -1;
    } else {
        rc = ttl > 0 ? 1 : 0;
    }
    json_decref(resp);
    if (rc != 1)
        etcd_client_next(e->keeper_etcd);
    else
        atomic_store(&e->renewed_until, sent + (int64_t)e->ttl_s * 1000);
    if (rc != 1 && e->url.stats)
        atomic_fetch_add(&e->url.stats->keepalive_failures, 1);
    return rc;
}

/* Whether the lease lives, after a keepalive answered TTL 0 (election.h):
 * 1 it does, 0 it is gone, -1 no answer (err). The leader reads its own key
 * (linearizable: only the quorum's leader serves it), which stands exactly
 * as long as the lease; another gateway asks LeaseTimeToLive (TTL -1: gone),
 * at the next member. */
static int lease_verdict(Election *e, bool leading, char *err, size_t errlen)
{
    json_t *resp;
    if (leading) {
        if (etcd_call(e->keeper_etcd, "/v3/kv/range", json_pack("{s:s, s:b}", "key", e->key_b64, "keys_only", 1),
                      &resp, err, errlen))
            return -1;
        const json_t *kv = json_array_get(json_object_get(resp, "kvs"), 0);
        long long created = 0;
        int rc = kv && etcd_int_field(kv, "create_revision", &created) && created == e->revision ? 1 : 0;
        json_decref(resp);
        return rc;
    }
    if (etcd_call(e->keeper_etcd, "/v3/lease/timetolive", json_pack("{s:s}", "ID", e->lease_id), &resp, err, errlen))
        return -1;
    long long ttl = 0;
    int rc = !json_object_get(resp, "TTL") || !etcd_int_field(resp, "TTL", &ttl) ? -1 : ttl > 0 ? 1 : ttl < 0 ? 0 : -1;
    json_decref(resp);
    if (rc < 0)
        snprintf(err, errlen, "LeaseTimeToLive gave no clear answer");
    return rc;
}

/* Who leads, for /healthz and the forwards while this gateway does not. A
 * call etcd did not answer (timed out, refused, unreachable: an
 * EtcdErrKind) changes nothing: what was seen last stands until etcd says
 * otherwise. Taken for "no leader", one slow answer on a loaded machine
 * made a follower drop every forward in flight (503) and /healthz lose the
 * leader. Where the leader did change meanwhile, a forward to the old one
 * is refused there (it no longer leads) and answered 503, as before. */
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
        json_decref(resp);
    } else if (etcd_client_last_error(e->keeper_etcd) >= 0) {
        return; /* no answer: not "no leader" */
    }
    size_t n;
    char *mine = etcd_b64_decode(e->advertise_b64, &n);
    pthread_mutex_lock(&e->mu);
    if (strcmp(e->leader_url, url)) {
        memcpy(e->leader_url, url, sizeof url);
        e->leader_seen = mono_ms();
        if (e->url.stats)
            atomic_fetch_add(&e->url.stats->leader_changes, 1);
    }
    if (url[0] && mine && strcmp(url, mine))
        memcpy(e->followed_url, url, sizeof url);
    pthread_mutex_unlock(&e->mu);
    free(mine);
}

/* How often a gateway that does not lead asks who does: a follower forwards
 * to the old leader's URL (and answers 503 for it) until it sees the new one. */
#define OBSERVE_MS 250
/* How often every gateway looks whether another reloaded its keys. */
#define RELOAD_POLL_MS 1000

/* The reload key (election.h): bumped when this gateway reloaded its keys
 * (announce), else looked at every RELOAD_POLL_MS; a change made by another
 * gateway calls on_reload. Its first reading only sets what was seen.
 * Keepalive thread. */
static void watch_reload(Election *e, bool announce)
{
    if (!announce && e->reload_seen >= 0 && mono_ms() - e->reload_checked_at < RELOAD_POLL_MS)
        return;
    e->reload_checked_at = mono_ms();
    json_t *resp;
    char err[300];
    if (announce) {
        if (etcd_call(e->keeper_etcd, "/v3/kv/put", json_pack("{s:s, s:s}", "key", e->reload_b64, "value",
                                                              e->advertise_b64),
                      &resp, err, sizeof err)) {
            log_line(LEVEL_WARN, "could not tell the other gateways to reload their keys (they will at their "
                                 "own SIGHUP): %s",
                     err);
            return;
        }
        long long rev = 0;
        if (etcd_int_field(json_object_get(resp, "header"), "revision", &rev) && rev > 0)
            e->reload_seen = rev; /* its own bump: nothing to reload again */
        json_decref(resp);
        return;
    }
    if (etcd_call(e->keeper_etcd, "/v3/kv/range", json_pack("{s:s, s:b}", "key", e->reload_b64, "keys_only", 1), &resp,
                  err, sizeof err))
        return; /* asked again next time */
    long long rev = 0;
    const json_t *kv = json_array_get(json_object_get(resp, "kvs"), 0);
    bool ok = !kv || etcd_int_field(kv, "mod_revision", &rev);
    json_decref(resp);
    if (!ok)
        return;
    bool changed = e->reload_seen >= 0 && rev != e->reload_seen;
    e->reload_seen = rev;
    if (changed && e->on_reload)
        e->on_reload(e->on_lost_ud);
}

/* A new lease of ttl_s, into lease_id. 0, or -1 with the reason in err. */
static int grant_lease(Election *e, char *err, size_t errlen)
{
    json_t *resp;
    char why[400];
    int64_t sent = mono_ms();
    if (etcd_call(e->keeper_etcd, "/v3/lease/grant", json_pack("{s:I}", "TTL", (json_int_t)e->ttl_s), &resp, why,
                  sizeof why)) {
        int kind = etcd_client_last_error(e->keeper_etcd);
        snprintf(err, errlen, "%s: %s",
                 kind == ETCD_ERR_TLS || kind == ETCD_ERR_REFUSED ? "etcd refused to grant a lease"
                                                                  : "cannot reach etcd to take a lease",
                 why);
        return -1;
    }
    long long id = 0, ttl = 0;
    bool ok = etcd_int_field(resp, "ID", &id) && etcd_int_field(resp, "TTL", &ttl) && id != 0 && ttl > 0;
    json_decref(resp);
    if (!ok) {
        snprintf(err, errlen, "etcd granted no lease");
        return -1;
    }
    pthread_mutex_lock(&e->mu);
    snprintf(e->lease_id, sizeof e->lease_id, "%lld", id);
    pthread_mutex_unlock(&e->mu);
    atomic_store(&e->renewed_until, sent + (int64_t)e->ttl_s * 1000); /* a new lease lives its TTL */
    return 0;
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
    char lease[sizeof e->lease_id];
    pthread_mutex_lock(&e->mu);
    memcpy(lease, e->lease_id, sizeof lease);
    pthread_mutex_unlock(&e->mu);
    json_t *req = json_pack("{s:s, s:s, s:s, s:b}", "key", key_b64, "value", e->advertise_b64, "lease", lease,
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

/* Revoking the lease deletes our key: the next candidate wins at once, not a
 * TTL later. If it fails, the lease simply expires. */
static void revoke_lease(Election *e)
{
    json_t *resp;
    char err[300];
    if (etcd_call(e->keeper_etcd, "/v3/lease/revoke", json_pack("{s:s}", "ID", e->lease_id), &resp, err, sizeof err))
        log_line(LEVEL_WARN, "could not revoke the etcd lease %s (it expires by itself): %s", e->lease_id,
                 err);
    json_decref(resp);
}

/* Whether the gateway at url says, within DEFER_PROBE_MS, that it leads
 * (its /healthz: 200 and role leader): it runs and still thinks it leads.
 * One that is dead, paused, stopping (503) or that asks for a key says no. */
static bool says_it_leads(const Election *e, const char *url)
{
    char target[600];
    snprintf(target, sizeof target, "%s/healthz", url);
    CURL *h = curl_easy_init();
    if (!h)
        return false;
    HeadBytes body = {.len = 0};
    if (e->url.cacert)
        curl_easy_setopt(h, CURLOPT_CAINFO, e->url.cacert);
    curl_easy_setopt(h, CURLOPT_URL, target);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, DEFER_PROBE_MS);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, headbytes_keep);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    long status = 0;
    bool ok = curl_easy_perform(h) == CURLE_OK && curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
              status == 200;
    curl_easy_cleanup(h);
    json_t *j = ok ? json_loads(body.text, 0, NULL) : NULL;
    const char *role = json_string_value(json_object_get(j, "role"));
    ok = role && !strcmp(role, "leader");
    json_decref(j);
    return ok;
}

/* The advertised URL of the oldest candidate's key under PREFIX/leader/
 * (empty when there is none), or -1 when etcd did not answer. */
static int oldest_url(EtcdClient *etcd, const char *range_b64[2], char *out, size_t outlen)
{
    json_t *resp;
    char err[300];
    out[0] = '\0';
    if (etcd_call(etcd, "/v3/kv/range",
                  json_pack("{s:s, s:s, s:s, s:s, s:i}", "key", range_b64[0], "range_end", range_b64[1], "sort_order",
                            "ASCEND", "sort_target", "CREATE", "limit", 1),
                  &resp, err, sizeof err))
        return -1;
    const char *v64 = json_string_value(json_object_get(json_array_get(json_object_get(resp, "kvs"), 0), "value"));
    size_t len;
    char *v = v64 ? etcd_b64_decode(v64, &len) : NULL;
    if (v && strlen(v) == len && len < outlen)
        memcpy(out, v, len + 1);
    free(v);
    json_decref(resp);
    return 0;
}

/* etcd ended the lease while this gateway led (election.h): a new lease, a
 * new key under it, and leadership again once that key is the oldest (older
 * candidates step behind it: defer_to_leader), within defer_ms plus
 * RELEAD_SLACK_MS. 0 with the new key published for election_refence, or -1
 * with why (the oldest key's gateway leads, or its key stayed ahead).
 * Keepalive thread. */
static int relead(Election *e, char *why, size_t len)
{
    char prefix[300], end[300], err[400] = "";
    leader_range(e, prefix, end);
    char *prefix_b64 = etcd_b64_encode(prefix, strlen(prefix)), *end_b64 = etcd_b64_encode(end, strlen(end));
    const char *range_b64[2] = {prefix_b64, end_b64};
    char *key_b64 = NULL;
    long long rev = 0;
    int64_t until = mono_ms() + defer_ms(e) + RELEAD_SLACK_MS, kept_at = 0;
    int rc = -1;
    if (!prefix_b64 || !end_b64) {
        snprintf(err, sizeof err, "out of memory");
        until = 0;
    }
    while (mono_ms() < until) {
        if (!key_b64) {
            if (grant_lease(e, err, sizeof err)) {
                pause_ms(CAMPAIGN_POLL_MS);
                continue;
            }
            kept_at = mono_ms();
            if (!(key_b64 = own_key_b64(e))) {
                snprintf(err, sizeof err, "out of memory");
                break;
            }
        }
        int standing = rev ? 0 : create_key(e, e->keeper_etcd, key_b64, &rev, err, sizeof err);
        if (standing == 0)
            standing = key_is_oldest(e->keeper_etcd, range_b64, key_b64, &rev, err, sizeof err);
        if (standing == 1) {
            rc = 0;
            break;
        }
        if (standing == 0) {
            /* Older keys step behind this one when their gateways see it
             * (defer_to_leader); unless the oldest already leads. */
            char url[sizeof e->leader_url];
            if (oldest_url(e->keeper_etcd, range_b64, url, sizeof url) == 0 && url[0] && says_it_leads(e, url)) {
                snprintf(err, sizeof err, "%.300s leads now", url);
                break;
            }
            snprintf(err, sizeof err, "another gateway's candidate key stayed older than the new one: that gateway "
                                      "leads next");
        }
        if (key_b64 && mono_ms() - kept_at >= (int64_t)e->ttl_s * 1000 / 3) {
            /* The new lease lives while this takes (the keepalive thread's
             * own keepalives wait for it). */
            char kerr[300];
            keep_alive(e, kerr, sizeof kerr);
            kept_at = mono_ms();
        }
        pause_ms(CAMPAIGN_POLL_MS);
    }
    free(prefix_b64), free(end_b64);
    if (rc) {
        snprintf(why, len, "etcd ended the lease this gateway led with, and it cannot lead again: %s",
                 err[0] ? err : "out of time");
        if (key_b64)
            revoke_lease(e); /* its key, if put, goes too: it holds up no other candidate */
        free(key_b64);
        return -1;
    }
    pthread_mutex_lock(&e->mu);
    free(e->key_b64);
    e->key_b64 = key_b64;
    e->revision = rev;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_add(&e->leases_replaced, 1);
    if (e->url.stats)
        atomic_fetch_add(&e->url.stats->elections_won, 1);
    log_line(LEVEL_INFO, "etcd ended the lease this gateway led with (an etcd leader resuming after a pause "
                         "revokes the leases that ran out meanwhile in etcd before 3.4.31); leading again under lease %s, "
                         "leader key revision %lld",
             e->lease_id, rev);
    return 0;
}

/* Leadership is lost for good: election_refence stops waiting, the gateway is told. */
static void lose(Election *e, const char *why)
{
    pthread_mutex_lock(&e->mu);
    e->lost = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    e->on_lost(e->on_lost_ud, why);
}

/* The keepalive thread: a keepalive every TTL/3; after one that got no clear
 * answer, another at the next member KEEPER_RETRY_MS later, for as long as it
 * takes (election.h: no answer proves nothing), unless a leader hears
 * nothing for SILENCE_TTLS TTLs. A TTL 0 is checked
 * (lease_verdict); a lease found gone is replaced (relead, or a follower's
 * new grant one TTL later). A gateway that does not lead also asks who does. */
static void *keeper_main(void *arg)
{
    Election *e = arg;
    const int64_t interval_ms = (int64_t)e->ttl_s * 1000 / 3;
    /* Without a lease (etcd did not answer election_new): one is asked for at once. */
    int64_t next_keepalive = mono_ms(), regrant_at = e->lease_id[0] ? 0 : mono_ms(), failing_since = 0,
            logged_at = 0, renewed_at = mono_ms();
    for (;;) {
        pthread_mutex_lock(&e->mu);
        bool check = e->check_now, resigned = e->resigned, announce = e->announce;
        e->check_now = e->announce = false;
        pthread_mutex_unlock(&e->mu);
        bool leading = atomic_load(&e->leading);
        if (leading)
            regrant_at = 0; /* the campaign won: its lease lives (a keepalive checks it) */
        char err[400] = "", why[600] = "";
        if (resigned) {
            if (e->lease_id[0]) {
                revoke_lease(e);
                pthread_mutex_lock(&e->mu);
                e->lease_id[0] = '\0';
                pthread_mutex_unlock(&e->mu);
                atomic_store(&e->renewed_until, 0);
                log_line(LEVEL_INFO, "resigned: this gateway's etcd lease and candidate key are gone");
            }
            regrant_at = 0;
        } else if (regrant_at && mono_ms() >= regrant_at) {
            bool first = !e->lease_id[0];
            if (grant_lease(e, err, sizeof err) == 0) {
                if (first)
                    log_line(LEVEL_INFO, "etcd granted the lease %s%s; campaigning", e->lease_id,
                             failing_since ? " (etcd answers again)" : "");
                else
                    log_line(LEVEL_INFO, "took the new etcd lease %s; campaigning again", e->lease_id);
                if (!first)
                    atomic_fetch_add(&e->leases_replaced, 1);
                regrant_at = failing_since = 0;
                next_keepalive = mono_ms() + interval_ms;
            } else {
                /* etcd down or without a quorum: this gateway waits (not
                 * ready: /readyz), asking again, rather than exit. */
                regrant_at = mono_ms() + KEEPER_RETRY_MS;
                if (!failing_since)
                    failing_since = mono_ms();
                if (mono_ms() - logged_at >= KEEPER_LOG_MS) {
                    logged_at = mono_ms();
                    log_line(LEVEL_WARN, "%s; not ready, asking again every %d ms", err, KEEPER_RETRY_MS);
                }
            }
        } else if (e->lease_id[0] && (check || mono_ms() >= next_keepalive)) {
            int rc = keep_alive(e, err, sizeof err);
            if (rc == 0 && (rc = lease_verdict(e, leading, err, sizeof err)) == 1)
                log_line(LEVEL_INFO, "a keepalive of the etcd lease %s answered TTL 0, but the lease lives; "
                                     "going on",
                         e->lease_id);
            next_keepalive = mono_ms() + (rc == 1 || regrant_at ? interval_ms : KEEPER_RETRY_MS);
            if (rc == 1) {
                renewed_at = mono_ms();
                if (failing_since)
                    log_line(LEVEL_INFO, "the etcd lease %s renewed again after %lld ms without",
                             e->lease_id, (long long)(mono_ms() - failing_since));
                failing_since = 0;
                regrant_at = 0; /* a follower's lease that was thought gone lives after all */
                /* The lease lives; the leader key should stand as long. When
                 * the store found it gone, or it is gone now, it was deleted
                 * (someone made this gateway resign) and another may lead: an
                 * idle leader must not go on saying it leads (/healthz). */
                if (leading && (check || lease_verdict(e, true, err, sizeof err) == 0)) {
                    snprintf(why, sizeof why, "the leader key was deleted (its etcd lease %s lives on)", e->lease_id);
                    lose(e, why);
                    return NULL;
                }
            } else if (rc == 0 && leading) {
                if (relead(e, why, sizeof why)) {
                    lose(e, why);
                    return NULL;
                }
                next_keepalive = mono_ms() + interval_ms;
            } else if (rc == 0 && !regrant_at) {
                log_line(LEVEL_WARN, "etcd ended this gateway's lease %s; it takes a new one in %u s and "
                                     "campaigns again",
                         e->lease_id, e->ttl_s);
                regrant_at = mono_ms() + (int64_t)e->ttl_s * 1000;
            } else if (rc < 0 && leading && mono_ms() - renewed_at >= SILENCE_TTLS * (int64_t)e->ttl_s * 1000) {
                /* Cut off from etcd (election.h): resign, so that when only
                 * etcd's answers are lost another gateway need not wait out
                 * the lease that this one's keepalives still renew. */
                revoke_lease(e);
                snprintf(why, sizeof why, "no keepalive of the etcd lease %s answered for %lld ms (%s): this "
                         "gateway is cut off from etcd; resigned",
                         e->lease_id, (long long)(mono_ms() - renewed_at), err);
                lose(e, why);
                return NULL;
            } else if (rc < 0) {
                if (!failing_since)
                    failing_since = mono_ms();
                if (mono_ms() - logged_at >= KEEPER_LOG_MS) {
                    logged_at = mono_ms();
                    log_line(LEVEL_WARN, "the etcd lease %s not renewed for %lld ms (%s); asking the next "
                                         "member",
                             e->lease_id, (long long)(mono_ms() - renewed_at), err);
                }
            }
        }
        if (!leading)
            observe_leader(e);
        watch_reload(e, announce);
        /* The leader wakes for its keepalives (or a check) and the reload
         * key; the others also every OBSERVE_MS, to see a new leader soon
         * after a failover. */
        int64_t due = regrant_at && regrant_at < next_keepalive ? regrant_at : next_keepalive;
        if (e->reload_checked_at + RELOAD_POLL_MS < due)
            due = e->reload_checked_at + RELOAD_POLL_MS;
        int64_t wait_ms = due - mono_ms();
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
        while (!e->stop && !e->check_now && !e->announce && e->resigned == resigned &&
               cv_wait_until(e, &until) == 0)
            ;
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop)
            return NULL;
    }
}

Election *election_new(const EtcdUrl *url, const char *advertise, unsigned ttl_s, const ElectionHooks *hooks,
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
    e->on_lost = hooks->on_lost;
    e->on_reload = hooks->on_reload;
    e->on_lost_ud = hooks->ud;
    e->reload_seen = -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL); /* waited on with the monotonic clock named (cv_wait_until) */
    char name[300];
    snprintf(name, sizeof name, "%s/leader", url->prefix);
    e->name_b64 = etcd_b64_encode(name, strlen(name));
    e->advertise_b64 = etcd_b64_encode(advertise, strlen(advertise));
    snprintf(name, sizeof name, "%s/auth/reload", url->prefix);
    e->reload_b64 = etcd_b64_encode(name, strlen(name));
    /* A keepalive attempt waits at most a quarter of the lease's life on one
     * member before the next is asked. */
    e->keeper_etcd = etcd_client_new(url, (long)ttl_s * 1000 / 4);
    if (!e->name_b64 || !e->advertise_b64 || !e->reload_b64 || !e->keeper_etcd) {
        snprintf(err, errlen, "out of memory (or libcurl cannot start)");
        election_free(e);
        return NULL;
    }
    /* etcd that does not answer (down, without a quorum) is waited for: the
     * keeper asks again (the gateway is not ready meanwhile). One that
     * answers and refuses (a certificate, a login, a permission) is a
     * mistake no waiting mends: the start fails, saying why. */
    if (grant_lease(e, err, errlen)) {
        int kind = etcd_client_last_error(e->keeper_etcd);
        if (kind == ETCD_ERR_TLS || kind == ETCD_ERR_REFUSED) {
            election_free(e);
            return NULL;
        }
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
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->keeper, NULL);
    }
    if (e->lease_id[0] && e->keeper_etcd)
        revoke_lease(e);
    etcd_client_free(e->keeper_etcd);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e->name_b64);
    free(e->advertise_b64);
    free(e->reload_b64);
    free(e->key_b64);
    free(e);
}

/* A key under PREFIX/leader/ other than mine whose value is url (a gateway's
 * advertised URL): 1 there is one, 0 none, -1 no answer. */
static int key_of_url(EtcdClient *etcd, const char *range_b64[2], const char *mine_b64, const char *url)
{
    json_t *resp;
    char err[300];
    if (etcd_call(etcd, "/v3/kv/range", json_pack("{s:s, s:s, s:i}", "key", range_b64[0], "range_end", range_b64[1],
                                                  "limit", 64),
                  &resp, err, sizeof err))
        return -1;
    int rc = 0;
    size_t i;
    json_t *kv;
    json_array_foreach(json_object_get(resp, "kvs"), i, kv)
    {
        const char *k64 = json_string_value(json_object_get(kv, "key"));
        const char *v64 = json_string_value(json_object_get(kv, "value"));
        size_t len;
        char *v = v64 ? etcd_b64_decode(v64, &len) : NULL;
        if (k64 && strcmp(k64, mine_b64) && v && len == strlen(url) && !memcmp(v, url, len))
            rc = 1;
        free(v);
    }
    json_decref(resp);
    return rc;
}

/* This candidate's key has just become the oldest, but the leader it followed
 * may only have lost its lease to etcd (etcd before 3.4.31 lets its leader,
 * resumed after a pause, revoke live leases: election.h) and be about to lead
 * again under a new key (relead), which is younger than this one. When that
 * leader still says it leads, this candidate waits up to defer_ms for its new
 * key and then steps behind it: it deletes its own key, to make it again
 * later, so that the leader's is the oldest. True when it stepped behind
 * (*rev is then 0). A leader that is dead, stopping or paused does not say
 * so: the candidate leads at once (a paused one costs DEFER_PROBE_MS more). Only
 * liveness rides on this: whoever leads, commits are fenced. */
static bool defer_to_leader(Election *e, EtcdClient *etcd, const char *range_b64[2], const char *key_b64,
                            long long *rev)
{
    char old[sizeof e->followed_url];
    pthread_mutex_lock(&e->mu);
    memcpy(old, e->followed_url, sizeof old);
    pthread_mutex_unlock(&e->mu);
    if (!old[0] || !says_it_leads(e, old))
        return false;
    for (int64_t until = mono_ms() + defer_ms(e); mono_ms() < until; pause_ms(CAMPAIGN_POLL_MS)) {
        if (key_of_url(etcd, range_b64, key_b64, old) != 1)
            continue;
        json_t *resp;
        char err[300];
        if (etcd_call(etcd, "/v3/kv/deleterange", json_pack("{s:s}", "key", key_b64), &resp, err, sizeof err))
            return false;
        json_decref(resp);
        log_line(LEVEL_INFO, "the leader %s leads again under a new key (etcd ended its lease); this "
                             "candidate steps behind it",
                 old);
        *rev = 0;
        return true;
    }
    return false;
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
    char prefix[300], end[300];
    leader_range(e, prefix, end);
    EtcdClient *etcd = etcd_client_new(&e->url, CAMPAIGN_CALL_MS);
    char *prefix_b64 = etcd_b64_encode(prefix, strlen(prefix)), *end_b64 = etcd_b64_encode(end, strlen(end));
    if (!etcd || !prefix_b64 || !end_b64) {
        etcd_client_free(etcd);
        free(prefix_b64), free(end_b64);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    etcd_client_cancel_when(etcd, cancelled, ud);
    const char *range_b64[2] = {prefix_b64, end_b64};
    char *key_b64 = NULL; /* named by the lease it was made for */
    long long rev = 0;    /* the key's create revision; 0: not known to exist */
    int rc = -1;
    char why[400] = "";
    while (!cancelled(ud)) {
        pthread_mutex_lock(&e->mu);
        bool idle = !e->lease_id[0] || e->resigned;
        pthread_mutex_unlock(&e->mu);
        if (idle) {
            /* No lease yet (etcd unreachable; the keeper asks for one), or
             * resigned (draining until stopped): nothing to campaign with. */
            rev = 0;
            pause_ms(CAMPAIGN_POLL_MS);
            continue;
        }
        if (!rev) {
            /* The key is (re)made for the current lease: the keeper replaces
             * a lease that etcd ended (election.h). */
            free(key_b64);
            if (!(key_b64 = own_key_b64(e))) {
                snprintf(why, sizeof why, "out of memory");
                break;
            }
        }
        int standing = rev ? 0 : create_key(e, etcd, key_b64, &rev, why, sizeof why);
        if (standing == 0)
            standing = key_is_oldest(etcd, range_b64, key_b64, &rev, why, sizeof why);
        if (standing == 1 && defer_to_leader(e, etcd, range_b64, key_b64, &rev))
            continue;
        if (standing == 1) {
            pthread_mutex_lock(&e->mu);
            if (e->resigned) { /* resigned meanwhile: its key goes with its lease */
                pthread_mutex_unlock(&e->mu);
                continue;
            }
            e->key_b64 = key_b64;
            e->revision = rev;
            pthread_mutex_unlock(&e->mu);
            key_b64 = NULL;
            e->leading_since = mono_ms();
            rc = 0;
            break;
        }
        if (standing < 0 && !cancelled(ud))
            log_line(LEVEL_WARN, "campaign: %s; retrying", why);
        pause_ms(standing < 0 ? CAMPAIGN_RETRY_MS : CAMPAIGN_POLL_MS);
    }
    free(key_b64), free(prefix_b64), free(end_b64);
    etcd_client_free(etcd);
    if (rc == 0) {
        atomic_store(&e->leading, true);
        if (e->url.stats)
            atomic_fetch_add(&e->url.stats->elections_won, 1);
    } else
        snprintf(err, errlen, "stopped while campaigning%s%s", why[0] ? ": " : "", why);
    return rc;
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

/* Read by the gateway once, before its loop runs: a re-lead (keepalive
 * thread) replaces them later, and the store learns of that from
 * election_refence. */
const char *election_key_b64(const Election *e) { return e->key_b64; }
long long election_revision(const Election *e) { return e->revision; }

int election_refence(Election *e, long long old_rev, char **key_b64, long long *rev, long timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long ns = until.tv_nsec + timeout_ms % 1000 * 1000000L;
    until.tv_sec += (time_t)(timeout_ms / 1000 + ns / 1000000000L);
    until.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&e->mu);
    if (e->revision == old_rev) {
        e->check_now = true;
        pthread_cond_broadcast(&e->cv);
    }
    while (!e->lost && !e->stop && e->revision == old_rev && cv_wait_until(e, &until) == 0)
        ;
    int rc = -1;
    if (!e->lost && e->revision != old_rev && (*key_b64 = strdup(e->key_b64))) {
        *rev = e->revision;
        rc = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

uint64_t election_leases_replaced(const Election *e) { return atomic_load(&e->leases_replaced); }

void election_announce_reload(Election *e)
{
    pthread_mutex_lock(&e->mu);
    e->announce = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void election_resign(Election *e)
{
    pthread_mutex_lock(&e->mu);
    e->resigned = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

bool election_renewed(const Election *e) { return mono_ms() < atomic_load(&e->renewed_until); }

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
