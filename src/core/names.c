/* names — validation of lock names and resources; see names.h. */
#include "core/names.h"

#include <string.h>

static const char *const ACTIONS[] = {"acquire", "renew", "release", "history", "value"};

/* An election's actions (issue 40); "renew" is a lock's too. */
static const char *const ELECTION_ACTIONS[] = {"campaign", "proclaim", "resign", "renew", "observe"};

bool name_is_action(const char *segment)
{
    for (size_t i = 0; i < sizeof ACTIONS / sizeof ACTIONS[0]; i++)
        if (!strcmp(segment, ACTIONS[i]))
            return true;
    return false;
}

bool name_is_election_action(const char *segment)
{
    for (size_t i = 0; i < sizeof ELECTION_ACTIONS / sizeof ELECTION_ACTIONS[0]; i++)
        if (!strcmp(segment, ELECTION_ACTIONS[i]))
            return true;
    return false;
}

const char *name_problem(const char *name)
{
    size_t n = strlen(name);
    if (n == 0)
        return "is empty";
    if (n > NAME_MAX_BYTES)
        return "is longer than 256 bytes";
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  strchr("._~:/-", ch) != NULL;
        if (!ok)
            return "may only contain A-Z a-z 0-9 . _ ~ : / -";
    }
    return NULL;
}

const char *name_lock_problem(const char *name)
{
    const char *problem = name_problem(name);
    if (problem)
        return problem;
    const char *slash = strrchr(name, '/');
    return name_is_action(slash ? slash + 1 : name)
               ? "may not end in a segment named acquire, renew, release, history or value"
               : NULL;
}

const char *name_election_problem(const char *name)
{
    const char *problem = name_problem(name);
    if (problem)
        return problem;
    const char *slash = strrchr(name, '/');
    return name_is_election_action(slash ? slash + 1 : name)
               ? "may not end in a segment named campaign, proclaim, resign, renew or observe"
               : NULL;
}

/* RFC 9110's tchar: letters and digits by range (every header name of every
 * request is checked: a search of the whole set per byte cost more than the
 * rest of the check), the punctuation by search. */
static bool is_tchar(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

bool name_is_http_token(const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!is_tchar(name[i]))
            return false;
    return len > 0;
}
