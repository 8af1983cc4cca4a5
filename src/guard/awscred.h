/*
 * awscred — the credentials the guard signs its S3 requests with (SigV4):
 * from --s3-credentials FILE (AWS's shared credentials format: INI sections
 * named by profile, keys aws_access_key_id, aws_secret_access_key and
 * optionally aws_session_token; the profile is $AWS_PROFILE, else "default"),
 * or from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN). Pure: the caller reads the file and the environment.
 */
#ifndef LEASEGATE_AWSCRED_H
#define LEASEGATE_AWSCRED_H

#include <stdbool.h>
#include <stddef.h>

#define AWSCRED_FIELD_MAX 2048 /* session tokens run to about a kilobyte */

typedef struct AwsCreds {
    char access_key[128];
    char secret_key[128];
    char session_token[AWSCRED_FIELD_MAX]; /* "" when none */
} AwsCreds;

/* From the text of a shared credentials file, the section `profile`.
 * False with one line in err otherwise (never the secret itself). */
bool awscred_parse(const char *text, const char *profile, AwsCreds *out, char *err, size_t errlen);
/* From the three environment values (token may be NULL). */
bool awscred_from_env(const char *key, const char *secret, const char *token, AwsCreds *out, char *err,
                      size_t errlen);
/* Reads FILE (at most 64 KiB) and parses it. A file its group or others may
 * write is refused (they could swap in credentials of their own); one that
 * others may read loads, with one line in warn ("" otherwise). */
bool awscred_load_file(const char *path, const char *profile, AwsCreds *out, char *err, size_t errlen, char *warn,
                       size_t warnlen);

#endif
