package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * 409 {@code not_leader}: a campaign not elected within its wait ({@code body()} has {@code leader},
 * never its lease, and {@code candidates_total}), or a proclamation or resignation by a lease that
 * does not lead now ({@code reason}: released, expired, revoked...). A LockHeldException, so one
 * catch serves every "not granted in time".
 */
public class NotLeaderException extends LockHeldException {
    private static final long serialVersionUID = 1L;

    public NotLeaderException(String message, int status, JsonNode body) {
        super(message, status, "not_leader", body);
    }
}
