/* loop — an epoll set of sources; see loop.h. */
#include "net/loop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/log.h"

#define MAX_EVENTS 256

struct Loop {
    int epfd;
};

Loop *loop_new(void)
{
    Loop *l = malloc(sizeof *l);
    if (!l)
        return NULL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        int e = errno;
        free(l);
        errno = e;
        return NULL;
    }
    return l;
}

void loop_free(Loop *l)
{
    if (!l)
        return;
    close(l->epfd);
    free(l);
}

bool loop_watch(Loop *l, int fd, uint32_t events, LoopSource *src)
{
    struct epoll_event ev = {.events = events, .data.ptr = src};
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

bool loop_rewatch(Loop *l, int fd, uint32_t events, LoopSource *src)
{
    struct epoll_event ev = {.events = events, .data.ptr = src};
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void loop_unwatch(Loop *l, int fd) { epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL); }

int loop_wait(Loop *l, int timeout_ms)
{
    struct epoll_event events[MAX_EVENTS];
    int n = epoll_wait(l->epfd, events, MAX_EVENTS, timeout_ms);
    if (n < 0) {
        if (errno == EINTR)
            return 0;
        log_line(LEVEL_ERROR, "epoll_wait: %s", strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        LoopSource *src = events[i].data.ptr;
        if (src->ready(src, events[i].events) < 0)
            return -1;
    }
    return n;
}
