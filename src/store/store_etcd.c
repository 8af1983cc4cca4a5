/*
 * store_etcd — the Store interface on etcd, for a gateway elected leader over
 * etcd (election.h). Every key lives under PREFIX:
 *
 *   PREFIX/meta/last_token    decimal: the token counter where rows no longer vouch for it
 *   PREFIX/meta/commit        the commit mark: "LEADER_REV.PART", both zero-padded to 20
 *                             digits; every transaction applies only while the stored one is
 *                             its predecessor's, and writes its own (commit_part), so a late
 *                             copy of a transaction sent again changes nothing
 *   PREFIX/meta/layout        decimal: the layout of the keys below (LAYOUT), written by every
 *                             leader as it begins; a gateway refuses a lock space whose layout
 *                             is newer than it knows (absent: 1, before every lease had a key)
 *   PREFIX/locks/NAME         a lock's own record: JSON {last_token, delay_until_ms?}. Layout 1
 *                             kept the lock's writer in it too ("holder": the fields of a
 *                             lease below, without kind, name and mode): still read
 *   PREFIX/semaphores/NAME    JSON {last_token, limit}
 *   PREFIX/elections/NAME     JSON {last_token} (layout 3)
 *   PREFIX/holders/TOKEN      one lease, whatever its mode (TOKEN zero-padded to 20 digits, so
 *                             key order is grant order): JSON {kind (0 lock, 1 semaphore), name,
 *                             mode? (1: a reader; left out: a writer or a permit), lease (uuid
 *                             text), owner, token, ttl_ms, acquired_at_ms, expires_at_ms, count,
 *                             metadata (JSON text), request_id?, key?, lock_delay_ms?, permits?
 *                             (a semaphore's lease of more than one permit; layout 3), value? (an
 *                             election's leader's value, JSON text as a string; layout 3)}. Layout 1
 *                             wrote readers and permits here, with "mode" always
 *   PREFIX/values/NAME        a lock's value (layout 3): JSON {value? (the value's JSON text, as a
 *                             string; left out: null), version, token, key?, at_ms, writes? (the
 *                             request_ids of the last writes of the grant of `token`, which a
 *                             retry repeats: valwrites.h's text, as a string; left out: none;
 *                             still layout 3, see below)}
 *   PREFIX/fences/RESOURCE    decimal max token
 *   PREFIX/guard/LOCK         decimal max token the guard let through, a space, and when it last
 *                             let a write through (Unix ms; older gateways wrote the token alone)
 *   PREFIX/floors/BUCKET      decimal floor (BUCKET zero-padded to 10 digits)
 *   PREFIX/revoked/TOKEN      the lock name: a force-released lease's token (TOKEN zero-padded
 *                             to 20 digits), never pruned
 *   PREFIX/history/SEQ        the ended leases of one batch: JSON [{seq, lock, lease, token,
 *                             how, kind?}, ...], SEQ the largest seq in it (zero-padded to 20 digits,
 *                             so key order is seq order: batches commit in order, and every
 *                             seq of a batch is above every seq of the batches before it)
 *   PREFIX/audit/KEY/SEQ      the audit rows of one batch of one API key (auditlog.h): JSON
 *                             [{seq, at_ms, kind, lock, owner, token, key, peer, object?,
 *                             mode?}, ...] (a field left out is 0), SEQ as for the history; KEY
 *                             is "k-" and the key's name, or "-" for rows without a key.
 *                             Gateways before per-key retention wrote PREFIX/audit/SEQ, every
 *                             key's rows together: still read, and deleted once all their rows
 *                             are gone (audit_gone_below)
 *
 * One key per batch for each of the two, not one per row: etcd's cost grows
 * with the keys of a transaction more than with their bytes, and a batch of
 * 64 pairs carries about 64 ended leases and 128 audit rows. A batch's rows
 * too many for one value (GROUP_BYTES) go under several keys, each named by
 * its own largest seq. Gateways before this layout wrote one key per row, its
 * value one JSON object without "seq" (the key's); the load reads both, so a
 * store written by them loads as it was (an older gateway cannot read the
 * arrays: it fails its load and exits, committing nothing; upgrade every
 * gateway of a store together).
 *
 * Layouts across a rolling upgrade (docs/high-availability.md): this gateway
 * loads layouts 1 to 3 alike, and writes layout 3 (layout 2 is layout 3
 * without what issue 40 added: leases of several permits, values, elections,
 * each left out of a record or a folder that holds none). A gateway of
 * layout 2 refuses a lock space marked 3 before it loads anything (its
 * check_layout), so that it never loads a lease of three permits as one. A
 * gateway of layout 1 (it has no such check) elected over a lock space a
 * newer one has written fails its load on the first writer's or permit's key
 * (it requires "mode", which layout 2 leaves out for them, so that it can
 * never load a writer it would then keep in two places) and exits, having
 * written nothing but its commit mark.
 *
 * A field added to a record that an older gateway of the same layout may
 * ignore without misreading anything does not move the layout: a value's
 * writes (the retries it answers) is one. A layout-3 gateway before it
 * reads a value record by its named fields and skips the rest, so it loads
 * the value exactly (version, token, key), and answers a retry of one of
 * those writes as a new write, as it always did (refused by the if_version
 * the retry carries). A write it makes puts the whole record without the
 * field: the list is gone, never left to describe writes it did not see, so
 * a newer gateway leading after it repeats none of the older writes (a
 * retry of them is a new write there too) and starts a list at the next
 * write with a request_id. Never a value misread or a lease trusted wrongly.
 * Moving the layout would make every such gateway refuse the lock space and
 * exit, for nothing it could get wrong. A field whose absence an older
 * gateway would misread (permits) moves it. (A build of this layout that
 * kept the last write's id alone, as "request_id", never shipped; no
 * gateway reads that field.)
 *
 * The history is pruned by deleting the range [kind/0, kind/UPTO+1), that is
 * every key whose rows are all at or below UPTO = newest seq - keep: a batch
 * whose rows straddle UPTO stays whole until a later prune, so storage keeps
 * at least the newest `keep` rows and at most one batch and PRUNE_CHUNK more;
 * the load hands every row to the loader, whose rings keep the newest. The
 * audit trail is kept per key: a batch whose rows of key K evicted K's rows
 * up to seq U deletes [audit/K/0, audit/K/U+1), so storage keeps each key's
 * newest rows, and at most one group of a key more.
 *
 * A batch is one etcd transaction whose compare requires the leader key to
 * exist with the create revision this gateway got when it won: a gateway that
 * lost leadership, however paused or partitioned, writes nothing (the compare
 * fails, commit fails, the gateway stops; see commit_done). The same compare
 * requires the commit mark to be the one of the transaction before, so the
 * transactions of one leader apply in the order it sent them, each at most
 * once, whatever copies of them etcd still holds.
 *
 * The counter is max(meta/last_token, every lock's and semaphore's
 * last_token, every lease's token), as in store_sqlite.c. Lease deadlines
 * are on one machine's boot clock and mean nothing to another gateway: they
 * are not stored, and leases load with deadline_ms = -1, so that
 * expires_at_ms (Unix ms) rules (locktab_load_holder).
 *
 * Each record kind's key and codec are described once, in ETCD_KINDS: the
 * writer (record_op) and the loader (LOAD_RANGES, whose decoders are the
 * codecs' other half) read them.
 */
#include "store/store.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

#include "core/leasehist.h"
#include "core/log.h"
#include "core/valwrites.h"
#include "store/election.h"
#include "store/etcd.h"
#include "store/etcd_compact.h"
#include "store/etcd_txn.h"
#include "store/lockspace.h"
#include "store/arena.h"
#include "store/jsondump.h"

/* A transaction carries at most --etcd-max-txn-ops operations (etcd's
 * --max-txn-ops, 128 by default) and stays well below etcd's default
 * --max-request-bytes (1.5 MiB). */
#define TXN_MAX_BYTES (1024 * 1024)
/* Keys per page when loading: big stores load a page at a time. */
#define LOAD_PAGE 500
/* Groups of history and audit rows per page: typically a few KiB each (a
 * batch of 64 clients: about 16 pairs), at most GROUP_BYTES: 4 MiB a page. */
#define GROUP_PAGE 128
/* Ended leases pruned a chunk at a time, as in store_sqlite.c. */
#define PRUNE_CHUNK 256
/* A group of history or audit rows (see group_add) stays below this. */
#define GROUP_BYTES (32 * 1024)
/* A call's attempts (etcd_client_retry): CALL_FIRST_MS each in the first
 * round of endpoints, twice as long in each round after one with a timeout
 * (up to CALL_TIMEOUT_MS), until CALL_BUDGET_MS has passed; then the commit
 * fails and the gateway stops. A batch lost on its way to an etcd leader that died costs about
 * CALL_FIRST_MS plus etcd's election, not CALL_TIMEOUT_MS. */
#define CALL_FIRST_MS 1000L
#define CALL_TIMEOUT_MS 5000L
#define CALL_BUDGET_MS 15000L

typedef struct EtcdStore {
    Store base;
    EtcdClient *etcd;
    char prefix[300];     /* "PREFIX/" */
    Election *election;   /* this gateway's leadership: a new leader key after etcd ended the lease (refence) */
    char *leader_key;     /* owned; replaced by refence */
    long long leader_rev;
    long long load_rev;   /* the revision every page of the load reads; 0: the latest */
    char *mark_key;       /* PREFIX/meta/commit; owned */
    char *mark_key_b64;   /* the same in base64, for the JSON gateway; owned */
    size_t max_txn_ops;   /* --etcd-max-txn-ops: operations per transaction, the mark's put included */
    uint64_t mark_seq;    /* the commit mark of the last part sent (see commit_part) */
    uint64_t pruned_upto; /* history seqs up to this are deleted */
    bool audit_legacy;    /* the load found audit groups of every key together (PREFIX/audit/SEQ) */
    uint64_t load_max_token; /* while loading: the largest last_token and token seen */
    /* While loading: the writers found inside their locks' records (layout 1),
     * as the records that rewrite them in layout 2 (each writer's lease,
     * then its lock's record without it), and their tokens, sorted once the
     * locks are read; their strings in `legacy_strings`. */
    StoreRecord *legacy;
    size_t nlegacy, caplegacy;
    uint64_t *legacy_tokens;
    bool legacy_sorted;
    Arena legacy_strings;
    char *layout_key;     /* PREFIX/meta/layout; owned */
    char *layout_key_b64; /* the same in base64, for the JSON gateway; owned */
    uint64_t audit_legacy_below; /* such groups whose rows are all below this are deleted */
    /* A batch etcd refused part-way for an alarm (STORE_REFUSED): its
     * operations, ordered, and how far they were written; the next commit is
     * the same batch, and goes on from there. */
    struct Resume *resume; /* owned; NULL when none */
    EtcdCompact compact;  /* when to compact etcd's history (compact_after) */
    EtcdStats *stats;     /* the gateway's, borrowed (its compactions count there); NULL: none */
    int64_t compact_retry_ms; /* monotonic: no compaction before this, after one failed */
    int64_t compact_logged_ms; /* monotonic: when compactions were last logged */
    uint64_t compactions; /* since the last log line */
    char err[512];
} EtcdStore;

/* One key's operation in a batch. key and value are owned; value NULL is a
 * delete; range_end (owned, or NULL) makes a delete cover [key, range_end). */
typedef struct Op {
    char *key;
    char *value;
    char *range_end;
    int prio;     /* order among the parts of a split batch, see order_ops */
    size_t order; /* position in the batch: the later record of one key wins */
} Op;

typedef struct Ops {
    Op *items;
    size_t n, cap;
    bool nomem;
} Ops;

struct Resume {
    Ops ops;
    size_t from, parts;
    uint64_t prune_upto, audit_legacy_below;
};

enum { PRIO_COUNTER, PRIO_FLOOR, PRIO_REVOKED, PRIO_HOLDER_GONE, PRIO_PUT, PRIO_DELETE, PRIO_PRUNE };

static char *key_of(const EtcdStore *s, const char *kind, const char *name)
{
    char *key;
    return asprintf(&key, "%s%s/%s", s->prefix, kind, name) < 0 ? NULL : key;
}

/* Takes over key, value and range_end (frees them on failure). */
static void ops_add(Ops *ops, char *key, char *value, char *range_end, int prio)
{
    if (!ops->nomem && ops->n == ops->cap) {
        size_t cap = ops->cap ? ops->cap * 2 : 64;
        Op *p = realloc(ops->items, cap * sizeof *p);
        if (p) {
            ops->items = p;
            ops->cap = cap;
        } else {
            ops->nomem = true;
        }
    }
    bool removal = prio == PRIO_HOLDER_GONE || prio == PRIO_DELETE || prio == PRIO_PRUNE;
    if (ops->nomem || !key || (!removal && !value)) {
        ops->nomem = true;
        free(key);
        free(value);
        free(range_end);
        return;
    }
    ops->items[ops->n] = (Op){key, value, range_end, prio, ops->n};
    ops->n++;
}

static void ops_clear(Ops *ops)
{
    for (size_t i = 0; i < ops->n; i++) {
        free(ops->items[i].key);
        free(ops->items[i].value);
        free(ops->items[i].range_end);
    }
    free(ops->items);
}

static char *decimal(uint64_t v)
{
    char *text;
    return asprintf(&text, "%" PRIu64, v) < 0 ? NULL : text;
}

/* The layout this gateway writes (see the key list at the top): the schema
 * of the lock spaces it creates (lockspace.h). */
#define LAYOUT ETCD_LAYOUT

/* A holder's fields; NULL when out of memory. */
static json_t *holder_json(const Holder *h)
{
    char lease[37];
    uuid_unparse_lower(h->lease, lease);
    json_t *hj = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:s}", "lease", lease, "owner", h->owner, "token",
                           (json_int_t)h->token, "ttl_ms", (json_int_t)h->ttl_ms, "acquired_at_ms",
                           (json_int_t)h->acquired_at_ms, "expires_at_ms", (json_int_t)h->expires_at_ms, "count",
                           (json_int_t)h->count, "metadata", h->metadata);
    if (hj && h->request_id && json_object_set_new(hj, "request_id", json_string(h->request_id)))
        json_decref(hj), hj = NULL;
    if (hj && h->key && json_object_set_new(hj, "key", json_string(h->key)))
        json_decref(hj), hj = NULL;
    if (hj && h->lock_delay_ms && json_object_set_new(hj, "lock_delay_ms", json_integer(h->lock_delay_ms)))
        json_decref(hj), hj = NULL;
    if (hj && h->permits > 1 && json_object_set_new(hj, "permits", json_integer(h->permits)))
        json_decref(hj), hj = NULL;
    if (hj && h->value && json_object_set_new(hj, "value", json_string(h->value)))
        json_decref(hj), hj = NULL;
    return hj;
}

static char *json_text(json_t *j)
{
    char *text = jsondump_whole(j, JSON_COMPACT);
    json_decref(j);
    return text;
}

static char *token_key(const EtcdStore *s, const char *kind, uint64_t token)
{
    char text[24];
    snprintf(text, sizeof text, "%020" PRIu64, token);
    return key_of(s, kind, text);
}

/* Each kind's key (under PREFIX) and a put's value (owned; NULL when out
 * of memory): see the key list at the top. */

/* Each namespace's folder, by LockKind. */
static const char *const NAME_DIRS[LOCK_KINDS] = {[KIND_LOCK] = "locks", [KIND_SEMAPHORE] = "semaphores",
                                                  [KIND_ELECTION] = "elections"};

static char *lock_key(const EtcdStore *s, const StoreRecord *r) { return key_of(s, NAME_DIRS[r->lock.kind], r->lock.name); }

static char *lock_value(const StoreRecord *r)
{
    const StoreLock *l = &r->lock;
    json_t *j = l->kind == KIND_SEMAPHORE
                    ? json_pack("{s:I, s:I}", "last_token", (json_int_t)l->last_token, "limit", (json_int_t)l->limit)
                    : json_pack("{s:I}", "last_token", (json_int_t)l->last_token);
    if (j && l->kind == KIND_LOCK && l->delay_until_ms &&
        json_object_set_new(j, "delay_until_ms", json_integer(l->delay_until_ms)))
        json_decref(j), j = NULL;
    return json_text(j);
}

static char *holder_key(const EtcdStore *s, const StoreRecord *r) { return token_key(s, "holders", r->holder.holder.token); }

static char *holder_value(const StoreRecord *r)
{
    const StoreHolder *x = &r->holder;
    json_t *j = holder_json(&x->holder);
    if (j && (json_object_set_new(j, "kind", json_integer(x->kind)) || json_object_set_new(j, "name", json_string(x->name)) ||
              (x->holder.mode && json_object_set_new(j, "mode", json_integer(x->holder.mode)))))
        json_decref(j), j = NULL;
    return json_text(j);
}

static char *value_key(const EtcdStore *s, const StoreRecord *r) { return key_of(s, "values", r->value.name); }

static char *value_value(const StoreRecord *r)
{
    const StoreValue *v = &r->value;
    json_t *j = json_pack("{s:I, s:I, s:I}", "version", (json_int_t)v->version, "token", (json_int_t)v->token,
                          "at_ms", (json_int_t)v->at_ms);
    if (j && v->text && json_object_set_new(j, "value", json_string(v->text)))
        json_decref(j), j = NULL;
    if (j && v->key && json_object_set_new(j, "key", json_string(v->key)))
        json_decref(j), j = NULL;
    if (j && v->writes && json_object_set_new(j, "writes", json_string(v->writes)))
        json_decref(j), j = NULL;
    return json_text(j);
}

static char *fence_key(const EtcdStore *s, const StoreRecord *r) { return key_of(s, "fences", r->fence.name); }
static char *fence_value(const StoreRecord *r) { return decimal(r->fence.max_token); }
static char *guard_mark_key(const EtcdStore *s, const StoreRecord *r) { return key_of(s, "guard", r->guard_mark.name); }

static char *guard_mark_value(const StoreRecord *r)
{
    char *text;
    return asprintf(&text, "%" PRIu64 " %" PRId64, r->guard_mark.max_token, r->guard_mark.at_ms) < 0 ? NULL : text;
}

static char *floor_key(const EtcdStore *s, const StoreRecord *r)
{
    char bucket[16];
    snprintf(bucket, sizeof bucket, "%010" PRIu32, r->floor.bucket);
    return key_of(s, "floors", bucket);
}

static char *floor_value(const StoreRecord *r) { return decimal(r->floor.floor); }
static char *revoked_key(const EtcdStore *s, const StoreRecord *r) { return token_key(s, "revoked", r->revoked.token); }
static char *revoked_value(const StoreRecord *r) { return strdup(r->revoked.lock); }

/* A row of the lease history or of the audit trail, with its seq: an element
 * of a group's array (see the key list at the top). */
static json_t *ended_row(const StoreEnded *e)
{
    char lease[37];
    uuid_unparse_lower(e->lease, lease);
    json_t *j = json_pack("{s:I, s:s, s:s, s:I, s:i}", "seq", (json_int_t)e->seq, "lock", e->lock, "lease", lease,
                          "token", (json_int_t)e->token, "how", e->how);
    if (j && e->kind && json_object_set_new(j, "kind", json_integer(e->kind)))
        json_decref(j), j = NULL;
    return j;
}

static json_t *audit_row(const AuditRow *r)
{
    json_t *j = json_pack("{s:I, s:I, s:i, s:s, s:s, s:I, s:s, s:s}", "seq", (json_int_t)r->seq, "at_ms",
                          (json_int_t)r->at_ms, "kind", r->kind, "lock", r->lock, "owner", r->owner, "token",
                          (json_int_t)r->token, "key", r->key, "peer", r->peer);
    if (j && r->object && json_object_set_new(j, "object", json_integer(r->object)))
        json_decref(j), j = NULL;
    if (j && r->mode && json_object_set_new(j, "mode", json_integer(r->mode)))
        json_decref(j), j = NULL;
    if (j && r->reason && *r->reason && json_object_set_new(j, "reason", json_string(r->reason)))
        json_decref(j), j = NULL;
    return j;
}

static char *seq_key(const EtcdStore *s, const char *kind, uint64_t seq)
{
    char *key;
    return asprintf(&key, "%s%s/%020" PRIu64, s->prefix, kind, seq) < 0 ? NULL : key;
}

/* The rows of one kind (history or audit) of a batch, gathered into one key:
 * PREFIX/kind/LAST, LAST being the largest seq in it, and the value a JSON
 * array of the rows. A group that grows past GROUP_BYTES is closed and the
 * next rows start another (a batch of many thousands of rows, after a long
 * outage or a flood, stays well below etcd's request size). */
typedef struct Group {
    json_t *rows; /* NULL: none open */
    size_t bytes; /* a bound on the size of its text */
    uint64_t last;
} Group;

static void group_end(const EtcdStore *s, Group *g, Ops *ops, const char *kind)
{
    if (!g->rows)
        return;
    char *text = jsondump_whole(g->rows, JSON_COMPACT);
    ops_add(ops, seq_key(s, kind, g->last), text, NULL, PRIO_PUT);
    json_decref(g->rows);
    *g = (Group){0};
}

/* Takes over row (NULL: out of memory). */
static void group_add(const EtcdStore *s, Group *g, Ops *ops, const char *kind, json_t *row, uint64_t seq)
{
    if (!row) {
        ops->nomem = true;
        return;
    }
    /* A row's text is its strings plus its numbers and names; strings are
     * bounded (lock names 256, owner, key and peer below 1 KiB each in audit.h),
     * and an escaped byte takes at most 6. */
    size_t size = 0;
    const char *k;
    json_t *v;
    json_object_foreach(row, k, v) size += 32 + (json_is_string(v) ? 6 * json_string_length(v) : 0);
    if (g->rows && g->bytes + size > GROUP_BYTES)
        group_end(s, g, ops, kind);
    if (!g->rows && !(g->rows = json_array())) {
        json_decref(row);
        ops->nomem = true;
        return;
    }
    if (json_array_append_new(g->rows, row)) {
        ops->nomem = true;
        return;
    }
    g->bytes += size;
    if (seq > g->last)
        g->last = seq;
}

/* Where key's rows go, as a kind for seq_key: "audit/k-NAME", or "audit/-"
 * for rows without a key. */
static void audit_kind(const char *key, char *out, size_t outlen)
{
    snprintf(out, outlen, "audit/%s%s", *key ? "k-" : "-", key);
}

/* The seqs of key's rows the batch evicts: the oldest in *from, the newest
 * returned (0: none). */
static uint64_t audit_dropped_upto(const StoreBatch *b, const char *key, uint64_t *from)
{
    uint64_t upto = 0;
    *from = UINT64_MAX;
    for (size_t i = 0; i < b->n; i++) {
        const StoreRecord *r = &b->records[i];
        if (r->kind == REC_AUDIT && r->removal && !strcmp(r->audit.key, key)) {
            if (r->audit.seq > upto)
                upto = r->audit.seq;
            if (r->audit.seq < *from)
                *from = r->audit.seq;
        }
    }
    return upto;
}

/* The audit rows of a batch, one group (or more) per key, and the deletes of
 * the rows each key evicted. A range delete and a put of one key never
 * overlap (etcd refuses a txn whose operations do): a key's new group holds
 * only rows above what it deletes.
 *
 * The delete of key K's evicted rows spans [audit/K/FROM, audit/K/UPTO+1),
 * FROM being the oldest row the batch evicts, not 0: etcd walks every key a
 * range names, the deleted ones too until it compacts (never, by default), so
 * a range from 0 cost every commit a walk over every audit row ever written
 * (at 64 clients after 25,000 pairs a commit took twice as long, and one
 * client's pairs fell from 490 to 280 a second). No group of K named below
 * FROM is left: a key evicts its rows oldest first, so every row of K below
 * FROM was evicted by an earlier committed batch (or, the rows a load found
 * past --audit-keep, by the first batch after it: auditlog_load_done), whose
 * delete reached the group's name, its newest row. */
static void audit_ops(const EtcdStore *s, const StoreBatch *b, Ops *ops, uint64_t *legacy_below)
{
    *legacy_below = 0;
    /* The keys of the batch, each once: new rows or evictions. */
    const char **keys = calloc(b->n + 1, sizeof *keys);
    size_t nkeys = 0;
    if (!keys) {
        ops->nomem = true;
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->records[i].kind != REC_AUDIT)
            continue;
        const char *k = b->records[i].audit.key;
        size_t j = 0;
        while (j < nkeys && strcmp(keys[j], k))
            j++;
        if (j == nkeys)
            keys[nkeys++] = k;
    }
    for (size_t j = 0; j < nkeys; j++) {
        uint64_t from, upto = audit_dropped_upto(b, keys[j], &from);
        char kind[96];
        audit_kind(keys[j], kind, sizeof kind);
        Group g = {0};
        for (size_t i = 0; i < b->n; i++) {
            const StoreRecord *r = &b->records[i];
            if (r->kind == REC_AUDIT && !r->removal && !strcmp(r->audit.key, keys[j]) && r->audit.seq > upto)
                group_add(s, &g, ops, kind, audit_row(&r->audit), r->audit.seq);
        }
        group_end(s, &g, ops, kind);
        if (upto)
            ops_add(ops, seq_key(s, kind, from), NULL, seq_key(s, kind, upto + 1), PRIO_PRUNE);
    }
    free(keys);
    /* Groups of an older gateway, every key's rows together, named by their
     * largest seq: they go once every row below b->audit_gone_below is gone. */
    uint64_t below = b->audit_gone_below;
    if (s->audit_legacy && below > s->audit_legacy_below + PRUNE_CHUNK) {
        ops_add(ops, seq_key(s, "audit", 0), NULL, seq_key(s, "audit", below), PRIO_PRUNE);
        *legacy_below = below;
    }
}

/* Each kind on etcd, described once: its key and value (see the key list at
 * the top; NULL: grouped, many rows to a key, by batch_ops), and where its
 * puts and removals go among the parts of a split batch (order_ops). A kind
 * missing here is a compile error (ETCD_KIND_<KIND> undefined). */
typedef struct EtcdKind {
    char *(*key)(const EtcdStore *s, const StoreRecord *r);
    char *(*value)(const StoreRecord *r);
    int put_prio, removal_prio;
} EtcdKind;

#define ETCD_KIND_LOCK {lock_key, lock_value, PRIO_PUT, PRIO_DELETE}
#define ETCD_KIND_HOLDER {holder_key, holder_value, PRIO_PUT, PRIO_HOLDER_GONE}
#define ETCD_KIND_VALUE {value_key, value_value, PRIO_PUT, PRIO_DELETE}
#define ETCD_KIND_FENCE {fence_key, fence_value, PRIO_PUT, PRIO_DELETE}
#define ETCD_KIND_GUARD_MARK {guard_mark_key, guard_mark_value, PRIO_PUT, PRIO_DELETE}
#define ETCD_KIND_FLOOR {floor_key, floor_value, PRIO_FLOOR, PRIO_DELETE}
#define ETCD_KIND_ENDED {NULL, NULL, PRIO_PUT, PRIO_PRUNE}
#define ETCD_KIND_REVOKED {revoked_key, revoked_value, PRIO_REVOKED, PRIO_DELETE}
#define ETCD_KIND_AUDIT {NULL, NULL, PRIO_PUT, PRIO_PRUNE}

static const EtcdKind ETCD_KINDS[REC_KINDS] = {
#define ETCD_KIND_ENTRY(K, member, type) [REC_##K] = ETCD_KIND_##K,
    STORE_RECORD_KINDS(ETCD_KIND_ENTRY)
#undef ETCD_KIND_ENTRY
};

/* One record's operation, by its kind's descriptor (grouped kinds apart). */
static void record_op(const EtcdStore *s, const StoreRecord *r, Ops *ops)
{
    const EtcdKind *d = &ETCD_KINDS[r->kind];
    if (d->key)
        ops_add(ops, d->key(s, r), r->removal ? NULL : d->value(r), NULL, r->removal ? d->removal_prio : d->put_prio);
}

/* The batch as one operation per record, in the order SQLite applies them. */
static void batch_ops(const EtcdStore *s, const StoreBatch *b, Ops *ops, uint64_t *prune_upto,
                      uint64_t *audit_legacy_below)
{
    uint64_t last = 0;
    for (size_t i = 0; i < b->n; i++) {
        record_op(s, &b->records[i], ops);
        if (b->records[i].kind == REC_ENDED && b->records[i].ended.seq > last)
            last = b->records[i].ended.seq;
    }
    if (b->counter)
        ops_add(ops, key_of(s, "meta", "last_token"), decimal(b->counter), NULL, PRIO_COUNTER);
    /* Pruning deletes [history/FROM, history/upto+1): every group whose
     * largest seq is at most upto. No put may fall in that range (etcd refuses
     * a txn whose operations overlap): a group holds only seqs above upto (an
     * ended lease at or below it would be pruned at once anyway), so its key,
     * its largest seq, is above upto too. FROM is 0 at the first prune since
     * the load, then the last prune's end: etcd walks the deleted keys of a
     * range too (audit_ops), and every group named up to the last prune's
     * upto went with it. */
    uint64_t keep = b->history_keep, chunk = keep < PRUNE_CHUNK ? keep : PRUNE_CHUNK;
    bool prune = last && keep && last > keep && last - keep >= s->pruned_upto + chunk;
    uint64_t upto = prune ? last - keep : 0;
    *prune_upto = upto;
    Group g = {0};
    for (size_t i = 0; i < b->n; i++) {
        const StoreRecord *r = &b->records[i];
        if (r->kind == REC_ENDED && r->ended.seq > upto)
            group_add(s, &g, ops, "history", ended_row(&r->ended), r->ended.seq);
    }
    group_end(s, &g, ops, "history");
    if (prune)
        ops_add(ops, seq_key(s, "history", s->pruned_upto ? s->pruned_upto + 1 : 0), NULL,
                seq_key(s, "history", upto + 1), PRIO_PRUNE);
    audit_ops(s, b, ops, audit_legacy_below);
}

static int by_key_then_order(const void *a, const void *b)
{
    const Op *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->order < y->order ? -1 : x->order > y->order);
}

static int by_prio_then_order(const void *a, const void *b)
{
    const Op *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* One operation per key (a transaction may not name a key twice): the last
 * record of a key wins, as when SQLite applies them in order. Marks and
 * floors are only ever raised in memory, so the last is also the largest.
 *
 * Then the order of the parts, for a batch split over several transactions:
 * the counter first, then fence floors, then revoked tokens, then the
 * removals of leases, then every put (within them, the order the records
 * were made: a grant's name record before its lease), then deletes, then
 * the history prune. Each part is durable on its own, so a gateway that dies
 * between parts leaves a prefix of them: written in this order, no prefix
 * deletes a row before what vouches for its token (the counter for a name,
 * the floor for a fence mark; a lease's token is its name's last_token,
 * whose put comes with the grant, before the lease's) is in, so no token and
 * no mark can go backwards for the next leader, and no prefix frees a
 * force-released lock without its token's revocation (the lease's removal
 * comes after it). Every removal of a lease comes before every new one, and
 * a grant's name record (a semaphore's limit) before its lease, so no prefix
 * holds a new lease beside one the batch ended, or past its limit; should a
 * store hold one all the same, the load keeps the older grants and drops the
 * younger, which no answer revealed (gateway.c). */
static void order_ops(Ops *ops)
{
    qsort(ops->items, ops->n, sizeof *ops->items, by_key_then_order);
    size_t kept = 0;
    for (size_t i = 0; i < ops->n; i++) {
        Op *op = &ops->items[i];
        if (i + 1 < ops->n && !strcmp(op->key, ops->items[i + 1].key)) {
            free(op->key);
            free(op->value);
            free(op->range_end);
            continue;
        }
        ops->items[kept++] = *op;
    }
    ops->n = kept;
    qsort(ops->items, ops->n, sizeof *ops->items, by_prio_then_order);
}

/* One operation into the success branch of txn. */
static void op_write(PbBuf *txn, const Op *op)
{
    if (op->value)
        etcd_txn_put(txn, ETCD_SUCCESS, op->key, op->value);
    else
        etcd_txn_delete(txn, ETCD_SUCCESS, op->key, op->range_end);
}

/* The commit mark of part `seq` of this leader: two zero-padded numbers, so
 * that etcd's byte order of values is the order of (leader, part). */
static void mark_text(const EtcdStore *s, uint64_t seq, char out[48])
{
    snprintf(out, 48, "%020lld.%020" PRIu64, s->leader_rev, seq);
}

/* What etcd's answer to one of this leader's transactions means. */
typedef enum TxnOutcome {
    TXN_APPLIED,    /* its compare held, or a copy of it applied already */
    TXN_FENCED_OUT, /* the leader key is gone or another's: leadership is lost */
    TXN_MARK_MOVED  /* the commit mark is neither its predecessor nor its own */
} TxnOutcome;

/* The one reading of the answer to a transaction that compares the leader
 * key's create revision and the commit mark, writes `mark`, and whose failure
 * branch reads the leader key, then the mark (commit_part, commit_first_mark).
 * A failed compare with the key still this leader's and the mark already
 * `mark` means a copy of the transaction was applied and its answer lost
 * (nothing but this leader writes the mark, and no two of its transactions
 * write the same one): that is success. On TXN_MARK_MOVED, *found is the mark
 * in etcd (the caller frees it; NULL when there is none), else NULL. */
static TxnOutcome txn_outcome(const EtcdStore *s, EtcdTxnAnswer *answer, const char *mark, char **found)
{
    *found = NULL;
    if (answer->succeeded)
        return TXN_APPLIED;
    const EtcdKv *leader = &answer->kv[0], *stored = &answer->kv[1];
    if (!leader->found || leader->create_revision != s->leader_rev)
        return TXN_FENCED_OUT;
    if (stored->found && stored->len == strlen(mark) && !memcmp(stored->value, mark, stored->len))
        return TXN_APPLIED;
    if (stored->found) {
        *found = stored->value; /* taken from the answer */
        answer->kv[1].value = NULL;
    }
    return TXN_MARK_MOVED;
}

/* What every transaction of this leader has: the compare that its leader
 * key is still this gateway's, and the failure branch that reads that key
 * and the commit mark (txn_outcome reads them). The caller adds the compare
 * on the mark. */
static void txn_fence(const EtcdStore *s, PbBuf *txn)
{
    etcd_txn_compare_create(txn, s->leader_key, s->leader_rev);
    etcd_txn_range(txn, ETCD_FAILURE, s->leader_key);
    etcd_txn_range(txn, ETCD_FAILURE, s->mark_key);
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* After a transaction of this leader that wrote `written` bytes and left
 * etcd at `revision`: compacts etcd's history when etcd_compact.h says so.
 * A failed compaction costs nothing but the space it would have freed: it
 * is logged and tried again a while later. */
#define COMPACT_RETRY_MS 10000
#define COMPACT_LOG_MS 60000
static void compact_after(EtcdStore *s, uint64_t written, int64_t revision)
{
    int64_t now = mono_ms(), target = etcd_compact_note(&s->compact, now, revision, written);
    if (!target || now < s->compact_retry_ms)
        return;
    char rev[32], err[400];
    snprintf(rev, sizeof rev, "%lld", (long long)target);
    json_t *resp;
    /* Not physical: etcd answers once the compaction is agreed, and frees the
     * space in the background. */
    if (etcd_call(s->etcd, "/v3/kv/compaction", json_pack("{s:s}", "revision", rev), &resp, err, sizeof err) &&
        !strstr(err, "required revision has been compacted")) {
        s->compact_retry_ms = now + COMPACT_RETRY_MS;
        log_line(LEVEL_WARN, "could not compact etcd's history at revision %s (tried again in %d s): %s", rev,
                 COMPACT_RETRY_MS / 1000, err);
        return;
    }
    json_decref(resp);
    etcd_compact_done(&s->compact, target);
    s->compactions++;
    if (s->stats)
        atomic_fetch_add(&s->stats->compactions, 1);
    if (now - s->compact_logged_ms >= COMPACT_LOG_MS) {
        log_line(LEVEL_INFO, "compacted etcd's history below revision %s (%llu compaction%s since the last such line)",
                 rev, (unsigned long long)s->compactions, s->compactions == 1 ? "" : "s");
        s->compact_logged_ms = now;
        s->compactions = 0;
    }
}

/* One transaction of ops[from, *to): as many as fit in max_txn_ops (with
 * the mark's put) and TXN_MAX_BYTES (at least one), fenced on the leader key
 * and ordered by the commit mark.
 *
 * The commit mark (PREFIX/meta/commit) makes a late copy of a transaction
 * harmless. A call that timed out is sent again to the next member, and the
 * first copy may still be on its way inside etcd (forwarded to the Raft
 * leader): it could be applied after the copy that answered, even after the
 * next batch, and write its older values over newer ones. So every part
 * requires the stored mark to be the one of the part before it, and writes
 * its own: each part applies once, right after the one before, and a copy
 * that comes after its twin or after any later part changes nothing. A
 * failed compare is read by txn_outcome. 0 applied, 1 fenced out (the
 * leader key is gone or another's), 2 refused for an alarm (nothing applied),
 * -1 failed (s->err). */
static int send_part(EtcdStore *s, const Ops *ops, size_t from, size_t *to)
{
    char mark[48], before[48];
    mark_text(s, s->mark_seq, before);
    mark_text(s, s->mark_seq + 1, mark);
    PbBuf txn = {0};
    txn_fence(s, &txn);
    etcd_txn_compare_value(&txn, s->mark_key, before);
    etcd_txn_put(&txn, ETCD_SUCCESS, s->mark_key, mark);
    size_t bytes = 0, i = from;
    for (; i < ops->n && i - from < s->max_txn_ops - 1; i++) {
        const Op *op = &ops->items[i];
        size_t size = strlen(op->key) + (op->value ? strlen(op->value) : 0) + 64;
        if (i > from && bytes + size > TXN_MAX_BYTES)
            break;
        bytes += size;
        op_write(&txn, op);
    }
    *to = i;
    uint64_t written = strlen(s->mark_key) + strlen(mark) + ETCD_COMPACT_KEY_OVERHEAD;
    for (size_t k = from; k < i; k++) {
        const Op *op = &ops->items[k];
        written += strlen(op->key) + (op->value ? strlen(op->value) : 0) + ETCD_COMPACT_KEY_OVERHEAD;
    }
    if (txn.nomem) {
        pb_free(&txn);
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    EtcdTxnAnswer answer;
    char err[400];
    int rc = etcd_txn(s->etcd, &txn, &answer, err, sizeof err);
    pb_free(&txn);
    if (rc && etcd_alarm_name(err)) {
        /* Refused whole, before its compares: nothing of it applied. */
        snprintf(s->err, sizeof s->err, "etcd refuses writes (alarm %s): %s", etcd_alarm_name(err), err);
        return STORE_REFUSED + 1;
    }
    if (rc) {
        snprintf(s->err, sizeof s->err, "etcd txn failed: %s", err);
        return -1;
    }
    char *found;
    TxnOutcome outcome = txn_outcome(s, &answer, mark, &found);
    int64_t revision = answer.revision;
    etcd_txn_answer_free(&answer);
    if (outcome == TXN_MARK_MOVED)
        snprintf(s->err, sizeof s->err, "the commit mark in etcd is %s, not %s: another writer?",
                 found ? found : "(none)", before);
    free(found);
    if (outcome != TXN_APPLIED)
        return outcome == TXN_FENCED_OUT ? 1 : -1;
    s->mark_seq++;
    compact_after(s, written, revision);
    return 0;
}

static int refence(EtcdStore *s, const char *last, const char *sent, bool *applied);

/* send_part, and when its fence fails because etcd ended the lease this
 * gateway led with, the same part again under the new leader key (refence).
 * *fenced_out: leadership is lost (etcd_commit says how much of the batch
 * was written). STORE_REFUSED: etcd refused the part for an alarm. */
static int commit_part(EtcdStore *s, const Ops *ops, size_t from, size_t *to, bool *fenced_out)
{
    for (;;) {
        char last[48], sent[48];
        mark_text(s, s->mark_seq, last);
        mark_text(s, s->mark_seq + 1, sent);
        int rc = send_part(s, ops, from, to);
        if (rc == STORE_REFUSED + 1)
            return STORE_REFUSED;
        if (rc != 1)
            return rc;
        bool applied;
        if (refence(s, last, sent, &applied)) {
            *fenced_out = true;
            return -1;
        }
        if (applied)
            return 0; /* a copy of it applied before the key went */
    }
}

/* The commit mark's mod_revision in etcd now (0 when there is none yet),
 * and, when value is not NULL, its value (the caller's; NULL when none). */
static int mark_read(EtcdStore *s, long long *mod, char **value)
{
    json_t *resp;
    char err[400];
    if (etcd_call(s->etcd, "/v3/kv/range", json_pack("{s:s}", "key", s->mark_key_b64), &resp, err, sizeof err)) {
        snprintf(s->err, sizeof s->err, "etcd: cannot read the commit mark: %s", err);
        return -1;
    }
    const json_t *kv = json_array_get(json_object_get(resp, "kvs"), 0);
    *mod = 0;
    bool ok = !kv || (etcd_int_field(kv, "mod_revision", mod) && *mod > 0);
    if (ok && value) {
        const char *v64 = json_string_value(json_object_get(kv, "value"));
        size_t len;
        *value = v64 ? etcd_b64_decode(v64, &len) : NULL;
        ok = !v64 || *value;
    }
    json_decref(resp);
    if (!ok)
        snprintf(s->err, sizeof s->err, "etcd: the commit mark has no mod_revision (or out of memory)");
    return ok ? 0 : -1;
}

/* At the start of leadership: the mark of this leader's part 0 (REV.0).
 *
 * Written once, by compare-and-swap on the mark's mod_revision as read just
 * before: a copy of this transaction that etcd applies late (after part 1 or
 * later) finds the mark moved and changes nothing. Without that compare, a
 * late copy would set the mark back to REV.0, and a late copy of part 1 would
 * then apply again over newer records: a lost grant, a token given twice.
 * Every part's mark names exactly one transaction only because REV.0 is
 * written once. A failed compare is read by txn_outcome (REV.0 in etcd: a
 * copy applied already). A late copy of an earlier leader's transaction
 * fails on its own leader key. */
static int put_first_mark(EtcdStore *s, long long seen)
{
    char mark[48];
    mark_text(s, 0, mark);
    PbBuf txn = {0};
    txn_fence(s, &txn);
    etcd_txn_compare_mod(&txn, s->mark_key, seen);
    etcd_txn_put(&txn, ETCD_SUCCESS, s->mark_key, mark);
    /* From this leader on, the lock space is in this gateway's layout. */
    char layout[8];
    snprintf(layout, sizeof layout, "%d", LAYOUT);
    etcd_txn_put(&txn, ETCD_SUCCESS, s->layout_key, layout);
    EtcdTxnAnswer answer;
    char err[400];
    int rc = txn.nomem ? (snprintf(err, sizeof err, "out of memory"), -1)
                       : etcd_txn(s->etcd, &txn, &answer, err, sizeof err);
    pb_free(&txn);
    if (rc) {
        snprintf(s->err, sizeof s->err, "etcd: cannot write the commit mark: %s", err);
        return -1;
    }
    char *found;
    TxnOutcome outcome = txn_outcome(s, &answer, mark, &found);
    etcd_txn_answer_free(&answer);
    if (outcome == TXN_FENCED_OUT)
        snprintf(s->err, sizeof s->err, "leadership lost: the leader key is no longer this gateway's");
    else if (outcome == TXN_MARK_MOVED)
        snprintf(s->err, sizeof s->err, "the commit mark in etcd changed to %s while this leader began: "
                 "another writer?", found ? found : "(none)");
    free(found);
    if (outcome != TXN_APPLIED)
        return -1;
    s->mark_seq = 0;
    return 0;
}

static int commit_first_mark(EtcdStore *s)
{
    long long seen;
    return mark_read(s, &seen, NULL) ? -1 : put_first_mark(s, seen);
}

/* How long the writer waits for the keepalive thread to lead again under a
 * new key (election_refence): the budget of a commit. */
#define REFENCE_MS CALL_BUDGET_MS

/* A fence failed: the leader key is gone. When this gateway leads again
 * under a new key (election.h: etcd ended its lease, and its new key is the
 * oldest), the fence moves to that key, provided nothing was written since
 * this store's last transaction: the commit mark must be `last` (that
 * transaction's), or `sent` (the transaction whose fence failed, when a copy
 * of it applied before the key went; then *applied is true). The mark moves
 * to the new key's REV.0 by compare-and-swap (put_first_mark), a transaction
 * fenced on the new key made after the failure: a barrier too. 0, or -1 with
 * s->err (leadership is lost). */
static int refence(EtcdStore *s, const char *last, const char *sent, bool *applied)
{
    char *key_b64, *found = NULL;
    long long rev, seen;
    *applied = false;
    if (election_refence(s->election, s->leader_rev, &key_b64, &rev, REFENCE_MS)) {
        snprintf(s->err, sizeof s->err, "leadership lost: the leader key is no longer this gateway's");
        return -1;
    }
    size_t klen;
    char *key = etcd_b64_decode(key_b64, &klen);
    free(key_b64);
    if (!key || strlen(key) != klen) {
        free(key);
        snprintf(s->err, sizeof s->err, "leadership lost: out of memory taking the new leader key");
        return -1;
    }
    free(s->leader_key);
    s->leader_key = key;
    s->leader_rev = rev;
    if (mark_read(s, &seen, &found))
        return -1;
    *applied = sent && found && !strcmp(found, sent);
    if (!found || (strcmp(found, last) && !*applied)) {
        snprintf(s->err, sizeof s->err, "leadership lost: the commit mark in etcd is %s, not %s, after this "
                 "gateway's lease ended: another gateway led meanwhile",
                 found ? found : "(none)", last);
        free(found);
        return -1;
    }
    free(found);
    if (put_first_mark(s, seen))
        return -1;
    log_line(LEVEL_INFO, "commits go on under the new leader key (revision %lld): nothing was written "
                         "while this gateway had no lease",
             rev);
    return 0;
}

/* The barrier (store.h): the fence of a commit, with nothing to write. Its
 * compare requires the leader key with this leader's create revision and the
 * commit mark of the last transaction; its failure branch reads both (so the
 * transaction, having ranges only, is one that etcd serves as a linearizable
 * read: confirmed by a quorum, and costing no write). Success means that when
 * etcd evaluated it, after this call began, the leader key still stood (no
 * other gateway can have led since this one won: see election.h) and nothing
 * has been committed since this gateway's last transaction. */
static int etcd_barrier(Store *base)
{
    EtcdStore *s = (EtcdStore *)base;
    char mark[48];
    mark_text(s, s->mark_seq, mark);
    PbBuf txn = {0};
    txn_fence(s, &txn);
    etcd_txn_compare_value(&txn, s->mark_key, mark);
    EtcdTxnAnswer answer;
    char err[400];
    int rc = txn.nomem ? (snprintf(err, sizeof err, "out of memory"), -1)
                       : etcd_txn(s->etcd, &txn, &answer, err, sizeof err);
    pb_free(&txn);
    if (rc) {
        snprintf(s->err, sizeof s->err, "etcd: no answer to a barrier: %s", err);
        return -1;
    }
    char *found, sent[48];
    TxnOutcome outcome = txn_outcome(s, &answer, mark, &found);
    etcd_txn_answer_free(&answer);
    /* While a part etcd refused waits to be sent again (s->resume), an
     * earlier attempt of it whose answer was lost may have applied: the mark
     * is then that part's, written by this leader. */
    mark_text(s, s->mark_seq + 1, sent);
    bool applied;
    if (outcome == TXN_FENCED_OUT && refence(s, mark, NULL, &applied) == 0)
        outcome = TXN_APPLIED; /* the move to the new key was made after this barrier began: it is one */
    else if (outcome == TXN_MARK_MOVED && s->resume && found && !strcmp(found, sent))
        outcome = TXN_APPLIED;
    else if (outcome == TXN_MARK_MOVED)
        snprintf(s->err, sizeof s->err, "the commit mark in etcd is %s, not %s: another writer?",
                 found ? found : "(none)", mark);
    free(found);
    return outcome == TXN_APPLIED ? 0 : -1;
}

static int etcd_commit(Store *base, const StoreBatch *b)
{
    EtcdStore *s = (EtcdStore *)base;
    Ops ops = {0};
    uint64_t prune_upto = 0, audit_legacy_below = 0;
    size_t from = 0, parts = 0;
    if (s->resume) {
        /* The batch etcd refused for an alarm, again (store.h): on from the
         * part it refused, with the operations ordered then. */
        ops = s->resume->ops;
        from = s->resume->from;
        parts = s->resume->parts;
        prune_upto = s->resume->prune_upto;
        audit_legacy_below = s->resume->audit_legacy_below;
        free(s->resume);
        s->resume = NULL;
    } else {
        batch_ops(s, b, &ops, &prune_upto, &audit_legacy_below);
        if (ops.nomem) {
            ops_clear(&ops);
            snprintf(s->err, sizeof s->err, "out of memory building an etcd transaction");
            return -1;
        }
        order_ops(&ops);
    }
    /* A batch larger than one transaction goes in parts, in order. It is
     * durable only once every part is in: commit returns 0 only then, and the
     * caller reveals nothing of the batch before (commit.h), so a failure
     * between parts costs only the answers that were held for it. */
    int rc = 0;
    bool fenced = false;
    while (from < ops.n && rc == 0) {
        size_t to;
        rc = commit_part(s, &ops, from, &to, &fenced);
        if (rc == 0) {
            from = to;
            parts++;
        }
    }
    if (rc == STORE_REFUSED && (s->resume = malloc(sizeof *s->resume))) {
        *s->resume = (struct Resume){ops, from, parts, prune_upto, audit_legacy_below};
        return STORE_REFUSED;
    }
    if (rc == STORE_REFUSED) {
        snprintf(s->err, sizeof s->err, "out of memory keeping a batch etcd refused");
        rc = -1;
    }
    if (fenced)
        snprintf(s->err, sizeof s->err,
                 "leadership lost: the leader key is no longer this gateway's (another gateway was elected); "
                 "%s of this batch was written",
                 parts ? "only a part" : "nothing");
    if (rc == 0 && prune_upto)
        s->pruned_upto = prune_upto;
    if (rc == 0 && audit_legacy_below)
        s->audit_legacy_below = audit_legacy_below;
    ops_clear(&ops);
    return rc;
}

/* Loading. */

typedef int (*KvFn)(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg);

/* A range read of the load (req: etcd's RangeRequest, consumed), at the
 * load's revision. When etcd has compacted that revision away, the load goes
 * on at the latest one: the keys it reads cannot have changed since the load
 * began, because only the leader writes them (every commit is fenced on its
 * key) and this gateway leads and commits nothing while it loads. The pinned
 * revision is a check of that, not what makes it true, so a compaction during
 * a long load costs nothing. */
static int load_range(EtcdStore *s, json_t *req, json_t **resp, char *err, size_t errlen)
{
    for (;;) {
        char rev[32];
        snprintf(rev, sizeof rev, "%lld", s->load_rev);
        if (!req || (s->load_rev > 0 && json_object_set_new(req, "revision", json_string(rev)))) {
            json_decref(req);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        int rc = etcd_call(s->etcd, "/v3/kv/range", json_incref(req), resp, err, errlen); /* kept for a retry */
        if (rc == 0 || s->load_rev == 0 || !strstr(err, "required revision has been compacted")) {
            json_decref(req);
            return rc;
        }
        log_line(LEVEL_INFO, "etcd compacted revision %lld during the load; going on at the latest",
                 s->load_rev);
        s->load_rev = 0;
        json_object_del(req, "revision");
    }
}

/* One page of keys in [start, end) at the load's revision: *resp is etcd's answer. */
static int range_page(EtcdStore *s, const char *start, size_t startlen, const char *end, int limit, json_t **resp)
{
    char *kb = etcd_b64_encode(start, startlen), *eb = etcd_b64_encode(end, strlen(end));
    json_t *req = kb && eb ? json_pack("{s:s, s:s, s:i}", "key", kb, "range_end", eb, "limit", limit) : NULL;
    free(kb);
    free(eb);
    char err[400];
    int rc = load_range(s, req, resp, err, sizeof err);
    if (rc)
        snprintf(s->err, sizeof s->err, "etcd range under %.*s: %s", (int)startlen, start, err);
    return rc;
}

/* Every key under PREFIX/kind/, a page at a time, at the load's revision
 * (see load_range), in key order. fn gets the name below
 * PREFIX/kind/ and the value, both NUL-terminated. Groups of history and
 * audit rows (up to GROUP_BYTES each) come GROUP_PAGE keys to a page. */
static int range_all(EtcdStore *s, const char *kind, const StoreLoad *cb, KvFn fn, int arg)
{
    int limit = !strcmp(kind, "history") || !strcmp(kind, "audit") ? GROUP_PAGE : LOAD_PAGE;
    char *prefix = key_of(s, kind, "");
    char *end = prefix ? strdup(prefix) : NULL;
    /* The page start: key bytes that may end in a NUL (see below). */
    char *start = prefix ? strdup(prefix) : NULL;
    if (!end || !start) {
        free(prefix), free(end), free(start);
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    size_t plen = strlen(prefix), startlen = plen;
    end[plen - 1]++; /* '/' + 1: just past every key under the prefix */
    int rc = 0;
    for (bool more = true; more && rc == 0;) {
        json_t *resp = NULL;
        if (range_page(s, start, startlen, end, limit, &resp)) {
            rc = -1;
            break;
        }
        more = json_is_true(json_object_get(resp, "more"));
        json_t *kvs = json_object_get(resp, "kvs");
        if (more && json_array_size(kvs) == 0) {
            snprintf(s->err, sizeof s->err, "etcd range under %s: 'more' without keys", prefix);
            rc = -1;
        }
        size_t i;
        json_t *kv;
        json_array_foreach(kvs, i, kv)
        {
            size_t klen = 0, vlen = 0;
            const char *k64 = json_string_value(json_object_get(kv, "key"));
            const char *v64 = json_string_value(json_object_get(kv, "value"));
            char *k = k64 ? etcd_b64_decode(k64, &klen) : NULL;
            char *v = etcd_b64_decode(v64 ? v64 : "", &vlen);
            if (!k || !v || klen <= plen || strlen(k) != klen || strlen(v) != vlen) {
                snprintf(s->err, sizeof s->err, "etcd: a corrupt key or value under %s", prefix);
                rc = -1;
            } else {
                rc = fn(s, cb, k + plen, v, arg);
            }
            if (rc == 0 && i + 1 == json_array_size(kvs)) {
                /* The next page starts at the smallest key after this one:
                 * the key followed by a NUL byte. */
                free(start);
                start = k;
                startlen = klen + 1; /* etcd_b64_decode NUL-terminated k */
                k = NULL;
            }
            free(k);
            free(v);
            if (rc)
                break;
        }
        json_decref(resp);
    }
    free(prefix), free(end), free(start);
    return rc;
}

static bool parse_u64(const char *text, uint64_t *out)
{
    if (*text < '0' || *text > '9')
        return false;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    *out = v;
    return *end == '\0';
}

static bool json_u64(const json_t *obj, const char *key, uint64_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static bool json_i64(const json_t *obj, const char *key, int64_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        return false;
    *out = json_integer_value(v);
    return true;
}

/* A holder's fields (holder_json); false when missing or malformed. The
 * strings point into h. */
static bool parse_holder(const json_t *h, Holder *x)
{
    uint64_t count = 0, permits = 1;
    int64_t delay = 0;
    const char *lease = json_string_value(json_object_get(h, "lease"));
    x->owner = (char *)json_string_value(json_object_get(h, "owner"));
    x->metadata = (char *)json_string_value(json_object_get(h, "metadata"));
    x->request_id = (char *)json_string_value(json_object_get(h, "request_id")); /* NULL when none */
    x->key = (char *)json_string_value(json_object_get(h, "key"));               /* NULL when none */
    x->value = (char *)json_string_value(json_object_get(h, "value"));           /* NULL when none */
    x->deadline_ms = -1; /* no boot clock is shared between gateways: expires_at_ms rules */
    bool ok = lease && uuid_parse(lease, x->lease) == 0 && x->owner && x->metadata && json_u64(h, "token", &x->token) &&
              json_i64(h, "ttl_ms", &x->ttl_ms) && json_i64(h, "acquired_at_ms", &x->acquired_at_ms) &&
              json_i64(h, "expires_at_ms", &x->expires_at_ms) && json_u64(h, "count", &count) && count <= UINT32_MAX &&
              (!json_object_get(h, "lock_delay_ms") || json_i64(h, "lock_delay_ms", &delay)) &&
              (!json_object_get(h, "permits") || json_u64(h, "permits", &permits)) && permits >= 1 &&
              permits <= LOCKTAB_LIMIT_MAX;
    x->count = (uint32_t)count;
    x->permits = (uint32_t)permits;
    x->lock_delay_ms = delay;
    return ok;
}

/* Hands one decoded record to the loader; what names it in the error. */
static int deliver(EtcdStore *s, const StoreLoad *cb, const StoreRecord *r, const char *what, const char *name)
{
    if (cb->record(cb->ud, r)) {
        snprintf(s->err, sizeof s->err, "cannot load %s %s", what, name);
        return -1;
    }
    return 0;
}

static void saw_token(EtcdStore *s, uint64_t token)
{
    if (token > s->load_max_token)
        s->load_max_token = token;
}

/* A layout-1 writer w of the lock whose record is r: kept, to be written
 * again in layout 2 once the load is done (rewrite_legacy). 0, or -1 when
 * out of memory. */
static int keep_legacy(EtcdStore *s, const StoreRecord *w, const StoreRecord *r)
{
    if (s->nlegacy + 2 > s->caplegacy) {
        size_t cap = s->caplegacy ? s->caplegacy * 2 : 64;
        StoreRecord *p = realloc(s->legacy, cap * sizeof *p);
        uint64_t *t = p ? realloc(s->legacy_tokens, cap / 2 * sizeof *t) : NULL;
        if (p)
            s->legacy = p;
        if (!p || !t) {
            snprintf(s->err, sizeof s->err, "out of memory");
            return -1;
        }
        s->legacy_tokens = t;
        s->caplegacy = cap;
    }
    if (!record_copy(&s->legacy_strings, &s->legacy[s->nlegacy], w) ||
        !record_copy(&s->legacy_strings, &s->legacy[s->nlegacy + 1], r)) {
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    s->legacy_tokens[s->nlegacy / 2] = w->holder.holder.token;
    s->nlegacy += 2;
    s->legacy_sorted = false;
    return 0;
}

static int by_token(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Is token a layout-1 writer's, already loaded from its lock's record? */
static bool legacy_writer(EtcdStore *s, uint64_t token)
{
    if (!s->nlegacy)
        return false;
    if (!s->legacy_sorted) {
        qsort(s->legacy_tokens, s->nlegacy / 2, sizeof *s->legacy_tokens, by_token);
        s->legacy_sorted = true;
    }
    return bsearch(&token, s->legacy_tokens, s->nlegacy / 2, sizeof *s->legacy_tokens, by_token) != NULL;
}

static void legacy_clear(EtcdStore *s)
{
    free(s->legacy);
    free(s->legacy_tokens);
    s->legacy = NULL;
    s->legacy_tokens = NULL;
    s->nlegacy = s->caplegacy = 0;
    arena_clear(&s->legacy_strings);
}

/* A name's record under PREFIX/locks/, PREFIX/semaphores/ or PREFIX/elections/ (arg: its
 * LockKind); in layout 1, a lock's record that holds its writer is two
 * records: the name's, then the writer's lease. */
static int load_name(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    LockKind kind = (LockKind)arg;
    json_t *j = json_loads(value, 0, NULL);
    StoreRecord r = {.kind = REC_LOCK, .lock = {.name = name, .kind = (uint8_t)kind}};
    StoreRecord w = {.kind = REC_HOLDER, .holder = {.name = name, .kind = (uint8_t)kind}};
    json_t *h = json_object_get(j, "holder");
    uint64_t limit = 0;
    bool ok = json_u64(j, "last_token", &r.lock.last_token) &&
              (kind != KIND_SEMAPHORE || (json_u64(j, "limit", &limit) && limit >= 1 && limit <= LOCKTAB_LIMIT_MAX)) &&
              (!json_object_get(j, "delay_until_ms") || json_i64(j, "delay_until_ms", &r.lock.delay_until_ms)) &&
              (!h || (kind == KIND_LOCK && parse_holder(h, &w.holder.holder)));
    r.lock.limit = (uint32_t)limit;
    w.holder.holder.mode = MODE_WRITE;
    const char *what = kind == KIND_LOCK ? "lock" : kind == KIND_SEMAPHORE ? "semaphore" : "election";
    int rc = 0;
    if (!ok) {
        snprintf(s->err, sizeof s->err, "%s %s: corrupt record in etcd", what, name);
        rc = -1;
    } else if (deliver(s, cb, &r, what, name) || (h && deliver(s, cb, &w, "the writer of lock", name)) ||
               (h && keep_legacy(s, &w, &r))) {
        rc = -1;
    } else {
        saw_token(s, r.lock.last_token);
        saw_token(s, h ? w.holder.holder.token : 0);
    }
    json_decref(j);
    return rc;
}

/* A lease under PREFIX/holders/TOKEN. */
static int load_holder(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    (void)arg;
    uint64_t token = 0, kind = 0, mode = MODE_WRITE;
    json_t *j = json_loads(value, 0, NULL);
    StoreRecord r = {.kind = REC_HOLDER};
    r.holder.name = json_string_value(json_object_get(j, "name"));
    bool ok = parse_u64(name, &token) && r.holder.name && json_u64(j, "kind", &kind) && kind < LOCK_KINDS &&
              (!json_object_get(j, "mode") || json_u64(j, "mode", &mode)) &&
              (mode == MODE_WRITE || (mode == MODE_READ && kind == KIND_LOCK)) && parse_holder(j, &r.holder.holder) &&
              r.holder.holder.token == token;
    r.holder.kind = (uint8_t)kind;
    r.holder.holder.mode = (uint8_t)mode;
    int rc = 0;
    if (!ok) {
        snprintf(s->err, sizeof s->err, "holder %s: corrupt record in etcd", name);
        rc = -1;
    } else if (legacy_writer(s, token)) {
        /* The same lease, written in layout 2 while its lock's record still
         * held it (a rewrite cut short): loaded once, from the lock's record. */
    } else if (deliver(s, cb, &r, "lease", name)) {
        rc = -1;
    } else {
        saw_token(s, token);
    }
    json_decref(j);
    return rc;
}

/* A lock's value under PREFIX/values/NAME. */
static int load_value(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    (void)arg;
    json_t *j = json_loads(value, 0, NULL);
    StoreRecord r = {.kind = REC_VALUE, .value = {.name = name}};
    StoreValue *v = &r.value;
    json_t *text = json_object_get(j, "value"), *key = json_object_get(j, "key");
    json_t *writes = json_object_get(j, "writes"); /* absent: none, or written by an older gateway */
    v->text = json_string_value(text);
    v->key = json_string_value(key);
    v->writes = json_string_value(writes);
    bool ok = json_u64(j, "version", &v->version) && v->version >= 1 && json_u64(j, "token", &v->token) &&
              v->token >= 1 && json_i64(j, "at_ms", &v->at_ms) && (!text || v->text) && (!key || v->key) &&
              (!writes || v->writes) && valwrites_parse(v->writes, v->version, NULL);
    int rc = 0;
    if (!ok) {
        snprintf(s->err, sizeof s->err, "value of lock %s: corrupt record in etcd", name);
        rc = -1;
    } else {
        rc = deliver(s, cb, &r, "the value of lock", name);
        saw_token(s, v->token);
    }
    json_decref(j);
    return rc;
}

/* A mark under PREFIX/fences/ or PREFIX/guard/ (arg: its StoreRecordKind). */
static int load_mark(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    StoreRecord r = {.kind = (uint8_t)arg};
    StoreMark m = {name, 0, 0};
    /* A guard mark may carry its time after a space. */
    char token[24];
    size_t n = strcspn(value, " ");
    uint64_t at = 0;
    bool ok = n < sizeof token && (value[n] == '\0' || (parse_u64(value + n + 1, &at) && at <= INT64_MAX));
    if (ok) {
        memcpy(token, value, n);
        token[n] = '\0';
        ok = parse_u64(token, &m.max_token);
        m.at_ms = (int64_t)at;
    }
    if (arg == REC_FENCE)
        r.fence = m;
    else
        r.guard_mark = m;
    if (!ok) {
        snprintf(s->err, sizeof s->err, "cannot load mark %s", name);
        return -1;
    }
    return deliver(s, cb, &r, "mark", name);
}

static int load_floor(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    (void)arg;
    uint64_t bucket;
    StoreRecord r = {.kind = REC_FLOOR};
    if (!parse_u64(name, &bucket) || bucket > UINT32_MAX || !parse_u64(value, &r.floor.floor)) {
        snprintf(s->err, sizeof s->err, "cannot load fence floor %s", name);
        return -1;
    }
    r.floor.bucket = (uint32_t)bucket;
    return deliver(s, cb, &r, "fence floor", name);
}

/* One audit row: j its object, seq its seq. */
static int load_audit_row(EtcdStore *s, const StoreLoad *cb, const json_t *j, uint64_t seq)
{
    (void)s;
    int64_t kind = 0, at = 0;
    StoreRecord rec = {.kind = REC_AUDIT};
    AuditRow *r = &rec.audit;
    r->seq = seq;
    r->lock = json_string_value(json_object_get(j, "lock"));
    r->owner = json_string_value(json_object_get(j, "owner"));
    r->key = json_string_value(json_object_get(j, "key"));
    r->peer = json_string_value(json_object_get(j, "peer"));
    const json_t *reason = json_object_get(j, "reason"); /* absent: none (rows written before it) */
    r->reason = reason ? json_string_value(reason) : "";
    uint64_t object = 0, mode = 0;
    bool ok = r->lock && r->owner && r->key && r->peer && r->reason && json_u64(j, "token", &r->token) &&
              json_i64(j, "kind", &kind) && json_i64(j, "at_ms", &at) &&
              (!json_object_get(j, "object") || json_u64(j, "object", &object)) &&
              (!json_object_get(j, "mode") || json_u64(j, "mode", &mode)) && object <= AUDIT_OF_ELECTION &&
              mode <= AUDIT_MODE_READ;
    r->kind = (int)kind;
    r->object = (uint8_t)object;
    r->mode = (uint8_t)mode;
    r->at_ms = at;
    return ok && cb->record(cb->ud, &rec) == 0 ? 0 : -1;
}

/* The rows under one key of PREFIX/history/ or PREFIX/audit/, named by seq
 * `name`: a group (an array of rows, each with its seq, none above the key's)
 * or, as written before groups, one row (an object, its seq the key's). */
static int load_rows(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value,
                     int (*row_fn)(EtcdStore *, const StoreLoad *, const json_t *, uint64_t))
{
    json_t *j = json_loads(value, 0, NULL);
    uint64_t key_seq = 0, seq = 0;
    int rc = parse_u64(name, &key_seq) ? 0 : -1;
    if (rc == 0 && json_is_array(j)) {
        size_t i;
        json_t *row;
        json_array_foreach(j, i, row)
        {
            if (!json_u64(row, "seq", &seq) || seq > key_seq || row_fn(s, cb, row, seq)) {
                rc = -1;
                break;
            }
        }
    } else if (rc == 0) {
        rc = json_is_object(j) ? row_fn(s, cb, j, key_seq) : -1;
    }
    json_decref(j);
    return rc;
}

/* name: "KEY/SEQ" (a key's group), or "SEQ" (an older gateway's, every key's rows together). */
static int load_audit(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    (void)arg;
    const char *slash = strrchr(name, '/');
    if (!slash)
        s->audit_legacy = true;
    if (load_rows(s, cb, slash ? slash + 1 : name, value, load_audit_row)) {
        snprintf(s->err, sizeof s->err, "cannot load audit rows %s", name);
        return -1;
    }
    return 0;
}

static int load_revoked(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    (void)arg;
    StoreRecord r = {.kind = REC_REVOKED, .revoked = {0, value}};
    if (!parse_u64(name, &r.revoked.token)) {
        snprintf(s->err, sizeof s->err, "cannot load revoked token %s", name);
        return -1;
    }
    return deliver(s, cb, &r, "revoked token", name);
}

static int load_ended_row(EtcdStore *s, const StoreLoad *cb, const json_t *j, uint64_t seq)
{
    (void)s;
    const char *lease = json_string_value(json_object_get(j, "lease"));
    uint8_t id[LEASE_ID_BYTES];
    int64_t how = 0;
    uint64_t kind = 0;
    StoreRecord r = {.kind = REC_ENDED, .ended = {json_string_value(json_object_get(j, "lock")), 0, id, 0, 0, seq}};
    StoreEnded *e = &r.ended;
    bool ok = e->lock && lease && uuid_parse(lease, id) == 0 && json_u64(j, "token", &e->token) &&
              json_i64(j, "how", &how) && (!json_object_get(j, "kind") || json_u64(j, "kind", &kind)) &&
              kind < LOCK_KINDS;
    e->kind = (uint8_t)kind;
    e->how = (int)how;
    return ok && cb->record(cb->ud, &r) == 0 ? 0 : -1;
}

static int load_ended(EtcdStore *s, const StoreLoad *cb, const char *name, const char *value, int arg)
{
    (void)arg;
    if (load_rows(s, cb, name, value, load_ended_row)) {
        snprintf(s->err, sizeof s->err, "cannot load the lease history (%s)", name);
        return -1;
    }
    return 0;
}

/* What the load ranges, in record.h's order of kinds: each folder under
 * PREFIX, and the decoder of its keys (arg: what it needs to know). */
static const struct LoadRange {
    const char *dir;
    KvFn fn;
    int arg;
} LOAD_RANGES[] = {
    {"locks", load_name, KIND_LOCK},   {"semaphores", load_name, KIND_SEMAPHORE}, {"elections", load_name, KIND_ELECTION},
    {"holders", load_holder, 0},       {"values", load_value, 0},
    {"fences", load_mark, REC_FENCE},  {"guard", load_mark, REC_GUARD_MARK},       {"floors", load_floor, 0},
    {"history", load_ended, 0},        {"revoked", load_revoked, 0},               {"audit", load_audit, 0},
};

/* PREFIX/meta/layout: a lock space written by a newer leasegate than this
 * one (a layout above LAYOUT) is refused before anything is written. */
static int check_layout(EtcdStore *s)
{
    json_t *resp;
    char err[400];
    if (etcd_call(s->etcd, "/v3/kv/range", json_pack("{s:s}", "key", s->layout_key_b64), &resp, err, sizeof err)) {
        snprintf(s->err, sizeof s->err, "etcd: cannot read the lock space's layout: %s", err);
        return -1;
    }
    const char *v64 = json_string_value(json_object_get(json_array_get(json_object_get(resp, "kvs"), 0), "value"));
    size_t len;
    char *v = v64 ? etcd_b64_decode(v64, &len) : NULL;
    uint64_t layout = 1;
    bool ok = !v64 || (v && parse_u64(v, &layout));
    free(v);
    json_decref(resp);
    if (!ok) {
        snprintf(s->err, sizeof s->err, "etcd: a corrupt layout mark under %smeta/layout", s->prefix);
        return -1;
    }
    if (layout > LAYOUT) {
        snprintf(s->err, sizeof s->err,
                 "the lock space under %s was written by a newer leasegate (layout %llu; this one reads layouts 1 "
                 "to %d): upgrade this gateway",
                 s->prefix, (unsigned long long)layout, LAYOUT);
        return -1;
    }
    return 0;
}

/* Reads PREFIX/meta/last_token and pins the load to the revision of that read. */
static int load_meta(EtcdStore *s, uint64_t *counter)
{
    char *key = key_of(s, "meta", "last_token");
    char *kb = key ? etcd_b64_encode(key, strlen(key)) : NULL;
    json_t *req = kb ? json_pack("{s:s}", "key", kb) : NULL;
    free(key);
    free(kb);
    json_t *resp;
    char err[400];
    if (etcd_call(s->etcd, "/v3/kv/range", req, &resp, err, sizeof err)) {
        snprintf(s->err, sizeof s->err, "etcd: cannot read the token counter: %s", err);
        return -1;
    }
    *counter = 0;
    const char *v64 = json_string_value(json_object_get(json_array_get(json_object_get(resp, "kvs"), 0), "value"));
    size_t len;
    char *v = v64 ? etcd_b64_decode(v64, &len) : NULL;
    bool ok = etcd_int_field(json_object_get(resp, "header"), "revision", &s->load_rev) && s->load_rev > 0 &&
              (!v64 || (v && parse_u64(v, counter)));
    free(v);
    json_decref(resp);
    if (!ok) {
        snprintf(s->err, sizeof s->err, "etcd: a corrupt token counter or answer");
        return -1;
    }
    return 0;
}

/* The largest seq under PREFIX/history/ (0: none): the last key in order. */
static int last_history_seq(EtcdStore *s, uint64_t *seq)
{
    char *start = key_of(s, "history", "");
    char *end = start ? strdup(start) : NULL;
    if (!end) {
        free(start);
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    end[strlen(end) - 1]++;
    char *sb = etcd_b64_encode(start, strlen(start)), *eb = etcd_b64_encode(end, strlen(end));
    json_t *req = sb && eb ? json_pack("{s:s, s:s, s:i, s:s, s:s, s:b}", "key", sb, "range_end", eb, "limit", 1,
                                       "sort_order", "DESCEND", "sort_target", "KEY", "keys_only", 1)
                           : NULL;
    size_t plen = strlen(start);
    free(sb), free(eb), free(start), free(end);
    json_t *resp = NULL;
    char err[400];
    if (load_range(s, req, &resp, err, sizeof err)) {
        snprintf(s->err, sizeof s->err, "etcd: cannot read the lease history: %s", err);
        return -1;
    }
    *seq = 0;
    const char *k64 = json_string_value(json_object_get(json_array_get(json_object_get(resp, "kvs"), 0), "key"));
    size_t len;
    char *k = k64 ? etcd_b64_decode(k64, &len) : NULL;
    bool ok = !k64 || (k && len > plen && parse_u64(k + plen, seq));
    free(k);
    json_decref(resp);
    if (!ok) {
        snprintf(s->err, sizeof s->err, "etcd: a corrupt lease history key");
        return -1;
    }
    return 0;
}

static int etcd_load(Store *base, const StoreLoad *cb, uint64_t *last_token)
{
    EtcdStore *s = (EtcdStore *)base;
    uint64_t counter, seq;
    /* The layout first: the first mark writes this gateway's. */
    if (check_layout(s) || commit_first_mark(s) || load_meta(s, &counter) || last_history_seq(s, &seq))
        return -1;
    if (cb->history_seq(cb->ud, seq)) {
        snprintf(s->err, sizeof s->err, "cannot load the lease history");
        return -1;
    }
    /* The prune bound is not stored: start from what is there. */
    s->pruned_upto = 0;
    s->audit_legacy = false;
    s->audit_legacy_below = 0;
    s->load_max_token = 0;
    legacy_clear(s);
    int rc = 0;
    for (size_t i = 0; i < sizeof LOAD_RANGES / sizeof LOAD_RANGES[0] && rc == 0; i++)
        rc = range_all(s, LOAD_RANGES[i].dir, cb, LOAD_RANGES[i].fn, LOAD_RANGES[i].arg);
    if (rc == 0 && s->nlegacy) {
        /* A writer of layout 1 lives in its lock's record, which layout 2
         * writes only when the name's own fields change: written again now,
         * in one batch (fenced like any), or its lock's record would bring
         * it back after it ended. A batch cut short leaves the lease in both
         * places; the load above takes it once. */
        StoreBatch b = {s->legacy, s->nlegacy, 0, 0, 0};
        rc = etcd_commit(base, &b);
        if (rc == 0)
            log_line(LEVEL_INFO, "%zu writers of layout 1 written again as leases of their own (layout %d)",
                     s->nlegacy / 2, LAYOUT);
    }
    legacy_clear(s);
    *last_token = counter > s->load_max_token ? counter : s->load_max_token;
    return rc;
}

static void etcd_close(Store *base)
{
    EtcdStore *s = (EtcdStore *)base;
    if (!s)
        return;
    if (s->resume)
        ops_clear(&s->resume->ops);
    free(s->resume);
    etcd_client_free(s->etcd);
    free(s->leader_key);
    free(s->mark_key);
    free(s->mark_key_b64);
    free(s->layout_key);
    free(s->layout_key_b64);
    legacy_clear(s);
    free(s);
}

static const char *etcd_error(const Store *base) { return ((const EtcdStore *)base)->err; }

static const StoreOps ETCD_OPS = {
    .load = etcd_load, .commit = etcd_commit, .barrier = etcd_barrier, .close = etcd_close, .error = etcd_error};

void store_etcd_compaction(Store *base, unsigned interval_s, uint64_t bytes)
{
    EtcdStore *s = (EtcdStore *)base;
    etcd_compact_init(&s->compact, (int64_t)interval_s * 1000, bytes);
}

Store *store_etcd_open(const EtcdUrl *url, Election *election, size_t max_txn_ops, char *err, size_t errlen)
{
    EtcdStore *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base.ops = &ETCD_OPS;
    thread_own(&s->base.owner);
    snprintf(s->prefix, sizeof s->prefix, "%s/", url->prefix);
    size_t klen = 0;
    s->election = election;
    s->leader_key = etcd_b64_decode(election_key_b64(election), &klen);
    if (s->leader_key && strlen(s->leader_key) != klen) {
        snprintf(err, errlen, "the leader key holds a NUL byte");
        etcd_close(&s->base);
        return NULL;
    }
    s->leader_rev = election_revision(election);
    s->max_txn_ops = max_txn_ops;
    s->stats = url->stats;
    s->etcd = etcd_client_new(url, CALL_TIMEOUT_MS);
    if (s->etcd)
        etcd_client_retry(s->etcd, CALL_FIRST_MS, CALL_BUDGET_MS);
    s->mark_key = key_of(s, "meta", "commit");
    s->mark_key_b64 = s->mark_key ? etcd_b64_encode(s->mark_key, strlen(s->mark_key)) : NULL;
    s->layout_key = key_of(s, "meta", "layout");
    s->layout_key_b64 = s->layout_key ? etcd_b64_encode(s->layout_key, strlen(s->layout_key)) : NULL;
    if (!s->leader_key || !s->etcd || !s->mark_key_b64 || !s->layout_key_b64) {
        snprintf(err, errlen, "out of memory (or libcurl cannot start)");
        etcd_close(&s->base);
        return NULL;
    }
    return &s->base;
}
