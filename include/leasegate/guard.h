/*
 * guard — storage backends behind leasegate: requests under a --guard prefix
 * are forwarded upstream; writes only with a current fencing token.
 *
 * GET, HEAD and OPTIONS pass. Any other method needs Fencing-Token and
 * Fencing-Lock (else 428), and the token must be the lock's current unexpired
 * holder's and not below the highest token already let through for that lock
 * (else 409). That mark is raised when a write is checked and is durable
 * before the write is forwarded; just before forwarding the write is checked
 * again. So once a write with token T is forwarded, no write with a smaller
 * token is forwarded after it, even one that passed its first check earlier.
 */
#ifndef LEASEGATE_GUARD_H
#define LEASEGATE_GUARD_H

#include "leasegate/config.h"
#include "leasegate/http.h"

/* The guard whose prefix raw_uri starts with, or NULL. */
const GuardRoute *guard_match(const Server *s, const char *raw_uri);
/* Runs at the request's first callback (headers only): rejects it, or
 * starts the upstream call (for writes once the raised mark is durable). */
void guard_begin(Request *req, const GuardRoute *g, const char *method);

#endif
