package io.leasegate.client;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Future;

/**
 * A CompletableFuture for an operation of several steps (HTTP exchanges, pauses), whose
 * {@link #cancel} also cancels the step it is waiting for. Cancelling an HTTP exchange closes its
 * connection, so a cancelled long-polling acquire leaves the lock's queue at once (the server drops
 * a waiter whose client hung up). Stages derived from it are plain CompletableFutures.
 */
class Op<T> extends CompletableFuture<T> {
    private Future<?> step; // guarded by this: the step in progress, or null

    /** The step now in progress; cancelled at once if the operation already was. */
    void step(Future<?> next) {
        synchronized (this) {
            step = next;
        }
        if (isCancelled()) {
            next.cancel(true);
        }
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        Future<?> current;
        synchronized (this) {
            current = step;
        }
        if (current != null) {
            current.cancel(true);
        }
        return cancelled;
    }

    /**
     * Like {@code thenApply}, but the stage it returns is an Op whose cancellation cancels this
     * one (a plain derived stage would leave it running: an acquire would stay in the queue).
     */
    <U> Op<U> map(java.util.function.Function<? super T, ? extends U> fn) {
        Op<U> mapped = new Op<>();
        mapped.step(this);
        whenComplete((value, error) -> {
            if (error != null) {
                mapped.completeExceptionally(Transport.unwrap(error));
                return;
            }
            try {
                mapped.complete(fn.apply(value));
            } catch (RuntimeException e) {
                mapped.completeExceptionally(e);
            }
        });
        return mapped;
    }

    @Override
    public <U> CompletableFuture<U> newIncompleteFuture() {
        return new CompletableFuture<>();
    }
}
