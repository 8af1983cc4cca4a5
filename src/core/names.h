/*
 * names — the rule for lock names and fence resources.
 * [A-Za-z0-9._~:/-]{1,256}; for locks the last '/'-segment may not be an
 * action word (acquire, renew, release, history, value), which the router reads as the action;
 * for elections, of theirs (campaign, proclaim, resign, renew, observe).
 * And the rule for HTTP field names, which both proxies and the guard apply.
 */
#ifndef LEASEGATE_NAMES_H
#define LEASEGATE_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#define NAME_MAX_BYTES 256

/* Returns NULL when valid, else a static description of what is wrong. */
const char *name_problem(const char *name);
bool name_is_action(const char *segment);
/* name_problem, and for a lock also an action word as the last segment. */
const char *name_lock_problem(const char *name);
/* An election's action words (campaign, proclaim, resign, renew, observe):
 * its names may not end in one. */
bool name_is_election_action(const char *segment);
const char *name_election_problem(const char *name);
/* Are the len bytes a token (RFC 9110 5.6.2), as an HTTP field name must be?
 * Not when empty or when they hold a NUL. */
bool name_is_http_token(const char *name, size_t len);

#endif
