package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 409 {@code version_mismatch}: a {@link Lease#setValueIf} whose version is not the value's now ({@code body().get("value_version")}). */
public class VersionMismatchException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public VersionMismatchException(String message, int status, JsonNode body) {
        super(message, status, "version_mismatch", body);
    }
}
