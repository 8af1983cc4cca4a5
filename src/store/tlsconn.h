/*
 * tlsconn — the client side of TLS, through GnuTLS, on a connected
 * non-blocking socket: h2c's connections to an etcds:// member. HTTP/2 is
 * asked for in the handshake (ALPN "h2", nothing else), the server's
 * certificate is verified against the CA file (or the system's CAs), its
 * name against the host connected to (as libcurl does by default) and its
 * purpose (serverAuth, when it names purposes: as Go's etcd clients), a
 * host name is sent as SNI (an address is not: RFC 6066), and the client
 * certificate is shown when one is given. The files are read for each new
 * connection, as libcurl read them: a certificate renewed on disk is used
 * from the next connection on.
 *
 * Nothing here waits: a step that would block says which way (POLLIN or
 * POLLOUT) and the caller polls the socket, with its own deadline.
 */
#ifndef LEASEGATE_TLSCONN_H
#define LEASEGATE_TLSCONN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The PEM files (borrowed). cacert NULL: the system's CAs; cert NULL: no
 * client certificate (key is then unused). */
typedef struct TlsFiles {
    const char *cacert, *cert, *key;
} TlsFiles;

typedef struct TlsConn TlsConn;

/* What a step came to besides bytes. */
enum {
    TLSCONN_AGAIN = -1,   /* would block: poll for tlsconn_wants() */
    TLSCONN_BROKEN = -2,  /* the connection failed (err) */
    TLSCONN_REFUSED = -3, /* a certificate was refused (err): the server's by us, or ours by the server
                             (its alert), or the server did not agree to HTTP/2 */
    TLSCONN_NOMEM = -4
};

/* A session on fd (not owned) for host, the handshake not begun: NULL with
 * err (TLSCONN_NOMEM, or TLSCONN_BROKEN for a file that cannot be used, in
 * *why). */
TlsConn *tlsconn_new(int fd, const char *host, const TlsFiles *files, int *why, char *err, size_t errlen);
/* Frees the session (after a close_notify when the socket takes it at
 * once); the socket stays open. NULL is a no-op. */
void tlsconn_free(TlsConn *t);

/* Advances the handshake: 1 done with HTTP/2 agreed, else TLSCONN_AGAIN or
 * a failure with err. */
int tlsconn_handshake(TlsConn *t, char *err, size_t errlen);
/* Which way the step that returned TLSCONN_AGAIN waits: POLLIN or POLLOUT. */
short tlsconn_wants(const TlsConn *t);

/* As send(2): the bytes taken (> 0), or TLSCONN_AGAIN (call again with the
 * same data), or a failure with err. */
ssize_t tlsconn_send(TlsConn *t, const void *data, size_t len, char *err, size_t errlen);
/* As recv(2): the bytes read (> 0), 0 when the server closed, or
 * TLSCONN_AGAIN, or a failure with err. */
ssize_t tlsconn_recv(TlsConn *t, void *buf, size_t len, char *err, size_t errlen);
/* Whether decrypted bytes wait in the session (poll() would not say so). */
bool tlsconn_pending(const TlsConn *t);

#endif
