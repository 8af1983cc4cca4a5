/* cli_keygen — `leasegate keygen NAME ROLE PREFIX...`: a new API key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "net/auth.h"

/* Prints exactly two lines: the key (shown this once; the file keeps only its
 * hash), then the line to append to the --auth-file. */
int cli_keygen(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: leasegate keygen NAME ROLE [PREFIX...]\n"
                        "  ROLE: client (locks and guarded requests), fence (/v1/fence) or admin (everything);\n"
                        "  PREFIX: the lock (or fence resource) names the key may touch start with one of them;\n"
                        "  * is every name (an admin's is always *). Prints the key, shown only this once, then\n"
                        "  the line to append to the --auth-file (then send the server SIGHUP).\n");
        return 2;
    }
    char *key = NULL, *line = NULL, err[300];
    if (auth_keygen(argv[0], argv[1], argv + 2, (size_t)(argc - 2), &key, &line, err, sizeof err)) {
        fprintf(stderr, "leasegate keygen: %s\n", err);
        return 2;
    }
    /* A prefix is the start of a name, not a folder: say so where it matters. */
    for (int i = 2; i < argc; i++) {
        const char *p = argv[i];
        size_t n = strlen(p);
        if (strchr(p, '=') || !strcmp(p, "*") || !n || p[n - 1] == '/')
            continue;
        fprintf(stderr,
                "leasegate keygen: note: prefix '%s' covers every name that starts with it: %s itself, %s/..., "
                "but also %s2/..., %s-old and %sX; to cover one folder only, end it with '/' (%s/)\n",
                p, p, p, p, p, p, p);
    }
    int rc = printf("%s\n%s\n", key, line) < 0 || fflush(stdout) ? 1 : 0;
    free(key);
    free(line);
    return rc;
}
