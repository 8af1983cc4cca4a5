package io.leasegate.client;

import static io.leasegate.client.TestServer.unique;
import static io.leasegate.client.TestServer.waitFor;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The client's leases against one real server: grants, renewals, losses, semaphores, fences. */
class ClientTest {
    private static TestServer server;
    private static LeasegateClient client;

    @BeforeAll
    static void start() throws Exception {
        server = new TestServer();
        client = LeasegateClient.builder().servers(server.url).owner("java-test").build();
    }

    @AfterAll
    static void stop() throws Exception {
        client.close();
        server.close();
    }

    static int forceRelease(String url, String name) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(url + "/v1/locks/" + name)).DELETE().build();
        return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.discarding()).statusCode();
    }

    @Test
    void acquireRenewReleaseAndTokensGrow() throws Exception {
        String name = unique("java/basic");
        Lease first = client.acquire(name, AcquireOptions.defaults().ttl(Duration.ofSeconds(5)));
        assertEquals(name, first.name());
        assertEquals("java-test", first.owner());
        assertEquals(LockMode.WRITE, first.mode());
        assertTrue(first.isValid());
        assertNotEquals(0, first.token());
        JsonNode status = client.status(name);
        assertTrue(status.get("held").asBoolean());
        assertEquals(first.token(), status.get("holder").get("token").asLong());
        first.renew(Duration.ofSeconds(7));
        assertEquals(Duration.ofSeconds(7), first.ttl());
        first.release();
        first.release(); // a second release does nothing
        assertFalse(first.isValid());
        assertFalse(client.status(name).get("held").asBoolean());
        Lease second = client.acquire(name, AcquireOptions.defaults());
        assertTrue(Tokens.compare(second.token(), first.token()) > 0, "a new grant takes a larger token");
        assertThrows(LeaseLostException.class, first::renew, "a released lease is not renewed");
        second.release();
    }

    @Test
    void lockHeldSaysByWhomButNeverTheLeaseIdAndToStringRedactsIt() throws Exception {
        String name = unique("java/held");
        Lease lease = client.acquire(name, AcquireOptions.defaults().metadata(Map.of("why", "test")));
        try {
            LockHeldException held = assertThrows(LockHeldException.class,
                    () -> client.acquire(name, AcquireOptions.defaults().owner("other")));
            assertEquals("lock_held", held.code());
            assertEquals(409, held.status());
            assertEquals("java-test", held.body().get("holder").get("owner").asText());
            assertFalse(held.body().toString().contains(lease.leaseId()));
            assertEquals("test", lease.metadata().get("why").asText());
            assertFalse(lease.toString().contains(lease.leaseId()), lease.toString());
            assertTrue(lease.toString().contains("<redacted>"));
            assertTrue(lease.toString().contains(Tokens.toString(lease.token())));
        } finally {
            lease.release();
        }
    }

    @Test
    void waitersAreGrantedInArrivalOrder() throws Exception {
        String name = unique("java/fifo");
        Lease holder = client.acquire(name, AcquireOptions.defaults());
        List<String> order = new CopyOnWriteArrayList<>();
        List<java.util.concurrent.CompletableFuture<Lease>> waiting = new java.util.ArrayList<>();
        for (int i = 0; i < 3; i++) {
            String owner = "waiter-" + i;
            waiting.add(client.acquireAsync(name, AcquireOptions.defaults().owner(owner).waitFor(Duration.ofSeconds(20)))
                    .thenApply(l -> {
                        order.add(owner);
                        return l;
                    }));
            int queued = i + 1;
            waitFor(queued + " waiters", () -> client.status(name).get("waiters").asInt() == queued);
        }
        holder.release();
        long last = holder.token();
        for (int i = 0; i < 3; i++) {
            Lease next = waiting.get(i).get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS);
            assertTrue(Tokens.compare(next.token(), last) > 0);
            last = next.token();
            assertEquals("waiter-" + i, order.get(i));
            next.release();
        }
    }

    @Test
    void backgroundRenewalKeepsAShortLeaseAlive() throws Exception {
        String name = unique("java/watchdog");
        Lease lease = client.acquire(name, AcquireOptions.defaults().ttl(Duration.ofMillis(600)).keepAlive(true));
        long first = client.status(name).get("holder").get("expires_at_ms").asLong();
        waitFor("two renewals", () -> client.status(name).get("holder").get("expires_at_ms").asLong() > first + 300);
        assertTrue(lease.isValid());
        assertEquals(lease.token(), client.status(name).get("holder").get("token").asLong());
        lease.close();
        assertFalse(client.status(name).get("held").asBoolean());
    }

    @Test
    void aForceReleaseIsALossAtTheNextRenewal() throws Exception {
        String name = unique("java/force");
        List<LeaseLostException> told = new CopyOnWriteArrayList<>();
        Lease lease = client.acquire(name, AcquireOptions.defaults().onLost(told::add));
        assertEquals(200, forceRelease(server.url, name));
        LeaseLostException lost = assertThrows(LeaseLostException.class, lease::renew);
        assertSame(lease, lost.lease());
        assertTrue(lost.getCause() instanceof NotHolderException, String.valueOf(lost.getCause()));
        assertFalse(lease.isValid());
        waitFor("the listener", () -> told.size() == 1);
        assertSame(lease, lease.lost().get().lease());
        assertThrows(LeaseLostException.class, lease::close);
        assertEquals(1, told.size(), "told once");
    }

    @Test
    void aLeaseNotRenewedIsToldLostWhenItsTimeRunsOut() throws Exception {
        String name = unique("java/expiry");
        Lease lease = client.acquire(name, AcquireOptions.defaults().ttl(Duration.ofMillis(300)));
        LeaseLostException loss = lease.lost().get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS);
        assertTrue(loss.getMessage().contains("within its TTL"), loss.getMessage());
        assertFalse(lease.isValid());
        assertThrows(LeaseLostException.class, lease::check);
        lease.release(); // a courtesy release: no error
    }

    @Test
    void semaphorePermits() throws Exception {
        String name = unique("java/sem");
        LeasegateSemaphore slots = client.getSemaphore(name, 2);
        Lease a = slots.acquire();
        Lease b = slots.tryAcquire();
        assertTrue(a.isSemaphore());
        assertEquals(2, a.limit());
        assertNull(a.mode());
        assertNotEquals(a.token(), b.token());
        assertNull(slots.tryAcquire(), "no third permit");
        assertEquals(0, slots.availablePermits());
        assertThrows(SemaphoreFullException.class, () -> client.acquirePermit(name, 2, AcquireOptions.defaults()));
        assertThrows(LimitMismatchException.class, () -> client.acquirePermit(name, 3, AcquireOptions.defaults()));
        a.release();
        Lease c = slots.tryAcquire(5, TimeUnit.SECONDS);
        assertTrue(Tokens.compare(c.token(), b.token()) > 0);
        b.release();
        c.release();
        assertEquals(2, slots.availablePermits());
        assertFalse(client.status(name).get("held").asBoolean(), "a semaphore and a lock of one name are unrelated");
    }

    @Test
    void fenceAcceptsTheNewestTokenAndRefusesAnOlderOne() throws Exception {
        String resource = unique("java/res");
        Lease older = client.acquire(unique("java/f1"), AcquireOptions.defaults());
        Lease newer = client.acquire(unique("java/f2"), AcquireOptions.defaults());
        FenceResult ok = client.fence(resource, newer.token());
        assertTrue(ok.accepted());
        assertEquals(newer.token(), ok.maxToken());
        assertEquals(newer.token(), client.fence(resource, Tokens.toString(newer.token())).maxToken(), "again: accepted");
        StaleTokenException stale = assertThrows(StaleTokenException.class, () -> client.fence(resource, older.token()));
        assertEquals(newer.token(), stale.body().get("max_token").asLong());
        assertThrows(BadRequestException.class, () -> client.fence(resource, newer.token() + 1000), "never issued");
        assertThrows(IllegalArgumentException.class, () -> client.fence(resource, "12a"));
        older.release();
        newer.release();
    }

    @Test
    void reentryKeepsTheTokenAndCountsLevels() throws Exception {
        String name = unique("java/reenter");
        Lease lease = client.acquire(name, AcquireOptions.defaults());
        assertEquals(2, lease.reenter());
        assertEquals(2, client.status(name).get("holder").get("count").asInt());
        assertEquals(lease.token(), client.status(name).get("holder").get("token").asLong());
        assertEquals(1, lease.leave());
        assertTrue(client.status(name).get("held").asBoolean());
        lease.reenter();
        lease.release(); // every level
        assertFalse(client.status(name).get("held").asBoolean());
    }

    @Test
    void cancellingAWaitingAcquireLeavesTheQueue() throws Exception {
        String name = unique("java/cancel");
        Lease holder = client.acquire(name, AcquireOptions.defaults());
        // The longest wait there is (2^53 - 1 ms, past what a long counts in nanoseconds): no deadline.
        var waiting = client.acquireAsync(name, AcquireOptions.defaults().waitFor(Duration.ofMillis(Durations.MAX_MS)));
        waitFor("a waiter", () -> client.status(name).get("waiters").asInt() == 1);
        waiting.cancel(true);
        waitFor("no waiter", () -> client.status(name).get("waiters").asInt() == 0);
        holder.release();
        assertFalse(client.status(name).get("held").asBoolean(), "the cancelled waiter got nothing");
    }

    @Test
    void anInterruptedAcquireLeavesTheQueue() throws Exception {
        String name = unique("java/interrupt");
        Lease holder = client.acquire(name, AcquireOptions.defaults());
        java.util.concurrent.CompletableFuture<Throwable> outcome = new java.util.concurrent.CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                client.acquire(name, AcquireOptions.defaults().waitFor(Duration.ofSeconds(120)));
                outcome.complete(null);
            } catch (Throwable e) {
                outcome.complete(e);
            }
        });
        t.start();
        waitFor("a waiter", () -> client.status(name).get("waiters").asInt() == 1);
        t.interrupt();
        assertTrue(outcome.get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS) instanceof InterruptedException);
        waitFor("no waiter", () -> client.status(name).get("waiters").asInt() == 0);
        holder.release();
    }

    @Test
    void closingTheClientGivesItsLeasesBack() throws Exception {
        String name = unique("java/close");
        LeasegateClient other = LeasegateClient.builder().servers(server.url).build();
        Lease lease = other.acquire(name, AcquireOptions.defaults().keepAlive(true));
        other.close();
        assertFalse(client.status(name).get("held").asBoolean());
        assertFalse(lease.isValid());
        assertThrows(IllegalStateException.class, () -> other.acquire(name, AcquireOptions.defaults()));
    }

    @Test
    void namesArePathsAndOddNamesAreRefusedByTheServer() throws Exception {
        Lease lease = client.acquire("java/a/b:c~d.e-f_g", AcquireOptions.defaults());
        assertEquals("java/a/b:c~d.e-f_g", lease.name());
        lease.release();
        BadRequestException bad = assertThrows(BadRequestException.class,
                () -> client.acquire("java/with space", AcquireOptions.defaults()));
        assertEquals(400, bad.status());
    }

    @Test
    void optionsAreCheckedBeforeAnyRequest() {
        assertThrows(IllegalArgumentException.class, () -> AcquireOptions.defaults().ttl(Duration.ofNanos(1500)));
        assertThrows(IllegalArgumentException.class, () -> AcquireOptions.defaults().waitFor(Duration.ofSeconds(-1)));
        assertThrows(IllegalArgumentException.class, () -> client.getSemaphore("x", 0));
        assertThrows(IllegalArgumentException.class, () -> LeasegateClient.builder().servers("ftp://x").build());
        assertThrows(IllegalArgumentException.class,
                () -> client.getLock("x", AcquireOptions.defaults().requestId("r1")), "one request_id names one acquire");
    }
}
