"""Fencing tokens only ever grow: across grants, releases, expiries, restarts and kill -9."""

import threading
import time
import unittest

import harness


class TokenTests(unittest.TestCase):
    def setUp(self):
        self.srv = harness.Server()
        self.seen = []  # every token received in a 200 grant

    def tearDown(self):
        self.srv.cleanup()

    def grant(self, name, owner="tok", client=None, **kw):
        c = client or self.srv.client
        st, _, body = c.acquire(name, owner, **kw)
        self.assertEqual(st, 200, body)
        self.assertIsInstance(body["token"], int)
        if self.seen:
            self.assertGreater(body["token"], max(self.seen), "token did not grow: %r" % body)
        self.seen.append(body["token"])
        return body

    def test_grants_on_distinct_locks_increase(self):
        prev = 0
        for i in range(20):
            b = self.grant("tok/distinct/%d" % i)
            self.assertGreater(b["token"], prev)
            self.assertGreaterEqual(b["token"], 1)
            prev = b["token"]

    def test_release_then_regrant_increases(self):
        name = "tok/rel"
        for _ in range(10):
            b = self.grant(name)
            st, _, r = self.srv.release(name, b["lease"])
            self.assertEqual(st, 200, r)
            self.assertTrue(r["released"])
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(st, 200)
        self.assertEqual(g["last_token"], self.seen[-1])

    def test_expiry_then_regrant_increases(self):
        name = "tok/exp"
        b1 = self.grant(name, ttl_ms=150)
        time.sleep(0.6)
        b2 = self.grant(name, owner="other", ttl_ms=150)
        self.assertGreater(b2["token"], b1["token"])
        self.assertNotEqual(b2["lease"], b1["lease"])

    def test_reentry_keeps_token_and_next_grant_grows(self):
        name = "tok/reentry"
        b = self.grant(name, ttl_ms=10000)
        st, _, r = self.srv.acquire(name, "tok", lease=b["lease"], ttl_ms=10000)
        self.assertEqual(st, 200, r)
        self.assertEqual(r["token"], b["token"])
        self.assertEqual(r["count"], 2)
        # A grant of another lock after the reentry still takes the next value.
        b2 = self.grant("tok/reentry-other")
        self.assertGreater(b2["token"], b["token"])

    def test_restart_sigterm(self):
        for i in range(5):
            self.grant("tok/sigterm/%d" % i, ttl_ms=200)
        b = self.grant("tok/sigterm/held", ttl_ms=60000)
        rc = self.srv.stop()
        self.assertEqual(rc, 0, "SIGTERM should exit 0; stderr: %s" % self.srv.stderr_text())
        self.srv.start()
        for i in range(5):
            self.grant("tok/sigterm/after/%d" % i)
        st, _, g = self.srv.get_lock("tok/sigterm/held")
        self.assertEqual(g["holder"]["token"], b["token"])

    def test_repeated_restarts(self):
        for round_ in range(3):
            self.grant("tok/rounds/%d" % round_, ttl_ms=100)
            self.srv.restart(kill9=(round_ % 2 == 1))
        self.grant("tok/rounds/final")

    def test_kill9_under_load(self):
        """Threads acquire/release distinct locks while the server is kill -9'd."""
        n_threads = 4
        port = self.srv.port
        stop = threading.Event()
        got_lock = threading.Lock()
        received = []  # tokens from 200 responses, all threads
        errors = []
        counts = [0] * n_threads

        def worker(idx):
            c = harness.Client(port, timeout=10.0)
            deadline = time.monotonic() + 20.0
            try:
                j = 0
                while not stop.is_set() and time.monotonic() < deadline and j < 100000:
                    name = "tok/load/%d/%d" % (idx, j % 50)
                    st, _, b = c.acquire(name, "w%d" % idx, ttl_ms=60000)
                    if st != 200:
                        errors.append(("acquire", idx, st, b))
                        return
                    with got_lock:
                        received.append(b["token"])
                    counts[idx] += 1
                    st, _, r = c.release(name, b["lease"])
                    if st != 200:
                        errors.append(("release", idx, st, r))
                        return
                    j += 1
            except (OSError, Exception):
                # Expected once the server is killed.
                pass
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_threads)]
        for t in threads:
            t.start()
        # Let them run until a fair amount of grants happened (bounded).
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and len(received) < 400:
            time.sleep(0.05)
        self.srv.kill9()
        stop.set()
        for t in threads:
            t.join(15)
            self.assertFalse(t.is_alive(), "worker thread did not stop")
        self.assertEqual(errors, [], "non-200 before the kill")
        self.assertGreater(len(received), 0, "no grants happened before the kill")
        self.assertEqual(len(received), len(set(received)), "a token was handed out twice")
        max_before = max(received)

        self.srv.start()
        after = []
        for i in range(20):
            st, _, b = self.srv.acquire("tok/load/after/%d" % i, "after", ttl_ms=60000)
            self.assertEqual(st, 200, b)
            after.append(b["token"])
        # Also re-acquire names the workers used: they may still be held (killed between
        # acquire and release); those with wait_ms=0 may be lock_held, which is fine.
        for idx in range(n_threads):
            st, _, b = self.srv.acquire("tok/load/%d/0" % idx, "after", ttl_ms=1000)
            self.assertIn(st, (200, 409), b)
            if st == 200:
                after.append(b["token"])
        self.assertGreater(min(after), max_before,
                           "token after kill -9 restart (%d) not above every token handed out before (%d)"
                           % (min(after), max_before))
        self.assertEqual(after, sorted(after))
        self.assertEqual(len(after), len(set(after)))


if __name__ == "__main__":
    harness.run_tests()
