/* watch — lock watches; see watch.h. */
#include "api/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/quota.h"
#include "core/names.h"
#include "core/smap.h"
#include "leasegate/container.h"
#include "net/http.h"

/* The watchers of one name (a lock's or an election's), and the answer they get. */
typedef struct Watched {
    DList reqs;       /* Request.watch.link */
    bool ready;       /* in Watches.ready: ask its watchers on the next tick */
    bool scanning;    /* watch_tick walks reqs: kept even when they are all answered */
    DLink rlink;
    const WatchCalls *calls;
    SharedText *answer;      /* a reference: the answer of version answer_of, or NULL */
    uint64_t answer_of;
    const char *name; /* key + 1 */
    char key[];       /* the smap key: the name's LockKind as a digit, then the name */
} Watched;

struct Watches {
    Smap *by_name; /* key (kind and name) -> Watched, while it has watchers */
    DList ready;   /* Watched.rlink */
    Heap deadlines; /* Request.watch.deadline */
    size_t count;
    uint64_t deferred; /* watch_slices_deferred */
};

static void watched_free(void *p)
{
    Watched *d = p;
    sharedtext_unref(d->answer);
    free(d);
}

Watches *watches_new(void)
{
    Watches *w = calloc(1, sizeof *w);
    if (!w || !(w->by_name = smap_new())) {
        free(w);
        return NULL;
    }
    heap_init(&w->deadlines);
    return w;
}

void watches_free(Watches *w)
{
    if (!w)
        return;
    smap_free(w->by_name, watched_free);
    heap_clear(&w->deadlines);
    free(w);
}

static void watched_drop_if_empty(Watches *w, Watched *d)
{
    if (d->reqs.head || d->scanning)
        return;
    if (d->ready)
        dlist_remove(&w->ready, &d->rlink);
    smap_remove(w->by_name, d->key);
    watched_free(d);
}

/* The answer of d's name now: the one made for this version if there is one
 * (every watcher of one change shares it), else a new one. NULL when out of
 * memory. Borrowed: d holds it until the next version. */
static SharedText *answer_now(Server *s, Watched *d)
{
    uint64_t version = d->calls->version(s, d->name);
    if (d->answer && d->answer_of == version)
        return d->answer;
    SharedText *t = d->calls->build(s, d->name);
    if (!t)
        return NULL;
    sharedtext_unref(d->answer); /* requests still sending it keep theirs */
    d->answer = t;
    d->answer_of = version;
    return t;
}

/* The map's key of `name` of `kind`, into key (NAME_MAX_BYTES + 2 bytes). */
static void key_of(LockKind kind, const char *name, char *key)
{
    key[0] = (char)('0' + kind);
    snprintf(key + 1, NAME_MAX_BYTES + 1, "%s", name);
}

static Watched *watched_of(Watches *w, LockKind kind, const char *name, const WatchCalls *calls)
{
    char key[NAME_MAX_BYTES + 2];
    key_of(kind, name, key);
    Watched *d = smap_get(w->by_name, key);
    if (d)
        return d;
    size_t len = strlen(key);
    if (!(d = calloc(1, sizeof *d + len + 1)))
        return NULL;
    memcpy(d->key, key, len + 1);
    d->name = d->key + 1;
    d->calls = calls;
    if (!smap_insert(w->by_name, d->key, d)) {
        free(d);
        return NULL;
    }
    return d;
}

static void reply_nomem(Request *req) { http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry later"); }

void watch_start(Request *req, LockKind kind, int64_t wait_ms, const WatchCalls *calls)
{
    Server *s = req->srv;
    Watches *w = s->watches;
    Watched *d = watched_of(w, kind, req->arg, calls);
    if (!d) {
        reply_nomem(req);
        return;
    }
    /* What the answer will weigh, judged by what it would be now. */
    SharedText *now_answer = answer_now(s, d);
    if (!now_answer) {
        watched_drop_if_empty(w, d);
        reply_nomem(req);
        return;
    }
    if (!quota_watch_start(req, now_answer->len)) {
        watched_drop_if_empty(w, d);
        return;
    }
    Now now = clock_now();
    heap_entry_init(&req->poll->watch.deadline);
    if (!heap_set(&w->deadlines, &req->poll->watch.deadline, now.mono_ms + wait_ms)) {
        watched_drop_if_empty(w, d);
        reply_nomem(req);
        return;
    }
    req->poll->watch.calls = calls;
    req->poll->watch.on = d;
    req->poll->watch.name = d->name;
    dlist_append(&d->reqs, &req->poll->watch.link);
    w->count++;
    http_hold(req); /* req->arg may be gone from here: the name is d's */
}

/* Takes req out of its lock's watchers; returns its entry, which the caller
 * frees if it is left empty (watched_drop_if_empty). */
static Watched *detach(Request *req)
{
    Watches *w = req->srv->watches;
    Watched *d = req->poll->watch.on;
    req->poll->watch.on = NULL;
    heap_remove(&w->deadlines, &req->poll->watch.deadline);
    dlist_remove(&d->reqs, &req->poll->watch.link);
    w->count--;
    return d;
}

static void stop(Request *req)
{
    Watches *w = req->srv->watches;
    watched_drop_if_empty(w, detach(req));
}

/* Out of the watchers before the answer, which may end the request (a parked
 * one is written and ended at once); the entry, whose answer it sends, only
 * after it. */
static void answer(Request *req)
{
    Server *s = req->srv;
    Watched *d = detach(req);
    SharedText *t = answer_now(s, d);
    if (t) {
        quota_watch_answer(req, t->len);
        http_reply_shared(req, 200, "application/json", t);
    } else {
        reply_nomem(req);
    }
    watched_drop_if_empty(s->watches, d);
}

void watch_end(Request *req, ErrCode code, const char *why)
{
    Watches *w = req->srv->watches;
    Watched *d = detach(req);
    http_reply_error(req, code, NULL, "%s", why);
    watched_drop_if_empty(w, d);
}

void watch_note(Server *s, LockKind kind, const char *name)
{
    Watches *w = s->watches;
    char key[NAME_MAX_BYTES + 2];
    key_of(kind, name, key);
    Watched *d = smap_get(w->by_name, key);
    if (d && !d->ready) {
        d->ready = true;
        dlist_append(&w->ready, &d->rlink);
    }
}

int64_t watch_next_timeout_ms(const Server *s, const Now *now)
{
    const Watches *w = s->watches;
    if (w->ready.head)
        return 0;
    return heap_ms_until_first(&w->deadlines, now->mono_ms);
}

/* Answers the due watchers of d, at most *budget of them. True when d has
 * none due left (it may then be gone). */
static bool answer_due(Watches *w, Watched *d, size_t *budget)
{
    d->scanning = true;
    bool done = true;
    for (DLink *l = d->reqs.head, *next; l; l = next) {
        next = l->next; /* answering frees the request's link, never d (scanning) */
        Request *req = DLIST_ITEM(l, RequestPoll, watch.link)->req;
        if (!req->poll->watch.calls->due(req))
            continue;
        if (*budget == 0) {
            done = false;
            break;
        }
        answer(req);
        (*budget)--;
    }
    d->scanning = false;
    if (done) {
        dlist_remove(&w->ready, &d->rlink);
        d->ready = false;
    }
    watched_drop_if_empty(w, d);
    return done;
}

void watch_tick(Server *s, const Now *now)
{
    Watches *w = s->watches;
    /* A slice per turn: what is left stays ready (watch_next_timeout_ms: 0),
     * and the loop serves its sockets before the next slice. */
    size_t budget = WATCH_SLICE;
    while (w->ready.head && answer_due(w, DLIST_ITEM(w->ready.head, Watched, rlink), &budget))
        ;
    HeapEntry *h;
    while (budget > 0 && (h = heap_peek(&w->deadlines)) && h->deadline_ms <= now->mono_ms) {
        answer(CONTAINER_OF(h, RequestPoll, watch.deadline)->req);
        budget--;
    }
    if (w->ready.head || ((h = heap_peek(&w->deadlines)) && h->deadline_ms <= now->mono_ms))
        w->deferred++;
}

void watch_drain(Server *s)
{
    HeapEntry *h;
    while ((h = heap_peek(&s->watches->deadlines)))
        answer(CONTAINER_OF(h, RequestPoll, watch.deadline)->req);
}

void watch_request_end(Request *req)
{
    if (req->poll && req->poll->watch.on)
        stop(req);
}

size_t watch_count(const Server *s) { return s->watches->count; }
uint64_t watch_slices_deferred(const Server *s) { return s->watches->deferred; }
