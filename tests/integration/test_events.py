"""GET /v1/events: lock events in commit order, long-polled; nothing before its batch is
durable; a ring with a clear 410 for a reader that fell behind; prefixes and keys; never
a lease."""

import os
import tempfile
import threading
import time
import unittest

from harness import Server, slow_disk_env, sqlite_only
from test_auth import KeyedTestCase, new_key


def events(c, query):
    st, _, body = c.request("GET", "/v1/events" + query, timeout=30)
    assert st == 200, (st, body)
    return body


class SlowGrant:
    """A server whose fsync turns slow (1.5 s) at begin(), and one acquire made then: until
    end(), the grant is made in memory and its batch is still being written."""

    def __init__(self, testcase):
        sqlite_only(testcase, "a slow fsync (slowsync) is what holds the batch back here")
        self.testcase = testcase
        self.flag = os.path.join(tempfile.mkdtemp(prefix="leasegate-events-"), "slow")
        env = slow_disk_env(1500, only_if=self.flag)  # slow once begun: start-up syncs a lot
        if env is None:
            testcase.skipTest("tests/faults/slowsync was not built (LEASEGATE_SLOWSYNC unset)")
        self.srv = Server(extra_env=env)
        testcase.addCleanup(self.srv.cleanup)
        self.box = {}

    def begin(self):
        open(self.flag, "w").close()
        other = self.srv.new_client(timeout=60)
        self.testcase.addCleanup(other.close)
        self.thread = threading.Thread(target=lambda: self.box.update(r=other.acquire("d/1")))
        self.thread.start()
        time.sleep(0.5)  # the grant is made, its batch is still being written
        self.testcase.assertTrue(self.thread.is_alive(), "the acquire was answered before its commit")

    def end(self):
        """The grant, once its commit is done."""
        self.thread.join(30)
        return self.box["r"][2]


class EventsTest(unittest.TestCase):
    def test_every_kind_in_order_and_no_lease(self):
        srv = Server()
        self.addCleanup(srv.cleanup)
        c = srv.client
        st, _, a = c.acquire("e/a", owner="one", ttl_ms=60000)
        c.renew("e/a", a["lease"])
        c.acquire("e/a", lease=a["lease"])
        box = {}
        w = srv.new_client(timeout=60)
        self.addCleanup(w.close)
        t = threading.Thread(target=lambda: box.update(r=w.acquire("e/a", owner="two", wait_ms=20000)))
        t.start()
        for _ in range(200):
            if c.get_lock("e/a")[2]["waiters"] == 1:
                break
            time.sleep(0.02)
        c.release("e/a", a["lease"])
        c.release("e/a", a["lease"])
        t.join(30)
        b = box["r"][2]
        st, _, x = c.acquire("e/x", owner="short", ttl_ms=100)
        time.sleep(0.3)
        c.get_lock("e/x")
        c.fence("e/res", b["token"])
        c.request("DELETE", "/v1/locks/e/a")
        body = {}
        for _ in range(100):
            body = events(c, "?after=0")
            if len(body["events"]) >= 10:
                break
            time.sleep(0.05)
        got = [(e["kind"], e["lock"], e["owner"], e["token"]) for e in body["events"]]
        self.assertEqual(got, [
            ("granted", "e/a", "one", a["token"]), ("renewed", "e/a", "one", a["token"]),
            ("reentered", "e/a", "one", a["token"]), ("waiter_joined", "e/a", "two", 0),
            ("released", "e/a", "one", a["token"]), ("granted", "e/a", "two", b["token"]),
            ("granted", "e/x", "short", x["token"]), ("expired", "e/x", "short", x["token"]),
            ("fence_raised", "e/res", "", b["token"]), ("revoked", "e/a", "two", b["token"])])
        seqs = [e["seq"] for e in body["events"]]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
        self.assertEqual((body["next"], body["latest"]), (seqs[-1], seqs[-1]))
        for lease in (a["lease"], b["lease"], x["lease"]):
            self.assertNotIn(lease, c.last_text)
        self.assertEqual([e["lock"] for e in events(c, "?after=0&prefix=e/x")["events"]], ["e/x", "e/x"])
        page = events(c, "?after=0&limit=3")
        self.assertEqual([e["seq"] for e in page["events"]], seqs[:3])
        self.assertEqual(page["next"], seqs[2])

    def test_long_poll_wakes_on_an_event_and_ends_empty_at_wait_ms(self):
        srv = Server()
        self.addCleanup(srv.cleanup)
        c = srv.client
        latest = events(c, "?after=0")["latest"]
        box = {}
        poller = srv.new_client(timeout=60)
        self.addCleanup(poller.close)
        t = threading.Thread(target=lambda: box.update(r=events(poller, "?after=%d&wait_ms=20000" % latest)))
        t.start()
        time.sleep(0.3)
        self.assertTrue(t.is_alive(), "the long-poll answered with nothing to say")
        st, _, g = c.acquire("w/1")
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertEqual([(e["kind"], e["token"]) for e in box["r"]["events"]], [("granted", g["token"])])
        body = events(c, "?after=%d&wait_ms=200" % box["r"]["next"])
        self.assertEqual((body["events"], body["next"]), ([], box["r"]["next"]))

    def test_nothing_before_its_batch_is_durable(self):
        slow = SlowGrant(self)
        latest = events(slow.srv.client, "?after=0")["latest"]
        slow.begin()
        self.assertEqual(events(slow.srv.client, "?after=%d" % latest)["events"], [])
        grant = slow.end()
        got = events(slow.srv.client, "?after=%d" % latest)["events"]
        self.assertEqual([(e["kind"], e["token"]) for e in got], [("granted", grant["token"])])


class EventKeysTest(KeyedTestCase):
    def test_a_client_key_follows_its_prefixes_only(self):
        key, line = new_key("app", "client", "p/")
        self.start_keyed([line])
        c = self.as_(key)
        c.acquire("p/1")
        self.assertEqual(c.request("GET", "/v1/events")[0], 403)
        self.assertEqual(c.request("GET", "/v1/events?prefix=q/")[0], 403)
        self.assertEqual([e["lock"] for e in events(c, "?prefix=p/")["events"]], ["p/1"])


if __name__ == "__main__":
    unittest.main()
