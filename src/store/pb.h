/*
 * pb — the protobuf wire format (varints and length-delimited fields), as
 * much of it as the etcd store's gRPC transactions need (etcd_txn.h).
 *
 * etcd's JSON gateway costs its member more than the transaction itself: a
 * leasegate commit of 35 keys took 2.8 ms of the member's CPU through
 * /v3/kv/txn and 1.1 ms as gRPC (docs/SCALE-OUT.md). No protobuf library is
 * among the project's dependencies, and the few messages involved are flat
 * enough to write and read by hand here.
 *
 * A writer fails sticky: after an allocation failure every later call does
 * nothing and `nomem` stays set, so a caller checks once at the end.
 */
#ifndef LEASEGATE_PB_H
#define LEASEGATE_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct PbBuf {
    unsigned char *data; /* owned; pb_free releases it */
    size_t len, cap;
    bool nomem;
} PbBuf;

void pb_free(PbBuf *b);
/* Raw bytes, not a field (a gRPC frame's prefix). */
void pb_raw(PbBuf *b, const void *data, size_t len);
/* A varint field (wire type 0): int64 values are written as their two's
 * complement, as protobuf does; bools as 0 or 1. */
void pb_varint(PbBuf *b, uint32_t field, uint64_t value);
/* A length-delimited field (wire type 2): bytes, a string, or an embedded
 * message already written into a PbBuf (pb_message). */
void pb_bytes(PbBuf *b, uint32_t field, const void *data, size_t len);
void pb_message(PbBuf *b, uint32_t field, const PbBuf *message);

/* Reading: the fields of one message, in order. */
typedef struct PbReader {
    const unsigned char *p, *end;
} PbReader;

typedef struct PbField {
    uint32_t number;
    int wire;       /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t value; /* wire types 0, 1 and 5 */
    const unsigned char *data; /* wire type 2: len bytes inside the reader's buffer */
    size_t len;
} PbField;

PbReader pb_reader(const void *data, size_t len);
/* 1 with the next field in *f, 0 at the end of the message, -1 when the
 * bytes are not a well-formed message (a cut field, a varint over 10 bytes,
 * field number 0, or a wire type protobuf 3 does not write). */
int pb_next(PbReader *r, PbField *f);

#endif
