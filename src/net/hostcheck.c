/* hostcheck — Host and Origin against DNS rebinding; see hostcheck.h. */
#include "net/hostcheck.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Adds name (a host name, lower-cased, one trailing dot dropped) unless it is
 * an IP literal (allowed anyway), empty, or there already. */
static void add_name(HostCheck *h, const char *name, size_t len)
{
    if (len && name[len - 1] == '.')
        len--;
    if (!len || len > CONFIG_HOST_NAME_MAX || h->n == HOSTCHECK_MAX_NAMES)
        return;
    char lower[CONFIG_HOST_NAME_MAX + 1];
    for (size_t i = 0; i < len; i++)
        lower[i] = (char)tolower((unsigned char)name[i]);
    lower[len] = '\0';
    struct in6_addr a6;
    struct in_addr a4;
    if (inet_pton(AF_INET, lower, &a4) == 1 || inet_pton(AF_INET6, lower, &a6) == 1)
        return;
    for (size_t i = 0; i < h->n; i++)
        if (!strcmp(h->names[i], lower))
            return;
    memcpy(h->names[h->n++], lower, len + 1);
}

/* The host part of an authority "host[:port]" or "[v6]:port": *name and *len;
 * *ip when it is an IP literal. False when it is not well formed. */
static bool split_authority(const char *a, size_t alen, const char **name, size_t *len, bool *ip)
{
    *ip = false;
    if (alen && a[0] == '[') {
        const char *close = memchr(a, ']', alen);
        if (!close)
            return false;
        size_t rest = alen - (size_t)(close + 1 - a);
        if (rest && (close[1] != ':' || strspn(close + 2, "0123456789") < rest - 1))
            return false;
        char v6[64];
        size_t n = (size_t)(close - a - 1);
        if (n >= sizeof v6)
            return false;
        memcpy(v6, a + 1, n);
        v6[n] = '\0';
        struct in6_addr addr;
        *ip = inet_pton(AF_INET6, v6, &addr) == 1;
        *name = a + 1;
        *len = n;
        return *ip;
    }
    size_t n = alen;
    const char *colon = memchr(a, ':', alen);
    if (colon) {
        n = (size_t)(colon - a);
        size_t digits = alen - n - 1;
        for (size_t i = 0; i < digits; i++)
            if (!isdigit((unsigned char)colon[1 + i]))
                return false;
    }
    if (!n || n > CONFIG_HOST_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)a[i]) && a[i] != '-' && a[i] != '.' && a[i] != '_')
            return false;
    char v4[CONFIG_HOST_NAME_MAX + 1];
    memcpy(v4, a, n);
    v4[n] = '\0';
    struct in_addr addr;
    *ip = inet_pton(AF_INET, v4, &addr) == 1;
    *name = a;
    *len = n;
    return true;
}

static bool allowed_authority(const HostCheck *h, const char *a, size_t alen)
{
    const char *name;
    size_t len;
    bool ip;
    if (!split_authority(a, alen, &name, &len, &ip))
        return false;
    if (ip)
        return true;
    if (name[len - 1] == '.')
        len--;
    if (len == 9 && !strncasecmp(name, "localhost", 9))
        return true;
    for (size_t i = 0; i < h->n; i++)
        if (strlen(h->names[i]) == len && !strncasecmp(h->names[i], name, len))
            return true;
    return false;
}

/* The host of a URL "scheme://authority[/...]": authority and its length. */
static bool url_authority(const char *url, const char **a, size_t *alen)
{
    const char *p = strstr(url, "://");
    if (!p)
        return false;
    *a = p + 3;
    *alen = strcspn(*a, "/?#");
    return *alen > 0;
}

void hostcheck_init(HostCheck *h, const Config *cfg, const char *advertise)
{
    memset(h, 0, sizeof *h);
    h->off = cfg->any_host;
    add_name(h, cfg->listen_host, strlen(cfg->listen_host));
    const char *a;
    size_t alen;
    const char *name;
    size_t len;
    bool ip;
    if (advertise && url_authority(advertise, &a, &alen) && split_authority(a, alen, &name, &len, &ip) && !ip)
        add_name(h, name, len);
    for (size_t i = 0; i < cfg->nallowed_hosts; i++)
        add_name(h, cfg->allowed_hosts[i], strlen(cfg->allowed_hosts[i]));
}

HostVerdict hostcheck_request(const HostCheck *h, const char *method, const char *host, const char *origin)
{
    if (h->off)
        return HOST_OK;
    if (host && !allowed_authority(h, host, strlen(host)))
        return HOST_MISDIRECTED;
    if (!origin || !strcmp(method, "GET") || !strcmp(method, "HEAD") || !strcmp(method, "OPTIONS"))
        return HOST_OK;
    const char *a;
    size_t alen;
    if ((strncmp(origin, "http://", 7) && strncmp(origin, "https://", 8)) || !url_authority(origin, &a, &alen) ||
        a[alen] != '\0' || !allowed_authority(h, a, alen))
        return HOST_BAD_ORIGIN;
    return HOST_OK;
}

void hostcheck_describe(const HostCheck *h, char *out, size_t outlen)
{
    if (h->off) {
        snprintf(out, outlen, "any Host (--allowed-host '*': no defence against DNS rebinding)");
        return;
    }
    int o = snprintf(out, outlen, "Host: IP addresses, localhost");
    for (size_t i = 0; i < h->n && o > 0 && (size_t)o < outlen; i++)
        o += snprintf(out + o, outlen - (size_t)o, ", %s", h->names[i]);
    if (o > 0 && (size_t)o < outlen)
        snprintf(out + o, outlen - (size_t)o, " (any port; more with --allowed-host NAME)");
}
