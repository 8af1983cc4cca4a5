"""Several permits in one acquire (issue 40): `"permits": n` on a semaphore's acquire grants one
lease of n permits, with one token, in FIFO order without barging (a request at the head that
does not fit keeps the smaller ones behind it waiting); holders and the queue show `permits`;
release, expiry and an admin's force-release give all n back; n > limit is 400; the lease's
permits survive kill -9. Checked by the server's own answers, never by the test's clock."""

import unittest

from harness import Server, ServerTestCase
from test_semaphores import Taker, path


class PermitsTest(ServerTestCase):
    def take(self, name, owner, limit, permits=None, **fields):
        body = {"owner": owner, "limit": limit}
        if permits is not None:
            body["permits"] = permits
        body.update(fields)
        return self.srv.request("POST", path(name, "acquire"), body=body)

    def get(self, name):
        st, _, g = self.srv.request("GET", path(name))
        self.assertEqual(st, 200, g)
        return g

    def waiting(self, name, n):
        self.srv.wait_until(lambda: self.get(name)["waiters"] == n, timeout=10, what="%d waiters on %s" % (n, name))

    def test_a_large_request_at_the_head_is_not_starved(self):
        """limit 5: A takes 3, B asks for 3 and waits, C asks for 1 and waits behind B (two are
        free); A's release grants B, then C."""
        name = "perm/fifo"
        st, _, a = self.take(name, "A", 5, 3, ttl_ms=600000)
        self.assertEqual(st, 200, a)
        self.assertEqual((a["permits"], a["limit"]), (3, 5))
        b = Taker(self.srv, name, "B", 5, permits=3, ttl_ms=600000)
        self.waiting(name, 1)
        c = Taker(self.srv, name, "C", 5, permits=1, ttl_ms=600000)
        self.waiting(name, 2)
        view = self.get(name)
        self.assertEqual((view["permits_used"], view["available"], view["holders_total"]), (3, 2, 1), view)
        self.assertEqual([(w["owner"], w["permits"]) for w in view["queue"]], [("B", 3), ("C", 1)])
        self.assertEqual([(h["owner"], h["permits"], h["token"]) for h in view["holders"]], [("A", 3, a["token"])])
        # A newcomer that would fit is not let past the queue either.
        st, _, busy = self.take(name, "D", 5, 1)
        self.assertEqual((st, busy["error"], busy["available"], busy["waiters"]), (409, "semaphore_full", 2, 2),
                         busy)
        self.assertFalse(b.answered or c.answered)
        st, _, rel = self.srv.request("POST", path(name, "release"), body={"lease": a["lease"]})
        self.assertEqual((st, rel["released"]), (200, True), rel)
        gb, gc = b.done(), c.done()
        self.assertEqual((gb[0], gc[0]), (200, 200), (gb, gc))
        gb, gc = gb[2], gc[2]
        self.assertEqual((gb["permits"], gc["permits"]), (3, 1))
        self.assertLess(a["token"], gb["token"])
        self.assertLess(gb["token"], gc["token"])  # B before C: first come, first served
        view = self.get(name)
        self.assertEqual((view["permits_used"], view["available"], view["waiters"]), (4, 1, 0), view)
        # Release gives all of a lease's permits back at once.
        self.assertEqual(self.srv.request("POST", path(name, "release"), body={"lease": gb["lease"]})[0], 200)
        self.assertEqual(self.get(name)["available"], 4)
        st, _, g5 = self.take(name, "E", 5, 4)
        self.assertEqual((st, g5["permits"]), (200, 4), g5)

    def test_bounds(self):
        name = "perm/bounds"
        for bad in (0, -1, 6, "3", 1.5, None):
            st, _, e = self.take(name, "x", 5, bad) if bad is not None else self.srv.request(
                "POST", path(name, "acquire"), body={"owner": "x", "limit": 5, "permits": None})
            self.assertEqual((st, e["error"], e.get("field")), (400, "bad_request", "permits"), (bad, e))
        st, _, g = self.take(name, "x", 5)
        self.assertEqual((st, g["permits"]), (200, 1), g)  # one by default
        st, _, g = self.take(name, "y", 5, 4)
        self.assertEqual((st, g["permits"]), (200, 4), g)
        # A lock takes no permits.
        st, _, e = self.srv.request("POST", "/v1/locks/perm/bounds/acquire", body={"owner": "x", "permits": 2})
        self.assertEqual((st, e["error"]), (400, "bad_request"), e)

    def test_replay_and_expiry_give_the_same_and_all_back(self):
        name = "perm/replay"
        st, _, g = self.take(name, "r", 4, 3, request_id="once", ttl_ms=400)
        self.assertEqual(st, 200, g)
        st, _, again = self.take(name, "r", 4, 3, request_id="once", ttl_ms=400)
        self.assertEqual((st, again["lease"], again["token"], again["permits"]), (200, g["lease"], g["token"], 3))
        self.assertEqual(self.get(name)["permits_used"], 3)
        # The lease runs out: its three permits come back to the waiter at the head.
        w = Taker(self.srv, name, "w", 4, permits=4, ttl_ms=600000)
        gw = w.done()
        self.assertEqual((gw[0], gw[2]["permits"]), (200, 4), gw)
        self.assertEqual(self.get(name)["permits_used"], 4)

    def test_metrics_count_permits_and_leases(self):
        name = "perm/metrics"
        self.assertEqual(self.take(name, "m", 10, 7, ttl_ms=600000)[0], 200)
        self.assertEqual(self.take(name, "n", 10, 2, ttl_ms=600000)[0], 200)
        permits = self.srv.metric("leasegate_semaphore_permits_held")
        leases = self.srv.metric("leasegate_semaphore_leases")
        self.assertGreaterEqual(permits - leases, 7)  # 9 permits in 2 leases, beside the other tests'


class PermitsRestartTest(unittest.TestCase):
    def test_a_lease_keeps_its_permits_across_kill_9(self):
        with Server() as srv:
            st, _, g = srv.request("POST", path("perm/crash", "acquire"),
                                   body={"owner": "a", "limit": 5, "permits": 4, "ttl_ms": 600000})
            self.assertEqual(st, 200, g)
            srv.restart(kill9=True)
            st, _, view = srv.request("GET", path("perm/crash"))
            self.assertEqual((view["permits_used"], view["available"]), (4, 1), view)
            self.assertEqual([(h["token"], h["permits"]) for h in view["holders"]], [(g["token"], 4)])
            st, _, busy = srv.request("POST", path("perm/crash", "acquire"),
                                      body={"owner": "b", "limit": 5, "permits": 2})
            self.assertEqual((st, busy["error"]), (409, "semaphore_full"), busy)
            st, _, one = srv.request("POST", path("perm/crash", "acquire"), body={"owner": "b", "limit": 5})
            self.assertEqual((st, one["permits"]), (200, 1), one)
            self.assertGreater(one["token"], g["token"])


if __name__ == "__main__":
    unittest.main()
