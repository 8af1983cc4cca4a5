package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * 409 {@code lock_held}: not granted within the wait. {@code body()} has {@code holder} (never its
 * lease id), {@code holders}, {@code mode}, {@code waiters} and, while a lock-delay runs,
 * {@code delay_until_ms}.
 */
public class LockHeldException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public LockHeldException(String message, int status, JsonNode body) {
        this(message, status, "lock_held", body);
    }

    LockHeldException(String message, int status, String code, JsonNode body) {
        super(message, status, code, body);
    }
}
