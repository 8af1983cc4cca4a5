/* When the leader compacts etcd's history (etcd_compact.h): by time, at the
 * revision of one interval before; by size, at the revision seen when half
 * of the bytes had been written; never twice at one revision, never below
 * what was compacted. */
#include "check.h"
#include "store/etcd_compact.h"

static void test_by_time(void)
{
    EtcdCompact c;
    etcd_compact_init(&c, 1000, 0);
    CHECK(etcd_compact_note(&c, 0, 10, 100) == 0);   /* starts the first interval at revision 10 */
    CHECK(etcd_compact_note(&c, 500, 20, 100) == 0); /* within it */
    int64_t t = etcd_compact_note(&c, 1000, 30, 100);
    CHECK(t == 10); /* one interval on: the revision seen at its start */
    etcd_compact_done(&c, t);
    CHECK(etcd_compact_note(&c, 1500, 40, 100) == 0);
    CHECK(etcd_compact_note(&c, 2100, 50, 100) == 30);
    etcd_compact_done(&c, 30);
    /* An idle interval: the next commit compacts what the last one saw. */
    CHECK(etcd_compact_note(&c, 9000, 51, 100) == 50);
}

static void test_by_size(void)
{
    EtcdCompact c;
    etcd_compact_init(&c, 0, 1000);
    int64_t rev = 1, target = 0;
    uint64_t written_at_target = 0, written = 0;
    for (int i = 0; i < 100 && !target; i++) {
        written += 100;
        target = etcd_compact_note(&c, i, ++rev, 100);
    }
    /* At 1000 bytes: compact at the revision seen at 500. */
    CHECK(written == 1000 && target == 6);
    etcd_compact_done(&c, target);
    /* From then on about every 500 bytes (the half point is the first commit past it), keeping at
     * least the newest 500. */
    int compactions = 0;
    for (int i = 0; i < 100; i++) {
        written += 100;
        ++rev;
        int64_t t = etcd_compact_note(&c, i, rev, 100);
        if (t) {
            CHECK(t > target);
            CHECK(rev - t >= 5); /* 5 commits of 100 bytes: 500 bytes kept */
            written_at_target = written;
            target = t;
            etcd_compact_done(&c, t);
            compactions++;
        }
    }
    CHECK(compactions >= 15 && compactions <= 20);
    CHECK(written - written_at_target < 500);
}

static void test_someone_compacted_further(void)
{
    EtcdCompact c;
    etcd_compact_init(&c, 1000, 0);
    etcd_compact_note(&c, 0, 10, 1);
    etcd_compact_done(&c, 500); /* another tenant compacted at 500: nothing below it is a target */
    CHECK(etcd_compact_note(&c, 1000, 600, 1) == 0);
    CHECK(etcd_compact_note(&c, 2000, 700, 1) == 600);
}

int main(void)
{
    test_by_time();
    test_by_size();
    test_someone_compacted_further();
    return check_report("etcd_compact");
}
