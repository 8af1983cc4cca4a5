"""Semaphores against the real server: `limit` permits, each a lease with its own token
from the one counter, FIFO waiters with one grant per freed permit, the limit set while
the semaphore is idle (409 limit_mismatch otherwise), 409 semaphore_full with the
holders, no reentry, permits of a crashed holder coming back at their TTL, everything
kept across kill -9, a namespace apart from locks, per-key limits counting permits.
Checked by the server's own answers, never by the test's clock."""

import threading
import unittest

from harness import Client, Server, ServerTestCase
from test_auth import KeyedTestCase, new_key


def path(name, action=""):
    return "/v1/semaphores/%s%s" % (name, "/" + action if action else "")


class Taker:
    """A permit acquire with wait_ms on a connection of its own, in a thread."""

    def __init__(self, srv, name, owner, limit, **fields):
        self.client = Client(srv.port, timeout=120)
        self.result = None
        body = {"owner": owner, "limit": limit, "wait_ms": 60000}
        body.update(fields)
        self.thread = threading.Thread(target=self._run, args=(name, body), daemon=True)
        self.thread.start()

    def _run(self, name, body):
        try:
            self.result = self.client.request("POST", path(name, "acquire"), body=body, timeout=120)
        except Exception as e:  # reported by done()
            self.result = e

    def done(self, timeout=60):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("the waiter was not answered within %d s" % timeout)
        self.client.close()
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    @property
    def answered(self):
        return not self.thread.is_alive()


class SemaphoreTest(ServerTestCase):
    def take(self, name, owner, limit, **fields):
        body = {"owner": owner, "limit": limit}
        body.update(fields)
        st, _, g = self.srv.request("POST", path(name, "acquire"), body=body)
        self.assertEqual(st, 200, g)
        return g

    def get(self, name):
        st, _, g = self.srv.request("GET", path(name))
        self.assertEqual(st, 200, g)
        return g

    def release(self, name, lease):
        return self.srv.request("POST", path(name, "release"), body={"lease": lease})

    def waiting(self, name, n):
        self.srv.wait_until(lambda: self.get(name)["waiters"] == n, timeout=10, what="%d waiters on %s" % (n, name))

    def test_limit_fifo_and_one_grant_per_permit(self):
        name = "sem/pool"
        held = [self.take(name, "p%d" % i, 3, ttl_ms=600000) for i in range(3)]
        self.assertEqual([p["limit"] for p in held], [3, 3, 3])
        tokens = [p["token"] for p in held]
        self.assertEqual(tokens, sorted(set(tokens)))
        self.assertEqual(len({p["lease"] for p in held}), 3)
        st, _, full = self.srv.request("POST", path(name, "acquire"), body={"owner": "x", "limit": 3})
        self.assertEqual((st, full["error"], full["limit"], full["waiters"]), (409, "semaphore_full", 3, 0), full)
        self.assertEqual([h["token"] for h in full["holders"]], tokens)
        self.assertFalse(any("lease" in h for h in full["holders"]))
        st, _, mis = self.srv.request("POST", path(name, "acquire"), body={"owner": "x", "limit": 4})
        self.assertEqual((st, mis["error"], mis["limit"]), (409, "limit_mismatch", 3), mis)
        waiters = []
        for i in range(3):
            waiters.append(Taker(self.srv, name, "w%d" % i, 3, ttl_ms=600000))
            self.waiting(name, i + 1)
        g = self.get(name)
        self.assertEqual((g["limit"], g["holders_total"], g["available"], [q["owner"] for q in g["queue"]]),
                         (3, 3, 0, ["w0", "w1", "w2"]), g)
        # One freed permit, one grant, to the oldest waiter.
        self.assertEqual(self.release(name, held[0]["lease"])[0], 200)
        st, _, w0 = waiters[0].done()
        self.assertEqual((st, w0["owner"]), (200, "w0"), w0)
        self.waiting(name, 2)
        self.assertFalse(waiters[1].answered or waiters[2].answered)
        self.assertEqual(self.release(name, held[1]["lease"])[0], 200)
        self.assertEqual(self.release(name, held[2]["lease"])[0], 200)
        st1, _, w1 = waiters[1].done()
        st2, _, w2 = waiters[2].done()
        self.assertEqual((st1, st2), (200, 200))
        self.assertLess(w0["token"], w1["token"])
        self.assertLess(w1["token"], w2["token"])
        for p in (w0, w1, w2):
            self.assertEqual(self.release(name, p["lease"])[0], 200)
        st, _, again = self.release(name, w0["lease"])
        self.assertEqual((st, again["reason"]), (409, "released"), again)
        # Idle: the next acquire sets another limit.
        p = self.take(name, "solo", 1)
        self.assertEqual((p["limit"], self.get(name)["limit"]), (1, 1))
        self.release(name, p["lease"])

    def test_a_crashed_holders_permit_comes_back_at_its_ttl(self):
        name = "sem/crash"
        crashed = self.take(name, "crashed", 1, ttl_ms=300)  # never renewed, never released
        w = Taker(self.srv, name, "next", 1, ttl_ms=60000)
        st, _, g = w.done()
        self.assertEqual((st, g["owner"]), (200, "next"), g)
        self.assertGreaterEqual(g["acquired_at_ms"], crashed["expires_at_ms"])
        self.assertGreater(g["token"], crashed["token"])
        st, _, r = self.srv.request("POST", path(name, "renew"), body={"lease": crashed["lease"]})
        self.assertEqual((st, r["reason"]), (409, "superseded"), r)
        st, _, hist = self.srv.request("GET", path(name, "history"))
        self.assertEqual([(x["owner"], x["how"]) for x in hist["grants"]], [("next", None), ("crashed", "expired")])
        self.release(name, g["lease"])

    def test_renew_and_replay(self):
        name = "sem/renewal"
        p = self.take(name, "r", 2, ttl_ms=1000, request_id="req-1")
        again = self.take(name, "r", 2, request_id="req-1")  # a retry: the same permit
        self.assertEqual((again["lease"], again["token"]), (p["lease"], p["token"]))
        self.assertEqual(self.get(name)["holders_total"], 1)
        st, _, r = self.srv.request("POST", path(name, "renew"), body={"lease": p["lease"], "ttl_ms": 600000})
        self.assertEqual((st, r["token"], r["ttl_ms"]), (200, p["token"], 600000), r)
        self.assertEqual(self.get(name)["holders"][0]["expires_at_ms"], r["expires_at_ms"])
        self.release(name, p["lease"])

    def test_bad_requests(self):
        for body, field in (({"owner": "x"}, "limit"), ({"owner": "x", "limit": 0}, "limit"),
                            ({"owner": "x", "limit": 10001}, "limit"), ({"owner": "x", "limit": 1.5}, "limit"),
                            ({"owner": "x", "limit": 2, "lease": "6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab"}, "lease"),
                            ({"owner": "x", "limit": 2, "mode": "read"}, "mode"),
                            ({"owner": "x", "limit": 2, "lock_delay_ms": 10}, "lock_delay_ms")):
            st, _, r = self.srv.request("POST", path("sem/bad", "acquire"), body=body)
            self.assertEqual((st, r["error"], r.get("field")), (400, "bad_request", field), (body, r))
        big = self.take("sem/big", "x", 10000)
        self.assertEqual(big["limit"], 10000)
        self.release("sem/big", big["lease"])

    def test_a_namespace_of_its_own(self):
        name = "shared/name"
        st, _, lock = self.srv.acquire(name, "locker")
        self.assertEqual(st, 200, lock)
        p = self.take(name, "permit", 1)
        self.assertGreater(p["token"], lock["token"])  # one counter
        self.assertEqual(self.srv.get_lock(name)[2]["holder"]["owner"], "locker")
        self.assertEqual(self.get(name)["holders"][0]["owner"], "permit")
        # A lease of one is nothing to the other.
        st, _, r = self.srv.release(name, p["lease"])
        self.assertEqual((st, r["error"]), (409, "not_holder"), r)
        st, _, r = self.release(name, lock["lease"])
        self.assertEqual((st, r["error"]), (409, "not_holder"), r)
        st, _, lst = self.srv.request("GET", "/v1/semaphores?prefix=shared/")
        self.assertEqual([x["name"] for x in lst["semaphores"]], [name], lst)
        self.assertNotIn("holders", lst["semaphores"][0])
        self.release(name, p["lease"])
        self.srv.release(name, lock["lease"])

    def test_events_audit_and_metrics(self):
        name = "sem/seen"
        before = self.srv.metric("leasegate_semaphore_permits_held")
        p = self.take(name, "watcher", 2)
        st, _, ev = self.srv.request("GET", "/v1/events?prefix=%s" % name)
        self.assertEqual([(e["kind"], e["type"], e["mode"]) for e in ev["events"]], [("granted", "semaphore", None)])
        self.assertEqual(self.srv.metric("leasegate_semaphore_permits_held"), before + 1)
        self.assertGreaterEqual(self.srv.metric('leasegate_grants_by_kind_total{kind="semaphore",mode=""}'), 1)
        self.release(name, p["lease"])
        st, _, rows = self.srv.request("GET", "/v1/audit?lock=%s" % name)
        self.assertEqual([(x["kind"], x["type"], x["mode"]) for x in rows["rows"]],
                         [("granted", "semaphore", None), ("released", "semaphore", None)], rows)
        self.assertEqual(self.srv.metric("leasegate_semaphore_permits_held"), before)


class DurableTest(unittest.TestCase):
    def test_permits_survive_kill9(self):
        with Server() as srv:
            permits = []
            for i in range(2):
                st, _, p = srv.request("POST", path("dur/sem", "acquire"),
                                       body={"owner": "p%d" % i, "limit": 2, "ttl_ms": 600000})
                self.assertEqual(st, 200, p)
                permits.append(p)
            srv.kill9()
            srv.start()
            st, _, g = srv.request("GET", path("dur/sem"))
            self.assertEqual((g["limit"], [h["token"] for h in g["holders"]]), (2, [p["token"] for p in permits]), g)
            st, _, full = srv.request("POST", path("dur/sem", "acquire"), body={"owner": "x", "limit": 2})
            self.assertEqual((st, full["error"]), (409, "semaphore_full"), full)
            st, _, r = srv.request("POST", path("dur/sem", "renew"), body={"lease": permits[0]["lease"]})
            self.assertEqual(st, 200, r)
            st, _, r = srv.request("POST", path("dur/sem", "release"), body={"lease": permits[1]["lease"]})
            self.assertEqual(st, 200, r)
            st, _, p = srv.request("POST", path("dur/sem", "acquire"), body={"owner": "x", "limit": 2})
            self.assertEqual(st, 200, p)
            self.assertGreater(p["token"], permits[1]["token"])


class KeyLimitTest(KeyedTestCase):
    """max_held counts each lease: a read lease and a permit are one each."""

    def setUp(self):
        self.key, line = new_key("small", "client", "q/", "max_held=2")
        self.start_keyed([line])

    def test_permits_and_read_leases_count(self):
        c = self.as_(self.key)
        st, _, r = c.acquire("q/rw", mode="read")
        self.assertEqual(st, 200, r)
        st, _, p = c.request("POST", path("q/sem", "acquire"), body={"owner": "x", "limit": 5})
        self.assertEqual(st, 200, p)
        st, _, body = c.acquire("q/rw", mode="read")
        self.assertEqual((st, body.get("limit")), (429, "max_held"), body)
        st, _, body = c.request("POST", path("q/sem", "acquire"), body={"owner": "x", "limit": 5})
        self.assertEqual((st, body.get("limit")), (429, "max_held"), body)
        self.assertEqual(c.request("POST", path("q/sem", "release"), body={"lease": p["lease"]})[0], 200)
        self.assertEqual(c.acquire("q/rw", mode="read")[0], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
