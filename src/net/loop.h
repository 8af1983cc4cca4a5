/*
 * loop — an epoll set of sources, and nothing else: it knows file
 * descriptors and what to call when one is ready, never what they are.
 * What a server does on each wake-up (deadlines, libmicrohttpd, commits)
 * is runloop.h's. Only the loop thread uses it.
 */
#ifndef LEASEGATE_LOOP_H
#define LEASEGATE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct LoopSource LoopSource;
/* Called with the epoll events of the source's fd. Returns 0, or -1 to stop
 * the batch: loop_wait then calls nothing more and returns -1. */
typedef int (*LoopReady)(LoopSource *src, uint32_t events);

/* Embedded in whatever the loop watches (CONTAINER_OF leads back to it). */
struct LoopSource {
    LoopReady ready;
};

typedef struct Loop Loop;

Loop *loop_new(void); /* NULL on failure (errno set) */
void loop_free(Loop *l);
/* Watches fd for the epoll events given (EPOLLIN, EPOLLOUT, EPOLLRDHUP...), or
 * changes them. A source stays valid until its fd is unwatched; one unwatched
 * during a batch may still be in it (its owner keeps it until the next wait). */
bool loop_watch(Loop *l, int fd, uint32_t events, LoopSource *src);
bool loop_rewatch(Loop *l, int fd, uint32_t events, LoopSource *src);
void loop_unwatch(Loop *l, int fd);
/* Sleeps until a source is ready or timeout_ms passes (-1: no limit), and
 * calls the ready ones. How many were called (0: the timeout passed, or a
 * signal came), or -1 when epoll failed or a source stopped the batch. */
int loop_wait(Loop *l, int timeout_ms);

#endif
