package io.leasegate.client;

import static io.leasegate.client.TestServer.unique;
import static io.leasegate.client.TestServer.waitFor;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** LeasegateLock as a java.util.concurrent Lock: per thread, reentrant, interruptible, with futures. */
class LockTest {
    private static TestServer server;
    private static LeasegateClient client;

    @BeforeAll
    static void start() throws Exception {
        server = new TestServer();
        client = LeasegateClient.builder().servers(server.url).build();
    }

    @AfterAll
    static void stop() throws Exception {
        client.close();
        server.close();
    }

    /** Runs on another thread and waits for it. */
    private static <T> T onAnotherThread(java.util.concurrent.Callable<T> body) throws Exception {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                result.complete(body.call());
            } catch (Throwable e) {
                result.completeExceptionally(e);
            }
        });
        t.start();
        try {
            return result.get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            throw (Exception) e.getCause();
        }
    }

    @Test
    void heldPerThreadAndReentrantOnTheServer() throws Exception {
        String name = unique("java/lock");
        LeasegateLock lock = client.getLock(name);
        long token = lock.lockAndGetToken();
        assertEquals(token, client.status(name).get("holder").get("token").asLong());
        assertTrue(lock.isHeldByCurrentThread());
        assertTrue(lock.isLocked());
        assertFalse(onAnotherThread(() -> lock.tryLock()), "another thread waits its turn");
        assertNull(onAnotherThread(() -> lock.tryLockAndGetToken()));
        assertThrows(IllegalMonitorStateException.class, () -> onAnotherThread(() -> {
            lock.unlock();
            return null;
        }));
        lock.lock(); // reentry: the server counts it, the token stays
        assertEquals(2, lock.getHoldCount());
        assertEquals(2, client.status(name).get("holder").get("count").asInt());
        assertEquals(token, lock.getToken());
        lock.unlock();
        assertTrue(lock.isLocked());
        lock.unlock();
        assertFalse(lock.isLocked());
        assertEquals(0, lock.getHoldCount());
        assertThrows(IllegalMonitorStateException.class, lock::getToken);
        assertThrows(UnsupportedOperationException.class, lock::newCondition);
    }

    @Test
    void lockWaitsForTheHolderFirstComeFirstServed() throws Exception {
        String name = unique("java/lock-wait");
        LeasegateLock lock = client.getLock(name);
        lock.lock();
        CompletableFuture<Long> waiter = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            lock.lock();
            waiter.complete(lock.getToken());
            lock.unlock();
        });
        t.start();
        waitFor("a waiter", () -> client.status(name).get("waiters").asInt() == 1);
        long mine = lock.getToken();
        lock.unlock();
        assertTrue(Tokens.compare(waiter.get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS), mine) > 0);
        t.join(TestServer.BOUND_MS);
        waitFor("free", () -> !lock.isLocked());
    }

    @Test
    void aWaitTooLongForTheClockIsNoDeadline() throws Exception {
        String name = unique("java/lock-forever");
        LeasegateLock lock = client.getLock(name);
        lock.lock();
        CompletableFuture<Boolean> waiter = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                waiter.complete(lock.tryLock(Long.MAX_VALUE, TimeUnit.DAYS)); // nanoseconds overflow a long
                lock.unlock();
            } catch (Throwable e) {
                waiter.completeExceptionally(e);
            }
        });
        t.start();
        waitFor("a waiter", () -> client.status(name).get("waiters").asInt() == 1 || waiter.isDone());
        assertFalse(waiter.isDone(), "it waits rather than giving up at once");
        lock.unlock();
        assertTrue(waiter.get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS));
        t.join(TestServer.BOUND_MS);
    }

    @Test
    void lockInterruptiblyGivesUpItsPlaceWhenInterrupted() throws Exception {
        String name = unique("java/lock-int");
        LeasegateLock lock = client.getLock(name);
        lock.lock();
        CompletableFuture<Throwable> outcome = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                lock.lockInterruptibly();
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
        lock.unlock();
        assertFalse(lock.isLocked());
    }

    @Test
    void tryWithResourcesGivesEveryLevelBack() throws Exception {
        String name = unique("java/lock-close");
        LeasegateLock lock = client.getLock(name);
        lock.lock();
        try (lock) {
            lock.lock();
            assertEquals(2, lock.getHoldCount());
        }
        assertEquals(0, lock.getHoldCount());
        assertFalse(lock.isLocked());
        lock.close(); // holds nothing: does nothing
    }

    @Test
    void aLossIsToldAndEveryUnlockOfThatHoldSaysSo() throws Exception {
        String name = unique("java/lock-lost");
        List<LeaseLostException> told = new CopyOnWriteArrayList<>();
        LeasegateLock lock = client.getLock(name, AcquireOptions.defaults().ttl(Duration.ofSeconds(1))).addLostListener(told::add);
        lock.lock();
        lock.lock();
        assertEquals(200, ClientTest.forceRelease(server.url, name));
        waitFor("the listener (the next renewal finds the loss)", () -> told.size() == 1);
        assertFalse(lock.isHeldByCurrentThread());
        assertThrows(LeaseLostException.class, lock::unlock);
        assertThrows(LeaseLostException.class, lock::unlock);
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
        assertTrue(lock.tryLock(), "the lock can be taken again");
        lock.unlock();
        assertEquals(1, told.size());
    }

    @Test
    void futuresHoldForTheThreadIdTheyName() throws Exception {
        String name = unique("java/lock-async");
        LeasegateLock lock = client.getLock(name);
        long token = lock.lockAndGetTokenAsync().get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS);
        @SuppressWarnings("deprecation")
        long me = Thread.currentThread().getId();
        assertTrue(lock.isHeldByThread(me));
        assertEquals(token, lock.getToken());
        assertFalse(lock.tryLockAsync(0, TimeUnit.SECONDS, 77).get(), "holder 77 waits for holder " + me);
        CompletableFuture<Boolean> waiting = lock.tryLockAsync(20, TimeUnit.SECONDS, 78);
        waitFor("a waiter", () -> client.status(name).get("waiters").asInt() == 1);
        onAnotherThread(() -> lock.unlockAsync(me).get()); // the id names the holder, not the thread
        assertTrue(waiting.get(TestServer.BOUND_MS, TimeUnit.MILLISECONDS));
        assertTrue(lock.isHeldByThread(78));
        CompletableFuture<Boolean> cancelled = lock.tryLockAsync(120, TimeUnit.SECONDS, 79); // longer than any wait here
        waitFor("a waiter", () -> client.status(name).get("waiters").asInt() == 1);
        cancelled.cancel(true); // closes its exchange: the server drops the waiter
        waitFor("no waiter", () -> client.status(name).get("waiters").asInt() == 0);
        assertFalse(lock.isHeldByThread(79));
        lock.unlockAsync(78).get();
        assertFalse(lock.isLocked());
        CompletableFuture<Void> failed = lock.unlockAsync(78);
        assertThrows(java.util.concurrent.ExecutionException.class, failed::get);
    }
}
