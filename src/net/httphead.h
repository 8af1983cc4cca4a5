/*
 * httphead — headers the way every HTTP-facing module needs them: reading a
 * request's (a Content-Length as a number, a token in a comma-separated
 * list), the one rule for the headers of the answers leasegate writes
 * itself, whichever way they leave (libmicrohttpd, a parked socket, a
 * follower's own answers), and the one rule for which headers a proxy passes
 * on (the guard's and a follower's, both ways): every end-to-end header of
 * the other side, and no hop-by-hop one (RFC 9110 7.6.1). Each proxy also
 * drops the few headers it sets itself (Host, Content-Length, ...).
 */
#ifndef LEASEGATE_HTTPHEAD_H
#define LEASEGATE_HTTPHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;
struct MHD_Response;
struct curl_slist;

/* A header of one of our answers: a static name and value. */
typedef struct HeadField {
    const char *name, *value;
} HeadField;

#define HTTPHEAD_ANSWER_FIELDS 3
/* The headers of an answer of ours with this status and Content-Type, into
 * out; returns how many. Our answers describe live state, so they are never
 * cached; every 503 says when to retry; every 401 names the scheme. */
size_t httphead_answer_fields(unsigned status, const char *content_type, HeadField out[HTTPHEAD_ANSWER_FIELDS]);
/* The same headers added to a libmicrohttpd response. False if one could not be. */
bool httphead_add_answer_fields(struct MHD_Response *resp, unsigned status, const char *content_type);

/* Is `token` (any case) one of the comma-separated tokens of a header value
 * such as Connection's? */
bool httphead_has_token(const char *list, const char *token);
/* Is the header `name` (len bytes, any case) about one connection only, and
 * so never passed on, whatever the message (RFC 9110 7.6.1)? Connection
 * itself; Keep-Alive, Proxy-Connection, TE, Transfer-Encoding and Upgrade,
 * which 7.6.1 says to remove even when Connection does not name them; and
 * Trailer, since our proxies frame each body anew and pass no trailers on.
 * Proxy-Authorization and Proxy-Authenticate too: RFC 9110 11.7 addresses
 * them to the next hop only (a proxy may relay them only by arrangement with
 * the next proxy), and no leasegate proxy demands or relays proxy
 * credentials. Passed on, a client's credentials for a proxy in front of us
 * would reach a storage backend or the leader, and a backend's challenge
 * would reach a client that could answer it only to us, who drop the answer. */
bool httphead_hop_by_hop(const char *name, size_t len);
/* Is `name` (len bytes) hop-by-hop in an answer whose header lines ("Name:
 * value", as libcurl gives them) are `lines`: above, or named by one of its
 * Connection headers? One may come after the header it names: ask only once
 * the lines are complete. */
bool httphead_answer_hop(const struct curl_slist *lines, const char *name, size_t len);

/* A proxy passing a message on. `own` (NULL-terminated, or NULL) names the
 * headers the proxy's side writes itself; they are dropped as well as the
 * hop-by-hop ones. Each returns false when out of memory. */
/* Appends the request's end-to-end headers to *lines, as libcurl sends them,
 * except those in own and in drop (the caller's; both may be NULL) and those
 * whose name is not a token (malformed: never passed on, as in an answer). */
bool httphead_pass_request(struct MHD_Connection *conn, const char *const *own, const char *const *drop,
                           struct curl_slist **lines);
/* The same, passing on only the headers `keep` (NULL: all) says yes to: an
 * allow-list, for an upstream that signs every header it is sent. */
bool httphead_pass_request_kept(struct MHD_Connection *conn, const char *const *own, const char *const *drop,
                                bool (*keep)(const char *name, size_t len), struct curl_slist **lines);
/* How large an answer's head a proxy keeps: it keeps every field until the
 * head is complete and checks each against the Connection headers among
 * them, so a longer head would cost memory and time (quadratic in fields,
 * and in folds) for nothing a real store sends; libmicrohttpd cannot send
 * on a head much larger either (its 16 KiB per connection also holds the
 * request: a 21 KB head got no answer at all; the guard checks what the
 * request left, http_answer_head_room). nginx's proxy refuses a head
 * over 4-8 KB alike; 12 KiB is what a request's head may be here. */
typedef struct HeadLimits {
    size_t fields;
    size_t bytes; /* of the kept lines, without their CRLF */
} HeadLimits;
#define HTTPHEAD_UPSTREAM_FIELDS 256
#define HTTPHEAD_UPSTREAM_BYTES 12288
#define HTTPHEAD_UPSTREAM_LIMITS ((HeadLimits){HTTPHEAD_UPSTREAM_FIELDS, HTTPHEAD_UPSTREAM_BYTES})
/* A leader's answer may carry an upstream's head (its guard passed it on)
 * and a few fields of its own and of libmicrohttpd's. */
#define HTTPHEAD_LEADER_LIMITS ((HeadLimits){HTTPHEAD_UPSTREAM_FIELDS + 32, HTTPHEAD_UPSTREAM_BYTES + 2048})
/* Why a proxy refuses such an answer, for its error message. */
#define HTTPHEAD_TOO_BIG "its answer's head is too large (more than 256 fields or 12 KiB)"
#define HTTPHEAD_LEADER_TOO_BIG "its answer's head is too large (more than 288 fields or 14 KiB)"
/* ... or one whose head would not fit beside the request's (http_answer_head_room). */
#define HTTPHEAD_NO_ROOM "its answer's head does not fit beside the request's head in the 16 KiB of the connection"

typedef enum HeadKept { HEAD_KEPT, HEAD_NOMEM, HEAD_TOO_BIG } HeadKept;

/* Keeps a received answer header line (len bytes, without its CRLF) in *lines;
 * an obs-fold (a line that starts with a space or tab) is joined to the line
 * before it with one space, as RFC 9112 5.2 asks of a proxy. HEAD_TOO_BIG
 * when the kept lines would go past `limits`. */
HeadKept httphead_keep_line(struct curl_slist **lines, const char *line, size_t len, HeadLimits limits);
/* The most bytes libmicrohttpd writes for the head of an answer made from
 * these kept lines (httphead_pass_answer): each as "Name: value" and CRLF,
 * plus the status line, its own Date, Connection and Content-Length or
 * Transfer-Encoding, and the blank line. */
size_t httphead_answer_head_size(const struct curl_slist *lines);
/* Adds the end-to-end headers among an answer's kept lines to resp, except
 * those in own. */
bool httphead_pass_answer(const struct curl_slist *lines, const char *const *own, struct MHD_Response *resp);
/* The request's Content-Length (0 when absent); false when it is not a number. */
bool httphead_content_length(struct MHD_Connection *conn, uint64_t *n);
/* Is every request header name a token? libmicrohttpd 0.9.75 keeps a name as
 * it came, whitespace before the colon included ("Transfer-Encoding :
 * chunked" is a field named "Transfer-Encoding "), and puts an obs-fold's
 * continuation into the name: a server must refuse such a request with 400
 * (RFC 9112 5.1 and 5.2), or whatever it passes on may be framed otherwise. */
bool httphead_names_are_tokens(struct MHD_Connection *conn);
/* The framing of a request's body, judged before any of it is read: NULL
 * when plain, else what is wrong, with the field at fault in *field. A
 * Transfer-Encoding must be exactly one "chunked" (any case; RFC 9112 6.1:
 * chunked must be the final coding, and no other coding is understood
 * here), never beside a Content-Length, and only in HTTP/1.1 (`http11`:
 * RFC 9112 6.1, an HTTP/1.0 message with one has faulty framing); there may
 * be one Content-Length. Any other framing is read differently by different
 * servers, which is how requests are smuggled: the connection must close
 * after the 400. */
const char *httphead_framing_problem(struct MHD_Connection *conn, bool http11, const char **field);
#define HTTPHEAD_NAME_NOT_TOKEN "a header name is not a token (whitespace before its colon, or a folded line)"

#endif
