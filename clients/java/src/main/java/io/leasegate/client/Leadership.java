package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * The leadership of an election won by {@link LeasegateClient#campaign}: a {@link Lease} in the
 * election's namespace (election "x" and lock "x" are unrelated), renewed in the background until
 * {@link #resign()} or its loss, whose fencing token is the leader's {@linkplain #term() term}.
 *
 * <pre>{@code
 * try (Leadership leader = client.campaign("scheduler", Map.of("url", myUrl),
 *         AcquireOptions.defaults().waitFor(Duration.ofMinutes(1)))) {
 *     leader.proclaim(Map.of("url", newUrl));   // observers get a leader event with it
 *     schedule(leader.term());                  // fence the leader's writes with its term
 * }                                             // resigned: the next candidate leads at once
 * }</pre>
 *
 * <p>A deposed leader that has not noticed yet is refused at the fence and at the guard (a route
 * bound to the election): fence its writes with the term. Thread-safe.
 */
public final class Leadership implements AutoCloseable {
    private final Lease lease;

    Leadership(Lease lease) {
        this.lease = lease;
    }

    /** The lease: its loss ({@link Lease#lost()}, listeners, {@link Lease#isValid()}), renewal and headers. */
    public Lease lease() {
        return lease;
    }

    /** The election's name. */
    public String name() {
        return lease.name();
    }

    /** The owner label the leader campaigned under. */
    public String owner() {
        return lease.owner();
    }

    /**
     * The term: the leader's fencing token, from the one counter every lock and election draws from,
     * so a later leader always has a higher one.
     */
    public long term() {
        return lease.token();
    }

    /** The leader's value: as campaigned, then as proclaimed (JSON null when none). */
    public JsonNode value() {
        return lease.value();
    }

    /** {@link Lease#isValid()}: true while the client can vouch that this leadership holds. */
    public boolean isValid() {
        return lease.isValid();
    }

    /** {@link Lease#lost()}: completes with the loss when the leadership is lost (not when resigned). */
    public CompletableFuture<LeaseLostException> lost() {
        return lease.lost();
    }

    /** {@code Fencing-Lease}, for a write through the guard on a route bound to the election. */
    public Map<String, String> headers() {
        return lease.headers();
    }

    /**
     * Replaces the leader's value (any JSON-mappable object; null is JSON null); observers get a
     * {@code leader} event with it. Only the leader can, now. A proclamation whose answer was lost
     * is sent again, so observers may see the same value twice.
     *
     * @throws NotLeaderException when this lease no longer leads ({@code body().get("reason")}:
     *     released after a resignation, expired or revoked, when the leadership is lost from then on)
     */
    public void proclaim(Object value) {
        LeasegateClient.join(proclaimAsync(value));
    }

    /** {@link #proclaim} as a future. */
    public CompletableFuture<Void> proclaimAsync(Object value) {
        return lease.proclaimAsync(value);
    }

    /**
     * Steps down: the next candidate leads at once, and observers see a vacancy ({@code resigned})
     * before its leader event. {@link Lease#release()}'s answers: nothing for a leadership already
     * resigned or known lost, LeaseLostException when the server says it had ended before.
     */
    public void resign() {
        lease.release();
    }

    /** {@link #resign()} as a future. */
    public CompletableFuture<Void> resignAsync() {
        return lease.releaseAsync();
    }

    /**
     * Resigns, then throws LeaseLostException if the leadership was lost while it was held (as
     * {@link Lease#close()}).
     */
    @Override
    public void close() {
        lease.close();
    }

    @Override
    public String toString() {
        return "Leadership[" + lease.name() + " term=" + Tokens.toString(lease.token()) + " owner=" + lease.owner() + " "
                + (lease.isValid() ? "leading" : lease.lostException() != null ? "lost" : "resigned") + "]";
    }
}
