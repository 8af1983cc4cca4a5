package io.leasegate.client;

import static io.leasegate.client.TestServer.unique;
import static io.leasegate.client.TestServer.waitFor;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Coordination on top of the lock (issue 40) against the real binary: several permits in one lease,
 * a lock's value only its writer changes, and elections (campaign, proclaim, resign, the state, an
 * observer that sees every change once across cut connections, a failover and a resume).
 */
class CoordTest {
    private static TestServer server;
    private static LeasegateClient client;

    @BeforeAll
    static void start() throws Exception {
        server = new TestServer();
        client = LeasegateClient.builder().servers(server.url).owner("java-coord").timeout(Duration.ofSeconds(2)).build();
    }

    @AfterAll
    static void stop() throws Exception {
        client.close();
        server.close();
    }

    private static JsonNode json(String text) throws Exception {
        return Transport.JSON.readTree(text);
    }

    @Test
    void permitsAreGrantedFirstComeFirstServed() throws Exception {
        String name = unique("java/gpu");
        // Limit 5: A takes 3; B asks 3 and waits; C asks 1 and waits behind B; A's release grants B then C.
        Lease a = client.acquirePermit(name, 5, AcquireOptions.defaults().permits(3));
        assertEquals(3, a.permits());
        AcquireOptions waiting = AcquireOptions.defaults().waitFor(Duration.ofSeconds(20));
        CompletableFuture<Lease> b = client.acquirePermitAsync(name, 5, waiting.permits(3));
        waitFor("b waiting", () -> client.semaphoreStatus(name).get("waiters").asInt() == 1);
        CompletableFuture<Lease> c = client.acquirePermitAsync(name, 5, waiting);
        waitFor("c waiting", () -> client.semaphoreStatus(name).get("waiters").asInt() == 2);
        JsonNode state = client.semaphoreStatus(name);
        assertEquals(2, state.get("available").asInt(), "2 free, and c still waits behind b");
        assertEquals(3, state.get("permits_used").asInt());
        a.release();
        Lease gotB = b.get(20, TimeUnit.SECONDS);
        Lease gotC = c.get(20, TimeUnit.SECONDS);
        assertEquals(3, gotB.permits());
        assertEquals(1, gotC.permits());
        assertTrue(Tokens.compare(gotC.token(), gotB.token()) > 0, "b was granted before c");
        gotB.release();
        gotC.release();
        assertThrows(IllegalArgumentException.class, () -> client.acquirePermit(name, 5, AcquireOptions.defaults().permits(6)));
        assertThrows(IllegalArgumentException.class, () -> client.acquire(name, AcquireOptions.defaults().permits(2)));
    }

    @Test
    void aValueOnlyItsWriterChangesAndTheNextHolderReads() throws Exception {
        String name = unique("java/checkpoint");
        Lease first = client.acquire(name, AcquireOptions.defaults());
        assertEquals(0, first.valueVersion());
        assertTrue(first.value().isNull());
        assertEquals(1, first.setValue(Map.of("offset", 41)));
        assertEquals(json("{\"offset\":41}"), first.value());
        VersionMismatchException mismatch = assertThrows(VersionMismatchException.class, () -> first.setValueIf(0, 0));
        assertEquals(1, mismatch.body().get("value_version").asInt());
        first.release();
        StaleTokenException stale = assertThrows(StaleTokenException.class, () -> first.setValue(999));
        assertEquals("released", stale.body().get("reason").asText());

        Lease second = client.acquire(name, AcquireOptions.defaults());
        assertEquals(json("{\"offset\":41}"), second.value(), "the next holder reads the checkpoint with its grant");
        assertEquals(1, second.valueVersion());
        assertEquals(2, second.setValueIf(Map.of("offset", 57), second.valueVersion()));
        second.release();
        JsonNode value = client.value(name);
        assertEquals(json("{\"offset\":57}"), value.get("value"));
        assertEquals(2, value.get("value_version").asInt());
        assertEquals(second.token(), value.get("value_token").asLong());

        Lease permit = client.acquirePermit(unique("java/sem"), 2, AcquireOptions.defaults());
        assertNull(permit.value());
        assertThrows(UnsupportedOperationException.class, () -> permit.setValue(1));
        permit.release();
    }

    /** An observer on its own thread; next() takes its next event (or the error that stopped it). */
    private static final class Events implements AutoCloseable {
        final ElectionObserver observer;
        final BlockingQueue<Object> queue = new LinkedBlockingQueue<>();

        Events(ElectionObserver observer) {
            this.observer = observer;
            Thread t = new Thread(() -> {
                try {
                    for (ElectionEvent e = observer.next(); e != null; e = observer.next()) {
                        queue.add(e);
                    }
                    queue.add("closed");
                } catch (Exception e) {
                    queue.add(e);
                }
            }, "observer");
            t.setDaemon(true);
            t.start();
        }

        ElectionEvent next() throws Exception {
            Object item = queue.poll(TestServer.BOUND_MS, TimeUnit.MILLISECONDS);
            if (item == null) {
                fail("no event within " + TestServer.BOUND_MS + " ms");
            }
            if (item instanceof Exception) {
                throw (Exception) item;
            }
            if (!(item instanceof ElectionEvent)) {
                fail("the observer stopped: " + item);
            }
            return (ElectionEvent) item;
        }

        /** The next event, checked field by field (not its id, which must be there). */
        ElectionEvent expect(String type, String owner, long term, String value, String reason, long previousTerm, boolean gap)
                throws Exception {
            ElectionEvent e = next();
            String shown = e.toString();
            assertTrue(e.id() != 0, "an id: " + shown);
            assertEquals(type, e.type(), shown);
            assertEquals(owner, e.owner(), shown);
            assertEquals(term, e.term(), shown);
            assertEquals(value == null ? null : json(value), e.value(), shown);
            assertEquals(reason, e.reason(), shown);
            assertEquals(previousTerm, e.previousTerm(), shown);
            assertEquals(gap, e.gap(), shown);
            return e;
        }

        ElectionEvent leader(String owner, long term, String value) throws Exception {
            return expect(ElectionEvent.LEADER, owner, term, value, null, 0, false);
        }

        ElectionEvent vacant(String reason, long previousTerm) throws Exception {
            return expect(ElectionEvent.VACANT, null, 0, null, reason, previousTerm, false);
        }

        @Override
        public void close() {
            observer.close();
        }
    }

    @Test
    void electionsHandOverAndObserversSeeEveryChangeOnce() throws Exception {
        String name = unique("java/sched");
        try (CuttingProxy proxy = new CuttingProxy(server.port);
             LeasegateClient watcher = LeasegateClient.builder().servers(TestServer.closedPortUrl(), proxy.url())
                     .timeout(Duration.ofSeconds(2)).build();
             Events events = new Events(watcher.observe(name))) {
            events.vacant(null, 0); // never campaigned: a vacancy of unknown reason
            Leadership a = client.campaign(name, Map.of("url", "http://a"), AcquireOptions.defaults().owner("a"));
            assertEquals(a.lease().token(), a.term());
            assertEquals(json("{\"url\":\"http://a\"}"), a.value());
            assertTrue(a.lease().isElection());
            events.leader("a", a.term(), "{\"url\":\"http://a\"}");

            NotLeaderException held = assertThrows(NotLeaderException.class,
                    () -> client.campaign(name, "b", AcquireOptions.defaults().owner("b")));
            assertEquals("a", held.body().get("leader").get("owner").asText());
            assertTrue(held instanceof LockHeldException);
            // The stream outlives the client's timeout (2 s), which bounds only the answer's head.
            int opened = proxy.connections.get();
            Thread.sleep(3000);
            a.proclaim(Map.of("url", "http://a2"));
            assertEquals(json("{\"url\":\"http://a2\"}"), a.value());
            events.leader("a", a.term(), "{\"url\":\"http://a2\"}");
            assertEquals(opened, proxy.connections.get(), "the observer's stream stayed open");
            JsonNode state = client.election(name);
            assertEquals("a", state.get("leader").get("owner").asText());
            assertEquals(a.term(), state.get("leader").get("term").asLong());
            assertTrue(state.get("vacant_since_ms").isNull());

            // b waits behind a; the observer's connection is cut and held while a resigns.
            CompletableFuture<Leadership> waitingB = client.campaignAsync(name, "b",
                    AcquireOptions.defaults().owner("b").waitFor(Duration.ofSeconds(20)));
            waitFor("b a candidate", () -> {
                JsonNode candidates = client.election(name).get("candidates");
                return candidates.size() == 1 && "b".equals(candidates.get(0).get("owner").asText());
            });
            int connections = proxy.connections.get();
            proxy.pause();
            proxy.cut();
            a.resign();
            Leadership b = waitingB.get(20, TimeUnit.SECONDS);
            proxy.resume();
            events.vacant("resigned", a.term());
            events.leader("b", b.term(), "\"b\"");
            assertTrue(proxy.connections.get() > connections, "the observer reconnected");
            NotLeaderException resigned = assertThrows(NotLeaderException.class, () -> a.proclaim("again"));
            assertEquals("released", resigned.body().get("reason").asText());
            a.resign(); // a second resignation does nothing

            b.resign();
            events.vacant("resigned", b.term());
            long term;
            try (Leadership c = client.campaign(name, null, AcquireOptions.defaults().owner("c"))) {
                term = c.term();
                events.leader("c", term, "null");
            }
            assertTrue(Tokens.compare(term, b.term()) > 0);
            events.vacant("resigned", term);
            assertTrue(client.election(name).get("leader").isNull(), "the block's end resigned");

            assertThrows(IllegalArgumentException.class,
                    () -> client.campaign(name, 1, AcquireOptions.defaults().mode(LockMode.READ)));
            assertThrows(IllegalArgumentException.class,
                    () -> client.campaign(name, 1, AcquireOptions.defaults().permits(2)));
        }
    }

    @Test
    void aLeadershipIsLostToExpiryAndToRevocation() throws Exception {
        String name = unique("java/lead");
        try (CuttingProxy proxy = new CuttingProxy(server.port);
             LeasegateClient cut = LeasegateClient.builder().servers(proxy.url()).timeout(Duration.ofSeconds(1)).build();
             Events events = new Events(client.observe(name))) {
            events.vacant(null, 0);
            // A leader whose renewals cannot reach the server expires: observers see the vacancy.
            Leadership x = cut.campaign(name, "x", AcquireOptions.defaults().owner("x").ttl(Duration.ofSeconds(1)));
            events.leader("x", x.term(), "\"x\"");
            proxy.pause();
            proxy.cut();
            events.vacant("expired", x.term());
            x.lost().get(20, TimeUnit.SECONDS);
            assertFalse(x.isValid());
            proxy.resume();

            // An admin's revocation: the leader's renewal is answered not_holder, and it is lost.
            Leadership y = client.campaign(name, "y", AcquireOptions.defaults().owner("y").ttl(Duration.ofSeconds(2)));
            events.leader("y", y.term(), "\"y\"");
            HttpRequest revoke = HttpRequest.newBuilder(URI.create(server.url + "/v1/elections/" + name)).DELETE().build();
            assertEquals(200, HttpClient.newHttpClient().send(revoke, HttpResponse.BodyHandlers.discarding()).statusCode());
            events.vacant("revoked", y.term());
            y.lost().get(20, TimeUnit.SECONDS);
            NotLeaderException revoked = assertThrows(NotLeaderException.class, () -> y.proclaim("still?"));
            assertEquals("revoked", revoked.body().get("reason").asText());
            y.resign(); // as a lost lease's release: one courtesy try, no error
            assertThrows(LeaseLostException.class, y::close);
        }
    }

    @Test
    void anObserverResumesAfterAnIdAndReportsAGap() throws Exception {
        try (TestServer small = new TestServer("--events-keep", "4");
             LeasegateClient c = LeasegateClient.builder().servers(small.url).timeout(Duration.ofSeconds(2)).build()) {
            String name = "java/resume";
            ElectionEvent seen;
            Leadership a;
            try (Events first = new Events(c.observe(name))) {
                first.vacant(null, 0);
                a = c.campaign(name, 1, AcquireOptions.defaults().owner("a"));
                seen = first.leader("a", a.term(), "1");
            }
            a.proclaim(2);
            // A new observer resumes after the last event seen: the proclamation, and nothing twice.
            try (Events second = new Events(c.observe(name, seen.id()))) {
                ElectionEvent after = second.leader("a", a.term(), "2");
                assertTrue(after.id() > seen.id());
            }
            // More events than the server keeps: resuming after seen is 410, and the observer goes
            // on from the state, marked as a gap.
            for (int i = 0; i < 6; i++) {
                c.acquire("java/noise", AcquireOptions.defaults()).release();
            }
            a.proclaim(3);
            try (Events third = new Events(c.observe(name, seen.id()))) {
                third.expect(ElectionEvent.LEADER, "a", a.term(), "3", null, 0, true);
                a.resign();
                third.vacant("resigned", a.term());
            }
        }
        try (TestServer none = new TestServer("--events-keep", "0");
             LeasegateClient c = LeasegateClient.builder().servers(none.url).build();
             ElectionObserver observer = c.observe("java/none")) {
            LeasegateException off = assertThrows(LeasegateException.class, observer::next);
            assertEquals(404, off.status());
        }
    }
}
