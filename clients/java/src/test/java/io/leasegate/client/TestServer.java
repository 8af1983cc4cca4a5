package io.leasegate.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * The real binary ($LEASEGATE_BIN) on a loopback port with its own temporary database; stopped
 * by its PID. Only loopback traffic; every wait is bounded.
 */
final class TestServer implements AutoCloseable {
    static final long BOUND_MS = 20_000; // the longest any wait in these tests may take
    private static final Pattern READY = Pattern.compile("^leasegate: listening on (https?://127\\.0\\.0\\.1:(\\d+))\\s*$");

    final Path dir;
    private final List<String> args;
    private Process process;
    String url;
    int port;

    /** A server on a free port with its own database and these extra arguments. */
    TestServer(String... args) throws IOException {
        this(Files.createTempDirectory("leasegate-java-"), 0, args);
    }

    private TestServer(Path dir, int port, String... args) throws IOException {
        this.dir = dir;
        this.args = List.of(args);
        start(port);
    }

    private void start(int listenPort) throws IOException {
        String bin = System.getenv("LEASEGATE_BIN");
        if (bin == null || !Files.isExecutable(Path.of(bin))) {
            throw new IllegalStateException("set LEASEGATE_BIN to the leasegate binary (e.g. build/leasegate)");
        }
        List<String> command = new ArrayList<>(List.of(bin, "serve", "--listen", "127.0.0.1:" + listenPort,
                "--data", dir.resolve("test.db").toString()));
        command.addAll(args);
        process = new ProcessBuilder(command).redirectErrorStream(false)
                .redirectError(ProcessBuilder.Redirect.appendTo(dir.resolve("stderr.log").toFile()))
                .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null"))).start();
        CompletableFuture<String> ready = new CompletableFuture<>();
        Process p = process;
        Thread reader = new Thread(() -> { // for the whole life of the process, so the pipe never fills
            try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = out.readLine()) != null; ) {
                    Matcher m = READY.matcher(line);
                    if (m.matches()) {
                        ready.complete(m.group(1));
                    }
                }
            } catch (IOException e) {
                // the process ended
            }
            ready.complete(null);
        }, "leasegate-stdout");
        reader.setDaemon(true);
        reader.start();
        String found;
        try {
            found = ready.get(10, TimeUnit.SECONDS);
        } catch (Exception e) {
            found = null;
        }
        if (found == null) {
            process.destroyForcibly();
            throw new IllegalStateException("leasegate did not start; see " + dir.resolve("stderr.log") + ": "
                    + Files.readString(dir.resolve("stderr.log")));
        }
        url = found;
        port = Integer.parseInt(found.substring(found.lastIndexOf(':') + 1));
    }

    void signal(String name) throws IOException, InterruptedException {
        Process kill = new ProcessBuilder("kill", "-" + name, Long.toString(process.pid())).inheritIO().start();
        if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
            throw new IllegalStateException("kill -" + name + " failed");
        }
    }

    /** kill -9, then the same binary on the same port and database. */
    void crashAndRestart() throws IOException, InterruptedException {
        process.destroyForcibly();
        process.waitFor(10, TimeUnit.SECONDS);
        start(port);
    }

    @Override
    public void close() throws IOException {
        try {
            if (process.isAlive()) {
                signal("CONT"); // a stopped process cannot act on SIGTERM
                process.destroy();
                if (!process.waitFor(10, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                    process.waitFor(10, TimeUnit.SECONDS);
                }
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
    }

    /** A loopback URL where nothing listens. */
    static String closedPortUrl() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return "http://127.0.0.1:" + s.getLocalPort();
        }
    }

    /** A name no other test uses. */
    static String unique(String prefix) {
        return prefix + "/" + java.util.UUID.randomUUID().toString().substring(0, 8);
    }

    /** Polls until the condition holds; fails after BOUND_MS. */
    static void waitFor(String what, java.util.function.BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(BOUND_MS);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError("timed out waiting for " + what);
            }
            Thread.sleep(20);
        }
    }
}
