/*
 * httphead — reading request headers the way every HTTP-facing module needs
 * them: a Content-Length as a number, a token in a comma-separated list.
 * Pure functions over libmicrohttpd's header lookup.
 */
#ifndef LEASEGATE_HTTPHEAD_H
#define LEASEGATE_HTTPHEAD_H

#include <stdbool.h>
#include <stdint.h>

struct MHD_Connection;

/* Is `token` (any case) one of the comma-separated tokens of a header value
 * such as Connection's? */
bool httphead_has_token(const char *list, const char *token);
/* The request's Content-Length (0 when absent); false when it is not a number. */
bool httphead_content_length(struct MHD_Connection *conn, uint64_t *n);

#endif
