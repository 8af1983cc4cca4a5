/* Unit tests of pb (the protobuf wire format) and etcd_txn (a transaction's
 * request bytes and the reading of its answer). What etcd itself makes of
 * them is tested against a real etcd in tests/integration/test_etcd.py. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "store/etcd_txn.h"
#include "store/pb.h"

static bool bytes_are(const PbBuf *b, const char *expect, size_t n)
{
    bool same = !b->nomem && b->len == n && memcmp(b->data, expect, n) == 0;
    if (!same) {
        fprintf(stderr, "  got %zu bytes:", b->len);
        for (size_t i = 0; i < b->len; i++)
            fprintf(stderr, " %02x", b->data[i]);
        fputc('\n', stderr);
    }
    return same;
}

static void test_varints(void)
{
    static const struct {
        uint64_t v;
        const char *wire;
        size_t n;
    } CASES[] = {
        {0, "\x08\x00", 2},
        {1, "\x08\x01", 2},
        {127, "\x08\x7f", 2},
        {128, "\x08\x80\x01", 3},
        {300, "\x08\xac\x02", 3},
        {UINT64_MAX, "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11}, /* also int64 -1 */
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        PbBuf b = {0};
        pb_varint(&b, 1, CASES[i].v);
        CHECK(bytes_are(&b, CASES[i].wire, CASES[i].n));
        PbReader r = pb_reader(b.data, b.len);
        PbField f;
        CHECK(pb_next(&r, &f) == 1 && f.number == 1 && f.wire == 0 && f.value == CASES[i].v);
        CHECK(pb_next(&r, &f) == 0);
        pb_free(&b);
    }
    PbBuf b = {0};
    pb_varint(&b, 100000, 5); /* a field number over 15 takes a longer key */
    PbReader r = pb_reader(b.data, b.len);
    PbField f;
    CHECK(pb_next(&r, &f) == 1 && f.number == 100000 && f.value == 5);
    pb_free(&b);
}

static void test_bytes_and_messages(void)
{
    PbBuf inner = {0}, outer = {0};
    pb_bytes(&inner, 1, "abc", 3);
    CHECK(bytes_are(&inner, "\x0a\x03" "abc", 5));
    pb_message(&outer, 2, &inner);
    CHECK(bytes_are(&outer, "\x12\x05\x0a\x03" "abc", 7));
    PbReader r = pb_reader(outer.data, outer.len);
    PbField f;
    CHECK(pb_next(&r, &f) == 1 && f.number == 2 && f.wire == 2 && f.len == 5);
    PbReader in = pb_reader(f.data, f.len);
    PbField g;
    CHECK(pb_next(&in, &g) == 1 && g.number == 1 && g.len == 3 && !memcmp(g.data, "abc", 3));
    CHECK(pb_next(&in, &g) == 0);
    /* a message whose writer ran out of memory spoils the one it goes into */
    inner.nomem = true;
    pb_message(&outer, 3, &inner);
    CHECK(outer.nomem);
    pb_free(&inner);
    pb_free(&outer);
    /* a long value: its length takes two bytes */
    char big[200];
    memset(big, 'x', sizeof big);
    PbBuf b = {0};
    pb_bytes(&b, 7, big, sizeof big);
    CHECK(!b.nomem && b.len == 3 + sizeof big && b.data[1] == 0xc8 && b.data[2] == 0x01);
    pb_free(&b);
}

static void test_malformed(void)
{
    static const struct {
        const char *bytes;
        size_t n;
    } BAD[] = {
        {"\x08", 1},                                                  /* a varint field without its value */
        {"\x08\x80", 2},                                              /* a varint cut short */
        {"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12},     /* a varint of 11 bytes */
        {"\x0a\x05" "abc", 5},                                        /* a length beyond the end */
        {"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11},         /* a length of 2^64-1 */
        {"\x00\x01", 2},                                              /* field number 0 */
        {"\x0b", 1}, {"\x0c", 1}, {"\x0e", 1}, {"\x0f", 1},           /* wire types 3, 4, 6, 7 */
        {"\x09\x01\x02\x03", 4},                                      /* a fixed64 cut short */
        {"\x0d\x01\x02", 3},                                          /* a fixed32 cut short */
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        PbReader r = pb_reader(BAD[i].bytes, BAD[i].n);
        PbField f;
        int rc;
        while ((rc = pb_next(&r, &f)) == 1)
            ;
        CHECK(rc == -1);
        EtcdTxnAnswer a;
        a.succeeded = true;
        CHECK(etcd_txn_answer_read(BAD[i].bytes, BAD[i].n, &a) == -1 && !a.succeeded && !a.kv[0].found);
    }
    PbReader r = pb_reader("\x09\x01\x02\x03\x04\x05\x06\x07\x08\x15\x01\x02\x03\x04", 14);
    PbField f;
    CHECK(pb_next(&r, &f) == 1 && f.wire == 1 && f.value == 0x0807060504030201ULL);
    CHECK(pb_next(&r, &f) == 1 && f.number == 2 && f.wire == 5 && f.value == 0x04030201);
    CHECK(pb_next(&r, &f) == 0);
}

/* The requests' bytes, field by field (etcd_txn.c lists the numbers). */
static void test_requests(void)
{
    PbBuf t = {0};
    etcd_txn_put(&t, ETCD_SUCCESS, "k", "v");
    /* success(2) { request_put(2) { key(1) "k", value(2) "v" } } */
    CHECK(bytes_are(&t, "\x12\x08\x12\x06\x0a\x01k\x12\x01v", 10));
    pb_free(&t);
    etcd_txn_delete(&t, ETCD_SUCCESS, "a", "b");
    CHECK(bytes_are(&t, "\x12\x08\x1a\x06\x0a\x01" "a\x12\x01" "b", 10));
    pb_free(&t);
    etcd_txn_delete(&t, ETCD_SUCCESS, "a", NULL);
    CHECK(bytes_are(&t, "\x12\x05\x1a\x03\x0a\x01" "a", 7));
    pb_free(&t);
    etcd_txn_range(&t, ETCD_FAILURE, "k");
    CHECK(bytes_are(&t, "\x1a\x05\x0a\x03\x0a\x01k", 7));
    pb_free(&t);
    /* compare(1) { result(1) EQUAL, target(2) CREATE, key(3) "k", create_revision(5) 5 } */
    etcd_txn_compare_create(&t, "k", 5);
    CHECK(bytes_are(&t, "\x0a\x09\x08\x00\x10\x01\x1a\x01k\x28\x05", 11));
    pb_free(&t);
    /* a mod revision of 0 (the key does not exist) is written: a oneof member */
    etcd_txn_compare_mod(&t, "k", 0);
    CHECK(bytes_are(&t, "\x0a\x09\x08\x00\x10\x02\x1a\x01k\x30\x00", 11));
    pb_free(&t);
    etcd_txn_compare_value(&t, "k", "");
    CHECK(bytes_are(&t, "\x0a\x09\x08\x00\x10\x03\x1a\x01k\x3a\x00", 11));
    pb_free(&t);
}

/* A RangeResponse with the given key-values ("" value allowed), as etcd writes it. */
static void range_response(PbBuf *txn_answer, int nkv, int64_t create, int64_t mod, const char *value, size_t len)
{
    PbBuf header = {0}, range = {0}, op = {0};
    pb_varint(&header, 3, 42); /* revision */
    pb_message(&range, 1, &header);
    for (int i = 0; i < nkv; i++) {
        PbBuf kv = {0};
        pb_bytes(&kv, 1, "key", 3);
        pb_varint(&kv, 2, (uint64_t)create + (uint64_t)i);
        pb_varint(&kv, 3, (uint64_t)mod);
        pb_varint(&kv, 4, 1);
        pb_bytes(&kv, 5, value, len);
        pb_message(&range, 2, &kv);
        pb_free(&kv);
    }
    pb_varint(&range, 4, (uint64_t)nkv); /* count */
    pb_message(&op, 1, &range);
    pb_message(txn_answer, 3, &op);
    pb_free(&header);
    pb_free(&range);
    pb_free(&op);
}

static void test_answers(void)
{
    PbBuf b = {0}, header = {0};
    pb_varint(&header, 1, 7);
    pb_varint(&header, 3, 123456789012); /* the revision once applied */
    pb_message(&b, 1, &header);
    pb_varint(&b, 2, 1);
    EtcdTxnAnswer a;
    CHECK(etcd_txn_answer_read(b.data, b.len, &a) == 0 && a.succeeded && !a.kv[0].found && !a.kv[1].found);
    CHECK(a.revision == 123456789012);
    etcd_txn_answer_free(&a);
    pb_free(&b);

    /* failed compares: the leader key found, the mark not (no kvs), a third range ignored */
    pb_message(&b, 1, &header);
    range_response(&b, 2, 17, 19, "mark\0x", 6);
    range_response(&b, 0, 0, 0, "", 0);
    range_response(&b, 1, 1, 1, "z", 1);
    CHECK(etcd_txn_answer_read(b.data, b.len, &a) == 0);
    CHECK(!a.succeeded);
    CHECK(a.kv[0].found && a.kv[0].create_revision == 17 && a.kv[0].mod_revision == 19 && a.kv[0].len == 6 &&
          !memcmp(a.kv[0].value, "mark\0x", 7));
    CHECK(!a.kv[1].found && !a.kv[1].value);
    etcd_txn_answer_free(&a);
    pb_free(&b);

    /* an empty value is found, and NUL-terminated */
    range_response(&b, 1, 3, 4, "", 0);
    range_response(&b, 1, 5, 6, "v", 1);
    CHECK(etcd_txn_answer_read(b.data, b.len, &a) == 0);
    CHECK(a.kv[0].found && a.kv[0].len == 0 && a.kv[0].value && a.kv[0].value[0] == '\0');
    CHECK(a.kv[1].found && a.kv[1].create_revision == 5 && !strcmp(a.kv[1].value, "v"));
    etcd_txn_answer_free(&a);
    /* cut anywhere, the answer is refused or read whole, never read past its end */
    for (size_t cut = 0; cut < b.len; cut++) {
        unsigned char *copy = malloc(cut ? cut : 1);
        if (!copy)
            break;
        memcpy(copy, b.data, cut);
        int rc = etcd_txn_answer_read(copy, cut, &a);
        CHECK(rc == -1 || rc == 0);
        if (rc == -1)
            CHECK(!a.kv[0].found && !a.kv[1].found);
        etcd_txn_answer_free(&a);
        free(copy);
    }
    pb_free(&b);
    /* kv counts range reads only: a put's response before them takes no slot */
    pb_varint(&b, 2, 1);
    PbBuf put = {0}, op = {0};
    pb_message(&put, 1, &header);
    pb_message(&op, 2, &put); /* response_put */
    pb_message(&b, 3, &op);
    range_response(&b, 1, 8, 9, "a", 1);
    range_response(&b, 1, 10, 11, "b", 1);
    CHECK(etcd_txn_answer_read(b.data, b.len, &a) == 0 && a.succeeded);
    CHECK(a.kv[0].found && a.kv[0].create_revision == 8 && !strcmp(a.kv[0].value, "a"));
    CHECK(a.kv[1].found && a.kv[1].create_revision == 10 && !strcmp(a.kv[1].value, "b"));
    etcd_txn_answer_free(&a);
    pb_free(&b);
    pb_free(&put);
    pb_free(&op);
    pb_free(&header);
    /* an empty answer: compares failed, nothing read */
    CHECK(etcd_txn_answer_read("", 0, &a) == 0 && !a.succeeded && !a.kv[0].found);
}

int main(void)
{
    test_varints();
    test_bytes_and_messages();
    test_malformed();
    test_requests();
    test_answers();
    return check_report("etcd_txn");
}
