/*
 * loop — the one thread that owns lock state: epoll over libmicrohttpd's
 * epoll fd, the commit writer's eventfd, a signalfd, and the sockets of
 * waiting clients. Each turn sleeps until the next deadline (a lease expiry, a
 * wait timeout or MHD's own), fires due deadlines, runs MHD, and hands the
 * pending changes to the commit writer.
 */
#ifndef LEASEGATE_LOOP_H
#define LEASEGATE_LOOP_H

#include <stdbool.h>

#include <stdint.h>

typedef enum LoopKind { LOOP_MHD, LOOP_COMMIT, LOOP_SIGNAL, LOOP_REQUEST, LOOP_CURL } LoopKind;

/* Embedded first in whatever the loop watches; epoll hands it back. */
typedef struct LoopSource {
    LoopKind kind;
} LoopSource;

typedef struct Loop Loop;
struct Server;

Loop *loop_new(struct Server *s); /* NULL on failure (message on stderr) */
void loop_free(Loop *l);
/* Runs until stop is requested or storage fails. Returns the exit status. */
int loop_run(Loop *l);
/* Watches fd for the peer hanging up. */
bool loop_watch(Loop *l, int fd, LoopSource *src);
/* Watches fd for the given epoll events (EPOLLIN, EPOLLOUT), or changes them. */
bool loop_watch_events(Loop *l, int fd, uint32_t events, LoopSource *src);
bool loop_rewatch(Loop *l, int fd, uint32_t events, LoopSource *src);
void loop_unwatch(Loop *l, int fd);

#endif
