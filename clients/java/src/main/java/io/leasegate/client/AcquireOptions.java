package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;

/**
 * How to take a lock or a permit: an immutable value, each method returns a changed copy.
 *
 * <pre>{@code
 * AcquireOptions.defaults().ttl(Duration.ofSeconds(15)).waitFor(Duration.ofMinutes(1)).keepAlive(true)
 * }</pre>
 */
public final class AcquireOptions {
    private static final AcquireOptions DEFAULTS =
            new AcquireOptions(Duration.ofSeconds(30), Duration.ZERO, null, null, LockMode.WRITE, null, false, null, null, 0);

    private final Duration ttl;
    private final Duration wait;
    private final String owner;
    private final JsonNode metadata;
    private final LockMode mode;
    private final Duration lockDelay;
    private final boolean keepAlive;
    private final LeaseLostListener onLost;
    private final String requestId;
    private final int permits; // 0: not given (the server's default, 1)

    private AcquireOptions(Duration ttl, Duration wait, String owner, JsonNode metadata, LockMode mode,
                           Duration lockDelay, boolean keepAlive, LeaseLostListener onLost, String requestId, int permits) {
        this.ttl = ttl;
        this.wait = wait;
        this.owner = owner;
        this.metadata = metadata;
        this.mode = mode;
        this.lockDelay = lockDelay;
        this.keepAlive = keepAlive;
        this.onLost = onLost;
        this.requestId = requestId;
        this.permits = permits;
    }

    /** TTL 30 s, no wait (try once), the client's owner label, a write lease, no background renewal. */
    public static AcquireOptions defaults() {
        return DEFAULTS;
    }

    /** How long the lease lasts unless renewed (the server takes 100 ms to 24 h). */
    public AcquireOptions ttl(Duration ttl) {
        Durations.toMillis(ttl, "ttl");
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /** How long to wait in the lock's first-come first-served queue (zero: try once). */
    public AcquireOptions waitFor(Duration wait) {
        Durations.toMillis(wait, "wait");
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /** The label others see on the lease (default: the client's). */
    public AcquireOptions owner(String owner) {
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /** A small JSON object every reader of the lock sees (who, why, host, pid). */
    public AcquireOptions metadata(Map<String, ?> metadata) {
        JsonNode tree = Transport.JSON.valueToTree(Objects.requireNonNull(metadata, "metadata"));
        return metadata(tree);
    }

    /** A small JSON object every reader of the lock sees. */
    public AcquireOptions metadata(JsonNode metadata) {
        if (!metadata.isObject()) {
            throw new IllegalArgumentException("metadata: expected a JSON object, got " + metadata.getNodeType());
        }
        return new AcquireOptions(ttl, wait, owner, metadata.deepCopy(), mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /** WRITE (exclusive, the default) or READ (shared with other readers). Not for permits. */
    public AcquireOptions mode(LockMode mode) {
        return new AcquireOptions(ttl, wait, owner, metadata, Objects.requireNonNull(mode, "mode"), lockDelay, keepAlive,
                onLost, requestId, permits);
    }

    /**
     * When this lease ends uncleanly (it expires, or is force-released), nobody is granted the lock
     * until this long after (at most 60 s), so that work the lost holder may still be doing has time
     * to stop. A release is clean. Not for permits.
     */
    public AcquireOptions lockDelay(Duration lockDelay) {
        Durations.toMillis(lockDelay, "lockDelay");
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /** Start the background renewal at once (locks and semaphores of this library always do). */
    public AcquireOptions keepAlive(boolean keepAlive) {
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /** A listener added to the lease before anyone else can see it. */
    public AcquireOptions onLost(LeaseLostListener onLost) {
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /**
     * The {@code request_id} of one acquire, for a caller that retries an acquire itself (after a
     * crash, from a queue message) and wants the same grant back. Without it, each acquire makes a
     * random one and sends it with each of its own retries, which is enough for retries inside a
     * call. Only for {@link LeasegateClient#acquire} and {@link LeasegateClient#acquirePermit}:
     * a lock or semaphore takes many leases, and one request_id names one.
     */
    public AcquireOptions requestId(String requestId) {
        if (requestId != null && (requestId.isEmpty() || requestId.length() > 64)) {
            throw new IllegalArgumentException("requestId: 1 to 64 characters");
        }
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    /**
     * How many of a semaphore's permits the lease takes at once (1..limit, 1 by default): one lease,
     * one token, all of them given back by its release. Granted first come, first served: a request
     * for several at the head of the queue is not passed by smaller ones behind it. Only for
     * permits ({@link LeasegateClient#acquirePermit}, {@link LeasegateClient#getSemaphore}).
     */
    public AcquireOptions permits(int permits) {
        if (permits < 1 || permits > 10000) {
            throw new IllegalArgumentException("permits: 1..10000 (and at most the limit), not " + permits);
        }
        return new AcquireOptions(ttl, wait, owner, metadata, mode, lockDelay, keepAlive, onLost, requestId, permits);
    }

    Duration ttl() {
        return ttl;
    }

    Duration waitTime() {
        return wait;
    }

    String owner() {
        return owner;
    }

    JsonNode metadata() {
        return metadata;
    }

    LockMode mode() {
        return mode;
    }

    Duration lockDelay() {
        return lockDelay;
    }

    boolean isKeepAlive() {
        return keepAlive;
    }

    LeaseLostListener onLost() {
        return onLost;
    }

    String requestId() {
        return requestId;
    }

    int permits() {
        return permits;
    }

    @Override
    public String toString() {
        return "AcquireOptions[ttl=" + ttl + " wait=" + wait + " mode=" + mode + (owner != null ? " owner=" + owner : "")
                + (lockDelay != null ? " lockDelay=" + lockDelay : "") + (keepAlive ? " keepAlive" : "") + (permits != 0 ? " permits=" + permits : "") + "]";
    }
}
