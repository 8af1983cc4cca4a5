package io.leasegate.fence;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.leasegate.client.LeasegateException;
import io.leasegate.client.Tokens;
import io.leasegate.client.UnavailableException;
import java.math.BigInteger;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.ReentrantLock;

/**
 * What a storage backend's fence check does with one request, independent of any server API:
 * {@link FencingFilter} is its adapter to the servlet API, and an adapter to another one (javax
 * servlets, {@code com.sun.net.httpserver}, Netty) is a few lines around {@link #admit}.
 *
 * <p>Reads (GET, HEAD, OPTIONS) pass. A write must carry its fencing token in the
 * {@code Fencing-Token} header (decimal digits; the guard proxy sets it, a client sends its lease's
 * token), which is checked against the resource's highest token: refused with 409
 * {@code stale_token} when older, with 428 {@code token_required} when missing.
 *
 * <p><b>A check is only as good as the order of the writes it admits.</b> Two writes with tokens 5
 * and 6 may both pass a check (5 first) and then be applied 6 first, 5 second. So, by default, the
 * gate admits one write per resource at a time, first come first served, and holds that turn from
 * before the check until the {@link Ticket} is closed after the write was applied: within this
 * process, writes to a resource are applied in token order. (Replicas of a backend serialize
 * nothing between them: there the store's own precondition must decide, see docs/fencing.md.)
 */
public final class FenceGate {
    /** The request header that carries the token. */
    public static final String TOKEN_HEADER = "Fencing-Token";

    private static final ObjectMapper JSON = new ObjectMapper();

    private final FenceCheck check;
    private final boolean serialize;
    private final ConcurrentHashMap<String, Turns> turns = new ConcurrentHashMap<>();

    /** A gate that applies writes to one resource one at a time. */
    public FenceGate(FenceCheck check) {
        this(check, true);
    }

    /** @param serialize false: admit concurrent writes to a resource (the caller orders them itself) */
    public FenceGate(FenceCheck check, boolean serialize) {
        this.check = check;
        this.serialize = serialize;
    }

    /** True for a method that writes: every one but GET, HEAD and OPTIONS. */
    public static boolean isWrite(String method) {
        return !("GET".equals(method) || "HEAD".equals(method) || "OPTIONS".equals(method));
    }

    /**
     * Decides one request. The ticket is admitted (a read, or a write whose token passed, which then
     * holds the resource's turn) or refused (status and JSON body to answer with). Close it when the
     * write was applied, also when it failed: try-with-resources.
     *
     * @param resource the resource the request writes (null or empty: refused with 400)
     * @param token the {@code Fencing-Token} header's value, or null
     */
    public Ticket admit(String method, String resource, String token) {
        if (!isWrite(method)) {
            return new Ticket(null, null, 0, 0, null, null);
        }
        if (token == null || token.isEmpty()) {
            return refused(428, error("token_required", "a write needs its fencing token in the "
                    + TOKEN_HEADER + " header").put("field", TOKEN_HEADER));
        }
        long parsed;
        try {
            parsed = Tokens.parse(token.strip());
        } catch (IllegalArgumentException e) {
            return refused(400, error("bad_request", TOKEN_HEADER + ": " + e.getMessage()).put("field", TOKEN_HEADER));
        }
        if (resource == null || resource.isEmpty()) {
            return refused(400, error("bad_request", "this path names no resource to fence"));
        }
        Turns slot = serialize ? enter(resource) : null;
        FenceDecision decision;
        try {
            decision = check.check(resource, parsed);
        } catch (UnavailableException e) {
            leave(resource, slot);
            return refused(503, error("fence_unavailable", "the fence check could not be made: " + e.getMessage())
                    .put("resource", resource));
        } catch (LeasegateException e) {
            leave(resource, slot);
            int status = e.status() >= 400 && e.status() < 500 ? e.status() : 502;
            ObjectNode body = e.body().isObject() && e.code() != null ? ((ObjectNode) e.body()).deepCopy()
                    : error("fence_unavailable", e.getMessage());
            return refused(status, body.put("resource", resource));
        } catch (RuntimeException | Error e) {
            leave(resource, slot);
            throw e;
        }
        if (!decision.accepted()) {
            leave(resource, slot);
            ObjectNode body = error("stale_token", "token " + Tokens.toString(parsed) + " is older than "
                    + Tokens.toString(decision.maxToken()) + ", which " + resource + " has seen").put("resource", resource);
            body.put("token", new BigInteger(Tokens.toString(parsed)));
            body.put("max_token", new BigInteger(Tokens.toString(decision.maxToken())));
            return refused(409, body);
        }
        return new Ticket(decision, null, 0, parsed, resource, slot);
    }

    private Ticket refused(int status, ObjectNode body) {
        return new Ticket(null, body.toString(), status, 0, null, null);
    }

    private static ObjectNode error(String code, String message) {
        return JSON.createObjectNode().put("error", code).put("message", message);
    }

    /** The turns of one resource: a fair lock, and how many tickets use it (it goes when none does). */
    private static final class Turns {
        final ReentrantLock lock = new ReentrantLock(true);
        int users; // guarded by the map's compute
    }

    private Turns enter(String resource) {
        Turns slot = turns.compute(resource, (k, s) -> {
            Turns t = s == null ? new Turns() : s;
            t.users++;
            return t;
        });
        slot.lock.lock();
        return slot;
    }

    private void leave(String resource, Turns slot) {
        if (slot == null) {
            return;
        }
        slot.lock.unlock();
        turns.computeIfPresent(resource, (k, s) -> --s.users == 0 ? null : s);
    }

    /** Resources with a write in progress or waiting (for tests and metrics). */
    public int busyResources() {
        return turns.size();
    }

    /** The decision for one request; close it once the write was applied. Not thread-safe: one request's. */
    public final class Ticket implements AutoCloseable {
        private final FenceDecision decision;
        private final String refusal;
        private final int status;
        private final long token;
        private final String resource;
        private Turns slot; // the turn held until close, or null

        private Ticket(FenceDecision decision, String refusal, int status, long token, String resource, Turns slot) {
            this.decision = decision;
            this.refusal = refusal;
            this.status = status;
            this.token = token;
            this.resource = resource;
            this.slot = slot;
        }

        /** True when the request may go ahead. */
        public boolean admitted() {
            return refusal == null;
        }

        /** The status to refuse with (409, 428, 400, 503); 0 when admitted. */
        public int status() {
            return status;
        }

        /** The JSON body to refuse with ({@code {"error": ..., "message": ...}}); null when admitted. */
        public String body() {
            return refusal;
        }

        /** The admitted write's token; 0 for a read or a refusal. */
        public long token() {
            return token;
        }

        /** The check's decision for an admitted write; null for a read or a refusal. */
        public FenceDecision decision() {
            return decision;
        }

        /** Ends the write's turn (a second call does nothing). */
        @Override
        public void close() {
            Turns s = slot;
            slot = null;
            leave(resource, s);
        }
    }
}
