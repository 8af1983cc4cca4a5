package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/** 409 {@code semaphore_full}: no permit of the semaphore within the wait; {@code body()} has {@code holders}, {@code waiters} and {@code limit}. A LockHeldException, so one catch serves both. */
public class SemaphoreFullException extends LockHeldException {
    private static final long serialVersionUID = 1L;

    public SemaphoreFullException(String message, int status, JsonNode body) {
        super(message, status, "semaphore_full", body);
    }
}
