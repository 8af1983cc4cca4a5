package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 403 {@code forbidden}: the API key may not do this here; {@code body().get("reason")}. */
public class ForbiddenException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public ForbiddenException(String message, int status, JsonNode body) {
        super(message, status, "forbidden", body);
    }
}
