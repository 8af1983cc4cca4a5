/* share — the names of the shares; see share.h. */
#include "core/share.h"

static const char *const NAMES[SHARE_KINDS] = {
    [SHARE_HELD] = "max_held",       [SHARE_WAITERS] = "max_waiters",         [SHARE_NAMES] = "max_names",
    [SHARE_FENCES] = "max_fences",   [SHARE_POLLS] = "max_polls",             [SHARE_CONNECTIONS] = "max_connections",
    [SHARE_HALF_SENT] = "max_half_sent", [SHARE_WATCH_BYTES] = "max_watch_bytes",
    [SHARE_VALUE_BYTES] = "max_value_bytes",
};

const char *share_limit_name(ShareKind k) { return k < SHARE_KINDS ? NAMES[k] : "unknown"; }
