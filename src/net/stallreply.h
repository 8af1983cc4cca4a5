/*
 * stallreply — what a gateway answers while etcd refuses writes (Server.stalled,
 * commit.h's stall): 503 overloaded, with Retry-After as every 503, the
 * alarm named in the body ("alarm": "NOSPACE" or "CORRUPT", and etcd's own
 * words in "etcd"), and what still works (reads of what is committed). The
 * one place its words are made, for the HTTP layer and for parked answers.
 */
#ifndef LEASEGATE_STALLREPLY_H
#define LEASEGATE_STALLREPLY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "leasegate/server.h"

/* The message: what etcd refuses, and what the operator does about it. */
const char *stallreply_message(const Server *s);
/* The fields beside error and message ({alarm, etcd}): a new object, or NULL. */
json_t *stallreply_fields_new(const Server *s);
/* The whole body as text (the caller frees it), or NULL when out of memory.
 * `queued`: the answer of a change already made, in the batch etcd refused,
 * which is committed once etcd takes writes again if this gateway still
 * leads then; the body says so ("queued": true), and that a retry is safe. */
char *stallreply_body(const Server *s, bool queued, size_t *len);

#endif
