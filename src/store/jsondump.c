/* jsondump — json_dumps whole or not at all; see jsondump.h. */
#include "store/jsondump.h"

#include <stdlib.h>

char *jsondump_whole(const json_t *json, size_t flags)
{
    size_t n = json ? json_dumpb(json, NULL, 0, flags) : 0;
    char *text = n ? malloc(n + 1) : NULL;
    if (!text)
        return NULL;
    if (json_dumpb(json, text, n, flags) != n) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}
