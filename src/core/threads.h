/*
 * threads — the thread model, stated once: which thread owns each structure.
 *
 * A structure with one owner is touched by that thread only, and takes no
 * lock; one shared between threads says which lock or atomic guards it. The
 * threads of a running server:
 *
 *  - the loop (the main thread, which also starts and stops the server:
 *    gateway.c, runloop.c): owns the Server context and everything in it:
 *    the lock table (locktab.h), fence marks (fence.h), the lease history,
 *    the audit log and events, watches and streams, quotas, the guard's
 *    queues and its upstream calls (libcurl's multi interface, driven by the
 *    loop), every Request, and the pending batch of group commit (commit.h).
 *    libmicrohttpd's serving daemon runs on it (MHD_USE_EPOLL, driven by the
 *    loop: its callbacks are the loop's), so no handler runs elsewhere.
 *  - the commit writer (commit.c): owns the batch in flight from its hand-off
 *    (state HANDED) to its end (DONE), and the Store (store.h) from the first
 *    batch it commits until commit_free joins it; before that the loop opens
 *    and loads the store. The loop reads the store's error and the copy of a
 *    snapshot only after DONE, whose atomic store publishes them. While the
 *    writer stalls (etcd refuses writes, commit.h) the loop reads the names
 *    in the batch it holds (commit_touches): the writer only reads a batch it
 *    holds, so both read; the stall's state is atomics and the mutex.
 *  - the etcd keeper (election_etcd.c, --store etcd:// only): keeps the
 *    leader key's lease alive; the election's state is guarded by its mutex,
 *    its role by atomics; it tells the loop that leadership is lost through
 *    an eventfd (Server.deposed_fd), and touches nothing else of the Server.
 *  - the S3 prober (s3.c, S3 routes only): repeats each route's
 *    precondition probe; the credentials it signs with are guarded by the S3
 *    module's mutex (the loop signs too, and SIGHUP replaces them), each
 *    route's verdict is an atomic the loop reads.
 *  - the standby server (standby.c, --store etcd:// while the gateway is not
 *    the leader, before the loop runs): libmicrohttpd's polling thread and
 *    one thread per connection (the HTTP threads), which forward requests
 *    to the leader (forward.c: its pool of idle connections guarded by a
 *    mutex) or answer 503; they read the Server's parts that do not change
 *    while the main thread blocks in the campaign (TLS, API keys, the host
 *    check), the Standby's own counters are atomics, and nothing else.
 *
 * Debug builds check the single owners where their structures are touched,
 * as SQLite asserts sqlite3_mutex_held(): a structure embeds a ThreadOwner,
 * set by the thread that makes it (thread_own), and its entry points
 * assert(thread_owns(&x->owner)). A structure handed to another thread is
 * taken over with thread_own by its new owner at the hand-off.
 */
#ifndef LEASEGATE_THREADS_H
#define LEASEGATE_THREADS_H

#include <pthread.h>
#include <stdbool.h>

typedef struct ThreadOwner {
    pthread_t thread;
    bool set; /* false: not owned yet (a structure not made by thread_own) */
} ThreadOwner;

/* The calling thread owns o from now on. */
void thread_own(ThreadOwner *o);
/* Whether the calling thread owns o (or o has no owner yet). For asserts. */
bool thread_owns(const ThreadOwner *o);

#endif
