/*
 * errors — the one table of API error codes: code -> HTTP status.
 * Every error body is {"error": code, "message": text, ...fields}.
 */
#ifndef LEASEGATE_ERRORS_H
#define LEASEGATE_ERRORS_H

typedef enum ErrCode {
    ERR_BAD_REQUEST,
    ERR_UNAUTHORIZED,
    ERR_FORBIDDEN,
    ERR_NOT_FOUND,
    ERR_METHOD_NOT_ALLOWED,
    ERR_LOCK_HELD,
    ERR_SEMAPHORE_FULL,
    ERR_LIMIT_MISMATCH,
    ERR_MODE_CONFLICT,
    ERR_NOT_HOLDER,
    ERR_STALE_TOKEN,
    ERR_VERSION_MISMATCH,
    ERR_REQUEST_ID_REUSED,
    ERR_NOT_LEADER,
    ERR_PAYLOAD_TOO_LARGE,
    ERR_UNSUPPORTED_MEDIA_TYPE,
    ERR_KEY_LIMIT,
    ERR_LENGTH_REQUIRED,
    ERR_WRITE_CONFLICT,
    ERR_PEER_LIMIT,
    ERR_MISDIRECTED_REQUEST,
    ERR_TOO_OLD,
    ERR_URI_TOO_LONG,
    ERR_HEADERS_TOO_LARGE,
    ERR_TOKEN_REQUIRED,
    ERR_INTERNAL,
    ERR_BAD_GATEWAY,
    ERR_OVERLOADED,
    ERR_GATEWAY_TIMEOUT,
} ErrCode;

/* What a gateway that no longer leads answers (503 overloaded) to every
 * request it still holds: nothing from its memory (http.h). */
#define ERRORS_DEPOSED_MESSAGE                                                                                      \
    "this gateway no longer leads (or cannot reach its store); it is stopping: retry at another gateway"
#define ERRORS_DEPOSED_BODY "{\"error\":\"overloaded\",\"message\":\"" ERRORS_DEPOSED_MESSAGE "\"}"

const char *error_code(ErrCode e);
unsigned error_status(ErrCode e);

#endif
