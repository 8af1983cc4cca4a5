"""A backend slower than the guard's timeout, and a gateway restarted with a write in
flight, must never apply an older token after a newer one (--guard-settle).

A backend has a write whole once its last byte arrived; cutting the connection after
that does not undo it. So when a released write's connection closes without an
answer (the guard's timeout, a kill -9 of the gateway), the lock takes no write for
--guard-settle seconds: 503 with Retry-After, whether the gateway stayed up or was
restarted (the time a write was let through is stored with the lock's mark).

The backend is tests/integration/applying_upstream.py, which applies a request once it
has it whole, after the delay the request asks for, whether or not the guard still
waits for the answer, and records the order in which it applied writes. Each test with
the protection on has a control with --guard-settle 0 that shows the reordering the
protection prevents, so the test can fail.

Only 127.0.0.1; every wait is bounded; no timing assertions (order and outcomes only).
"""

import threading
import time
import unittest
import uuid

import harness
from applying_upstream import ApplyingUpstream


def uid():
    return uuid.uuid4().hex[:10]


class SettleBase(unittest.TestCase):
    def setUp(self):
        self.up = ApplyingUpstream()
        self.servers = []

    def tearDown(self):
        for srv in self.servers:
            srv.cleanup()
        self.up.close()

    def server(self, settle, timeout=1, data_dir=None):
        srv = harness.Server(extra_args=["--guard", "/store/=" + self.up.url, "--guard-timeout", str(timeout),
                                         "--guard-settle", str(settle)], data_dir=data_dir)
        self.servers.append(srv)
        return srv

    def acquire(self, srv, lock, owner, **kw):
        kw.setdefault("ttl_ms", 60000)
        st, _, g = srv.acquire(lock, owner, **kw)
        self.assertEqual(st, 200, g)
        return g

    def put(self, srv, path, body, lease, delay_ms=0, client=None):
        h = {"Content-Type": "application/octet-stream", "Fencing-Lease": lease}
        if delay_ms:
            h["X-Apply-Delay-Ms"] = str(delay_ms)
        return (client or srv.client).request("PUT", path, raw=body, headers=h, timeout=30)

    def put_when_settled(self, srv, path, body, lease, limit_s=20):
        """B's write: refused while the lock settles (503, Retry-After), then let through.
        Returns the statuses seen, the last one the write's own."""
        seen = []
        deadline = time.monotonic() + limit_s
        while True:
            st, hdrs, b = self.put(srv, path, body, lease)
            seen.append(st)
            if st != 503 or time.monotonic() > deadline:
                return seen
            self.assertIn("settling", b["message"], b)
            self.assertEqual(b["lock"], path[len("/store/"):], b)
            self.assertGreaterEqual(int(hdrs["retry-after"]), 1, hdrs)
            time.sleep(min(b["retry_after_ms"], 1000) / 1000.0)

    def applied_tokens(self, path):
        return [int(a["token"]) for a in self.up.applied_to("/" + path[len("/store/"):])]


class SlowBackendTests(SettleBase):
    """A's whole PUT reached the backend, which takes 2.5 s to apply it; the guard's
    timeout is 1 s, so A gets 504 and its lease is force-released; B writes next."""

    def story(self, settle):
        srv = self.server(settle)
        lock = "slow-%s/obj" % uid()
        path = "/store/" + lock
        a = self.acquire(srv, lock, "a")
        st, _, body = self.put(srv, path, b"A", a["lease"], delay_ms=2500)
        self.assertEqual(st, 504, body)
        # The backend has A's write whole and is applying it.
        self.up.wait_for(lambda u: u.in_apply == 1, what="A's write in the backend")
        st, _, r = srv.request("DELETE", "/v1/locks/" + lock)
        self.assertEqual(st, 200, r)
        b = self.acquire(srv, lock, "b")
        self.assertGreater(b["token"], a["token"])
        seen = self.put_when_settled(srv, path, b"B", b["lease"])
        self.assertIn(seen[-1], (201, 204), seen)
        self.up.wait_for(lambda u: len(u.applied_to("/" + lock)) == 2, timeout=10, what="both writes applied")
        return a, b, seen, self.applied_tokens(path)

    def test_next_write_waits_until_the_slow_write_settled(self):
        a, b, seen, tokens = self.story(settle=4)
        self.assertEqual(tokens, [a["token"], b["token"]])
        self.assertEqual(seen[0], 503, "B's first write came while the lock settled: %r" % seen)

    def test_control_without_settle_the_older_token_lands_last(self):
        a, b, seen, tokens = self.story(settle=0)
        self.assertEqual(seen, [seen[-1]], "no settling with --guard-settle 0")
        self.assertEqual(tokens, [b["token"], a["token"]],
                         "the control must show the reordering that --guard-settle prevents")

    def test_metrics_count_settling_refusals(self):
        self.story(settle=4)
        st, _, text = self.servers[0].request("GET", "/metrics")
        self.assertEqual(st, 200)
        m = harness.parse_metrics(text)
        self.assertGreaterEqual(m['leasegate_guard_refused_total{reason="settling"}'], 1)


class RestartTests(SettleBase):
    """A's whole PUT is in the backend, which applies it 8 s later, when the gateway is
    killed (-9) and started again on its data (on etcd the restart itself takes a few
    seconds: the old leader's key must expire): the new process must not let B's write
    through before A's may have been applied."""

    def story(self, settle):
        srv = self.server(settle, timeout=30)
        lock = "restart-%s/obj" % uid()
        path = "/store/" + lock
        a = self.acquire(srv, lock, "a")
        c = srv.new_client(timeout=30)
        box = {}

        def a_side():
            try:
                box["a"] = self.put(srv, path, b"A", a["lease"], delay_ms=8000, client=c)[0]
            except (OSError, Exception) as e:  # the gateway dies under it
                box["a"] = repr(e)

        t = threading.Thread(target=a_side, daemon=True)
        t.start()
        self.up.wait_for(lambda u: u.in_apply == 1, what="A's write in the backend")
        srv.kill9()
        t.join(10)
        c.close()
        srv.start()
        st, _, r = srv.request("DELETE", "/v1/locks/" + lock)
        self.assertEqual(st, 200, r)
        b = self.acquire(srv, lock, "b")
        seen = self.put_when_settled(srv, path, b"B", b["lease"])
        self.assertIn(seen[-1], (201, 204), seen)
        self.up.wait_for(lambda u: len(u.applied_to("/" + lock)) == 2, timeout=10, what="both writes applied")
        return a, b, seen, self.applied_tokens(path)

    def test_a_restart_waits_out_the_settle_time(self):
        a, b, seen, tokens = self.story(settle=12)
        self.assertEqual(tokens, [a["token"], b["token"]])
        self.assertEqual(seen[0], 503, seen)

    def test_control_restart_without_settle_reorders(self):
        a, b, seen, tokens = self.story(settle=0)
        self.assertEqual(tokens, [b["token"], a["token"]],
                         "the control must show the reordering that --guard-settle prevents")


if __name__ == "__main__":
    harness.run_tests()
