package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 409 {@code stale_token}: a fence check or a write through the guard with a token older than one already let through ({@code body().get("max_token")}). */
public class StaleTokenException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public StaleTokenException(String message, int status, JsonNode body) {
        super(message, status, "stale_token", body);
    }
}
