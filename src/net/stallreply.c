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

const char *stallreply_message(const Server *s)
{
    return !strcmp(alarm_of(s), "CORRUPT")
               ? "etcd refuses writes: its CORRUPT alarm stands (its members' data differ); this gateway answers "
                 "reads of what is committed and takes no change until an operator resolves it and disarms the "
                 "alarm: retry later"
               : "etcd refuses writes: its NOSPACE alarm stands (its database reached --quota-backend-bytes); this "
                 "gateway answers reads of what is committed and takes no change until an operator frees space "
                 "(compact, defragment) and disarms the alarm (docs/high-availability.md#compaction-and-quota): "
                 "retry later";
}

json_t *stallreply_fields_new(const Server *s)
{
    return json_pack("{s:s, s:s}", "alarm", alarm_of(s), "etcd", s->stall_why);
}

char *stallreply_body(const Server *s, size_t *len)
{
    json_t *body = stallreply_fields_new(s);
    if (body && (json_object_set_new(body, "error", json_string(error_code(ERR_OVERLOADED))) ||
                 json_object_set_new(body, "message", json_string(stallreply_message(s)))))
        json_decref(body), body = NULL;
    char *text = body ? rawjson_dumps(body, NULL) : NULL;
    json_decref(body);
    if (text)
        *len = strlen(text);
    return text;
}
