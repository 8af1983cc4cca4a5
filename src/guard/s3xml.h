/*
 * s3xml — the XML of S3's answers: a small tree read with expat (the store's
 * listings, multipart answers and errors, which the guard rewrites so that
 * no answer names the store's bucket or key prefix), and the writer of the
 * guard's own answers in S3's format.
 *
 * Limits: a document of at most PROXY_GATHER_MAX bytes (the caller's), at
 * most S3XML_MAX_DEPTH levels; expat refuses entity declarations' expansion
 * beyond its own limits (billion laughs), and a DOCTYPE is refused outright.
 */
#ifndef LEASEGATE_S3XML_H
#define LEASEGATE_S3XML_H

#include <stdbool.h>
#include <stddef.h>

#define S3XML_MAX_DEPTH 16

typedef struct S3Xml S3Xml;
struct S3Xml {
    char *name;   /* owned: the element's name, without namespace */
    char *text;   /* owned: its character data ("" when none) */
    S3Xml *first; /* its children, in order */
    S3Xml *next;  /* its next sibling */
};

/* Parses a document: its root element, owned (s3xml_free), or NULL. */
S3Xml *s3xml_parse(const char *doc, size_t len);
void s3xml_free(S3Xml *x);
/* A new element without children (a document's root), owned; NULL when out of memory. */
S3Xml *s3xml_new(const char *name);
/* The first child named `name`, or NULL; its text, or NULL. */
S3Xml *s3xml_child(const S3Xml *x, const char *name);
const char *s3xml_text(const S3Xml *x, const char *name);
/* Replaces an element's text (a copy). False when out of memory. */
bool s3xml_set_text(S3Xml *x, const char *text);
/* Unlinks and frees child c of x. */
void s3xml_remove(S3Xml *x, S3Xml *c);
/* A new child of x, last (text copied). NULL when out of memory. */
S3Xml *s3xml_add(S3Xml *x, const char *name, const char *text);

/* A growing text; on failure it is marked and stays empty. */
typedef struct S3Out {
    char *s;
    size_t len, cap;
    bool failed;
} S3Out;
void s3out_add(S3Out *o, const char *s, size_t n);
void s3out_str(S3Out *o, const char *s);
/* s, with & < > " ' as entities. */
void s3out_escaped(S3Out *o, const char *s);
/* The document: the XML declaration, then x with S3's namespace on the root. */
void s3xml_write(S3Out *o, const S3Xml *x);
/* The text, owned; NULL when it failed. */
char *s3out_take(S3Out *o, size_t *len);

#endif
