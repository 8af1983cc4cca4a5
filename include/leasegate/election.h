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
 * Reads from memory are safe only while the gateway is sure it still leads.
 * The bound (election_fresh): now < S + T - M, where S is the time, on this
 * machine's monotonic clock, at which the last successful keepalive was
 * *sent*, T the TTL etcd granted in its answer, and M = T/5 the margin.
 * Why the send time: etcd restarts the lease's TTL when it processes the
 * keepalive, which is after S, so the lease cannot expire before S + T in
 * real time; measuring from the answer's arrival would count the round trip
 * as lease time, which is the mistake LeaseGuard (arXiv 2512.15659) warns
 * about. Our key is deleted only when the lease expires (or the gateway
 * resigns), and no other gateway leads before that, so within the bound no
 * one else can have committed anything. M absorbs the difference of clock
 * rates between this machine and etcd's leader (NTP keeps it far below 20%),
 * and the time between the check and the answer leaving. An etcd leader
 * change only extends leases (etcd renews them all on promotion), never
 * shortens them.
 *
 * Leadership is lost when a keepalive says the lease is gone (TTL 0), or
 * when S + T passes without a successful keepalive: on_lost is called once,
 * on the keepalive thread, and must stop the process from answering (the
 * gateway exits; a supervisor restarts it as a candidate).
 */
#ifndef LEASEGATE_ELECTION_H
#define LEASEGATE_ELECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leasegate/etcd.h"

typedef enum ElectionRole { ROLE_CANDIDATE, ROLE_FOLLOWER, ROLE_LEADER } ElectionRole;

typedef struct Election Election;

/* Grants the lease and starts the keepalive thread. advertise is the URL
 * other gateways and clients see as the leader's. NULL with the reason in err
 * (etcd unreachable, out of memory). */
Election *election_new(const EtcdUrl *url, const char *advertise, unsigned ttl_s, void (*on_lost)(const char *why),
                       char *err, size_t errlen);
/* Resigns (revokes the lease, so that the next candidate wins at once) and
 * stops the thread. Call only once nothing more will be committed. */
void election_free(Election *e);

/* Blocks until this gateway leads (0), or -1 with the reason in err when
 * cancelled(ud) turned true. Transient etcd failures are retried; no call
 * waits on one member for more than a second, so a member that is paused or
 * cut off delays the campaign, never stops it, while others answer. */
int election_campaign(Election *e, bool (*cancelled)(void *ud), void *ud, char *err, size_t errlen);

/* True while this gateway can be sure it leads (the bound above). Any thread. */
bool election_fresh(const Election *e);
/* The role, and the leader's advertised URL ("" when unknown). Any thread. */
ElectionRole election_role(Election *e, char *leader_url, size_t len);
const char *election_role_name(ElectionRole r);
/* After a won campaign: the leader key (base64) and its create revision. */
const char *election_key_b64(const Election *e);
long long election_revision(const Election *e);
/* How long this gateway has led, in ms (0 when it does not lead). */
int64_t election_leading_ms(const Election *e);
/* How long ago, in ms, this gateway last saw the leadership change: it won,
 * or the leader it observes changed (or went; since start when it never saw one). */
int64_t election_leader_seen_ms(Election *e);

#endif
