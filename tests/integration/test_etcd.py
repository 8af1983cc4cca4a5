"""leasegate over etcd (--store etcd://...): leadership, failover and the fence on
the leader key. Starts a real one-member etcd (Debian package etcd-server) on free
127.0.0.1 ports with a temporary data dir, and stops it by PID. Skipped, saying so,
when /usr/bin/etcd is missing (scripts/deps.sh --test installs it).

Every wait is bounded; nothing asserts how long anything took."""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from harness import Server, binary_path, kill_process
from upstream import free_port

ETCD_BIN = "/usr/bin/etcd"
TTL_S = 2  # --leader-ttl for every gateway here: failovers take a few seconds
WAIT_S = 30.0  # bound of every wait for a role change


def setUpModule():
    if not os.access(ETCD_BIN, os.X_OK):
        raise unittest.SkipTest("%s is missing: install the Debian package etcd-server "
                                "(scripts/deps.sh --test) to run the etcd tests" % ETCD_BIN)


def b64(text):
    return base64.b64encode(text.encode()).decode()


class Etcd:
    """One etcd member on free loopback ports, in a temp dir; stop() by PID."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-etcd-")
        for _ in range(5):
            client, peer = free_port(), free_port()
            self.url = "http://127.0.0.1:%d" % client
            self.log = open(os.path.join(self.dir, "etcd.log"), "wb")
            self.proc = subprocess.Popen(
                [ETCD_BIN, "--name", "t", "--data-dir", os.path.join(self.dir, "data"),
                 "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                 "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                 "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                 "--initial-cluster", "t=http://127.0.0.1:%d" % peer],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
            if self._ready():
                self.endpoint = self.url[len("http://"):]
                return
            kill_process(self.proc)
            self.log.close()
        raise RuntimeError("etcd did not start; see %s" % self.dir)

    def _ready(self):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                self.call("/v3/kv/range", {"key": b64("x")})
                return True
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        return False

    def call(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def keys(self, prefix):
        """Every key under prefix, decoded."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self.call("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end), "keys_only": True})
        return [base64.b64decode(kv["key"]).decode() for kv in r.get("kvs", [])]

    def delete(self, key):
        self.call("/v3/kv/deleterange", {"key": b64(key)})

    def stop(self):
        kill_process(self.proc, signal.SIGTERM)
        kill_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Gateway(Server):
    """A leasegate on the etcd store; started as a candidate (its port is known at once)."""

    def __init__(self, etcd, prefix, extra_args=None):
        super().__init__(store="etcd://%s/%s" % (etcd.endpoint, prefix),
                         extra_args=["--leader-ttl", str(TTL_S)] + list(extra_args or []))

    def health(self):
        try:
            status, _, body = self.client.request("GET", "/healthz", timeout=5)
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def role(self):
        h = self.health()
        return h.get("role") if h else None

    def wait_exit(self, timeout=WAIT_S):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def wait_for(pred, timeout=WAIT_S, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


def wait_leader(gateways):
    """The gateway that serves (role leader), once one does."""
    return wait_for(lambda: next((g for g in gateways if g.running() and g.role() == "leader"), None))


class EtcdTest(unittest.TestCase):
    def setUp(self):
        self.etcd = Etcd()
        self.gateways = []
        self.prefix = "lg-%s" % self._testMethodName

    def tearDown(self):
        for g in self.gateways:
            if g.running():
                kill_process(g.proc, signal.SIGCONT)
            g.stop()
            g.cleanup()
        self.etcd.stop()

    def gateway(self, extra_args=None):
        g = Gateway(self.etcd, self.prefix, extra_args)
        self.gateways.append(g)
        return g

    def acquire_ok(self, g, name, **fields):
        status, _, body = g.client.acquire(name, **fields)
        self.assertEqual(status, 200, body)
        return body

    def test_tokens_survive_kill9_and_restart(self):
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        held = self.acquire_ok(g, "orders/42", ttl_ms=120000)
        tokens = [held["token"]] + [self.acquire_ok(g, "t%d" % i)["token"] for i in range(5)]
        status, _, body = g.client.fence("res", tokens[-1])
        self.assertEqual(status, 200, body)
        g.kill9()
        g.start()  # its old lease still holds the leader key until it expires
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        status, _, body = g.client.get_lock("orders/42")
        self.assertEqual(status, 200, body)
        self.assertTrue(body["held"])
        self.assertEqual(body["holder"]["token"], held["token"])
        status, _, body = g.client.renew("orders/42", held["lease"])
        self.assertEqual(status, 200, body)
        self.assertGreater(self.acquire_ok(g, "after")["token"], max(tokens))
        status, _, body = g.client.fence("res", tokens[-1] - 1)
        self.assertEqual(status, 409, body)
        g.stop_clean()

    def test_only_one_gateway_serves(self):
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        self.assertIsNotNone(leader)
        other = b if leader is a else a
        h = wait_for(lambda: (lambda x: x if x and x.get("leader") else None)(other.health()))
        self.assertEqual(h["role"], "follower")
        self.assertEqual(h["leader"], leader.url)
        status, headers, body = other.client.acquire("x")
        self.assertEqual(status, 503, body)
        self.assertEqual(body["error"], "overloaded")
        self.assertEqual(headers.get("retry-after"), "1")
        self.assertEqual(body.get("leader"), leader.url)
        status, _, body = other.client.get_lock("x")
        self.assertEqual(status, 503, body)
        self.assertEqual(leader.health()["role"], "leader")
        self.acquire_ok(leader, "x")
        other.stop_clean()  # a candidate stops cleanly too
        leader.stop_clean()

    def test_failover_keeps_leases_and_tokens(self):
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        other = b if leader is a else a
        held = self.acquire_ok(leader, "shared", ttl_ms=120000)
        issued = [held["token"]] + [self.acquire_ok(leader, "n%d" % i)["token"] for i in range(10)]
        leader.kill9()
        self.assertIs(wait_leader([other]), other, other.stderr_text())
        status, _, body = other.client.renew("shared", held["lease"], ttl_ms=60000)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["token"], held["token"])
        self.assertGreater(self.acquire_ok(other, "fresh")["token"], max(issued))
        status, _, body = other.client.release("shared", held["lease"])
        self.assertEqual(status, 200, body)

    def test_paused_leader_commits_nothing_after_takeover(self):
        """The key safety test: a leader SIGSTOPped past its lease is replaced;
        after SIGCONT it grants nothing, and no token is ever issued twice."""
        a, b = self.gateway(), self.gateway()
        old = wait_leader([a, b])
        new = b if old is a else a
        before = [self.acquire_ok(old, "p%d" % i)["token"] for i in range(3)]
        os.kill(old.pid, signal.SIGSTOP)
        try:
            self.assertIs(wait_leader([new]), new, new.stderr_text())
            granted = [self.acquire_ok(new, "q%d" % i)["token"] for i in range(3)]
        finally:
            os.kill(old.pid, signal.SIGCONT)
        self.assertGreater(min(granted), max(before))
        # Its next grant attempt fails: 503, or no answer at all as it exits.
        try:
            status, _, body = old.client.acquire("stale")
            self.assertEqual(status, 503, body)
        except OSError:
            pass  # no answer: it stopped before replying
        self.assertEqual(old.wait_exit(), 1, old.stderr_text())
        self.assertIn("leadership lost", old.stderr_text())
        status, _, body = new.client.get_lock("stale")
        self.assertEqual(status, 200, body)
        self.assertFalse(body["held"], body)
        more = [self.acquire_ok(new, "r%d" % i)["token"] for i in range(3)]
        tokens = before + granted + more
        self.assertEqual(len(tokens), len(set(tokens)))
        self.assertEqual(tokens, sorted(tokens))

    def test_commit_is_fenced_on_the_leader_key(self):
        """With the leader key gone (another leader's doing, simulated by deleting it)
        while this gateway's lease still lives, its next commit writes nothing."""
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        self.acquire_ok(g, "before")
        keys = self.etcd.keys(self.prefix + "/leader/")
        self.assertEqual(len(keys), 1, keys)
        self.etcd.delete(keys[0])
        try:
            status, _, body = g.client.acquire("after")
            self.assertEqual(status, 503, body)
        except OSError:
            pass  # no answer: it stopped before replying
        self.assertEqual(g.wait_exit(), 1, g.stderr_text())
        self.assertIn("leadership lost", g.stderr_text())
        self.assertNotIn(self.prefix + "/locks/after", self.etcd.keys(self.prefix + "/locks/"))

    def test_many_locks_load_in_pages(self):
        """More keys than one page of the load (500), from concurrent clients, so
        that batches can outgrow one transaction (128 operations)."""
        import threading
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        results = []

        def worker(k):
            c = type(g.client)(g.port)
            for i in range(k, 640, 32):
                results.append(c.acquire("many/%03d" % i, ttl_ms=120000))
            c.close()
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(len(results), 640)
        self.assertTrue(all(r[0] == 200 for r in results), [r for r in results if r[0] != 200][:3])
        tokens = sorted(r[2]["token"] for r in results)
        self.assertEqual(tokens, list(range(tokens[0], tokens[0] + 640)))
        g.kill9()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        self.assertIn("loaded 640 locks (640 held", g.stderr_text())
        self.assertGreater(self.acquire_ok(g, "last")["token"], tokens[-1])

    def test_etcd_unreachable_at_start(self):
        port = free_port()
        proc = subprocess.run([binary_path(), "serve", "--listen", "127.0.0.1:0",
                               "--store", "etcd://127.0.0.1:%d/lg" % port],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn(b"cannot reach etcd", proc.stderr)

    def test_usage_errors(self):
        cases = [["--store", "etcd://127.0.0.1:2379/lg", "--data", "x.db"],
                 ["--store", "etcd://127.0.0.1:2379"],
                 ["--store", "http://127.0.0.1:2379/lg"],
                 ["--leader-ttl", "5"],
                 ["--store", "etcd://127.0.0.1:2379/lg", "--leader-ttl", "1"]]
        for args in cases:
            proc = subprocess.run([binary_path(), "serve"] + args, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=30)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertTrue(proc.stderr.startswith(b"leasegate serve: "), proc.stderr)


if __name__ == "__main__":
    unittest.main()
