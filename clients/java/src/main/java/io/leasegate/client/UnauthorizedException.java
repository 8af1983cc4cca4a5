package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 401 {@code unauthorized}: no API key, or one the server does not know (a server run with {@code --auth-file}). */
public class UnauthorizedException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public UnauthorizedException(String message, int status, JsonNode body) {
        super(message, status, "unauthorized", body);
    }
}
