/*
 * formscan — finds a method override in what the guard forwards: a field
 * `_method` (or one named as an override header, X-HTTP-Method-Override,
 * X-HTTP-Method, X-Method-Override; any case) in a query string, in an
 * application/x-www-form-urlencoded body, or in a multipart/form-data body.
 * Frameworks (Rails, Laravel, Symfony, Express's method-override) let such a
 * field turn a POST into the method it names, so a backend behind a route
 * that forwards POST but not DELETE would apply a DELETE the guard never
 * allowed: the guard refuses the request instead, as it refuses the
 * override headers.
 *
 * A body is scanned as it streams past, in pieces of any size: a name split
 * between two pieces is still found. URL-encoded names are decoded first
 * (`%5Fmethod` is `_method`); in a multipart body a part named `_method`
 * (`name="_method"`, quoted or not) is found wherever it appears, which may
 * refuse a file that merely contains those bytes: the guard errs on the
 * side of refusing. No I/O; the caller's storage.
 */
#ifndef LEASEGATE_FORMSCAN_H
#define LEASEGATE_FORMSCAN_H

#include <stdbool.h>
#include <stddef.h>

typedef enum FormKind { FORM_NONE, FORM_URLENCODED, FORM_MULTIPART } FormKind;

#define FORMSCAN_NAME_MAX 32 /* longer names are no override's */
#define FORMSCAN_TAIL 24     /* bytes a multipart marker may span */

typedef struct FormScan {
    FormKind kind;
    bool found;
    /* urlencoded: the name being read (decoded), until '=' or '&' */
    bool in_value;
    bool too_long;
    unsigned char pct; /* 0, or how many hex digits of a %XX were read (1, 2) */
    unsigned char hex;
    size_t len;
    char name[FORMSCAN_NAME_MAX];
    /* multipart: the last bytes seen, lower-cased */
    size_t ntail;
    char tail[FORMSCAN_TAIL];
} FormScan;

/* What a body of this Content-Type (NULL: none) is scanned as. */
FormKind formscan_kind(const char *content_type);
void formscan_init(FormScan *f, FormKind kind);
/* The next piece of the query or body. */
void formscan_feed(FormScan *f, const char *data, size_t len);
/* The query or body is over (a last name without '=' counts). True when an
 * override was found anywhere in it. */
bool formscan_finish(FormScan *f);
/* True once an override has been found (before the end). */
static inline bool formscan_found(const FormScan *f) { return f->found; }

#endif
