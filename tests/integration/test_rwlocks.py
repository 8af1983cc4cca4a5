"""Read-write locks and lock-delay, against the real server.

Readers share a lock; every reader has a lease and a token of its own; the queue is
strictly FIFO with no barging: a writer's end grants the whole run of readers at the
head up to the next writer, a reader that comes while a writer waits waits behind it,
and a writer that gives up lets the readers behind it join. Lock-delay: after a lease
with lock_delay_ms ends uncleanly (it expires, or an admin force-releases it), nobody is
granted the lock before delay_until_ms; waiters keep their places; a release starts no
delay. All kept across kill -9. Checked by the server's own answers (tokens, grant
times, delay_until_ms), never by the test's clock."""

import threading
import time
import unittest

import harness
from harness import Client, Server, ServerTestCase


class Waiter:
    """An acquire with wait_ms on a connection of its own, in a thread."""

    def __init__(self, srv, name, owner, **fields):
        self.client = Client(srv.port, timeout=120)
        self.result = None
        fields.setdefault("wait_ms", 60000)
        self.thread = threading.Thread(target=self._run, args=(name, owner, fields), daemon=True)
        self.thread.start()

    def _run(self, name, owner, fields):
        try:
            self.result = self.client.acquire(name, owner, **fields)
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


def queued(srv, name, n):
    srv.wait_until(lambda: srv.get_lock(name)[2].get("waiters") == n, timeout=10,
                   what="%d waiters on %s" % (n, name))


class ReadWriteTest(ServerTestCase):
    def acquire(self, name, owner="tester", **fields):
        st, _, g = self.srv.acquire(name, owner, **fields)
        self.assertEqual(st, 200, g)
        return g

    def test_fifo_with_mixed_readers_and_writers(self):
        name = "rw/fifo"
        r1 = self.acquire(name, "r1", mode="read", ttl_ms=600000)
        r2 = self.acquire(name, "r2", mode="read", ttl_ms=600000)
        self.assertEqual((r1["mode"], r2["mode"]), ("read", "read"))
        self.assertGreater(r2["token"], r1["token"])  # each reader its own token
        self.assertNotEqual(r1["lease"], r2["lease"])
        # Queued in this order: W1, R3, R4, W2, R5.
        order = [("w1", "write"), ("r3", "read"), ("r4", "read"), ("w2", "write"), ("r5", "read")]
        waiters = {}
        for i, (owner, mode) in enumerate(order):
            waiters[owner] = Waiter(self.srv, name, owner, mode=mode, ttl_ms=600000)
            queued(self.srv, name, i + 1)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual([(q["owner"], q["mode"]) for q in g["queue"]], order, g)
        self.assertEqual((g["mode"], g["holders_total"], [h["owner"] for h in g["holders"]]),
                         ("read", 2, ["r1", "r2"]), g)
        self.assertEqual(g["holder"]["owner"], "r1")  # the oldest reader
        # No barging: a reader that comes now waits behind the writer (at once: 409).
        st, _, busy = self.srv.acquire(name, "late", mode="read")
        self.assertEqual((st, busy["error"], busy["mode"], busy["waiters"]), (409, "lock_held", "read", 5), busy)
        self.assertEqual([h["owner"] for h in busy["holders"]], ["r1", "r2"])
        # The writer waits for every reader.
        self.assertEqual(self.srv.release(name, r1["lease"])[0], 200)
        queued(self.srv, name, 5)
        self.assertEqual(self.srv.release(name, r2["lease"])[0], 200)
        st, _, w1 = waiters["w1"].done()
        self.assertEqual((st, w1["mode"]), (200, "write"), w1)
        queued(self.srv, name, 4)
        # The writer's end grants the run of readers at the head (r3, r4), not w2 nor r5.
        self.assertEqual(self.srv.release(name, w1["lease"])[0], 200)
        st, _, r3 = waiters["r3"].done()
        st4, _, r4 = waiters["r4"].done()
        self.assertEqual((st, st4), (200, 200))
        queued(self.srv, name, 2)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(([h["owner"] for h in g["holders"]], [q["owner"] for q in g["queue"]]),
                         (["r3", "r4"], ["w2", "r5"]), g)
        self.assertFalse(waiters["w2"].answered or waiters["r5"].answered)
        self.assertEqual(self.srv.release(name, r3["lease"])[0], 200)
        self.assertEqual(self.srv.release(name, r4["lease"])[0], 200)
        st, _, w2 = waiters["w2"].done()
        self.assertEqual(st, 200, w2)
        self.assertEqual(self.srv.release(name, w2["lease"])[0], 200)
        st, _, r5 = waiters["r5"].done()
        self.assertEqual(st, 200, r5)
        # Tokens in grant order, never repeated.
        tokens = [r1["token"], r2["token"], w1["token"], r3["token"], r4["token"], w2["token"], r5["token"]]
        self.assertEqual(tokens, sorted(set(tokens)), tokens)
        # Each grant came after the lease it waited for had ended (by the server's clock).
        self.assertEqual(self.srv.release(name, r5["lease"])[0], 200)

    def test_a_writer_that_gives_up_lets_the_readers_behind_it_join(self):
        name = "rw/giveup"
        r1 = self.acquire(name, "r1", mode="read", ttl_ms=600000)
        w = Waiter(self.srv, name, "w", wait_ms=300)
        queued(self.srv, name, 1)
        r2 = Waiter(self.srv, name, "r2", mode="read", ttl_ms=600000)
        queued(self.srv, name, 2)
        st, _, body = w.done()
        self.assertEqual((st, body["error"]), (409, "lock_held"), body)
        st, _, g2 = r2.done()
        self.assertEqual((st, g2["mode"]), (200, "read"), g2)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(([h["owner"] for h in g["holders"]], g["waiters"]), (["r1", "r2"], 0), g)
        self.srv.release(name, r1["lease"])
        self.srv.release(name, g2["lease"])

    def test_reentry_keeps_the_mode(self):
        name = "rw/reentry"
        r = self.acquire(name, "r", mode="read")
        again = self.acquire(name, "r", lease=r["lease"])
        self.assertEqual((again["mode"], again["count"], again["token"]), ("read", 2, r["token"]), again)
        st, _, body = self.srv.acquire(name, "r", lease=r["lease"], mode="write")
        self.assertEqual((st, body["error"], body["mode"]), (409, "mode_conflict", "read"), body)
        self.assertEqual(self.srv.acquire(name, "r", lease=r["lease"], mode="read")[2]["count"], 3)
        for _ in range(3):
            self.assertEqual(self.srv.release(name, r["lease"])[0], 200)
        w = self.acquire(name, "w")
        st, _, body = self.srv.acquire(name, "w", lease=w["lease"], mode="read")
        self.assertEqual((st, body["error"], body["mode"]), (409, "mode_conflict", "write"), body)
        self.srv.release(name, w["lease"])

    def test_bad_modes_and_delays(self):
        for fields in ({"mode": "shared"}, {"mode": None}, {"mode": 1}, {"lock_delay_ms": -1},
                       {"lock_delay_ms": 60001}, {"lock_delay_ms": "5"}):
            st, _, body = self.srv.acquire("rw/bad", **fields)
            self.assertEqual((st, body["error"], body.get("field")),
                             (400, "bad_request", list(fields)[0]), (fields, body))

    def test_events_audit_and_history_carry_the_mode(self):
        name = "rw/events"
        r = self.acquire(name, "reader", mode="read")
        w = Waiter(self.srv, name, "writer")
        queued(self.srv, name, 1)
        self.srv.release(name, r["lease"])
        st, _, g = w.done()
        self.assertEqual(st, 200, g)
        self.srv.release(name, g["lease"])
        st, _, ev = self.srv.request("GET", "/v1/events?prefix=%s&limit=1000" % name)
        self.assertEqual(st, 200, ev)
        seen = [(e["kind"], e["owner"], e["type"], e["mode"]) for e in ev["events"] if e["kind"] != "waiter_left"]
        self.assertEqual(seen, [("granted", "reader", "lock", "read"), ("waiter_joined", "writer", "lock", "write"),
                                ("released", "reader", "lock", "read"), ("granted", "writer", "lock", "write"),
                                ("released", "writer", "lock", "write")], ev)
        st, _, rows = self.srv.request("GET", "/v1/audit?lock=%s" % name)
        self.assertEqual([(x["kind"], x["type"], x["mode"]) for x in rows["rows"]],
                         [("granted", "lock", "read"), ("released", "lock", "read"), ("granted", "lock", "write"),
                          ("released", "lock", "write")], rows)
        st, _, hist = self.srv.request("GET", "/v1/locks/%s/history" % name)
        self.assertEqual([(x["owner"], x["mode"], x["how"]) for x in hist["grants"]],
                         [("writer", "write", "released"), ("reader", "read", "released")], hist)

    def test_metrics_count_readers(self):
        name = "rw/metrics"
        before = self.srv.metric("leasegate_read_leases")
        leases = [self.acquire(name, "r%d" % i, mode="read")["lease"] for i in range(3)]
        self.assertEqual(self.srv.metric("leasegate_read_leases"), before + 3)
        self.assertGreaterEqual(self.srv.metric('leasegate_grants_by_kind_total{kind="lock",mode="read"}'), 3)
        for lease in leases:
            self.srv.release(name, lease)
        self.assertEqual(self.srv.metric("leasegate_read_leases"), before)


class LockDelayTest(ServerTestCase):
    def acquire(self, name, owner="tester", **fields):
        st, _, g = self.srv.acquire(name, owner, **fields)
        self.assertEqual(st, 200, g)
        return g

    def delay_of(self, name):
        return self.srv.get_lock(name)[2]["delay_until_ms"]

    def test_after_expiry_nobody_before_the_delay_and_waiters_keep_their_places(self):
        name = "delay/expiry"
        gone = self.acquire(name, "crashed", ttl_ms=200, lock_delay_ms=1500)
        self.assertEqual(gone["lock_delay_ms"], 1500)
        first = Waiter(self.srv, name, "first", ttl_ms=60000)
        queued(self.srv, name, 1)
        second = Waiter(self.srv, name, "second", mode="read", ttl_ms=60000)
        queued(self.srv, name, 2)
        self.srv.wait_until(lambda: self.delay_of(name), timeout=10, what="the lease expired, its delay running")
        delay_until = self.delay_of(name)
        self.assertGreaterEqual(delay_until, gone["expires_at_ms"] + 1500)
        st, _, body = self.srv.acquire(name, "newcomer")
        self.assertEqual((st, body["error"], body["holder"], body["delay_until_ms"], body["waiters"]),
                         (409, "lock_held", None, delay_until, 2), body)
        st, _, g = first.done()
        self.assertEqual(st, 200, g)
        self.assertGreaterEqual(g["acquired_at_ms"], delay_until)  # by the server's own answers
        self.assertFalse(second.answered)  # a reader behind a writer: FIFO still
        self.assertIsNone(self.delay_of(name))
        self.srv.release(name, g["lease"])
        st, _, g2 = second.done()
        self.assertEqual(st, 200, g2)
        self.srv.release(name, g2["lease"])
        self.assertGreaterEqual(self.srv.metric("leasegate_lock_delays_total"), 1)

    def test_after_force_release(self):
        name = "delay/revoked"
        r1 = self.acquire(name, "r1", mode="read", lock_delay_ms=800, ttl_ms=600000)
        self.acquire(name, "r2", mode="read", ttl_ms=600000)
        w = Waiter(self.srv, name, "w", ttl_ms=60000)
        queued(self.srv, name, 1)
        st, _, body = self.srv.request("DELETE", "/v1/locks/%s" % name)
        self.assertEqual(st, 200, body)
        self.assertEqual([x["owner"] for x in body["revoked_all"]], ["r1", "r2"], body)
        self.assertEqual(body["revoked"]["owner"], "r1")
        self.assertIsNotNone(body["delay_until_ms"])
        self.assertEqual((body["held"], body["waiters"]), (False, 1), body)
        st, _, g = w.done()
        self.assertEqual(st, 200, g)
        self.assertGreaterEqual(g["acquired_at_ms"], body["delay_until_ms"])
        st, _, r = self.srv.renew(name, r1["lease"])
        self.assertEqual((st, r["reason"]), (409, "revoked"), r)
        self.srv.release(name, g["lease"])

    def test_not_after_a_release(self):
        name = "delay/released"
        g = self.acquire(name, "clean", lock_delay_ms=60000, ttl_ms=60000)
        w = Waiter(self.srv, name, "next", ttl_ms=60000)
        queued(self.srv, name, 1)
        self.assertEqual(self.srv.release(name, g["lease"])[0], 200)
        st, _, n = w.done()
        self.assertEqual(st, 200, n)  # granted at once: with a 60 s delay it would have waited
        self.assertIsNone(self.delay_of(name))
        self.srv.release(name, n["lease"])
        self.assertEqual(self.acquire(name, "again")["mode"], "write")

    def test_a_reentry_keeps_the_delay_of_its_grant(self):
        name = "delay/reentry"
        g = self.acquire(name, "r", ttl_ms=60000, lock_delay_ms=0)
        again = self.acquire(name, "r", lease=g["lease"], lock_delay_ms=60000)
        self.assertEqual(again["lock_delay_ms"], 0)
        self.srv.request("DELETE", "/v1/locks/%s" % name)
        self.assertIsNone(self.delay_of(name))
        self.acquire(name, "next")


class DurableTest(unittest.TestCase):
    def test_readers_and_a_delay_survive_kill9(self):
        with Server() as srv:
            readers = []
            for i in range(3):
                st, _, g = srv.acquire("dur/readers", "r%d" % i, mode="read", ttl_ms=600000)
                self.assertEqual(st, 200, g)
                readers.append(g)
            st, _, d = srv.acquire("dur/delay", "gone", ttl_ms=600000, lock_delay_ms=60000)
            self.assertEqual(st, 200, d)
            st, _, body = srv.request("DELETE", "/v1/locks/dur/delay")
            delay_until = body["delay_until_ms"]
            self.assertIsNotNone(delay_until, body)
            srv.kill9()
            srv.start()
            st, _, g = srv.get_lock("dur/readers")
            self.assertEqual(([h["token"] for h in g["holders"]], g["mode"]), ([r["token"] for r in readers], "read"))
            for r in readers:
                self.assertEqual(srv.renew("dur/readers", r["lease"])[0], 200)
            st, _, busy = srv.acquire("dur/readers", "writer")
            self.assertEqual((st, busy["error"]), (409, "lock_held"), busy)
            st, _, w = srv.acquire("dur/readers", "reader", mode="read")
            self.assertEqual(st, 200, w)
            self.assertGreater(w["token"], max(r["token"] for r in readers + [d]))
            st, _, g = srv.get_lock("dur/delay")
            self.assertEqual(g["delay_until_ms"], delay_until, g)
            st, _, body = srv.acquire("dur/delay", "next")
            self.assertEqual((st, body["delay_until_ms"], body["holder"]), (409, delay_until, None), body)


class GuardTest(unittest.TestCase):
    """The guard lets a write through with the writer's lease only: a read lease gets
    409 stale_token with reason read_lease, a semaphore permit's lease 409 too, and the
    upstream sees neither; reads need no lease."""

    def test_read_and_permit_leases_cannot_write(self):
        import upstream
        if not upstream.nginx_available():
            self.skipTest("nginx with the WebDAV module is not installed")
        with upstream.Nginx() as ng, Server(["--guard", "/store/=" + ng.url]) as srv:
            st, _, r = srv.acquire("doc", "reader", mode="read")
            self.assertEqual(st, 200, r)
            st, _, body = srv.request("PUT", "/store/doc", raw=b"from a reader", headers={"Fencing-Lease": r["lease"]})
            self.assertEqual((st, body["error"], body.get("reason"), body.get("token")),
                             (409, "stale_token", "read_lease", r["token"]), body)
            st, _, p = srv.request("POST", "/v1/semaphores/doc/acquire", body={"owner": "permit", "limit": 2})
            self.assertEqual(st, 200, p)
            st, _, body = srv.request("PUT", "/store/doc", raw=b"from a permit", headers={"Fencing-Lease": p["lease"]})
            self.assertEqual((st, body["error"], body.get("token")), (409, "stale_token", None), body)
            self.assertFalse([e for e in ng.access_entries() if e["method"] == "PUT"])
            srv.release("doc", r["lease"])
            st, _, w = srv.acquire("doc", "writer")
            self.assertEqual(st, 200, w)
            st, _, body = srv.request("PUT", "/store/doc", raw=b"from the writer", headers={"Fencing-Lease": w["lease"]})
            self.assertIn(st, (200, 201, 204), body)
            self.assertEqual(ng.read_file("doc"), b"from the writer")


if __name__ == "__main__":
    unittest.main(verbosity=2)
