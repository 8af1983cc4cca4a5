/*
 * httphead — headers the way every HTTP-facing module needs them: reading a
 * request's (a Content-Length as a number, a token in a comma-separated
 * list), and the one rule for the headers of the answers leasegate writes
 * itself, whichever way they leave (libmicrohttpd, a parked socket, a
 * follower's own answers). Proxied answers keep exactly the upstream's.
 */
#ifndef LEASEGATE_HTTPHEAD_H
#define LEASEGATE_HTTPHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;
struct MHD_Response;

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
/* The request's Content-Length (0 when absent); false when it is not a number. */
bool httphead_content_length(struct MHD_Connection *conn, uint64_t *n);

#endif
