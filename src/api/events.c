/* events — what happens to locks, and the long-poll; see events.h. */
#include "api/events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/access.h"
#include "api/body.h"
#include "api/observe.h"
#include "api/query.h"
#include "api/quota.h"
#include "api/watch.h"
#include "core/log.h"
#include "core/prefixidx.h"
#include "leasegate/container.h"

#define EVENTS_DEFAULT 100
#define EVENTS_MAX 1000
#define WAIT_MAX_MS 300000

/* Events that wait for one batch to become durable. */
typedef struct Group {
    CommitHold hold;
    DLink link;   /* in Events.groups */
    Server *s;
    AuditRow *rows; /* owned, with each row's strings in one allocation at rows[i].lock */
    size_t n, cap;
} Group;

struct Events {
    Audit *ring;   /* published events */
    uint64_t floor; /* the seq before this run's first: later than any earlier run's */
    DList groups;  /* Group.link: oldest batch first */
    Group *spare;  /* owned: the last published group, empty, its rows array kept for the next batch */
    PrefixIndex *by_prefix; /* EventsReader.sub: long-polls and streams, by the prefix they follow */
    DList readers; /* EventsReader.link: every open reader */
    DList woken;   /* EventsReader.wlink: readers the publish running now is to wake */
    Heap deadlines; /* Request.events.deadline: the long-polls */
    bool draining; /* the server is stopping: readers end, long-polls answer */
    uint64_t rows_read; /* ring rows looked at for readers, for /metrics */
};

Events *events_new(size_t keep)
{
    Events *e = calloc(1, sizeof *e);
    if (!e || !(e->ring = audit_new(keep)) || !(e->by_prefix = prefixidx_new())) {
        if (e)
            audit_free(e->ring);
        free(e);
        return NULL;
    }
    /* Numbered from the wall clock (x1000: room for a thousand events a
     * millisecond), so a reader's seq from before a restart is older than
     * every seq of this run and gets 410, never a wrong position. 2^53 (exact
     * in JavaScript) is reached in the year 2255. */
    e->floor = (uint64_t)clock_now().wall_ms * 1000;
    audit_start_seq(e->ring, e->floor + 1);
    heap_init(&e->deadlines);
    return e;
}

static void group_empty(Group *g)
{
    for (size_t i = 0; i < g->n; i++)
        free((char *)g->rows[i].lock);
    g->n = 0;
}

static void group_free(Group *g)
{
    if (!g)
        return;
    group_empty(g);
    free(g->rows);
    free(g);
}

void events_free(Events *e)
{
    if (!e)
        return;
    while (e->groups.head) {
        Group *g = DLIST_ITEM(e->groups.head, Group, link);
        dlist_remove(&e->groups, &g->link);
        group_free(g);
    }
    group_free(e->spare);
    heap_clear(&e->deadlines);
    prefixidx_free(e->by_prefix);
    audit_free(e->ring);
    free(e);
}

static void out_of_memory(void)
{
    log_line(LEVEL_ERROR, "out of memory recording an event; exiting");
    _exit(70);
}

bool events_reader_open(Server *s, EventsReader *r, const char *prefix, uint64_t first)
{
    Events *e = s->events;
    r->first = first;
    r->woken_pending = false;
    if (!prefixidx_add(e->by_prefix, &r->sub, prefix))
        return false;
    dlist_append(&e->readers, &r->link);
    r->open = true;
    return true;
}

void events_reader_close(Server *s, EventsReader *r)
{
    Events *e = s->events;
    if (!r->open)
        return;
    r->open = false;
    prefixidx_remove(e->by_prefix, &r->sub);
    dlist_remove(&e->readers, &r->link);
    if (r->woken_pending) { /* closed while a publish wakes others: it is not woken */
        r->woken_pending = false;
        dlist_remove(&e->woken, &r->wlink);
    }
}

const Audit *events_ring(const Server *s) { return s->events->ring; }

bool events_list(Server *s, const char *prefix, uint64_t after, size_t limit, void (*fn)(void *ud, const AuditRow *r),
                 void *ud)
{
    Events *e = s->events;
    return audit_list(e->ring, prefix, true, after, limit, fn, ud, &e->rows_read);
}

uint64_t events_rows_read(const Server *s) { return s->events->rows_read; }

size_t events_polls(const Server *s) { return heap_len(&s->events->deadlines); }

bool events_draining(const Server *s) { return s->events->draining; }

/* A published event concerns this reader: it is woken once its publish has
 * put every event in the ring. */
static void concerns(void *ud, PrefixSub *sub)
{
    Events *e = ud;
    EventsReader *r = CONTAINER_OF(sub, EventsReader, sub);
    if (!r->first)
        r->first = audit_latest(e->ring);
    if (!r->woken_pending) {
        r->woken_pending = true;
        dlist_append(&e->woken, &r->wlink);
    }
}

/* Publishes events whose batch is durable, and wakes the readers they
 * concern: one lookup per prefix length in use per event, never a walk over
 * every reader (prefixidx.h). */
static void publish(Server *s, const AuditRow *rows, size_t n)
{
    Events *e = s->events;
    for (size_t i = 0; i < n; i++) {
        audit_add(e->ring, &rows[i]);
        observed_published(s, &rows[i]); /* an election's state as its observers are told it */
        prefixidx_match(e->by_prefix, rows[i].lock, concerns, e);
    }
    /* Taken out before it is woken: an answer may end (and free) its request. */
    while (e->woken.head) {
        EventsReader *r = DLIST_ITEM(e->woken.head, EventsReader, wlink);
        dlist_remove(&e->woken, &r->wlink);
        r->woken_pending = false;
        r->woken(r);
    }
}

static void group_ready(CommitHold *hold)
{
    Group *g = CONTAINER_OF(hold, Group, hold);
    Events *e = g->s->events;
    dlist_remove(&e->groups, &g->link);
    publish(g->s, g->rows, g->n);
    /* Kept for the next batch with its rows array: a group a batch, made and
     * grown anew each time, cost a growth of its array per batch past 1 KiB,
     * each of which made malloc consolidate every free small chunk (a tenth of
     * the server's CPU in malloc at 64 clients, bench/instructions.sh). */
    group_empty(g);
    if (!e->spare)
        e->spare = g;
    else
        group_free(g);
}

void events_note(Server *s, AuditKind kind, const char *lock, const char *owner, uint64_t token)
{
    bool fence = kind == AUDIT_FENCE_REFUSED || kind == AUDIT_FENCE_RAISED;
    events_note_of(s, kind, fence ? AUDIT_OF_FENCE : AUDIT_OF_LOCK, AUDIT_MODE_NONE, lock, owner, token);
}

void events_note_of(Server *s, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                    uint64_t token)
{
    events_note_value(s, kind, object, mode, lock, owner, token, NULL);
}

void events_note_value(Server *s, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                       uint64_t token, const char *value)
{
    Events *e = s->events;
    if (object == AUDIT_OF_LOCK || object == AUDIT_OF_ELECTION) /* watches work with the stream off too */
        watch_note(s, object == AUDIT_OF_LOCK ? KIND_LOCK : KIND_ELECTION, lock);
    if (!audit_enabled(e->ring))
        return;
    Now now = clock_now();
    AuditRow row = {0,  now.wall_ms,     kind,           lock, owner ? owner : "", token, "", "", (uint8_t)object,
                    (uint8_t)mode, "", value};
    Group *last = e->groups.tail ? DLIST_ITEM(e->groups.tail, Group, link) : NULL;
    /* Published once its batch is durable and, on etcd, fenced (commit.h):
     * a deposed leader's events reach no one. */
    bool pending = commit_holds_wait(s->commit);
    if (!pending && !last) {
        publish(s, &row, 1); /* nothing before it waits: it is as durable as it will be */
        return;
    }
    if (pending && (!last || !commit_hold_in_pending(s->commit, &last->hold))) {
        if (e->spare) {
            last = e->spare;
            e->spare = NULL;
            last->hold = (CommitHold){0};
        } else if (!(last = calloc(1, sizeof *last)))
            out_of_memory();
        last->s = s;
        last->hold.ready = group_ready;
        commit_hold(s->commit, &last->hold);
        dlist_append(&e->groups, &last->link);
    }
    if (last->n == last->cap) {
        size_t cap = last->cap ? last->cap * 2 : 16;
        AuditRow *r = realloc(last->rows, cap * sizeof *r);
        if (!r)
            out_of_memory();
        last->rows = r;
        last->cap = cap;
    }
    size_t ll = strlen(lock), ol = strlen(row.owner), vl = value ? strlen(value) + 1 : 0;
    char *mem = malloc(ll + ol + 2 + vl);
    if (!mem)
        out_of_memory();
    memcpy(mem, lock, ll + 1);
    memcpy(mem + ll + 1, row.owner, ol + 1);
    if (value)
        memcpy(mem + ll + ol + 2, value, vl);
    row.lock = mem;
    row.owner = mem + ll + 1;
    row.value = value ? mem + ll + ol + 2 : NULL;
    last->rows[last->n++] = row;
}

json_t *events_event_new(const AuditRow *r)
{
    const char *mode = audit_mode_name(r->mode);
    json_t *j = json_pack("{s:I, s:I, s:s, s:s, s:s, s:I, s:s, s:o}", "seq", (json_int_t)r->seq, "at_ms",
                          (json_int_t)r->at_ms, "kind", audit_kind_name(r->kind), "lock", r->lock, "owner", r->owner,
                          "token", (json_int_t)r->token, "type", audit_object_name(r->object), "mode",
                          mode ? json_string(mode) : json_null());
    /* A leader's value, as JSON again (it was JSON when it was accepted). */
    bool valued = r->object == AUDIT_OF_ELECTION && (r->kind == AUDIT_GRANTED || r->kind == AUDIT_PROCLAIMED);
    if (j && valued) {
        json_t *v = r->value ? json_loads(r->value, JSON_DECODE_ANY, NULL) : json_null();
        if (json_object_set_new(j, "value", v ? v : json_null()))
            json_decref(j), j = NULL;
    }
    return j;
}

/* `after` as the ring sees it: 0 (or none) is "from this run's first event". */
static uint64_t effective_after(const Events *e, uint64_t after) { return after ? after : e->floor; }

/* Answers 410 and returns false when the events after `after` cannot be
 * served: dropped from the ring, from another run, or never given. */
static bool check_after(Request *req, uint64_t after, const char *then)
{
    const Events *e = req->srv->events;
    uint64_t oldest = audit_oldest(e->ring), latest = audit_latest(e->ring);
    const char *why = NULL;
    if (after < e->floor)
        why = "from before this server's start";
    else if (after > latest)
        why = "not given by this server";
    else if (oldest && after + 1 < oldest)
        why = "no longer kept";
    if (!why)
        return true;
    http_reply_error(req, ERR_TOO_OLD, json_pack("{s:I, s:I}", "oldest", (json_int_t)oldest, "latest", (json_int_t)latest),
                     "events after %llu are %s: %s", (unsigned long long)after, why, then);
    return false;
}

bool events_resolve_after(Request *req, uint64_t after, const char *then, uint64_t *from)
{
    *from = effective_after(req->srv->events, after);
    return check_after(req, *from, then);
}

bool events_query(Request *req, long long *after, const char **prefix)
{
    Events *e = req->srv->events;
    *prefix = http_query(req, "prefix");
    if (*prefix && !**prefix)
        *prefix = NULL;
    if (!query_int(req, "after", 0, INT64_MAX, 0, after) ||
        (*prefix && !body_check_name(req, "prefix", *prefix)) || !access_check_listing(req, *prefix ? *prefix : ""))
        return false;
    if (!audit_enabled(e->ring)) {
        http_reply_error(req, ERR_NOT_FOUND, NULL, "events are off (--events-keep 0)");
        return false;
    }
    return true;
}

typedef struct Page {
    json_t *events;
    uint64_t last;
    bool failed;
} Page;

static void add_event(void *ud, const AuditRow *r)
{
    Page *p = ud;
    json_t *j = p->failed ? NULL : events_event_new(r);
    if (!j || json_array_append_new(p->events, j))
        p->failed = true;
    p->last = r->seq;
}

static void stop_waiting(Request *req)
{
    Events *e = req->srv->events;
    if (!req->poll || !req->poll->events.waiting)
        return;
    req->poll->events.waiting = false;
    events_reader_close(req->srv, &req->poll->events.reader);
    heap_remove(&e->deadlines, &req->poll->events.deadline);
}

/* Answers req with its events after seq `after`, when there are some (or
 * always, when `now`): true when answered. */
static bool answer_from(Request *req, uint64_t after, bool now)
{
    Events *e = req->srv->events;
    Page p = {json_array(), after, false};
    bool more = p.events && events_list(req->srv, req->poll->events.prefix, after, req->poll->events.limit, add_event, &p);
    if (p.events && !p.failed && json_array_size(p.events) == 0 && !now) {
        json_decref(p.events);
        return false;
    }
    stop_waiting(req);
    if (!p.events || p.failed) {
        json_decref(p.events);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return true;
    }
    /* With nothing more to read, the reader may go on from the latest, past
     * the events its prefix skips. */
    uint64_t next = more ? p.last : audit_latest(e->ring);
    http_reply_json_new(req, 200,
                        json_pack("{s:o, s:I, s:I}", "events", p.events, "next", (json_int_t)next, "latest",
                                  (json_int_t)audit_latest(e->ring)));
    return true;
}

/* A waiting long-poll: its events came (from reader.first on), or its time is
 * up, or the server stops. Its `after` was checked when it came in and every
 * event up to then was looked at: nothing before `first` is for it, so the
 * answer starts there, and a reader waits with no position in the ring to
 * lose (its `after` may leave the ring meanwhile without harm). */
static void answer_waiting(Request *req)
{
    uint64_t first = req->poll->events.reader.first;
    answer_from(req, first ? first - 1 : audit_latest(req->srv->events->ring), true);
}

static void poll_woken(EventsReader *r) { answer_waiting(CONTAINER_OF(r, RequestPoll, events.reader)->req); }

void api_events(Request *req)
{
    Events *e = req->srv->events;
    long long after, limit, wait_ms;
    const char *prefix;
    if (!events_query(req, &after, &prefix) || !query_int(req, "limit", 1, EVENTS_MAX, EVENTS_DEFAULT, &limit) ||
        !query_int(req, "wait_ms", 0, WAIT_MAX_MS, 0, &wait_ms))
        return;
    uint64_t from;
    if (!events_resolve_after(req, (uint64_t)after, EVENTS_THEN_RELIST, &from))
        return;
    /* Only published events, which are durable: answered while etcd refuses writes. */
    http_stall_ok(req);
    if (!request_poll(req)) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    req->poll->events.limit = (size_t)limit;
    /* A copy: the query is gone once the request is held (http_hold). */
    if (prefix && !(req->poll->events.prefix = strdup(prefix))) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    /* The one look at the ring this poll costs: from here on it hears only
     * of the events its prefix matches. */
    if (answer_from(req, from, wait_ms == 0 || e->draining) || !quota_poll_start(req))
        return;
    Now now = clock_now();
    req->poll->events.reader.woken = poll_woken;
    heap_entry_init(&req->poll->events.deadline);
    if (!heap_set(&e->deadlines, &req->poll->events.deadline, now.mono_ms + wait_ms) ||
        !events_reader_open(req->srv, &req->poll->events.reader, prefix, 0)) {
        heap_remove(&e->deadlines, &req->poll->events.deadline);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    req->poll->events.waiting = true;
    http_hold(req);
}

void events_end_poll(Request *req, ErrCode code, const char *why)
{
    stop_waiting(req);
    http_reply_error(req, code, NULL, "%s", why);
}

int64_t events_next_timeout_ms(const Server *s, const Now *now)
{
    return heap_ms_until_first(&s->events->deadlines, now->mono_ms);
}

void events_tick(Server *s, const Now *now)
{
    Events *e = s->events;
    HeapEntry *h;
    while ((h = heap_peek(&e->deadlines)) && h->deadline_ms <= now->mono_ms)
        answer_waiting(CONTAINER_OF(h, RequestPoll, events.deadline)->req);
}

void events_drain(Server *s)
{
    Events *e = s->events;
    e->draining = true;
    HeapEntry *h;
    while ((h = heap_peek(&e->deadlines)))
        answer_waiting(CONTAINER_OF(h, RequestPoll, events.deadline)->req);
    /* The streams: each sees `draining` and ends. Waking one never closes another. */
    for (DLink *l = e->readers.head; l; l = l->next)
        DLIST_ITEM(l, EventsReader, link)->woken(DLIST_ITEM(l, EventsReader, link));
}

void events_request_end(Request *req)
{
    if (!req->poll)
        return;
    stop_waiting(req);
    free(req->poll->events.prefix);
    req->poll->events.prefix = NULL;
}
