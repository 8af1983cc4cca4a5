/*
 * etcd_compact — when the leader compacts etcd's history, and at which
 * revision.
 *
 * Every etcd transaction keeps the versions it replaced until a compaction
 * removes them: each acquire+release pair leaves about 1.4 KB of them (the
 * lock's record written twice, its history and audit groups). Without
 * compaction etcd's database grows until its quota (--quota-backend-bytes,
 * 2 GiB by default) raises the NOSPACE alarm and every write is refused.
 * Compaction frees the space inside etcd's database for new revisions; the
 * file shrinks only when an operator defragments (docs/high-availability.md).
 *
 * etcd compacts by revision and for the whole cluster: compacting at R drops
 * every version older than R of every key, this lock space's and any other
 * tenant's of a shared etcd. So the leader never compacts to the newest
 * revision; it keeps some history for every reader:
 *   - by time (interval_ms): every interval it compacts at the revision it
 *     saw one interval before (Kubernetes' API server does the same, every
 *     5 minutes), so a watcher or a reader of an old revision that lags by
 *     less than an interval never meets a compacted revision;
 *   - by size (bytes): once it wrote `bytes` since the last compaction, it
 *     compacts at the revision it saw when it had written half of them, so
 *     at least the newest bytes/2 of its writes stay in history. Under a
 *     heavy load that may be seconds of history: the docs say how other
 *     tenants' watchers cope, and how to size this.
 * This lock space's own readers need no history: a new leader's load reads
 * at a pinned revision and goes on at the latest one when it was compacted
 * (store_etcd.c, load_range), and nothing else reads an old revision.
 *
 * The bytes counted are those of the keys and values the leader wrote, plus
 * a per-key overhead: roughly what etcd keeps of each revision. Only the
 * writer thread uses an EtcdCompact; times are monotonic ms.
 */
#ifndef LEASEGATE_ETCD_COMPACT_H
#define LEASEGATE_ETCD_COMPACT_H

#include <stdbool.h>
#include <stdint.h>

/* What etcd keeps of a revision besides its key and value (its revision
 * key, the KeyValue's other fields, the B-tree's share). */
#define ETCD_COMPACT_KEY_OVERHEAD 64

typedef struct EtcdCompact {
    int64_t interval_ms;    /* 0: never by time */
    uint64_t bytes;         /* 0: never by size */
    uint64_t written;       /* bytes written by this leader so far */
    /* By time: the revision seen at the start of the current interval. */
    int64_t tick_at_ms, tick_rev;
    /* By size: bytes written at the last compaction, and the revision seen
     * once half of `bytes` more had been written (0: not yet). */
    uint64_t base_written, half_written;
    int64_t half_rev;
    int64_t compacted;      /* the highest revision compacted (by anyone, as far as known) */
} EtcdCompact;

void etcd_compact_init(EtcdCompact *c, int64_t interval_ms, uint64_t bytes);
/* A commit wrote n bytes and etcd's revision is now rev, at now_ms: the
 * revision to compact at now, or 0. Call etcd_compact_done after compacting. */
int64_t etcd_compact_note(EtcdCompact *c, int64_t now_ms, int64_t rev, uint64_t n);
/* Compacted at rev (or etcd said a compaction at rev or later happened
 * already): the next target is above it. */
void etcd_compact_done(EtcdCompact *c, int64_t rev);

#endif
