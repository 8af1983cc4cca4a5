/* s3xml — S3's XML; see s3xml.h. */
#include "guard/s3xml.h"

#include <expat.h>
#include <stdlib.h>
#include <string.h>

void s3xml_free(S3Xml *x)
{
    while (x) {
        S3Xml *next = x->next;
        s3xml_free(x->first);
        free(x->name);
        free(x->text);
        free(x);
        x = next;
    }
}

static S3Xml *node_new(const char *name, const char *text)
{
    S3Xml *x = calloc(1, sizeof *x);
    if (!x || !(x->name = strdup(name)) || !(x->text = strdup(text ? text : ""))) {
        if (x) {
            free(x->name);
            free(x);
        }
        return NULL;
    }
    return x;
}

typedef struct Parse {
    XML_Parser p;
    S3Xml *root;
    S3Xml *stack[S3XML_MAX_DEPTH];
    size_t depth;
    bool failed;
} Parse;

static void append_child(S3Xml *parent, S3Xml *c)
{
    S3Xml **at = &parent->first;
    while (*at)
        at = &(*at)->next;
    *at = c;
}

static void on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
    (void)attrs;
    Parse *ps = ud;
    if (ps->failed)
        return;
    const char *local = strrchr(name, ' '); /* namespace separator: "uri name" */
    local = local ? local + 1 : name;
    S3Xml *x = ps->depth < S3XML_MAX_DEPTH && (ps->depth > 0 || !ps->root) ? node_new(local, "") : NULL;
    if (!x) {
        ps->failed = true;
        XML_StopParser(ps->p, XML_FALSE);
        return;
    }
    if (ps->depth == 0)
        ps->root = x;
    else
        append_child(ps->stack[ps->depth - 1], x);
    ps->stack[ps->depth++] = x;
}

static void on_end(void *ud, const XML_Char *name)
{
    (void)name;
    Parse *ps = ud;
    if (!ps->failed && ps->depth)
        ps->depth--;
}

static void on_text(void *ud, const XML_Char *s, int len)
{
    Parse *ps = ud;
    if (ps->failed || !ps->depth)
        return;
    S3Xml *x = ps->stack[ps->depth - 1];
    size_t have = strlen(x->text);
    char *t = realloc(x->text, have + (size_t)len + 1);
    if (!t) {
        ps->failed = true;
        XML_StopParser(ps->p, XML_FALSE);
        return;
    }
    memcpy(t + have, s, (size_t)len);
    t[have + (size_t)len] = '\0';
    x->text = t;
}

/* A DOCTYPE is where entities are declared: S3 never sends one. */
static void on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid, const XML_Char *pubid, int internal)
{
    (void)name;
    (void)sysid;
    (void)pubid;
    (void)internal;
    Parse *ps = ud;
    ps->failed = true;
    XML_StopParser(ps->p, XML_FALSE);
}

S3Xml *s3xml_parse(const char *doc, size_t len)
{
    Parse ps = {0};
    ps.p = XML_ParserCreateNS(NULL, ' ');
    if (!ps.p)
        return NULL;
    XML_SetUserData(ps.p, &ps);
    XML_SetElementHandler(ps.p, on_start, on_end);
    XML_SetCharacterDataHandler(ps.p, on_text);
    XML_SetStartDoctypeDeclHandler(ps.p, on_doctype);
    bool ok = len <= (size_t)0x7fffffff && XML_Parse(ps.p, doc, (int)len, XML_TRUE) == XML_STATUS_OK && !ps.failed;
    XML_ParserFree(ps.p);
    if (!ok) {
        s3xml_free(ps.root);
        return NULL;
    }
    return ps.root;
}

S3Xml *s3xml_child(const S3Xml *x, const char *name)
{
    for (S3Xml *c = x ? x->first : NULL; c; c = c->next)
        if (!strcmp(c->name, name))
            return c;
    return NULL;
}

const char *s3xml_text(const S3Xml *x, const char *name)
{
    const S3Xml *c = s3xml_child(x, name);
    return c ? c->text : NULL;
}

bool s3xml_set_text(S3Xml *x, const char *text)
{
    char *t = strdup(text);
    if (!t)
        return false;
    free(x->text);
    x->text = t;
    return true;
}

void s3xml_remove(S3Xml *x, S3Xml *c)
{
    for (S3Xml **at = &x->first; *at; at = &(*at)->next) {
        if (*at == c) {
            *at = c->next;
            c->next = NULL;
            s3xml_free(c);
            return;
        }
    }
}

S3Xml *s3xml_new(const char *name) { return node_new(name, ""); }

S3Xml *s3xml_add(S3Xml *x, const char *name, const char *text)
{
    S3Xml *c = node_new(name, text);
    if (c)
        append_child(x, c);
    return c;
}

void s3out_add(S3Out *o, const char *s, size_t n)
{
    if (o->failed)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (cap < o->len + n + 1)
            cap *= 2;
        char *t = realloc(o->s, cap);
        if (!t) {
            free(o->s);
            *o = (S3Out){NULL, 0, 0, true};
            return;
        }
        o->s = t;
        o->cap = cap;
    }
    memcpy(o->s + o->len, s, n);
    o->len += n;
    o->s[o->len] = '\0';
}

void s3out_str(S3Out *o, const char *s) { s3out_add(o, s, strlen(s)); }

void s3out_escaped(S3Out *o, const char *s)
{
    for (const char *p = s; *p; p++) {
        switch (*p) {
        case '&': s3out_str(o, "&amp;"); break;
        case '<': s3out_str(o, "&lt;"); break;
        case '>': s3out_str(o, "&gt;"); break;
        case '"': s3out_str(o, "&quot;"); break;
        case '\'': s3out_str(o, "&apos;"); break;
        default: s3out_add(o, p, 1);
        }
    }
}

static void write_node(S3Out *o, const S3Xml *x, bool root)
{
    s3out_str(o, "<");
    s3out_str(o, x->name);
    if (root && strcmp(x->name, "Error") != 0) /* S3's errors have no namespace */
        s3out_str(o, " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"");
    s3out_str(o, ">");
    if (x->first) {
        for (const S3Xml *c = x->first; c; c = c->next)
            write_node(o, c, false);
    } else {
        s3out_escaped(o, x->text);
    }
    s3out_str(o, "</");
    s3out_str(o, x->name);
    s3out_str(o, ">");
}

void s3xml_write(S3Out *o, const S3Xml *x)
{
    s3out_str(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    write_node(o, x, true);
}

char *s3out_take(S3Out *o, size_t *len)
{
    if (!o->failed && !o->s)
        s3out_add(o, "", 0); /* nothing added: the empty text */
    if (o->failed || !o->s) {
        free(o->s);
        *o = (S3Out){0};
        return NULL;
    }
    char *s = o->s;
    *len = o->len;
    *o = (S3Out){0};
    return s;
}
