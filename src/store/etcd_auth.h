/*
 * etcd_auth — the etcd user a gateway logs in as (--etcd-auth-file), and what
 * etcd's answers say about authentication.
 *
 * The file holds one line, USER:PASSWORD (as etcdctl's --user takes them: the
 * name ends at the first ':'). The password is a credential to the whole lock
 * space in etcd, so the file is refused when its group or others may write
 * it (they could put their own user there) and warned about when others (not
 * its group: the service's) may read it.
 *
 * A client logs in with the user (etcd's Authenticate: POST
 * /v3/auth/authenticate) and sends the token it gets with every call: the
 * Authorization header on the JSON gateway, the gRPC metadata `token` for
 * commits (etcd.c). etcd ends tokens (a simple token after its TTL of
 * disuse, a JWT at its expiry) and refuses old ones after its users or roles
 * changed: such an answer makes the client log in again and repeat the call
 * once (etcd_auth_retry).
 */
#ifndef LEASEGATE_ETCD_AUTH_H
#define LEASEGATE_ETCD_AUTH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define ETCD_AUTH_MAX_FILE 4096

typedef struct EtcdAuth {
    char user[256];
    char password[1024];
    const char *path;         /* the file's, borrowed: named in errors */
    _Atomic bool warned_off;  /* "authentication is not enabled" was logged (once per process) */
} EtcdAuth;

/* Reads path: a new EtcdAuth (free it with etcd_auth_free), or NULL with the
 * reason in err. A file others may read is loaded, with why in warn ("" when
 * there is nothing to say). */
EtcdAuth *etcd_auth_load(const char *path, char *warn, size_t warnlen, char *err, size_t errlen);
/* Wipes the password and frees. NULL is fine. */
void etcd_auth_free(EtcdAuth *a);

/* etcd's answer (its error text, as etcd.c reports it) says the call needs
 * a (new) token: it was sent without one to an etcd with authentication
 * enabled, or its token expired, or etcd's users or roles changed since. */
bool etcd_auth_retry(const char *err);
/* etcd's answer to an authentication says authentication is not enabled. */
bool etcd_auth_off(const char *err);

#endif
