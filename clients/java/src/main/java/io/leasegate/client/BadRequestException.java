package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 400 {@code bad_request}: a malformed request; {@code body().get("field")} names the field at fault. */
public class BadRequestException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public BadRequestException(String message, int status, JsonNode body) {
        super(message, status, "bad_request", body);
    }
}
