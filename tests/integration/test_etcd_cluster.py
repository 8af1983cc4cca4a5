"""leasegate on a three-member etcd cluster with three gateways: mutual exclusion and
increasing tokens across the kill -9 of the leader gateway, of the etcd leader, and a
leader gateway paused past its election lease; and a failover while the etcd member a
follower talks to is paused.

Starts real etcd members (Debian package etcd-server) and a real nginx upstream on
127.0.0.1; every process is stopped by PID. Skipped, saying so, when etcd is missing, and
the tests through the guard when nginx is (scripts/deps.sh --test installs both). Every
wait is bounded; nothing asserts how long anything took."""

import http.client
import json
import os
import random
import sys
import signal
import threading
import time
import unittest
import uuid

from harness import Client, resume_process
import upstream
import etcd_fixture
from etcd_fixture import Etcd, Gateway, wait_for, wait_leader

WORKERS = 4
ITERATIONS = 12  # increments per worker
RUN_BOUND_S = 240.0  # the whole counter run must end within this
LEASE_TTL_MS = 6000


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())


class Supervisor:
    """Three gateways on one prefix; restarts any that exits, as systemd would (a gateway
    that loses leadership exits 1 by design)."""

    def __init__(self, etcd, prefix, extra_args):
        self.gateways = [Gateway(etcd, prefix, extra_args) for _ in range(3)]
        self.restarts = 0
        self.failed_starts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(0.2):
            for g in self.gateways:
                if not g.running() and not self._stop.is_set():
                    self.restarts += 1
                    try:
                        g.start()
                    except RuntimeError:
                        # It exited while starting: etcd could not give it a lease yet (its
                        # Raft leader was just killed). Started again on the next round.
                        self.failed_starts += 1

    def ports(self):
        return [g.port for g in self.gateways]

    def leader(self):
        return wait_leader(self.gateways)

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        for g in self.gateways:
            resume_process(g.proc)
            g.stop()
            g.cleanup()


class Worker(threading.Thread):
    """Increments the counter object ITERATIONS times: acquire the lock through a
    random gateway, read the object through the guard, write it back with this
    increment's id and token appended, release. Every step is retried, through
    another random gateway, when the answer is lost (connection error) or is 503:
    the acquire with the same request_id (so a lost grant is replayed, not doubled),
    the write with the same lease and content (so a write that landed lands again
    unchanged). A write refused as stale (409) means the lease ended: acquire again
    and read whether the increment landed before deciding to redo it."""

    def __init__(self, k, sup, lock, path, deadline):
        super().__init__(daemon=True)
        self.k, self.sup, self.lock, self.path, self.deadline = k, sup, lock, path, deadline
        self.grants = []  # (request_id, token) of every grant this worker got
        self.retries = 0
        self.error = None
        self.done = 0

    def client(self):
        return Client(random.choice(self.sup.ports()), timeout=15)

    def call(self, fn):
        """fn(client) through random gateways until an answer other than 503 comes;
        None when the deadline passed."""
        while time.monotonic() < self.deadline:
            c = self.client()
            try:
                status, headers, body = fn(c)
            except (OSError, http.client.HTTPException):
                status = None  # no answer, or one cut off when its gateway died: no answer yet
            finally:
                c.close()
            if status is not None and status != 503:
                return status, headers, body
            self.retries += 1
            time.sleep(0.1)
        return None

    def acquire(self):
        rid = uuid.uuid4().hex
        while time.monotonic() < self.deadline:
            r = self.call(lambda c: c.acquire(self.lock, owner="w%d" % self.k, ttl_ms=LEASE_TTL_MS,
                                              wait_ms=5000, request_id=rid))
            if r is None:
                break
            status, _, body = r
            if status == 200:
                self.grants.append((rid, body["token"]))
                return body
            if status != 409:
                raise AssertionError("acquire answered %d: %r" % (status, body))
            rid = uuid.uuid4().hex  # not granted: a new attempt
        raise AssertionError("worker %d: no grant before the deadline" % self.k)

    def increment(self, op):
        while True:
            g = self.acquire()
            hdrs = {"Fencing-Lease": g["lease"]}
            r = self.call(lambda c: c.request("GET", self.path, headers=hdrs))
            if r is None:
                raise AssertionError("worker %d: no read before the deadline" % self.k)
            status, _, body = r
            if status == 409:
                continue  # the lease ended before the read: start over
            if status == 404:
                state = {"count": 0, "ops": []}
            elif status == 200:
                state = body if isinstance(body, dict) else json.loads(body)
            else:
                raise AssertionError("read answered %d: %r" % (status, body))
            if op not in [o for o, _ in state["ops"]]:
                state = {"count": state["count"] + 1, "ops": state["ops"] + [[op, g["token"]]]}
                data = json.dumps(state).encode()
                r = self.call(lambda c: c.request("PUT", self.path, raw=data, headers=hdrs))
                if r is None:
                    raise AssertionError("worker %d: no write before the deadline" % self.k)
                if r[0] == 409:
                    continue  # stale: whether it landed is read after the next grant
                if r[0] not in (200, 201, 204):
                    raise AssertionError("write answered %d: %r" % (r[0], r[2]))
            self.call(lambda c: c.release(self.lock, g["lease"]))  # a lost release: the lease runs out
            return

    def run(self):
        try:
            for i in range(ITERATIONS):
                self.increment("w%d-%d" % (self.k, i))
                self.done += 1
        except Exception as e:  # reported by the test
            self.error = e


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not upstream.nginx_available():
            raise unittest.SkipTest("nginx is missing (scripts/deps.sh --test installs nginx-light)")
        cls.etcd = Etcd(size=3)

    @classmethod
    def tearDownClass(cls):
        cls.etcd.stop()

    def setUp(self):
        self.nginx = upstream.Nginx()
        self.addCleanup(self.nginx.cleanup)
        self.sup = Supervisor(self.etcd, "lg-%s" % self._testMethodName,
                              ["--leader-ttl", "3", "--guard", "/store/=" + self.nginx.url])
        self.addCleanup(self.sup.stop)

    def client(self, g, timeout=30):
        """A client of gateway g, closed at the end of the test."""
        c = Client(g.port, timeout=timeout)
        self.addCleanup(c.close)
        return c

    def renew_past_503(self, g, lock, lease, bound_s=15):
        """A renewal through g, sent again while g answers 503: the contract's "retry", which
        a follower answers when its leader could not answer in time (right after an etcd
        leader was killed, the leader's commit may still be on its way to the next member;
        seen once in CI-like runs). A renewal applied twice is one renewal."""
        deadline = time.monotonic() + bound_s
        while True:
            status, headers, body = self.client(g).renew(lock, lease, ttl_ms=60000)
            if status != 503 or time.monotonic() > deadline:
                return status, headers, body
            time.sleep(0.2)

    def progress(self, workers):
        return sum(w.done for w in workers)

    def test_guard_counter_across_failovers(self):
        """Workers increment one object through the guard via random gateways while the
        leader gateway is kill -9ed once and the etcd leader once: the object ends at
        exactly WORKERS x ITERATIONS increments, each once, written in strictly increasing
        token order; a lease held across both failovers is renewed and released through
        other gateways; a waiter on the killed gateway gets an error, not a hang."""
        first = self.sup.leader()
        self.assertIsNotNone(first, "no gateway leads")
        held = self.client(first).acquire("kept", owner="keeper", ttl_ms=120000)[2]
        self.assertIn("lease", held)
        waiter, box = self.client(first, timeout=60), {}

        def wait():
            try:
                box["r"] = waiter.acquire("kept", owner="waiter", wait_ms=50000)
            except OSError as e:
                box["r"] = e
        wt = threading.Thread(target=wait, daemon=True)
        wt.start()
        self.assertTrue(wait_for(lambda: first.waiters("kept") == 1), "the waiter never queued")

        deadline = time.monotonic() + RUN_BOUND_S
        workers = [Worker(k, self.sup, "counter", "/store/counter", deadline) for k in range(WORKERS)]
        for w in workers:
            w.start()
        total = WORKERS * ITERATIONS
        self.assertTrue(wait_for(lambda: self.progress(workers) >= total // 3, timeout=RUN_BOUND_S),
                        "no progress before the first failover")
        first.kill9()
        wt.join(30)
        self.assertFalse(wt.is_alive(), "a waiter on the killed leader hangs")
        self.assertIsInstance(box["r"], OSError, box["r"])
        second = wait_leader([g for g in self.sup.gateways if g is not first])
        self.assertIsNotNone(second, "no gateway took over")
        self.assertTrue(wait_for(lambda: self.progress(workers) >= 2 * total // 3, timeout=RUN_BOUND_S),
                        "no progress after the gateway failover")
        member = self.etcd.leader()
        self.assertIsNotNone(member, "etcd has no leader")
        member.kill9()
        self.addCleanup(self.etcd.restart, member)
        for w in workers:
            w.join(max(1.0, deadline - time.monotonic()))
        for w in workers:
            self.assertIsNone(w.error, "worker %d: %r" % (w.k, w.error))
            self.assertFalse(w.is_alive(), "worker %d did not finish" % w.k)
        state = json.loads(self.nginx.read_file("counter"))
        ops = [o for o, _ in state["ops"]]
        tokens = [t for _, t in state["ops"]]
        self.assertEqual(state["count"], total, "lost or doubled increments: %r" % state)
        self.assertEqual(sorted(ops), sorted("w%d-%d" % (k, i) for k in range(WORKERS) for i in range(ITERATIONS)))
        self.assertEqual(tokens, sorted(set(tokens)), "writes out of token order: %r" % tokens)
        grants = {}
        for w in workers:
            for rid, token in w.grants:
                grants.setdefault(token, set()).add(rid)
        self.assertTrue(all(len(r) == 1 for r in grants.values()), "a token granted twice: %r" % grants)
        # The lease taken before both failovers still holds, and moves between gateways.
        others = [g for g in self.sup.gateways if g.running()]
        status, _, body = self.renew_past_503(others[0], "kept", held["lease"])
        self.assertEqual((status, body.get("token")), (200, held["token"]), body)
        status, _, body = self.client(others[-1]).release("kept", held["lease"])
        self.assertEqual(status, 200, body)
        self.assertGreaterEqual(self.sup.restarts, 1)
        print("\ncounter: %d increments, %d retried calls, %d gateway restarts, tokens %d..%d"
              % (total, sum(w.retries for w in workers), self.sup.restarts, tokens[0], tokens[-1]), file=sys.stderr)

    def test_paused_leader_is_replaced_and_answers_nothing_stale(self):
        """The leader gateway SIGSTOPped past its election lease: another takes over and
        grants; after SIGCONT the old one commits nothing and every answer it gives is
        503 or agrees with the new leader (never its stale table)."""
        old = self.sup.leader()
        self.assertIsNotNone(old)
        before = self.client(old).acquire("paused/a", ttl_ms=60000)[2]["token"]
        os.kill(old.pid, signal.SIGSTOP)
        try:
            new = wait_leader([g for g in self.sup.gateways if g is not old])
            self.assertIsNotNone(new, "no gateway took over from the paused one")
            status, _, granted = self.client(new).acquire("paused/b", owner="new", ttl_ms=60000)
            self.assertEqual(status, 200, granted)
            stale_client = self.client(old, timeout=10)
        finally:
            os.kill(old.pid, signal.SIGCONT)
        self.assertGreater(granted["token"], before)
        try:
            status, _, body = stale_client.get_lock("paused/b")
            self.assertIn(status, (200, 503), body)
            if status == 200:  # then it must be the new leader's truth (forwarded)
                self.assertEqual((body["held"], body["holder"]["token"]), (True, granted["token"]), body)
            status, _, body = stale_client.acquire("paused/c", owner="stale")
            self.assertIn(status, (200, 503), body)
            if status == 200:
                self.assertGreater(body["token"], granted["token"])
        except OSError:
            pass  # no answer: it stopped before replying
        status, _, body = self.client(new).get_lock("paused/b")
        self.assertEqual((status, body["holder"]["token"]), (200, granted["token"]), body)
        after = self.client(new).acquire("paused/d", ttl_ms=60000)[2]["token"]
        self.assertGreater(after, granted["token"])


class PausedMemberTest(unittest.TestCase):
    """An etcd member that is paused (SIGSTOP: it accepts connections and never answers)
    under a follower gateway."""

    def setUp(self):
        self.etcd = Etcd(size=3)
        self.addCleanup(self.etcd.stop)

    def gateway(self, members):
        """A gateway whose --store lists these members, in this order; stopped by PID at
        the end of the test."""
        class Via:
            endpoint = ",".join(m.endpoint for m in members)
        g = Gateway(Via, "lg-paused-member")
        self.addCleanup(g.cleanup)
        self.addCleanup(g.stop)
        return g

    def pause(self, member):
        os.kill(member.proc.pid, signal.SIGSTOP)
        self.addCleanup(lambda: member.running() and os.kill(member.proc.pid, signal.SIGCONT))

    def test_a_follower_whose_etcd_member_is_paused_takes_over(self):
        """The follower lists first an etcd member (not the Raft leader) that is then
        paused; the leader gateway, on the other two, is killed: the follower leads and
        grants through the other members. Before, its campaign was one call without a
        bound, waiting inside the paused member: it never led."""
        raft_leader = self.etcd.leader()
        self.assertIsNotNone(raft_leader, "etcd has no leader")
        paused = next(m for m in self.etcd.members if m is not raft_leader)
        others = [m for m in self.etcd.members if m is not paused]
        leader = self.gateway(others)
        self.assertIs(wait_leader([leader]), leader, leader.stderr_text())
        status, _, held = leader.client.acquire("held", owner="before", ttl_ms=60000)
        self.assertEqual(status, 200, held)
        follower = self.gateway([paused] + others)
        self.assertTrue(wait_for(lambda: follower.role() == "follower"), follower.stderr_text())
        self.pause(paused)
        # Still a follower that forwards, its etcd calls going on without the paused member.
        status, _, body = follower.client.acquire("forwarded", owner="before")
        self.assertEqual(status, 200, body)
        leader.kill9()
        self.assertIs(wait_leader([follower]), follower, follower.stderr_text())
        status, _, body = follower.client.acquire("after", owner="follower")
        self.assertEqual(status, 200, body)
        self.assertGreater(body["token"], held["token"])
        status, _, body = follower.client.get_lock("held")
        self.assertEqual((status, body["holder"]["token"]), (200, held["token"]), body)


if __name__ == "__main__":
    unittest.main()
