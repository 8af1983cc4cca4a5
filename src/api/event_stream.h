/*
 * event_stream — GET /v1/events/stream: the events of events.h as
 * Server-Sent Events, for clients that keep one answer open rather than
 * long-poll. `id:` is the event's seq and `data:` the event as JSON; it
 * starts after ?after=, else after the Last-Event-ID header (what a browser
 * sends on reconnect), else at this run's first event, and takes ?prefix=
 * as the long-poll does. A comment line every 15 s keeps an idle stream open
 * through proxies. A reader that falls behind the ring gets a `too_old`
 * event and the stream ends (its reconnect then gets 410). Stopping the
 * server ends every stream.
 *
 * A stream's state is owned by its libmicrohttpd response, and pointed to by
 * its request until the request ends. Only the loop thread calls these.
 */
#ifndef LEASEGATE_EVENT_STREAM_H
#define LEASEGATE_EVENT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/audit.h"
#include "core/clock.h"
#include "leasegate/request.h"
#include "net/errors.h"

typedef struct EventStreams EventStreams;

/* NULL when out of memory. */
EventStreams *event_streams_new(void);
/* After every stream's answer is freed (MHD stopped). */
void event_streams_free(EventStreams *es);
void api_events_stream(Request *req);
/* What a stream sends of the events it follows, other than every event as
 * JSON: an election's observers get `leader` and `vacant` (api_elections.c). */
typedef struct EventStreamView {
    /* Whether the stream that follows `prefix` sends row r. */
    bool (*takes)(const AuditRow *r, const char *prefix);
    /* r's message after its `id:` line ("event: ...\ndata: ...\n\n"),
     * malloc'd; NULL when out of memory (the stream ends, the client resumes). */
    char *(*message_new)(const AuditRow *r);
} EventStreamView;
/* ?after=, else the Last-Event-ID header (a browser's reconnect), into
 * *after, and whether either was given; false after answering 400. */
bool event_stream_last_id(Request *req, long long *after, bool *given);
/* Answers req (let in by quota_poll_start) with the Server-Sent Events of the
 * names starting with prefix (NULL: every one) after seq `from`, as view has
 * them (NULL: every event as JSON), `first` (a message, or NULL) before them. */
void event_stream_open(Request *req, const char *prefix, uint64_t from, const EventStreamView *view,
                       const char *first);
/* The loop's: when the next keep-alive is due (-1: none), and sending those due. */
int64_t event_streams_next_timeout_ms(const Server *s, const Now *now);
void event_streams_tick(Server *s, const Now *now);
/* Open streams (their answers not yet freed), for /metrics. */
size_t event_streams_open(const Server *s);
/* The prefix req's stream follows (NULL: every lock). */
const char *event_streams_prefix(const Request *req);
/* req's stream ends with an `event: unauthorized` (its key was removed,
 * code 401, or narrowed, 403), sent as soon as the client reads. */
void event_streams_end(Request *req, ErrCode code, const char *why);
/* The request is over: its stream, if any, ends with it. */
void event_streams_request_end(Request *req);

#endif
