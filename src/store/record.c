/* record — the durable records; see record.h. */
#include "store/record.h"

#include <string.h>

const char *record_kind_name(StoreRecordKind kind)
{
    static const char *const NAMES[REC_KINDS] = {
#define RECORD_NAME(K, member, type) [REC_##K] = #member,
        STORE_RECORD_KINDS(RECORD_NAME)
#undef RECORD_NAME
    };
    return kind < REC_KINDS ? NAMES[kind] : "?";
}

/* A copy of s in a (NULL stays NULL); *ok turns false when out of memory. */
static char *dup(Arena *a, const char *s, bool *ok)
{
    char *copy = s ? arena_strdup(a, s) : NULL;
    if (s && !copy)
        *ok = false;
    return copy;
}

static void copy_holder(Arena *a, Holder *h, bool *ok)
{
    h->owner = dup(a, h->owner, ok);
    h->metadata = dup(a, h->metadata, ok);
    h->request_id = dup(a, h->request_id, ok);
    h->key = dup(a, h->key, ok);
    h->value = dup(a, h->value, ok);
}

bool record_copy(Arena *a, StoreRecord *to, const StoreRecord *from)
{
    bool ok = true;
    *to = *from;
    switch ((StoreRecordKind)from->kind) {
    case REC_LOCK:
        to->lock.name = dup(a, from->lock.name, &ok);
        return ok;
    case REC_HOLDER:
        to->holder.name = dup(a, from->holder.name, &ok);
        if (!to->removal)
            copy_holder(a, &to->holder.holder, &ok);
        return ok;
    case REC_VALUE:
        to->value.name = dup(a, from->value.name, &ok);
        to->value.text = dup(a, from->value.text, &ok);
        to->value.key = dup(a, from->value.key, &ok);
        to->value.writes = dup(a, from->value.writes, &ok);
        return ok;
    case REC_FENCE:
        to->fence.name = dup(a, from->fence.name, &ok);
        return ok;
    case REC_GUARD_MARK:
        to->guard_mark.name = dup(a, from->guard_mark.name, &ok);
        return ok;
    case REC_FLOOR:
        return ok;
    case REC_ENDED: {
        uint8_t *lease = arena_alloc(a, LEASE_ID_BYTES);
        if (lease)
            memcpy(lease, from->ended.lease, LEASE_ID_BYTES);
        to->ended.lease = lease;
        to->ended.lock = dup(a, from->ended.lock, &ok);
        return ok && lease;
    }
    case REC_REVOKED:
        to->revoked.lock = dup(a, from->revoked.lock, &ok);
        return ok;
    case REC_AUDIT:
        to->audit.value = NULL; /* an event's only, never stored */
        to->audit.lock = dup(a, from->audit.lock, &ok);
        to->audit.owner = dup(a, from->audit.owner, &ok);
        to->audit.key = dup(a, from->audit.key, &ok);
        to->audit.peer = dup(a, from->audit.peer, &ok);
        to->audit.reason = dup(a, from->audit.reason ? from->audit.reason : "", &ok); /* "": none */
        return ok;
    case REC_KINDS:
        break;
    }
    return false;
}
