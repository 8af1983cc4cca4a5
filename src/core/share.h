/*
 * share — the shares every tenant has of what the server has in common, so
 * that one noisy client cannot use a resource up for everyone. Each share
 * is counted per API key and per peer (a client's IP address; IPv6 by /64):
 * a request that would take a key or a peer past its share is refused with
 * 429 key_limit or 429 peer_limit, whose `limit` is the share's name below.
 * Behind a reverse proxy every client is one peer (the proxy): there only
 * the keys' shares tell clients apart.
 *
 * The lock table and the fences keep, with each name they hold, who it is
 * counted against (a Charge): opaque to them, handed back when the name goes.
 * No HTTP, JSON or SQL here.
 */
#ifndef LEASEGATE_SHARE_H
#define LEASEGATE_SHARE_H

typedef enum ShareKind {
    SHARE_HELD,        /* locks held and waited for together (keys only: quota.h) */
    SHARE_WAITERS,     /* waiting acquires (keys only) */
    SHARE_NAMES,       /* lock names in the table first taken by this key or peer */
    SHARE_FENCES,      /* fence resources first raised by it */
    SHARE_POLLS,       /* long-polls, watches and event streams held open */
    SHARE_CONNECTIONS, /* open connections (peers only) */
    SHARE_HALF_SENT,   /* requests begun and not yet complete (peers only) */
    SHARE_WATCH_BYTES, /* bytes of the answers its watches of locks will get or are sending */
    SHARE_VALUE_BYTES, /* bytes of the locks' values it wrote that are kept (issue 40) */
    SHARE_KINDS,
} ShareKind;

/* Who a lock name or fence resource is counted against: the key's and the
 * peer's entries (either may be NULL), owned by the quota module. */
typedef struct Charge {
    void *key;
    void *peer;
} Charge;

/* The `limit` field of a 429 for this share: "max_names", ... */
const char *share_limit_name(ShareKind k);

#endif
