/* observe — what an election's observers are told; see observe.h. */
#include "api/observe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/smap.h"
#include "leasegate/server.h"
#include "net/rawjson.h"

/* An election as its published events have it. */
typedef struct Seen {
    bool leading;
    char *owner;           /* owned; the leader's, while leading */
    char *value;           /* owned; the leader's value (JSON text), or NULL: null */
    uint64_t term;         /* the leader's token, while leading */
    int ended;             /* AuditKind of the last term's end (released, expired, revoked), 0: none seen */
    uint64_t previous_term;
    char name[];           /* the map's key */
} Seen;

struct Observed {
    Smap *seen; /* election name -> Seen */
};

static void seen_free(void *p)
{
    Seen *e = p;
    free(e->owner);
    free(e->value);
    free(e);
}

Observed *observed_new(void)
{
    Observed *o = calloc(1, sizeof *o);
    if (o && !(o->seen = smap_new())) {
        free(o);
        o = NULL;
    }
    return o;
}

void observed_free(Observed *o)
{
    if (!o)
        return;
    smap_free(o->seen, seen_free);
    free(o);
}

static Seen *seen_of(Observed *o, const char *name)
{
    Seen *e = smap_get(o->seen, name);
    if (e)
        return e;
    size_t len = strlen(name);
    if (!(e = calloc(1, sizeof *e + len + 1)))
        return NULL;
    memcpy(e->name, name, len + 1);
    if (!smap_insert(o->seen, e->name, e)) {
        free(e);
        return NULL;
    }
    return e;
}

/* e leads from now on (owner, term, value copied). False when out of memory. */
static bool seen_leads(Seen *e, const char *owner, uint64_t term, const char *value)
{
    char *o = strdup(owner), *v = value ? strdup(value) : NULL;
    if (!o || (value && !v)) {
        free(o);
        free(v);
        return false;
    }
    free(e->owner);
    free(e->value);
    e->leading = true;
    e->owner = o;
    e->value = v;
    e->term = term;
    return true;
}

bool observed_loaded(Server *s, const char *name, const Holder *h)
{
    Seen *e = seen_of(s->observed, name);
    return e && seen_leads(e, h->owner, h->token, h->value);
}

static bool is_end(int kind) { return kind == AUDIT_RELEASED || kind == AUDIT_EXPIRED || kind == AUDIT_REVOKED; }

void observed_published(Server *s, const AuditRow *row)
{
    if (row->object != AUDIT_OF_ELECTION ||
        (row->kind != AUDIT_GRANTED && row->kind != AUDIT_PROCLAIMED && !is_end(row->kind)))
        return;
    Seen *e = seen_of(s->observed, row->lock);
    if (!e)
        return; /* out of memory: a new observer starts from an older state, and gets this event after it */
    if (!is_end(row->kind)) {
        seen_leads(e, row->owner, row->token, row->value);
        return;
    }
    e->leading = false;
    e->ended = row->kind;
    e->previous_term = row->token;
    free(e->owner);
    free(e->value);
    e->owner = e->value = NULL;
}

void observed_forgotten(Server *s, const char *name)
{
    Seen *e = smap_get(s->observed->seen, name);
    if (e) {
        smap_remove(s->observed->seen, name);
        seen_free(e);
    }
}

static const char *end_reason(int kind)
{
    return kind == AUDIT_RELEASED ? "resigned" : kind == AUDIT_EXPIRED ? "expired" : "revoked";
}

/* "event: NAME\ndata: ...\n\n" of a JSON text whose raw parts (a value as
 * sent) may hold line breaks, which are whitespace there: each line becomes
 * a `data:` line of its own (the client joins them with "\n"), a CR a space.
 * Takes over json (NULL: out of memory). */
static char *message_new(const char *event, json_t *json, const RawRefs *refs)
{
    char *text = json ? rawjson_dumps(json, refs) : NULL;
    json_decref(json);
    if (!text)
        return NULL;
    size_t breaks = 0, len = strlen(text);
    for (size_t i = 0; i < len; i++)
        breaks += text[i] == '\n';
    size_t size = strlen("event: ") + strlen(event) + strlen("\ndata: ") + len + breaks * strlen("data: ") + 3;
    char *msg = malloc(size);
    if (msg) {
        char *p = msg + sprintf(msg, "event: %s\ndata: ", event);
        for (size_t i = 0; i < len; i++) {
            if (text[i] == '\n')
                p += sprintf(p, "\ndata: ");
            else
                *p++ = text[i] == '\r' ? ' ' : text[i];
        }
        memcpy(p, "\n\n", 3);
    }
    free(text);
    return msg;
}

static char *leader_message_new(const char *owner, uint64_t term, const char *value)
{
    RawRefs refs = {.n = 0};
    return message_new("leader",
                       json_pack("{s:s, s:I, s:o}", "owner", owner, "term", (json_int_t)term, "value",
                                 value ? rawjson_ref(&refs, value) : json_null()),
                       &refs);
}

static char *vacant_message_new(int ended, uint64_t previous_term)
{
    return message_new("vacant",
                       json_pack("{s:o, s:o}", "reason", ended ? json_string(end_reason(ended)) : json_null(),
                                 "previous_term", ended ? json_integer((json_int_t)previous_term) : json_null()),
                       NULL);
}

char *observed_state_message_new(const Server *s, const char *name)
{
    const Seen *e = smap_get(s->observed->seen, name);
    if (e && e->leading)
        return leader_message_new(e->owner, e->term, e->value);
    return vacant_message_new(e ? e->ended : 0, e ? e->previous_term : 0);
}

bool observed_takes(const AuditRow *r, const char *name)
{
    return r->object == AUDIT_OF_ELECTION && !strcmp(r->lock, name) &&
           (r->kind == AUDIT_GRANTED || r->kind == AUDIT_PROCLAIMED || is_end(r->kind));
}

char *observed_message_new(const AuditRow *r)
{
    return is_end(r->kind) ? vacant_message_new(r->kind, r->token) : leader_message_new(r->owner, r->token, r->value);
}
