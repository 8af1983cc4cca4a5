/* events — the event stream; see include/leasegate/events.h. */
#include "leasegate/events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leasegate/access.h"
#include "leasegate/body.h"
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
    DList groups;  /* Group.link: oldest batch first */
    DList waiters; /* Request.events.link */
    Heap deadlines; /* Request.events.deadline */
};

Events *events_new(size_t keep)
{
    Events *e = calloc(1, sizeof *e);
    if (!e || !(e->ring = audit_new(keep))) {
        free(e);
        return NULL;
    }
    heap_init(&e->deadlines);
    return e;
}

static void group_free(Group *g)
{
    for (size_t i = 0; i < g->n; i++)
        free((char *)g->rows[i].lock);
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
    heap_clear(&e->deadlines);
    audit_free(e->ring);
    free(e);
}

static void out_of_memory(void)
{
    fprintf(stderr, "leasegate: out of memory recording an event; exiting\n");
    _exit(70);
}

static bool answer_if_any(Request *req, bool timed_out);

/* Publishes g's events (its batch is durable) and answers the waiters that now have some. */
static void publish(Server *s, const AuditRow *rows, size_t n)
{
    Events *e = s->events;
    for (size_t i = 0; i < n; i++)
        audit_add(e->ring, &rows[i]);
    for (DLink *l = e->waiters.head, *next; l; l = next) {
        next = l->next;
        answer_if_any(DLIST_ITEM(l, Request, events.link), false);
    }
}

static void group_ready(CommitHold *hold)
{
    Group *g = CONTAINER_OF(hold, Group, hold);
    dlist_remove(&g->s->events->groups, &g->link);
    publish(g->s, g->rows, g->n);
    group_free(g);
}

void events_note(Server *s, AuditKind kind, const char *lock, const char *owner, uint64_t token)
{
    Events *e = s->events;
    if (!audit_enabled(e->ring))
        return;
    Now now = clock_now();
    AuditRow row = {0, now.wall_ms, kind, lock, owner ? owner : "", token, "", ""};
    Group *last = e->groups.tail ? DLIST_ITEM(e->groups.tail, Group, link) : NULL;
    bool pending = commit_pending(s->commit);
    if (!pending && !last) {
        publish(s, &row, 1); /* nothing before it waits: it is as durable as it will be */
        return;
    }
    if (pending && (!last || !commit_hold_in_pending(s->commit, &last->hold))) {
        if (!(last = calloc(1, sizeof *last)))
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
    size_t ll = strlen(lock), ol = strlen(row.owner);
    char *mem = malloc(ll + ol + 2);
    if (!mem)
        out_of_memory();
    memcpy(mem, lock, ll + 1);
    memcpy(mem + ll + 1, row.owner, ol + 1);
    row.lock = mem;
    row.owner = mem + ll + 1;
    last->rows[last->n++] = row;
}

typedef struct Page {
    json_t *events;
    uint64_t last;
    bool failed;
} Page;

static void add_event(void *ud, const AuditRow *r)
{
    Page *p = ud;
    json_t *j = p->failed ? NULL
                          : json_pack("{s:I, s:I, s:s, s:s, s:s, s:I}", "seq", (json_int_t)r->seq, "at_ms",
                                      (json_int_t)r->at_ms, "kind", audit_kind_name(r->kind), "lock", r->lock,
                                      "owner", r->owner, "token", (json_int_t)r->token);
    if (!j || json_array_append_new(p->events, j))
        p->failed = true;
    p->last = r->seq;
}

/* The request's query, checked when it began (api_events). */
static uint64_t query_u64(Request *req, const char *name, uint64_t def)
{
    const char *v = http_query(req, name);
    return v ? strtoull(v, NULL, 10) : def;
}

static void stop_waiting(Request *req)
{
    Events *e = req->srv->events;
    if (!req->events.waiting)
        return;
    req->events.waiting = false;
    dlist_remove(&e->waiters, &req->events.link);
    heap_remove(&e->deadlines, &req->events.deadline);
}

/* Answers req when there are events for it (or always, timed_out): true when answered. */
static bool answer_if_any(Request *req, bool timed_out)
{
    Events *e = req->srv->events;
    uint64_t after = query_u64(req, "after", 0);
    size_t limit = (size_t)query_u64(req, "limit", EVENTS_DEFAULT);
    const char *prefix = http_query(req, "prefix");
    Page p = {json_array(), after, false};
    if (p.events)
        audit_list(e->ring, prefix && *prefix ? prefix : NULL, true, after, limit, add_event, &p);
    if (p.events && !p.failed && json_array_size(p.events) == 0 && !timed_out) {
        json_decref(p.events);
        return false;
    }
    stop_waiting(req);
    if (!p.events || p.failed) {
        json_decref(p.events);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return true;
    }
    http_reply_json_new(req, 200,
                        json_pack("{s:o, s:I, s:I}", "events", p.events, "next", (json_int_t)p.last, "latest",
                                  (json_int_t)audit_latest(e->ring)));
    return true;
}

/* A query parameter that must be an integer in min..max. */
static bool check_int(Request *req, const char *name, long long min, long long max)
{
    const char *v = http_query(req, name);
    if (!v)
        return true;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*v && !*end && n >= min && n <= max)
        return true;
    http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", name),
                     "query parameter '%s' must be an integer in %lld..%lld", name, min, max);
    return false;
}

void api_events(Request *req)
{
    Server *s = req->srv;
    Events *e = s->events;
    const char *prefix = http_query(req, "prefix");
    if (!check_int(req, "after", 0, INT64_MAX) || !check_int(req, "limit", 1, EVENTS_MAX) ||
        !check_int(req, "wait_ms", 0, WAIT_MAX_MS) || (prefix && *prefix && !body_check_name(req, "prefix", prefix)) ||
        !access_check_listing(req, prefix ? prefix : ""))
        return;
    if (!audit_enabled(e->ring)) {
        http_reply_error(req, ERR_NOT_FOUND, NULL, "events are off (--events-keep 0)");
        return;
    }
    uint64_t after = query_u64(req, "after", 0), oldest = audit_oldest(e->ring);
    if ((oldest && after + 1 < oldest) || after > audit_latest(e->ring)) {
        http_reply_error(req, ERR_TOO_OLD,
                         json_pack("{s:I, s:I}", "oldest", (json_int_t)oldest, "latest",
                                   (json_int_t)audit_latest(e->ring)),
                         "events after %llu are %s: list the locks (GET /v1/locks), then follow from after=latest",
                         (unsigned long long)after,
                         after > audit_latest(e->ring) ? "from before this server's start" : "no longer kept");
        return;
    }
    if (answer_if_any(req, query_u64(req, "wait_ms", 0) == 0))
        return;
    Now now = clock_now();
    heap_entry_init(&req->events.deadline);
    if (!heap_set(&e->deadlines, &req->events.deadline, now.mono_ms + (int64_t)query_u64(req, "wait_ms", 0))) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    req->events.waiting = true;
    dlist_append(&e->waiters, &req->events.link);
    http_suspend(req);
}

int64_t events_next_timeout_ms(const Server *s, const Now *now)
{
    HeapEntry *h = heap_peek(&s->events->deadlines);
    if (!h)
        return -1;
    return h->deadline_ms > now->mono_ms ? h->deadline_ms - now->mono_ms : 0;
}

void events_tick(Server *s, const Now *now)
{
    HeapEntry *h;
    while ((h = heap_peek(&s->events->deadlines)) && h->deadline_ms <= now->mono_ms)
        answer_if_any(CONTAINER_OF(h, Request, events.deadline), true);
}

void events_request_end(Request *req) { stop_waiting(req); }
