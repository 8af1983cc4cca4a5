/* etcd_compact — when and where the leader compacts etcd's history; see etcd_compact.h. */
#include "store/etcd_compact.h"

#include <string.h>

void etcd_compact_init(EtcdCompact *c, int64_t interval_ms, uint64_t bytes)
{
    memset(c, 0, sizeof *c);
    c->interval_ms = interval_ms;
    c->bytes = bytes;
    c->tick_at_ms = -1; /* the first commit starts the first interval */
}

int64_t etcd_compact_note(EtcdCompact *c, int64_t now_ms, int64_t rev, uint64_t n)
{
    c->written += n;
    int64_t target = 0;
    if (c->interval_ms) {
        if (c->tick_at_ms < 0) {
            c->tick_at_ms = now_ms;
            c->tick_rev = rev;
        } else if (now_ms - c->tick_at_ms >= c->interval_ms) {
            /* One interval has passed since tick_rev was seen: it goes. */
            target = c->tick_rev;
            c->tick_at_ms = now_ms;
            c->tick_rev = rev;
        }
    }
    if (c->bytes) {
        uint64_t since = c->written - c->base_written;
        if (!c->half_rev && since >= c->bytes / 2) {
            c->half_rev = rev;
            c->half_written = c->written;
        }
        if (c->half_rev && c->written - c->half_written >= c->bytes / 2 && c->half_rev > target) {
            /* At least bytes/2 of writes stay after half_rev. */
            target = c->half_rev;
        }
    }
    return target > c->compacted ? target : 0;
}

void etcd_compact_done(EtcdCompact *c, int64_t rev)
{
    if (rev > c->compacted)
        c->compacted = rev;
    if (c->half_rev && c->half_rev <= rev) {
        /* What was written after half_rev is history still kept: it counts
         * towards the next compaction, whose half point comes at once. */
        c->base_written = c->half_written;
        c->half_rev = 0;
    }
}
