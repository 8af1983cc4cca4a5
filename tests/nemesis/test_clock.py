"""Clock steps (issue 37): two gateways on etcd whose wall clocks libfaketime moves
(Debian's `faketime`; their monotonic clocks stay true, as with an NTP step), forward
and back, on the leader and on the follower, within and beyond the skew the docs allow.

What the docs say (docs/high-availability.md, "Clocks"): a leader times leases on its
monotonic clock, so a step of its wall clock changes nothing while it leads. Only a
failover reads a lease's end back from its absolute expires_at_ms (the old leader's wall
clock) against the new leader's wall clock: a new leader whose clock is δ ahead of the
old one's ends every carried-over lease up to δ early, one δ behind keeps it up to δ
longer (at most one TTL from the load). A client that stops using its lease a margin M
before its own bound (leasegate run: SIGKILL at half of --grace before it; M = TTL/8 at
the default --grace) never overlaps the next holder while δ <= M: the allowed skew.
Beyond it, two clients may think they hold the lock for about δ - M; the guard still
refuses the old holder's write (its lease no longer holds), so storage behind it never
applies a stale write.

Each case: X acquires (TTL 4 s) at the leader and writes through the guard; the leader
stops (SIGTERM: it resigns, the follower leads) unless the case keeps it; Y polls for the
lock every 50 ms. From X's own bound (the send time of its acquire plus the TTL) and Y's
grant, `early` is how long before X's bound Y got the lock: bounded above by the send
time of Y's successful poll, below by its answer. Within the allowed skew: early <= M, and
never a write of X's applied after Y's. Beyond it (follower 3 s ahead, or leader 3 s
behind): early > M, the failure the docs predict, with its figure printed, and still no
stale write.

Skipped (77 under ctest) without libfaketime or etcd. Every wait is bounded; every
process is stopped by PID. About a minute."""

import glob
import os
import signal
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import etcd_fixture  # noqa: E402
from applying_upstream import ApplyingUpstream  # noqa: E402
from etcd_fixture import Etcd, Gateway, wait_for  # noqa: E402
from harness import Client, now_ms, resume_process  # noqa: E402

FAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
LEASE_TTL_S = 4.0
MARGIN_S = LEASE_TTL_S / 8  # leasegate run: SIGKILL at half of --grace (default TTL/4) before its bound
WITHIN_S = 0.1  # well inside MARGIN_S: the poll's round trip widens the bound measured
BEYOND_S = 3.0
POLL_S = 0.05
BOUND_S = 30.0


class Clocked(Gateway):
    """A gateway whose wall clock is its real one plus an offset in a file that
    libfaketime reads at every call (its monotonic clocks untouched)."""

    def __init__(self, etcd, prefix, args, clock_file):
        self.clock_file = clock_file
        self.set_clock(0)
        env = {"LD_PRELOAD": FAKETIME[0], "FAKETIME_TIMESTAMP_FILE": clock_file, "FAKETIME_NO_CACHE": "1",
               "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        super().__init__(etcd, prefix, args, extra_env=env)

    def set_clock(self, offset_s):
        tmp = self.clock_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+.3f\n" % offset_s)
        os.replace(tmp, self.clock_file)


class ClockSteps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not FAKETIME:
            raise unittest.SkipTest("libfaketime is missing: install the Debian package faketime "
                                    "(scripts/deps.sh --test)")
        if not etcd_fixture.available():
            raise unittest.SkipTest(etcd_fixture.missing_reason())
        cls.dir = tempfile.mkdtemp(prefix="leasegate-clock-")
        cls.etcd = Etcd()
        cls.upstream = ApplyingUpstream()
        args = ["--guard", "/store/=" + cls.upstream.url, "--guard-settle", "1"]
        cls.gateways = [Clocked(cls.etcd, "lg-clock", args, os.path.join(cls.dir, "clock-%d" % i)) for i in range(2)]
        cls.figures = []

    @classmethod
    def tearDownClass(cls):
        for g in getattr(cls, "gateways", []):
            resume_process(g.proc)
            g.stop()
            g.cleanup()
        if hasattr(cls, "upstream"):
            cls.upstream.close()
        if hasattr(cls, "etcd"):
            cls.etcd.stop()
        for name, early_min, early_max in getattr(cls, "figures", []):
            print("clock: %-34s the next holder got the lock %+.2f..%+.2f s before the old holder's own bound "
                  "(allowed: %.2f)" % (name, early_min, early_max, MARGIN_S), file=sys.stderr)

    def roles(self):
        for g in self.gateways:
            if not g.running():
                g.set_clock(0)
                g.start()
        leader = wait_for(lambda: next((g for g in self.gateways if g.role() == "leader"), None), timeout=BOUND_S)
        self.assertIsNotNone(leader, "no gateway leads")
        follower = next(g for g in self.gateways if g is not leader)
        self.assertIsNotNone(wait_for(lambda: follower.role() == "follower", timeout=BOUND_S))
        return leader, follower

    def write(self, port, lock, lease, body):
        """A guarded PUT of /store/LOCK with the lease: its status (503 while the lock
        settles after a failover is waited out)."""
        c = Client(port, timeout=10)
        try:
            deadline = time.monotonic() + BOUND_S
            while True:
                status, _, _ = c.request("PUT", "/store/" + lock, raw=body, headers={"Fencing-Lease": lease})
                if status != 503 or time.monotonic() > deadline:
                    return status
                time.sleep(0.1)
        finally:
            c.close()

    def case(self, name, leader_s, follower_s, failover):
        """One case (see the module's docstring): (early_min, early_max) in seconds."""
        leader, follower = self.roles()
        leader.set_clock(leader_s)
        follower.set_clock(follower_s)
        lock = "clock/" + name
        x = Client(leader.port, timeout=10)
        self.addCleanup(x.close)
        sent_x = time.monotonic()
        real = now_ms()
        status, _, gx = x.acquire(lock, owner="x", ttl_ms=int(LEASE_TTL_S * 1000))
        self.assertEqual(status, 200, gx)
        # The fixture itself: the leader's wall clock is where libfaketime put it.
        skew_ms = gx["expires_at_ms"] - (real + leader_s * 1000 + LEASE_TTL_S * 1000)
        self.assertLess(abs(skew_ms), 1500, "libfaketime did not move the leader's clock: %r" % gx)
        self.assertIn(self.write(leader.port, lock, gx["lease"], b"x1"), (201, 204))
        if failover:
            os.kill(leader.pid, signal.SIGTERM)
            self.assertEqual(leader.wait_exit(), 0, leader.stderr_text())
            server = follower
        else:
            server = leader
        y = Client(server.port, timeout=10)
        self.addCleanup(y.close)
        deadline = time.monotonic() + LEASE_TTL_S + 2 * BEYOND_S + BOUND_S
        while True:
            sent = time.monotonic()
            try:
                status, _, gy = y.acquire(lock, owner="y", ttl_ms=30000)
            except OSError:
                status, gy = None, None
            answered = time.monotonic()
            if status == 200:
                break
            self.assertLess(answered, deadline, "the lock was never granted again")
            time.sleep(POLL_S)
        if failover:
            self.assertEqual(server.role(), "leader")
        early = (sent_x + LEASE_TTL_S - answered, sent_x + LEASE_TTL_S - sent)
        # Whatever the clocks: X's lease no longer holds, the guard refuses its write,
        # and the backend never applies it after Y's.
        self.assertEqual(self.write(server.port, lock, gx["lease"], b"x2"), 409)
        self.assertIn(self.write(server.port, lock, gy["lease"], b"y1"), (201, 204))
        applied = [(w["body"], int(w["token"])) for w in self.upstream.applied_to("/" + lock)]
        self.assertEqual(applied, [(b"x1", gx["token"]), (b"y1", gy["token"])], applied)
        self.assertEqual(y.release(lock, gy["lease"])[0], 200)
        self.figures.append((name, early[0], early[1]))
        for g in self.gateways:
            if g.running():
                g.set_clock(0)
        return early

    def assert_no_two_holders(self, early):
        self.assertLessEqual(early[1], MARGIN_S, "the next holder got the lock %.2f s before the old holder's bound "
                                                 "(allowed: %.2f)" % (early[1], MARGIN_S))

    def test_a_step_on_the_leader_changes_nothing_while_it_leads(self):
        for step in (+20.0, -20.0):
            early = self.case("leader_%s%d_no_failover" % ("ahead" if step > 0 else "behind", abs(step)), step, 0,
                              failover=False)
            self.assert_no_two_holders(early)
            # Nor did the lease last 20 s longer: it ended on the monotonic clock.
            self.assertGreater(early[0], -LEASE_TTL_S, early)

    def test_within_the_allowed_skew_no_two_holders(self):
        for name, leader_s, follower_s in (("follower_ahead_within", 0, +WITHIN_S),
                                           ("follower_behind_within", 0, -WITHIN_S),
                                           ("leader_behind_within", -WITHIN_S, 0),
                                           ("leader_ahead_within", +WITHIN_S, 0)):
            self.assert_no_two_holders(self.case(name, leader_s, follower_s, failover=True))

    def test_a_new_leader_behind_keeps_leases_longer(self):
        """Beyond the skew, the other way: the lease outlives its TTL (liveness, not
        safety): at most one TTL from the load."""
        for name, leader_s, follower_s in (("follower_behind_beyond", 0, -BEYOND_S),
                                           ("leader_ahead_beyond", +BEYOND_S, 0)):
            early = self.case(name, leader_s, follower_s, failover=True)
            self.assert_no_two_holders(early)

    def test_beyond_the_allowed_skew_two_holders_but_no_stale_write(self):
        """The failure the docs predict: a new leader δ ahead ends the lease up to δ
        early, so the next client holds the lock while the old one still thinks it does
        (for about δ - M); the guard refuses the old holder's write all the same."""
        for name, leader_s, follower_s in (("follower_ahead_beyond", 0, +BEYOND_S),
                                           ("leader_behind_beyond", -BEYOND_S, 0)):
            early = self.case(name, leader_s, follower_s, failover=True)
            self.assertGreater(early[0], MARGIN_S, "predicted: the lease ends up to %.1f s early; it ended %.2f s "
                                                   "early" % (BEYOND_S, early[0]))
            self.assertLessEqual(early[1], BEYOND_S + 1.0, early)


if __name__ == "__main__":
    if not FAKETIME:
        print("SKIPPED: libfaketime is missing (Debian package faketime)", file=sys.stderr)
        sys.exit(77)  # ctest's SKIP_RETURN_CODE
    unittest.main()
