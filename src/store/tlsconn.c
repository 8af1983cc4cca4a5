/* tlsconn — client TLS through GnuTLS on a non-blocking socket; see tlsconn.h. */
#include "store/tlsconn.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct TlsConn {
    gnutls_session_t session;
    gnutls_certificate_credentials_t creds; /* outlives the session: freed after it */
    /* What the server's certificate is checked for, read by GnuTLS in any
     * handshake of the session (it keeps the pointers): the host's name and
     * the purpose. */
    char host[256];
    gnutls_typed_vdata_st verify[2];
};

void tlsconn_free(TlsConn *t)
{
    if (!t)
        return;
    if (t->session) {
        gnutls_bye(t->session, GNUTLS_SHUT_WR); /* non-blocking: sent if the socket takes it now */
        gnutls_deinit(t->session);
    }
    if (t->creds)
        gnutls_certificate_free_credentials(t->creds);
    free(t);
}

/* The credentials from the files: 0, or a GnuTLS error with err. */
static int load_files(gnutls_certificate_credentials_t creds, const TlsFiles *files, char *err, size_t errlen)
{
    int rc = files->cacert ? gnutls_certificate_set_x509_trust_file(creds, files->cacert, GNUTLS_X509_FMT_PEM)
                           : gnutls_certificate_set_x509_system_trust(creds);
    if (rc < 0 || (files->cacert && rc == 0)) {
        if (files->cacert)
            snprintf(err, errlen, "--cacert %s: %s", files->cacert, rc ? gnutls_strerror(rc) : "no certificate in it");
        else
            snprintf(err, errlen, "the system's CA certificates: %s", gnutls_strerror(rc));
        return rc ? rc : GNUTLS_E_FILE_ERROR;
    }
    if (files->cert) {
        rc = gnutls_certificate_set_x509_key_file(creds, files->cert, files->key, GNUTLS_X509_FMT_PEM);
        if (rc < 0) {
            snprintf(err, errlen, "--etcd-cert %s and --etcd-key %s: %s", files->cert, files->key,
                     gnutls_strerror(rc));
            return rc;
        }
    }
    return 0;
}

TlsConn *tlsconn_new(int fd, const char *host, const TlsFiles *files, int *why, char *err, size_t errlen)
{
    *why = TLSCONN_NOMEM;
    if (strlen(host) >= sizeof ((TlsConn *)0)->host) {
        snprintf(err, errlen, "TLS: the host name %.64s... is too long", host);
        *why = TLSCONN_BROKEN;
        return NULL;
    }
    TlsConn *t = calloc(1, sizeof *t);
    if (!t || gnutls_certificate_allocate_credentials(&t->creds) != GNUTLS_E_SUCCESS) {
        snprintf(err, errlen, "out of memory");
        free(t);
        return NULL;
    }
    int rc = load_files(t->creds, files, err, errlen);
    if (rc < 0) {
        *why = rc == GNUTLS_E_MEMORY_ERROR ? TLSCONN_NOMEM : TLSCONN_BROKEN;
        tlsconn_free(t);
        return NULL;
    }
    unsigned char addr[16];
    bool numeric = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
    gnutls_datum_t h2 = {(unsigned char *)"h2", 2};
    if (gnutls_init(&t->session, GNUTLS_CLIENT | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) != GNUTLS_E_SUCCESS) {
        t->session = NULL;
        snprintf(err, errlen, "out of memory");
        tlsconn_free(t);
        return NULL;
    }
    rc = gnutls_set_default_priority(t->session);
    if (!rc)
        rc = gnutls_credentials_set(t->session, GNUTLS_CRD_CERTIFICATE, t->creds);
    if (!rc && !numeric)
        rc = gnutls_server_name_set(t->session, GNUTLS_NAME_DNS, host, strlen(host));
    if (!rc)
        rc = gnutls_alpn_set_protocols(t->session, &h2, 1, 0);
    if (rc) {
        snprintf(err, errlen, "TLS: %s", gnutls_strerror(rc));
        *why = rc == GNUTLS_E_MEMORY_ERROR ? TLSCONN_NOMEM : TLSCONN_BROKEN;
        tlsconn_free(t);
        return NULL;
    }
    /* The certificate's chain, its name (a DNS name, or an IP address in
     * its subjectAltName) and that it is a server's (its extended key usage,
     * when it has one, includes serverAuth, as Go's etcd clients and OpenSSL
     * require: GnuTLS checks a purpose only when given one, and etcd's CA
     * signs its other clients' certificates too), checked in the handshake. */
    snprintf(t->host, sizeof t->host, "%s", host);
    t->verify[0] = (gnutls_typed_vdata_st){GNUTLS_DT_DNS_HOSTNAME, (unsigned char *)t->host, 0};
    t->verify[1] = (gnutls_typed_vdata_st){GNUTLS_DT_KEY_PURPOSE_OID, (unsigned char *)GNUTLS_KP_TLS_WWW_SERVER, 0};
    gnutls_session_set_verify_cert2(t->session, t->verify, 2, 0);
    gnutls_transport_set_int(t->session, fd);
    return t;
}

short tlsconn_wants(const TlsConn *t) { return gnutls_record_get_direction(t->session) ? POLLOUT : POLLIN; }

bool tlsconn_pending(const TlsConn *t) { return gnutls_record_check_pending(t->session) > 0; }

/* The alerts a server sends when it refuses the client's certificate (or
 * the lack of one), or the handshake as a whole. */
static bool refusal_alert(gnutls_alert_description_t a)
{
    switch (a) {
    case GNUTLS_A_HANDSHAKE_FAILURE:
    case GNUTLS_A_BAD_CERTIFICATE:
    case GNUTLS_A_UNSUPPORTED_CERTIFICATE:
    case GNUTLS_A_CERTIFICATE_REVOKED:
    case GNUTLS_A_CERTIFICATE_EXPIRED:
    case GNUTLS_A_CERTIFICATE_UNKNOWN:
    case GNUTLS_A_UNKNOWN_CA:
    case GNUTLS_A_ACCESS_DENIED:
    case GNUTLS_A_CERTIFICATE_REQUIRED:
        return true;
    default:
        return false;
    }
}

/* A GnuTLS error as a step's result, with err. */
static int failure(TlsConn *t, int rc, char *err, size_t errlen)
{
    if (rc == GNUTLS_E_REHANDSHAKE) {
        /* Not fatal to GnuTLS, which leaves the answer to us: etcd never
         * renegotiates (Go's TLS servers cannot ask to), so a HelloRequest
         * is not etcd's; the connection is dropped (a call on it is tried on
         * a new one), not read from again until its deadline. */
        snprintf(err, errlen, "TLS: the server asked for a renegotiation (TLS 1.2), which etcd never does");
        return TLSCONN_BROKEN;
    }
    if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED || !gnutls_error_is_fatal(rc))
        return TLSCONN_AGAIN; /* a warning alert, or nothing yet: the step again */
    if (rc == GNUTLS_E_MEMORY_ERROR) {
        snprintf(err, errlen, "out of memory");
        return TLSCONN_NOMEM;
    }
    if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
        gnutls_datum_t text = {NULL, 0};
        unsigned status = gnutls_session_get_verify_cert_status(t->session);
        int printed = gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0);
        const char *why = printed == 0 && text.data ? (const char *)text.data : gnutls_strerror(rc);
        int len = (int)strlen(why);
        while (len > 0 && (why[len - 1] == ' ' || why[len - 1] == '.'))
            len--;
        snprintf(err, errlen, "TLS: etcd's certificate is refused: %.*s (is it signed by a CA of --cacert, for the "
                              "host named in --store?)",
                 len, why);
        gnutls_free(text.data);
        return TLSCONN_REFUSED;
    }
    if (rc == GNUTLS_E_FATAL_ALERT_RECEIVED) {
        gnutls_alert_description_t a = gnutls_alert_get(t->session);
        const char *name = gnutls_alert_get_name(a);
        snprintf(err, errlen, "TLS alert from etcd: %s", name ? name : "unknown");
        return refusal_alert(a) ? TLSCONN_REFUSED : TLSCONN_BROKEN;
    }
    if (rc == GNUTLS_E_PREMATURE_TERMINATION || rc == GNUTLS_E_PULL_ERROR || rc == GNUTLS_E_PUSH_ERROR) {
        /* A refusal of our certificate after the handshake (TLS 1.3) may
         * come as this: a reset can drop the alert sent before it. */
        snprintf(err, errlen, "TLS: the connection was closed (%s)", gnutls_strerror(rc));
        return TLSCONN_BROKEN;
    }
    snprintf(err, errlen, "TLS: %s", gnutls_strerror(rc));
    return rc == GNUTLS_E_NO_APPLICATION_PROTOCOL ? TLSCONN_REFUSED : TLSCONN_BROKEN;
}

int tlsconn_handshake(TlsConn *t, char *err, size_t errlen)
{
    int rc = gnutls_handshake(t->session);
    if (rc < 0)
        return failure(t, rc, err, errlen);
    gnutls_datum_t proto = {NULL, 0};
    if (gnutls_alpn_get_selected_protocol(t->session, &proto) != 0 || proto.size != 2 ||
        memcmp(proto.data, "h2", 2)) {
        snprintf(err, errlen, "TLS: the server did not agree to HTTP/2 (ALPN h2): is this etcd's client URL?");
        return TLSCONN_REFUSED;
    }
    return 1;
}

ssize_t tlsconn_send(TlsConn *t, const void *data, size_t len, char *err, size_t errlen)
{
    ssize_t n = gnutls_record_send(t->session, data, len);
    return n >= 0 ? n : failure(t, (int)n, err, errlen);
}

ssize_t tlsconn_recv(TlsConn *t, void *buf, size_t len, char *err, size_t errlen)
{
    ssize_t n = gnutls_record_recv(t->session, buf, len);
    return n >= 0 ? n : failure(t, (int)n, err, errlen);
}
