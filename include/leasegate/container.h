/*
 * container — CONTAINER_OF, the one way from an embedded member (a list link,
 * a heap entry, a loop source) back to the struct that embeds it.
 * A shared helper: every layer may read it.
 */
#ifndef LEASEGATE_CONTAINER_H
#define LEASEGATE_CONTAINER_H

#include <stddef.h>

/* The struct of type `type` that has `ptr` as its `member`. */
#define CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif
