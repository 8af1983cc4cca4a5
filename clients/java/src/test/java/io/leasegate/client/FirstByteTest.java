package io.leasegate.client;

import static io.leasegate.client.TestServer.unique;
import static io.leasegate.client.TestServer.waitFor;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * The first-byte watch (FirstByteWatch, issue 37) against the real binary: a paused or unready
 * server costs about two first-byte timeouts, not the request's timeout; a ready one keeps its
 * long-polls; a renewal's bound stays hard.
 */
class FirstByteTest {
    /** The request timeout of these tests' clients: a call that waited it out, rather than moving
     * on after the first-byte timeout, would outlast TestServer.BOUND_MS. */
    private static final Duration LONG_TIMEOUT = Duration.ofMinutes(1);

    private static LeasegateClient watching(Duration firstByte, String... servers) {
        return LeasegateClient.builder().servers(servers).owner("java-test").timeout(LONG_TIMEOUT)
                .firstByteTimeout(firstByte).build();
    }

    private static <T> T within(String what, CompletableFuture<T> future) throws Exception {
        try {
            return future.get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            future.cancel(true);
            throw new AssertionError(what + ": still waiting after " + TestServer.BOUND_MS + " ms (the request's timeout is "
                    + LONG_TIMEOUT + ")");
        }
    }

    /** One sample of the server's /metrics (a line "name value"). */
    private static double metric(String url, String name) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(url + "/metrics")).build();
        String text = HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString()).body();
        for (String line : text.split("\n")) {
            String[] fields = line.trim().split("\\s+");
            if (fields.length == 2 && fields[0].equals(name)) {
                return Double.parseDouble(fields[1]);
            }
        }
        throw new AssertionError("no " + name + " in " + url + "/metrics");
    }

    @Test
    void theTimeoutIsChecked() {
        LeasegateClient.Builder builder = LeasegateClient.builder();
        assertThrows(IllegalArgumentException.class, () -> builder.firstByteTimeout(Duration.ofMillis(50)));
        assertThrows(IllegalArgumentException.class, () -> builder.firstByteTimeout(Duration.ofMillis(-1)));
        assertThrows(IllegalArgumentException.class, () -> builder.firstByteTimeout(Duration.ofNanos(100_000_500)));
        builder.firstByteTimeout(Duration.ofMillis(100));
    }

    @Test
    void aPausedServerIsLeftForTheNext() throws Exception {
        try (TestServer paused = new TestServer(); TestServer server = new TestServer();
             LeasegateClient client = watching(Duration.ofMillis(300), paused.url, server.url);
             LeasegateClient again = watching(Duration.ofMillis(300), paused.url, server.url)) {
            paused.signal("STOP"); // its kernel still accepts connections
            String name = unique("java/fb-paused");
            Lease lease = within("an acquire with a paused first server", client.acquireAsync(name, AcquireOptions.defaults()));
            assertEquals(server.url, lease.server());
            JsonNode status = within("a status with the paused server first", again.statusAsync(name));
            assertTrue(status.get("held").asBoolean());
            lease.release();
        }
    }

    /** A long-poll's answer comes only at its grant: the server says it is ready, and the wait goes
     * on in the queue across many first-byte timeouts, never given up and sent again. */
    @Test
    void aLongPollOutlastsTheFirstByteTimeout() throws Exception {
        try (TestServer server = new TestServer();
             LeasegateClient plain = LeasegateClient.builder().servers(server.url).build();
             LeasegateClient client = watching(Duration.ofMillis(200), server.url)) {
            String name = unique("java/fb-long-poll");
            Lease holder = plain.acquire(name, AcquireOptions.defaults().ttl(Duration.ofMinutes(1)));
            double before = metric(server.url, "leasegate_waiter_disconnects_total");
            CompletableFuture<Lease> waiting = client.acquireAsync(name, AcquireOptions.defaults().waitFor(Duration.ofMinutes(1)));
            waitFor("the waiter in the queue", () -> plain.status(name).get("waiters").asInt() == 1);
            Thread.sleep(1500); // seven first-byte timeouts pass while it waits
            assertEquals(1, plain.status(name).get("waiters").asInt(), "after seven first-byte timeouts");
            holder.release();
            Lease lease = within("the grant after the release", waiting);
            assertEquals(before, metric(server.url, "leasegate_waiter_disconnects_total"),
                    "the long-poll was given up and sent again");
            lease.release();
        }
    }

    /**
     * A renewal's bound is hard, /readyz probes included: on a paused server it ends, telling the
     * loss, by the lease's bound, so before the server, continued a second after that bound (as the
     * conformance runner's TOKEN-4 does), grants the next holder. With a first-byte timeout of a
     * third of the TTL, the renewal's attempts probe /readyz on the way.
     */
    @Test
    void aRenewalOnAPausedServerEndsByTheLeasesBound() throws Exception {
        Duration ttl = Duration.ofSeconds(3);
        try (TestServer server = new TestServer();
             LeasegateClient plain = LeasegateClient.builder().servers(server.url).build();
             LeasegateClient client = watching(Duration.ofSeconds(1), server.url)) {
            String name = unique("java/fb-renew");
            Lease lease = client.acquire(name, AcquireOptions.defaults().ttl(ttl));
            HttpRequest next = HttpRequest.newBuilder(URI.create(server.url + "/v1/locks/" + name + "/acquire"))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"owner\":\"next\",\"ttl_ms\":10000,\"wait_ms\":30000}"))
                    .header("Content-Type", "application/json").build();
            CompletableFuture<HttpResponse<String>> granted = HttpClient.newHttpClient()
                    .sendAsync(next, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
            waitFor("the next holder in the queue", () -> plain.status(name).get("waiters").asInt() == 1);
            server.signal("STOP");
            CompletableFuture<Long> renewed = lease.renewAsync(null).handle((ok, error) -> {
                assertTrue(error != null && Transport.unwrap(error) instanceof LeaseLostException,
                        "a renewal on a paused server: " + error);
                return System.currentTimeMillis();
            });
            try {
                Thread.sleep(ttl.toMillis() + 1000); // every renewal the server took came before the stop
            } finally {
                server.signal("CONT");
            }
            HttpResponse<String> answer = within("the next holder's grant", granted);
            assertEquals(200, answer.statusCode(), answer.body());
            long grantedAt = Transport.JSON.readTree(answer.body()).get("acquired_at_ms").asLong();
            long returnedAt = within("the renewal", renewed);
            assertTrue(returnedAt <= grantedAt, "the renewal returned at " + returnedAt + ", after the next holder's grant at "
                    + grantedAt);
            lease.release();
        }
    }

    /** What /readyz says decides: 200 and 404 (a server too old to have it) keep the wait going,
     * 503 gives the attempt up for the next server. */
    @Test
    void readyzDecides() throws Exception {
        try (TestServer server = new TestServer()) {
            for (int readyz : new int[] {200, 404, 503}) {
                AtomicInteger probes = new AtomicInteger();
                boolean stays = readyz != 503;
                try (LoopbackHttp slow = new LoopbackHttp(exchange -> {
                        if (exchange.getRequestURI().getPath().equals("/readyz")) {
                            probes.incrementAndGet();
                            LoopbackHttp.answer(exchange, readyz, new byte[0]);
                            return;
                        }
                        // The answer begins after three probes, or is never sent (the client gives up).
                        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(TestServer.BOUND_MS);
                        while (probes.get() < 3 && System.nanoTime() - end < 0) {
                            try {
                                Thread.sleep(10);
                            } catch (InterruptedException e) {
                                return;
                            }
                        }
                        // 7 waiters: not the real server's answer
                        LoopbackHttp.answer(exchange, 200, "{\"name\":\"x\",\"held\":false,\"waiters\":7}".getBytes(StandardCharsets.UTF_8));
                    });
                     // 1 s, not less: a probe's answer must come within it, and on a loaded
                     // 2-core machine the JDK's server took more than 300 ms (1 probe, then left).
                     LeasegateClient client = watching(Duration.ofSeconds(1), slow.url, server.url)) {
                    JsonNode status = within("readyz " + readyz, client.statusAsync(unique("java/fb-readyz")));
                    assertEquals(stays, status.get("waiters").asInt() == 7,
                            "readyz " + readyz + ": answered by the slow server, after " + probes.get() + " probes");
                    assertTrue(stays ? probes.get() >= 3 : probes.get() == 1, "readyz " + readyz + ": " + probes.get() + " probes");
                }
            }
        }
    }
}
