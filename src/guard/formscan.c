/* formscan — method overrides in query strings and form bodies; see formscan.h. */
#include "guard/formscan.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

static const char *const OVERRIDE_FIELDS[] = {"_method", "x-http-method-override", "x-http-method",
                                              "x-method-override", NULL};

/* The parameter after "multipart/form-data" etc. does not matter: the type does. */
static bool type_is(const char *content_type, const char *type)
{
    size_t n = strlen(type);
    while (*content_type == ' ' || *content_type == '\t')
        content_type++;
    return strncasecmp(content_type, type, n) == 0 &&
           (content_type[n] == '\0' || content_type[n] == ';' || content_type[n] == ' ' || content_type[n] == '\t');
}

FormKind formscan_kind(const char *content_type)
{
    if (!content_type)
        return FORM_NONE;
    if (type_is(content_type, "application/x-www-form-urlencoded"))
        return FORM_URLENCODED;
    if (type_is(content_type, "multipart/form-data"))
        return FORM_MULTIPART;
    return FORM_NONE;
}

void formscan_init(FormScan *f, FormKind kind)
{
    memset(f, 0, sizeof *f);
    f->kind = kind;
}

/* Is name (len bytes, which may hold a NUL) an override's? */
static bool is_override(const char *name, size_t len)
{
    for (const char *const *o = OVERRIDE_FIELDS; *o; o++)
        if (strlen(*o) == len && strncasecmp(name, *o, len) == 0)
            return true;
    return false;
}

/* A name is over ('=', '&' or the end): is it an override's? */
static void name_done(FormScan *f)
{
    if (f->len && !f->too_long && !f->pct && is_override(f->name, f->len))
        f->found = true;
    f->len = 0;
    f->too_long = false;
    f->pct = 0;
}

static void name_byte(FormScan *f, char c)
{
    if (f->len < FORMSCAN_NAME_MAX)
        f->name[f->len++] = c;
    else
        f->too_long = true;
}

static int hex_value(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void urlencoded_byte(FormScan *f, unsigned char c)
{
    if (c == '&') {
        if (!f->in_value)
            name_done(f); /* a name without a value: still a field */
        f->in_value = false;
        return;
    }
    if (f->in_value)
        return;
    if (c == '=') {
        name_done(f);
        f->in_value = true;
        return;
    }
    if (f->pct) {
        int v = hex_value(c);
        if (v < 0) { /* not %XX: the bytes as they are */
            name_byte(f, '%');
            if (f->pct == 2)
                name_byte(f, (char)"0123456789abcdef"[f->hex]);
            f->pct = 0;
            urlencoded_byte(f, c);
            return;
        }
        f->hex = (unsigned char)(f->hex * 16 + v);
        if (++f->pct == 3) {
            name_byte(f, (char)f->hex);
            f->pct = 0;
        }
        return;
    }
    if (c == '%') {
        f->pct = 1;
        f->hex = 0;
    } else {
        name_byte(f, c == '+' ? ' ' : (char)c);
    }
}

/* Does the tail end with `marker`, a parameter of its own (after ';', a
 * space or a tab: `filename="_method"` names no field)? */
static bool tail_ends_with(const FormScan *f, const char *marker)
{
    size_t n = strlen(marker);
    if (f->ntail < n + 1 || memcmp(f->tail + f->ntail - n, marker, n) != 0)
        return false;
    char before = f->tail[f->ntail - n - 1];
    return before == ';' || before == ' ' || before == '\t';
}

static void multipart_byte(FormScan *f, unsigned char c)
{
    if (f->ntail == FORMSCAN_TAIL) {
        memmove(f->tail, f->tail + 1, FORMSCAN_TAIL - 1);
        f->ntail--;
    }
    f->tail[f->ntail++] = (char)tolower(c);
    /* name="_method" or name=_method, followed by a quote, ';', or the end of the line */
    if ((c == '"' && tail_ends_with(f, "name=\"_method\"")) ||
        ((c == ';' || c == '\r' || c == '\n') &&
         (tail_ends_with(f, "name=_method;") || tail_ends_with(f, "name=_method\r") ||
          tail_ends_with(f, "name=_method\n"))))
        f->found = true;
}

void formscan_feed(FormScan *f, const char *data, size_t len)
{
    for (size_t i = 0; i < len && !f->found; i++) {
        if (f->kind == FORM_URLENCODED)
            urlencoded_byte(f, (unsigned char)data[i]);
        else if (f->kind == FORM_MULTIPART)
            multipart_byte(f, (unsigned char)data[i]);
    }
}

bool formscan_finish(FormScan *f)
{
    if (f->kind == FORM_URLENCODED && !f->in_value && !f->found) {
        if (f->pct) { /* a '%' cut short: the bytes as they are */
            name_byte(f, '%');
            if (f->pct == 2)
                name_byte(f, (char)"0123456789abcdef"[f->hex]);
            f->pct = 0;
        }
        name_done(f);
    }
    return f->found;
}
