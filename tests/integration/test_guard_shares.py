"""One client cannot make the guard refuse everyone else.

The guard's upstream calls are bounded globally (--guard-max-calls), per lock
(--guard-lock-max-calls), per API key (--guard-key-max-calls) and per peer address
(--guard-peer-max-calls); a write queued behind its lock's other writes waits at most
--guard-timeout. The attack of issue 26: one lease, many writes that trickle their
bodies (or hold their reads open), which used to take every call slot.

The victim connects to ::1 to be another peer (every address of 127.0.0.0/8 is one peer),
on a server that listens on both loopbacks. Only loopback traffic; every wait is bounded;
no timing assertions.
"""

import json
import os
import socket
import subprocess
import tempfile
import time
import unittest
import uuid

import harness
from applying_upstream import ApplyingUpstream
from upstream import SlowUpstream


def uid():
    return uuid.uuid4().hex[:10]


class HeldPut:
    """A PUT whose head and first byte are sent, and whose body then stalls."""

    def __init__(self, port, path, lease):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.sock.sendall(("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\nFencing-Lease: %s\r\n\r\nx"
                           % (path, lease)).encode())

    def answer_now(self, timeout=2.0):
        """(status, body) if an answer came within timeout, else None."""
        self.sock.settimeout(timeout)
        try:
            st, _, body = harness.read_response(self.sock, timeout)
        except (socket.timeout, OSError, AssertionError):
            return None
        return st, json.loads(body) if body.startswith(b"{") else body

    def close(self):
        self.sock.close()


def victim_request(port, method, path, body=None, headers=None):
    """One request from another peer (::1): (status, parsed body)."""
    s = socket.create_connection((harness.OTHER_PEER, port), timeout=10)
    try:
        head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" % (method, path)
        for k, v in (headers or {}).items():
            head += "%s: %s\r\n" % (k, v)
        data = body or b""
        if body is not None:
            head += "Content-Length: %d\r\n" % len(data)
        s.sendall(head.encode() + b"\r\n" + data)
        st, _, b = harness.read_response(s, 10)
        return st, json.loads(b) if b.startswith(b"{") else b
    finally:
        s.close()


class TrickleTests(unittest.TestCase):
    def setUp(self):
        if not harness.other_peer_works():
            self.skipTest("no dual-stack socket reachable at ::1 here")
        self.up = ApplyingUpstream()
        self.srv = harness.Server(extra_args=harness.DUAL_STACK + ["--insecure-no-auth",
            "--guard", "/store/=" + self.up.url, "--guard-timeout", "3", "--guard-max-calls", "12",
            "--guard-lock-max-calls", "3", "--guard-peer-max-calls", "6"])
        self.held = []

    def tearDown(self):
        for h in self.held:
            h.close()
        self.srv.cleanup()
        self.up.close()

    def test_one_lease_cannot_take_the_guard(self):
        lock = "greedy-%s/obj" % uid()
        g = self.srv.acquire(lock, "greedy", ttl_ms=60000)[2]
        path = "/store/" + lock
        # Three trickling writes fill the lock's share (one streams, two queue);
        # the fourth is refused at once.
        self.held = [HeldPut(self.srv.port, path, g["lease"]) for _ in range(3)]
        for h in self.held:
            self.assertIsNone(h.answer_now(0.3))
        extra = HeldPut(self.srv.port, path, g["lease"])
        self.held.append(extra)
        st, body = extra.answer_now(5)
        self.assertEqual((st, body["error"], body["limit"], body["lock"]), (503, "overloaded", "guard_lock_calls", lock))
        # More of its own locks fill the peer's share: 429 peer_limit.
        others = []
        for i in range(4):
            lk = "greedy-%s/o%d" % (uid(), i)
            gg = self.srv.acquire(lk, "greedy", ttl_ms=60000)[2]
            others.append(HeldPut(self.srv.port, "/store/" + lk, gg["lease"]))
        self.held.extend(others)
        answers = [h.answer_now(1.0) for h in others]
        refused = [a for a in answers if a is not None]
        self.assertEqual(len(refused), 1, answers)
        st, body = refused[0]
        self.assertEqual((st, body["error"], body["limit"], body["value"]), (429, "peer_limit", "guard_calls", 6), body)
        self.assertEqual(body["peer"], "127.0.0.0/8", body)
        # Another client (another peer) still writes and reads through the guard.
        vlock = "victim-%s/obj" % uid()
        vg = self.srv.acquire(vlock, "victim", ttl_ms=60000)[2]
        st, b = victim_request(self.srv.port, "PUT", "/store/" + vlock, b"mine",
                               {"Fencing-Lease": vg["lease"], "Content-Type": "application/octet-stream"})
        self.assertEqual(st, 201, b)
        st, b = victim_request(self.srv.port, "GET", "/store/" + vlock)
        self.assertEqual((st, b), (200, b"mine"))
        # The two queued trickling writes are refused after --guard-timeout in the queue,
        # and the streaming one is cut off once nothing moved for as long: their call
        # slots and shares are free again at once (their clients get the answers when
        # they finish sending), so the same lease writes again.
        def lock_writable():
            st, _, b = self.srv.client.request("PUT", path, raw=b"done", headers={
                "Fencing-Lease": g["lease"], "Content-Type": "application/octet-stream"})
            return st == 201
        self.srv.wait_until(lock_writable, timeout=15, interval=0.5, what="the greedy lock writable again")
        st, _, text = self.srv.request("GET", "/metrics")
        m = harness.parse_metrics(text)
        self.assertEqual(m['leasegate_guard_refused_total{reason="lock_calls"}'], 1)
        self.assertEqual(m['leasegate_guard_refused_total{reason="peer_calls"}'], 1)
        # One or both queued writes timed out in the queue (the streaming head may be
        # cut off first, and the next one then streams and is cut off in turn).
        self.assertIn(m['leasegate_guard_refused_total{reason="queue_timeout"}'], (1, 2))
        # The stalled writes applied nothing; only the complete one did.
        self.assertEqual([a["body"] for a in self.up.applied_to("/" + lock)], [b"done"])
        # A stalled client that finally sends the rest gets its answer.
        h = self.held[2]
        h.sock.sendall(b"y" * 99)
        st, body = h.answer_now(5)
        self.assertIn((st, body["error"]), ((503, "overloaded"), (504, "gateway_timeout")), body)


class KeyShareTests(unittest.TestCase):
    """Reads held open by one API key cannot take the slots another key needs."""

    def setUp(self):
        self.slow = SlowUpstream()
        self.dir = tempfile.mkdtemp(prefix="leasegate-shares-")
        self.keys = {}
        lines = []
        for name, prefix in (("alpha", "a/"), ("beta", "b/")):
            p = subprocess.run([harness.binary_path(), "keygen", name, "client", prefix], capture_output=True,
                               text=True, timeout=10, check=True)
            key, line = p.stdout.strip().splitlines()[:2]
            self.keys[name] = key
            lines.append(line)
        self.auth = os.path.join(self.dir, "keys.txt")
        with open(self.auth, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(self.auth, 0o600)
        self.srv = harness.Server(extra_args=[
            "--auth-file", self.auth, "--guard", "/slow/=" + self.slow.url, "--guard-timeout", "20",
            "--guard-key-max-calls", "2", "--guard-peer-max-calls", "100"])
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            s.close()
        self.srv.cleanup()
        self.slow.close()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    def held_get(self, key, path):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=20)
        s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n" % (path, key)).encode())
        self.socks.append(s)
        return s

    def test_key_share(self):
        for i in range(2):
            self.held_get(self.keys["alpha"], "/slow/a/never-%d" % i)
        self.slow_wait(2)
        st, hdrs, body = self.srv.request("GET", "/slow/a/late?ms=10",
                                          headers={"Authorization": "Bearer " + self.keys["alpha"]})
        self.assertEqual((st, body["error"], body["limit"], body["key"], body["value"]),
                         (429, "key_limit", "guard_calls", "alpha", 2), body)
        # The other key is not affected.
        st, _, body = self.srv.request("GET", "/slow/b/late?ms=10",
                                       headers={"Authorization": "Bearer " + self.keys["beta"]})
        self.assertEqual((st, body), (200, "late"))
        st, _, text = self.srv.request("GET", "/metrics", headers={"Authorization": "Bearer " + self.keys["beta"]})
        self.assertEqual(harness.parse_metrics(text)['leasegate_guard_refused_total{reason="key_calls"}'], 1)
        # Once alpha's calls end, alpha has its share back.
        for s in self.socks:
            s.close()
        self.socks = []
        self.srv.wait_until(lambda: self.srv.request("GET", "/slow/a/late?ms=10", headers={
            "Authorization": "Bearer " + self.keys["alpha"]})[0] == 200, timeout=10, what="alpha's share back")

    def slow_wait(self, n):
        deadline = time.monotonic() + 10
        while self.slow.open < n and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertGreaterEqual(self.slow.open, n)


if __name__ == "__main__":
    harness.run_tests()
