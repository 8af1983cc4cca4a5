/*
 * h2c — unary gRPC calls over one kept HTTP/2 connection, through nghttp2,
 * in cleartext or over TLS (tlsconn.h: GnuTLS). The etcd client's gRPC
 * calls go this way (etcd.c), to etcd:// and etcds:// members: libcurl 7.88 sends a
 * call's HEADERS and DATA frames in two writes and polls eight times a
 * call; a call etcd answers without Raft took 235-327 us and 120 us of the
 * caller's CPU through it on loopback, 139-159 us and 30 us here
 * (docs/BENCHMARKS.md, round 4 of issue 42). The frames a call makes go out
 * in one write; acknowledgements (PING, SETTINGS) and window updates go out
 * as soon as nghttp2 has them.
 *
 * An H2c belongs to one thread. It keeps at most one connection, to the
 * endpoint of its last call; a call to another endpoint, after a failure or
 * a timeout, or on a connection the server has closed (GOAWAY, end of
 * stream) starts a new one.
 */
#ifndef LEASEGATE_H2C_H
#define LEASEGATE_H2C_H

#include <stdbool.h>
#include <stddef.h>

#include "store/tlsconn.h"

typedef struct H2c H2c;

/* NULL when out of memory. Connects at the first call: over TLS with the
 * files of tls (borrowed: they outlive the H2c), or in cleartext (tls
 * NULL). */
H2c *h2c_new(const TlsFiles *tls);
void h2c_free(H2c *h);
/* Closes the connection (the next call opens a new one). */
void h2c_close(H2c *h);

/* What a call got back: the HTTP status, the gRPC status and message (from
 * the trailers, or the headers of an answer without a body), and the body
 * (owned: free it). */
typedef struct H2cAnswer {
    int http_status;   /* 0 when none came */
    int grpc_status;   /* -1 when none came; 2 (UNKNOWN) when not a number */
    char message[200]; /* grpc-message as sent (percent-encoded) */
    char *body;
    size_t len;
} H2cAnswer;

/* Why a call got no answer. */
typedef enum H2cFailure {
    H2C_OK,
    H2C_UNREACHABLE, /* no connection, or it broke (reset, closed, refused the stream, not HTTP/2), or
                        the stream ended before an answer's header (even RST_STREAM NO_ERROR) */
    H2C_TLS,         /* a certificate was refused, etcd's by us or ours by etcd, or no HTTP/2 (ALPN) */
    H2C_TIMEOUT,     /* no answer within the bound */
    H2C_CANCELLED,   /* cancelled(ud) said so */
    H2C_NOMEM
} H2cFailure;

/* POSTs body (len bytes: a gRPC frame) to http[s]://host:port/path with
 * content-type application/grpc, te: trailers and, when token is not NULL,
 * the metadata "token". connect_ms bounds a new connection's whole connect
 * (the name's lookup, every address tried, TLS's handshake: one deadline),
 * timeout_ms the whole call, connect included (0: no bound), whatever the
 * server sends; cancelled (may be NULL) is asked about once a second while
 * the call waits or reads. H2C_OK with *a filled, else the failure with the
 * reason in err and the connection closed. */
H2cFailure h2c_call(H2c *h, const char *host, const char *port, const char *path, const char *token,
                    const void *body, size_t len, long connect_ms, long timeout_ms, bool (*cancelled)(void *ud),
                    void *ud, H2cAnswer *a, char *err, size_t errlen);

#endif
