package io.leasegate.client;

/**
 * An https server's certificate failed verification (unknown CA, wrong name, expired). Thrown at
 * once, not retried: waiting does not fix a certificate. Other servers of the list are still
 * tried; this is thrown when none is left. The message says what failed and how to trust a
 * private CA ({@code caFile} or {@code $LEASEGATE_CACERT}), as the CLI does.
 */
public class TlsVerificationException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    public TlsVerificationException(String message, Throwable cause) {
        super(message, cause);
    }
}
