/*
 * park — long-polling waiters held outside libmicrohttpd: waiting acquires,
 * and watches and event long-polls (http_hold).
 *
 * Why: a connection suspended inside libmicrohttpd keeps its memory pool (a
 * page or more) and its connection struct for as long as it waits, about 5 KB
 * per waiter. A parked waiter keeps only its socket and its Request: the
 * access callback makes libmicrohttpd let go of the connection (it closes its
 * descriptor, we hold a duplicate), the answer is written here, and the
 * connection is handed back (MHD_add_connection) for the client's next request.
 *
 * A request is parked only when no byte of a later request can be lost: it is
 * HTTP/1.1 keep-alive, every body on the connection had a Content-Length, and
 * the bytes libmicrohttpd has taken from the socket (the kernel's count of
 * bytes received minus those still queued) are exactly the request lines,
 * headers and bodies it has reported. Otherwise the waiter is suspended in
 * libmicrohttpd as before. Parking needs MHD_USE_TURBO, under which
 * libmicrohttpd closes a connection without shutdown(), so that the duplicate
 * descriptor still reaches the client.
 *
 * What this relies on that libmicrohttpd's manual does not promise, and why it
 * is kept: that TURBO closes without shutdown(), and the request head size it
 * reports (MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE) matching the bytes read.
 * The documented alternative, a suspended connection, costs 5.4 KB per waiter
 * (libmicrohttpd's memory pool: it cannot be made smaller than the 12 KiB
 * request head we accept, and a page or more of it is touched) against 0.7 KB
 * parked; the target is 2 KB at 10,000 waiters. Each assumption is checked
 * where it matters rather than trusted: the byte counts must prove that
 * nothing past the request was read, or the waiter is suspended instead (never
 * a lost byte, only memory); and if a libmicrohttpd update shut the socket
 * down on close, the parked client would read EOF before its answer, which
 * tests/integration/test_parking.py (test_waiter_parked_and_connection_
 * serves_next_requests: the gauge says parked, the answer arrives, the same
 * connection serves the next request) fails on at once.
 *
 * Only the loop thread calls these.
 */
#ifndef LEASEGATE_PARK_H
#define LEASEGATE_PARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "leasegate/request.h"
#include "net/sharedtext.h"

struct MHD_Connection;

/* Per-connection byte accounting, kept as libmicrohttpd's socket context.
 * park_conn_new is called before libmicrohttpd reads from fd; NULL when out
 * of memory (such a connection is never parked). */
void *park_conn_new(int fd);
void park_conn_free(void *conn_ctx);
/* A request on the connection ended. `wire_bytes` is what it took from the
 * socket, or 0 when that is unknown (the connection is then never parked). */
void park_conn_request_done(void *conn_ctx, uint64_t wire_bytes);
/* Request line + headers + Content-Length of the current request, or 0 when
 * unknown (chunked body, headers not complete). */
uint64_t park_request_bytes(struct MHD_Connection *conn);

/* Inside the access callback of a request that is to wait: takes its socket
 * if that is safe. True: the request is parked, and the callback must forget
 * the connection and return MHD_NO (libmicrohttpd then lets go of it). */
bool park_take(Request *req);
/* The answer of a parked request (text_new taken over). It is written once
 * every change recorded before it is durable. */
void park_reply(Request *req, unsigned status, const char *content_type, char *text_new, size_t len);
/* The same with a body shared by many requests (a reference taken over):
 * only the head is the request's own. */
void park_reply_shared(Request *req, unsigned status, const char *content_type, SharedText *text);
/* The parked request ends without an answer (its answer could not be built):
 * the connection is closed by the next park_flush. Safe inside callbacks. */
void park_drop(Request *req);
/* Readiness on a parked socket: the client hung up, or room to write. */
void park_event(Request *req, uint32_t events);
/* Writes the answers that are ready and hands their connections back to
 * libmicrohttpd, in the order they became ready, until PARK_FLUSH_BYTES
 * have been written: the rest waits for the next turn of the loop, so that
 * a wave of large answers (a change woke many watches) leaves the loop time
 * for everyone else between its parts. Each write copies into the kernel
 * what the socket takes at once (up to its send buffer and, on loopback,
 * the reader's receive buffer). Never inside a libmicrohttpd callback. */
#define PARK_FLUSH_BYTES (2 * 1024 * 1024)
void park_flush(Server *s);
/* When the loop must turn again (0: answers are ready to be written; else
 * the next answer that could not be written for --idle-timeout, in ms from
 * now; -1 if none), and closing those that are past it. */
int64_t park_next_timeout_ms(const Server *s, const Now *now);
void park_tick(Server *s, const Now *now);
/* Shutdown: closes every parked connection. */
void park_close_all(Server *s);
/* Connections parked now: parked requests and dormant waiters (dormant.h).
 * Shutdown closes the dormant first (http_close_suspended). */
size_t park_connections(const Server *s);

#endif
