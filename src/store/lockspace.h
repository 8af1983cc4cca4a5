/*
 * lockspace — a lock space's identity in etcd, checked before a gateway takes
 * any part in it (before it campaigns, which writes under PREFIX/leader/).
 *
 *   PREFIX/meta/lockspace   JSON {id (a random UUID), schema, created_at_ms, prefix, created_by}:
 *                           written once, when the lock space is created, never changed
 *
 * A gateway's keys are PREFIX/...; so lock spaces at P and Q share keys as
 * soon as one prefix lies inside the other ("Q/" starts with "P/"): the
 * gateways of Q then campaign inside P's election range (P/leader/) and
 * follow, or lead, the other lock space. lockspace_open refuses that:
 *   - inside: an ancestor A of PREFIX (cut at a '/') holds a lock space
 *     (A/meta/lockspace, or A/meta/commit for a lock space of a gateway
 *     older than identities);
 *   - around: creating a lock space needs an empty PREFIX/ (no key at all), so
 *     no lock space can already lie inside it;
 *   - mistyped: a PREFIX with nothing under it is a new lock space only when
 *     the operator says so (create: --new-lock-space); otherwise a typo would
 *     start an empty lock space at token 1.
 * A lock space found without an identity but with a commit mark or a token
 * counter was made by a gateway older than identities: it is given one (the
 * same schema: those gateways and these share it). Keys of a lock space's
 * kinds without those marks are another's (a lock space at PREFIX/locks has
 * keys PREFIX/locks/..., which read as lock records of PREFIX).
 *
 * The check and the creation are one decision: the identity's transaction
 * requires what the check saw (no ancestor with a lock space, nothing under
 * the prefix), so of two gateways creating nested lock spaces at the same
 * moment, the second to commit checks again and is refused.
 *
 * The compatibility rule: a lock space's schema is the layout of the records
 * under its prefix (store_etcd.c's key list): `schema` in the identity is the
 * one it was created with, PREFIX/meta/layout the one its last leader wrote
 * (each leader writes its own, store_etcd.c: a newer gateway reads the older
 * layouts and moves the lock space to its own). A gateway refuses, before it
 * campaigns, a lock space of a schema above ETCD_LAYOUT: written by a newer
 * leasegate (docs/high-availability.md#upgrading-layouts-of-the-lock-space).
 *
 * What the check cannot see: an ancestor whose keys this gateway's etcd role
 * may not read (then the role keeps the two apart, or nothing does: the
 * docs say how to grant it), and a lock space nested inside an existing one
 * by a gateway that does not check (older than identities).
 */
#ifndef LEASEGATE_LOCKSPACE_H
#define LEASEGATE_LOCKSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/etcd.h"

/* The layout of the records this gateway writes under a prefix (store_etcd.c's
 * key list): the schema of the lock spaces it creates, the newest it reads.
 * Layout 3 (issue 40) adds what an older gateway must not load as if it knew
 * it: a semaphore's lease of several permits (it would count one), a lock's
 * value and an election's leader (it would drop them). */
#define ETCD_LAYOUT 3

typedef struct LockSpace {
    char id[37];           /* the UUID, as text */
    unsigned schema;       /* the lock space's layout now (PREFIX/meta/layout, else the identity's) */
    int64_t created_at_ms; /* Unix ms */
    bool created;          /* this call created it (--new-lock-space on an empty prefix) */
    bool adopted;          /* this call gave an identity to a lock space older than identities */
    char note[700];        /* what the check could not see (an ancestor it may not read), or "" */
} LockSpace;

#define LOCKSPACE_UNREACHED (-2)

/* Checks the lock space at url's prefix and, with create, creates it when
 * the prefix is empty. 0 with *out; -1 with one line in err naming the
 * prefix and what it collides with (or what etcd refused: a login, a
 * certificate, a permission); LOCKSPACE_UNREACHED when etcd did not answer
 * (err says how), which a later try may mend. */
int lockspace_open(const EtcdUrl *url, bool create, LockSpace *out, char *err, size_t errlen);

#endif
