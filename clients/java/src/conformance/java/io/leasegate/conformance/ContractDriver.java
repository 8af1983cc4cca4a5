package io.leasegate.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.leasegate.client.AcquireOptions;
import io.leasegate.client.Durations;
import io.leasegate.client.Lease;
import io.leasegate.client.LeaseLostException;
import io.leasegate.client.LeaseLostListener;
import io.leasegate.client.LeasegateClient;
import io.leasegate.client.LeasegateException;
import io.leasegate.client.LeasegateLock;
import io.leasegate.client.LeasegateSemaphore;
import io.leasegate.client.LockMode;
import io.leasegate.client.StaleTokenException;
import io.leasegate.client.Tokens;
import io.leasegate.client.UnavailableException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * The Java client's contract driver for tests/conformance/run.py: reads the steps of
 * tests/conformance/PROTOCOL.md as JSON lines on stdin, carries each out with the client's public
 * API the way an application would, and writes the answers and the lost events on stdout. It adds
 * no retries, clocks or checks of its own: what is tested is the client.
 *
 * <p>A lock is a {@link LeasegateLock} with a {@link LeaseLostListener} (its {@code tryLock}, its
 * reentry, its {@code unlock}); a permit comes from a {@link LeasegateSemaphore}; an acquire with a
 * caller's {@code request_id} is {@link LeasegateClient#acquire} (or {@code acquirePermit}) with
 * {@code keepAlive}, since a request_id names one acquire. Steps run one at a time on the main
 * thread, which is therefore the holder of every lock.
 */
public final class ContractDriver {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final List<String> CAPABILITIES =
            List.of("read", "semaphore", "reentry", "request_id", "write", "fence", "duration", "check_after_pause");

    private final PrintStream out;
    private final Map<String, Ref> refs = new ConcurrentHashMap<>(); // the loss listeners read it too
    private LeasegateClient client;
    private int nextRef;

    /** One granted level of a lease, as the runner names it. */
    private abstract static class Ref {
        final String name;
        final Lease lease;
        volatile boolean released; // by a release step: no lost event for it then
        private boolean told; // its lost event was written; guarded by this

        Ref(String name, Lease lease) {
            this.name = name;
            this.lease = lease;
        }

        /** Gives this level back. */
        abstract void release();

        /** True once, for the first loss of a level not released. */
        synchronized boolean tell() {
            if (released || told) {
                return false;
            }
            told = true;
            return true;
        }
    }

    /** A level of a LeasegateLock held by the main thread: given back by unlock(). */
    private static final class LockRef extends Ref {
        final LeasegateLock lock;

        LockRef(String name, LeasegateLock lock) {
            super(name, lock.getLease());
            this.lock = lock;
        }

        @Override
        void release() {
            lock.unlock();
        }
    }

    /** A level of a Lease taken by hand (a permit, a caller's request_id): given back by leave(). */
    private static final class LeaseRef extends Ref {
        LeaseRef(String name, Lease lease) {
            super(name, lease);
        }

        @Override
        void release() {
            lease.leave();
        }
    }

    private ContractDriver(PrintStream out) {
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);
        ContractDriver driver = new ContractDriver(out);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (!line.isBlank()) {
                driver.step(line);
            }
        }
        out.flush();
        // The runner stops the server; held leases need no release. halt: no shutdown hooks to wait for.
        Runtime.getRuntime().halt(0);
    }

    private void step(String line) {
        JsonNode step;
        try {
            step = JSON.readTree(line);
        } catch (Exception e) {
            System.err.println("driver: a line that is not JSON: " + line);
            return;
        }
        long id = step.path("id").asLong();
        ObjectNode answer;
        try {
            answer = switch (step.path("op").asText()) {
                case "hello" -> hello(step);
                case "acquire" -> acquire(step);
                case "renew" -> renew(step);
                case "release" -> release(step);
                case "check" -> check(step);
                case "write" -> write(step);
                case "fence" -> fence(step);
                case "duration" -> duration(step);
                default -> failure("unsupported", "no such step: " + step.path("op").asText());
            };
        } catch (Exception e) {
            answer = failure(codeOf(e), String.valueOf(e.getMessage()));
            if (e instanceof StaleTokenException && e.getMessage() != null) {
                answer.set("max_token", tokenText(((StaleTokenException) e).body().get("max_token")));
            }
            if ("driver_error".equals(answer.path("error").asText())) {
                e.printStackTrace();
            }
        }
        ObjectNode line2 = JSON.createObjectNode().put("id", id);
        line2.setAll(answer);
        emit(line2);
    }

    // Steps ----------------------------------------------------------------------------------------

    private ObjectNode hello(JsonNode step) {
        List<String> servers = new ArrayList<>();
        step.path("servers").forEach(s -> servers.add(s.asText()));
        LeasegateClient.Builder builder = LeasegateClient.builder().servers(servers);
        if (step.hasNonNull("owner")) {
            builder.owner(step.get("owner").asText());
        }
        if (step.hasNonNull("timeout_ms")) {
            builder.timeout(Duration.ofMillis(step.get("timeout_ms").asLong()));
        }
        if (step.hasNonNull("retry_for_ms")) {
            builder.retryFor(Duration.ofMillis(step.get("retry_for_ms").asLong()));
        }
        client = builder.build();
        ObjectNode ok = ok().put("client", "java");
        CAPABILITIES.forEach(ok.putArray("capabilities")::add);
        return ok;
    }

    private ObjectNode acquire(JsonNode step) throws InterruptedException {
        String ref = "L" + ++nextRef;
        if (step.hasNonNull("reenter")) {
            return reenter(ref, ref(step.get("reenter").asText()));
        }
        String name = step.path("name").asText();
        long waitMs = step.path("wait_ms").asLong(0);
        AcquireOptions options = AcquireOptions.defaults().onLost(lostListener());
        if (step.hasNonNull("ttl_ms")) {
            options = options.ttl(Duration.ofMillis(step.get("ttl_ms").asLong()));
        }
        String requestId = step.hasNonNull("request_id") ? step.get("request_id").asText() : null;
        if (step.hasNonNull("semaphore")) {
            int limit = step.get("semaphore").path("limit").asInt();
            Lease permit;
            if (requestId != null) {
                permit = client.acquirePermit(name, limit,
                        options.waitFor(Duration.ofMillis(waitMs)).keepAlive(true).requestId(requestId));
            } else {
                permit = client.getSemaphore(name, limit, options).tryAcquire(waitMs, TimeUnit.MILLISECONDS);
                if (permit == null) {
                    return failure("semaphore_full", "no permit of '" + name + "' within " + waitMs + " ms");
                }
            }
            return granted(new LeaseRef(ref, permit));
        }
        LockMode mode = "read".equals(step.path("mode").asText("write")) ? LockMode.READ : LockMode.WRITE;
        options = options.mode(mode);
        if (requestId != null) {
            Lease lease = client.acquire(name, options.waitFor(Duration.ofMillis(waitMs)).keepAlive(true).requestId(requestId));
            return granted(new LeaseRef(ref, lease));
        }
        LeasegateLock lock = mode == LockMode.READ ? client.getReadWriteLock(name, options).readLock()
                : client.getLock(name, options);
        boolean locked = waitMs == 0 ? lock.tryLock() : lock.tryLock(waitMs, TimeUnit.MILLISECONDS);
        if (!locked) {
            return failure("lock_held", "'" + name + "' was not granted within " + waitMs + " ms");
        }
        return granted(new LockRef(ref, lock));
    }

    private ObjectNode reenter(String ref, Ref held) {
        if (held instanceof LockRef) {
            LeasegateLock lock = ((LockRef) held).lock;
            if (!lock.tryLock()) { // the main thread holds it: this is a reentry on the server
                return failure("lock_held", "the reentry was not granted");
            }
            return granted(new LockRef(ref, lock));
        }
        held.lease.reenter();
        return granted(new LeaseRef(ref, held.lease));
    }

    private ObjectNode granted(Ref ref) {
        refs.put(ref.name, ref);
        Lease lease = ref.lease;
        LeaseLostException early = lease.lostException();
        if (early != null) { // lost before the ref was known to the listener
            tell(ref, early);
        }
        ObjectNode ok = ok().put("lease_ref", ref.name).put("token", Tokens.toString(lease.token()))
                .put("name", lease.name()).put("ttl_ms", lease.ttl().toMillis()).put("count", lease.count());
        ok.put("mode", lease.mode() == null ? null : lease.mode().wire());
        ObjectNode header = ok.putObject("lease_header");
        lease.headers().forEach(header::put);
        return ok;
    }

    /** Tells the runner of a loss, once per level of the lost lease not released by the driver. */
    private LeaseLostListener lostListener() {
        return loss -> {
            for (Ref r : refs.values()) {
                if (r.lease == loss.lease()) {
                    tell(r, loss);
                }
            }
        };
    }

    private void tell(Ref ref, LeaseLostException loss) {
        if (ref.tell()) {
            emit(JSON.createObjectNode().put("event", "lost").put("lease_ref", ref.name)
                    .put("at_ms", System.currentTimeMillis()).put("reason", loss.getMessage()));
        }
    }

    private ObjectNode renew(JsonNode step) {
        Ref ref = ref(step.path("lease_ref").asText());
        if (step.hasNonNull("ttl_ms")) {
            ref.lease.renew(Duration.ofMillis(step.get("ttl_ms").asLong()));
        } else {
            ref.lease.renew();
        }
        return ok().put("token", Tokens.toString(ref.lease.token())).put("ttl_ms", ref.lease.ttl().toMillis());
    }

    private ObjectNode release(JsonNode step) {
        Ref ref = ref(step.path("lease_ref").asText());
        if (ref.released) {
            return ok();
        }
        ref.released = true;
        ref.release();
        return ok();
    }

    private ObjectNode check(JsonNode step) {
        ref(step.path("lease_ref").asText()).lease.check();
        return ok();
    }

    private ObjectNode write(JsonNode step) {
        Ref ref = ref(step.path("lease_ref").asText());
        byte[] body = step.hasNonNull("body") ? step.get("body").asText().getBytes(StandardCharsets.UTF_8) : null;
        HttpResponse<byte[]> response = ref.lease.request(step.path("method").asText("PUT"), step.path("path").asText(), body);
        String code = null;
        try {
            JsonNode answer = JSON.readTree(response.body());
            if (answer != null && answer.path("error").isTextual()) {
                code = answer.get("error").asText();
            }
        } catch (Exception e) {
            // not JSON: no code
        }
        return ok().put("status", response.statusCode()).put("code", code);
    }

    private ObjectNode fence(JsonNode step) {
        var result = client.fence(step.path("resource").asText(), Tokens.parse(step.path("token").asText()));
        return ok().put("accepted", result.accepted()).put("max_token", Tokens.toString(result.maxToken()));
    }

    private ObjectNode duration(JsonNode step) {
        try {
            return ok().put("ms", Durations.parse(step.path("text").asText(null), "duration").toMillis());
        } catch (IllegalArgumentException e) {
            return failure("bad_duration", e.getMessage());
        }
    }

    // Lines ----------------------------------------------------------------------------------------

    private Ref ref(String name) {
        Ref ref = refs.get(name);
        if (ref == null) {
            throw new IllegalArgumentException("no lease ref " + name);
        }
        return ref;
    }

    private static String codeOf(Throwable e) {
        if (e instanceof LeaseLostException) {
            return "lost";
        }
        if (e instanceof UnavailableException) {
            return "unavailable";
        }
        if (e instanceof LeasegateException && ((LeasegateException) e).code() != null) {
            return ((LeasegateException) e).code();
        }
        return "driver_error";
    }

    private static JsonNode tokenText(JsonNode token) {
        return token != null && token.isIntegralNumber() ? JSON.getNodeFactory().textNode(token.bigIntegerValue().toString())
                : JSON.getNodeFactory().nullNode();
    }

    private static ObjectNode ok() {
        return JSON.createObjectNode().put("ok", true);
    }

    private static ObjectNode failure(String code, String message) {
        return JSON.createObjectNode().put("ok", false).put("error", code).put("message", message);
    }

    private void emit(ObjectNode line) {
        String text = line.toString();
        synchronized (out) {
            out.print(text);
            out.print('\n');
            out.flush();
        }
    }
}
