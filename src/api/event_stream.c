/* event_stream — Server-Sent Events; see event_stream.h. */
#include "api/event_stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "api/events.h"
#include "api/quota.h"
#include "core/heap.h"
#include "leasegate/container.h"
#include "net/http.h"
#include "net/httphead.h"
#include "store/jsondump.h"

/* A stream with nothing to say sends a comment this often, so that proxies
 * keep it open and a client that went away is noticed. */
#define STREAM_BEAT_MS 15000
#define STREAM_BATCH 100 /* events formatted per fill */
/* What libmicrohttpd asks of the reader at a time; also the buffer each
 * stream's answer keeps, so small: a stream mostly waits. */
#define STREAM_BLOCK 2048

struct EventStreams {
    Heap beats;  /* Stream.beat */
    size_t open; /* Stream answers not freed yet */
};

typedef struct Stream {
    Request *req;      /* NULL once the request is over */
    Server *s;
    uint64_t cursor;   /* the last event sent (its id) */
    char *prefix;      /* owned; NULL: every lock */
    const EventStreamView *view; /* what it sends of the events (NULL: every one, as JSON) */
    char *out;         /* owned: formatted, not yet taken by libmicrohttpd */
    size_t len, off, cap;
    bool ending;       /* the last message is in out: end the stream after it */
    char *revoked;     /* owned: the `event: unauthorized` to end with, not sent yet (event_streams_end) */
    EventsReader reader; /* open while the request lasts; reader.first: the next event to send */
    bool waiting;      /* suspended until events, the stop or the keep-alive wake it */
    HeapEntry beat;    /* the next keep-alive comment (EventStreams.beats) */
    bool beat_due;
} Stream;

EventStreams *event_streams_new(void)
{
    EventStreams *es = calloc(1, sizeof *es);
    if (es)
        heap_init(&es->beats);
    return es;
}

void event_streams_free(EventStreams *es)
{
    if (!es)
        return;
    heap_clear(&es->beats);
    free(es);
}

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

/* The message of an event as JSON (the stream without a view). */
static char *event_message_new(const AuditRow *r)
{
    json_t *j = events_event_new(r);
    char *text = jsondump_whole(j, JSON_COMPACT), *msg = NULL;
    json_decref(j);
    if (text && asprintf(&msg, "data: %s\n\n", text) < 0)
        msg = NULL;
    free(text);
    return msg;
}

/* One message: `id:` (what Last-Event-ID sends back on reconnect) and the
 * event as the view has it. An event the view does not take moves the
 * cursor all the same: it was looked at. */
static void stream_add(void *ud, const AuditRow *r)
{
    Stream *st = ud;
    st->cursor = r->seq;
    if (st->view && !st->view->takes(r, st->prefix))
        return;
    char *text = st->view ? st->view->message_new(r) : event_message_new(r);
    char head[40];
    int hl = snprintf(head, sizeof head, "id: %llu\n", (unsigned long long)r->seq);
    if (!text || !stream_put(st, head, (size_t)hl) || !stream_put(st, text, strlen(text)))
        st->ending = true; /* out of memory: end the stream; the client resumes from its last id */
    free(text);
}

/* Fills st->out with what the stream has to say next, if anything: the
 * events from reader.first on (none when it is 0: nothing was published for
 * this stream since it last looked). */
static void stream_fill(Stream *st)
{
    if (st->revoked) {
        stream_put(st, st->revoked, strlen(st->revoked));
        free(st->revoked);
        st->revoked = NULL;
        st->ending = true;
        return;
    }
    const Audit *ring = events_ring(st->s);
    uint64_t first = st->reader.first, oldest = audit_oldest(ring);
    if (first && oldest && first < oldest) {
        /* The reader fell behind the ring: tell it, and end. A reconnect with
         * its Last-Event-ID then gets 410 too, so it lists the locks. */
        char msg[200];
        int n = snprintf(msg, sizeof msg,
                         "event: too_old\ndata: {\"error\":\"too_old\",\"oldest\":%llu,\"latest\":%llu}\n\n",
                         (unsigned long long)oldest, (unsigned long long)audit_latest(ring));
        stream_put(st, msg, (size_t)n);
        st->ending = true;
        return;
    }
    if (first) {
        /* Nothing between the last sent and `first` was for this stream. */
        bool more = events_list(st->s, st->prefix, first - 1, STREAM_BATCH, stream_add, st);
        st->reader.first = more ? st->cursor + 1 : 0;
    }
    if (!st->len && st->beat_due)
        stream_put(st, ":\n\n", 3);
    st->beat_due = false;
}

/* Events came, the server is stopping, or a keep-alive is due:
 * libmicrohttpd asks the reader again. */
static void stream_resume(Stream *st)
{
    if (!st->waiting)
        return;
    st->waiting = false;
    http_resume(st->req);
}

static void stream_woken(EventsReader *r) { stream_resume(CONTAINER_OF(r, Stream, reader)); }

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    Stream *st = cls;
    if (!st->req || http_closing(st->req))
        return MHD_CONTENT_READER_END_WITH_ERROR; /* the connection is being dropped */
    if (st->off == st->len) {
        st->off = st->len = 0;
        if (st->ending || events_draining(st->s))
            return MHD_CONTENT_READER_END_OF_STREAM;
        stream_fill(st);
    }
    if (st->off == st->len) {
        /* Nothing to say: suspended until events, the stop or the keep-alive wake it. */
        st->waiting = true;
        http_suspend_watched(st->req);
        return 0;
    }
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->out + st->off, n);
    st->off += n;
    Now now = clock_now();
    heap_set(&st->s->streams->beats, &st->beat, now.mono_ms + STREAM_BEAT_MS); /* if the heap cannot grow: no keep-alive */
    return (ssize_t)n;
}

/* The request is gone: the stream no longer waits for anything. */
static void stream_unlist(Stream *st)
{
    st->waiting = false;
    events_reader_close(st->s, &st->reader);
    heap_remove(&st->s->streams->beats, &st->beat);
}

static void stream_freed(void *cls)
{
    Stream *st = cls;
    if (st->req) {
        stream_unlist(st);
        st->req->poll->events.stream = NULL;
    }
    st->s->streams->open--;
    free(st->revoked);
    free(st->prefix);
    free(st->out);
    free(st);
}

size_t event_streams_open(const Server *s) { return s->streams->open; }

bool event_stream_last_id(Request *req, long long *after, bool *given)
{
    const char *last_id = http_header(req, "Last-Event-ID");
    *given = http_query(req, "after") != NULL;
    if (!last_id || *given)
        return true;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(last_id, &end, 10);
    if (!*last_id || *end || errno || *last_id == '-' || v > INT64_MAX) {
        http_reply_invalid(req, ERR_BAD_REQUEST, json_pack("{s:s}", "field", "Last-Event-ID"),
                           "header Last-Event-ID must be an event's seq");
        return false;
    }
    *after = (long long)v;
    *given = true;
    return true;
}

void api_events_stream(Request *req)
{
    long long after;
    const char *prefix;
    bool given;
    uint64_t from;
    if (!events_query(req, &after, &prefix) || !event_stream_last_id(req, &after, &given) ||
        !events_resolve_after(req, (uint64_t)after, EVENTS_THEN_RELIST, &from) || !quota_poll_start(req))
        return;
    event_stream_open(req, prefix, from, NULL, NULL);
}

void event_stream_open(Request *req, const char *prefix, uint64_t from, const EventStreamView *view, const char *first)
{
    Stream *st = request_poll(req) ? calloc(1, sizeof *st) : NULL;
    if (!st || (prefix && !(st->prefix = strdup(prefix))) || !stream_put(st, "retry: 1000\n\n", 13) ||
        (first && !stream_put(st, first, strlen(first)))) {
        if (st) {
            free(st->prefix);
            free(st->out);
        }
        free(st);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    st->req = req;
    st->s = req->srv;
    st->view = view;
    st->cursor = from;
    st->reader.woken = stream_woken;
    heap_entry_init(&st->beat);
    /* What was published up to now is looked at once, at the first fill. */
    if (!events_reader_open(st->s, &st->reader, st->prefix, from < audit_latest(events_ring(st->s)) ? from + 1 : 0)) {
        free(st->prefix);
        free(st->out);
        free(st);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st,
                                                                  stream_freed);
    if (!resp) {
        events_reader_close(st->s, &st->reader);
        free(st->prefix);
        free(st->out);
        free(st);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    req->poll->events.stream = st;
    req->srv->streams->open++;
    /* A stream shows only published events, which are durable: while etcd
     * refuses writes it is answered (after the fenced read every answer waits for). */
    http_stall_ok(req);
    if (!httphead_add_answer_fields(resp, 200, "text/event-stream") ||
        MHD_add_response_header(resp, "X-Accel-Buffering", "no") != MHD_YES) {
        MHD_destroy_response(resp); /* frees st, through stream_freed */
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    http_reply_response(req, 200, resp);
}

int64_t event_streams_next_timeout_ms(const Server *s, const Now *now)
{
    return heap_ms_until_first(&s->streams->beats, now->mono_ms);
}

void event_streams_tick(Server *s, const Now *now)
{
    HeapEntry *h;
    while ((h = heap_peek(&s->streams->beats)) && h->deadline_ms <= now->mono_ms) {
        Stream *st = CONTAINER_OF(h, Stream, beat);
        heap_remove(&s->streams->beats, h);
        st->beat_due = true;
        stream_resume(st);
    }
}

const char *event_streams_prefix(const Request *req)
{
    return req->poll && req->poll->events.stream ? req->poll->events.stream->prefix : NULL;
}

void event_streams_end(Request *req, ErrCode code, const char *why)
{
    Stream *st = req->poll ? req->poll->events.stream : NULL;
    if (!st || st->revoked || st->ending)
        return;
    json_t *data = json_pack("{s:s, s:s}", "error", error_code(code), "message", why);
    char *text = data ? jsondump_whole(data, JSON_COMPACT) : NULL;
    json_decref(data);
    /* It ends whether or not the message could be made: the key is gone. */
    if (!text || asprintf(&st->revoked, "event: unauthorized\ndata: %s\n\n", text) < 0)
        st->revoked = NULL, st->ending = true;
    free(text);
    events_reader_close(st->s, &st->reader); /* nothing more for it */
    stream_resume(st);
}

void event_streams_request_end(Request *req)
{
    Stream *st = req->poll ? req->poll->events.stream : NULL;
    if (st) {
        stream_unlist(st);
        st->req = NULL;
        req->poll->events.stream = NULL;
    }
}
