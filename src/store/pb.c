/* pb — the protobuf wire format; see pb.h. */
#include "store/pb.h"

#include <stdlib.h>
#include <string.h>

void pb_free(PbBuf *b)
{
    free(b->data);
    *b = (PbBuf){0};
}

void pb_raw(PbBuf *b, const void *data, size_t len)
{
    if (b->nomem)
        return;
    if (len > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < len) {
            if (cap > SIZE_MAX / 2) {
                b->nomem = true;
                return;
            }
            cap *= 2;
        }
        unsigned char *p = realloc(b->data, cap);
        if (!p) {
            b->nomem = true;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
}

static void raw_varint(PbBuf *b, uint64_t v)
{
    unsigned char out[10];
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    pb_raw(b, out, n);
}

void pb_varint(PbBuf *b, uint32_t field, uint64_t value)
{
    raw_varint(b, (uint64_t)field << 3);
    raw_varint(b, value);
}

void pb_bytes(PbBuf *b, uint32_t field, const void *data, size_t len)
{
    raw_varint(b, (uint64_t)field << 3 | 2);
    raw_varint(b, len);
    pb_raw(b, data, len);
}

void pb_message(PbBuf *b, uint32_t field, const PbBuf *message)
{
    if (message->nomem)
        b->nomem = true;
    else
        pb_bytes(b, field, message->data, message->len);
}

PbReader pb_reader(const void *data, size_t len)
{
    const unsigned char *p = data;
    return (PbReader){p, p + len};
}

static bool read_varint(PbReader *r, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70 && r->p < r->end; shift += 7) {
        unsigned char byte = *r->p++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false; /* cut short, or more than 10 bytes */
}

static bool read_fixed(PbReader *r, size_t n, uint64_t *out)
{
    if ((size_t)(r->end - r->p) < n)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i); /* little-endian on the wire */
    r->p += n;
    *out = v;
    return true;
}

int pb_next(PbReader *r, PbField *f)
{
    if (r->p == r->end)
        return 0;
    uint64_t key;
    if (!read_varint(r, &key) || key >> 3 == 0 || key >> 3 > UINT32_MAX)
        return -1;
    *f = (PbField){.number = (uint32_t)(key >> 3), .wire = (int)(key & 7)};
    switch (f->wire) {
    case 0:
        return read_varint(r, &f->value) ? 1 : -1;
    case 1:
        return read_fixed(r, 8, &f->value) ? 1 : -1;
    case 5:
        return read_fixed(r, 4, &f->value) ? 1 : -1;
    case 2: {
        uint64_t len;
        if (!read_varint(r, &len) || len > (uint64_t)(r->end - r->p))
            return -1;
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        return 1;
    }
    default:
        return -1; /* groups (3, 4) are not written by protobuf 3; 6 and 7 do not exist */
    }
}
