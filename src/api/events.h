/*
 * events — what happens to locks, as a stream that clients follow:
 * GET /v1/events?after=SEQ&limit=&wait_ms=&prefix= answers the events after
 * SEQ at once, or long-polls until there are some (or wait_ms passes).
 *
 * An event is published only once the batch holding the change it reports is
 * durable (a commit hold per batch), so no reader ever sees a change that a
 * crash could take back; events that change nothing durable (a waiter joined
 * or left) wait behind the ones before them, so the stream is in commit
 * order. Published events are numbered (seq) and kept in a ring of the
 * newest --events-keep; a request whose SEQ the ring has dropped gets 410
 * too_old, telling it to list the locks and go on from `latest`.
 *
 * A reader (a long-poll or a stream) follows one prefix of lock names and is
 * kept by it (prefixidx.h): a publish costs a lookup per prefix length in use
 * plus the readers its events concern, never a walk over the other readers or
 * over the ring, whatever their `after`. A long-poll looks at the ring once,
 * when it comes in; while it waits it hears only of its own events, so it
 * holds no position in the ring that the ring could drop. Events carry the
 * lock, owner and token, whether it is a lock, a semaphore or a fence
 * resource (type) and a lock lease's mode, never a lease. They live in memory
 * only; each run
 * numbers them from its start time (x1000), so a seq from an earlier run is
 * always below this run's and gets 410 too.
 */
#ifndef LEASEGATE_EVENTS_H
#define LEASEGATE_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/audit.h"
#include "leasegate/dlist.h"
#include "net/http.h"

typedef struct Events Events;

/* NULL when out of memory. keep 0: no events (404). */
Events *events_new(size_t keep);
void events_free(Events *e);
/* Something happened: published once what is pending now is durable.
 * object and mode as in an AuditRow; events_note takes a fence resource's
 * for the fence's kinds, else a lock's, without a mode. */
void events_note_of(Server *s, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                    uint64_t token);
void events_note(Server *s, AuditKind kind, const char *lock, const char *owner, uint64_t token);
/* events_note_of, with an election leader's value (AuditRow.value; NULL: none). */
void events_note_value(Server *s, AuditKind kind, int object, int mode, const char *lock, const char *owner,
                       uint64_t token, const char *value);
/* GET /v1/events. */
void api_events(Request *req);
/* The loop's: the next long-poll deadline (-1: none); answering those due. */
int64_t events_next_timeout_ms(const Server *s, const Now *now);
void events_tick(Server *s, const Now *now);
/* The server is stopping: long-polls answer now, other readers are woken
 * (events_draining turns true). */
void events_drain(Server *s);
/* A waiting long-poll ends with an error answer (its key was removed or narrowed). */
void events_end_poll(Request *req, ErrCode code, const char *why);
/* The request is over: it stops waiting for events. */
void events_request_end(Request *req);

/* ---- For other readers of the events (event_stream.h) ---- */

/* r (its woken set) follows the events of the lock names starting with
 * prefix (NULL: every name); first is reader.first to start with (the seq of
 * an event it has not taken yet, or 0). False when out of memory. */
bool events_reader_open(Server *s, EventsReader *r, const char *prefix, uint64_t first);
/* No-op unless open. */
void events_reader_close(Server *s, EventsReader *r);
/* Waiting long-polls. */
size_t events_polls(const Server *s);
/* audit_list over the published events, for a reader following prefix
 * (NULL: every lock); the rows it looks at are counted (events_rows_read). */
bool events_list(Server *s, const char *prefix, uint64_t after, size_t limit, void (*fn)(void *ud, const AuditRow *r),
                 void *ud);
/* Rows of the ring looked at for readers so far: what following the events costs. */
uint64_t events_rows_read(const Server *s);
/* The published events (audit_list, audit_oldest, audit_latest). */
const Audit *events_ring(const Server *s);
bool events_draining(const Server *s);
/* The query every events request takes (?after=, ?prefix=, with the key's
 * prefixes); false after answering 400/403/404 (events off). *prefix points
 * into the query, NULL for every lock. */
bool events_query(Request *req, long long *after, const char **prefix);
/* The seq to follow from for `after` (0: this run's first event); false
 * after answering 410 when those events cannot be served (dropped from the
 * ring, from an earlier run, or never given), whose message ends with
 * `then`: what the caller should do instead. */
bool events_resolve_after(Request *req, uint64_t after, const char *then, uint64_t *from);
/* `then` of a reader of every lock's events. */
#define EVENTS_THEN_RELIST "list the locks (GET /v1/locks), then follow from after=latest"

/* An event as JSON (never a lease); NULL when out of memory. */
json_t *events_event_new(const AuditRow *r);

#endif
