/* Unit test of h2c against hostile HTTP/2 peers on loopback (found by the
 * transport review of issue 42): an etcd member that keeps the socket
 * readable for ever, with frames that never complete an answer, or that
 * asks for a TLS renegotiation, must not hold a call past its deadline.
 * The peers are real: a thread listens on 127.0.0.1 and writes raw HTTP/2
 * frames, over TCP, or over TLS (GnuTLS, a certificate made here). A call
 * with a 2 s deadline is allowed 20 s (CPU is shared here): before the
 * fixes, a flood held it for as long as the peer went on (FLOOD_MS). */
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "monoms.h"
#include "store/h2c.h"

/* How long a flooding peer goes on at most: longer than any bound asserted. */
#define FLOOD_MS 25000
/* The call's deadline, and what the test allows it. */
#define CALL_MS 2000
#define ALLOWED_MS 20000

typedef enum Hostility {
    WINDOW_UPDATES, /* WINDOW_UPDATE (connection, +1) after WINDOW_UPDATE */
    EMPTY_DATA,     /* the answer's HEADERS, then empty DATA frames, never END_STREAM */
    PINGS,          /* PING after PING, the ACKs never read */
    RENEGOTIATION   /* TLS 1.2, then a HelloRequest after the server's SETTINGS */
} Hostility;

typedef struct Peer {
    Hostility how;
    int listener;
    char port[16];
    pthread_t thread;
    /* RENEGOTIATION: the server's certificate and key (owned). */
    gnutls_certificate_credentials_t creds;
} Peer;

/* A frame's 9-byte header. */
static size_t frame(unsigned char *p, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
    p[0] = (unsigned char)(len >> 16), p[1] = (unsigned char)(len >> 8), p[2] = (unsigned char)len;
    p[3] = type, p[4] = flags;
    p[5] = (unsigned char)(stream >> 24), p[6] = (unsigned char)(stream >> 16), p[7] = (unsigned char)(stream >> 8);
    p[8] = (unsigned char)stream;
    return 9;
}

/* Fills buf (cap bytes) with whole frames of the flood: its length. */
static size_t flood_frames(Hostility how, unsigned char *buf, size_t cap)
{
    size_t n = 0, one = how == WINDOW_UPDATES ? 13 : how == EMPTY_DATA ? 9 : 17;
    while (n + one <= cap) {
        if (how == WINDOW_UPDATES) {
            n += frame(buf + n, 4, 0x8, 0, 0);
            memcpy(buf + n, "\0\0\0\1", 4);
            n += 4;
        } else if (how == EMPTY_DATA) {
            n += frame(buf + n, 0, 0x0, 0, 1);
        } else {
            n += frame(buf + n, 8, 0x6, 0, 0);
            memcpy(buf + n, "pingping", 8);
            n += 8;
        }
    }
    return n;
}

/* Waits (bounded) until the client closes its end. */
static void wait_for_close(int fd)
{
    char sink[4096];
    for (int64_t until = mono_ms() + FLOOD_MS; mono_ms() < until;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) > 0 && recv(fd, sink, sizeof sink, 0) <= 0)
            return;
    }
}

static void flood(Peer *p, int fd)
{
    static const unsigned char settings[9] = {0, 0, 0, 0x4, 0, 0, 0, 0, 0};
    /* :status 200 (HPACK static index 8), END_HEADERS, on the client's first stream. */
    static const unsigned char headers[10] = {0, 0, 1, 0x1, 0x4, 0, 0, 0, 1, 0x88};
    static unsigned char buf[1 << 16];
    size_t len = flood_frames(p->how, buf, sizeof buf);
    struct timeval t = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
    bool ok = send(fd, settings, sizeof settings, MSG_NOSIGNAL) == sizeof settings;
    if (ok && p->how == EMPTY_DATA)
        ok = send(fd, headers, sizeof headers, MSG_NOSIGNAL) == sizeof headers;
    /* As fast as the client reads, until it closes (or FLOOD_MS). */
    for (int64_t until = mono_ms() + FLOOD_MS; ok && mono_ms() < until;) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        ok = n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (n > 0 && (size_t)n < len) /* whole frames only: the rest of the buffer */
            for (size_t at = (size_t)n; ok && at < len;) {
                ssize_t m = send(fd, buf + at, len - at, MSG_NOSIGNAL);
                ok = m > 0 || (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
                at += m > 0 ? (size_t)m : 0;
                ok = ok && mono_ms() < until;
            }
    }
    if (ok)
        wait_for_close(fd);
}

static void renegotiate(Peer *p, int fd)
{
    gnutls_session_t s;
    static const unsigned char settings[9] = {0, 0, 0, 0x4, 0, 0, 0, 0, 0};
    gnutls_datum_t h2 = {(unsigned char *)"h2", 2};
    struct timeval t = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
    if (gnutls_init(&s, GNUTLS_SERVER) != GNUTLS_E_SUCCESS)
        return;
    int rc = gnutls_priority_set_direct(s, "NORMAL:-VERS-ALL:+VERS-TLS1.2", NULL);
    if (!rc)
        rc = gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, p->creds);
    if (!rc)
        rc = gnutls_alpn_set_protocols(s, &h2, 1, 0);
    gnutls_transport_set_int(s, fd);
    if (!rc)
        do
            rc = gnutls_handshake(s);
        while (rc < 0 && !gnutls_error_is_fatal(rc));
    if (!rc && gnutls_record_send(s, settings, sizeof settings) == sizeof settings &&
        gnutls_rehandshake(s) == GNUTLS_E_SUCCESS) {
        char sink[4096];
        ssize_t n;
        /* Until the client closes (or FLOOD_MS). */
        int64_t until = mono_ms() + FLOOD_MS;
        do
            n = gnutls_record_recv(s, sink, sizeof sink);
        while ((n > 0 || n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) && mono_ms() < until);
    } else {
        fprintf(stderr, "peer: TLS: %s\n", gnutls_strerror(rc));
    }
    gnutls_deinit(s);
}

static void *peer_main(void *ud)
{
    Peer *p = ud;
    struct pollfd w = {p->listener, POLLIN, 0};
    int fd = poll(&w, 1, FLOOD_MS) == 1 ? accept(p->listener, NULL, NULL) : -1;
    if (fd < 0)
        return NULL;
    if (p->how == RENEGOTIATION)
        renegotiate(p, fd);
    else
        flood(p, fd);
    close(fd);
    return NULL;
}

static bool peer_start(Peer *p, Hostility how)
{
    p->how = how;
    p->listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (p->listener < 0 || bind(p->listener, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->listener, 4) != 0 ||
        getsockname(p->listener, (struct sockaddr *)&a, &al) != 0) {
        perror("peer listener");
        return false;
    }
    snprintf(p->port, sizeof p->port, "%u", (unsigned)ntohs(a.sin_port));
    return pthread_create(&p->thread, NULL, peer_main, p) == 0;
}

static void peer_stop(Peer *p)
{
    pthread_join(p->thread, NULL);
    close(p->listener);
}

static bool cancel_after_first(void *ud)
{
    int *asked = ud;
    return ++*asked >= 1;
}

/* One call to a peer of that hostility: its failure, err, and the ms it took. */
static H2cFailure call_peer(Hostility how, const TlsFiles *tls, gnutls_certificate_credentials_t creds,
                            long timeout_ms, bool (*cancelled)(void *), void *ud, char *err, size_t errlen,
                            int64_t *took)
{
    Peer p = {.creds = creds};
    H2c *h = h2c_new(tls);
    H2cFailure f = H2C_NOMEM;
    if (h && peer_start(&p, how)) {
        H2cAnswer a;
        int64_t t0 = mono_ms();
        f = h2c_call(h, "127.0.0.1", p.port, "/etcdserverpb.KV/Txn", NULL, "\0\0\0\0\0", 5, 5000, timeout_ms,
                     cancelled, ud, &a, err, errlen);
        *took = mono_ms() - t0;
        if (f == H2C_OK)
            free(a.body);
        h2c_free(h); /* the peer sees the connection closed and ends */
        h = NULL;
        peer_stop(&p);
    }
    h2c_free(h);
    printf("%s: h2c_call: %d after %lld ms: %s\n",
           how == WINDOW_UPDATES ? "WINDOW_UPDATE flood"
           : how == EMPTY_DATA   ? "empty DATA flood"
           : how == PINGS        ? "PING flood"
                                 : "TLS renegotiation",
           (int)f, (long long)*took, f == H2C_OK ? "" : err);
    return f;
}

/* A self-signed certificate for 127.0.0.1 in creds, and as PEM in the file
 * at path (the client's CA). */
static bool make_certificate(gnutls_certificate_credentials_t creds, const char *path)
{
    gnutls_x509_privkey_t key;
    gnutls_x509_crt_t crt;
    if (gnutls_x509_privkey_init(&key) || gnutls_x509_crt_init(&crt))
        return false;
    static const unsigned char serial[1] = {1}, ip[4] = {127, 0, 0, 1};
    time_t now = time(NULL);
    gnutls_datum_t pem = {NULL, 0};
    bool ok = !gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0) &&
              !gnutls_x509_crt_set_version(crt, 3) && !gnutls_x509_crt_set_serial(crt, serial, sizeof serial) &&
              !gnutls_x509_crt_set_activation_time(crt, now - 3600) &&
              !gnutls_x509_crt_set_expiration_time(crt, now + 86400) &&
              !gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, "h2c test", 8) &&
              !gnutls_x509_crt_set_key(crt, key) && !gnutls_x509_crt_set_basic_constraints(crt, 1, -1) &&
              !gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, ip, sizeof ip, GNUTLS_FSAN_SET) &&
              !gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE | GNUTLS_KEY_KEY_CERT_SIGN) &&
              !gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0) &&
              !gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &pem) &&
              !gnutls_certificate_set_x509_key(creds, &crt, 1, key);
    if (ok) {
        FILE *f = fopen(path, "w");
        ok = f && fwrite(pem.data, 1, pem.size, f) == pem.size;
        ok = f && fclose(f) == 0 && ok;
    }
    gnutls_free(pem.data);
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_privkey_deinit(key);
    return ok;
}

int main(void)
{
    char err[400];
    int64_t took = 0;

    /* A peer that keeps the socket readable ends the call at its deadline. */
    H2cFailure f = call_peer(WINDOW_UPDATES, NULL, NULL, CALL_MS, NULL, NULL, err, sizeof err, &took);
    CHECK(f == H2C_TIMEOUT);
    CHECK(took < ALLOWED_MS);
    f = call_peer(EMPTY_DATA, NULL, NULL, CALL_MS, NULL, NULL, err, sizeof err, &took);
    CHECK(f == H2C_TIMEOUT);
    CHECK(took < ALLOWED_MS);
    /* Without a deadline, the call is still asked whether it is cancelled. */
    int asked = 0;
    f = call_peer(WINDOW_UPDATES, NULL, NULL, 0, cancel_after_first, &asked, err, sizeof err, &took);
    CHECK(f == H2C_CANCELLED && asked == 1);
    CHECK(took < ALLOWED_MS);
    /* PINGs whose ACKs we would have to queue: the connection is dropped as
     * flooded, not answered into memory. */
    f = call_peer(PINGS, NULL, NULL, CALL_MS, NULL, NULL, err, sizeof err, &took);
    CHECK(f == H2C_UNREACHABLE && strstr(err, "flood"));
    CHECK(took < ALLOWED_MS);

    /* A TLS 1.2 renegotiation request (etcd never makes one) fails the
     * connection at once: the call is tried again on a new one, not left
     * waiting for a handshake no one goes on with until its deadline. */
    char ca[] = "/tmp/lg-h2c-ca-XXXXXX";
    int cafd = mkstemp(ca);
    gnutls_certificate_credentials_t creds;
    CHECK(cafd >= 0 && gnutls_certificate_allocate_credentials(&creds) == GNUTLS_E_SUCCESS);
    if (cafd >= 0) {
        close(cafd);
        CHECK(make_certificate(creds, ca));
        TlsFiles files = {ca, NULL, NULL};
        f = call_peer(RENEGOTIATION, &files, creds, CALL_MS, NULL, NULL, err, sizeof err, &took);
        CHECK(f == H2C_UNREACHABLE && strstr(err, "renegotiat"));
        gnutls_certificate_free_credentials(creds);
        unlink(ca);
    }
    return check_report("h2c");
}
