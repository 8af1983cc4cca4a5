"""Hostile clients of watches and event streams (review of d6aee64): every change a
reader of a lock can see wakes its watchers at once; raw sockets that hang up mid-stream
(RST and FIN), readers that never read while many events are published, thousands of
watchers on one lock, SIGTERM with all of them open, kill -9 and a restart."""

import json
import os
import socket
import struct
import threading
import time
import unittest

from harness import Server
from test_watch import LockState


def raw_get(port, path, rcvbuf=None, headers=""):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % (path, headers)).encode())
    return s


def rst_close(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def read_until(s, marker, timeout=10):
    s.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while marker not in data and time.monotonic() < deadline:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def body_of(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


class WatchWakeTest(LockState, unittest.TestCase):
    """Changes that move a lock's index (and what GET shows) but wake no watcher."""

    def start(self, *args):
        self.srv = Server(list(args))
        self.addCleanup(self.srv.cleanup)
        self.c = self.srv.client

    def timed_watch(self, name, index, wait_ms):
        box = {}
        cl = self.srv.new_client(timeout=60)
        self.addCleanup(cl.close)

        def run():
            t0 = time.monotonic()
            box["r"] = cl.request("GET", "/v1/locks/%s?index=%d&wait_ms=%d" % (name, index, wait_ms), timeout=60)
            box["s"] = time.monotonic() - t0

        t = threading.Thread(target=run)
        t.start()
        return t, box

    def test_releasing_one_reentry_wakes_the_watch(self):
        self.start()
        st, _, g = self.c.acquire("r/a", owner="one", ttl_ms=60000)
        st, _, g2 = self.c.acquire("r/a", owner="one", ttl_ms=60000, lease=g["lease"])
        self.assertEqual(g2["count"], 2)
        before = self.state("r/a")
        self.assertEqual(before["holder"]["count"], 2)
        t, box = self.timed_watch("r/a", before["index"], 6000)
        time.sleep(0.3)
        st, _, rel = self.c.release("r/a", g["lease"])
        self.assertEqual((st, rel["count"]), (200, 1))
        t.join(30)
        st, _, body = box["r"]
        self.assertEqual(body["holder"]["count"], 1)
        self.assertGreater(body["index"], before["index"])
        self.assertLess(box["s"], 2.0, "the watch answered only at wait_ms, not when the count changed")

    def test_forgetting_a_lock_wakes_the_watch(self):
        self.start("--forget-idle-after", "1")
        st, _, g = self.c.acquire("f/a", owner="one", ttl_ms=60000)
        self.c.release("f/a", g["lease"])
        before = self.state("f/a")
        self.assertEqual(before["last_token"], g["token"])
        t, box = self.timed_watch("f/a", before["index"], 8000)
        t.join(30)
        st, _, body = box["r"]
        self.assertEqual(body["last_token"], 0, body)  # forgotten: what GET shows changed
        self.assertLess(box["s"], 4.0, "the watch answered only at wait_ms, not when the lock was forgotten")


class ParkedWaiterLeavesTest(unittest.TestCase):
    """A parked waiter (park.c frees req->arg) that hangs up, or is cancelled at
    SIGTERM, while a watch is open: its waiter_left must name its lock."""

    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.cleanup)
        self.c = self.srv.client

    def parked_waiter(self, name):
        body = json.dumps({"owner": "w", "ttl_ms": 60000, "wait_ms": 60000}).encode()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        self.addCleanup(s.close)
        s.sendall(("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n" % (name, len(body))).encode() + body)
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="the waiter")
        self.assertEqual(self.srv.metric("leasegate_connections_parked"), 1)
        return s

    def test_parked_waiter_hanging_up_wakes_the_watch_and_names_its_lock(self):
        st, _, g = self.c.acquire("p/a", owner="o", ttl_ms=60000)
        s = self.parked_waiter("p/a")
        idx = self.c.get_lock("p/a")[2]["index"]
        latest = self.c.request("GET", "/v1/events?limit=1")[2]["latest"]
        w = raw_get(self.srv.port, "/v1/locks/p/a?index=%d&wait_ms=5000" % idx)
        self.addCleanup(w.close)
        self.srv.wait_until(lambda: self.srv.metric("leasegate_watches") == 1, what="the watch")
        t0 = time.monotonic()
        rst_close(s)
        raw = read_until(w, b"[]}", timeout=10)
        self.assertTrue(self.srv.running(), self.srv.stderr_text()[-3000:])
        st, body = body_of(raw)
        self.assertEqual((st, json.loads(body)["waiters"]), (200, 0))
        self.assertLess(time.monotonic() - t0, 2.0, "the watch was not woken by the waiter leaving")
        st, _, ev = self.c.request("GET", "/v1/events?after=%d" % latest)
        self.assertEqual([(e["kind"], e["lock"]) for e in ev["events"]], [("waiter_left", "p/a")])

    def test_sigterm_with_a_parked_waiter_and_a_watch(self):
        st, _, g = self.c.acquire("p/b", owner="o", ttl_ms=60000)
        s = self.parked_waiter("p/b")
        w = raw_get(self.srv.port, "/v1/locks/other?index=%d&wait_ms=60000"
                    % self.c.get_lock("other")[2]["index"])
        self.addCleanup(w.close)
        self.srv.wait_until(lambda: self.srv.metric("leasegate_watches") == 1, what="the watch")
        rc = self.srv.stop()
        self.assertEqual(rc, 0, self.srv.stderr_text()[-3000:])
        self.assertIn(b"503", read_until(s, b"}", timeout=5))


class HostileStreamTest(unittest.TestCase):
    def setUp(self):
        self.srv = Server(["--events-keep", "100000"])
        self.addCleanup(self.srv.cleanup)
        self.c = self.srv.client
        self.socks = []
        self.addCleanup(self._close_all)

    def _close_all(self):
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass

    def sock(self, *a, **kw):
        s = raw_get(self.srv.port, *a, **kw)
        self.socks.append(s)
        return s

    def churn(self, n, name="h/x"):
        for _ in range(n):
            st, _, g = self.c.acquire(name, owner="o", ttl_ms=60000)
            self.c.release(name, g["lease"])

    def test_hangups_mid_stream_rst_and_fin_leave_nothing_behind(self):
        streams = [self.sock("/v1/events/stream") for _ in range(60)]
        for s in streams:
            self.assertIn(b"retry: 1000", read_until(s, b"retry: 1000"))
        stop = threading.Event()

        def publish():
            c = self.srv.new_client()
            try:
                while not stop.is_set():
                    st, _, g = c.acquire("h/x", owner="o", ttl_ms=60000)
                    c.release("h/x", g["lease"])
            finally:
                c.close()

        t = threading.Thread(target=publish)
        t.start()
        try:
            time.sleep(0.3)
            for i, s in enumerate(streams):
                if i % 3 == 0:
                    rst_close(s)
                elif i % 3 == 1:
                    s.shutdown(socket.SHUT_WR)  # FIN, still reading
                else:
                    s.close()
                time.sleep(0.005)
            time.sleep(0.5)
        finally:
            stop.set()
            t.join(30)
        self.srv.wait_until(lambda: self.srv.metric("leasegate_event_streams") == 0, timeout=10,
                            what="every stream freed")
        self.assertEqual(self.c.request("GET", "/healthz")[0], 200)

    def test_readers_that_never_read_then_sigterm(self):
        # Small receive buffers; nothing is ever read: the server's writes block.
        stuck = [self.sock("/v1/events/stream", rcvbuf=4096) for _ in range(20)]
        time.sleep(0.3)
        self.churn(1500)
        # A waiting acquire, watches, long-polls and fresh streams, all open at SIGTERM.
        st, _, g = self.c.acquire("h/held", owner="o", ttl_ms=60000)
        waiter = self.srv.new_client(timeout=60)
        self.addCleanup(waiter.close)
        box = {}
        wt = threading.Thread(target=lambda: box.update(r=waiter.acquire("h/held", owner="w", wait_ms=60000)))
        wt.start()
        self.srv.wait_until(lambda: self.srv.waiters("h/held") == 1, what="the waiter")
        idx = self.c.get_lock("h/held")[2]["index"]
        watches = [self.sock("/v1/locks/h/held?index=%d&wait_ms=60000" % idx) for _ in range(200)]
        latest = self.c.request("GET", "/v1/events?limit=1")[2]["latest"]
        polls = [self.sock("/v1/events?after=%d&wait_ms=60000&prefix=zzz" % latest) for _ in range(20)]
        fresh = [self.sock("/v1/events/stream?after=%d" % latest) for _ in range(20)]
        self.srv.wait_until(lambda: self.srv.metric("leasegate_watches") == 200, what="the watches")
        self.srv.wait_until(lambda: self.srv.metric("leasegate_event_streams") == 40, what="the streams")
        t0 = time.monotonic()
        rc = self.srv.stop()
        took = time.monotonic() - t0
        wt.join(30)
        self.assertEqual(rc, 0, self.srv.stderr_text()[-3000:])
        self.assertLess(took, 8.0)
        for s in watches[:20]:
            raw = read_until(s, b"}", timeout=5)
            self.assertTrue(raw.startswith(b"HTTP/1.1 200"), raw[:600])
        for s in fresh:
            raw = read_until(s, b"0\r\n\r\n", timeout=5)
            self.assertTrue(raw.startswith(b"HTTP/1.1 200"), raw[:600])
            self.assertTrue(raw.endswith(b"0\r\n\r\n"), raw[-200:])

    def test_thousands_of_watchers_on_one_lock_some_hanging_up(self):
        n = 3000
        st, _, g = self.c.acquire("h/many", owner="o", ttl_ms=60000)
        idx = self.c.get_lock("h/many")[2]["index"]
        ws = [self.sock("/v1/locks/h/many?index=%d&wait_ms=60000" % idx) for _ in range(n)]
        self.srv.wait_until(lambda: self.srv.metric("leasegate_watches") == n, timeout=20, what="the watches")
        for s in ws[::4]:
            rst_close(s)
        self.srv.wait_until(lambda: self.srv.metric("leasegate_watches") == n - len(ws[::4]), timeout=20,
                            what="hung-up watches dropped")
        self.c.renew("h/many", g["lease"], ttl_ms=70000)
        alive = [s for i, s in enumerate(ws) if i % 4]
        for s in alive:
            raw = read_until(s, b"[]}", timeout=10)
            st, body = body_of(raw)
            self.assertEqual(st, 200)
        self.assertEqual(self.srv.metric("leasegate_watches"), 0)
        self.assertNotIn(g["lease"].encode(), raw)

    def test_kill9_with_streams_then_old_ids_and_indexes(self):
        s = self.sock("/v1/events/stream")
        st, _, g = self.c.acquire("h/k", owner="o", ttl_ms=60000)
        raw = read_until(s, b"\"granted\"")
        seq = int(raw.split(b"id: ")[1].split(b"\n")[0])
        idx = self.c.get_lock("h/k")[2]["index"]
        self.srv.restart(kill9=True)
        c = self.srv.client
        st, _, body = c.request("GET", "/v1/events/stream", headers={"Last-Event-ID": str(seq)})
        self.assertEqual(st, 410, body)
        t0 = time.monotonic()
        st, _, body = c.request("GET", "/v1/locks/h/k?index=%d&wait_ms=5000" % idx)
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertGreater(body["index"], idx)
        self.assertEqual(body["holder"]["token"], g["token"])


if __name__ == "__main__":
    unittest.main()
