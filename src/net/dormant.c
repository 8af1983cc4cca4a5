/*
 * dormant — a parked waiter's compact record; see dormant.h.
 *
 * Life of one: dormant_doze (its Request's parts moved here, the Request
 * freed, the socket's watch and the lock table's context pointed here) ->
 * waiting -> dormant_wake (a Request made again from it, every list and
 * pointer moved back; the record goes on the woken list) -> the Request
 * goes on as any parked waiter's. A record is freed only by dormant_flush,
 * after the loop's batch: an event of its socket taken in the same batch
 * still names its old source, and is passed on to the Request it became.
 */
#include "net/dormant.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "leasegate/container.h"
#include "net/auth.h"
#include "net/park.h"
#include "net/peers.h"

/* The lock table's context of a waiter is a Request or a Dormant, told apart
 * by the callback of the LoopSource both begin with. */
static_assert(offsetof(Request, source) == 0, "a Request begins with its LoopSource");
static_assert(offsetof(Dormant, source) == 0, "a Dormant begins with its LoopSource");

/* A doomed record is retried this often while memory is short. */
#define DOOMED_RETRY_MS 10

static bool woken(const Dormant *d) { return d->list == &d->srv->dormant_woken; }

static void move_to(Dormant *d, DList *list)
{
    dlist_remove(d->list, &d->link);
    d->list = list;
    dlist_append(list, &d->link);
}

/* Its end is due and no Request could be made for it: its socket is no
 * longer watched for a hang-up (level-triggered, that would wake the loop
 * over and over), and dormant_flush tries again. */
static void doom(Dormant *d)
{
    if (d->list == &d->srv->dormant_doomed)
        return;
    loop_rewatch(d->srv->loop, d->fd, 0, &d->source);
    move_to(d, &d->srv->dormant_doomed);
}

/* A woken waiter's socket: parked, so its events are park's. */
static int woken_ready(LoopSource *src, uint32_t events)
{
    park_event(CONTAINER_OF(src, Request, source), events);
    return 0;
}

static int dormant_ready(LoopSource *src, uint32_t events)
{
    Dormant *d = CONTAINER_OF(src, Dormant, source);
    /* Woken earlier in this batch: the event is its Request's. */
    Request *req = dormant_wake(d);
    if (req)
        park_event(req, events);
    return 0;
}

bool dormant_doze(Request *req)
{
    Server *s = req->srv;
    if (req->park.fd < 0 || !req->wait.waiter || !req->wait.listed || req->wait.watch_fd >= 0 ||
        req->park.ready || req->park.writing || req->park.out || req->park.shared || req->response ||
        req->guard || req->poll || req->grant.pending || req->grant.lock || req->access.polling ||
        commit_held(&req->hold) || req->suspended)
        return false;
    Dormant *d = calloc(1, sizeof *d);
    if (!d)
        return false;
    d->source.ready = dormant_ready;
    if (!loop_rewatch(s->loop, req->park.fd, EPOLLRDHUP, &d->source)) {
        free(d);
        return false;
    }
    d->srv = s;
    d->end = req->end;
    d->fd = req->park.fd;
    d->changes = req->changes;
    d->stall_ok = req->stall_ok;
    d->waiter = req->wait.waiter;
    d->peer = req->park.peer;
    d->raw_uri = req->raw_uri;
    d->log = req->log;
    d->asked_us = req->grant.asked_us;
    d->access = req->access;
    dlist_remove(&s->parked, &req->park.link);
    dlist_remove(&s->waiting, &req->wait.link);
    if (req->access.listed)
        dlist_remove(&s->keyed, &req->access.link); /* listed again when woken (d->access.listed) */
    locktab_waiter_set_ctx(d->waiter, d);
    d->list = &s->dormant;
    dlist_append(&s->dormant, &d->link);
    req->raw_uri = NULL;
    req->log = NULL;
    return true;
}

Request *dormant_wake(Dormant *d)
{
    if (woken(d))
        return d->woken;
    Server *s = d->srv;
    Request *req = calloc(1, sizeof *req);
    if (!req)
        goto fail;
    req->source.ready = woken_ready;
    if (!loop_rewatch(s->loop, d->fd, EPOLLRDHUP, &req->source))
        goto fail;
    req->srv = s;
    req->end = d->end;
    req->wait.watch_fd = -1;
    req->routed = req->complete = req->http11 = true;
    req->changes = d->changes;
    req->stall_ok = d->stall_ok;
    req->raw_uri = d->raw_uri;
    req->log = d->log;
    d->raw_uri = NULL;
    d->log = NULL;
    req->park.fd = d->fd;
    req->park.peer = d->peer;
    dlist_append(&s->parked, &req->park.link);
    req->grant.asked_us = d->asked_us;
    req->access = d->access;
    if (req->access.listed)
        dlist_append(&s->keyed, &req->access.link);
    if (d->waiter) {
        req->wait.waiter = d->waiter;
        locktab_waiter_set_ctx(d->waiter, req);
        req->wait.listed = true;
        dlist_append(&s->waiting, &req->wait.link);
    }
    d->woken = req;
    move_to(d, &s->dormant_woken);
    return req;
fail:
    free(req); /* nothing in it yet */
    doom(d);
    return NULL;
}

Request *dormant_request(void *waiter_ctx)
{
    LoopSource *src = waiter_ctx;
    if (src->ready != dormant_ready)
        return waiter_ctx;
    Dormant *d = CONTAINER_OF(src, Dormant, source);
    Request *req = dormant_wake(d);
    if (!req)
        d->waiter = NULL; /* the lock table drops it (LocktabHooks.waking) */
    return req;
}

void dormant_wake_all(Server *s)
{
    /* Each leaves the list, woken or doomed. */
    while (s->dormant.head)
        dormant_wake(DLIST_ITEM(s->dormant.head, Dormant, link));
}

void dormant_flush(Server *s)
{
    while (s->dormant_woken.head) {
        Dormant *d = DLIST_ITEM(s->dormant_woken.head, Dormant, link);
        dlist_remove(&s->dormant_woken, &d->link);
        free(d);
    }
    while (s->dormant_doomed.head) {
        Request *req = dormant_wake(DLIST_ITEM(s->dormant_doomed.head, Dormant, link));
        if (!req)
            return; /* still no memory: the next turn tries again */
        /* Ended by the park_flush that follows, without an answer: its
         * connection is closed and its waiter, if it still has one, leaves
         * the queue (the request's end). */
        park_drop(req);
    }
}

int64_t dormant_next_timeout_ms(const Server *s) { return s->dormant_doomed.head ? DOOMED_RETRY_MS : -1; }

/* Shutdown, out of memory: the record goes without a Request. */
static void let_go(Dormant *d)
{
    Server *s = d->srv;
    loop_unwatch(s->loop, d->fd);
    close(d->fd);
    peers_close(s->peers, d->peer, false);
    if (d->waiter) {
        Now now = clock_now();
        locktab_cancel(s->locks, d->waiter, &now);
    }
    auth_unref(d->access.table);
    free(d->raw_uri);
    free(d->log);
    dlist_remove(d->list, &d->link);
    free(d);
}

void dormant_close_all(Server *s)
{
    dormant_wake_all(s); /* the woken are closed as any parked request */
    while (s->dormant_doomed.head) {
        Dormant *d = DLIST_ITEM(s->dormant_doomed.head, Dormant, link);
        Request *req = dormant_wake(d);
        if (req)
            park_drop(req);
        else
            let_go(d);
    }
}
