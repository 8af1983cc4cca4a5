package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * A semaphore of {@code limit} permits shared by every client (Redisson's
 * {@code RPermitExpirableSemaphore}): each permit is a {@link Lease} with its own token, renewed
 * in the background until {@link Lease#release()}, and coming back by itself at its TTL when its
 * holder stops renewing (a crashed process). Waiters are served first come, first served.
 *
 * <pre>{@code
 * LeasegateSemaphore slots = client.getSemaphore("crawl/slots", 10);
 * try (Lease permit = slots.acquire()) {
 *     crawl();
 * }
 * }</pre>
 *
 * <p>The first acquire of a semaphore with no holders and no waiters sets its limit; an acquire
 * with another limit while it has some fails with {@link LimitMismatchException}. Semaphores are a
 * namespace of their own (the semaphore "crawl" and the lock "crawl" are unrelated), and the guard
 * refuses a permit's writes: fence writes with a lock. Thread-safe.
 */
public final class LeasegateSemaphore {
    private final LeasegateClient client;
    private final String name;
    private final int limit;
    private final AcquireOptions options;

    LeasegateSemaphore(LeasegateClient client, String name, int limit, AcquireOptions options) {
        LeasegateClient.checkLimit(limit);
        if (options.requestId() != null) {
            throw new IllegalArgumentException("requestId names one acquire: use LeasegateClient.acquirePermit for it");
        }
        this.client = client;
        this.name = name;
        this.limit = limit;
        this.options = options.keepAlive(true);
    }

    public String getName() {
        return name;
    }

    public int getLimit() {
        return limit;
    }

    /** Waits as long as it takes for a permit, uninterruptibly; servers that cannot be reached are retried. */
    public Lease acquire() {
        return LeasegateClient.join(client.take(name, limit, options, 0, true, null));
    }

    /** A permit if one is free now (one request), else null. */
    public Lease tryAcquire() {
        return LeasegateClient.join(tryAcquireAsync(0, TimeUnit.NANOSECONDS));
    }

    /** Waits up to {@code time} for a permit; null when none came. */
    public Lease tryAcquire(long time, TimeUnit unit) throws InterruptedException {
        return LeasegateClient.await(tryAcquireAsync(time, unit));
    }

    /** {@link #acquire()} as a future; cancelling it gives up the wait. */
    public CompletableFuture<Lease> acquireAsync() {
        return client.take(name, limit, options, 0, true, null);
    }

    /** {@link #tryAcquire(long, TimeUnit)} as a future: the permit, or null. */
    public CompletableFuture<Lease> tryAcquireAsync(long time, TimeUnit unit) {
        Op<Lease> result = new Op<>();
        Op<Lease> take = client.take(name, limit, options, unit.toNanos(Math.max(0, time)), false, null);
        result.step(take);
        take.whenComplete((lease, error) -> {
            Throwable cause = error == null ? null : Transport.unwrap(error);
            if (cause instanceof SemaphoreFullException) {
                result.complete(null);
            } else if (cause != null) {
                result.completeExceptionally(cause);
            } else if (!result.complete(lease)) {
                lease.releaseAsync();
            }
        });
        return result;
    }

    /** Permits free now (asks the server). */
    public int availablePermits() {
        return status().path("available").asInt();
    }

    /** The semaphore's state: {name, limit, holders, holders_total, available, waiters, last_token...}. */
    public JsonNode status() {
        return client.semaphoreStatus(name);
    }

    @Override
    public String toString() {
        return "LeasegateSemaphore[" + name + ", " + limit + " permits]";
    }
}
