/*
 * forward — a follower's request sent on to the leader gateway, and the
 * leader's answer given back as it came (status, body, end-to-end headers).
 *
 * Used by the standby's libmicrohttpd, one thread per connection: the call
 * blocks that connection's thread for as long as the leader takes, long-polls
 * included. Every forwarded request carries `Leasegate-Forwarded`; a gateway
 * that gets one and does not lead answers 503 instead of forwarding again, so
 * two followers that each think the other leads cannot bounce a request
 * between them.
 *
 * The request body is read whole first (at most FORWARD_MAX_BODY bytes), and
 * so is the answer (at most FORWARD_MAX_REPLY bytes): bounded memory per
 * connection, at the price of no streaming yet.
 *
 * The forward is abandoned (and the client gets 503 with Retry-After, which it
 * may retry: acquires carry a request_id) when the leader cannot be reached,
 * when should_stop says so (the leader changed, the standby stops), or when
 * the client hangs up, so that the leader drops a forwarded waiter as soon as
 * its real client has gone.
 */
#ifndef LEASEGATE_FORWARD_H
#define LEASEGATE_FORWARD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#define FORWARD_HEADER "Leasegate-Forwarded"
#define FORWARD_MAX_BODY (64u * 1024 * 1024)
#define FORWARD_MAX_REPLY (64u * 1024 * 1024)

typedef struct Forward Forward;

/* A request whose raw target (path and query, as the client sent it) is uri.
 * NULL when out of memory. */
Forward *forward_new(const char *uri);
void forward_free(Forward *f);
const char *forward_uri(const Forward *f);
/* True on the first call for the request only (libmicrohttpd's first call
 * has the headers, never body bytes). */
bool forward_first_call(Forward *f);
/* Appends request body bytes; false when the body passes FORWARD_MAX_BODY. */
bool forward_add_body(Forward *f, const char *data, size_t n);

/* Sends the request to leader_url and builds the answer for the client.
 * should_stop(ud) is asked a few times a second while waiting. Returns the
 * response (the caller queues and destroys it) with *status; NULL (with
 * *why) when the leader could not give an answer. */
struct MHD_Response *forward_run(Forward *f, struct MHD_Connection *conn, const char *method, const char *leader_url,
                                 bool (*should_stop)(void *ud), void *ud, unsigned *status, const char **why);

#endif
