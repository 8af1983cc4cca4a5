/* watch — lock watches; see watch.h. */
#include "api/watch.h"

#include <stdlib.h>
#include <string.h>

#include "core/smap.h"
#include "leasegate/container.h"
#include "net/http.h"

/* The watchers of one lock name. */
typedef struct Watched {
    DList reqs;       /* Request.watch.link */
    bool ready;       /* in Watches.ready: ask its watchers on the next tick */
    DLink rlink;
    char name[];      /* the smap key */
} Watched;

struct Watches {
    Smap *by_name; /* name -> Watched, while it has watchers */
    DList ready;   /* Watched.rlink */
    Heap deadlines; /* Request.watch.deadline */
    size_t count;
};

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
    smap_free(w->by_name, free);
    heap_clear(&w->deadlines);
    free(w);
}

static void watched_drop_if_empty(Watches *w, Watched *d)
{
    if (d->reqs.head)
        return;
    if (d->ready)
        dlist_remove(&w->ready, &d->rlink);
    smap_remove(w->by_name, d->name);
    free(d);
}

bool watch_start(Request *req, int64_t wait_ms, const WatchCalls *calls)
{
    Watches *w = req->srv->watches;
    Watched *d = smap_get(w->by_name, req->arg);
    if (!d) {
        size_t len = strlen(req->arg);
        if (!(d = calloc(1, sizeof *d + len + 1)))
            return false;
        memcpy(d->name, req->arg, len + 1);
        if (!smap_insert(w->by_name, d->name, d)) {
            free(d);
            return false;
        }
    }
    Now now = clock_now();
    heap_entry_init(&req->poll->watch.deadline);
    if (!heap_set(&w->deadlines, &req->poll->watch.deadline, now.mono_ms + wait_ms)) {
        watched_drop_if_empty(w, d);
        return false;
    }
    req->poll->watch.calls = calls;
    req->poll->watch.on = d;
    req->poll->watch.name = d->name;
    dlist_append(&d->reqs, &req->poll->watch.link);
    w->count++;
    http_hold(req); /* req->arg may be gone from here: the name is d's */
    return true;
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
 * one is written and ended at once); the entry, whose name the answer reads,
 * only after it. */
static void answer(Request *req)
{
    Watches *w = req->srv->watches;
    const WatchCalls *calls = req->poll->watch.calls;
    Watched *d = detach(req);
    calls->answer(req);
    watched_drop_if_empty(w, d);
}

void watch_end(Request *req, ErrCode code, const char *why)
{
    Watches *w = req->srv->watches;
    Watched *d = detach(req);
    http_reply_error(req, code, NULL, "%s", why);
    watched_drop_if_empty(w, d);
}

void watch_note(Server *s, const char *name)
{
    Watches *w = s->watches;
    Watched *d = smap_get(w->by_name, name);
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

void watch_tick(Server *s, const Now *now)
{
    Watches *w = s->watches;
    while (w->ready.head) {
        Watched *d = DLIST_ITEM(w->ready.head, Watched, rlink);
        dlist_remove(&w->ready, &d->rlink);
        d->ready = false;
        /* Answering the last watcher frees d: the next link is read first. */
        for (DLink *l = d->reqs.head, *next; l; l = next) {
            next = l->next;
            Request *req = DLIST_ITEM(l, RequestPoll, watch.link)->req;
            if (req->poll->watch.calls->due(req))
                answer(req);
        }
    }
    HeapEntry *h;
    while ((h = heap_peek(&w->deadlines)) && h->deadline_ms <= now->mono_ms)
        answer(CONTAINER_OF(h, RequestPoll, watch.deadline)->req);
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
