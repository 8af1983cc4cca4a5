/* listing — a page of one kind's names; see listing.h. */
#include "api/listing.h"

#include <stdbool.h>

#include "api/access.h"
#include "api/body.h"
#include "api/query.h"
#include "net/http.h"
#include "store/commit.h"

#define LIST_MAX 1000
#define LIST_DEFAULT 100
/* A listed name shows at most one raw reference: its holder's metadata, or its leader's value. */
_Static_assert(LIST_MAX <= RAWJSON_MAX_REFS, "a page's raw references fit in its RawRefs");

typedef struct Page {
    Request *req;
    LockKind kind;
    ListingView view;
    Now now;
    json_t *items;
    RawRefs refs;
    const char *last;
    bool failed;  /* out of memory: the page would skip a name */
    bool unclean; /* a name a batch not yet durable touches, while etcd refuses writes */
} Page;

static void list_one(void *ud, const Lock *lock)
{
    Page *p = ud;
    const Server *s = p->req->srv;
    json_t *item = p->failed ? NULL : p->view(s->locks, p->kind, lock, &p->now, &p->refs);
    if (!item || json_array_append_new(p->items, item))
        p->failed = true;
    p->unclean |= s->stalled && commit_touches(s->commit, p->kind, lock->name);
    p->last = lock->name;
}

void listing_reply(Request *req, LockKind kind, const char *array, ListingView view)
{
    const char *prefix = http_query(req, "prefix"), *after = http_query(req, "after");
    long long limit;
    if (!prefix)
        prefix = "";
    if ((*prefix && !body_check_name(req, "prefix", prefix)) || !access_check_listing(req, prefix) ||
        (after && !body_check_name(req, "after", after)) ||
        !query_int(req, "limit", 1, LIST_MAX, LIST_DEFAULT, &limit))
        return;
    /* About 8 KiB of raw references (values, metadata), on the loop thread's stack. */
    Page p = {.req = req, .kind = kind, .view = view, .now = clock_now(), .items = json_array()};
    bool more = p.items && locktab_list(req->srv->locks, kind, prefix, after, (size_t)limit, list_one, &p);
    if (!p.items || p.failed) {
        json_decref(p.items);
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry later");
        return;
    }
    if (p.unclean) {
        json_decref(p.items);
        http_reply_stalled(req);
        return;
    }
    http_stall_ok(req);
    /* now_ms: a reader's countdowns to since_ms and expires_at_ms. */
    http_reply_json_raw_new(req, 200,
                            json_pack("{s:o, s:o, s:I}", array, p.items, "next",
                                      more && p.last ? json_string(p.last) : json_null(), "now_ms",
                                      (json_int_t)p.now.wall_ms),
                            &p.refs);
}
