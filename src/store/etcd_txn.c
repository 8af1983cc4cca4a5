/* etcd_txn — an etcd transaction as protobuf; see etcd_txn.h.
 *
 * Field numbers are etcd 3.4's rpc.proto and kv.proto:
 *   TxnRequest   compare 1, success 2, failure 3
 *   Compare      result 1 (EQUAL 0), target 2 (CREATE 1, MOD 2, VALUE 3), key 3,
 *                create_revision 5, mod_revision 6, value 7 (one of the last three)
 *   RequestOp    request_range 1, request_put 2, request_delete_range 3
 *   RangeRequest key 1; PutRequest key 1, value 2; DeleteRangeRequest key 1, range_end 2
 *   TxnResponse  header 1, succeeded 2, responses 3; ResponseHeader revision 3
 *   ResponseOp   response_range 1 (response_put 2, response_delete_range 3)
 *   RangeResponse header 1, kvs 2; KeyValue key 1, create_revision 2, mod_revision 3, value 5
 */
#include "store/etcd_txn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TARGET_CREATE = 1, TARGET_MOD = 2, TARGET_VALUE = 3 };
enum { OP_RANGE = 1, OP_PUT = 2, OP_DELETE = 3 };

/* A Compare "key's target equals", its operand written by the caller into cmp. */
static void compare(PbBuf *txn, PbBuf *cmp, int target, const char *key)
{
    PbBuf head = {0};
    pb_varint(&head, 1, 0); /* EQUAL */
    pb_varint(&head, 2, (uint64_t)target);
    pb_bytes(&head, 3, key, strlen(key));
    pb_raw(&head, cmp->data, cmp->len);
    head.nomem |= cmp->nomem;
    pb_message(txn, 1, &head);
    pb_free(&head);
    pb_free(cmp);
}

void etcd_txn_compare_create(PbBuf *txn, const char *key, int64_t revision)
{
    PbBuf cmp = {0};
    pb_varint(&cmp, 5, (uint64_t)revision); /* written even when 0: a oneof's member */
    compare(txn, &cmp, TARGET_CREATE, key);
}

void etcd_txn_compare_mod(PbBuf *txn, const char *key, int64_t revision)
{
    PbBuf cmp = {0};
    pb_varint(&cmp, 6, (uint64_t)revision);
    compare(txn, &cmp, TARGET_MOD, key);
}

void etcd_txn_compare_value(PbBuf *txn, const char *key, const char *value)
{
    PbBuf cmp = {0};
    pb_bytes(&cmp, 7, value, strlen(value));
    compare(txn, &cmp, TARGET_VALUE, key);
}

/* A RequestOp of kind `op` around the request `req` (freed here). */
static void request_op(PbBuf *txn, EtcdBranch branch, int op, PbBuf *req)
{
    PbBuf wrap = {0};
    pb_message(&wrap, (uint32_t)op, req);
    pb_message(txn, (uint32_t)branch, &wrap);
    pb_free(&wrap);
    pb_free(req);
}

void etcd_txn_put(PbBuf *txn, EtcdBranch branch, const char *key, const char *value)
{
    PbBuf req = {0};
    pb_bytes(&req, 1, key, strlen(key));
    pb_bytes(&req, 2, value, strlen(value));
    request_op(txn, branch, OP_PUT, &req);
}

void etcd_txn_delete(PbBuf *txn, EtcdBranch branch, const char *key, const char *range_end)
{
    PbBuf req = {0};
    pb_bytes(&req, 1, key, strlen(key));
    if (range_end)
        pb_bytes(&req, 2, range_end, strlen(range_end));
    request_op(txn, branch, OP_DELETE, &req);
}

void etcd_txn_range(PbBuf *txn, EtcdBranch branch, const char *key)
{
    PbBuf req = {0};
    pb_bytes(&req, 1, key, strlen(key));
    request_op(txn, branch, OP_RANGE, &req);
}

void etcd_txn_answer_free(EtcdTxnAnswer *a)
{
    for (size_t i = 0; i < ETCD_TXN_KVS; i++)
        free(a->kv[i].value);
    *a = (EtcdTxnAnswer){0};
}

/* The first KeyValue of a RangeResponse into *kv: 0, or -1 when malformed
 * or out of memory. A response without kvs leaves *kv not found. */
static int read_range(const PbField *range, EtcdKv *kv)
{
    PbReader r = pb_reader(range->data, range->len);
    PbField f;
    int rc;
    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.number != 2 || f.wire != 2 || kv->found)
            continue;
        PbReader kr = pb_reader(f.data, f.len);
        PbField k;
        const unsigned char *value = NULL;
        size_t len = 0;
        while ((rc = pb_next(&kr, &k)) == 1) {
            if (k.number == 2 && k.wire == 0)
                kv->create_revision = (int64_t)k.value;
            else if (k.number == 3 && k.wire == 0)
                kv->mod_revision = (int64_t)k.value;
            else if (k.number == 5 && k.wire == 2)
                value = k.data, len = k.len;
        }
        if (rc < 0)
            return -1;
        if (!(kv->value = malloc(len + 1)))
            return -1;
        if (len)
            memcpy(kv->value, value, len);
        kv->value[len] = '\0';
        kv->len = len;
        kv->found = true;
    }
    return rc;
}

int etcd_txn_answer_read(const void *data, size_t len, EtcdTxnAnswer *out)
{
    *out = (EtcdTxnAnswer){0};
    PbReader r = pb_reader(data, len);
    PbField f;
    size_t ranges = 0; /* kv counts range reads only: a put's or a delete's response takes no slot */
    int rc;
    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.number == 1 && f.wire == 2) {
            PbReader h = pb_reader(f.data, f.len);
            PbField hf;
            while ((rc = pb_next(&h, &hf)) == 1)
                if (hf.number == 3 && hf.wire == 0)
                    out->revision = (int64_t)hf.value;
            if (rc < 0)
                break;
        } else if (f.number == 2 && f.wire == 0) {
            out->succeeded = f.value != 0;
        } else if (f.number == 3 && f.wire == 2) {
            size_t i = ranges;
            PbReader op = pb_reader(f.data, f.len);
            PbField o;
            while (rc >= 0 && (rc = pb_next(&op, &o)) == 1)
                if (o.number == 1 && o.wire == 2) {
                    ranges = i + 1;
                    if (i < ETCD_TXN_KVS)
                        rc = read_range(&o, &out->kv[i]);
                }
            if (rc < 0)
                break;
        }
    }
    if (rc < 0) {
        etcd_txn_answer_free(out);
        return -1;
    }
    return 0;
}

int etcd_txn(EtcdClient *c, const PbBuf *txn, EtcdTxnAnswer *out, char *err, size_t errlen)
{
    *out = (EtcdTxnAnswer){0};
    PbBuf answer;
    if (etcd_grpc_call(c, "/etcdserverpb.KV/Txn", txn, &answer, err, errlen))
        return -1;
    int rc = etcd_txn_answer_read(answer.data, answer.len, out);
    pb_free(&answer);
    if (rc)
        snprintf(err, errlen, "etcd's answer to a transaction is not a TxnResponse (or out of memory reading it)");
    return rc;
}
