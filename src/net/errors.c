/* errors — the error table; see errors.h. */
#include "net/errors.h"

static const struct {
    const char *code;
    unsigned status;
} ERRORS[] = {
    [ERR_BAD_REQUEST] = {"bad_request", 400},
    [ERR_UNAUTHORIZED] = {"unauthorized", 401},
    [ERR_FORBIDDEN] = {"forbidden", 403},
    [ERR_NOT_FOUND] = {"not_found", 404},
    [ERR_METHOD_NOT_ALLOWED] = {"method_not_allowed", 405},
    [ERR_LOCK_HELD] = {"lock_held", 409},
    [ERR_SEMAPHORE_FULL] = {"semaphore_full", 409},
    [ERR_LIMIT_MISMATCH] = {"limit_mismatch", 409},
    [ERR_MODE_CONFLICT] = {"mode_conflict", 409},
    [ERR_NOT_HOLDER] = {"not_holder", 409},
    [ERR_STALE_TOKEN] = {"stale_token", 409},
    [ERR_VERSION_MISMATCH] = {"version_mismatch", 409},
    [ERR_REQUEST_ID_REUSED] = {"request_id_reused", 409},
    [ERR_NOT_LEADER] = {"not_leader", 409},
    [ERR_PAYLOAD_TOO_LARGE] = {"payload_too_large", 413},
    [ERR_UNSUPPORTED_MEDIA_TYPE] = {"unsupported_media_type", 415},
    [ERR_KEY_LIMIT] = {"key_limit", 429},
    [ERR_LENGTH_REQUIRED] = {"length_required", 411},
    [ERR_WRITE_CONFLICT] = {"write_conflict", 409},
    [ERR_PEER_LIMIT] = {"peer_limit", 429},
    [ERR_MISDIRECTED_REQUEST] = {"misdirected_request", 421},
    [ERR_TOO_OLD] = {"too_old", 410},
    [ERR_URI_TOO_LONG] = {"uri_too_long", 414},
    [ERR_HEADERS_TOO_LARGE] = {"headers_too_large", 431},
    [ERR_TOKEN_REQUIRED] = {"token_required", 428},
    [ERR_INTERNAL] = {"internal", 500},
    [ERR_BAD_GATEWAY] = {"bad_gateway", 502},
    [ERR_OVERLOADED] = {"overloaded", 503},
    [ERR_GATEWAY_TIMEOUT] = {"gateway_timeout", 504},
};

const char *error_code(ErrCode e) { return ERRORS[e].code; }
unsigned error_status(ErrCode e) { return ERRORS[e].status; }
