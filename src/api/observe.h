/*
 * observe — what the observers of an election are told (issue 40):
 * GET /v1/elections/NAME/observe is a stream of Server-Sent Events
 * (event_stream.h) whose messages are `leader` {owner, term, value} on every
 * new leader or proclaimed value, and `vacant` {reason: resigned | expired |
 * revoked, previous_term} whenever a leader's term ends (also when the next
 * candidate is granted at once: its `leader` follows). They are the
 * election's events (events.h: granted, proclaimed, released, expired,
 * revoked of type election), so each has the event's seq as its `id:` and
 * a reconnect with Last-Event-ID misses none and gets none twice (410 when
 * the events' ring no longer holds the ones after it).
 *
 * An observer that connects without an id first gets the election's state
 * as the events published so far have it (its id the latest event's), never
 * the lock table's: the table may hold a change whose batch is not durable
 * yet (a grant being committed), which the observer then gets as its event,
 * once, after the state. That state is kept here per election: seeded at
 * start-up from the leaders loaded (durable), updated by every publish of an
 * election's event, dropped when the election is forgotten (it is vacant
 * then, with no candidates). Only the loop thread calls these.
 */
#ifndef LEASEGATE_OBSERVE_H
#define LEASEGATE_OBSERVE_H

#include <stdbool.h>

#include "core/audit.h"
#include "core/locktab.h"
#include "leasegate/server.h"

typedef struct Observed Observed;

/* NULL when out of memory. */
Observed *observed_new(void);
void observed_free(Observed *o);
/* Start-up: election `name` is led by h, loaded from storage. False when out of memory. */
bool observed_loaded(Server *s, const char *name, const Holder *h);
/* An event was published (it is durable): an election's changes its state. */
void observed_published(Server *s, const AuditRow *row);
/* Election `name` was forgotten. */
void observed_forgotten(Server *s, const char *name);
/* The message of `name`'s state as published ("event: leader|vacant\ndata:
 * ...\n\n"; malloc'd), NULL when out of memory. An election nobody led in
 * this run's memory is vacant with reason and previous_term null. */
char *observed_state_message_new(const Server *s, const char *name);
/* The stream's view of the events (event_stream.h's EventStreamView): an
 * election's own (the stream follows its name), each as leader or vacant. */
bool observed_takes(const AuditRow *r, const char *name);
char *observed_message_new(const AuditRow *r);

#endif
