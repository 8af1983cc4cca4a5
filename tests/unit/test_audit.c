/* audit: the ring keeps the newest rows with their strings intact, short ones
 * in small slots and long ones in large ones, across wrapping. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/audit.h"

typedef struct Seen {
    int n;
    uint64_t seqs[16];
    char locks[16][300];
    char owners[16][200];
} Seen;

static void collect(void *ud, const AuditRow *r)
{
    Seen *s = ud;
    if (s->n < 16) {
        s->seqs[s->n] = r->seq;
        snprintf(s->locks[s->n], sizeof s->locks[0], "%s", r->lock);
        snprintf(s->owners[s->n], sizeof s->owners[0], "%s%s%s", r->owner, r->key, r->peer);
        s->n++;
    }
}

/* Row i: a short lock name, or (every third) one of 256 characters with an
 * owner, key and peer that do not fit a small slot. */
static void name_of(int i, char *lock, size_t len)
{
    if (i % 3 == 0) {
        memset(lock, 'a' + i % 26, 256);
        lock[256] = '\0';
    } else {
        snprintf(lock, len, "l/%d", i);
    }
}

int main(void)
{
    Audit *a = audit_new(4);
    CHECK(a != NULL);
    char lock[300], owner[200], want[400];
    for (int i = 1; i <= 11; i++) {
        name_of(i, lock, sizeof lock);
        snprintf(owner, sizeof owner, "owner-%d%s", i, i % 3 == 0 ? "-with-a-long-label-that-goes-on" : "");
        AuditRow r = {.at_ms = 1000 + i, .kind = AUDIT_GRANTED, .lock = lock, .owner = owner, .token = (uint64_t)i,
                      .key = i % 3 == 0 ? "a-key-name" : "", .peer = i % 3 == 0 ? "127.0.0.1:65535" : ""};
        CHECK(audit_add(a, &r) == (uint64_t)i);
    }
    Seen seen = {0};
    CHECK(!audit_list(a, NULL, false, 0, 100, collect, &seen, NULL));
    CHECK(seen.n == 4);
    for (int k = 0; k < seen.n; k++) {
        int i = 8 + k;
        CHECK(seen.seqs[k] == (uint64_t)i);
        name_of(i, lock, sizeof lock);
        CHECK(!strcmp(seen.locks[k], lock));
        snprintf(want, sizeof want, "owner-%d%s%s%s", i, i % 3 == 0 ? "-with-a-long-label-that-goes-on" : "",
                 i % 3 == 0 ? "a-key-name" : "", i % 3 == 0 ? "127.0.0.1:65535" : "");
        CHECK(!strcmp(seen.owners[k], want));
    }
    CHECK(audit_oldest(a) == 8 && audit_latest(a) == 11);
    /* A lock name past the contract's 256 is cut, never overflows its slot. */
    char huge[1000];
    memset(huge, 'z', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    AuditRow r = {.at_ms = 1, .kind = AUDIT_RELEASED, .lock = huge, .owner = huge, .token = 1, .key = huge, .peer = huge,
                  .reason = huge};
    CHECK(audit_add(a, &r) == 12);
    seen.n = 0;
    audit_list(a, NULL, false, 11, 100, collect, &seen, NULL);
    CHECK(seen.n == 1 && strlen(seen.locks[0]) == 256);
    audit_free(a);
    return check_report("audit");
}
