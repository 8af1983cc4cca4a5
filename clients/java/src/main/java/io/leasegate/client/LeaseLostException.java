package io.leasegate.client;

/**
 * The lease can no longer be trusted to hold its lock: a renewal was answered {@code not_holder},
 * or no renewal succeeded within the TTL (counted from when it was sent). Work done under it
 * since may overlap with the next holder's; writes through the guard carrying it are refused
 * with 409 {@code stale_token}. {@link #getCause()} is what was seen (a NotHolderException, an
 * UnavailableException), or null when the time simply ran out.
 */
public class LeaseLostException extends LeasegateException {
    private static final long serialVersionUID = 1L;

    private final transient Lease lease;

    public LeaseLostException(String message, Lease lease, Throwable cause) {
        super(message, 0, null, null, cause);
        this.lease = lease;
    }

    /** The lease that was lost. */
    public Lease lease() {
        return lease;
    }
}
