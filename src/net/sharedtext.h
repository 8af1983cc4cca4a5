/*
 * sharedtext — an answer's body that many requests send: made once, then
 * only read, and freed when the last request that sends it lets go (a
 * reference count). A change to a lock wakes every watch of it with the same
 * answer (watch.h): each watcher holds a reference, not a copy, so the change
 * costs its memory once, however many watch it and however slowly they read.
 *
 * Only the loop thread touches a SharedText (libmicrohttpd runs its
 * callbacks there too): the count is a plain integer.
 */
#ifndef LEASEGATE_SHAREDTEXT_H
#define LEASEGATE_SHAREDTEXT_H

#include <stddef.h>

typedef struct SharedText {
    size_t refs;
    size_t len;
    char *text; /* owned; len bytes, never changed once made */
} SharedText;

/* A text with one reference, taking over text_new (malloc'd); NULL when out
 * of memory (text_new is then freed) or when text_new is NULL. */
SharedText *sharedtext_new(char *text_new, size_t len);
/* Another reference to t; returns t. */
SharedText *sharedtext_ref(SharedText *t);
/* Lets go of one reference (NULL: nothing); the last frees it. */
void sharedtext_unref(SharedText *t);

#endif
