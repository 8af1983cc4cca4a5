/* awscred — S3 credentials; see awscred.h. */
#include "guard/awscred.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A value is printable ASCII without spaces: anything else would end up in a
 * header line. */
static bool plain(const char *v)
{
    if (!*v)
        return false;
    for (const char *p = v; *p; p++)
        if (*p <= ' ' || *p > '~')
            return false;
    return true;
}

static bool set(char *dst, size_t cap, const char *v, size_t n, const char *what, char *err, size_t errlen)
{
    if (n >= cap) {
        snprintf(err, errlen, "%s is longer than %zu bytes", what, cap - 1);
        return false;
    }
    memcpy(dst, v, n);
    dst[n] = '\0';
    if (!plain(dst)) {
        snprintf(err, errlen, "%s is empty or holds spaces or control characters", what);
        return false;
    }
    return true;
}

bool awscred_from_env(const char *key, const char *secret, const char *token, AwsCreds *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!key || !secret) {
        snprintf(err, errlen, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set (or use --s3-credentials)");
        return false;
    }
    return set(out->access_key, sizeof out->access_key, key, strlen(key), "AWS_ACCESS_KEY_ID", err, errlen) &&
           set(out->secret_key, sizeof out->secret_key, secret, strlen(secret), "AWS_SECRET_ACCESS_KEY", err,
               errlen) &&
           (!token || !*token ||
            set(out->session_token, sizeof out->session_token, token, strlen(token), "AWS_SESSION_TOKEN", err,
                errlen));
}

/* [start, end) without surrounding blanks. */
static void trim(const char **start, const char **end)
{
    while (*start < *end && (**start == ' ' || **start == '\t'))
        (*start)++;
    while (*end > *start && ((*end)[-1] == ' ' || (*end)[-1] == '\t' || (*end)[-1] == '\r'))
        (*end)--;
}

bool awscred_parse(const char *text, const char *profile, AwsCreds *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    bool in_profile = false, seen_profile = false;
    unsigned lineno = 0;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        const char *end = eol ? eol : line + strlen(line);
        const char *next = eol ? eol + 1 : end;
        lineno++;
        const char *s = line, *e = end;
        trim(&s, &e);
        line = next;
        if (s == e || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            if (e[-1] != ']') {
                snprintf(err, errlen, "line %u: a section name must end with ']'", lineno);
                return false;
            }
            const char *ns = s + 1, *ne = e - 1;
            trim(&ns, &ne);
            in_profile = (size_t)(ne - ns) == strlen(profile) && !strncmp(ns, profile, (size_t)(ne - ns));
            seen_profile |= in_profile;
            continue;
        }
        const char *eq = memchr(s, '=', (size_t)(e - s));
        if (!eq) {
            snprintf(err, errlen, "line %u: not 'name = value'", lineno);
            return false;
        }
        if (!in_profile)
            continue;
        const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
        trim(&ks, &ke);
        trim(&vs, &ve);
        size_t kn = (size_t)(ke - ks), vn = (size_t)(ve - vs);
        char what[64];
        snprintf(what, sizeof what, "line %u's value", lineno);
        bool ok = true;
        if (kn == 17 && !strncmp(ks, "aws_access_key_id", kn))
            ok = set(out->access_key, sizeof out->access_key, vs, vn, what, err, errlen);
        else if (kn == 21 && !strncmp(ks, "aws_secret_access_key", kn))
            ok = set(out->secret_key, sizeof out->secret_key, vs, vn, what, err, errlen);
        else if (kn == 17 && !strncmp(ks, "aws_session_token", kn))
            ok = set(out->session_token, sizeof out->session_token, vs, vn, what, err, errlen);
        if (!ok)
            return false;
    }
    if (!seen_profile) {
        snprintf(err, errlen, "no [%s] section", profile);
        return false;
    }
    if (!out->access_key[0] || !out->secret_key[0]) {
        snprintf(err, errlen, "[%s] lacks aws_access_key_id or aws_secret_access_key", profile);
        return false;
    }
    return true;
}

bool awscred_load_file(const char *path, const char *profile, AwsCreds *out, char *err, size_t errlen, char *warn,
                       size_t warnlen)
{
    if (warnlen)
        warn[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return false;
    }
    /* Whoever may write the file chooses whose bucket the guard writes to;
     * whoever may read it holds the gateway's keys. */
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        fclose(f);
        return false;
    }
    if (st.st_mode & 022) {
        snprintf(err, errlen,
                 "%s: refused: it is writable by %s (mode %04o), so they could swap in credentials of their own; "
                 "chmod go-w %s",
                 path, (st.st_mode & 022) == 022 ? "its group and others" : st.st_mode & 020 ? "its group" : "others",
                 (unsigned)(st.st_mode & 07777), path);
        fclose(f);
        return false;
    }
    if ((st.st_mode & 004) && warnlen)
        snprintf(warn, warnlen,
                 "%s is readable by every user of this machine (mode %04o): anyone here can sign as the gateway; "
                 "chmod o-r %s (root:leasegate 0640, or systemd's LoadCredential=)",
                 path, (unsigned)(st.st_mode & 07777), path);
    enum { MAX = 64 * 1024 };
    char *text = malloc(MAX + 1);
    size_t n = text ? fread(text, 1, MAX + 1, f) : 0;
    bool read_error = ferror(f);
    fclose(f);
    if (!text || read_error || n > MAX) {
        snprintf(err, errlen, "%s: %s", path, !text ? "out of memory" : read_error ? "read error" : "larger than 64 KiB");
        free(text);
        return false;
    }
    text[n] = '\0';
    char why[256];
    bool ok = awscred_parse(text, profile, out, why, sizeof why);
    explicit_bzero(text, n);
    free(text);
    if (!ok)
        snprintf(err, errlen, "%s: %s", path, why);
    return ok;
}
