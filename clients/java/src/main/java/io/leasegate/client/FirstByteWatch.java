package io.leasegate.client;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * The first-byte watch ({@code firstByteTimeout}), as in the Python and Node clients: a paused
 * gateway still accepts connections (its kernel does), so silence must not cost a request its whole
 * timeout. A server that has not accepted the connection within the first-byte timeout is given up
 * (the HTTP client's connect timeout); one that has not begun its answer within it is asked {@code
 * GET /readyz}, bounded by the same timeout and by the attempt's own deadline, so that a renewal's
 * bound stays hard. Ready (200, or 404 from a server too old to have {@code /readyz}), it is working
 * on the request (a long-poll waits for its grant; a commit is slow) and the wait goes on, to be
 * asked again a first-byte timeout later; not ready (503) or silent (paused, stopped, cut off), the
 * attempt fails with {@link Stalled}, like one that timed out, and the call moves on to the next
 * server (an acquire with its request_id, so a grant made meanwhile is given back, not doubled).
 *
 * <p>This future is the attempt: it completes with the exchange's answer or error, or first with
 * {@link Stalled}, which also cancels the exchange (closing its connection). Cancelling it cancels
 * the exchange and the watch's pending step.
 */
final class FirstByteWatch extends CompletableFuture<HttpResponse<byte[]>> {
    /** An attempt the watch gave up: the server neither answered nor said it is ready. */
    static final class Stalled extends IOException {
        private static final long serialVersionUID = 1L;

        Stalled(String message) {
            super(message);
        }
    }

    private final Transport transport;
    private final String server;
    private final long deadlineNanos; // System.nanoTime() at which the attempt's own timeout ends it
    private final CompletableFuture<Void> began = new CompletableFuture<>(); // the answer's status line came
    private CompletableFuture<HttpResponse<byte[]>> exchange; // guarded by this; set once, by start
    private Future<?> step; // guarded by this: the pending tick or /readyz probe

    FirstByteWatch(Transport transport, String server, long deadlineNanos) {
        this.transport = transport;
        this.server = server;
        this.deadlineNanos = deadlineNanos;
    }

    /** Called by the HTTP client when the answer's head arrives: the answer has begun. */
    void began() {
        began.complete(null);
    }

    /** Watches exchange, whose request was sent just now; returns this. */
    FirstByteWatch start(CompletableFuture<HttpResponse<byte[]>> exchange) {
        synchronized (this) {
            this.exchange = exchange;
        }
        exchange.whenComplete((response, error) -> {
            if (error != null) {
                completeExceptionally(Transport.unwrap(error));
            } else {
                complete(response);
            }
        });
        whenComplete((response, error) -> cancelStep());
        schedule();
        return this;
    }

    private void schedule() {
        Future<?> tick = transport.timer.schedule(this::tick, transport.firstByteNanos, TimeUnit.NANOSECONDS);
        setStep(tick);
    }

    /** A first-byte timeout passed: unless the answer began, ask the server whether it is ready. */
    private void tick() {
        long left = deadlineNanos - System.nanoTime();
        if (isDone() || began.isDone() || left <= 0) {
            return; // (at the deadline, the exchange's own timeout ends the attempt)
        }
        CompletableFuture<HttpResponse<Void>> probe = transport.readyz(server, Math.min(transport.firstByteNanos, left));
        setStep(probe);
        probe.whenComplete((response, error) -> {
            if (isDone() || began.isDone()) {
                return;
            }
            if (error == null && response.statusCode() != 503) {
                schedule();
                return;
            }
            String said = error == null ? "/readyz answered 503" : "/readyz did not answer";
            if (completeExceptionally(new Stalled("no answer within " + millis(transport.firstByteNanos) + ", and " + said))) {
                cancelExchange();
            }
        });
    }

    private void setStep(Future<?> next) {
        synchronized (this) {
            step = next;
        }
        if (isDone()) {
            next.cancel(true);
        }
    }

    private void cancelExchange() {
        CompletableFuture<HttpResponse<byte[]>> current;
        synchronized (this) {
            current = exchange;
        }
        if (current != null) {
            current.cancel(true);
        }
    }

    private void cancelStep() {
        Future<?> pending;
        synchronized (this) {
            pending = step;
        }
        if (pending != null) {
            pending.cancel(true);
        }
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        cancelStep();
        cancelExchange();
        return cancelled;
    }

    @Override
    public <U> CompletableFuture<U> newIncompleteFuture() {
        return new CompletableFuture<>(); // derived stages are plain futures (their cancel does not reach here)
    }

    private static String millis(long nanos) {
        Duration d = Duration.ofNanos(nanos);
        return d.toMillis() % 1000 == 0 ? d.toSeconds() + "s" : d.toMillis() + "ms";
    }
}
