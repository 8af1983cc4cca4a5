/*
 * fuzz_etcdtxn — the protobuf reader (src/store/pb.h) and the reading
 * of an etcd transaction's answer (src/store/etcd_txn.h) on arbitrary
 * bytes, as a member (or anything at its address) could send them:
 *
 *  - pb_next ends (every field moves the reader forward), never hands out a
 *    field outside the input (ASan sees any read past it: the input is an
 *    exact-size copy), and agrees with a reference walk written from the
 *    protobuf encoding rules;
 *  - etcd_txn_answer_read returns 0 or -1; on -1 the answer is empty; on 0
 *    every key found has a NUL-terminated value of its len bytes, and a key
 *    not found has none.
 */
#include <stdbool.h>

#include "fuzz.h"
#include "store/etcd_txn.h"
#include "store/pb.h"

#define CHECK(cond, ...) FUZZ_CHECK(cond, __VA_ARGS__)

/* The reference: 1 field, 0 end, -1 malformed; *at moves past the field. */
static int ref_next(const uint8_t *d, size_t n, size_t *at, uint64_t *number, int *wire, size_t *len)
{
    if (*at == n)
        return 0;
    uint64_t key = 0;
    size_t i = *at, k = 0;
    for (;; k++) {
        if (i >= n || k == 10)
            return -1;
        key |= (uint64_t)(d[i] & 0x7f) << (7 * k);
        if (!(d[i++] & 0x80))
            break;
    }
    *number = key >> 3;
    *wire = (int)(key & 7);
    if (*number == 0 || *number > UINT32_MAX)
        return -1;
    *len = 0;
    if (*wire == 0) {
        for (k = 0;; k++) {
            if (i >= n || k == 10)
                return -1;
            if (!(d[i++] & 0x80))
                break;
        }
    } else if (*wire == 1 || *wire == 5) {
        size_t size = *wire == 1 ? 8 : 4;
        if (n - i < size)
            return -1;
        i += size;
    } else if (*wire == 2) {
        uint64_t l = 0;
        for (k = 0;; k++) {
            if (i >= n || k == 10)
                return -1;
            l |= (uint64_t)(d[i] & 0x7f) << (7 * k);
            if (!(d[i++] & 0x80))
                break;
        }
        if (l > n - i)
            return -1;
        *len = (size_t)l;
        i += *len;
    } else {
        return -1;
    }
    *at = i;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    PbReader r = pb_reader(copy, size);
    size_t at = 0;
    for (;;) {
        PbField f;
        const unsigned char *before = r.p;
        int rc = pb_next(&r, &f);
        uint64_t number;
        int wire;
        size_t len;
        int ref = ref_next(copy, size, &at, &number, &wire, &len);
        CHECK(rc == ref, "pb_next %d, reference %d at byte %zu", rc, ref, (size_t)(before - copy));
        if (rc != 1)
            break;
        CHECK(r.p > before && r.p == copy + at, "the reader did not move to the field's end");
        CHECK(f.number == number && f.wire == wire, "field %u/%d, reference %llu/%d", f.number, f.wire,
              (unsigned long long)number, wire);
        if (f.wire == 2)
            CHECK(f.len == len && f.data >= copy && f.data + f.len == r.p, "a field's bytes are not where it is");
    }
    EtcdTxnAnswer a;
    int rc = etcd_txn_answer_read(copy, size, &a);
    CHECK(rc == 0 || rc == -1, "etcd_txn_answer_read returned %d", rc);
    for (size_t i = 0; i < ETCD_TXN_KVS; i++) {
        if (rc == -1 || !a.kv[i].found) {
            CHECK(!a.kv[i].found && !a.kv[i].value, "a key not found has a value");
            continue;
        }
        CHECK(a.kv[i].value && a.kv[i].value[a.kv[i].len] == '\0', "a value is not NUL-terminated");
        CHECK(a.kv[i].len <= size, "a value longer than the answer");
    }
    if (rc == -1)
        CHECK(!a.succeeded, "a refused answer says succeeded");
    etcd_txn_answer_free(&a);
    free(copy);
    return 0;
}
