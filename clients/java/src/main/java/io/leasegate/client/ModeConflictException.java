package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 409 {@code mode_conflict}: a reentry asked for another mode than the lease's own: release, then acquire in the other mode. */
public class ModeConflictException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public ModeConflictException(String message, int status, JsonNode body) {
        super(message, status, "mode_conflict", body);
    }
}
