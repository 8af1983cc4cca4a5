/* s3mpu — multipart uploads begun through the guard; see s3mpu.h. */
#include "guard/s3mpu.h"

#include <stdlib.h>
#include <string.h>

#include "core/smap.h"

typedef struct Upload {
    uint64_t token;
    char *object; /* owned */
    char *lock;   /* owned */
    char id[];    /* the map's key */
} Upload;

struct S3Uploads {
    Smap *by_id;
};

static void upload_free(void *v)
{
    Upload *up = v;
    if (!up)
        return;
    free(up->object);
    free(up->lock);
    free(up);
}

S3Uploads *s3mpu_new(void)
{
    S3Uploads *u = calloc(1, sizeof *u);
    if (u && !(u->by_id = smap_new())) {
        free(u);
        return NULL;
    }
    return u;
}

void s3mpu_free(S3Uploads *u)
{
    if (!u)
        return;
    smap_free(u->by_id, upload_free);
    free(u);
}

bool s3mpu_add(S3Uploads *u, const char *id, const char *object, const char *lock, uint64_t token)
{
    size_t n = strlen(id);
    if (smap_len(u->by_id) >= S3MPU_MAX || n > S3MPU_ID_MAX || smap_get(u->by_id, id))
        return false;
    Upload *up = calloc(1, sizeof *up + n + 1);
    if (!up)
        return false;
    memcpy(up->id, id, n + 1);
    up->token = token;
    up->object = strdup(object);
    up->lock = strdup(lock);
    if (!up->object || !up->lock || !smap_insert(u->by_id, up->id, up)) {
        upload_free(up);
        return false;
    }
    return true;
}

uint64_t s3mpu_token(const S3Uploads *u, const char *id, const char *object)
{
    const Upload *up = smap_get(u->by_id, id);
    return up && !strcmp(up->object, object) ? up->token : 0;
}

bool s3mpu_elsewhere(const S3Uploads *u, const char *id, const char *object)
{
    const Upload *up = smap_get(u->by_id, id);
    return up && strcmp(up->object, object) != 0;
}

void s3mpu_remove(S3Uploads *u, const char *id, const char *object)
{
    Upload *up = smap_get(u->by_id, id);
    if (up && !strcmp(up->object, object)) {
        smap_remove(u->by_id, id);
        upload_free(up);
    }
}

void s3mpu_prune(S3Uploads *u, bool (*still)(const char *lock, uint64_t token, void *ud), void *ud)
{
    const SmapNode *n = smap_first_after(u->by_id, NULL);
    while (n) {
        Upload *up = smap_value(n);
        n = smap_next(n);
        if (!still(up->lock, up->token, ud)) {
            smap_remove(u->by_id, up->id);
            upload_free(up);
        }
    }
}

size_t s3mpu_count(const S3Uploads *u) { return smap_len(u->by_id); }

size_t s3mpu_count_lock(const S3Uploads *u, const char *lock)
{
    size_t n = 0;
    for (const SmapNode *x = smap_first_after(u->by_id, NULL); x; x = smap_next(x))
        n += !strcmp(((const Upload *)smap_value(x))->lock, lock);
    return n;
}
