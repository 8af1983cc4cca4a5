/*
 * dlist — an intrusive doubly linked list: O(1) append and removal of an
 * element that embeds a DLink, with the list's length kept.
 * Whether an element is in a list is its owner's to know (the list does not
 * mark links); removing an element that is not in the list is a bug.
 * A shared helper: every layer may read it.
 */
#ifndef LEASEGATE_DLIST_H
#define LEASEGATE_DLIST_H

#include <stddef.h>

#include "leasegate/container.h"

typedef struct DLink {
    struct DLink *prev, *next;
} DLink;

typedef struct DList {
    DLink *head, *tail;
    size_t len;
} DList;

/* The element that embeds `link` as `member`. */
#define DLIST_ITEM(link, type, member) CONTAINER_OF(link, type, member)

static inline void dlist_append(DList *l, DLink *n)
{
    n->next = NULL;
    n->prev = l->tail;
    if (l->tail)
        l->tail->next = n;
    else
        l->head = n;
    l->tail = n;
    l->len++;
}

static inline void dlist_remove(DList *l, DLink *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        l->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        l->tail = n->prev;
    n->prev = n->next = NULL;
    l->len--;
}

#endif
