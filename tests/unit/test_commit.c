/*
 * Unit test of group commit over a real SQLite file: records from many
 * "requests" share batches, holds run only after their batch is durable, and
 * a reopened store loads exactly what was committed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>

#include "check.h"
#include "leasegate/commit.h"
#include "leasegate/leasehist.h"

typedef struct Probe {
    CommitHold hold;
    int ready;
} Probe;

static void on_ready(CommitHold *h) { ((Probe *)(void *)h)->ready++; }

static int loaded_locks;
static uint64_t loaded_token_of_k7;
static int64_t loaded_deadline_of_k7;
static int load_lock(void *ud, const StoreLock *l)
{
    (void)ud;
    loaded_locks++;
    if (!strcmp(l->name, "k7") && l->held) {
        loaded_token_of_k7 = l->holder.token;
        loaded_deadline_of_k7 = l->holder.deadline_ms;
    }
    return 0;
}
static uint64_t loaded_fence;
static int loaded_fences;
static int load_fence(void *ud, const StoreMark *f)
{
    (void)ud;
    loaded_fence = f->max_token;
    loaded_fences++;
    return 0;
}
static uint64_t loaded_floor;
static uint32_t loaded_floor_bucket;
static int load_floor(void *ud, const StoreFloor *f)
{
    (void)ud;
    loaded_floor = f->floor;
    loaded_floor_bucket = f->bucket;
    return 0;
}
static uint64_t loaded_guard_mark;
static int64_t loaded_guard_at;
static int load_guard_mark(void *ud, const StoreMark *m)
{
    (void)ud;
    loaded_guard_mark = m->max_token;
    loaded_guard_at = m->at_ms;
    return 0;
}

static uint64_t loaded_history_seq;
static int load_history_seq(void *ud, uint64_t seq)
{
    (void)ud;
    loaded_history_seq = seq;
    return 0;
}
static uint64_t loaded_ended_seqs[16];
static int loaded_ended;
static int load_ended(void *ud, const StoreEnded *e)
{
    (void)ud;
    if (loaded_ended < 16)
        loaded_ended_seqs[loaded_ended] = e->seq;
    loaded_ended++;
    return 0;
}

static uint64_t loaded_revoked_token;
static int loaded_revoked;
static int load_revoked(void *ud, uint64_t token)
{
    (void)ud;
    loaded_revoked_token = token;
    loaded_revoked++;
    return 0;
}

static int loaded_audit;
static uint64_t loaded_audit_last_seq;
static int load_audit(void *ud, const AuditRow *row)
{
    (void)ud;
    loaded_audit++;
    loaded_audit_last_seq = row->seq;
    return 0;
}

static void wait_done(Commit *c)
{
    struct pollfd p = {commit_fd(c), POLLIN, 0};
    CHECK(poll(&p, 1, 5000) == 1);
    CHECK(commit_done(c) == 0);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "commit-test.db";
    char wal[512], err[256];
    unlink(path);
    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(wal);

    Store *st = store_sqlite_open(path, "test-boot", err, sizeof err);
    CHECK(st != NULL);
    if (!st)
        return check_report("commit");
    Commit *c = commit_new(st, err, sizeof err);
    CHECK(!commit_pending(c));
    commit_keep_history(c, 3);

    Lock lock = {0};
    char name[16];
    Probe probes[10];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "k%d", i);
        lock.name = name;
        lock.held = true;
        lock.last_token = (uint64_t)i + 1;
        lock.holder = (Holder){.owner = "o", .metadata = "{}", .token = (uint64_t)i + 1, .ttl_ms = 1000,
                               .acquired_at_ms = 1, .expires_at_ms = 4102444800000,
                               .deadline_ms = 5000 + i, .count = 1};
        CHECK(commit_lock(c, &lock));
        probes[i] = (Probe){{.ready = on_ready}, 0};
        commit_hold(c, &probes[i].hold);
    }
    CHECK(commit_fence(c, "res", 42));
    /* An idle resource is forgotten: its row goes, its mark becomes a floor. */
    CHECK(commit_fence(c, "idle-res", 30));
    CHECK(commit_fence_forget(c, "idle-res", 77, 30));
    /* k9 is put, then forgotten: records apply in order, so its row goes; the
     * counter it vouched for (10) must survive in meta. */
    CHECK(commit_forget(c, "k9", 10));
    CHECK(commit_guard_mark(c, "k3", 4, 1700000000123));
    /* Audit rows: the rows a key evicted (auditlog.h) go, one by one. */
    for (uint64_t i = 1; i <= 4; i++) {
        AuditRow row = {i, 1000, AUDIT_GRANTED, "k1", "o", i, "key", "127.0.0.1:1"};
        CHECK(commit_audit(c, &row));
    }
    CHECK(commit_audit_drop(c, "key", 1, 2));
    CHECK(commit_audit_drop(c, "key", 2, 3));
    /* Five ended leases; storage keeps the newest three. The first was
     * force-released: its token stays revoked after the history drops it. */
    for (int i = 1; i <= 5; i++) {
        uint8_t lease[LEASE_ID_BYTES] = {(uint8_t)i};
        CHECK(commit_ended(c, "k1", lease, (uint64_t)i, i == 1 ? LEASE_END_REVOKED : LEASE_END_RELEASED,
                           (uint64_t)(100 + i)));
    }
    CHECK(commit_pending(c));
    commit_flush(c);
    /* While the first batch is in flight, the next one fills up. */
    lock.name = "late";
    lock.held = false;
    lock.last_token = 11;
    CHECK(commit_lock(c, &lock));
    Probe late = {{.ready = on_ready}, 0};
    commit_hold(c, &late.hold);
    /* A hold whose owner goes away is taken back and never runs. */
    Probe gone = {{.ready = on_ready}, 0};
    commit_hold(c, &gone.hold);
    CHECK(commit_held(&gone.hold));
    commit_unhold(c, &gone.hold);
    CHECK(!commit_held(&gone.hold));
    wait_done(c);
    int ready = 0;
    for (int i = 0; i < 10; i++)
        ready += probes[i].ready;
    CHECK(ready == 10);
    CHECK(late.ready == 0); /* its change is in the next batch */
    CHECK(commit_pending(c));
    commit_flush(c);
    wait_done(c);
    CHECK(late.ready == 1);
    CHECK(gone.ready == 0);
    CHECK(!commit_held(&late.hold));
    CHECK(!commit_pending(c));
    /* Forget the lock with the largest token: only meta can vouch for 11 now. */
    CHECK(commit_forget(c, "late", 11));
    commit_flush(c);
    wait_done(c);
    CHECK(commit_stats(c)->commits == 3 && commit_stats(c)->rows == 29);
    commit_free(c);
    store_close(st);

    st = store_sqlite_open(path, "test-boot", err, sizeof err);
    CHECK(st != NULL);
    StoreLoad cb = {NULL,      load_lock,         load_fence, load_guard_mark, load_floor, load_history_seq,
                    load_ended, load_revoked, load_audit};
    uint64_t last_token = 0;
    CHECK(store_load(st, &cb, &last_token) == 0);
    CHECK(loaded_locks == 9);
    CHECK(loaded_token_of_k7 == 8);
    CHECK(loaded_fence == 42 && loaded_fences == 1);
    CHECK(loaded_history_seq == 105);
    CHECK(loaded_ended == 3 && loaded_ended_seqs[0] == 103 && loaded_ended_seqs[2] == 105);
    CHECK(loaded_floor == 30 && loaded_floor_bucket == 77);
    CHECK(loaded_revoked == 1 && loaded_revoked_token == 1);
    CHECK(loaded_audit == 2 && loaded_audit_last_seq == 4);
    /* Same boot: the boot-clock deadline comes back as written. */
    CHECK(loaded_deadline_of_k7 == 5007);
    CHECK(loaded_guard_mark == 4);
    CHECK(loaded_guard_at == 1700000000123);
    CHECK(last_token == 11);
    /* A second server on the same file is refused. */
    Store *second = store_sqlite_open(path, "test-boot", err, sizeof err);
    CHECK(second == NULL);
    store_close(st);
    /* Another boot: the deadline means nothing on this boot's clock. */
    st = store_sqlite_open(path, "other-boot", err, sizeof err);
    CHECK(st != NULL);
    loaded_deadline_of_k7 = 0;
    CHECK(store_load(st, &cb, &last_token) == 0);
    CHECK(loaded_deadline_of_k7 == -1);
    store_close(st);
    return check_report("commit");
}
