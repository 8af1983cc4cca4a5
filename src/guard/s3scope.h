/*
 * s3scope — what a listing of an S3 route may ask the store, for an API key
 * that reads only names under its prefixes.
 *
 * Leaving the names a key may not read out of the store's answer is not
 * enough: the rest of the answer still depends on them. IsTruncated says
 * whether more names follow, a page's last name becomes its NextMarker, a
 * continuation token may be derived from it (moto's is its MD5), and the
 * client picks prefix, start-after and max-keys: with those, whether a page
 * is truncated tells whether two names lie after any string it chooses, and
 * a search over strings spells out every name of the bucket. So the store is
 * only ever asked about names the key may read:
 *
 *  - a prefix within one of the key's prefixes: every name under it is
 *    readable, the store is asked as the client asked (S3SCOPE_ALL);
 *  - a prefix that none of the key's prefixes starts with, nor lies within:
 *    nothing under it is readable, the guard answers an empty page
 *    (S3SCOPE_NOTHING);
 *  - a shorter prefix (the bucket's root, say) with a delimiter that every
 *    key prefix under it holds after it: the answer is the key prefixes'
 *    common prefixes only ("team-a/" for "team-a/x" and "/"), made by the
 *    guard without asking the store (S3SCOPE_PREFIXES; shown whether or
 *    not the store has names under them);
 *  - a shorter prefix that exactly one key prefix starts with, and a
 *    delimiter of at most one character that it does not hold after the
 *    prefix: the store is asked with that key prefix instead, which gives
 *    the same keys and common prefixes (S3SCOPE_NARROW);
 *  - anything else would take several listings of the store, merged
 *    (S3SCOPE_REFUSED: 403, list under one of the key's prefixes).
 *
 * Pure: no request, no store.
 */
#ifndef LEASEGATE_S3SCOPE_H
#define LEASEGATE_S3SCOPE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum S3ScopeKind {
    S3SCOPE_ALL,
    S3SCOPE_NARROW,
    S3SCOPE_PREFIXES,
    S3SCOPE_NOTHING,
    S3SCOPE_REFUSED,
} S3ScopeKind;

/* The plan for a listing of `prefix` (may be "") with `delimiter` (may be
 * "") by a key with these n prefixes; *which is the key prefix to ask the
 * store with for S3SCOPE_NARROW. */
S3ScopeKind s3scope_plan(char *const *prefixes, size_t n, const char *prefix, const char *delimiter, size_t *which);
/* For S3SCOPE_PREFIXES: the common prefix that key prefix `key_prefix`
 * (which starts with `prefix` and holds `delimiter` after it) rolls up to,
 * into out (outlen bytes); false when it does not start with `prefix`, or
 * does not fit. */
bool s3scope_common(const char *key_prefix, const char *prefix, const char *delimiter, char *out, size_t outlen);

#endif
