package io.leasegate.fence;

/**
 * The decision a storage backend makes before it applies a write that carries a fencing token:
 * is the token at least the highest one seen for the resource? Two ways: {@link ServerFence} asks
 * leasegate ({@code POST /v1/fence/{resource}}), whose marks are durable and shared by every
 * replica of the backend; {@link LocalFence} keeps the marks in this process, for a backend that
 * is one process and needs no round trip.
 */
public interface FenceCheck {
    /**
     * Checks {@code token} (unsigned, see {@link io.leasegate.client.Tokens}) for {@code resource}
     * and, when accepted, raises the resource's mark to it.
     *
     * @throws io.leasegate.client.LeasegateException when no decision could be had (no leasegate
     *     server answered, or the server refused the token as never issued)
     */
    FenceDecision check(String resource, long token);
}
