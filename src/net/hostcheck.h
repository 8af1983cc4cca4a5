/*
 * hostcheck — which Host this server answers for, and which Origin may send
 * it writes: the defence against DNS rebinding.
 *
 * A web page whose DNS name an attacker points at 127.0.0.1 (or any address
 * of this server) talks to the server as its own origin: the browser sends
 * the attacker's name as Host, and lets the page read the answers. So a
 * request is answered only when its Host names this server: an IP literal
 * (a rebinding needs a DNS name; a browser shows a numeric host only as an
 * address), `localhost`, the host of --listen and of the URL the gateway
 * advertises (--advertise, or the one made from --listen), and each
 * --allowed-host NAME (names behind a reverse proxy or a load balancer),
 * with any port. --allowed-host '*' turns the check off (unsafe: only where
 * no browser can reach the server). Any other Host gets 421
 * misdirected_request before any handler runs, guarded paths included. A
 * request without Host (HTTP/1.0) passes: browsers always send one.
 *
 * A request other than GET, HEAD or OPTIONS whose Origin is present but not
 * an allowed host (`null` included: a sandboxed frame, a file: page) gets 403
 * forbidden with reason "origin".
 *
 * A follower checks both for its own names, and forwards a request with its
 * Origin removed (forward.c): libcurl sends the leader's own advertised name
 * as Host, which the leader allows, and the Origin was the follower's to
 * judge (the page's origin is the follower's name, not the leader's).
 */
#ifndef LEASEGATE_HOSTCHECK_H
#define LEASEGATE_HOSTCHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "leasegate/config.h"

#define HOSTCHECK_MAX_NAMES (CONFIG_MAX_ALLOWED_HOSTS + 2)

typedef struct HostCheck {
    bool off;   /* --allowed-host '*' */
    size_t n;
    char names[HOSTCHECK_MAX_NAMES][CONFIG_HOST_NAME_MAX + 1]; /* lower case, no trailing dot */
} HostCheck;

typedef enum HostVerdict {
    HOST_OK,
    HOST_MISDIRECTED, /* 421: a Host this server does not answer for */
    HOST_BAD_ORIGIN,  /* 403: a write from a page on another host */
} HostVerdict;

/* The names of cfg: --listen's host, the advertised URL's host (advertise:
 * the full URL, or NULL/"" for none) and --allowed-host. */
void hostcheck_init(HostCheck *h, const Config *cfg, const char *advertise);
/* host: the Host header (NULL: none); origin: the Origin header (NULL: none). */
HostVerdict hostcheck_request(const HostCheck *h, const char *method, const char *host, const char *origin);
/* One line for the log: which names are answered. */
void hostcheck_describe(const HostCheck *h, char *out, size_t outlen);

#endif
