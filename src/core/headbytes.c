#include "core/headbytes.h"

#include <string.h>

size_t headbytes_keep(char *ptr, size_t size, size_t nmemb, void *ud)
{
    HeadBytes *b = ud;
    size_t n = size * nmemb, room = sizeof b->text - 1 - b->len, take = n < room ? n : room;
    memcpy(b->text + b->len, ptr, take);
    b->len += take;
    b->text[b->len] = '\0';
    return n;
}
