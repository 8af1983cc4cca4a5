/*
 * s3mpu — the multipart uploads begun through the guard: which object and
 * which token each upload id belongs to. CreateMultipartUpload records it;
 * UploadPart and CompleteMultipartUpload must come with that token (a
 * holder cannot finish an upload a stale holder began, nor a stale holder
 * one it began while it held the lock, since its token no longer holds the
 * lock); Complete and Abort forget it.
 *
 * In memory only: after a restart the guard knows no upload, and a Complete
 * of one begun before is refused (the client begins again). At most
 * S3MPU_MAX uploads at once, and S3MPU_LOCK_MAX of one lock (so that one
 * lease cannot take every upload the guard can keep: a Create of another
 * lock still goes); when either is reached, the uploads whose token no
 * longer holds its lock are forgotten first, and a Create gets 503 SlowDown
 * if none is. An upload is forgotten only as one of its own object: an
 * Abort naming another object's upload id changes nothing here. All of it
 * on the loop thread.
 */
#ifndef LEASEGATE_S3MPU_H
#define LEASEGATE_S3MPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define S3MPU_MAX 4096
#define S3MPU_LOCK_MAX 64
#define S3MPU_ID_MAX 1024

typedef struct S3Uploads S3Uploads;

S3Uploads *s3mpu_new(void); /* NULL when out of memory */
void s3mpu_free(S3Uploads *u);
/* Records upload `id` of `object` (the route's prefix and the key: one
 * string) for `token` under `lock`. False when full or out of memory. */
bool s3mpu_add(S3Uploads *u, const char *id, const char *object, const char *lock, uint64_t token);
/* The token upload `id` was begun with, when it is an upload of `object`;
 * 0 when unknown. */
uint64_t s3mpu_token(const S3Uploads *u, const char *id, const char *object);
/* Is `id` known as an upload of another object than `object`? */
bool s3mpu_elsewhere(const S3Uploads *u, const char *id, const char *object);
/* Forgets upload `id` when it is one of `object`. */
void s3mpu_remove(S3Uploads *u, const char *id, const char *object);
/* Forgets the uploads for which still(lock, token, ud) is false. */
void s3mpu_prune(S3Uploads *u, bool (*still)(const char *lock, uint64_t token, void *ud), void *ud);
size_t s3mpu_count(const S3Uploads *u);
/* The uploads of one lock. */
size_t s3mpu_count_lock(const S3Uploads *u, const char *lock);

#endif
