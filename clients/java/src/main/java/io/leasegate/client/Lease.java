package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * One grant of a lock, of permits of a semaphore, or of the leadership of an election (which
 * {@link Leadership} wraps): its renewal (by hand or in the background),
 * its loss and its release.
 *
 * <p><b>When a lease is lost.</b> The client cannot see the server's clock, so it bounds the lease
 * with its own monotonic clock ({@link System#nanoTime}): the lease is trusted until its TTL after
 * the moment the last successful renewal (or the acquire) was <em>sent</em>, less a margin
 * ({@link #lossMargin}: a tenth of the TTL, at most one second). The server started counting later
 * than that, so the client gives up first, before the server can grant the lock to anyone else, even
 * when the timer that says so runs late by up to the margin. A lease is lost when a renewal is
 * answered {@code not_holder} (it expired, was force-released or revoked), or when that bound passes
 * without a successful renewal (the servers could not be reached, or this process was paused). Then
 * {@link #isValid()} turns false at once (it is computed on each call), the lease's listeners are told
 * once, {@link #lost()} completes, and renewals stop.
 *
 * <p>A lease is bounded this way also without background renewal: its listeners are told when its
 * time runs out. {@link #keepAlive()} starts the background renewal (Redisson's watchdog), every
 * third of the TTL; a renewal that finds no server is retried on every server until the bound.
 *
 * <p>Thread-safe. {@link #toString()} never shows the lease id, which is a credential.
 */
public final class Lease implements AutoCloseable {
    private final LeasegateClient client;
    private final Transport transport;
    private final String server;
    private final Kind kind;
    private final LockMode mode;
    private final Integer limit;
    private final int permits;
    private final String name;
    private final String owner;
    private final String leaseId;
    private final long token;
    private final JsonNode metadata;
    private final List<LeaseLostListener> listeners = new CopyOnWriteArrayList<>();
    private final CompletableFuture<LeaseLostException> lostFuture = new CompletableFuture<>();

    // Guarded by this.
    private long ttlNanos; // as the server last confirmed it
    private long deadline; // nanoTime: the send time of the last successful renewal, plus ttlNanos
    private int count; // reentry levels, as the server last said
    private JsonNode value; // a lock's value (as granted, then written), a leader's (as campaigned, then proclaimed)
    private long valueVersion;
    private LeaseLostException lost;
    private boolean ending; // release began: a renewal failing now is no loss
    private boolean watching;
    private Future<?> renewalTimer;
    private Future<?> deadlineTimer;

    Lease(LeasegateClient client, Transport.Answer grant, long sentNanos, Kind kind) {
        JsonNode body = grant.body();
        this.client = client;
        this.transport = client.transport();
        this.server = grant.server();
        this.kind = kind;
        this.mode = kind != Kind.LOCK ? null : "read".equals(body.path("mode").asText("write")) ? LockMode.READ : LockMode.WRITE;
        this.limit = kind == Kind.SEMAPHORE && body.has("limit") ? body.get("limit").asInt() : null;
        this.permits = kind == Kind.SEMAPHORE ? body.path("permits").asInt(1) : 0; // (1: a server older than permits)
        this.name = text(body, "name");
        this.owner = text(body, "owner");
        this.leaseId = text(body, "lease");
        this.token = Tokens.fromJson(body, "token");
        this.metadata = body.has("metadata") ? body.get("metadata") : Transport.JSON.createObjectNode();
        this.count = body.path("count").asInt(1);
        synchronized (this) {
            this.value = kind == Kind.SEMAPHORE ? null : body.has("value") ? body.get("value") : NullNode.getInstance();
            this.valueVersion = body.path("value_version").asLong(0);
            this.ttlNanos = TimeUnit.MILLISECONDS.toNanos(body.path("ttl_ms").asLong());
            this.deadline = sentNanos + ttlNanos;
            armDeadline();
        }
    }

    private static String text(JsonNode body, String field) {
        JsonNode value = body.get(field);
        if (value == null || !value.isTextual()) {
            throw new LeasegateException("the server's grant has no '" + field + "'", 0, null, body);
        }
        return value.asText();
    }

    /** The lock's (or semaphore's) name. */
    public String name() {
        return name;
    }

    /** The owner label the lease was granted under. */
    public String owner() {
        return owner;
    }

    /** The fencing token: compare with {@link Tokens#compare}, print with {@link Tokens#toString(long)}. */
    public long token() {
        return token;
    }

    /**
     * The lease id: the secret that renews, releases and writes through the guard. Send it only to
     * leasegate (in {@code Fencing-Lease}, see {@link #headers()}).
     */
    public String leaseId() {
        return leaseId;
    }

    /** WRITE or READ for a lock; null for permits of a semaphore or a leadership. */
    public LockMode mode() {
        return mode;
    }

    /** True for permits of a semaphore. */
    public boolean isSemaphore() {
        return kind == Kind.SEMAPHORE;
    }

    /** True for the leadership of an election (its {@link Leadership}'s lease). */
    public boolean isElection() {
        return kind == Kind.ELECTION;
    }

    /** How many of the semaphore's permits the lease holds; 0 for a lock or a leadership. */
    public int permits() {
        return permits;
    }

    /**
     * A lock's value when it was granted (what the last writer left: JSON null when none), then as
     * {@link #setValue} wrote it; a leader's value as campaigned, then as proclaimed; null for
     * permits.
     */
    public synchronized JsonNode value() {
        return value;
    }

    /** The version of the lock's value when granted (0: never written), then as {@link #setValue} left it. */
    public synchronized long valueVersion() {
        return valueVersion;
    }

    /**
     * Writes the lock's value ({@code PUT /v1/locks/{name}/value}): only the lease that holds the lock
     * now, as its writer, can. Any JSON-mappable object (Jackson); null clears it. Returns the new
     * version. A write whose answer was lost is sent again with the same {@code request_id} (one
     * per call): the server answers it with the first write's version and writes nothing again.
     *
     * @throws StaleTokenException when this lease does not hold the lock now ({@code body().get("reason")}:
     *     released, expired, superseded, revoked, read_lease...); nothing changed
     * @throws LeasegateException 413 {@code payload_too_large} for a value above the server's --max-value-bytes
     */
    public long setValue(Object value) {
        return LeasegateClient.join(setValueAsync(value, null));
    }

    /**
     * {@link #setValue}, only when the value's version is {@code version} now: a read-modify-write
     * no other write can slip into.
     *
     * @throws VersionMismatchException when it is not ({@code body().get("value_version")})
     */
    public long setValueIf(Object value, long version) {
        return LeasegateClient.join(setValueAsync(value, version));
    }

    /** {@link #setValue} (version null) or {@link #setValueIf} as a future. */
    public CompletableFuture<Long> setValueAsync(Object value, Long version) {
        if (kind != Kind.LOCK) {
            return CompletableFuture.failedFuture(new UnsupportedOperationException(kind == Kind.SEMAPHORE
                    ? "a lock's value; this is a semaphore's lease" : "a lock's value; a leader sets its own with proclaim"));
        }
        JsonNode tree = Transport.JSON.valueToTree(value);
        // One request_id for every attempt: a retry whose first answer was lost is answered with
        // that write's version, not written again.
        ObjectNode body = Transport.JSON.createObjectNode().put("lease", leaseId);
        body.set("value", tree == null ? NullNode.getInstance() : tree);
        body.put("request_id", UUID.randomUUID().toString());
        if (version != null) {
            body.put("if_version", version);
        }
        return transport.call("PUT", Transport.lockPath(name, "value", Kind.LOCK), body).map(answer -> {
            long written = answer.body().path("value_version").asLong();
            synchronized (this) {
                this.value = body.get("value");
                this.valueVersion = written;
            }
            return written;
        });
    }

    /**
     * A leader's proclamation ({@link Leadership#proclaim}): sent even when the lease is known to
     * have ended, for the server to say not_leader as to any lease that does not lead now. A
     * not_leader other than a resignation's means the leadership is lost.
     */
    CompletableFuture<Void> proclaimAsync(Object value) {
        JsonNode tree = Transport.JSON.valueToTree(value);
        JsonNode sent = tree == null ? NullNode.getInstance() : tree;
        ObjectNode body = Transport.JSON.createObjectNode().put("lease", leaseId);
        body.set("value", sent);
        return transport.call("POST", Transport.lockPath(name, "proclaim", Kind.ELECTION), body).handle((answer, error) -> {
            if (error == null) {
                synchronized (this) {
                    this.value = sent;
                }
                return null;
            }
            Throwable cause = Transport.unwrap(error);
            String reason = cause instanceof NotLeaderException ? ((NotLeaderException) cause).body().path("reason").asText() : "";
            if (cause instanceof NotLeaderException && !"released".equals(reason)) {
                lose("the server says the lease no longer leads '" + name + "' (" + reason + ")", cause, false);
            }
            throw LeasegateClient.rethrow(cause);
        });
    }

    /** The semaphore's number of permits; null for a lock. */
    public Integer limit() {
        return limit;
    }

    /** The metadata the grant carries (an object, never null). */
    public JsonNode metadata() {
        return metadata;
    }

    /** The URL of the server that granted the lease; {@link #request} goes there. */
    public String server() {
        return server;
    }

    /** The TTL as the server last confirmed it. */
    public synchronized Duration ttl() {
        return Duration.ofNanos(ttlNanos);
    }

    /** The reentry count as the server last told it (1 for a fresh grant). */
    public synchronized int count() {
        return count;
    }

    /** The header that proves this lease to the guard (which drops it before forwarding): {@code Fencing-Lease}. */
    public Map<String, String> headers() {
        return Map.of("Fencing-Lease", leaseId);
    }

    /**
     * How much earlier than the TTL's end (counted from the send time of the last successful
     * renewal) the client stops trusting a lease of this TTL: a tenth of it, at most one second.
     * It covers a timer that fires late and the drift between the client's and the server's clocks.
     */
    public static Duration lossMargin(Duration ttl) {
        return Duration.ofNanos(marginNanos(ttl.toNanos()));
    }

    private static long marginNanos(long ttl) {
        return Math.min(ttl / 10, TimeUnit.SECONDS.toNanos(1));
    }

    private long trustedUntil() { // holds this
        return deadline - marginNanos(ttlNanos);
    }

    /**
     * True while the client can vouch that the server still holds this lease: not released, not
     * lost, and within the bound described above. Computed from the clock on each call, so it is
     * false from the moment the bound passes, also right after this process was paused.
     */
    public synchronized boolean isValid() {
        return !ending && lost == null && System.nanoTime() - trustedUntil() < 0;
    }

    /**
     * Throws LeaseLostException unless {@link #isValid()}: call it before a step that must not run
     * without the lock (writes through the guard are checked there anyway).
     */
    public void check() {
        if (!isValid()) {
            loseByDeadline();
            throw lostError();
        }
    }

    /** The loss, once the lease was lost; else null. */
    public synchronized LeaseLostException lostException() {
        return lost;
    }

    /**
     * Completes (never exceptionally) with the loss when the lease is lost: the CompletableFuture
     * form of a {@link LeaseLostListener}, like etcd's {@code Session.Done()}. Never completes for a
     * lease released while it was valid.
     */
    public CompletableFuture<LeaseLostException> lost() {
        return lostFuture.copy();
    }

    /**
     * Adds a listener, told once when the lease is lost (at once, on the callback executor, if it
     * already was).
     */
    public Lease addLostListener(LeaseLostListener listener) {
        listeners.add(listener);
        LeaseLostException loss = lostException();
        if (loss != null && listeners.remove(listener)) {
            notifyOne(listener, loss);
        }
        return this;
    }

    /** Removes a listener added before; true if it was there. */
    public boolean removeLostListener(LeaseLostListener listener) {
        return listeners.remove(listener);
    }

    /**
     * Starts the background renewal, every third of the TTL, until release or loss; returns this
     * lease. A second call does nothing.
     */
    public Lease keepAlive() {
        synchronized (this) {
            if (watching || ending || lost != null) {
                return this;
            }
            watching = true;
            scheduleRenewal();
        }
        return this;
    }

    private void scheduleRenewal() { // holds this
        long due = Math.max(0, deadline - ttlNanos * 2 / 3 - System.nanoTime());
        renewalTimer = transport.timer.schedule(this::watch, due, TimeUnit.NANOSECONDS);
    }

    private void watch() {
        renewAsync(null).whenComplete((ok, error) -> {
            if (error == null) {
                synchronized (this) {
                    if (watching && !ending && lost == null) {
                        scheduleRenewal();
                    }
                }
                return;
            }
            Throwable cause = Transport.unwrap(error);
            if (!(cause instanceof LeaseLostException)) {
                lose("the lease on '" + name + "' cannot be renewed: " + cause.getMessage(), cause, false);
            }
        });
    }

    /** Arms the timer that declares the lease lost when its bound passes unrenewed. */
    private void armDeadline() { // holds this
        if (deadlineTimer != null) {
            deadlineTimer.cancel(false);
        }
        long due = Math.max(0, trustedUntil() - System.nanoTime());
        deadlineTimer = transport.timer.schedule(this::loseByDeadline, due, TimeUnit.NANOSECONDS);
    }

    /**
     * Extends the lease by its TTL (or by {@code ttl}, which then becomes its TTL). Connection
     * failures and 503 are retried on every server until the lease would be lost.
     *
     * @throws LeaseLostException (after telling the listeners) when the server answers
     *     {@code not_holder} or no renewal succeeds in time
     * @throws BadRequestException for a TTL the server refuses
     */
    public void renew() {
        LeasegateClient.join(renewAsync(null));
    }

    /** {@link #renew()} with a new TTL. */
    public void renew(Duration ttl) {
        LeasegateClient.join(renewAsync(ttl));
    }

    /** {@link #renew(Duration)} as a future; {@code ttl} null keeps the lease's own. */
    public CompletableFuture<Void> renewAsync(Duration ttl) {
        ObjectNode body = Transport.JSON.createObjectNode().put("lease", leaseId);
        if (ttl != null) {
            body.put("ttl_ms", Durations.toMillis(ttl, "ttl"));
        }
        long until;
        synchronized (this) {
            if (lost != null || ending) {
                return CompletableFuture.failedFuture(lostError());
            }
            until = trustedUntil();
        }
        Op<Transport.Answer> call = transport.call("POST", Transport.lockPath(name, "renew", kind), body, until, null, true);
        return call.handle((answer, error) -> {
            if (error == null) {
                synchronized (this) {
                    if (lost == null && !ending && System.nanoTime() - trustedUntil() < 0) {
                        ttlNanos = TimeUnit.MILLISECONDS.toNanos(answer.body().path("ttl_ms").asLong());
                        deadline = answer.sentNanos() + ttlNanos;
                        armDeadline();
                        return null;
                    }
                }
                loseByDeadline();
                throw lostError();
            }
            Throwable cause = Transport.unwrap(error);
            if (cause instanceof NotHolderException) {
                lose("the server says the lease on '" + name + "' no longer holds it ("
                        + ((NotHolderException) cause).body().path("reason").asText(cause.getMessage()) + ")", cause, false);
            } else if (cause instanceof LeasegateException
                    && (((LeasegateException) cause).status() == 0 || ((LeasegateException) cause).status() == 503)) {
                lose("no renewal of the lease on '" + name + "' succeeded within its TTL (" + cause.getMessage() + ")", cause, false);
            } else {
                throw LeasegateClient.rethrow(cause);
            }
            throw lostError();
        });
    }

    /**
     * Takes the lock once more with this lease (reentry, not for a permit): the count goes up by
     * one, the token stays, and the lease is extended by its TTL. Never waits. Each level is given
     * back by one {@link #leave()}; the last level by {@link #release()}.
     *
     * @return the new count
     * @throws LeaseLostException when the server says the lease no longer holds the lock
     * @throws ModeConflictException never for this call (it keeps the lease's mode)
     */
    public int reenter() {
        return LeasegateClient.join(reenterAsync());
    }

    /** {@link #reenter()} as a future. */
    public CompletableFuture<Integer> reenterAsync() {
        if (kind != Kind.LOCK) {
            return CompletableFuture.failedFuture(new UnsupportedOperationException(
                    kind == Kind.SEMAPHORE ? "a permit of a semaphore has no reentry" : "a leadership has no reentry"));
        }
        synchronized (this) {
            if (lost != null || ending) {
                return CompletableFuture.failedFuture(lostError());
            }
        }
        ObjectNode body = Transport.JSON.createObjectNode().put("owner", owner).put("lease", leaseId);
        return transport.call("POST", Transport.lockPath(name, "acquire", Kind.LOCK), body).handle((answer, error) -> {
            if (error == null) {
                synchronized (this) {
                    count = answer.body().path("count").asInt(count + 1);
                    if (lost == null && !ending && System.nanoTime() - trustedUntil() < 0) {
                        deadline = answer.sentNanos() + ttlNanos;
                        armDeadline();
                    }
                    return count;
                }
            }
            throw endedError(Transport.unwrap(error), "reentry");
        });
    }

    /**
     * Gives back one reentry level (a release that leaves the lease holding the lock while the
     * count stays above 0); returns the count left. When it reaches 0 the lease has ended, as by
     * {@link #release()}.
     *
     * @throws LeaseLostException when the server says the lease had already ended
     */
    public int leave() {
        return LeasegateClient.join(leaveAsync());
    }

    /** {@link #leave()} as a future. */
    public CompletableFuture<Integer> leaveAsync() {
        synchronized (this) {
            if (count <= 1 || ending || lost != null) {
                return releaseAsync().thenApply(v -> 0);
            }
        }
        ObjectNode body = Transport.JSON.createObjectNode().put("lease", leaseId);
        return transport.call("POST", Transport.lockPath(name, "release", kind), body).handle((answer, error) -> {
            if (error == null) {
                int left = answer.body().path("count").asInt(0);
                synchronized (this) {
                    count = left;
                    if (left == 0) {
                        endQuietly();
                    }
                }
                return left;
            }
            throw endedError(Transport.unwrap(error), "release");
        });
    }

    /** The error of a reentry or level release that failed: a loss for not_holder, else as it is. */
    private RuntimeException endedError(Throwable cause, String what) {
        if (cause instanceof NotHolderException) {
            lose("the lease on '" + name + "' had ended before its " + what + " ("
                    + ((NotHolderException) cause).body().path("reason").asText() + ")", cause, false);
            return lostError();
        }
        return LeasegateClient.rethrow(cause);
    }

    /**
     * Gives the lock back (every reentry level) and stops the background renewal; a second call does
     * nothing. A lease already lost gets one short try per server, errors ignored: the server frees
     * the lock at its TTL anyway, and an exit must not hang on a dead server.
     *
     * @throws LeaseLostException when the server says the lease had already ended (expired, taken over)
     * @throws UnavailableException when no server answered in time
     */
    public void release() {
        LeasegateClient.joinUninterruptibly(releaseAsync());
    }

    /** {@link #release()} as a future. */
    public CompletableFuture<Void> releaseAsync() {
        boolean trusted;
        int levels;
        synchronized (this) {
            if (ending) {
                return CompletableFuture.completedFuture(null);
            }
            trusted = lost == null && System.nanoTime() - trustedUntil() < 0;
            levels = count;
            endQuietly();
        }
        client.forget(this);
        if (!trusted) {
            return transport.courtesyRelease(name, leaseId, kind);
        }
        return releaseLevels(Math.max(1, levels));
    }

    /** Releases `levels` reentry levels one after another (the contract has no release of all at once). */
    private CompletableFuture<Void> releaseLevels(int levels) {
        ObjectNode body = Transport.JSON.createObjectNode().put("lease", leaseId);
        return transport.call("POST", Transport.lockPath(name, "release", kind), body).handle((answer, error) -> {
            if (error == null) {
                int left = answer.body().path("count").asInt(0);
                return left > 0 && levels > 1 ? releaseLevels(Math.min(levels - 1, left)) : CompletableFuture.<Void>completedFuture(null);
            }
            Throwable cause = Transport.unwrap(error);
            // The lease no longer holds it (a resignation says so as not_leader, in the election's words).
            if (!(cause instanceof NotHolderException || (kind == Kind.ELECTION && cause instanceof NotLeaderException))) {
                throw LeasegateClient.rethrow(cause);
            }
            String reason = ((LeasegateException) cause).body().path("reason").asText();
            if ("released".equals(reason)) { // a retry after a release whose answer was lost
                return CompletableFuture.<Void>completedFuture(null);
            }
            lose("the lease on '" + name + "' had ended before its release (" + reason + ")", cause, true);
            throw lostError();
        }).thenCompose(f -> f);
    }

    /**
     * Ends the lease: {@link #release()}, then throws LeaseLostException if the lease was lost
     * while it was held (so that a try-with-resources block learns that its work was not protected
     * all along; the block's own exception, if any, keeps it as a suppressed one).
     */
    @Override
    public void close() {
        if (!isValid()) {
            loseByDeadline();
        }
        try {
            release();
        } catch (LeaseLostException e) {
            // recorded in lostException(); thrown below
        }
        LeaseLostException loss = lostException();
        if (loss != null) {
            throw new LeaseLostException(loss.getMessage(), this, loss.getCause());
        }
    }

    /**
     * Sends a request carrying this lease ({@code Fencing-Lease}) to the server that granted it: a
     * write through the guard, e.g. {@code lease.request("PUT", "/store/orders/42", bytes)}. Not
     * retried: a write is the caller's call. Every status is a response (409 {@code stale_token}
     * once the lease is gone).
     *
     * @param body the body, or null
     * @throws UnavailableException when no answer came in the client's timeout
     */
    public HttpResponse<byte[]> request(String method, String path, byte[] body) {
        return LeasegateClient.join(requestAsync(method, path, body));
    }

    /** {@link #request} as a future. */
    public CompletableFuture<HttpResponse<byte[]>> requestAsync(String method, String path, byte[] body) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(server + path))
                .timeout(Duration.ofNanos(transport.timeoutNanos))
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofByteArray(body))
                .header("Fencing-Lease", leaseId);
        return transport.exchange(request).handle((response, error) -> {
            if (error == null) {
                return response;
            }
            Throwable cause = Transport.unwrap(error);
            String line = Transport.describe(server, cause);
            throw Transport.isTlsFailure(cause) ? new TlsVerificationException("certificate verification failed: " + line, cause)
                    : new UnavailableException("no leasegate server answered: " + line, cause);
        });
    }

    // Loss -------------------------------------------------------------------------------------

    private void loseByDeadline() {
        boolean due;
        synchronized (this) {
            due = System.nanoTime() - trustedUntil() >= 0;
        }
        if (due) {
            lose("no renewal of the lease on '" + name + "' succeeded within its TTL", null, false);
        }
    }

    /**
     * Records the loss and tells the listeners, once. Ignored once release began (unless the
     * release itself found it): a renewal racing a release is no loss.
     */
    private void lose(String message, Throwable cause, boolean byRelease) {
        LeaseLostException loss = new LeaseLostException(message, this, cause);
        synchronized (this) {
            if (lost != null || (ending && !byRelease)) {
                return;
            }
            lost = loss;
            stopTimers();
        }
        client.forget(this);
        lostFuture.complete(loss);
        for (LeaseLostListener listener : listeners) {
            if (listeners.remove(listener)) {
                notifyOne(listener, loss);
            }
        }
    }

    private void notifyOne(LeaseLostListener listener, LeaseLostException loss) {
        client.callbacks().execute(() -> {
            try {
                listener.leaseLost(loss);
            } catch (RuntimeException e) {
                Thread.currentThread().getUncaughtExceptionHandler().uncaughtException(Thread.currentThread(), e);
            }
        });
    }

    /** A fresh LeaseLostException to throw (the recorded one went to the listeners), or for a lease
     * its holder released, one that says so. */
    private LeaseLostException lostError() {
        LeaseLostException loss = lostException();
        if (loss == null) {
            return new LeaseLostException("the lease on '" + name + "' was released", this, null);
        }
        return new LeaseLostException(loss.getMessage(), this, loss.getCause());
    }

    private void endQuietly() { // holds this
        ending = true;
        stopTimers();
    }

    private void stopTimers() { // holds this
        watching = false;
        if (renewalTimer != null) {
            renewalTimer.cancel(false);
        }
        if (deadlineTimer != null) {
            deadlineTimer.cancel(false);
        }
    }

    /** Releases a lease the client is closing with: one short try per server, never fails. */
    CompletableFuture<Void> abandon() {
        synchronized (this) {
            if (ending) {
                return CompletableFuture.completedFuture(null);
            }
            endQuietly();
        }
        return transport.courtesyRelease(name, leaseId, kind);
    }

    @Override
    public String toString() {
        return "Lease[" + (kind == Kind.SEMAPHORE ? "semaphore " : kind == Kind.ELECTION ? "election "
                : mode == LockMode.READ ? "read " : "") + name
                + " token=" + Tokens.toString(token) + " owner=" + owner + " lease=<redacted> "
                + (isValid() ? "valid" : lostException() != null ? "lost" : "ended") + "]";
    }
}
