package io.leasegate.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A TCP proxy on a free loopback port to a server: the first request it carries is forwarded, its
 * whole answer read and then dropped (the client's connection is closed without it: an answer
 * lost on the way back); every later connection is passed through. Counts connections. With a
 * method, it goes request by request instead (kept-alive connections too): the first request of
 * that method is the one whose answer is dropped, and the requests of that method are kept.
 */
final class DroppingProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final int target;
    private final String method; // null: drop the first connection's answer
    private final AtomicBoolean dropped = new AtomicBoolean();
    final AtomicInteger connections = new AtomicInteger();
    final List<String> requests = new CopyOnWriteArrayList<>(); // of `method`, head and body
    final int port;

    DroppingProxy(int targetPort) throws IOException {
        this(targetPort, null);
    }

    DroppingProxy(int targetPort, String method) throws IOException {
        this.method = method;
        listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        port = listener.getLocalPort();
        target = targetPort;
        Thread t = new Thread(this::accept, "dropping-proxy");
        t.setDaemon(true);
        t.start();
    }

    String url() {
        return "http://127.0.0.1:" + port;
    }

    private void accept() {
        while (true) {
            Socket client;
            try {
                client = listener.accept();
            } catch (IOException e) {
                return; // closed
            }
            int n = connections.incrementAndGet();
            Thread t = new Thread(() -> {
                if (method != null) {
                    serveByRequest(client);
                } else {
                    serve(client, n == 1);
                }
            }, "dropping-proxy-conn");
            t.setDaemon(true);
            t.start();
        }
    }

    private void serve(Socket client, boolean drop) {
        try (client; Socket upstream = new Socket(InetAddress.getLoopbackAddress(), target)) {
            client.setSoTimeout((int) TestServer.BOUND_MS);
            upstream.setSoTimeout((int) TestServer.BOUND_MS);
            if (drop) {
                byte[] request = readMessage(client.getInputStream());
                upstream.getOutputStream().write(request);
                readMessage(upstream.getInputStream()); // the whole answer, which nobody gets
                return;
            }
            Thread back = new Thread(() -> pump(upstream, client));
            back.setDaemon(true);
            back.start();
            pump(client, upstream);
            back.join(TestServer.BOUND_MS);
        } catch (IOException | InterruptedException e) {
            // a connection ended
        }
    }

    private void serveByRequest(Socket client) {
        try (client; Socket upstream = new Socket(InetAddress.getLoopbackAddress(), target)) {
            client.setSoTimeout((int) TestServer.BOUND_MS);
            upstream.setSoTimeout((int) TestServer.BOUND_MS);
            while (true) {
                byte[] request = readMessage(client.getInputStream());
                upstream.getOutputStream().write(request);
                byte[] answer = readMessage(upstream.getInputStream());
                String text = new String(request, StandardCharsets.ISO_8859_1);
                if (text.startsWith(method + " ")) {
                    requests.add(text);
                    if (dropped.compareAndSet(false, true)) {
                        return; // applied upstream; the client's connection closes without its answer
                    }
                }
                client.getOutputStream().write(answer);
                client.getOutputStream().flush();
            }
        } catch (IOException e) {
            // a connection ended
        }
    }

    /** One HTTP/1.1 message with a Content-Length (or none): head and body. */
    private static byte[] readMessage(InputStream in) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        while (!head.toString(StandardCharsets.ISO_8859_1).endsWith("\r\n\r\n")) {
            int c = in.read();
            if (c < 0) {
                throw new IOException("cut short");
            }
            head.write(c);
        }
        int length = 0;
        for (String line : head.toString(StandardCharsets.ISO_8859_1).split("\r\n")) {
            if (line.toLowerCase(Locale.ROOT).startsWith("content-length:")) {
                length = Integer.parseInt(line.substring(15).strip());
            }
        }
        byte[] body = in.readNBytes(length);
        head.write(body);
        return head.toByteArray();
    }

    private static void pump(Socket from, Socket to) {
        try {
            InputStream in = from.getInputStream();
            OutputStream out = to.getOutputStream();
            byte[] buf = new byte[65536];
            for (int n; (n = in.read(buf)) > 0; ) {
                out.write(buf, 0, n);
                out.flush();
            }
            to.shutdownOutput();
        } catch (IOException e) {
            // closed
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
    }
}
