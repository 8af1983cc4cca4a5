/*
 * query — checks of a request's query parameters, answering 400 (naming the
 * parameter) when one is wrong.
 */
#ifndef LEASEGATE_QUERY_H
#define LEASEGATE_QUERY_H

#include <stdbool.h>

#include "net/http.h"

/* A query parameter that must be an integer in min..max (def when absent);
 * false after answering 400. */
bool query_int(Request *req, const char *name, long long min, long long max, long long def, long long *out);

#endif
