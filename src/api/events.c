/* events — the event stream; see include/leasegate/events.h. */
#include "leasegate/events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "leasegate/access.h"
#include "leasegate/body.h"
#include "leasegate/query.h"
#include "leasegate/container.h"
#include "leasegate/httphead.h"
#include "leasegate/watch.h"

#define EVENTS_DEFAULT 100
#define EVENTS_MAX 1000
#define WAIT_MAX_MS 300000
/* A stream with nothing to say sends a comment this often, so that proxies
 * keep it open and a client that went away is noticed. */
#define STREAM_BEAT_MS 15000
#define STREAM_BATCH 100 /* events formatted per fill */
/* What libmicrohttpd asks of the reader at a time; also the buffer each
 * stream's answer keeps, so small: a stream mostly waits. */
#define STREAM_BLOCK 2048

/* Events that wait for one batch to become durable. */
typedef struct Group {
    CommitHold hold;
    DLink link;   /* in Events.groups */
    Server *s;
    AuditRow *rows; /* owned, with each row's strings in one allocation at rows[i].lock */
    size_t n, cap;
} Group;

/* A GET /v1/events/stream answer: owned by its libmicrohttpd response
 * (stream_freed), pointed to by its request until the request ends. */
typedef struct Stream {
    Request *req;      /* NULL once the request is over */
    Events *e;
    uint64_t cursor;   /* every event up to this seq is sent or not for this stream */
    char *prefix;      /* owned; NULL: every lock */
    char *out;         /* owned: formatted, not yet taken by libmicrohttpd */
    size_t len, off, cap;
    bool ending;       /* the last message is in out: end the stream after it */
    bool waiting;      /* suspended until events come (in Events.streams) */
    DLink link;
    HeapEntry beat;    /* the next keep-alive comment (Events.beats) */
    bool beat_due;
} Stream;

struct Events {
    Audit *ring;   /* published events */
    uint64_t floor; /* the seq before this run's first: later than any earlier run's */
    DList groups;  /* Group.link: oldest batch first */
    DList waiters; /* Request.events.link */
    Heap deadlines; /* Request.events.deadline */
    DList streams; /* Stream.link: waiting streams */
    Heap beats;    /* Stream.beat */
    size_t open_streams; /* Stream answers not freed yet */
    bool draining;       /* the server is stopping: streams end, long-polls answer */
};

Events *events_new(size_t keep)
{
    Events *e = calloc(1, sizeof *e);
    if (!e || !(e->ring = audit_new(keep))) {
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
    heap_init(&e->beats);
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
    heap_clear(&e->beats);
    audit_free(e->ring);
    free(e);
}

static void out_of_memory(void)
{
    fprintf(stderr, "leasegate: out of memory recording an event; exiting\n");
    _exit(70);
}

static bool answer_if_any(Request *req, bool timed_out);
static void stream_wake(Stream *st);

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
    while (e->streams.head)
        stream_wake(DLIST_ITEM(e->streams.head, Stream, link));
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
    watch_note(s, lock); /* watches work with the stream off too */
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

/* The event as JSON; NULL when out of memory. */
static json_t *event_new(const AuditRow *r)
{
    return json_pack("{s:I, s:I, s:s, s:s, s:s, s:I}", "seq", (json_int_t)r->seq, "at_ms", (json_int_t)r->at_ms,
                     "kind", audit_kind_name(r->kind), "lock", r->lock, "owner", r->owner, "token",
                     (json_int_t)r->token);
}

/* `after` as the ring sees it: 0 (or none) is "from this run's first event". */
static uint64_t effective_after(const Events *e, uint64_t after) { return after ? after : e->floor; }

/* Answers 410 and returns false when the events after `after` cannot be
 * served: dropped from the ring, from another run, or never given. */
static bool check_after(Request *req, uint64_t after)
{
    Events *e = req->srv->events;
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
                     "events after %llu are %s: list the locks (GET /v1/locks), then follow from after=latest",
                     (unsigned long long)after, why);
    return false;
}

/* The query every events request takes; false after answering 400/403/404. */
static bool events_query(Request *req, long long *after, const char **prefix)
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
    json_t *j = p->failed ? NULL : event_new(r);
    if (!j || json_array_append_new(p->events, j))
        p->failed = true;
    p->last = r->seq;
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
    Page p = {json_array(), effective_after(e, req->events.after), false};
    bool more = p.events && audit_list(e->ring, req->events.prefix, true, p.last, req->events.limit, add_event, &p);
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
    /* With nothing more to read, the reader may go on from the latest, past
     * the events its prefix skips. */
    uint64_t next = more ? p.last : audit_latest(e->ring);
    http_reply_json_new(req, 200,
                        json_pack("{s:o, s:I, s:I}", "events", p.events, "next", (json_int_t)next, "latest",
                                  (json_int_t)audit_latest(e->ring)));
    return true;
}

void api_events(Request *req)
{
    Events *e = req->srv->events;
    long long after, limit, wait_ms;
    const char *prefix;
    if (!events_query(req, &after, &prefix) || !query_int(req, "limit", 1, EVENTS_MAX, EVENTS_DEFAULT, &limit) ||
        !query_int(req, "wait_ms", 0, WAIT_MAX_MS, 0, &wait_ms) ||
        !check_after(req, effective_after(e, (uint64_t)after)))
        return;
    req->events.after = (uint64_t)after;
    req->events.limit = (size_t)limit;
    /* A copy: the query is gone once the request is held (http_hold). */
    if (prefix && !(req->events.prefix = strdup(prefix))) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    if (answer_if_any(req, wait_ms == 0 || e->draining))
        return;
    Now now = clock_now();
    heap_entry_init(&req->events.deadline);
    if (!heap_set(&e->deadlines, &req->events.deadline, now.mono_ms + wait_ms)) {
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    req->events.waiting = true;
    dlist_append(&e->waiters, &req->events.link);
    http_hold(req);
}

/* ---- GET /v1/events/stream: the same events as Server-Sent Events ---- */

static bool stream_put(Stream *st, const char *text, size_t len)
{
    if (st->len + len > st->cap) {
        size_t cap = st->cap ? st->cap : 512;
        while (cap < st->len + len)
            cap *= 2;
        char *out = realloc(st->out, cap);
        if (!out)
            return false;
        st->out = out;
        st->cap = cap;
    }
    memcpy(st->out + st->len, text, len);
    st->len += len;
    return true;
}

/* One message: `id:` (what Last-Event-ID sends back on reconnect) and the event as JSON. */
static void stream_add(void *ud, const AuditRow *r)
{
    Stream *st = ud;
    json_t *j = event_new(r);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    char head[40];
    int hl = snprintf(head, sizeof head, "id: %llu\ndata: ", (unsigned long long)r->seq);
    if (!text || !stream_put(st, head, (size_t)hl) || !stream_put(st, text, strlen(text)) || !stream_put(st, "\n\n", 2))
        st->ending = true; /* out of memory: end the stream; the client resumes from its last id */
    free(text);
    json_decref(j);
    st->cursor = r->seq;
}

/* Fills st->out with what the stream has to say next, if anything. */
static void stream_fill(Stream *st)
{
    Events *e = st->e;
    uint64_t oldest = audit_oldest(e->ring);
    if (oldest && st->cursor + 1 < oldest) {
        /* The reader fell behind the ring: tell it, and end. A reconnect with
         * its Last-Event-ID then gets 410 too, so it lists the locks. */
        char msg[200];
        int n = snprintf(msg, sizeof msg,
                         "event: too_old\ndata: {\"error\":\"too_old\",\"oldest\":%llu,\"latest\":%llu}\n\n",
                         (unsigned long long)oldest, (unsigned long long)audit_latest(e->ring));
        stream_put(st, msg, (size_t)n);
        st->ending = true;
        return;
    }
    bool more = audit_list(e->ring, st->prefix, true, st->cursor, STREAM_BATCH, stream_add, st);
    if (!more && !st->ending)
        st->cursor = audit_latest(e->ring);
    if (!st->len && st->beat_due)
        stream_put(st, ":\n\n", 3);
    st->beat_due = false;
}

static void stream_unlist(Stream *st)
{
    if (st->waiting) {
        st->waiting = false;
        dlist_remove(&st->e->streams, &st->link);
    }
    heap_remove(&st->e->beats, &st->beat);
}

/* Events came, or a keep-alive is due: libmicrohttpd asks the reader again. */
static void stream_wake(Stream *st)
{
    if (st->waiting) {
        st->waiting = false;
        dlist_remove(&st->e->streams, &st->link);
        http_resume(st->req);
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    Stream *st = cls;
    if (!st->req || http_closing(st->req))
        return MHD_CONTENT_READER_END_WITH_ERROR; /* the connection is being dropped */
    if (st->off == st->len) {
        st->off = st->len = 0;
        if (st->ending || st->e->draining)
            return MHD_CONTENT_READER_END_OF_STREAM;
        stream_fill(st);
    }
    if (st->off == st->len) {
        /* Nothing to say: suspended until publish or the keep-alive wakes it. */
        st->waiting = true;
        dlist_append(&st->e->streams, &st->link);
        http_suspend_watched(st->req);
        return 0;
    }
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->out + st->off, n);
    st->off += n;
    Now now = clock_now();
    heap_set(&st->e->beats, &st->beat, now.mono_ms + STREAM_BEAT_MS); /* if the heap cannot grow: no keep-alive */
    return (ssize_t)n;
}

static void stream_freed(void *cls)
{
    Stream *st = cls;
    if (st->req) {
        stream_unlist(st);
        st->req->events.stream = NULL;
    }
    st->e->open_streams--;
    free(st->prefix);
    free(st->out);
    free(st);
}

size_t events_streams(const Server *s) { return s->events->open_streams; }

void api_events_stream(Request *req)
{
    long long after;
    const char *prefix;
    if (!events_query(req, &after, &prefix))
        return;
    const char *last_id = http_header(req, "Last-Event-ID");
    if (last_id && !http_query(req, "after")) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(last_id, &end, 10);
        if (!*last_id || *end || errno || *last_id == '-' || v > INT64_MAX) {
            http_reply_error(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "Last-Event-ID"),
                             "header Last-Event-ID must be an event's seq");
            return;
        }
        after = (long long)v;
    }
    Events *e = req->srv->events;
    if (!check_after(req, effective_after(e, (uint64_t)after)))
        return;
    Stream *st = calloc(1, sizeof *st);
    if (!st || (prefix && !(st->prefix = strdup(prefix))) || !stream_put(st, "retry: 1000\n\n", 13)) {
        if (st)
            free(st->prefix);
        free(st);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    st->req = req;
    st->e = e;
    st->cursor = effective_after(e, (uint64_t)after);
    heap_entry_init(&st->beat);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st,
                                                                  stream_freed);
    if (!resp) {
        free(st->prefix);
        free(st->out);
        free(st);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    req->events.stream = st;
    e->open_streams++;
    if (!httphead_add_answer_fields(resp, 200, "text/event-stream") ||
        MHD_add_response_header(resp, "X-Accel-Buffering", "no") != MHD_YES) {
        MHD_destroy_response(resp); /* frees st, through stream_freed */
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    http_reply_response(req, 200, resp);
}

/* Milliseconds until the heap's first deadline; -1 when empty. */
static int64_t until_first(const Heap *h, const Now *now)
{
    HeapEntry *first = heap_peek(h);
    if (!first)
        return -1;
    return first->deadline_ms > now->mono_ms ? first->deadline_ms - now->mono_ms : 0;
}

int64_t events_next_timeout_ms(const Server *s, const Now *now)
{
    int64_t a = until_first(&s->events->deadlines, now), b = until_first(&s->events->beats, now);
    return a < 0 || (b >= 0 && b < a) ? b : a;
}

void events_tick(Server *s, const Now *now)
{
    Events *e = s->events;
    HeapEntry *h;
    while ((h = heap_peek(&e->deadlines)) && h->deadline_ms <= now->mono_ms)
        answer_if_any(CONTAINER_OF(h, Request, events.deadline), true);
    while ((h = heap_peek(&e->beats)) && h->deadline_ms <= now->mono_ms) {
        Stream *st = CONTAINER_OF(h, Stream, beat);
        heap_remove(&e->beats, h);
        st->beat_due = true;
        stream_wake(st);
    }
}

void events_drain(Server *s)
{
    Events *e = s->events;
    e->draining = true;
    while (e->waiters.head)
        answer_if_any(DLIST_ITEM(e->waiters.head, Request, events.link), true);
    while (e->streams.head)
        stream_wake(DLIST_ITEM(e->streams.head, Stream, link));
}

void events_request_end(Request *req)
{
    stop_waiting(req);
    free(req->events.prefix);
    req->events.prefix = NULL;
    Stream *st = req->events.stream;
    if (st) {
        stream_unlist(st);
        st->req = NULL;
        req->events.stream = NULL;
    }
}
