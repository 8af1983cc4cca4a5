"""Watching one lock (GET /v1/locks/NAME?index=N&wait_ms=): the answer comes when the
lock's index moves past N (a grant, renewal, release, expiry, force-release, a waiter
joining or leaving), within milliseconds and not before; at wait_ms otherwise. Indexes
only grow, across a forgotten name and across kill -9; the queue is shown in order."""

import json
import threading
import time
import unittest

from harness import Server


class Watch:
    """GET /v1/locks/NAME?index=&wait_ms= on its own connection, in a thread."""

    def __init__(self, srv, name, index, wait_ms=20000):
        self.client = srv.new_client(timeout=60)
        self.box = {}
        path = "/v1/locks/%s?index=%d&wait_ms=%d" % (name, index, wait_ms)
        self.thread = threading.Thread(target=self._run, args=(path,))
        self.thread.start()

    def _run(self, path):
        self.box["r"] = self.client.request("GET", path, timeout=60)
        self.box["at"] = time.monotonic()

    def waiting(self, for_s=0.3):
        self.thread.join(for_s)
        return self.thread.is_alive()

    def result(self, timeout=30):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the watch did not answer"
        st, _, body = self.box["r"]
        assert st == 200, (st, body)
        return body


class LockState:
    """For test cases with a client self.c: one lock's state, which must be readable."""

    def state(self, name):
        st, _, body = self.c.get_lock(name)
        self.assertEqual(st, 200, body)
        return body


class WatchTest(LockState, unittest.TestCase):
    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.cleanup)
        self.c = self.srv.client

    def watch(self, name, index, wait_ms=20000):
        w = Watch(self.srv, name, index, wait_ms)
        self.addCleanup(w.client.close)
        return w

    def expect_wake(self, name, change):
        """Watches name from its current index, makes the change and returns the answer."""
        before = self.state(name)
        w = self.watch(name, before["index"])
        self.assertTrue(w.waiting(), "the watch answered before anything changed")
        change()
        after = w.result()
        self.assertGreater(after["index"], before["index"])
        return after

    def test_every_change_wakes_the_watch_with_the_new_state(self):
        box = {}
        held = self.expect_wake("w/a", lambda: box.update(g=self.c.acquire("w/a", owner="one", ttl_ms=60000)[2]))
        self.assertEqual((held["held"], held["holder"]["owner"], held["holder"]["token"]),
                         (True, "one", box["g"]["token"]))
        self.assertNotIn(box["g"]["lease"], json.dumps(held))
        renewed = self.expect_wake("w/a", lambda: self.c.renew("w/a", box["g"]["lease"], ttl_ms=90000))
        self.assertEqual(renewed["holder"]["ttl_ms"], 90000)
        waiter = self.srv.new_client(timeout=60)
        self.addCleanup(waiter.close)
        t = threading.Thread(target=lambda: box.update(w=waiter.acquire("w/a", owner="two", wait_ms=20000)))
        joined = self.expect_wake("w/a", t.start)
        self.assertEqual((joined["waiters"], [q["owner"] for q in joined["queue"]]), (1, ["two"]))
        handed = self.expect_wake("w/a", lambda: self.c.release("w/a", box["g"]["lease"]))
        t.join(30)
        self.assertEqual((handed["holder"]["owner"], handed["waiters"], handed["queue"]), ("two", 0, []))
        revoked = self.expect_wake("w/a", lambda: self.c.request("DELETE", "/v1/locks/w/a"))
        self.assertFalse(revoked["held"])

    def test_a_holder_learns_of_its_expiry_at_once(self):
        st, _, g = self.c.acquire("w/e", ttl_ms=400)
        w = self.watch("w/e", self.state("w/e")["index"])
        body = w.result()
        self.assertFalse(body["held"], body)
        self.assertGreaterEqual(time.time() * 1000, g["expires_at_ms"])

    def test_a_waiter_that_hangs_up_wakes_the_watch(self):
        st, _, g = self.c.acquire("w/h", ttl_ms=60000)
        waiter = self.srv.new_client(timeout=60)
        t = threading.Thread(target=lambda: self._quietly(waiter.acquire, "w/h", wait_ms=20000))
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters("w/h") == 1, what="the waiter")
        body = self.expect_wake("w/h", waiter.close)
        self.assertEqual(body["waiters"], 0)
        t.join(30)

    @staticmethod
    def _quietly(fn, *args, **kw):
        try:
            fn(*args, **kw)
        except OSError:
            pass

    def test_no_change_means_no_answer_until_wait_ms(self):
        self.c.acquire("w/q", ttl_ms=60000)
        index = self.state("w/q")["index"]
        w = self.watch("w/q", index, wait_ms=600)
        self.c.acquire("w/other")  # another lock's change does not wake it
        self.assertTrue(w.waiting(0.3))
        body = w.result()
        self.assertEqual(body["index"], index)
        # Past indexes and wait_ms 0 answer at once; bad values are 400.
        self.assertEqual(self.c.request("GET", "/v1/locks/w/q?index=%d&wait_ms=5000" % (index - 1))[2]["index"], index)
        self.assertEqual(self.c.request("GET", "/v1/locks/w/q?index=%d&wait_ms=0" % index)[0], 200)
        for q in ("index=-1", "index=x", "wait_ms=300001", "wait_ms=-5", "index=1&wait_ms=1.5"):
            self.assertEqual(self.c.request("GET", "/v1/locks/w/q?" + q)[0], 400, q)

    def test_an_absent_lock_can_be_watched_until_it_is_taken(self):
        index = self.state("w/new")["index"]
        w = self.watch("w/new", index)
        self.c.acquire("w/unrelated")
        self.assertTrue(w.waiting())
        self.c.acquire("w/new", owner="first")
        self.assertEqual(w.result()["holder"]["owner"], "first")

    def test_watches_work_with_events_off(self):
        srv = Server(extra_args=["--events-keep", "0"])
        self.addCleanup(srv.cleanup)
        index = srv.client.get_lock("w/off")[2]["index"]
        w = Watch(srv, "w/off", index)
        self.addCleanup(w.client.close)
        self.assertTrue(w.waiting())
        srv.client.acquire("w/off", owner="off")
        self.assertEqual(w.result()["holder"]["owner"], "off")

    def test_indexes_grow_across_forgetting_and_kill_9(self):
        srv = Server(extra_args=["--forget-idle-after", "1"])
        self.addCleanup(srv.cleanup)
        c = srv.client
        st, _, g = c.acquire("w/f")
        c.release("w/f", g["lease"])
        seen = c.get_lock("w/f")[2]["index"]
        srv.wait_until(lambda: srv.metric("leasegate_locks_forgotten_total") >= 1, timeout=10, what="the forget")
        gone = c.get_lock("w/f")[2]["index"]
        self.assertGreater(gone, seen)
        c.acquire("w/f", ttl_ms=60000)
        held = c.get_lock("w/f")[2]["index"]
        self.assertGreater(held, gone)
        srv.restart(kill9=True)
        c = srv.client
        after = c.get_lock("w/f")[2]
        self.assertTrue(after["held"])
        self.assertGreater(after["index"], held)
        # A watcher holding an index from an earlier run is answered at once.
        st, _, body = c.request("GET", "/v1/locks/w/f?index=%d&wait_ms=20000" % (after["index"] + 10 ** 12),
                                timeout=5)
        self.assertEqual((st, body["index"]), (200, after["index"]))

    def test_the_queue_is_shown_in_order(self):
        self.c.acquire("w/line", ttl_ms=60000)
        clients = []
        for i in range(3):
            wc = self.srv.new_client(timeout=60)
            self.addCleanup(wc.close)
            clients.append(wc)
            t = threading.Thread(target=lambda wc=wc, i=i: self._quietly(wc.acquire, "w/line", owner="q%d" % i,
                                                                           wait_ms=3000))
            t.start()
            self.srv.wait_until(lambda: self.srv.waiters("w/line") == i + 1, what="waiter %d" % i)
        body = self.state("w/line")
        self.assertEqual([q["owner"] for q in body["queue"]], ["q0", "q1", "q2"])
        since = [q["since_ms"] for q in body["queue"]]
        self.assertEqual(since, sorted(since))
        self.assertLessEqual(since[-1], time.time() * 1000)

    def test_many_watchers_all_wake_and_stopping_ends_them(self):
        index = self.state("w/m")["index"]
        ws = [self.watch("w/m", index) for _ in range(40)]
        self.srv.wait_until(lambda: self.srv.metric("leasegate_watches") == 40, what="40 watches")
        # Held as waiting acquires are: out of libmicrohttpd, a socket and a request each.
        self.assertEqual(self.srv.metric("leasegate_connections_parked"), 40)
        self.c.acquire("w/m")
        for w in ws:
            self.assertTrue(w.result()["held"])
        self.assertEqual(self.srv.metric("leasegate_watches"), 0)
        self.assertEqual(self.srv.metric("leasegate_connections_parked"), 0)
        # A parked watch's connection serves the client's next request.
        again = ws[0].client
        sock = again.conn.sock
        self.assertEqual(again.get_lock("w/m")[0], 200)
        self.assertIs(again.conn.sock, sock)
        late = self.watch("w/m", self.state("w/m")["index"])
        self.srv.wait_until(lambda: self.srv.metric("leasegate_watches") == 1, what="the late watch")
        self.srv.stop_clean()
        late.thread.join(30)
        self.assertFalse(late.thread.is_alive())


if __name__ == "__main__":
    unittest.main()
