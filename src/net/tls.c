/* tls — HTTPS set-up; see tls.h. */
#include "net/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* The whole of a regular file of at most max bytes, NUL-terminated, with its
 * length in *len; NULL with the reason in err. */
static char *read_pem(const char *flag, const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: %s", flag, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s %s: %s", flag, path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (uint64_t)st.st_size > max) {
        if (!S_ISREG(st.st_mode) || st.st_size <= 0)
            snprintf(err, errlen, "%s %s: not a PEM file (%s)", flag, path,
                     !S_ISREG(st.st_mode) ? "not a regular file" : "empty");
        else
            snprintf(err, errlen, "%s %s: larger than %zu KiB, too large for a PEM file", flag, path, max / 1024);
        goto fail;
    }
    size_t want = (size_t)st.st_size, got = 0;
    buf = malloc(want + 1);
    if (!buf) {
        snprintf(err, errlen, "%s %s: out of memory", flag, path);
        goto fail;
    }
    while (got < want) {
        ssize_t n = read(fd, buf + got, want - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "%s %s: %s", flag, path, n < 0 ? strerror(errno) : "shorter than its size");
            goto fail;
        }
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *len = got;
    return buf;
fail:
    free(buf);
    close(fd);
    return NULL;
}

static bool has(const char *text, const char *what) { return strstr(text, what) != NULL; }

/* What is wrong with a certificate and key read from their files, said
 * plainly (GnuTLS's own words for a file given in the wrong place or an
 * encrypted key are obscure): "" when they look right. */
static void pem_pair_problem(const char *cert_flag, const char *cert_path, const char *cert_pem, const char *key_flag,
                             const char *key_path, const char *key_pem, char *err, size_t errlen)
{
    err[0] = '\0';
    if (!has(cert_pem, "-----BEGIN CERTIFICATE-----"))
        snprintf(err, errlen, "%s %s: no PEM certificate in it (-----BEGIN CERTIFICATE-----)", cert_flag, cert_path);
    else if (!has(key_pem, "-----BEGIN ") || !has(key_pem, "PRIVATE KEY-----"))
        snprintf(err, errlen, "%s %s: no PEM private key in it (-----BEGIN ... PRIVATE KEY-----)", key_flag, key_path);
    else if (has(key_pem, "ENCRYPTED"))
        snprintf(err, errlen, "%s %s: the key is encrypted; leasegate needs it unencrypted "
                              "(openssl pkey -in KEY -out PLAIN-KEY), readable only by its user", key_flag, key_path);
}

bool tls_check_client_pair(const char *cert_path, const char *key_path, char *err, size_t errlen)
{
    size_t cert_len, key_len;
    char *cert = read_pem("--etcd-cert", cert_path, TLS_MAX_PEM, &cert_len, err, errlen);
    char *key = cert ? read_pem("--etcd-key", key_path, TLS_MAX_PEM, &key_len, err, errlen) : NULL;
    bool ok = false;
    if (cert && key) {
        pem_pair_problem("--etcd-cert", cert_path, cert, "--etcd-key", key_path, key, err, errlen);
        gnutls_certificate_credentials_t cred;
        int rc = err[0] ? 0 : gnutls_certificate_allocate_credentials(&cred);
        if (!err[0] && rc) {
            snprintf(err, errlen, "--etcd-cert: GnuTLS: %s", gnutls_strerror(rc));
        } else if (!err[0]) {
            gnutls_datum_t c = {(unsigned char *)cert, (unsigned)cert_len}, k = {(unsigned char *)key, (unsigned)key_len};
            rc = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
            gnutls_certificate_free_credentials(cred);
            if (rc < 0)
                snprintf(err, errlen, "--etcd-cert %s and --etcd-key %s: %s", cert_path, key_path,
                         rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH ? "the key is not the certificate's"
                                                                  : gnutls_strerror(rc));
            ok = rc >= 0;
        }
    }
    free(cert);
    if (key) {
        memset(key, 0, key_len);
        free(key);
    }
    return ok;
}

/* Does GnuTLS take `priorities`? Else err says where it stops. */
static bool priorities_valid(const char *priorities, char *err, size_t errlen)
{
    gnutls_priority_t p;
    const char *at = NULL;
    int rc = gnutls_priority_init(&p, priorities, &at);
    if (rc == GNUTLS_E_SUCCESS) {
        gnutls_priority_deinit(p);
        return true;
    }
    snprintf(err, errlen, "--tls-ciphers '%.200s': not a GnuTLS priority string (%s, at '%.60s'); see gnutls-cli --list "
                          "--priority STRING",
             priorities, gnutls_strerror(rc), at ? at : "");
    return false;
}

bool tls_load(Tls *t, const char *cert_path, const char *key_path, const char *cacert, const char *ciphers, char *err,
              size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->cacert = cacert;
    t->priorities = ciphers ? ciphers : TLS_DEFAULT_PRIORITIES;
    if (ciphers && !priorities_valid(ciphers, err, errlen))
        return false;
    if (cacert) {
        size_t len;
        char *bundle = read_pem("--cacert", cacert, 16 * TLS_MAX_PEM, &len, err, errlen);
        if (!bundle)
            return false;
        bool ok = has(bundle, "-----BEGIN CERTIFICATE-----");
        free(bundle);
        if (!ok) {
            snprintf(err, errlen, "--cacert %s: no PEM certificate in it (-----BEGIN CERTIFICATE-----)", cacert);
            return false;
        }
    }
    if (!cert_path)
        return true;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, errlen, "--tls-cert: this libmicrohttpd was built without TLS support");
        return false;
    }
    size_t cert_len;
    t->cert_pem = read_pem("--tls-cert", cert_path, TLS_MAX_PEM, &cert_len, err, errlen);
    if (!t->cert_pem)
        return false;
    t->key_pem = read_pem("--tls-key", key_path, TLS_MAX_PEM, &t->key_len, err, errlen);
    if (!t->key_pem) {
        tls_clear(t);
        return false;
    }
    /* libmicrohttpd's own words for these are GnuTLS's. */
    pem_pair_problem("--tls-cert", cert_path, t->cert_pem, "--tls-key", key_path, t->key_pem, err, errlen);
    if (!err[0])
        return true;
    tls_clear(t);
    return false;
}

void tls_clear(Tls *t)
{
    free(t->cert_pem);
    if (t->key_pem)
        explicit_bzero(t->key_pem, t->key_len);
    free(t->key_pem);
    t->cert_pem = t->key_pem = NULL;
    t->key_len = 0;
}

bool tls_on(const Tls *t) { return t && t->cert_pem; }

const char *tls_scheme(const Tls *t) { return tls_on(t) ? "https" : "http"; }

unsigned tls_mhd_flags(const Tls *t) { return tls_on(t) ? MHD_USE_TLS | MHD_USE_ERROR_LOG : 0; }

/* libmicrohttpd's log: only its first message while a daemon starts is kept.
 * Later ones are dropped: they are about clients (a failed handshake, a plain
 * HTTP request on the TLS port), and logging them would let any client fill
 * the log. The standby's threads may call this concurrently: the first to
 * move log_state from 1 to 2 writes start_error, alone. */
static void on_log(void *cls, const char *fmt, va_list ap)
{
    Tls *t = cls;
    int recording = 1;
    if (!atomic_compare_exchange_strong(&t->log_state, &recording, 2))
        return;
    vsnprintf(t->start_error, sizeof t->start_error, fmt, ap);
    size_t n = strlen(t->start_error);
    while (n && (t->start_error[n - 1] == '\n' || t->start_error[n - 1] == '.'))
        t->start_error[--n] = '\0';
}

void tls_mhd_options(Tls *t, struct MHD_OptionItem *opts)
{
    size_t n = 0;
    if (tls_on(t)) {
        t->start_error[0] = '\0';
        atomic_store(&t->log_state, 1);
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_log, t};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, t->key_pem};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, t->cert_pem};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)t->priorities};
    }
    opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

const char *tls_mhd_started(Tls *t)
{
    int state = atomic_exchange(&t->log_state, 0);
    return state == 2 ? t->start_error : "";
}
