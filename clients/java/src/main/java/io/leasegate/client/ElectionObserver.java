package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Flow;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/**
 * Follows an election ({@code GET /v1/elections/{name}/observe}, Server-Sent Events), one event
 * at a time, from {@link LeasegateClient#observe}:
 *
 * <pre>{@code
 * try (ElectionObserver observer = client.observe("scheduler")) {
 *     for (ElectionEvent e = observer.next(); e != null; e = observer.next()) {
 *         ...  // e.isLeader(): e.owner(), e.term(), e.value(); else a vacancy: e.reason(), e.previousTerm()
 *     }
 * }
 * }</pre>
 *
 * <p>The first event is the election's state (a leader, or a vacancy whose reason is null when no
 * end is known), unless it resumes after an id. A stream that ends (a cut connection, a restart,
 * {@value #SILENCE_SECONDS} s without a byte though the server sends a comment every 15 s) is opened
 * again, on the same server or the next, with {@code Last-Event-ID}: the id of the last event
 * returned, so the server sends exactly the ones after it, none twice. When the server no longer
 * keeps them (410, or a {@code too_old} message: its ring dropped them, it restarted, another
 * gateway leads now), the stream opens again without an id and starts from the election's state:
 * one that says what the last event said is not returned again, anything else is returned with
 * {@link ElectionEvent#gap()} set.
 *
 * <p>{@link #next()} is for one thread; {@link #close()} may be called from any, and makes a
 * {@code next()} in progress return null.
 */
public final class ElectionObserver implements AutoCloseable {
    static final int SILENCE_SECONDS = 45;
    private static final long SILENCE_NANOS = TimeUnit.SECONDS.toNanos(SILENCE_SECONDS);
    private static final int MAX_LINE = 1 << 20; // a line of the stream; an event's data is far smaller
    private static final int MAX_ERROR = 64 << 10; // an error answer's body, read at most

    private final Transport transport;
    private final String name;
    private final String path;
    private final long retryForNanos;
    private final Object lock = new Object(); // guards closed, opening and stream; close() notifies it
    private boolean closed;
    private CompletableFuture<?> opening;
    private Chunks stream;

    private RuntimeException stopped; // next() throws it from now on

    // The resume point and what the caller has seen.
    private String lastId; // sent as Last-Event-ID; null to start from the state
    private ElectionEvent last; // the last event returned
    private boolean gap; // the events after lastId are gone: the next stream starts from the state
    private boolean fresh; // the open stream started from the state after such a gap
    private boolean restart; // the stream said too_old: open it again from the state

    // The message being read.
    private String event;
    private String id;
    private StringBuilder data;
    private final ByteArrayOutputStream partial = new ByteArrayOutputStream(); // a line read in part

    // Failures since the last stream opened.
    private long failingSince;
    private int tried;
    private final List<String> failures = new ArrayList<>();

    ElectionObserver(Transport transport, String name, Long after, long retryForNanos) {
        this.transport = transport;
        this.name = name;
        this.path = "/v1/elections/" + Transport.quote(name) + "/observe";
        this.lastId = after == null ? null : Long.toUnsignedString(after);
        this.retryForNanos = retryForNanos;
    }

    /** The election's name. */
    public String name() {
        return name;
    }

    /**
     * The next event, waiting as long as it takes; null once {@link #close()} was called.
     *
     * @throws UnavailableException when no server answered for the retry time (then every later
     *     call throws it too; observe again with the last event's id to go on)
     * @throws LeasegateException for an error answer (404 {@code not_found} when the server keeps
     *     no events, 401, 403): the observer has stopped
     * @throws InterruptedException when interrupted (the stream is closed; a later call opens it again)
     */
    public ElectionEvent next() throws InterruptedException {
        while (true) {
            synchronized (lock) {
                if (closed) {
                    closeStream();
                    return null;
                }
            }
            if (stopped != null) {
                throw stopped;
            }
            if (stream == null) {
                pause(open());
                continue;
            }
            ElectionEvent ev;
            try {
                ev = read();
            } catch (IOException e) {
                ev = null;
            } catch (InterruptedException e) {
                closeStream();
                throw e;
            }
            if (ev != null) {
                return ev;
            }
            closeStream();
            ended();
        }
    }

    /** Ends the stream; a {@link #next()} in progress returns null, and so does every later one. */
    @Override
    public void close() {
        synchronized (lock) {
            closed = true;
            if (opening != null) {
                opening.cancel(true);
            }
            if (stream != null) {
                stream.cancel();
            }
            lock.notifyAll();
        }
    }

    // Opening --------------------------------------------------------------------------------

    /** Opens the stream on the current server; when it cannot, the nanoseconds to wait before the next try. */
    private long open() throws InterruptedException {
        int index = transport.currentServer();
        String server = transport.servers().get(index);
        Chunks chunks = new Chunks();
        CompletableFuture<HttpResponse<Chunks>> request = transport.openStream(server, path, lastId, info -> chunks);
        synchronized (lock) {
            if (closed) {
                request.cancel(true);
                return 0;
            }
            opening = request;
        }
        HttpResponse<Chunks> response;
        try {
            response = request.get();
        } catch (ExecutionException e) {
            return failed(server, Transport.unwrap(e));
        } catch (CancellationException e) {
            return 0; // closed
        } catch (InterruptedException e) {
            request.cancel(true);
            chunks.cancel();
            throw e;
        } finally {
            synchronized (lock) {
                opening = null;
            }
        }
        int status = response.statusCode();
        if (status != 200) {
            byte[] body;
            try {
                body = chunks.readAtMost(MAX_ERROR, transport.timeoutNanos);
            } finally {
                chunks.cancel();
            }
            JsonNode parsed;
            try {
                parsed = Transport.JSON.readTree(body);
            } catch (IOException e) {
                parsed = null;
            }
            LeasegateException answer = LeasegateException.fromAnswer(status, parsed, new String(body, StandardCharsets.UTF_8));
            if (status == 410) {
                fromState();
            } else if (status == 503) {
                return failed(server, answer);
            } else {
                stopped = answer;
            }
            return 0;
        }
        synchronized (lock) {
            if (closed) {
                chunks.cancel();
                return 0;
            }
            stream = chunks;
        }
        event = null;
        id = null;
        data = null;
        partial.reset();
        fresh = gap;
        gap = false;
        failingSince = 0;
        tried = 0;
        failures.clear();
        transport.setCurrentServer(index);
        return 0;
    }

    /**
     * A try on server that got no answer, or 503: the next server, after a pause once every
     * server failed in a row (50 ms doubling to 1 s, jittered); stops once none answered for the
     * retry time.
     */
    private long failed(String server, Throwable error) {
        long now = System.nanoTime();
        if (tried == 0 && failures.isEmpty()) {
            failingSince = now;
        }
        failures.add(error instanceof LeasegateException && ((LeasegateException) error).status() != 0
                ? server + ": " + error.getMessage() : Transport.describe(server, error));
        transport.setCurrentServer(transport.currentServer() + 1);
        tried++;
        int count = transport.servers().size();
        if (tried % count != 0) {
            return 0;
        }
        if (now - failingSince >= retryForNanos) {
            if (error instanceof LeasegateException && ((LeasegateException) error).status() == 503) {
                stopped = (LeasegateException) error; // the last round ended with a 503: say what it said
            } else {
                List<String> round = failures.subList(Math.max(0, failures.size() - count), failures.size());
                stopped = new UnavailableException("no leasegate server answered: " + String.join("; ", round), error);
            }
            return 0;
        }
        long backoff = Math.min(Transport.BACKOFF_MAX_NANOS, Transport.BACKOFF_FIRST_NANOS << Math.min(20, tried / count - 1));
        return (long) (backoff * ThreadLocalRandom.current().nextDouble(0.5, 1.0));
    }

    /**
     * The open stream ended: it is opened again, from the state after a too_old, at once; else
     * after a short pause, so a server that ends streams at once is not asked in a tight loop.
     */
    private void ended() throws InterruptedException {
        if (stopped != null) {
            return;
        }
        if (restart) {
            restart = false;
            fromState();
        } else {
            pause(Transport.BACKOFF_FIRST_NANOS);
        }
    }

    /** The next stream starts from the election's state: the events after the last one returned are gone. */
    private void fromState() {
        lastId = null;
        gap = true;
    }

    private void pause(long nanos) throws InterruptedException {
        long end = System.nanoTime() + nanos;
        synchronized (lock) {
            for (long left = nanos; left > 0 && !closed; left = end - System.nanoTime()) {
                TimeUnit.NANOSECONDS.timedWait(lock, left);
            }
        }
    }

    private void closeStream() {
        synchronized (lock) {
            if (stream != null) {
                stream.cancel();
                stream = null;
            }
        }
    }

    // Reading --------------------------------------------------------------------------------

    /**
     * Reads the stream up to the next event to return; null when the stream is to end (a
     * too_old, or a message that stopped the observer).
     *
     * @throws IOException when the stream ended, failed or fell silent
     */
    private ElectionEvent read() throws IOException, InterruptedException {
        while (true) {
            String line = line();
            if (line == null) {
                return null; // a line too long: stopped
            }
            if (!line.isEmpty()) {
                field(line);
                continue;
            }
            String ev = event;
            String ident = id;
            StringBuilder text = data;
            event = null;
            id = null;
            data = null;
            if (ev == null && text == null) {
                continue;
            }
            ElectionEvent result = message(ev, ident, text == null ? "" : text.toString());
            if (result != null) {
                return result;
            }
            if (stopped != null || restart) {
                return null;
            }
        }
    }

    /** The stream's next line, without its end; null (and stopped) for one above MAX_LINE. */
    private String line() throws IOException, InterruptedException {
        while (true) {
            ByteBuffer buffer = stream.current(SILENCE_NANOS);
            while (buffer.hasRemaining()) {
                byte b = buffer.get();
                if (b == '\n') {
                    byte[] bytes = partial.toByteArray();
                    partial.reset();
                    int length = bytes.length > 0 && bytes[bytes.length - 1] == '\r' ? bytes.length - 1 : bytes.length;
                    return new String(bytes, 0, length, StandardCharsets.UTF_8);
                }
                if (partial.size() >= MAX_LINE) {
                    stopped = new LeasegateException("a line of the observe stream of '" + name + "' is longer than "
                            + MAX_LINE + " bytes", 0, null, null);
                    return null;
                }
                partial.write(b);
            }
        }
    }

    /** One "field: value" line into the message being read. */
    private void field(String line) {
        if (line.startsWith(":")) {
            return; // a comment: the keep-alive
        }
        int colon = line.indexOf(':');
        String field = colon < 0 ? line : line.substring(0, colon);
        String value = colon < 0 ? "" : line.substring(colon + 1);
        if (value.startsWith(" ")) {
            value = value.substring(1);
        }
        switch (field) {
            case "event":
                event = value;
                break;
            case "id":
                id = value;
                break;
            case "data":
                if (data == null) {
                    data = new StringBuilder(value);
                } else {
                    data.append('\n').append(value);
                }
                break;
            default:
                break; // retry:, and fields this client does not know
        }
    }

    /**
     * What a whole message means: an event to return, or null (a message to skip, a too_old,
     * which sets restart, or one that stopped the observer).
     */
    private ElectionEvent message(String type, String ident, String text) {
        if ("too_old".equals(type)) {
            restart = true;
            return null;
        }
        if ("unauthorized".equals(type)) { // the key was removed or narrowed while the stream was open
            JsonNode body = parseOrNull(text);
            boolean forbidden = body != null && "forbidden".equals(body.path("error").asText());
            stopped = LeasegateException.fromAnswer(forbidden ? 403 : 401, body, text);
            return null;
        }
        if (!ElectionEvent.LEADER.equals(type) && !ElectionEvent.VACANT.equals(type)) {
            return null; // a kind of message this client does not know
        }
        JsonNode fields = parseOrNull(text);
        if (fields == null || !fields.isObject()) {
            stopped = new LeasegateException("an observe message of '" + name + "' that is not a JSON object: " + text, 0, null, null);
            return null;
        }
        long eventId = 0;
        if (ident != null) {
            try {
                eventId = Long.parseLong(ident.strip());
            } catch (NumberFormatException e) {
                stopped = new LeasegateException("an observe message's id '" + ident + "' is not a number", 0, null, null);
                return null;
            }
            lastId = ident.strip();
        }
        JsonNode reason = fields.get("reason");
        ElectionEvent ev = new ElectionEvent(type, eventId, fields.hasNonNull("owner") ? fields.get("owner").asText() : null,
                fields.path("term").asLong(0), ElectionEvent.LEADER.equals(type) ? fields.path("value").isMissingNode()
                        ? NullNode.getInstance() : fields.get("value") : null,
                reason != null && reason.isTextual() ? reason.asText() : null, fields.path("previous_term").asLong(0), false);
        boolean afterGap = fresh;
        fresh = false;
        if (afterGap) {
            if (sameState(last, ev)) {
                last = last.withId(ev.id());
                return null;
            }
            ev = ev.withGap();
        }
        last = ev;
        return ev;
    }

    /**
     * The state a stream opened with (now) says what the last event returned said: the same
     * leader with the same value, or a vacancy that is not known to be another.
     */
    private static boolean sameState(ElectionEvent last, ElectionEvent now) {
        if (last == null || !last.type().equals(now.type())) {
            return false;
        }
        if (now.isLeader()) {
            return last.owner().equals(now.owner()) && last.term() == now.term() && last.value().equals(now.value());
        }
        return now.previousTerm() == 0
                || (now.previousTerm() == last.previousTerm() && java.util.Objects.equals(now.reason(), last.reason()));
    }

    private static JsonNode parseOrNull(String text) {
        try {
            return Transport.JSON.readTree(text);
        } catch (IOException e) {
            return null;
        }
    }

    /**
     * The body of one stream as it comes: chunks queued for the reading thread, one more asked
     * for each time the last is used up. Cancelling it closes the connection and wakes the reader.
     */
    static final class Chunks implements HttpResponse.BodySubscriber<Chunks> {
        private static final Object END = new Object();
        private final BlockingQueue<Object> queue = new LinkedBlockingQueue<>();
        private final ArrayDeque<ByteBuffer> buffers = new ArrayDeque<>();
        private volatile Flow.Subscription subscription;
        private volatile boolean cancelled;
        private boolean done; // END or an error was taken (the reading thread's)

        @Override
        public CompletionStage<Chunks> getBody() {
            return CompletableFuture.completedFuture(this);
        }

        @Override
        public void onSubscribe(Flow.Subscription s) {
            subscription = s;
            if (cancelled) {
                s.cancel();
            } else {
                s.request(1);
            }
        }

        @Override
        public void onNext(List<ByteBuffer> items) {
            queue.add(items);
        }

        @Override
        public void onError(Throwable error) {
            queue.add(error);
        }

        @Override
        public void onComplete() {
            queue.add(END);
        }

        void cancel() {
            cancelled = true;
            Flow.Subscription s = subscription;
            if (s != null) {
                s.cancel();
            }
            queue.add(END);
        }

        /**
         * A buffer with bytes left, waiting for the next chunk up to {@code silenceNanos}.
         *
         * @throws IOException at the end of the stream, on its failure, or after the silence
         */
        ByteBuffer current(long silenceNanos) throws IOException, InterruptedException {
            while (true) {
                while (!buffers.isEmpty() && !buffers.peek().hasRemaining()) {
                    buffers.poll();
                }
                if (!buffers.isEmpty()) {
                    return buffers.peek();
                }
                if (done || cancelled) {
                    throw new EOFException("the stream ended");
                }
                Object next = queue.poll(silenceNanos, TimeUnit.NANOSECONDS);
                if (next == null) {
                    throw new IOException("nothing came for " + TimeUnit.NANOSECONDS.toSeconds(silenceNanos) + " s");
                }
                if (next == END || next instanceof Throwable) {
                    done = true;
                    throw next instanceof Throwable ? new IOException((Throwable) next) : new EOFException("the stream ended");
                }
                @SuppressWarnings("unchecked")
                List<ByteBuffer> items = (List<ByteBuffer>) next;
                buffers.addAll(items);
                subscription.request(1);
            }
        }

        /** At most {@code max} bytes of the body (an error answer's), within {@code timeoutNanos}. */
        byte[] readAtMost(int max, long timeoutNanos) throws InterruptedException {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            long end = System.nanoTime() + timeoutNanos;
            try {
                while (out.size() < max) {
                    ByteBuffer b = current(Math.max(1, end - System.nanoTime()));
                    int n = Math.min(b.remaining(), max - out.size());
                    byte[] part = new byte[n];
                    b.get(part);
                    out.write(part, 0, n);
                }
            } catch (IOException e) {
                // the end of the body, or no more within the time: what came is the answer
            }
            return out.toByteArray();
        }
    }
}
