/*
 * election — one leader among the gateways that share an etcd prefix, elected
 * as etcd's own election API elects (no consensus of ours).
 *
 * A gateway grants itself an etcd lease of --leader-ttl seconds and keeps it
 * alive from a thread of its own; it campaigns under PREFIX/leader: it puts
 * its key (PREFIX/leader/<lease hex>) bound to that lease, its advertised URL
 * as the value, and leads once every older candidate's key is gone. That is
 * the rule and the key layout of etcd's election API, without its campaign
 * call, which cannot be bounded (election_campaign says why). The key lives
 * as long as the lease. Its create revision goes into every commit's
 * compare (store_etcd.c), so writes are safe whatever the clocks do.
 *
 * Nothing is answered from memory on the strength of the lease: every answer
 * that reveals state waits for a transaction fenced on the leader key that
 * committed after the request was complete (a commit, or a barrier: commit.h).
 * So the lease's timing protects nothing, and a keepalive that gets no answer
 * proves nothing either: etcd cannot expire a lease while it has no leader,
 * and a new etcd leader renews every lease when it takes over. The keeper
 * therefore does not give leadership up when keepalives go unanswered for a
 * while; it goes on asking, each attempt (a quarter of the TTL) at the next
 * member. Only a leader that has heard nothing for two TTLs gives up (and
 * revokes its lease, which reaches etcd when only etcd's answers are lost):
 * etcd with its default timings elects a new leader within 1-3 s, so such a
 * silence means this gateway is cut off from etcd, and what it holds would
 * only wait for commits whose answers it cannot see.
 *
 * Leadership is lost only when etcd says so. A keepalive answered TTL 0 is
 * checked before it is believed: a member may answer it for a lease that
 * lives (etcd 3.4's leader that resumes after a pause, before it learns it no
 * longer leads, answers TTL 0 for leases granted meanwhile). The leader reads
 * its own key (a linearizable range: only a quorum's leader answers it): if
 * the key stands, the lease lives. If it is gone, the lease is too: etcd 3.4
 * before 3.4.31 (Debian 12 has 3.4.23) lets that resumed leader revoke the
 * leases that ran out in its view while it was paused, alive or not (etcd
 * issue 15247), so a pause of the etcd leader can end the gateways' leases,
 * all or some. The leader then leads again under a new lease and key: a
 * candidate whose key became the oldest while the leader it followed still
 * says (/healthz) that it leads waits a moment for that leader's new key and
 * steps behind it (deletes its own key, to make it again), so the new key
 * becomes the oldest; the store takes it for its fence once the commit mark
 * proves that no one wrote in between (election_refence, store_etcd.c).
 * Otherwise (another gateway leads, or the lease lives but the key was
 * deleted) on_lost is called once, on the keepalive thread: the gateway
 * answers 503 to what it holds and exits (a supervisor restarts it as a
 * candidate). A gateway that does not lead and finds its lease gone
 * (checked with LeaseTimeToLive on another member) takes a new one one TTL
 * later, so that a leader whose lease ended with it comes first, and goes on
 * campaigning. Whoever ends up leading, commits are fenced: only liveness
 * rides on these rules.
 *
 * A leader also reads its own key after every keepalive that renewed its
 * lease: a key deleted under a live lease (an operator forcing an election)
 * means another may lead, and an idle leader, with no commit to find out,
 * would otherwise go on saying it leads (/healthz) indefinitely; it gives up
 * within TTL/3 instead. Etcd that does not answer at start is waited for:
 * the keeper asks for the lease until it is granted, and the campaign waits
 * for it (the gateway is not ready meanwhile). Every gateway also looks at
 * PREFIX/auth/reload every second, so that one reloading its API keys has
 * every other reload its own (election_announce_reload).
 */
#ifndef LEASEGATE_ELECTION_H
#define LEASEGATE_ELECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/etcd.h"

typedef enum ElectionRole { ROLE_CANDIDATE, ROLE_FOLLOWER, ROLE_LEADER } ElectionRole;

typedef struct Election Election;

/* Starts the keepalive thread, which takes the lease: at once when etcd
 * answers, else as soon as it does (election_renewed is false until then;
 * the campaign waits for it). advertise is the URL other gateways and
 * clients see as the leader's. on_lost(ud, why) is called at most once, on
 * the keepalive thread, and only while this gateway leads. NULL with the
 * reason in err when etcd answered and refused the lease (a certificate, a
 * login, a permission: waiting mends none of them), or out of memory. */
typedef struct ElectionHooks {
    void (*on_lost)(void *ud, const char *why);
    /* Another gateway on the prefix reloaded its API keys (it bumped
     * PREFIX/auth/reload, election_announce_reload): this one should reload
     * its own. Keepalive thread; NULL: ignored. */
    void (*on_reload)(void *ud);
    void *ud;
} ElectionHooks;

Election *election_new(const EtcdUrl *url, const char *advertise, unsigned ttl_s, const ElectionHooks *hooks,
                       char *err, size_t errlen);
/* Resigns (revokes the lease, so that the next candidate wins at once) and
 * stops the thread. Call only once nothing more will be committed. */
void election_free(Election *e);
/* A gateway that does not lead and is stopping (draining) takes no further
 * part: the keepalive thread revokes its lease (its candidate key goes with
 * it) and takes no new one; a campaign waits for its cancellation. It goes
 * on observing the leader, for the forwards it still makes. Any thread. */
void election_resign(Election *e);
/* This gateway reloaded its keys (SIGHUP): the keepalive thread bumps
 * PREFIX/auth/reload, so that every other gateway on the prefix reloads its
 * own (on_reload) within about a second. Any thread; returns at once. */
void election_announce_reload(Election *e);

/* Blocks until this gateway leads (0), or -1 with the reason in err when
 * cancelled(ud) turned true. Transient etcd failures are retried; no call
 * waits on one member for more than a second, so a member that is paused or
 * cut off delays the campaign, never stops it, while others answer. */
int election_campaign(Election *e, bool (*cancelled)(void *ud), void *ud, char *err, size_t errlen);

/* The role, and the leader's advertised URL ("" when unknown). Any thread. */
ElectionRole election_role(Election *e, char *leader_url, size_t len);
const char *election_role_name(ElectionRole r);
/* After a won campaign: the leader key (base64) and its create revision. */
const char *election_key_b64(const Election *e);
long long election_revision(const Election *e);
/* The store found the leader key with create revision old_rev gone (a fence
 * failed). Blocks, at most timeout_ms, until the keepalive thread knows
 * whether this gateway leads again under a new key: 0 with *key_b64 (the new
 * key in base64, the caller's to free) and *rev, or -1 when it does not (then
 * on_lost has been, or is being, called) or did not find out in time. Any
 * thread but the keepalive thread. */
int election_refence(Election *e, long long old_rev, char **key_b64, long long *rev, long timeout_ms);
/* How long this gateway has led, in ms (0 when it does not lead). */
int64_t election_leading_ms(const Election *e);
/* How long ago, in ms, this gateway last saw the leadership change: it won,
 * or the leader it observes changed (or went; since start when it never saw one). */
int64_t election_leader_seen_ms(Election *e);
/* Whether this gateway's lease was renewed within its TTL: now is before
 * the send time of the last keepalive that renewed it plus the TTL (etcd
 * restarts the TTL when it processes the keepalive, after it was sent). If
 * not, etcd may have ended the lease and another gateway may lead: a hint to
 * refuse new requests early (503) rather than hold them until a barrier
 * fails. No answer relies on it. Any thread. */
bool election_renewed(const Election *e);
/* Leases etcd ended under this gateway that it replaced without giving up
 * its role (see above), for /metrics. Any thread. */
uint64_t election_leases_replaced(const Election *e);

#endif
