/* stallreply — the 503 of a gateway whose store stalls; see stallreply.h. */
#include "net/stallreply.h"

#include <string.h>

#include "net/errors.h"
#include "net/rawjson.h"
#include "store/etcd.h"

/* NOSPACE unless etcd said CORRUPT: a stall comes from one of the two. */
static const char *alarm_of(const Server *s)
{
    const char *alarm = etcd_alarm_name(s->stall_why);
    return alarm ? alarm : "NOSPACE";
}

/* Why etcd refuses writes, and what still works. */
#define CORRUPT_WORDS                                                                                              \
    "etcd refuses writes: its CORRUPT alarm stands (its members' data differ); this gateway answers reads of "   \
    "what is committed and takes no change until an operator resolves it and disarms the alarm"
#define NOSPACE_WORDS                                                                                              \
    "etcd refuses writes: its NOSPACE alarm stands (its database reached --quota-backend-bytes); this gateway "  \
    "answers reads of what is committed and takes no change until an operator frees space (compact, "            \
    "defragment) and disarms the alarm (docs/high-availability.md#compaction-and-quota)"
/* What the client does: try again later, or, for a change already made in
 * the batch etcd refused ("queued"), nothing unless this gateway stops: the
 * batch lives in its memory until etcd takes it, so a gateway that stops or
 * loses its leadership first never commits it (nor answered it as done). */
#define RETRY_WORDS ": retry later"
#define QUEUED_WORDS                                                                                               \
    "; this change was made before etcd refused its batch, and is committed, in order, once etcd takes writes "   \
    "again, if this gateway still leads then (if it stops first, the change is not made): a retry is safe "       \
    "(release, renew and fence again say what is; a value write needs its request_id)"

static const char *message(const Server *s, bool queued)
{
    bool corrupt = !strcmp(alarm_of(s), "CORRUPT");
    if (queued)
        return corrupt ? CORRUPT_WORDS QUEUED_WORDS : NOSPACE_WORDS QUEUED_WORDS;
    return corrupt ? CORRUPT_WORDS RETRY_WORDS : NOSPACE_WORDS RETRY_WORDS;
}

const char *stallreply_message(const Server *s) { return message(s, false); }

json_t *stallreply_fields_new(const Server *s)
{
    return json_pack("{s:s, s:s}", "alarm", alarm_of(s), "etcd", s->stall_why);
}

char *stallreply_body(const Server *s, bool queued, size_t *len)
{
    json_t *body = stallreply_fields_new(s);
    if (body && ((queued && json_object_set_new(body, "queued", json_true())) ||
                 json_object_set_new(body, "error", json_string(error_code(ERR_OVERLOADED))) ||
                 json_object_set_new(body, "message", json_string(message(s, queued)))))
        json_decref(body), body = NULL;
    char *text = body ? rawjson_dumps(body, NULL) : NULL;
    json_decref(body);
    if (text)
        *len = strlen(text);
    return text;
}
