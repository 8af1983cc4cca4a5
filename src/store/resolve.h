/*
 * resolve — a host name's TCP addresses, looked up within a deadline.
 * getaddrinfo(3) blocks for as long as the system's resolver takes (its
 * timeouts times its attempts, times its name servers): a hung DNS server
 * would hold the caller, the store's commit thread, past its own bound. A
 * numeric address is converted at once; a name is looked up on a thread
 * of its own (every signal blocked) while the caller waits no longer than
 * its deadline, and a lookup given up on frees itself when it ends.
 */
#ifndef LEASEGATE_RESOLVE_H
#define LEASEGATE_RESOLVE_H

#include <netdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ResolveResult {
    RESOLVE_OK,
    RESOLVE_FAILED,  /* no such name, no address, the resolver failed */
    RESOLVE_TIMEOUT, /* no answer by the deadline */
    RESOLVE_CANCELLED,
    RESOLVE_NOMEM
} ResolveResult;

/* A lookup a caller gave up on, still running: kept by the caller
 * (resolve_tcp's *pending) so that its next try for the same name waits
 * for that lookup instead of starting one more thread, and a hung
 * resolver holds at most one thread per caller. */
typedef struct ResolvePending ResolvePending;

/* host:port's stream addresses in *res (owned: freeaddrinfo), waiting
 * until deadline_ms (CLOCK_MONOTONIC, in ms; -1: no bound) and asking
 * cancelled (may be NULL) about every poll_ms. RESOLVE_OK, else why not with
 * err. pending (NULL: none kept) is the caller's slot: a lookup of this
 * host:port left there by an earlier call is waited for again, another
 * one is dropped; a lookup this call gives up on is left there. */
ResolveResult resolve_tcp(const char *host, const char *port, int64_t deadline_ms, int poll_ms,
                          bool (*cancelled)(void *ud), void *ud, ResolvePending **pending, struct addrinfo **res,
                          char *err, size_t errlen);
/* Drops the caller's hold of a pending lookup (NULL: nothing); its thread
 * frees it when the resolver answers. */
void resolve_pending_free(ResolvePending *p);

#endif
