package io.leasegate.client;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A leasegate lock as a {@link Lock}: held per thread and reentrant, like Redisson's {@code RLock}
 * and Hazelcast's {@code FencedLock}, whose names it keeps where they fit ({@link #lockAndGetToken()},
 * {@link #tryLockAndGetToken(long, TimeUnit)}, {@link #getToken()}, the {@code *Async} methods taking
 * a thread id).
 *
 * <pre>{@code
 * LeasegateLock lock = client.getLock("orders/42");
 * long token = lock.lockAndGetToken();
 * try {
 *     store.write(order, token);        // the store refuses a token older than one it has seen
 * } finally {
 *     lock.unlock();                    // throws LeaseLostException if the lease was lost meanwhile
 * }
 * }</pre>
 *
 * <p>Each thread that locks it gets a lease of its own from the server, which queues threads as it
 * queues any clients, first come first served; a thread that locks it again re-enters its lease on
 * the server (the count goes up, the token stays). The lease is renewed in the background while it
 * is held. Its loss (see {@link Lease}) is told to the {@link LeaseLostListener}s added here, and
 * makes each later {@link #unlock()} of that thread throw {@link LeaseLostException}, so that the
 * code that held it learns that its work may have overlapped with the next holder's.
 *
 * <p>The {@code *Async} methods, like Redisson's, hold the lock for the calling thread's id, or for
 * the thread id given: the id names the holder, whatever thread completes the future.
 * {@link #newCondition()} is not supported. Thread-safe.
 */
public class LeasegateLock implements Lock, AutoCloseable {
    private final LeasegateClient client;
    private final String name;
    private final AcquireOptions options;
    private final LeasegateReadWriteLock pair; // for a lock of a read-write pair; else null
    private final Map<Long, Hold> holds = new ConcurrentHashMap<>();
    private final Set<Long> pending = ConcurrentHashMap.newKeySet(); // thread ids with an acquire in flight
    private final List<LeaseLostListener> listeners = new CopyOnWriteArrayList<>();

    /** One thread's hold: its lease and how many times it locked without unlocking. */
    private static final class Hold {
        final Lease lease;
        int levels = 1; // guarded by the Hold

        Hold(Lease lease) {
            this.lease = lease;
        }
    }

    LeasegateLock(LeasegateClient client, String name, AcquireOptions options, LeasegateReadWriteLock pair) {
        if (options.requestId() != null) {
            throw new IllegalArgumentException("requestId names one acquire: use LeasegateClient.acquire for it, not a lock");
        }
        this.client = client;
        this.name = name;
        this.options = options.keepAlive(true);
        this.pair = pair;
    }

    /** The lock's name. */
    public String getName() {
        return name;
    }

    /** WRITE, or READ for the read lock of a {@link LeasegateReadWriteLock}. */
    public LockMode getMode() {
        return options.mode();
    }

    /**
     * Adds a listener, told once for each lease of this lock that is lost, with the
     * LeaseLostException whose {@link LeaseLostException#lease()} says which: for the leases held
     * now and those taken later.
     */
    public LeasegateLock addLostListener(LeaseLostListener listener) {
        listeners.add(listener);
        for (Hold hold : holds.values()) {
            hold.lease.addLostListener(listener);
        }
        return this;
    }

    /** Removes a listener; true if it was there. */
    public boolean removeLostListener(LeaseLostListener listener) {
        for (Hold hold : holds.values()) {
            hold.lease.removeLostListener(listener);
        }
        return listeners.remove(listener);
    }

    // Lock --------------------------------------------------------------------------------------

    /**
     * Waits as long as it takes for the lock, uninterruptibly (an interrupt is kept for later and
     * does not give up the place in the queue). Servers that cannot be reached are retried.
     *
     * @throws LeaseLostException for a reentry of a lease that was lost
     */
    @Override
    public void lock() {
        LeasegateClient.join(acquire(threadId(), 0, true));
    }

    /** As {@link #lock()}, but an interrupt gives up the wait and throws. */
    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        LeasegateClient.await(acquire(threadId(), 0, true));
    }

    /** Takes the lock if it is free now (one request); false when it is held. */
    @Override
    public boolean tryLock() {
        return LeasegateClient.join(acquire(threadId(), 0, false)) != null;
    }

    /** Waits up to {@code time} in the lock's queue; false when not granted in time. */
    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        return LeasegateClient.await(acquire(threadId(), unit.toNanos(Math.max(0, time)), false)) != null;
    }

    /**
     * Gives back one level of the calling thread's hold; the last gives the lease back.
     *
     * @throws IllegalMonitorStateException when the thread does not hold the lock
     * @throws LeaseLostException when its lease was lost while held (each unlock of that hold throws it)
     */
    @Override
    public void unlock() {
        LeasegateClient.joinUninterruptibly(unlockAsync(threadId()));
    }

    /** Not supported: leasegate has no condition variables. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("leasegate locks have no conditions");
    }

    /**
     * Gives back every level the calling thread holds; nothing if it holds none. For
     * try-with-resources: {@code lock.lock(); try (lock) { ... }}.
     *
     * @throws LeaseLostException when the lease was lost while held
     */
    @Override
    public void close() {
        LeaseLostException loss = null;
        long id = threadId();
        while (holds.containsKey(id)) {
            try {
                unlock();
            } catch (LeaseLostException e) {
                loss = e;
            }
        }
        if (loss != null) {
            throw loss;
        }
    }

    // Tokens (Redisson's RFencedLock, Hazelcast's FencedLock) ------------------------------------

    /** {@link #lock()}, then the lease's fencing token. */
    public long lockAndGetToken() {
        lock();
        return getToken();
    }

    /** {@link #tryLock()}: the fencing token, or null when the lock is held. */
    public Long tryLockAndGetToken() {
        return LeasegateClient.join(acquire(threadId(), 0, false));
    }

    /** {@link #tryLock(long, TimeUnit)}: the fencing token, or null when not granted in time. */
    public Long tryLockAndGetToken(long waitTime, TimeUnit unit) throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        return LeasegateClient.await(acquire(threadId(), unit.toNanos(Math.max(0, waitTime)), false));
    }

    /**
     * The fencing token of the calling thread's lease (also of one that was lost: a store that
     * checks tokens refuses it then).
     *
     * @throws IllegalMonitorStateException when the thread does not hold the lock
     */
    public long getToken() {
        return heldBy(threadId()).lease.token();
    }

    /** The calling thread's lease (for {@link Lease#headers()}, {@link Lease#request}), or null. */
    public Lease getLease() {
        Hold hold = holds.get(threadId());
        return hold == null ? null : hold.lease;
    }

    /** True when the calling thread holds the lock and its lease is valid (no request). */
    public boolean isHeldByCurrentThread() {
        return isHeldByThread(threadId());
    }

    /** True when the thread id holds the lock and its lease is valid (no request). */
    public boolean isHeldByThread(long threadId) {
        Hold hold = holds.get(threadId);
        return hold != null && hold.lease.isValid();
    }

    /** How many times the calling thread locked without unlocking (0: not held). */
    public int getHoldCount() {
        Hold hold = holds.get(threadId());
        if (hold == null) {
            return 0;
        }
        synchronized (hold) {
            return hold.levels;
        }
    }

    /** Whether anyone holds the lock now (asks the server). */
    public boolean isLocked() {
        return client.status(name).path("held").asBoolean();
    }

    // Futures (Redisson's names) ----------------------------------------------------------------

    /** {@link #lock()} for the calling thread's id; cancelling the future gives up the wait. */
    public CompletableFuture<Void> lockAsync() {
        return lockAsync(threadId());
    }

    /** {@link #lock()} for the holder {@code threadId}. */
    public CompletableFuture<Void> lockAsync(long threadId) {
        return acquire(threadId, 0, true).map(token -> null);
    }

    /** {@link #lockAndGetToken()} as a future. */
    public CompletableFuture<Long> lockAndGetTokenAsync() {
        return acquire(threadId(), 0, true);
    }

    /** {@link #tryLock()} as a future. */
    public CompletableFuture<Boolean> tryLockAsync() {
        return acquire(threadId(), 0, false).map(token -> token != null);
    }

    /** {@link #tryLock(long, TimeUnit)} as a future. */
    public CompletableFuture<Boolean> tryLockAsync(long waitTime, TimeUnit unit) {
        return tryLockAsync(waitTime, unit, threadId());
    }

    /** {@link #tryLock(long, TimeUnit)} for the holder {@code threadId}. */
    public CompletableFuture<Boolean> tryLockAsync(long waitTime, TimeUnit unit, long threadId) {
        return acquire(threadId, unit.toNanos(Math.max(0, waitTime)), false).map(token -> token != null);
    }

    /** {@link #tryLockAndGetToken(long, TimeUnit)} as a future: the token, or null. */
    public CompletableFuture<Long> tryLockAndGetTokenAsync(long waitTime, TimeUnit unit) {
        return acquire(threadId(), unit.toNanos(Math.max(0, waitTime)), false);
    }

    /** {@link #unlock()} for the calling thread's id. */
    public CompletableFuture<Void> unlockAsync() {
        return unlockAsync(threadId());
    }

    /** {@link #unlock()} for the holder {@code threadId}. */
    public CompletableFuture<Void> unlockAsync(long threadId) {
        Hold hold;
        try {
            hold = heldBy(threadId);
        } catch (IllegalMonitorStateException e) {
            return CompletableFuture.failedFuture(e);
        }
        Lease lease = hold.lease;
        int left;
        synchronized (hold) {
            left = --hold.levels;
            if (left == 0) {
                holds.remove(threadId);
            }
        }
        if (left == 0) {
            LeaseLostException loss = lease.isValid() ? null : lostOf(lease);
            CompletableFuture<Void> release = lease.releaseAsync();
            return loss == null ? release : release.handle((v, e) -> {
                throw loss;
            });
        }
        if (!lease.isValid()) {
            return CompletableFuture.failedFuture(lostOf(lease));
        }
        return lease.leaveAsync().thenApply(count -> null);
    }

    /** A LeaseLostException for a lease that is not valid, recording the loss if it is due. */
    private static LeaseLostException lostOf(Lease lease) {
        try {
            lease.check();
        } catch (LeaseLostException e) {
            return e;
        }
        return new LeaseLostException("the lease on '" + lease.name() + "' was released", lease, null);
    }

    // The acquire --------------------------------------------------------------------------------

    /**
     * Takes (or re-enters) the lock for the holder {@code threadId}: the token, or null when not
     * granted within the wait. Cancelling the future gives up the wait.
     */
    private Op<Long> acquire(long threadId, long waitNanos, boolean forever) {
        Op<Long> result = new Op<>();
        Hold held = holds.get(threadId);
        if (held != null) {
            CompletableFuture<Integer> reentry = held.lease.reenterAsync();
            result.step(reentry);
            reentry.whenComplete((count, error) -> {
                if (error != null) {
                    result.completeExceptionally(Transport.unwrap(error));
                    return;
                }
                synchronized (held) {
                    held.levels++;
                }
                result.complete(held.lease.token());
            });
            return result;
        }
        if (pair != null && pair.other(this).holds.containsKey(threadId)) {
            result.completeExceptionally(new IllegalStateException("this thread holds the " + pair.other(this).getMode()
                    + " lock of '" + name + "': the server has no upgrade or downgrade, so unlock it first"));
            return result;
        }
        if (!pending.add(threadId)) {
            result.completeExceptionally(new IllegalStateException("an acquire of '" + name
                    + "' for this thread id is already in progress"));
            return result;
        }
        Op<Lease> take = client.take(name, 0, options, waitNanos, forever, null);
        result.step(take);
        take.whenComplete((lease, error) -> {
            pending.remove(threadId);
            if (error != null) {
                Throwable cause = Transport.unwrap(error);
                if (cause instanceof LockHeldException && !forever) {
                    result.complete(null);
                } else {
                    result.completeExceptionally(cause);
                }
                return;
            }
            for (LeaseLostListener listener : listeners) {
                lease.addLostListener(listener);
            }
            holds.put(threadId, new Hold(lease));
            if (!result.complete(lease.token())) { // cancelled meanwhile
                holds.remove(threadId);
                lease.releaseAsync();
            }
        });
        return result;
    }

    private Hold heldBy(long threadId) {
        Hold hold = holds.get(threadId);
        if (hold == null) {
            throw new IllegalMonitorStateException("the lock '" + name + "' is not held by thread " + threadId);
        }
        return hold;
    }

    boolean isHeldBy(long threadId) {
        return holds.containsKey(threadId);
    }

    @SuppressWarnings("deprecation") // Thread.threadId() is Java 19's
    private static long threadId() {
        return Thread.currentThread().getId();
    }

    @Override
    public String toString() {
        return "LeasegateLock[" + (options.mode() == LockMode.READ ? "read " : "") + name + ", held by " + holds.size()
                + " thread(s)]";
    }
}
