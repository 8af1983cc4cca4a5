package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 503 {@code overloaded}: the server is at a limit or stopping. Retried on the next server; thrown when the call's time ran out. */
public class OverloadedException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public OverloadedException(String message, int status, JsonNode body) {
        super(message, status, "overloaded", body);
    }
}
