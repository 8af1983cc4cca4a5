package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 428 {@code token_required}: a guarded write without the {@code Fencing-Lease} header. */
public class TokenRequiredException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public TokenRequiredException(String message, int status, JsonNode body) {
        super(message, status, "token_required", body);
    }
}
