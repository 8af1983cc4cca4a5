/*
 * tls — HTTPS: the server's certificate and key (`serve --tls-cert/--tls-key`),
 * read once at start and handed to libmicrohttpd (built with GnuTLS), and the
 * CA bundle (`--cacert`) that libcurl's outbound https calls trust: the
 * guard's upstreams and a follower's forwards to the leader (etcds:// gets it
 * in its EtcdUrl, etcd.h). Without --cacert those calls trust the system's
 * bundle; verification is never turned off.
 *
 * Which protocol versions and cipher suites a client may use: TLS 1.3, and
 * TLS 1.2 with forward-secret key exchanges (ECDHE) and AEAD ciphers
 * (AES-GCM, ChaCha20-Poly1305) only, never a static-RSA key exchange or a CBC
 * cipher (Mozilla's "intermediate" profile); --tls-ciphers takes a GnuTLS
 * priority string instead, for those who must let older clients in.
 *
 * What TLS changes elsewhere: long-polling waiters are never parked (park.h
 * writes answers to the raw socket, which under TLS carries only records that
 * GnuTLS encrypts), so they stay suspended in libmicrohttpd (http_wait).
 *
 * Both libmicrohttpd daemons (the server's and the standby's) take their TLS
 * set-up from here: tls_mhd_flags and tls_mhd_options (an MHD_OPTION_ARRAY).
 * While one starts, libmicrohttpd's messages are kept (its error log is
 * otherwise off), so that a refusal to start can say why: a key that does not
 * match the certificate, a certificate GnuTLS cannot read.
 */
#ifndef LEASEGATE_TLS_H
#define LEASEGATE_TLS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct MHD_OptionItem;

/* PEM files larger than this are refused: a certificate chain is a few KiB. */
#define TLS_MAX_PEM (1024 * 1024)
/* TLS 1.2 and 1.3 only (older versions are deprecated: RFC 8996); in 1.2
 * only forward-secret AEAD suites. */
#define TLS_DEFAULT_PRIORITIES                                                                              \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+CHACHA20-POLY1305:+AES-256-GCM:+AES-128-GCM:" \
    "-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA"
/* Entries tls_mhd_options may write, MHD_OPTION_END included. */
#define TLS_MHD_OPTIONS 5

typedef struct Tls {
    char *cert_pem;    /* NULL: plain HTTP */
    char *key_pem;     /* wiped when freed */
    size_t key_len;
    const char *cacert; /* borrowed path; NULL: the system's CA bundle */
    const char *priorities; /* borrowed: --tls-ciphers, or TLS_DEFAULT_PRIORITIES */
    _Atomic int log_state; /* 1 while a daemon starts, 2 once start_error holds its first message */
    char start_error[256];
} Tls;

/* Reads the PEM files (both paths, or both NULL for plain HTTP), checks
 * that cacert (may be NULL) is a readable PEM bundle and that ciphers (a
 * GnuTLS priority string, or NULL for TLS_DEFAULT_PRIORITIES) parses. false
 * with the reason in err; t is then cleared. */
bool tls_load(Tls *t, const char *cert_path, const char *key_path, const char *cacert, const char *ciphers, char *err,
              size_t errlen);
void tls_clear(Tls *t);
/* The client certificate and key shown to etcd (--etcd-cert, --etcd-key;
 * libcurl reads the files itself at each connection): readable PEM, the key
 * unencrypted and the certificate's. false with the reason in err. */
bool tls_check_client_pair(const char *cert_path, const char *key_path, char *err, size_t errlen);
bool tls_on(const Tls *t);
/* "https" or "http". */
const char *tls_scheme(const Tls *t);

/* What MHD_start_daemon needs for t: flags to add, and options to pass as
 * MHD_OPTION_ARRAY (just MHD_OPTION_END without TLS). Starts keeping
 * libmicrohttpd's messages until tls_mhd_started. */
unsigned tls_mhd_flags(const Tls *t);
void tls_mhd_options(Tls *t, struct MHD_OptionItem *opts /* [TLS_MHD_OPTIONS] */);
/* The daemon has started or failed to: libmicrohttpd's messages go unlogged
 * from now on. Returns its first message while starting ("" if none). */
const char *tls_mhd_started(Tls *t);

#endif
