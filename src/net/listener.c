/* listener — the listening socket; see listener.h. */
#include "net/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool loopback_addr(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

bool listener_beyond_loopback(const char *host)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
        return false;
    bool beyond = false;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next)
        beyond = beyond || !loopback_addr(ai->ai_addr);
    freeaddrinfo(res);
    return beyond;
}

bool listener_parse(const char *spec, char *host, size_t hostlen, uint16_t *port)
{
    const char *h = spec, *hend, *colon;
    if (*spec == '[') {
        h = spec + 1;
        hend = strchr(h, ']');
        if (!hend || hend[1] != ':')
            return false;
        colon = hend + 1;
    } else {
        colon = strrchr(spec, ':');
        if (!colon || memchr(spec, ':', (size_t)(colon - spec)))
            return false; /* an IPv6 address needs brackets */
        hend = colon;
    }
    size_t n = (size_t)(hend - h);
    const char *p = colon + 1;
    if (n == 0 || n >= hostlen || !*p || strspn(p, "0123456789") != strlen(p) || strlen(p) > 5)
        return false;
    long v = strtol(p, NULL, 10);
    if (v > 65535)
        return false;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (uint16_t)v;
    return true;
}

static int bind_one(const struct addrinfo *ai, int backlog, int *err)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    /* A restarted server can take its port back while old connections linger in TIME_WAIT. */
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        listen(fd, backlog) != 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

int listener_open(const char *host, uint16_t port, int backlog, char *err, size_t errlen)
{
    /* IPv6 addresses in messages are bracketed, as on the command line. */
    const char *lb = strchr(host, ':') ? "[" : "", *rb = *lb ? "]" : "";
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s%s%s:%u: cannot resolve '%s': %s", lb, host, rb, port, host,
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -1;
    }
    int fd = -1, last = 0;
    for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
        fd = bind_one(ai, backlog, &last);
    freeaddrinfo(res);
    if (fd < 0) {
        const char *hint = last == EADDRINUSE    ? " (another process uses the port; pick another with --listen)"
                           : last == EACCES      ? " (ports below 1024 need privileges)"
                           : last == EADDRNOTAVAIL ? " (no network interface has that address)"
                                                   : "";
        snprintf(err, errlen, "cannot listen on %s%s%s:%u: %s%s", lb, host, rb, port, strerror(last), hint);
        return -1;
    }
    return fd;
}

void listener_name(int fd, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
        getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV)) {
        snprintf(out, outlen, "?");
        return;
    }
    snprintf(out, outlen, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}
