/* sharedtext — reference-counted answer bodies; see sharedtext.h. */
#include "net/sharedtext.h"

#include <stdlib.h>

SharedText *sharedtext_new(char *text_new, size_t len)
{
    SharedText *t = text_new ? malloc(sizeof *t) : NULL;
    if (!t) {
        free(text_new);
        return NULL;
    }
    t->refs = 1;
    t->len = len;
    t->text = text_new;
    return t;
}

SharedText *sharedtext_ref(SharedText *t)
{
    t->refs++;
    return t;
}

void sharedtext_unref(SharedText *t)
{
    if (!t || --t->refs > 0)
        return;
    free(t->text);
    free(t);
}
