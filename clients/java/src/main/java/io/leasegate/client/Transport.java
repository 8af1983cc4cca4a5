package io.leasegate.client;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.security.cert.CertificateException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLHandshakeException;

/**
 * How every call reaches a server: retries, failover and backoff, the same as the Python and Node
 * clients' (clients/python/leasegate/plan.py).
 *
 * <p>Every call goes to one of the configured servers, starting with the one that answered last.
 * A connection failure, a timeout or a 503 moves on to the next server, and a whole round of
 * failures backs off (50 ms doubling to 1 s, with jitter) before the next round, until the call's
 * time is up. A certificate that fails verification is not tried again: when no other server is
 * left, the call fails with TlsVerificationException at once. Any other answer is final.
 *
 * <p>All of it is asynchronous: an attempt is an {@link HttpClient#sendAsync} exchange under the
 * first-byte watch ({@link FirstByteWatch}: a paused or unready server is left after about two
 * first-byte timeouts, not the request's timeout), a pause a task of the client's timer, and a call
 * an {@link Op} whose cancellation closes the exchange in progress. Times are {@link
 * System#nanoTime()} values, compared by difference.
 */
final class Transport {
    static final long MAX_POLL_NANOS = TimeUnit.HOURS.toNanos(1); // the server's largest wait_ms
    static final long MIN_ATTEMPT_NANOS = TimeUnit.MILLISECONDS.toNanos(50); // no attempt gets less
    static final long COURTESY_TIMEOUT_NANOS = TimeUnit.SECONDS.toNanos(1); // per server, releasing a lost lease
    static final long BACKOFF_FIRST_NANOS = TimeUnit.MILLISECONDS.toNanos(50); // after a round of failures, doubling
    static final long BACKOFF_MAX_NANOS = TimeUnit.SECONDS.toNanos(1);
    static final String TLS_HINT = "a server whose certificate a private CA signed needs caFile(PEM) or $LEASEGATE_CACERT";

    /** One mapper for the library: thread-safe once configured. Big numbers stay exact. */
    static final ObjectMapper JSON = new ObjectMapper()
            .enable(DeserializationFeature.USE_BIG_INTEGER_FOR_INTS)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

    /** A successful answer: who gave it, its JSON, and when its attempt was sent. */
    record Answer(String server, JsonNode body, long sentNanos) {
    }

    private final List<String> servers; // base URLs, no trailing slash
    private final AtomicInteger current = new AtomicInteger(); // the server that answered last
    private final HttpClient http;
    private final String authorization; // "Bearer KEY", or null
    final long timeoutNanos;
    final long retryForNanos;
    final long firstByteNanos; // the first-byte watch's timeout (FirstByteWatch)
    final ScheduledExecutorService timer;

    Transport(List<String> servers, SSLContext ssl, String key, Duration timeout, Duration retryFor,
              Duration firstByte, ScheduledExecutorService timer) {
        this.servers = List.copyOf(servers);
        this.timeoutNanos = timeout.toNanos();
        this.retryForNanos = retryFor.toNanos();
        this.firstByteNanos = firstByte.toNanos();
        this.authorization = key == null ? null : "Bearer " + key;
        this.timer = timer;
        // HTTP/1.1: the server is libmicrohttpd. No proxy is configured: a lock service's traffic
        // must not be rerouted by a proxy setting meant for the web. A server that has not
        // accepted the connection within the first-byte timeout is left (FirstByteWatch).
        Duration connect = timeout.isZero() ? Duration.ofMillis(50) : timeout;
        HttpClient.Builder builder = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(connect.compareTo(firstByte) < 0 ? connect : firstByte)
                .followRedirects(HttpClient.Redirect.NEVER);
        if (ssl != null) {
            builder.sslContext(ssl);
        }
        this.http = builder.build();
    }

    List<String> servers() {
        return servers;
    }

    /** A lock, semaphore or resource name as a path: [A-Za-z0-9._~:/-] stay, the rest is percent-encoded
     * (for the server to refuse by name). */
    static String quote(String name) {
        StringBuilder out = new StringBuilder();
        for (byte b : name.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || "-._~:/".indexOf(c) >= 0) {
                out.append((char) c);
            } else {
                out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
            }
        }
        return out.toString();
    }

    /** The path of an action on a lock, a semaphore or an election ({@link Kind#path}). */
    static String lockPath(String name, String action, Kind kind) {
        return kind.path(name, action);
    }

    /**
     * Sends until some server answers other than 503.
     *
     * @param body the JSON body, or null
     * @param until no new attempt starts after it, once every server was tried
     * @param waitUntil for a long-polling acquire, when its wait ends (each attempt sends what is
     *     left of it as wait_ms and may take that much longer); else null
     * @param hard no answer is awaited past {@code until} either (a renewal is useless later)
     * @return the answer; fails with the answer's LeasegateException, UnavailableException or
     *     TlsVerificationException
     */
    Op<Answer> call(String method, String path, ObjectNode body, long until, Long waitUntil, boolean hard) {
        Call call = new Call(method, path, body, until, waitUntil, hard);
        call.attempt();
        return call;
    }

    /** A call that retries for {@link #retryForNanos} from now. */
    Op<Answer> call(String method, String path, ObjectNode body) {
        return call(method, path, body, System.nanoTime() + retryForNanos, null, false);
    }

    /**
     * One short release attempt per server, errors ignored: for a lease that may already be gone,
     * where the server frees the lock at its TTL anyway. Never fails.
     */
    CompletableFuture<Void> courtesyRelease(String name, String lease, Kind kind) {
        byte[] payload = bytes(JSON.createObjectNode().put("lease", lease));
        CompletableFuture<Void> done = new CompletableFuture<>();
        courtesyAttempt(0, lockPath(name, "release", kind), payload, done);
        return done;
    }

    private void courtesyAttempt(int index, String path, byte[] payload, CompletableFuture<Void> done) {
        if (index >= servers.size()) {
            done.complete(null);
            return;
        }
        send(servers.get(index), "POST", path, payload, Math.min(timeoutNanos, COURTESY_TIMEOUT_NANOS))
                .whenComplete((response, error) -> {
                    if (response != null && response.statusCode() != 503) {
                        done.complete(null);
                    } else {
                        courtesyAttempt(index + 1, path, payload, done);
                    }
                });
    }

    /**
     * One exchange with one server, with the key and, for a body, its Content-Type, under the
     * first-byte watch: it may fail with {@link FirstByteWatch.Stalled}; cancelling it closes the
     * exchange.
     */
    CompletableFuture<HttpResponse<byte[]>> send(String server, String method, String path, byte[] payload,
                                                 long timeoutNanos) {
        long timeout = Math.max(timeoutNanos, MIN_ATTEMPT_NANOS);
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(server + path))
                .timeout(Duration.ofNanos(timeout))
                .method(method, payload == null ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofByteArray(payload));
        if (payload != null) {
            request.header("Content-Type", "application/json");
        }
        FirstByteWatch watch = new FirstByteWatch(this, server, System.nanoTime() + timeout);
        return watch.start(http.sendAsync(authorized(request).build(), info -> {
            watch.began();
            return HttpResponse.BodySubscribers.ofByteArray();
        }));
    }

    /**
     * Opens a Server-Sent Events stream (an election's observe): GET server+path with the key,
     * {@code Accept: text/event-stream} and, unless null, {@code Last-Event-ID}. The answer's head
     * must come within the client's timeout; its body goes to {@code handler}'s subscriber as it comes.
     */
    <T> CompletableFuture<HttpResponse<T>> openStream(String server, String path, String lastEventId,
                                                      HttpResponse.BodyHandler<T> handler) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(server + path))
                .timeout(Duration.ofNanos(Math.max(timeoutNanos, MIN_ATTEMPT_NANOS)))
                .header("Accept", "text/event-stream").GET();
        if (lastEventId != null) {
            request.header("Last-Event-ID", lastEventId);
        }
        return http.sendAsync(authorized(request).build(), handler);
    }

    /** The index of the server that answered last (modulo the number of servers). */
    int currentServer() {
        return Math.floorMod(current.get(), servers.size());
    }

    /** Makes {@code index} (modulo the number of servers) the server tried first. */
    void setCurrentServer(int index) {
        current.set(Math.floorMod(index, servers.size()));
    }

    /** GET /readyz of server, within timeoutNanos (at least a millisecond); the first-byte watch's probe. */
    CompletableFuture<HttpResponse<Void>> readyz(String server, long timeoutNanos) {
        HttpRequest request = HttpRequest.newBuilder(URI.create(server + "/readyz"))
                .timeout(Duration.ofNanos(Math.max(timeoutNanos, TimeUnit.MILLISECONDS.toNanos(1)))).GET().build();
        return http.sendAsync(request, HttpResponse.BodyHandlers.discarding());
    }

    /** Sends a request the caller built, with the key added (not watched: a guarded write is the caller's). */
    CompletableFuture<HttpResponse<byte[]>> exchange(HttpRequest.Builder request) {
        return http.sendAsync(authorized(request).build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    private HttpRequest.Builder authorized(HttpRequest.Builder request) {
        if (authorization != null) {
            request.setHeader("Authorization", authorization);
        }
        return request;
    }

    static byte[] bytes(JsonNode value) {
        try {
            return JSON.writeValueAsBytes(value);
        } catch (JsonProcessingException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** True for a certificate that failed verification: a failure no retry fixes. */
    static boolean isTlsFailure(Throwable error) {
        if (!(error instanceof SSLHandshakeException)) {
            return false;
        }
        for (Throwable t = error; t != null; t = t.getCause()) {
            if (t instanceof CertificateException) {
                return true;
            }
        }
        return false;
    }

    /** One line for an attempt that got no answer: the server, what happened, and for a
     * certificate failure what to do about it. */
    static String describe(String server, Throwable error) {
        String what = error instanceof HttpTimeoutException ? "timed out"
                : error instanceof FirstByteWatch.Stalled ? error.getMessage()
                : error.getMessage() == null ? error.getClass().getSimpleName()
                : error.getClass().getSimpleName() + ": " + error.getMessage();
        return server + ": " + what + (isTlsFailure(error) ? " (" + TLS_HINT + ")" : "");
    }

    /** The cause of a CompletionException or ExecutionException, else the error itself. */
    static Throwable unwrap(Throwable error) {
        while ((error instanceof CompletionException || error instanceof ExecutionException) && error.getCause() != null) {
            error = error.getCause();
        }
        return error;
    }

    /** The JSON of an answer, or for an error answer that is not JSON, null. */
    static JsonNode parse(HttpResponse<byte[]> response) {
        try {
            return JSON.readTree(response.body());
        } catch (IOException e) {
            if (response.statusCode() < 300) {
                String text = new String(response.body(), StandardCharsets.UTF_8);
                throw new LeasegateException("HTTP " + response.statusCode() + " with a body that is not JSON: "
                        + (text.length() > 200 ? text.substring(0, 200) : text), response.statusCode(), null, null, e);
            }
            return null;
        }
    }

    /** plan.call: the attempts of one call, each started when the previous one failed. */
    private final class Call extends Op<Answer> {
        private final String method;
        private final String path;
        private final ObjectNode body;
        private final long until;
        private final Long waitUntil;
        private final boolean hard;
        private final List<Object> failures = new ArrayList<>(); // LeasegateException or String, latest last
        private final Map<Integer, String> untrusted = new HashMap<>(); // never tried again in this call
        private int tried;

        Call(String method, String path, ObjectNode body, long until, Long waitUntil, boolean hard) {
            this.method = method;
            this.path = path;
            this.body = body;
            this.until = until;
            this.waitUntil = waitUntil;
            this.hard = hard;
        }

        // Attempts run one after another, so the fields are never touched by two threads at once;
        // each attempt starts from the completion of the last (a happens-before edge).
        void attempt() {
            if (isDone()) {
                return;
            }
            int count = servers.size();
            int index = Math.floorMod(current.get(), count);
            while (untrusted.containsKey(index)) {
                index = (index + 1) % count;
            }
            String server = servers.get(index);
            long sent = System.nanoTime();
            long timeout = timeoutNanos;
            byte[] payload = null;
            if (body != null) {
                ObjectNode sending = body;
                if (waitUntil != null) {
                    long wait = Math.max(0, waitUntil - sent);
                    sending = body.deepCopy().put("wait_ms", TimeUnit.NANOSECONDS.toMillis(wait));
                    timeout += wait;
                }
                payload = bytes(sending);
            }
            if (hard) {
                timeout = Math.min(timeout, until - sent);
            }
            CompletableFuture<HttpResponse<byte[]>> exchange;
            try {
                exchange = send(server, method, path, payload, timeout);
            } catch (RuntimeException e) {
                completeExceptionally(e);
                return;
            }
            step(exchange);
            int at = index;
            exchange.whenComplete((response, error) -> {
                try {
                    outcome(at, server, sent, response, error == null ? null : unwrap(error));
                } catch (RuntimeException e) {
                    completeExceptionally(e);
                }
            });
        }

        private void outcome(int index, String server, long sent, HttpResponse<byte[]> response, Throwable error) {
            if (isDone()) {
                return;
            }
            int count = servers.size();
            if (response != null) {
                JsonNode answer = parse(response);
                if (response.statusCode() < 300) {
                    current.set(index);
                    complete(new Answer(server, answer, sent));
                    return;
                }
                LeasegateException failure = LeasegateException.fromAnswer(response.statusCode(), answer,
                        new String(response.body(), StandardCharsets.UTF_8));
                if (!(failure instanceof OverloadedException)) {
                    completeExceptionally(failure);
                    return;
                }
                failures.add(failure);
            } else if (isTlsFailure(error)) {
                untrusted.put(index, describe(server, error));
                if (untrusted.size() == count) {
                    completeExceptionally(new TlsVerificationException("certificate verification failed: "
                            + String.join("; ", untrusted.values()), error));
                    return;
                }
                current.set(index + 1);
                attempt(); // to the next server at once: not a round's failure to back off from
                return;
            } else {
                failures.add(describe(server, error));
            }
            current.set(index + 1);
            tried++;
            int live = count - untrusted.size();
            long left = until - System.nanoTime();
            if (tried >= live && left <= 0) {
                Object last = failures.get(failures.size() - 1);
                if (last instanceof LeasegateException) {
                    completeExceptionally((LeasegateException) last);
                } else {
                    List<String> lines = new ArrayList<>(untrusted.values());
                    for (Object f : failures.subList(Math.max(0, failures.size() - live), failures.size())) {
                        lines.add(String.valueOf(f instanceof LeasegateException ? ((LeasegateException) f).getMessage() : f));
                    }
                    completeExceptionally(new UnavailableException("no leasegate server answered: "
                            + String.join("; ", lines), error));
                }
                return;
            }
            if (tried % live != 0) {
                attempt();
                return;
            }
            long backoff = Math.min(BACKOFF_MAX_NANOS, BACKOFF_FIRST_NANOS << Math.min(20, tried / live - 1));
            long pause = Math.max(0, Math.min(left, (long) (backoff * ThreadLocalRandom.current().nextDouble(0.5, 1.0))));
            step(timer.schedule(this::attempt, pause, TimeUnit.NANOSECONDS));
        }
    }
}
