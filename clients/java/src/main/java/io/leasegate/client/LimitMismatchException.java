package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 409 {@code limit_mismatch}: the semaphore has holders or waiters under another limit ({@code body().get("limit")}). */
public class LimitMismatchException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public LimitMismatchException(String message, int status, JsonNode body) {
        super(message, status, "limit_mismatch", body);
    }
}
