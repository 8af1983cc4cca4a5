package io.leasegate.client;

/**
 * No server answered (refused, reset, timed out) before the call's time ran out. The message
 * names each server and what happened; {@link #status()} is 0.
 */
public class UnavailableException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    public UnavailableException(String message, Throwable cause) {
        super(message, 0, null, null, cause);
    }
}
