"""Floods: thousands of idle or trickling connections, tens of thousands of waiters, and
the limits above them. Throughout, /healthz on a fresh connection must keep answering,
and the answers above a limit must be clean JSON 503s. The worst /healthz time seen is
printed (docs/RELIABILITY.md records it); the tests assert answers, not times.

Only 127.0.0.1; every wait is bounded.
"""

import json
import os
import socket
import sys
import time
import unittest

import harness

SANITIZED = os.environ.get("LEASEGATE_SANITIZED") == "1"


def post(path, body):
    data = json.dumps(body).encode()
    return (("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
             % (path, len(data))).encode() + data)


class Health:
    """/healthz on a fresh connection each time; keeps the worst time."""

    def __init__(self, srv):
        self.srv = srv
        self.worst = 0.0

    def check(self):
        t0 = time.monotonic()
        c = self.srv.new_client(timeout=10)
        try:
            st, _, b = c.request("GET", "/healthz")
        finally:
            c.close()
        self.worst = max(self.worst, time.monotonic() - t0)
        return st == 200 and b == self.srv.healthy_body()


def connect_many(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks.append(s)
    return socks


class SlowlorisTests(unittest.TestCase):
    def test_ten_thousand_trickling_connections(self):
        n = 2000 if SANITIZED else 10000
        harness.raise_nofile_limit()
        with harness.Server(extra_args=["--max-connections", str(n + 100), "--peer-max-connections", str(n + 100),
                                            "--peer-max-half-sent", str(n + 100)]) as srv:
            health = Health(srv)
            socks = connect_many(srv.port, n)
            try:
                # Each sends a request head one piece at a time, never finishing it.
                for rnd in range(3):
                    for s in socks:
                        s.send(b"GET /healthz HTTP/1.1\r\n" if rnd == 0 else b"X-Slow-%d: y\r\n" % rnd)
                    self.assertTrue(health.check())
                    time.sleep(0.5)
                self.assertTrue(health.check())
            finally:
                for s in socks:
                    s.close()
            srv.wait_until(health.check, what="/healthz after the flood")
            sys.stderr.write("slowloris: %d connections, worst /healthz %.3f s\n" % (n, health.worst))


class WaiterFloodTests(unittest.TestCase):
    def test_twenty_thousand_waiters_and_clean_503s_above_the_limits(self):
        # 20,000 waiters on 1,000 locks, or as many as the descriptor limit lets both
        # the server and this process hold (each waiter is a socket on both sides).
        limit = harness.raise_nofile_limit()
        per_lock = 20
        locks = min(200 if SANITIZED else 1000, (limit - 1000) // per_lock)
        total = locks * per_lock
        with harness.Server(extra_args=["--max-connections", str(total + 200), "--peer-max-connections", str(total + 200),
                                        "--peer-max-half-sent", str(total + 200), "--max-waiters", str(total),
                                        "--max-waiters-per-lock", str(per_lock)]) as srv:
            health = Health(srv)
            holders = {}
            for i in range(locks):
                st, _, h = srv.acquire("flood/%d" % i, "holder", ttl_ms=600000)
                self.assertEqual(st, 200, h)
                holders[i] = h
            socks = []
            try:
                for i in range(locks):
                    for w in range(per_lock):
                        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
                        s.sendall(post("/v1/locks/flood/%d/acquire" % i,
                                       {"owner": "w%d" % w, "wait_ms": 600000, "ttl_ms": 60000}))
                        socks.append((i, w, s))
                    if i % 100 == 0:
                        self.assertTrue(health.check())
                srv.wait_until(lambda: srv.metric("leasegate_waiters") == total, timeout=60,
                               what="%d waiters" % total)
                self.assertTrue(health.check())
                # Above the limits: a clean JSON 503 naming them.
                st, _, b = srv.acquire("flood/0", "over", wait_ms=1000)
                self.assertEqual((st, b["error"]), (503, "overloaded"), b)
                self.assertIn("--max-waiters", b["message"])
                # Each release wakes exactly the first waiter of its lock.
                for i in (0, locks - 1):
                    self.assertEqual(srv.release("flood/%d" % i, holders[i]["lease"])[0], 200)
                    first = next(s for (li, w, s) in socks if li == i and w == 0)
                    st, _, body = harness.read_response(first, timeout=30)
                    self.assertEqual(st, 200, body)
                    self.assertEqual(json.loads(body)["owner"], "w0")
                self.assertTrue(health.check())
            finally:
                for _, _, s in socks:
                    s.close()
            srv.wait_until(lambda: srv.metric("leasegate_waiters") == 0, timeout=60, what="the waiters to leave")
            sys.stderr.write("waiters: %d on %d locks, worst /healthz %.3f s\n" % (total, locks, health.worst))


class ManyNamesTests(unittest.TestCase):
    def test_hundred_thousand_names_come_and_go(self):
        """100,000 names acquired (all held at once), then released, by 32 clients (so
        that commits are shared): idle names are forgotten after --forget-idle-after,
        the table empties, and at least half the memory they took goes back."""
        import threading
        n = 20000 if SANITIZED else 100000
        clients = 32
        with harness.Server(extra_args=["--forget-idle-after", "2"]) as srv:
            st, _, _ = srv.request("GET", "/healthz")
            base_kb = srv.rss_kb()
            errors = []

            leases = {}

            def run(phase):
                def worker(k):
                    c = srv.new_client(timeout=30)
                    try:
                        for i in range(k, n, clients):
                            if phase == "acquire":
                                st, _, g = c.acquire("many/%d" % i, "o", ttl_ms=600000)
                                leases[i] = g.get("lease") if isinstance(g, dict) else None
                            else:
                                st, _, g = c.release("many/%d" % i, leases[i])
                            if st != 200:
                                errors.append((phase, st, g))
                                return
                    finally:
                        c.close()
                threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(clients)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(600)
                self.assertEqual(errors, [])

            run("acquire")  # all held at once
            peak_kb = srv.rss_kb()
            self.assertEqual(srv.metric("leasegate_locks_held"), n)
            run("release")
            self.assertEqual(srv.metric("leasegate_last_token"), n)
            srv.wait_until(lambda: srv.metric("leasegate_locks") == 0, timeout=60, what="every idle name forgotten")
            if SANITIZED:
                # ASan keeps freed memory in its quarantine and its own allocator never
                # gives it back: the memory figure only means something with glibc malloc.
                return
            srv.wait_until(lambda: srv.rss_kb() < base_kb + (peak_kb - base_kb) / 2, timeout=30,
                           what="memory to go back (base %d KiB, peak %d KiB, now %d KiB)"
                           % (base_kb, peak_kb, srv.rss_kb()))
            sys.stderr.write("names: %d, RSS %d KiB at start, %d KiB at the peak, %d KiB after forgetting\n"
                             % (n, base_kb, peak_kb, srv.rss_kb()))


if __name__ == "__main__":
    harness.run_tests()
