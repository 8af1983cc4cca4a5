package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * A client of one leasegate lock space, served by one server or several (a cluster on etcd, or
 * servers behind one name): thread-safe, one per process is enough.
 *
 * <pre>{@code
 * try (LeasegateClient client = LeasegateClient.builder().servers("http://127.0.0.1:7400").build()) {
 *     LeasegateLock lock = client.getLock("orders/42");
 *     long token = lock.lockAndGetToken();
 *     try {
 *         write(order, token);
 *     } finally {
 *         lock.unlock();
 *     }
 * }
 * }</pre>
 *
 * <p>Every call that reaches the server retries on the next server when one cannot be reached,
 * times out or answers 503, backing off after each round, for {@code retryFor} (an acquire for its
 * wait when that is longer); see {@link Transport}. Every acquire sends a {@code request_id} and the
 * same one with each of its retries, so that a retry after a lost answer gets that grant back
 * rather than {@code lock_held} against itself.
 *
 * <p>{@link #close()} gives back every lease still held (one short try per server) and stops the
 * client's threads; they are daemon threads, so an unclosed client does not keep the JVM alive.
 */
public final class LeasegateClient implements AutoCloseable {
    /** The server used when neither the builder nor {@code $LEASEGATE_SERVER} names one. */
    public static final String DEFAULT_SERVER = "http://127.0.0.1:7400";

    /** A wait this long (about 146 years) or longer is no deadline at all. */
    private static final long FOREVER_NANOS = 1L << 62;

    private final Transport transport;
    private final String owner;
    private final ScheduledThreadPoolExecutor timer;
    private final ExecutorService callbacks;
    private final Set<Lease> leases = ConcurrentHashMap.newKeySet(); // held: given back at close
    private volatile boolean closed;

    private LeasegateClient(Builder b) {
        List<String> servers = b.servers;
        if (servers == null) {
            String env = System.getenv("LEASEGATE_SERVER");
            servers = Arrays.asList((env == null || env.isBlank() ? DEFAULT_SERVER : env).split(","));
        }
        List<String> urls = new ArrayList<>();
        for (String s : servers) {
            if (!s.isBlank()) {
                urls.add(normalize(s.strip()));
            }
        }
        if (urls.isEmpty()) {
            throw new IllegalArgumentException("no server URL given");
        }
        String key = b.key != null ? b.key : emptyToNull(System.getenv("LEASEGATE_KEY"));
        SSLContext ssl = b.ssl;
        if (ssl == null) {
            Path ca = b.caFile != null ? b.caFile
                    : emptyToNull(System.getenv("LEASEGATE_CACERT")) != null ? Path.of(System.getenv("LEASEGATE_CACERT")) : null;
            ssl = ca == null ? null : trusting(ca);
        }
        this.owner = b.owner != null ? b.owner : defaultOwner();
        AtomicInteger n = new AtomicInteger();
        this.timer = new ScheduledThreadPoolExecutor(1, r -> daemon(r, "leasegate-timer"));
        this.timer.setRemoveOnCancelPolicy(true);
        this.callbacks = b.callbacks != null ? b.callbacks
                : Executors.newCachedThreadPool(r -> daemon(r, "leasegate-callback-" + n.incrementAndGet()));
        this.transport = new Transport(urls, ssl, key, b.timeout, b.retryFor, b.firstByteTimeout, timer);
    }

    /** A client configured from the environment: {@code $LEASEGATE_SERVER}, {@code $LEASEGATE_KEY}, {@code $LEASEGATE_CACERT}. */
    public static LeasegateClient create() {
        return builder().build();
    }

    public static Builder builder() {
        return new Builder();
    }

    /** How a client is made; every setting has a default. */
    public static final class Builder {
        private List<String> servers;
        private String owner;
        private Duration timeout = Duration.ofSeconds(5);
        private Duration retryFor = Duration.ofSeconds(5);
        private Duration firstByteTimeout = Duration.ofSeconds(2);
        private String key;
        private Path caFile;
        private SSLContext ssl;
        private ExecutorService callbacks;

        private Builder() {
        }

        /**
         * The base URLs of servers serving one lock space (http or https, a path prefix is kept),
         * or one string of them joined by commas. Default: {@code $LEASEGATE_SERVER}, else
         * {@value LeasegateClient#DEFAULT_SERVER}.
         */
        public Builder servers(String... servers) {
            List<String> all = new ArrayList<>();
            for (String s : servers) {
                all.addAll(Arrays.asList(s.split(",")));
            }
            this.servers = all;
            return this;
        }

        /** As {@link #servers(String...)}. */
        public Builder servers(List<String> servers) {
            return servers(servers.toArray(new String[0]));
        }

        /** The label others see on leases taken here (default: host name and pid). */
        public Builder owner(String owner) {
            this.owner = owner;
            return this;
        }

        /** How long one request may take, beyond its long-poll wait (default 5 s). */
        public Builder timeout(Duration timeout) {
            Durations.toMillis(timeout, "timeout");
            this.timeout = timeout;
            return this;
        }

        /** How long a call keeps retrying when no server answers (default 5 s). */
        public Builder retryFor(Duration retryFor) {
            Durations.toMillis(retryFor, "retryFor");
            this.retryFor = retryFor;
            return this;
        }

        /**
         * The first-byte watch (default 2 s, at least 100 ms): a server that has not accepted the
         * connection within it is left for the next; one that has not begun its answer within it
         * is asked {@code GET /readyz} (bounded by the same timeout and by the request's own). If
         * it says it is ready (200, or 404 from a server too old to have it), it is working on the
         * request (a long-poll waits there for its grant) and the wait goes on, to be asked again
         * a first-byte timeout later; if it does not answer or answers 503, the request is given
         * up for the next server (an acquire keeps its request_id). A paused or unready gateway
         * so costs about twice this, not the {@link #timeout}. It is also the connect timeout (or
         * the timeout, when shorter) of the lease's own requests ({@link Lease#request}).
         */
        public Builder firstByteTimeout(Duration firstByteTimeout) {
            if (Durations.toMillis(firstByteTimeout, "firstByteTimeout") < 100) {
                throw new IllegalArgumentException("firstByteTimeout: at least 100ms, not " + firstByteTimeout);
            }
            this.firstByteTimeout = firstByteTimeout;
            return this;
        }

        /**
         * The API key for a server run with {@code --auth-file}, sent as {@code Authorization:
         * Bearer KEY} with every request. Default: {@code $LEASEGATE_KEY}, else none.
         */
        public Builder apiKey(String key) {
            this.key = key;
            return this;
        }

        /**
         * A PEM file of the CAs that https servers' certificates must be signed by (a private CA,
         * as for the server's {@code --tls-cert}). Default: {@code $LEASEGATE_CACERT}, else the
         * JDK's CAs. Certificates and host names are always verified.
         */
        public Builder caFile(Path caFile) {
            this.caFile = caFile;
            return this;
        }

        /** The TLS context to use instead of {@link #caFile}. */
        public Builder sslContext(SSLContext ssl) {
            this.ssl = ssl;
            return this;
        }

        /**
         * Where lost-lease listeners run (default: a pool of daemon threads of the client's own).
         * Not shut down by {@link LeasegateClient#close()} when given here.
         */
        public Builder callbackExecutor(ExecutorService callbacks) {
            this.callbacks = callbacks;
            return this;
        }

        public LeasegateClient build() {
            return new LeasegateClient(this);
        }
    }

    /** The servers' base URLs, in the order they are tried. */
    public List<String> servers() {
        return transport.servers();
    }

    /** The owner label of leases taken without one of their own. */
    public String owner() {
        return owner;
    }

    // Locks of java.util.concurrent -------------------------------------------------------------

    /**
     * A {@link java.util.concurrent.locks.Lock} on the lock {@code name}, held per thread and
     * reentrant, with background renewal (Redisson's {@code getLock}). Default options: TTL 30 s.
     */
    public LeasegateLock getLock(String name) {
        return getLock(name, AcquireOptions.defaults());
    }

    /** As {@link #getLock(String)}, with the TTL, owner, metadata and lock-delay of {@code options} (its wait is ignored). */
    public LeasegateLock getLock(String name, AcquireOptions options) {
        return new LeasegateLock(this, name, options, null);
    }

    /** A read-write lock on {@code name}: readers share it, a writer holds it alone (Redisson's {@code getReadWriteLock}). */
    public LeasegateReadWriteLock getReadWriteLock(String name) {
        return getReadWriteLock(name, AcquireOptions.defaults());
    }

    /** As {@link #getReadWriteLock(String)}, with {@code options} for both locks (their mode is set by each). */
    public LeasegateReadWriteLock getReadWriteLock(String name, AcquireOptions options) {
        return new LeasegateReadWriteLock(this, name, options);
    }

    /** A semaphore of {@code limit} permits (1..10000), each a lease with background renewal. */
    public LeasegateSemaphore getSemaphore(String name, int limit) {
        return getSemaphore(name, limit, AcquireOptions.defaults());
    }

    /** As {@link #getSemaphore(String, int)}, with the TTL, owner and metadata of {@code options}. */
    public LeasegateSemaphore getSemaphore(String name, int limit, AcquireOptions options) {
        return new LeasegateSemaphore(this, name, limit, options);
    }

    // Leases -----------------------------------------------------------------------------------

    /**
     * Takes the lock {@code name}, waiting up to the options' wait in its first-come first-served
     * queue; returns the lease (renewed in the background only with {@code keepAlive(true)}).
     *
     * @throws LockHeldException when not granted within the wait
     * @throws UnavailableException when no server answered in time
     * @throws InterruptedException when interrupted while waiting: the wait is given up (the
     *     connection closed, so the server drops it from the queue)
     */
    public Lease acquire(String name, AcquireOptions options) throws InterruptedException {
        return await(acquireAsync(name, options));
    }

    /** {@link #acquire} as a future; cancelling it gives up the wait (and a grant that crossed it). */
    public CompletableFuture<Lease> acquireAsync(String name, AcquireOptions options) {
        return take(name, 0, options, saturatedNanos(options.waitTime()), false, options.requestId());
    }

    /**
     * Takes one of the {@code limit} permits of the semaphore {@code name}: a lease with its own
     * token, renewed and released like a lock's.
     *
     * @throws SemaphoreFullException when no permit came within the wait
     * @throws LimitMismatchException when the semaphore has holders or waiters under another limit
     */
    public Lease acquirePermit(String name, int limit, AcquireOptions options) throws InterruptedException {
        return await(acquirePermitAsync(name, limit, options));
    }

    /** {@link #acquirePermit} as a future. */
    public CompletableFuture<Lease> acquirePermitAsync(String name, int limit, AcquireOptions options) {
        checkLimit(limit);
        return take(name, limit, options, saturatedNanos(options.waitTime()), false, options.requestId());
    }

    private static long saturatedNanos(Duration d) {
        return d.compareTo(Duration.ofNanos(FOREVER_NANOS)) >= 0 ? FOREVER_NANOS : d.toNanos();
    }

    static void checkLimit(int limit) {
        if (limit < 1 || limit > 10000) {
            throw new IllegalArgumentException("limit: the number of permits is 1..10000, not " + limit);
        }
    }

    /**
     * The acquire of a lock or (semaphore) of a permit: long-polls in polls of at most an hour,
     * then, for a grant that came long after its acquire was sent, confirms it with a renewal.
     *
     * @param limit a semaphore's number of permits, or 0 for a lock
     * @param waitNanos how long to wait in the queue, unless forever
     * @param requestId the caller's request_id, or null for a random one
     */
    Op<Lease> take(String name, int limit, AcquireOptions options, long waitNanos, boolean forever, String requestId) {
        return take(limit > 0 ? Kind.SEMAPHORE : Kind.LOCK, name, limit, null, options, waitNanos, forever, requestId);
    }

    /**
     * The acquire of a lock, of permits of a semaphore (limit), or the campaign of an election
     * (value: the leader's value), as {@link #take(String, int, AcquireOptions, long, boolean, String)}.
     */
    Op<Lease> take(Kind kind, String name, int limit, JsonNode value, AcquireOptions options, long waitNanos, boolean forever,
                   String requestId) {
        forever = forever || waitNanos >= FOREVER_NANOS; // nanoTime arithmetic stays far from overflow
        Op<Lease> op = new Op<>();
        if (closed) {
            op.completeExceptionally(new IllegalStateException("the client is closed"));
            return op;
        }
        ObjectNode body = Transport.JSON.createObjectNode()
                .put("owner", options.owner() != null ? options.owner() : owner)
                .put("ttl_ms", Durations.toMillis(options.ttl(), "ttl"))
                .put("request_id", requestId != null ? requestId : UUID.randomUUID().toString());
        if (options.metadata() != null) {
            body.set("metadata", options.metadata());
        }
        if (kind == Kind.ELECTION) {
            String refused = options.mode() == LockMode.READ ? "mode(READ)" : options.lockDelay() != null ? "lockDelay"
                    : options.permits() != 0 ? "permits" : null;
            if (refused != null) {
                op.completeExceptionally(new IllegalArgumentException(refused + ": a lock's or a semaphore's, not an election's"));
                return op;
            }
            body.set("value", value);
        } else if (kind == Kind.SEMAPHORE) {
            body.put("limit", limit);
            if (options.permits() > limit) {
                op.completeExceptionally(new IllegalArgumentException(
                        "permits: 1..limit (" + limit + "), not " + options.permits()));
                return op;
            }
            if (options.permits() != 0) {
                body.put("permits", options.permits());
            }
        } else {
            if (options.permits() != 0) {
                op.completeExceptionally(new IllegalArgumentException("permits: a semaphore's, not a lock's"));
                return op;
            }
            if (options.mode() == LockMode.READ) {
                body.put("mode", "read");
            }
            if (options.lockDelay() != null) {
                body.put("lock_delay_ms", Durations.toMillis(options.lockDelay(), "lockDelay"));
            }
        }
        long start = System.nanoTime();
        poll(op, name, kind, body, options, start, start + waitNanos, forever);
        return op;
    }

    private void poll(Op<Lease> op, String name, Kind kind, ObjectNode body, AcquireOptions options,
                      long start, long waitUntil, boolean forever) {
        long now = System.nanoTime();
        long pollUntil = forever || waitUntil - (now + Transport.MAX_POLL_NANOS) > 0 ? now + Transport.MAX_POLL_NANOS : waitUntil;
        long until = forever ? now + Math.max(Transport.MAX_POLL_NANOS, transport.retryForNanos)
                : start + Math.max(waitUntil - start, transport.retryForNanos);
        Op<Transport.Answer> call = transport.call("POST", Transport.lockPath(name, "acquire", kind), body, until,
                pollUntil, false);
        op.step(call);
        call.whenComplete((grant, error) -> {
            if (error != null) {
                Throwable cause = Transport.unwrap(error);
                if (cause instanceof LockHeldException && (forever || pollUntil - waitUntil < 0) && !op.isDone()) {
                    poll(op, name, kind, body, options, start, waitUntil, forever);
                } else {
                    op.completeExceptionally(cause);
                }
                return;
            }
            String lease = grant.body().path("lease").asText();
            if (op.isCancelled()) {
                transport.courtesyRelease(name, lease, kind);
                return;
            }
            long ttlNanos = TimeUnit.MILLISECONDS.toNanos(grant.body().path("ttl_ms").asLong());
            if (System.nanoTime() - start <= ttlNanos / 3) {
                grant(op, name, grant, start, kind, options);
                return;
            }
            // The grant was made at an unknown moment since the first attempt was sent: only the
            // send time of a renewal bounds it from below.
            Op<Transport.Answer> renewal = transport.call("POST", Transport.lockPath(name, "renew", kind),
                    Transport.JSON.createObjectNode().put("lease", lease));
            op.step(renewal);
            renewal.whenComplete((renewed, failure) -> {
                if (failure != null || op.isCancelled()) {
                    transport.courtesyRelease(name, lease, kind);
                    op.completeExceptionally(failure == null ? new CancellationException() : Transport.unwrap(failure));
                    return;
                }
                ObjectNode confirmed = ((ObjectNode) grant.body().deepCopy()).put("ttl_ms", renewed.body().path("ttl_ms").asLong());
                grant(op, name, new Transport.Answer(grant.server(), confirmed, renewed.sentNanos()), renewed.sentNanos(), kind,
                        options);
            });
        });
    }

    private void grant(Op<Lease> op, String name, Transport.Answer answer, long sent, Kind kind, AcquireOptions options) {
        Lease lease;
        try {
            lease = new Lease(this, answer, sent, kind);
        } catch (RuntimeException e) { // a grant without its fields, or a closed client: nobody may keep it
            transport.courtesyRelease(name, answer.body().path("lease").asText(), kind);
            op.completeExceptionally(e);
            return;
        }
        leases.add(lease);
        if (options.onLost() != null) {
            lease.addLostListener(options.onLost());
        }
        if (options.isKeepAlive()) {
            lease.keepAlive();
        }
        if (!op.complete(lease) || closed) { // cancelled meanwhile: nobody will release it
            lease.abandon();
            forget(lease);
        }
    }

    // Elections -------------------------------------------------------------------------------

    /**
     * Campaigns to lead the election {@code name} with {@code value} (any JSON-mappable object; null
     * is JSON null): what {@link #election} and observers show of the leader, such as its address.
     * It leads at once when nobody does and nobody waits; with the options' wait it waits in line
     * behind the candidates before it. The leadership is renewed in the background until
     * {@link Leadership#resign()} or its loss. The options' TTL, wait, owner, metadata, onLost and
     * requestId apply; a read mode, a lock-delay and permits are refused.
     *
     * @throws NotLeaderException (a LockHeldException) when not elected within the wait; its
     *     {@code body()} has {@code leader} and {@code candidates_total}
     * @throws InterruptedException when interrupted while waiting: the campaign leaves the line (the
     *     connection closes); a campaign is never answered a leadership it did not get
     */
    public Leadership campaign(String name, Object value, AcquireOptions options) throws InterruptedException {
        return await(campaignAsync(name, value, options));
    }

    /** {@link #campaign} as a future; cancelling it leaves the line. */
    public CompletableFuture<Leadership> campaignAsync(String name, Object value, AcquireOptions options) {
        JsonNode tree = Transport.JSON.valueToTree(value);
        return take(Kind.ELECTION, name, 0, tree == null ? NullNode.getInstance() : tree, options.keepAlive(true),
                saturatedNanos(options.waitTime()), false, options.requestId()).map(Leadership::new);
    }

    /**
     * The election's state: {name, leader: {owner, term, value, since_ms} or null, vacant_since_ms,
     * candidates: [{owner, since_ms}], candidates_total, last_token, index} (never a lease id). Any
     * name is valid: one nobody campaigned for has no leader.
     */
    public JsonNode election(String name) {
        return join(electionAsync(name));
    }

    public CompletableFuture<JsonNode> electionAsync(String name) {
        return transport.call("GET", Transport.lockPath(name, "", Kind.ELECTION), null).map(Transport.Answer::body);
    }

    /**
     * Follows the election {@code name}: see {@link ElectionObserver}. Nothing is sent until its
     * first {@code next()}; it keeps trying for the client's retryFor while no server answers.
     */
    public ElectionObserver observe(String name) {
        return observe(name, null);
    }

    /**
     * As {@link #observe(String)}, resuming after the event {@code lastEventId} (an earlier
     * observer's last {@link ElectionEvent#id()}): the first events returned are the ones after
     * it, none twice. Null starts from the election's state.
     */
    public ElectionObserver observe(String name, Long lastEventId) {
        if (closed) {
            throw new IllegalStateException("the client is closed");
        }
        return new ElectionObserver(transport, name, lastEventId, transport.retryForNanos);
    }

    // State and fences -------------------------------------------------------------------------

    /**
     * The lock's value, its version and its writer's token: {name, value, value_version,
     * value_token} (no lease needed; value null and value_version 0 when never written).
     */
    public JsonNode value(String name) {
        return join(valueAsync(name));
    }

    public CompletableFuture<JsonNode> valueAsync(String name) {
        return transport.call("GET", Transport.lockPath(name, "value", Kind.LOCK), null).map(Transport.Answer::body);
    }

    /** The lock's state: {name, held, mode, holder, holders, waiters, last_token, delay_until_ms...} (never a lease id). */
    public JsonNode status(String name) {
        return join(statusAsync(name));
    }

    public CompletableFuture<JsonNode> statusAsync(String name) {
        return transport.call("GET", Transport.lockPath(name, "", Kind.LOCK), null).map(Transport.Answer::body);
    }

    /** The semaphore's state: {name, limit, holders, holders_total, available, waiters, last_token...}. */
    public JsonNode semaphoreStatus(String name) {
        return join(semaphoreStatusAsync(name));
    }

    public CompletableFuture<JsonNode> semaphoreStatusAsync(String name) {
        return transport.call("GET", Transport.lockPath(name, "", Kind.SEMAPHORE), null).map(Transport.Answer::body);
    }

    /**
     * Checks {@code token} against the resource's high-water mark ({@code POST /v1/fence/{resource}}):
     * accepted when it is at least the highest token seen for it, which it then becomes.
     *
     * @throws StaleTokenException when a newer token was seen ({@code body().get("max_token")})
     * @throws BadRequestException for a token never issued
     */
    public FenceResult fence(String resource, long token) {
        return join(fenceAsync(resource, token));
    }

    /** {@link #fence(String, long)} with the token's decimal digits (a header's, {@code $LEASEGATE_TOKEN}'s). */
    public FenceResult fence(String resource, String token) {
        return fence(resource, Tokens.parse(token));
    }

    public CompletableFuture<FenceResult> fenceAsync(String resource, long token) {
        ObjectNode body = Transport.JSON.createObjectNode();
        body.put("token", Tokens.toJson(token));
        return transport.call("POST", "/v1/fence/" + Transport.quote(resource), body).map(answer ->
                new FenceResult(answer.body().path("resource").asText(resource), answer.body().path("accepted").asBoolean(),
                        Tokens.fromJson(answer.body(), "max_token")));
    }

    /**
     * Gives back every lease still held (one short try per server each, errors ignored) and stops
     * the client's threads. Leases of a closed client are lost to their holders; locks wait no longer.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        List<CompletableFuture<Void>> releases = new ArrayList<>();
        for (Lease lease : leases) {
            releases.add(lease.abandon());
        }
        leases.clear();
        try {
            CompletableFuture.allOf(releases.toArray(new CompletableFuture<?>[0]))
                    .get(transport.servers().size() * Transport.COURTESY_TIMEOUT_NANOS + TimeUnit.SECONDS.toNanos(1),
                            TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException | TimeoutException e) {
            // courtesy releases never fail; a timeout leaves the rest to the leases' TTLs
        }
        timer.shutdownNow();
        callbacks.shutdown();
    }

    @Override
    public String toString() {
        return "LeasegateClient" + transport.servers() + " owner=" + owner;
    }

    // What the other classes of the package use -------------------------------------------------

    Transport transport() {
        return transport;
    }

    ExecutorService callbacks() {
        return callbacks;
    }

    void forget(Lease lease) {
        leases.remove(lease);
    }

    /** Waits for a future, uninterruptibly (the interrupt is kept for later), and returns its value or throws its error unchecked. */
    static <T> T join(CompletableFuture<T> future) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return future.get();
                } catch (InterruptedException e) {
                    interrupted = true;
                } catch (ExecutionException e) {
                    throw rethrow(Transport.unwrap(e));
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** As {@link #join}, named for the calls that must finish (a release) even when interrupted. */
    static <T> T joinUninterruptibly(CompletableFuture<T> future) {
        return join(future);
    }

    /** Waits for a future; when interrupted, cancels it (closing its exchange) and throws. */
    static <T> T await(CompletableFuture<T> future) throws InterruptedException {
        try {
            return future.get();
        } catch (InterruptedException e) {
            future.cancel(true);
            throw e;
        } catch (ExecutionException e) {
            throw rethrow(Transport.unwrap(e));
        }
    }

    /** An error as an unchecked exception to throw: itself, or wrapped. */
    static RuntimeException rethrow(Throwable error) {
        if (error instanceof RuntimeException) {
            return (RuntimeException) error;
        }
        if (error instanceof Error) {
            throw (Error) error;
        }
        return new LeasegateException(String.valueOf(error.getMessage()), 0, null, null, error);
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    private static String normalize(String url) {
        java.net.URI uri;
        try {
            uri = new java.net.URI(url);
        } catch (java.net.URISyntaxException e) {
            throw new IllegalArgumentException("not an http(s) server URL: '" + url + "'", e);
        }
        if (!("http".equals(uri.getScheme()) || "https".equals(uri.getScheme())) || uri.getHost() == null
                || uri.getRawQuery() != null || uri.getRawFragment() != null) {
            throw new IllegalArgumentException("not an http(s) server URL: '" + url + "'");
        }
        String s = uri.getScheme() + "://" + uri.getRawAuthority() + (uri.getRawPath() == null ? "" : uri.getRawPath());
        while (s.endsWith("/")) {
            s = s.substring(0, s.length() - 1);
        }
        return s;
    }

    private static SSLContext trusting(Path caFile) {
        try (InputStream in = Files.newInputStream(caFile)) {
            KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
            store.load(null, null);
            int i = 0;
            for (Certificate cert : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                store.setCertificateEntry("ca-" + i++, cert);
            }
            if (i == 0) {
                throw new IllegalArgumentException("caFile " + caFile + " holds no PEM certificate");
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(store);
            SSLContext ssl = SSLContext.getInstance("TLS");
            ssl.init(null, tmf.getTrustManagers(), null);
            return ssl;
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("caFile " + caFile + ": " + e.getMessage(), e);
        }
    }

    private static String defaultOwner() {
        String host = null;
        try {
            host = Files.readString(Path.of("/proc/sys/kernel/hostname")).strip();
        } catch (IOException | RuntimeException e) {
            host = emptyToNull(System.getenv("HOSTNAME"));
        }
        String label = (host == null || host.isEmpty() ? "java" : host) + "-" + ProcessHandle.current().pid();
        return label.length() > 128 ? label.substring(0, 128) : label;
    }

    private static String emptyToNull(String s) {
        return s == null || s.isEmpty() ? null : s;
    }
}
