package io.leasegate.client;

import static io.leasegate.client.TestServer.unique;
import static io.leasegate.client.TestServer.waitFor;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Each test with a server of its own (behind the guard, with a store upstream): retries with one
 * request_id, failover, a lost answer, a restart, a paused server, read leases at the guard.
 */
class FaultTest {
    private TestServer server;
    private LoopbackHttp store;
    private final Map<String, String[]> objects = new ConcurrentHashMap<>(); // path -> body, Fencing-Token

    @BeforeEach
    void start() throws Exception {
        store = new LoopbackHttp(exchange -> {
            byte[] body = exchange.getRequestBody().readAllBytes();
            objects.put(exchange.getRequestURI().getPath(), new String[] {new String(body, StandardCharsets.UTF_8),
                    exchange.getRequestHeaders().getFirst("Fencing-Token")});
            LoopbackHttp.answer(exchange, 201, new byte[0]);
        });
        server = new TestServer("--guard", "/store=" + store.url);
    }

    @AfterEach
    void stop() throws Exception {
        server.close();
        store.close();
    }

    @Test
    void aPausedServerLosesTheLeaseBeforeAnyoneElseIsGrantedIt() throws Exception {
        String name = unique("java/paused");
        List<LeaseLostException> told = new CopyOnWriteArrayList<>();
        try (LeasegateClient client = LeasegateClient.builder().servers(server.url).build();
             LeasegateClient other = LeasegateClient.builder().servers(server.url).owner("other").build()) {
            LeasegateLock lock = client.getLock(name, AcquireOptions.defaults().ttl(Duration.ofMillis(800)));
            lock.addLostListener(told::add);
            long token = lock.lockAndGetToken();
            assertEquals(201, lock.getLease().request("PUT", "/store/" + name, "v1".getBytes(StandardCharsets.UTF_8)).statusCode());
            assertEquals(Tokens.toString(token), objects.get("/" + name)[1], "the guard passes the token on");
            server.signal("STOP"); // renewals now go unanswered
            try {
                waitFor("the listener", () -> told.size() == 1);
                assertFalse(lock.isHeldByCurrentThread());
                assertFalse(lock.getLease().isValid());
            } finally {
                server.signal("CONT");
            }
            LeasegateLock newer = other.getLock(name);
            assertTrue(newer.tryLock(10, TimeUnit.SECONDS));
            assertTrue(Tokens.compare(newer.getToken(), token) > 0);
            JsonNode refused = Transport.JSON.readTree(
                    lock.getLease().request("PUT", "/store/" + name, "v2".getBytes(StandardCharsets.UTF_8)).body());
            assertEquals("stale_token", refused.get("error").asText());
            assertEquals("v1", objects.get("/" + name)[0], "the stale write never reached the store");
            assertThrows(LeaseLostException.class, lock::unlock, "the unlock says the work was not protected");
            assertEquals(0, lock.getHoldCount());
            assertThrows(IllegalMonitorStateException.class, lock::unlock);
            newer.unlock();
            assertEquals(1, told.size(), "told once");
            assertTrue(told.get(0).getMessage().contains("within its TTL"), told.get(0).getMessage());
        }
    }

    @Test
    void aRenewalRetriesAcrossARestartAndTheLeaseKeepsItsToken() throws Exception {
        String name = unique("java/restart");
        try (LeasegateClient client = LeasegateClient.builder().servers(server.url).build()) {
            Lease lease = client.acquire(name, AcquireOptions.defaults().ttl(Duration.ofSeconds(20)));
            server.crashAndRestart(); // kill -9, the same port and database
            lease.renew();
            assertTrue(lease.isValid());
            assertEquals(lease.token(), client.status(name).get("holder").get("token").asLong());
            lease.release();
            Lease next = client.acquire(name, AcquireOptions.defaults());
            assertTrue(Tokens.compare(next.token(), lease.token()) > 0, "tokens grow across the restart");
            next.release();
        }
    }

    @Test
    void aRetryAfterALostAnswerGetsTheSameGrant() throws Exception {
        String name = unique("java/lost-answer");
        try (DroppingProxy proxy = new DroppingProxy(server.port);
             LeasegateClient client = LeasegateClient.builder().servers(proxy.url()).build()) {
            Lease lease = client.acquire(name, AcquireOptions.defaults());
            assertTrue(proxy.connections.get() >= 2, "the first answer was dropped and the acquire retried");
            JsonNode holder = client.status(name).get("holder");
            assertEquals(lease.token(), holder.get("token").asLong());
            assertEquals(1, holder.get("count").asInt(), "the same grant, not a reentry");
            lease.release();
            assertFalse(client.status(name).get("held").asBoolean());
        }
    }

    @Test
    void aValueWriteWhoseAnswerWasLostIsWrittenOnce() throws Exception {
        String name = unique("java/lost-value");
        try (DroppingProxy proxy = new DroppingProxy(server.port, "PUT");
             LeasegateClient client = LeasegateClient.builder().servers(proxy.url()).build()) {
            Lease lease = client.acquire(name, AcquireOptions.defaults());
            assertEquals(1, lease.setValueIf(Map.of("n", 1), 0), "written once, and not a false version_mismatch");
            assertEquals(2, lease.setValue(2));
            assertEquals(3, proxy.requests.size(), "the write whose answer was lost was sent again");
            String first = requestId(proxy.requests.get(0));
            assertEquals(first, requestId(proxy.requests.get(1)), "one request_id for every retry of a write");
            assertNotEquals(first, requestId(proxy.requests.get(2)), "a request_id per write");
            assertEquals(2, client.value(name).get("value_version").asLong());
            lease.release();
        }
    }

    private static String requestId(String request) throws Exception {
        String body = request.substring(request.indexOf("\r\n\r\n") + 4);
        return Transport.JSON.readTree(body).get("request_id").asText();
    }

    @Test
    void failoverPastAClosedPortAndAnOverloadedServerWithOneRequestId() throws Exception {
        List<JsonNode> bodies = new CopyOnWriteArrayList<>();
        try (LoopbackHttp busy = new LoopbackHttp(exchange -> {
            bodies.add(Transport.JSON.readTree(exchange.getRequestBody().readAllBytes()));
            LoopbackHttp.answer(exchange, 503, "{\"error\":\"overloaded\",\"message\":\"test\"}".getBytes(StandardCharsets.UTF_8));
        })) {
            String closed = TestServer.closedPortUrl();
            try (LeasegateClient client = LeasegateClient.builder().servers(closed, busy.url, server.url).build()) {
                Lease lease = client.acquire(unique("java/failover"), AcquireOptions.defaults());
                assertEquals(server.url, lease.server());
                assertEquals(1, bodies.size());
                lease.release();
            }
            bodies.clear();
            try (LeasegateClient client = LeasegateClient.builder().servers(busy.url, closed)
                    .retryFor(Duration.ofMillis(300)).build()) {
                assertThrows(LeasegateException.class, () -> client.acquire(unique("java/busy"), AcquireOptions.defaults()));
            }
            assertTrue(bodies.size() >= 2, "retried: " + bodies.size());
            for (JsonNode body : bodies) {
                assertEquals(bodies.get(0).get("request_id"), body.get("request_id"), "one request_id for every retry");
            }
        }
    }

    @Test
    void noServerAnsweringIsUnavailableAndSaysWhich() throws Exception {
        String a = TestServer.closedPortUrl();
        String b = TestServer.closedPortUrl();
        try (LeasegateClient client = LeasegateClient.builder().servers(a + "," + b).retryFor(Duration.ofMillis(200)).build()) {
            UnavailableException e = assertThrows(UnavailableException.class, () -> client.status("x"));
            assertTrue(e.getMessage().contains(a) && e.getMessage().contains(b), e.getMessage());
            assertEquals(0, e.status());
        }
    }

    @Test
    void readersShareTheLockAndTheGuardRefusesTheirWrites() throws Exception {
        String name = unique("java/rw");
        try (LeasegateClient client = LeasegateClient.builder().servers(server.url).build()) {
            LeasegateReadWriteLock rw = client.getReadWriteLock(name);
            assertTrue(rw.readLock().tryLockAsync(0, TimeUnit.SECONDS, 1001).get());
            assertTrue(rw.readLock().tryLockAsync(0, TimeUnit.SECONDS, 1002).get());
            assertEquals(2, client.status(name).get("holders").size());
            assertFalse(rw.writeLock().tryLock(), "a writer waits for the readers");
            java.util.concurrent.ExecutionException upgrade = assertThrows(java.util.concurrent.ExecutionException.class,
                    () -> rw.writeLock().lockAsync(1001).get());
            assertTrue(upgrade.getCause() instanceof IllegalStateException, "no upgrade: it would wait for itself");
            assertTrue(rw.readLock().isHeldByThread(1001));
            rw.readLock().unlockAsync(1001).get();
            rw.readLock().unlockAsync(1002).get();
            LeasegateLock reader = rw.readLock();
            reader.lock();
            try {
                Lease lease = reader.getLease();
                assertEquals(LockMode.READ, lease.mode());
                JsonNode refused = Transport.JSON.readTree(lease.request("PUT", "/store/" + name, new byte[] {1}).body());
                assertEquals("stale_token", refused.get("error").asText());
                assertEquals("read_lease", refused.get("reason").asText());
            } finally {
                reader.unlock();
            }
            rw.writeLock().lock();
            try {
                assertEquals(201, rw.writeLock().getLease().request("PUT", "/store/" + name, new byte[] {2}).statusCode());
            } finally {
                rw.writeLock().unlock();
            }
        }
    }
}
