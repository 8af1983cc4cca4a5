/*
 * events — what happens to locks, as a stream that clients follow:
 * GET /v1/events?after=SEQ&limit=&wait_ms=&prefix= answers the events after
 * SEQ at once, or long-polls until there are some (or wait_ms passes).
 *
 * An event is published only once the batch holding the change it reports is
 * durable (a commit hold per batch), so no reader ever sees a change that a
 * crash could take back; events that change nothing durable (a waiter joined
 * or left) wait behind the ones before them, so the stream is in commit
 * order. Published events are numbered (seq) and kept in a ring of the newest
 * --events-keep; a reader whose SEQ the ring has dropped gets 410 too_old,
 * telling it to list the locks and go on from `latest`. Events carry the
 * lock, owner and token, never a lease. They live in memory only; each run
 * numbers them from its start time (x1000), so a seq from an earlier run is
 * always below this run's and gets 410 too.
 */
#ifndef LEASEGATE_EVENTS_H
#define LEASEGATE_EVENTS_H

#include <stdint.h>

#include "leasegate/audit.h"
#include "leasegate/http.h"

typedef struct Events Events;

/* NULL when out of memory. keep 0: no events (404). */
Events *events_new(size_t keep);
void events_free(Events *e);
/* Something happened: published once what is pending now is durable. */
void events_note(Server *s, AuditKind kind, const char *lock, const char *owner, uint64_t token);
/* GET /v1/events. */
void api_events(Request *req);
/* GET /v1/events/stream: the same events as Server-Sent Events, from
 * ?after= or the Last-Event-ID header; a comment line every 15 s keeps an
 * idle stream open. A reader that falls behind the ring gets a `too_old`
 * event and the stream ends. */
void api_events_stream(Request *req);
/* The loop's: the next long-poll deadline (-1: none); answering those due. */
int64_t events_next_timeout_ms(const Server *s, const Now *now);
void events_tick(Server *s, const Now *now);
/* The server is stopping: long-polls answer now, streams end. */
void events_drain(Server *s);
/* Open event streams (their answers not yet freed). */
size_t events_streams(const Server *s);
/* The request is over: it stops waiting for events. */
void events_request_end(Request *req);

#endif
