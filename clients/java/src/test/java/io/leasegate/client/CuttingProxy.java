package io.leasegate.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A TCP proxy on a free loopback port to a server, for clients that must survive cut connections:
 * {@link #cut()} closes every connection through it; while {@link #pause()}d, new connections are
 * accepted but wait (nothing reaches the server) until {@link #resume()}. Counts connections.
 */
final class CuttingProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final int target;
    private final Set<Socket> sockets = ConcurrentHashMap.newKeySet();
    private volatile CountDownLatch paused = new CountDownLatch(0);
    final AtomicInteger connections = new AtomicInteger();

    CuttingProxy(int targetPort) throws IOException {
        listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        target = targetPort;
        Thread t = new Thread(this::accept, "cutting-proxy");
        t.setDaemon(true);
        t.start();
    }

    String url() {
        return "http://127.0.0.1:" + listener.getLocalPort();
    }

    synchronized void pause() {
        if (paused.getCount() == 0) {
            paused = new CountDownLatch(1);
        }
    }

    synchronized void resume() {
        paused.countDown();
    }

    void cut() {
        for (Socket s : sockets) {
            close(s);
        }
        sockets.clear();
    }

    private void accept() {
        while (true) {
            Socket client;
            try {
                client = listener.accept();
            } catch (IOException e) {
                return; // closed
            }
            connections.incrementAndGet();
            sockets.add(client);
            CountDownLatch gate = paused;
            Thread t = new Thread(() -> relay(client, gate), "cutting-proxy-relay");
            t.setDaemon(true);
            t.start();
        }
    }

    private void relay(Socket client, CountDownLatch gate) {
        Socket server = null;
        try {
            if (!gate.await(60, TimeUnit.SECONDS) || client.isClosed()) {
                close(client);
                return;
            }
            server = new Socket(InetAddress.getLoopbackAddress(), target);
            sockets.add(server);
            Socket s = server;
            Thread back = new Thread(() -> pump(s, client), "cutting-proxy-back");
            back.setDaemon(true);
            back.start();
            pump(client, server);
        } catch (IOException | InterruptedException e) {
            close(client);
            if (server != null) {
                close(server);
            }
        }
    }

    private static void pump(Socket from, Socket to) {
        byte[] buffer = new byte[16384];
        try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
            for (int n; (n = in.read(buffer)) >= 0; ) {
                out.write(buffer, 0, n);
                out.flush();
            }
        } catch (IOException e) {
            // cut, or closed by a side
        } finally {
            close(from);
            close(to);
        }
    }

    private static void close(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // closing anyway
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        resume();
        cut();
    }
}
