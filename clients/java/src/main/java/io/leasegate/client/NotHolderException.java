package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 409 {@code not_holder}: the lease does not hold the lock; {@code body().get("reason")} is expired, superseded, released, revoked or unknown. */
public class NotHolderException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public NotHolderException(String message, int status, JsonNode body) {
        super(message, status, "not_holder", body);
    }
}
