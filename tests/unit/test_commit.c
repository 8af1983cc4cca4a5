/*
 * Unit test of group commit over a real SQLite file: records from many
 * "requests" share batches, holds run only after their batch is durable, and
 * a reopened store loads exactly what was committed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>

#include "check.h"
#include "core/leasehist.h"
#include "store/commit.h"

typedef struct Probe {
    CommitHold hold;
    int ready;
} Probe;

static void on_ready(CommitHold *h) { ((Probe *)(void *)h)->ready++; }

typedef struct Snap {
    CommitHold hold;
    Commit *c;
    int fd;
    uint64_t size;
} Snap;
static Snap snapped;

static void on_snapshot(CommitHold *h)
{
    Snap *s = (Snap *)(void *)h;
    const char *why;
    s->fd = commit_snapshot_take(s->c, &s->size, &why);
}

static int loaded_locks, loaded_semaphores;
static uint64_t loaded_token_of_k7;
static int64_t loaded_deadline_of_k7;
static uint32_t loaded_limit;
static int64_t loaded_delay;
static int load_lock(const StoreLock *l)
{
    if (l->kind == KIND_SEMAPHORE) {
        loaded_semaphores++;
        if (!strcmp(l->name, "sem"))
            loaded_limit = l->limit;
        return 0;
    }
    loaded_locks++;
    if (!strcmp(l->name, "dl"))
        loaded_delay = l->delay_until_ms;
    return 0;
}
static int loaded_readers, loaded_permits, loaded_writers;
static uint32_t loaded_permits_of_wide; /* the lease of three permits of "wide" */
static uint64_t loaded_reader_token, last_holder_token;
static char last_holder_name[32];
static int load_holder(const StoreHolder *h)
{
    /* A name's leases come oldest first. */
    CHECK(strcmp(h->name, last_holder_name) || h->holder.token > last_holder_token);
    last_holder_token = h->holder.token;
    snprintf(last_holder_name, sizeof last_holder_name, "%s", h->name);
    if (h->kind == KIND_SEMAPHORE) {
        loaded_permits += !strcmp(h->name, "sem") && h->holder.mode == MODE_WRITE && h->holder.permits == 1;
        if (!strcmp(h->name, "wide"))
            loaded_permits_of_wide = h->holder.permits;
    } else if (h->holder.mode == MODE_READ) {
        loaded_readers += !strcmp(h->name, "rd");
        loaded_reader_token = h->holder.token;
    } else {
        loaded_writers++;
        if (!strcmp(h->name, "k7")) {
            loaded_token_of_k7 = h->holder.token;
            loaded_deadline_of_k7 = h->holder.deadline_ms;
        }
    }
    return 0;
}
static int loaded_values;
static char loaded_value_text[32];
static uint64_t loaded_value_version, loaded_value_token;
static bool loaded_null_value;
static int load_value(const StoreValue *v)
{
    loaded_values++;
    if (!strcmp(v->name, "val")) {
        snprintf(loaded_value_text, sizeof loaded_value_text, "%s", v->text ? v->text : "(null)");
        loaded_value_version = v->version;
        loaded_value_token = v->token;
        CHECK(v->key && !strcmp(v->key, "writer-key") && v->at_ms == 1700000000000);
        /* Both writes' ids, oldest first, each with the version it made. */
        CHECK(v->writes && !strcmp(v->writes, "1 01000000000000000000000000000000 w-1\n"
                                              "2 02000000000000000000000000000000 w-2\n"));
    }
    loaded_null_value |= !strcmp(v->name, "nul") && v->text == NULL && v->version == 1 && v->writes == NULL;
    return 0;
}

static uint64_t loaded_fence;
static int loaded_fences;
static int load_fence(const StoreMark *f)
{
    loaded_fence = f->max_token;
    loaded_fences++;
    return 0;
}
static uint64_t loaded_floor;
static uint32_t loaded_floor_bucket;
static int load_floor(const StoreFloor *f)
{
    loaded_floor = f->floor;
    loaded_floor_bucket = f->bucket;
    return 0;
}
static uint64_t loaded_guard_mark;
static int64_t loaded_guard_at;
static int load_guard_mark(const StoreMark *m)
{
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
static int loaded_ended, loaded_ended_permits;
static int load_ended(const StoreEnded *e)
{
    if (loaded_ended < 16)
        loaded_ended_seqs[loaded_ended] = e->seq;
    loaded_ended++;
    loaded_ended_permits += e->kind == KIND_SEMAPHORE;
    return 0;
}

static uint64_t loaded_revoked_token;
static int loaded_revoked;
static int load_revoked(const StoreRevoked *r)
{
    loaded_revoked_token = r->token;
    loaded_revoked++;
    return 0;
}

static int loaded_audit;
static uint64_t loaded_audit_last_seq;
static int loaded_audit_object, loaded_audit_mode;
static char loaded_audit_reason[32];
static int load_audit(const AuditRow *row)
{
    loaded_audit++;
    loaded_audit_last_seq = row->seq;
    loaded_audit_object = row->object;
    loaded_audit_mode = row->mode;
    snprintf(loaded_audit_reason, sizeof loaded_audit_reason, "%s", row->reason ? row->reason : "(null)");
    return 0;
}

static int load_record(void *ud, const StoreRecord *r)
{
    (void)ud;
    switch ((StoreRecordKind)r->kind) {
    case REC_LOCK:
        return load_lock(&r->lock);
    case REC_HOLDER:
        return load_holder(&r->holder);
    case REC_VALUE:
        return load_value(&r->value);
    case REC_FENCE:
        return load_fence(&r->fence);
    case REC_GUARD_MARK:
        return load_guard_mark(&r->guard_mark);
    case REC_FLOOR:
        return load_floor(&r->floor);
    case REC_ENDED:
        return load_ended(&r->ended);
    case REC_REVOKED:
        return load_revoked(&r->revoked);
    case REC_AUDIT:
        return load_audit(&r->audit);
    case REC_KINDS:
        break;
    }
    return -1;
}

/* The lock table's hooks as the gateway has them: every change recorded. */
static Commit *commit;
static void on_changed(void *ud, const Lock *lock)
{
    (void)ud;
    CHECK(commit_lock(commit, lock));
}
static void on_holder_changed(void *ud, const Lock *lock, const Holder *h)
{
    (void)ud;
    CHECK(commit_holder(commit, lock, h));
}
static void on_ended(void *ud, void *actor, const Lock *lock, const Holder *h, int how, uint64_t seq)
{
    (void)actor;
    (void)ud;
    CHECK(commit_ended(commit, (LockKind)lock->kind, lock->name, h->lease, h->token, how, seq));
    CHECK(commit_holder_gone(commit, (LockKind)lock->kind, lock->name, h->token));
}
static void on_value_changed(void *ud, const Lock *lock)
{
    (void)ud;
    CHECK(commit_value(commit, lock));
}
static void on_forgotten(void *ud, const Lock *lock) { (void)ud, (void)lock; }

/* A grant of name (of kind, in mode, with lease byte id) at `at`; a
 * semaphore's of `permits` (limit 2, or 5 for more than one). */
static const Holder *take_permits(Locktab *lt, LockKind kind, const char *name, int id, uint8_t mode,
                                  int64_t delay_ms, uint32_t permits, const Now *at)
{
    uint8_t lease[LEASE_ID_BYTES];
    memset(lease, id, sizeof lease);
    AcquireArgs a = {"o",  NULL,     1000,     0,   NULL, lease, NULL, NULL, {NULL, NULL}, mode, true, delay_ms,
                     permits > 1 ? 5 : 2, permits, NULL};
    const Lock *lock;
    const Holder *h = NULL;
    Waiter *w;
    CHECK(locktab_acquire(lt, kind, name, &a, NULL, at, &lock, &h, &w) == LOCK_OK);
    return h;
}

static const Holder *take(Locktab *lt, LockKind kind, const char *name, int id, uint8_t mode, int64_t delay_ms,
                          const Now *at)
{
    return take_permits(lt, kind, name, id, mode, delay_ms, 1, at);
}

static void wait_done(Commit *c)
{
    struct pollfd p = {commit_fd(c), POLLIN, 0};
    CHECK(poll(&p, 1, 5000) == 1);
    CHECK(commit_done(c) == 0);
}

/* The loop's short wait (commit_poll_begin): a polled batch's holds run once
 * it is done, whether or not its eventfd was written; a batch ended while the
 * loop stopped polling still wakes it (no lost wake-up); a big batch is not
 * polled. Whether a batch is polled depends on how long the last commit took,
 * so both ways are checked for what must hold. */
static void poll_batches(Commit *c)
{
    int polled = 0;
    for (int round = 0; round < 20; round++) {
        Probe p = {{.ready = on_ready}, 0};
        CHECK(commit_fence(c, "polled", 100 + (uint64_t)round));
        commit_hold(c, &p.hold);
        commit_flush(c);
        bool poll = commit_poll_begin(c);
        polled += poll;
        if (!poll) {
            wait_done(c);
        } else if (round % 2) {
            /* Stop at once: done already, or the writer writes the eventfd. */
            if (commit_poll_end(c))
                CHECK(commit_done(c) == 0);
            else
                wait_done(c);
        } else {
            struct timespec t0, t;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            do
                clock_gettime(CLOCK_MONOTONIC, &t);
            while (!commit_poll_done(c) && t.tv_sec - t0.tv_sec < 10);
            CHECK(commit_poll_end(c));
            CHECK(commit_done(c) == 0);
        }
        CHECK(p.ready == 1 && !commit_held(&p.hold));
        CHECK(!commit_pending(c));
    }
    fprintf(stderr, "commit: %d of 20 batches polled (the others' last commit was slow)\n", polled);
    /* More holds than a client or two: throughput-bound, the loop sleeps. */
    Probe many[COMMIT_POLL_HOLDS + 1];
    CHECK(commit_fence(c, "polled", 200));
    for (int i = 0; i <= COMMIT_POLL_HOLDS; i++) {
        many[i] = (Probe){{.ready = on_ready}, 0};
        commit_hold(c, &many[i].hold);
    }
    commit_flush(c);
    CHECK(!commit_poll_begin(c));
    wait_done(c);
    for (int i = 0; i <= COMMIT_POLL_HOLDS; i++)
        CHECK(many[i].ready == 1);
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
    commit = c;
    CHECK(!commit_pending(c));
    commit_keep_history(c, 3);
    LocktabLimits limits = {1000, 1000, 10, 16, 600000};
    LocktabHooks hooks = {NULL, on_changed, NULL, NULL, on_forgotten, on_ended, on_holder_changed, on_value_changed,
                          NULL};
    Locktab *lt = locktab_new(&limits, &hooks);
    locktab_continue_history(lt, 105); /* its ended leases come after the five below */

    char name[16];
    Probe probes[10];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "k%d", i);
        /* Token i + 1; the lease ends at 5000 + i on the boot clock. */
        Now at = {5000 + i - 1000 - LOCKTAB_DEADLINE_SLACK_MS, 4102444800000 - 1000};
        CHECK(take(lt, KIND_LOCK, name, i + 1, MODE_WRITE, 0, &at)->token == (uint64_t)i + 1);
        probes[i] = (Probe){{.ready = on_ready}, 0};
        commit_hold(c, &probes[i].hold);
    }
    CHECK(commit_fence(c, "res", 42));
    /* An idle resource is forgotten: its row goes, its mark becomes a floor. */
    CHECK(commit_fence(c, "idle-res", 30));
    CHECK(commit_fence_forget(c, "idle-res", 77, 30));
    /* k9 is put, its lease ends, then it is forgotten: records apply in
     * order, so its rows go; the counter they vouched for (10) must survive
     * in meta. */
    CHECK(commit_holder_gone(c, KIND_LOCK, "k9", 10));
    CHECK(commit_forget(c, KIND_LOCK, "k9", 10));
    CHECK(commit_guard_mark(c, "k3", 4, 1700000000123));
    /* Audit rows: the rows a key evicted (auditlog.h) go, one by one. */
    for (uint64_t i = 1; i <= 4; i++) {
        AuditRow row = {i, 1000, AUDIT_GRANTED, "k1", "o", i, "key", "127.0.0.1:1", AUDIT_OF_LOCK, AUDIT_MODE_WRITE,
                        "",  NULL};
        CHECK(commit_audit(c, &row));
    }
    CHECK(commit_audit_drop(c, "key", 1, 2));
    CHECK(commit_audit_drop(c, "key", 2, 3));
    /* Five ended leases; storage keeps the newest three. The first was
     * force-released: its token stays revoked after the history drops it. */
    for (int i = 1; i <= 5; i++) {
        uint8_t lease[LEASE_ID_BYTES] = {(uint8_t)i};
        CHECK(commit_ended(c, KIND_LOCK, "k1", lease, (uint64_t)i, i == 1 ? LEASE_END_REVOKED : LEASE_END_RELEASED,
                           (uint64_t)(100 + i)));
    }
    CHECK(commit_pending(c));
    commit_flush(c);
    /* While the first batch is in flight, the next one fills up: "late" is
     * granted token 11 and released; readers, permits and a lock-delay. */
    Now at = {100000, 1700000000000};
    uint8_t lease[LEASE_ID_BYTES];
    uint32_t left;
    CHECK(take(lt, KIND_LOCK, "late", 11, MODE_WRITE, 0, &at)->token == 11);
    memset(lease, 11, sizeof lease);
    CHECK(locktab_release(lt, KIND_LOCK, "late", lease, NULL, &at, &left) == LOCK_OK);
    CHECK(take(lt, KIND_LOCK, "rd", 12, MODE_READ, 0, &at)->token == 12);
    CHECK(take(lt, KIND_LOCK, "rd", 13, MODE_READ, 0, &at)->token == 13);
    memset(lease, 12, sizeof lease);
    CHECK(locktab_release(lt, KIND_LOCK, "rd", lease, NULL, &at, &left) == LOCK_OK); /* its row goes */
    CHECK(take(lt, KIND_SEMAPHORE, "sem", 14, MODE_WRITE, 0, &at)->token == 14);
    CHECK(take(lt, KIND_SEMAPHORE, "sem", 15, MODE_WRITE, 0, &at)->token == 15);
    memset(lease, 14, sizeof lease);
    CHECK(locktab_release(lt, KIND_SEMAPHORE, "sem", lease, NULL, &at, &left) == LOCK_OK);
    CHECK(take(lt, KIND_SEMAPHORE, "sem", 16, MODE_WRITE, 0, &at)->token == 16);
    CHECK(take(lt, KIND_LOCK, "dl", 17, MODE_WRITE, 5000, &at)->token == 17);
    CHECK(locktab_revoke(lt, KIND_LOCK, "dl", NULL, &at) == LOCK_OK);
    /* One lease of three permits, one token: its permits are part of its record. */
    CHECK(take_permits(lt, KIND_SEMAPHORE, "wide", 18, MODE_WRITE, 0, 3, &at)->permits == 3);
    /* A lock's value, written twice by its holder (the later record wins), one of null, and
     * one whose name is forgotten with it. */
    const Lock *vl;
    const Holder *vh = take(lt, KIND_LOCK, "val", 19, MODE_WRITE, 0, &at);
    static const uint8_t d1[VALWRITE_DIGEST_BYTES] = {1}, d2[VALWRITE_DIGEST_BYTES] = {2};
    ValueArgs v1 = {"{\"a\":1}", false, 0, "writer-key", {NULL, NULL}, "w-1", d1};
    ValueArgs v2 = {"[2, 3]", true, 1, "writer-key", {NULL, NULL}, "w-2", d2};
    CHECK(locktab_set_value(lt, "val", vh->lease, &v1, &at, &vl) == LOCK_OK);
    CHECK(locktab_set_value(lt, "val", vh->lease, &v2, &at, &vl) == LOCK_OK && vl->value.version == 2);
    const Holder *nh = take(lt, KIND_LOCK, "nul", 20, MODE_WRITE, 0, &at);
    ValueArgs null = {NULL, false, 0, NULL, {NULL, NULL}, NULL, NULL};
    CHECK(locktab_set_value(lt, "nul", nh->lease, &null, &at, &vl) == LOCK_OK);
    CHECK(commit_value_gone(c, "gone"));
    AuditRow read_row = {5,   1000,           AUDIT_GRANTED,   "rd", "o", 13, "key", "127.0.0.1:1",
                         AUDIT_OF_LOCK, AUDIT_MODE_READ, "read_lease", NULL};
    CHECK(commit_audit(c, &read_row));
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
    /* Forget the lock names with the largest tokens: only meta can vouch for 17 now. */
    CHECK(commit_forget(c, KIND_LOCK, "late", 17));
    CHECK(commit_forget(c, KIND_LOCK, "dl", 17));
    /* A snapshot asked in the same batch: the changes are in the copy, taken
     * once the batch is durable; the copy is a file of its own, unlinked. */
    CHECK(commit_can_snapshot(c));
    snapped = (Snap){{.ready = on_snapshot}, c, -1, 0};
    commit_snapshot_hold(c, &snapped.hold);
    commit_flush(c);
    wait_done(c);
    /* 10 grants (a name's record and a lease's each), a lease gone and a
     * forget, 2 fences and a forget, a floor, a guard mark, 5 ended leases
     * and a revoked token, 4 audit rows and 2 dropped; 8 name records, 7
     * leases and 4 gone, 4 ended and a revoked token, an audit row; 2
     * forgets; a wide lease and its name's record; two more names and leases, three values
     * written and one removed. */
    CHECK(commit_stats(c)->commits == 3 && commit_stats(c)->rows == 39 + 25 + 2 + 2 + 4 + 4);
    locktab_free(lt);
    CHECK(snapped.fd >= 0 && snapped.size >= 4096);
    if (snapped.fd >= 0) {
        char head[16] = {0};
        CHECK(pread(snapped.fd, head, sizeof head, 0) == (ssize_t)sizeof head);
        CHECK(!memcmp(head, "SQLite format 3", 16));
        struct stat sb;
        CHECK(fstat(snapped.fd, &sb) == 0 && sb.st_nlink == 0 && (uint64_t)sb.st_size == snapped.size);
        char copy[600];
        snprintf(copy, sizeof copy, "%s.copy", path);
        int out = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        char buf[4096];
        ssize_t n;
        while (out >= 0 && (n = read(snapped.fd, buf, sizeof buf)) > 0)
            CHECK(write(out, buf, (size_t)n) == n);
        CHECK(out >= 0 && close(out) == 0);
        close(snapped.fd);
        StoreBackupInfo info;
        char final[620];
        snprintf(final, sizeof final, "%s.final", copy);
        unlink(final);
        CHECK(store_sqlite_check_copy(copy, final, &info, err, sizeof err) == 0);
        CHECK(info.last_token == 20 && info.locks == 14); /* 12 locks and two semaphores */
        unlink(final);
        unlink(copy);
    }
    commit_free(c);
    store_close(st);

    st = store_sqlite_open(path, "test-boot", err, sizeof err);
    CHECK(st != NULL);
    StoreLoad cb = {NULL, load_history_seq, load_record};
    uint64_t last_token = 0;
    CHECK(store_load(st, &cb, &last_token) == 0);
    CHECK(loaded_locks == 12); /* k0..k8, rd, val and nul */
    CHECK(loaded_writers == 11);
    CHECK(loaded_values == 2 && !strcmp(loaded_value_text, "[2, 3]") && loaded_value_version == 2);
    CHECK(loaded_value_token == 19 && loaded_null_value);
    CHECK(loaded_token_of_k7 == 8);
    CHECK(loaded_semaphores == 2 && loaded_limit == 2 && loaded_permits_of_wide == 3);
    CHECK(loaded_readers == 1 && loaded_reader_token == 13 && loaded_permits == 2);
    CHECK(loaded_fence == 42 && loaded_fences == 1);
    CHECK(loaded_history_seq == 109);
    CHECK(loaded_ended == 3 && loaded_ended_seqs[0] == 107 && loaded_ended_seqs[2] == 109);
    CHECK(loaded_ended_permits == 1);
    CHECK(loaded_floor == 30 && loaded_floor_bucket == 77);
    CHECK(loaded_revoked == 2 && loaded_revoked_token == 17);
    CHECK(loaded_audit == 3 && loaded_audit_last_seq == 5);
    CHECK(loaded_audit_object == AUDIT_OF_LOCK && loaded_audit_mode == AUDIT_MODE_READ);
    CHECK(!strcmp(loaded_audit_reason, "read_lease")); /* the reason comes back from storage */
    /* Same boot: the boot-clock deadline comes back as written. */
    CHECK(loaded_deadline_of_k7 == 5007);
    CHECK(loaded_guard_mark == 4);
    CHECK(loaded_guard_at == 1700000000123);
    CHECK(last_token == 20);
    /* A second server on the same file is refused. */
    Store *second = store_sqlite_open(path, "test-boot", err, sizeof err);
    CHECK(second == NULL);
    store_close(st);
    /* Another boot: the deadline means nothing on this boot's clock. */
    st = store_sqlite_open(path, "other-boot", err, sizeof err);
    CHECK(st != NULL);
    loaded_deadline_of_k7 = 0;
    last_holder_token = 0;
    last_holder_name[0] = '\0';
    CHECK(store_load(st, &cb, &last_token) == 0);
    CHECK(loaded_deadline_of_k7 == -1);
    Commit *pc = commit_new(st, err, sizeof err);
    CHECK(pc != NULL);
    if (pc) {
        poll_batches(pc);
        commit_free(pc);
    }
    store_close(st);
    return check_report("commit");
}
