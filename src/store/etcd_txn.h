/*
 * etcd_txn — one etcd transaction (etcdserverpb.TxnRequest) written as
 * protobuf and sent over gRPC (etcd.h), and the part of its answer the store
 * reads. The etcd store's commits go this way: through the JSON gateway a
 * commit of 35 keys cost its member 2.8 ms of CPU, as gRPC 1.1 ms
 * (docs/SCALE-OUT.md, 2026-11-24).
 *
 * A transaction is one PbBuf: its compares and the operations of its two
 * branches are appended in any order (protobuf keeps the order within each
 * repeated field, and etcd applies a branch's operations in that order).
 * Keys and values are NUL-terminated strings here: the store's never hold a
 * NUL.
 */
#ifndef LEASEGATE_ETCD_TXN_H
#define LEASEGATE_ETCD_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/etcd.h"
#include "store/pb.h"

/* The branch an operation belongs to: the field number of TxnRequest's
 * `success` and `failure`. */
typedef enum EtcdBranch { ETCD_SUCCESS = 2, ETCD_FAILURE = 3 } EtcdBranch;

/* Compares, all "equal": the key's create revision, its mod revision (0:
 * the key does not exist), or its value. */
void etcd_txn_compare_create(PbBuf *txn, const char *key, int64_t revision);
void etcd_txn_compare_mod(PbBuf *txn, const char *key, int64_t revision);
void etcd_txn_compare_value(PbBuf *txn, const char *key, const char *value);

void etcd_txn_put(PbBuf *txn, EtcdBranch branch, const char *key, const char *value);
/* Deletes key, or with range_end every key in [key, range_end). */
void etcd_txn_delete(PbBuf *txn, EtcdBranch branch, const char *key, const char *range_end);
/* Reads key (its answer: EtcdTxnAnswer.kv). */
void etcd_txn_range(PbBuf *txn, EtcdBranch branch, const char *key);

/* One key as a range read found it. */
typedef struct EtcdKv {
    bool found;
    int64_t create_revision, mod_revision;
    char *value; /* owned, NUL-terminated (len bytes before it); NULL when not found */
    size_t len;
} EtcdKv;

#define ETCD_TXN_KVS 2

/* What the store reads of an answer: whether the compares held, and the
 * first key of each of the first ETCD_TXN_KVS range reads of the branch
 * that ran (responses in the order of its operations). */
typedef struct EtcdTxnAnswer {
    int64_t revision; /* etcd's revision once the transaction applied (its header's) */
    bool succeeded;
    EtcdKv kv[ETCD_TXN_KVS];
} EtcdTxnAnswer;

/* Reads a TxnResponse: 0, or -1 when it is not one (or out of memory), with
 * *out empty. */
int etcd_txn_answer_read(const void *data, size_t len, EtcdTxnAnswer *out);
void etcd_txn_answer_free(EtcdTxnAnswer *a);

/* Sends txn (etcd_grpc_call: endpoints, retries): 0 with *out its answer
 * (free it with etcd_txn_answer_free), or -1 with the reason in err. */
int etcd_txn(EtcdClient *c, const PbBuf *txn, EtcdTxnAnswer *out, char *err, size_t errlen);

#endif
