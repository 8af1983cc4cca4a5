/* guardq — the guard's write queues; see guardq.h. */
#include "guard/guardq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/heap.h"
#include "core/smap.h"
#include "guard/proxy.h"
#include "net/http.h"

typedef struct GuardQueue {
    DList writes;            /* GuardSlot.link, in arrival order */
    int64_t settle_until_ms; /* monotonic: no write starts before this */
    HeapEntry settle;        /* in GuardQueues.settling while settle_until_ms is ahead */
    bool dirty;              /* in GuardQueues.dirty (through dlink): to be advanced */
    DLink dlink;
    char lock[];             /* the map's key */
} GuardQueue;

/* A write's place in the queue of one of its locks. */
typedef struct GuardSlot {
    DLink link;        /* in q->writes while queued */
    GuardQueue *q;     /* NULL once out of the queue */
    struct GuardWrite *w;
    GuardBinding bind;
} GuardSlot;

struct GuardWrite {
    GuardSlot slots[2];
    size_t nslots;
    GuardQueues *gq;
    Request *req;      /* NULL once the client is gone */
    ProxyCall *call;   /* req->guard->call; this write's own once detached */
    GuardTicket ticket; /* its share of the guard's calls, given back when it is freed */
    HeapEntry turn;    /* in GuardQueues.waiting until its turn comes: --guard-timeout */
    CommitHold hold;   /* the end record being made durable */
    GuardPrepare prepare; /* NULL: none */
    void *prepare_ud;
    bool preparing, prepared;
    GuardPrepare confirm; /* NULL: none; its ud is prepare_ud */
    bool confirming, confirmed;
    bool has_body;
    bool body_done;    /* the client's request has fully arrived */
    bool started;      /* its call was started */
    bool ending;       /* its end record is being made durable */
    bool released;     /* the upstream may have the whole request */
};

struct GuardQueues {
    Server *srv;
    GuardShares *shares;
    Smap *queues;  /* lock name -> GuardQueue, while it has writes or settles */
    Heap settling; /* GuardQueue.settle */
    Heap waiting;  /* GuardWrite.turn */
    DList dirty;   /* GuardQueue.dlink */
};

GuardQueues *guardq_new(Server *s, GuardShares *shares)
{
    GuardQueues *gq = calloc(1, sizeof *gq);
    if (!gq)
        return NULL;
    gq->srv = s;
    gq->shares = shares;
    heap_init(&gq->settling);
    heap_init(&gq->waiting);
    if (!(gq->queues = smap_new())) {
        free(gq);
        return NULL;
    }
    return gq;
}

void guardq_free(GuardQueues *gq)
{
    if (!gq)
        return;
    /* The heaps first: clearing them marks their entries, which the queues hold. */
    heap_clear(&gq->settling);
    heap_clear(&gq->waiting);
    smap_free(gq->queues, free);
    free(gq);
}

static int64_t settle_ms(const GuardQueues *gq) { return (int64_t)gq->srv->cfg.guard_settle_s * 1000; }

static GuardQueue *queue_for(GuardQueues *gq, const char *lock)
{
    GuardQueue *q = smap_get(gq->queues, lock);
    if (q)
        return q;
    size_t n = strlen(lock) + 1;
    q = calloc(1, sizeof *q + n);
    if (!q)
        return NULL;
    heap_entry_init(&q->settle);
    memcpy(q->lock, lock, n);
    if (!smap_insert(gq->queues, q->lock, q)) {
        free(q);
        return NULL;
    }
    return q;
}

/* A queue goes once it has no write, waits for no settling and is not about
 * to be advanced. */
static void drop_if_idle(GuardQueues *gq, GuardQueue *q)
{
    if (q->writes.len || q->dirty || heap_queued(&q->settle))
        return;
    smap_remove(gq->queues, q->lock);
    free(q);
}

static void kick(GuardQueues *gq, GuardQueue *q)
{
    if (q->dirty)
        return;
    q->dirty = true;
    dlist_append(&gq->dirty, &q->dlink);
}

/* Holds q's next write back until `until` (monotonic). False when out of memory. */
static bool settle_until(GuardQueues *gq, GuardQueue *q, int64_t until)
{
    if (until <= q->settle_until_ms)
        return true;
    q->settle_until_ms = until;
    return heap_set(&gq->settling, &q->settle, until);
}

bool guardq_restore(GuardQueues *gq, const char *lock, int64_t at_ms, const Now *now)
{
    int64_t left = at_ms + settle_ms(gq) - now->wall_ms;
    if (at_ms <= 0 || left <= 0)
        return true;
    if (left > settle_ms(gq))
        left = settle_ms(gq); /* the wall clock stepped back: never more than one settle time */
    GuardQueue *q = queue_for(gq, lock);
    if (!q)
        return false;
    if (!settle_until(gq, q, now->mono_ms + left)) {
        drop_if_idle(gq, q);
        return false;
    }
    return true;
}

size_t guardq_writes(const GuardQueues *gq, const char *lock)
{
    const GuardQueue *q = smap_get(gq->queues, lock);
    return q ? q->writes.len : 0;
}

int64_t guardq_settling_ms(const GuardQueues *gq, const char *lock, const Now *now)
{
    const GuardQueue *q = smap_get(gq->queues, lock);
    return q && q->settle_until_ms > now->mono_ms ? q->settle_until_ms - now->mono_ms : 0;
}

void guardq_reply_settling(Request *req, const char *lock, int64_t ms)
{
    req->srv->metrics.guard_refused[GUARD_REFUSED_SETTLING]++;
    http_reply_error(req, ERR_OVERLOADED, json_pack("{s:s, s:I}", "lock", lock, "retry_after_ms", (json_int_t)ms),
                     "lock '%s' is settling: a write let through before may still be applied by the backend "
                     "(--guard-settle), so no write of it goes for %lld ms more; retry then",
                     lock, (long long)ms);
    char secs[24];
    snprintf(secs, sizeof secs, "%lld", (long long)((ms + 999) / 1000));
    http_add_header(req, MHD_HTTP_HEADER_RETRY_AFTER, secs);
}

static const GuardStale NOT_HOLDER[] = {
    [REASON_UNKNOWN] = {"unknown", "the lease is not one this server issued for the lock, or it has been forgotten"},
    [REASON_EXPIRED] = {"expired", "the lease expired"},
    [REASON_SUPERSEDED] = {"superseded", "the lease expired and the lock has a newer holder"},
    [REASON_RELEASED] = {"released", "the lease was released"},
    [REASON_REVOKED] = {"revoked", "an admin force-released the lock"},
};
static const GuardStale READ_LEASE = {"read_lease", "the lease holds the lock in read mode: a write needs the writer's "
                                                    "lease"};
static const GuardStale TOKEN_CHANGED = {"token_changed", "the lease's token changed"};
static const GuardStale NEWER_TOKEN = {"newer_token", "a write with a larger token was let through"};
static const GuardStale NEWER_ARRIVED = {"newer_token", "a write with a larger token arrived"};

const GuardStale *guardq_stale_reason(const Server *s, const GuardBinding *b)
{
    Now now = clock_now();
    LockKind kind = guard_binding_kind(b->lock);
    const char *name = guard_binding_name(b->lock);
    const Holder *h = locktab_held_by(s->locks, kind, name, b->lease, &now);
    if (!h)
        return &NOT_HOLDER[locktab_why_not(s->locks, kind, name, b->lease)];
    if (h->mode == MODE_READ)
        return &READ_LEASE;
    if (h->token != b->token)
        return &TOKEN_CHANGED; /* cannot happen: reentry keeps it */
    if (fence_max(s->guard_marks, b->lock) > b->token)
        return &NEWER_TOKEN;
    return NULL;
}

void guardq_reply_stale(Request *req, const GuardBinding *b, const GuardStale *why)
{
    Server *s = req->srv;
    s->metrics.guard_rejected_stale++;
    /* The lease presented: a holder's, or an ended lease's the history remembers. */
    Now now = clock_now();
    LockKind kind = guard_binding_kind(b->lock);
    const char *name = guard_binding_name(b->lock);
    const Holder *presented = locktab_held_by(s->locks, kind, name, b->lease, &now);
    uint64_t token = presented ? presented->token : locktab_token_of(s->locks, kind, name, b->lease);
    s->guard_refused(req, b->lock, token, presented ? presented->owner : "", why->code);
    const Lock *l = locktab_get(s->locks, kind, name);
    const Holder *first = l ? locktab_holder(l) : NULL;
    json_t *holder = first ? json_integer((json_int_t)first->token) : json_null();
    json_t *extra = json_pack("{s:s, s:o, s:I, s:o, s:s}", "lock", b->lock, "token",
                              token ? json_integer((json_int_t)token) : json_null(), "max_token",
                              (json_int_t)fence_max(s->guard_marks, b->lock), "holder_token", holder, "reason",
                              why->code);
    char claim[48] = "";
    if (token)
        snprintf(claim, sizeof claim, " (fencing token %llu)", (unsigned long long)token);
    http_reply_error(req, ERR_STALE_TOKEN, extra,
                     "this write%s to %.*s under lock '%s' may not go through: %s; the lock's fence is %llu", claim,
                     req->raw_uri ? (int)strcspn(req->raw_uri, "?") : 1, req->raw_uri ? req->raw_uri : "?", b->lock,
                     why->why, (unsigned long long)fence_max(s->guard_marks, b->lock));
}

/* The first of w's locks whose write may not go now, or NULL; *why says why. */
static const GuardBinding *stale_binding(const GuardWrite *w, const GuardStale **why)
{
    for (size_t i = 0; i < w->nslots; i++)
        if ((*why = guardq_stale_reason(w->gq->srv, &w->slots[i].bind)))
            return &w->slots[i].bind;
    return NULL;
}

static void write_free(GuardWrite *w)
{
    guardshare_give(&w->ticket);
    free(w);
}

/* Takes w out of its queues (which then advance) and out of every wait. */
static void dequeue(GuardWrite *w)
{
    GuardQueues *gq = w->gq;
    for (size_t i = 0; i < w->nslots; i++) {
        GuardSlot *sl = &w->slots[i];
        if (!sl->q)
            continue;
        dlist_remove(&sl->q->writes, &sl->link);
        kick(gq, sl->q);
        sl->q = NULL;
    }
    heap_remove(&gq->waiting, &w->turn);
    commit_unhold(gq->srv->commit, &w->hold);
}

static bool queued(const GuardWrite *w) { return w->slots[0].q != NULL; }

/* A refused write leaves its queues and lets go of its call and its share
 * at once, not when its client is done sending (a client answered before
 * its body ends gets the answer only then: libmicrohttpd answers no request
 * mid-body). The upstream sees its connection close before the request is
 * complete. */
static void drop(GuardWrite *w)
{
    dequeue(w);
    if (w->call) {
        proxy_call_free(w->call);
        w->call = NULL;
        if (w->req)
            w->req->guard->call = NULL;
    }
    guardshare_give(&w->ticket);
}

/* Refuses a queued write: its client is answered 409. */
static void refuse(GuardWrite *w, const GuardBinding *b, const GuardStale *why)
{
    GuardBinding bind = *b; /* b is in w */
    drop(w);
    if (w->req)
        guardq_reply_stale(w->req, &bind, why);
}

/* Refuses a queued write with 503 (its turn did not come, or no memory). */
static void refuse_busy(GuardWrite *w, const char *fmt, const char *lock)
{
    drop(w);
    if (w->req)
        http_reply_error(w->req, ERR_OVERLOADED, json_pack("{s:s}", "lock", lock), fmt, lock);
}

/* The writes queued behind one that may still be applied are refused: none
 * can go before the lock has settled, and their clients are told when. */
static void refuse_settling(GuardQueue *q)
{
    Now now = clock_now();
    while (q->writes.head) {
        GuardWrite *w = DLIST_ITEM(q->writes.head, GuardSlot, link)->w;
        drop(w);
        if (w->req)
            guardq_reply_settling(w->req, q->lock, q->settle_until_ms - now.mono_ms);
    }
}

/* Is w at the head of every queue it is in, with none of them settling? */
static bool its_turn(const GuardWrite *w, int64_t now_ms)
{
    for (size_t i = 0; i < w->nslots; i++) {
        const GuardQueue *q = w->slots[i].q;
        if (q->writes.head != &w->slots[i].link || q->settle_until_ms > now_ms)
            return false;
    }
    return true;
}

static void end_durable(CommitHold *hold);
static void end_failed(CommitHold *hold);

/* The end record: the marks and the time this write is let through, durable
 * before its end leaves. False when out of memory. */
static bool record_end(GuardWrite *w)
{
    Server *s = w->gq->srv;
    Now now = clock_now();
    for (size_t i = 0; i < w->nslots; i++) {
        const GuardBinding *b = &w->slots[i].bind;
        if (!commit_guard_mark(s->commit, b->lock, b->token, now.wall_ms))
            return false;
    }
    w->ending = true;
    w->hold.ready = end_durable;
    w->hold.failed = end_failed;
    commit_hold(s->commit, &w->hold);
    return true;
}

/* One step of the write at the head of its queues. True when it left them. */
static bool step(GuardWrite *w)
{
    if (w->released || w->ending || w->preparing || w->confirming)
        return false; /* waiting for the upstream's answer, the end record, or the prepare or confirm step */
    const GuardStale *why;
    const GuardBinding *stale;
    if (w->prepare && !w->prepared) {
        if ((stale = stale_binding(w, &why))) {
            refuse(w, stale, why);
            return true;
        }
        heap_remove(&w->gq->waiting, &w->turn);
        w->preparing = true;
        if (!w->prepare(w->prepare_ud, w)) {
            drop(w); /* the step answered the client */
            return true;
        }
        return false;
    }
    if (w->has_body && !w->started) {
        if ((stale = stale_binding(w, &why))) {
            refuse(w, stale, why);
            return true;
        }
        heap_remove(&w->gq->waiting, &w->turn);
        w->started = true;
        proxy_call_start(w->call);
    }
    if (!w->body_done)
        return false;
    if ((stale = stale_binding(w, &why))) {
        refuse(w, stale, why);
        return true;
    }
    heap_remove(&w->gq->waiting, &w->turn);
    if (!record_end(w)) {
        refuse_busy(w, "out of memory while recording a write of lock '%s'; retry", w->slots[0].bind.lock);
        return true;
    }
    return false;
}

/* The head of q moves as far as it can. A write bound to another lock too
 * moves only at the head of both: the other queue's advance moves it then. */
static void advance(GuardQueue *q)
{
    int64_t now_ms = clock_now().mono_ms;
    while (q->writes.head) {
        GuardWrite *w = DLIST_ITEM(q->writes.head, GuardSlot, link)->w;
        if (!its_turn(w, now_ms) || !step(w))
            return;
    }
}

/* Advances every queue kicked since, until none is left; queues with nothing
 * to do go. Every entry point ends here, so no advance runs inside another. */
static void run(GuardQueues *gq)
{
    while (gq->dirty.head) {
        GuardQueue *q = DLIST_ITEM(gq->dirty.head, GuardQueue, dlink);
        dlist_remove(&gq->dirty, &q->dlink);
        q->dirty = false;
        advance(q);
        drop_if_idle(gq, q);
    }
}

static void kick_all(GuardWrite *w)
{
    for (size_t i = 0; i < w->nslots; i++)
        if (w->slots[i].q)
            kick(w->gq, w->slots[i].q);
}

/* The end record is durable: the end leaves, if the write may still go
 * (and its confirm step, when it has one, has found nothing changed). */
static void end_durable(CommitHold *hold)
{
    GuardWrite *w = CONTAINER_OF(hold, GuardWrite, hold);
    GuardQueues *gq = w->gq;
    w->ending = false;
    const GuardStale *why;
    const GuardBinding *stale = stale_binding(w, &why);
    if (stale) {
        refuse(w, stale, why);
    } else if (w->confirm && !w->confirmed) {
        w->confirming = true;
        if (!w->confirm(w->prepare_ud, w)) {
            w->confirming = false;
            drop(w); /* the step answered the client */
        }
    } else {
        w->released = true;
        if (w->has_body) {
            proxy_call_release(w->call);
        } else {
            /* Without a body the request is whole once it starts. */
            w->started = true;
            proxy_call_start(w->call);
        }
    }
    run(gq);
}

/* The end record will never be durable (the store failed, or this gateway no
 * longer leads): the end never leaves, and the client is told to retry
 * (through the gateway that leads now). */
static void end_failed(CommitHold *hold)
{
    GuardWrite *w = CONTAINER_OF(hold, GuardWrite, hold);
    GuardQueues *gq = w->gq;
    w->ending = false;
    drop(w);
    if (w->req)
        http_reply_error(w->req, ERR_OVERLOADED, json_pack("{s:s}", "lock", w->slots[0].bind.lock),
                         "this gateway cannot record the write of lock '%s' (its store failed, or it no longer "
                         "leads): nothing of its end was sent; retry",
                         w->slots[0].bind.lock);
    run(gq);
}

/* The upstream answered w, or its call ended without an answer: the next
 * write may go, at once or (an end that may still be applied) once settled. */
static void on_answered(void *ud, ProxyOutcome outcome)
{
    GuardWrite *w = ud;
    GuardQueues *gq = w->gq;
    GuardQueue *settling[2] = {NULL, NULL};
    if (w->released && outcome == PROXY_UNKNOWN && settle_ms(gq) > 0) {
        int64_t until = clock_now().mono_ms + settle_ms(gq);
        for (size_t i = 0; i < w->nslots; i++) {
            GuardQueue *q = w->slots[i].q;
            if (q && settle_until(gq, q, until))
                settling[i] = q;
            else if (q)
                q->settle_until_ms = 0; /* out of memory: the wait is lost, not the queue */
        }
    }
    dequeue(w);
    for (size_t i = 0; i < 2; i++)
        if (settling[i])
            refuse_settling(settling[i]);
    if (!w->req)
        write_free(w); /* detached: nobody else holds it */
    run(gq);
}

static int compare_slots(const void *a, const void *b)
{
    return strcmp(((const GuardSlot *)a)->bind.lock, ((const GuardSlot *)b)->bind.lock);
}

bool guardq_preparing(const GuardWrite *w) { return (w->preparing || w->confirming) && queued(w); }

void guardq_set_confirm(GuardWrite *w, GuardPrepare confirm) { w->confirm = confirm; }

void guardq_confirmed(GuardWrite *w, bool ok)
{
    if (!w->confirming || !queued(w))
        return;
    GuardQueues *gq = w->gq;
    w->confirming = false;
    if (!ok) {
        drop(w);
        run(gq);
        return;
    }
    w->confirmed = true;
    end_durable(&w->hold);
}

void guardq_prepared(GuardWrite *w, bool ok)
{
    if (!guardq_preparing(w))
        return;
    GuardQueues *gq = w->gq;
    w->preparing = false;
    w->prepared = ok;
    if (ok)
        kick_all(w);
    else
        drop(w);
    run(gq);
}

bool guardq_add(GuardQueues *gq, Request *req, ProxyCall *call, bool has_body, const GuardBinding *b, size_t nb,
                GuardTicket *ticket, GuardPrepare prepare, void *prepare_ud)
{
    Server *s = gq->srv;
    GuardWrite *w = calloc(1, sizeof *w);
    if (!w)
        return false;
    w->gq = gq;
    w->nslots = nb;
    for (size_t i = 0; i < nb; i++) {
        w->slots[i].bind = b[i];
        w->slots[i].w = w;
    }
    /* Queues are always entered in the order of their names. */
    qsort(w->slots, nb, sizeof w->slots[0], compare_slots);
    GuardQueue *qs[2] = {NULL, NULL};
    for (size_t i = 0; i < nb; i++) {
        if (!(qs[i] = queue_for(gq, w->slots[i].bind.lock))) {
            for (size_t j = 0; j < i; j++)
                drop_if_idle(gq, qs[j]);
            free(w);
            return false;
        }
    }
    heap_entry_init(&w->turn);
    if (!heap_set(&gq->waiting, &w->turn, clock_now().mono_ms + (int64_t)s->cfg.guard_timeout_s * 1000)) {
        for (size_t i = 0; i < nb; i++)
            drop_if_idle(gq, qs[i]);
        free(w);
        return false;
    }
    /* The marks go up now, in memory: a write of a smaller token that arrives
     * later is refused at once. They are stored with the end record. */
    for (size_t i = 0; i < nb; i++) {
        GuardQueue *q = qs[i];
        uint64_t token = w->slots[i].bind.token;
        for (DLink *l = q->writes.head; l;) {
            GuardSlot *older = DLIST_ITEM(l, GuardSlot, link);
            l = l->next;
            if (older->bind.token < token && !older->w->released)
                refuse(older->w, &older->bind, &NEWER_ARRIVED);
        }
        if (fence_max(s->guard_marks, q->lock) < token) {
            Now now = clock_now();
            uint64_t max;
            if (fence_check(s->guard_marks, q->lock, token, &now, &max) == FENCE_ACCEPTED)
                fence_raise(s->guard_marks, q->lock, token);
        }
        w->slots[i].q = q;
        dlist_append(&q->writes, &w->slots[i].link);
        kick(gq, q);
    }
    w->req = req;
    w->call = call;
    w->has_body = has_body;
    w->prepare = prepare;
    w->prepare_ud = prepare_ud;
    w->ticket = *ticket;
    *ticket = (GuardTicket){NULL, NULL, NULL};
    req->guard->write = w;
    if (has_body)
        proxy_call_hold_end(call);
    proxy_call_on_answered(call, on_answered, w);
    run(gq);
    return true;
}

void guardq_body_done(Request *req)
{
    GuardWrite *w = req->guard->write;
    if (!w || w->body_done)
        return;
    w->body_done = true;
    kick_all(w);
    run(w->gq);
}

void guardq_refuse(Request *req)
{
    GuardWrite *w = req->guard->write;
    if (!w || w->released)
        return;
    GuardQueues *gq = w->gq;
    drop(w);
    run(gq);
}

void guardq_request_end(Request *req)
{
    GuardWrite *w = req->guard->write;
    if (!w)
        return;
    GuardQueues *gq = w->gq;
    req->guard->write = NULL;
    w->req = NULL;
    if (queued(w) && w->released && req->guard->call) {
        /* The upstream may have the whole request: the next write waits for its answer. */
        ProxyCall *call = req->guard->call;
        req->guard->call = NULL;
        if (proxy_call_detach(call))
            return; /* on_answered frees w */
    }
    dequeue(w);
    write_free(w);
    run(gq);
}

int64_t guardq_next_timeout_ms(const GuardQueues *gq, const Now *now)
{
    int64_t a = heap_ms_until_first(&gq->settling, now->mono_ms);
    int64_t b = heap_ms_until_first(&gq->waiting, now->mono_ms);
    return a < 0 ? b : b < 0 || a < b ? a : b;
}

void guardq_tick(GuardQueues *gq, const Now *now)
{
    HeapEntry *e;
    while ((e = heap_peek(&gq->settling)) && e->deadline_ms <= now->mono_ms) {
        GuardQueue *q = CONTAINER_OF(heap_pop(&gq->settling), GuardQueue, settle);
        kick(gq, q);
    }
    while ((e = heap_peek(&gq->waiting)) && e->deadline_ms <= now->mono_ms) {
        GuardWrite *w = CONTAINER_OF(heap_pop(&gq->waiting), GuardWrite, turn);
        gq->srv->metrics.guard_refused[GUARD_REFUSED_QUEUE_TIMEOUT]++;
        refuse_busy(w,
                    "this write waited its whole --guard-timeout behind other writes of lock '%s' (or for the lock's "
                    "settle time) and was not sent; retry",
                    w->slots[0].bind.lock);
        if (!w->req)
            write_free(w);
    }
    run(gq);
}
