"""GET /v1/events/stream: the events as Server-Sent Events, in commit order, never a
lease, nothing before its batch is durable, resumed with Last-Event-ID, a clear 410 for
an id the server no longer has or never gave (an earlier run's included)."""

import select
import unittest

from harness import EventStream, Server
from test_events import SlowGrant


class EventStreamTest(unittest.TestCase):
    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.cleanup)

    def open(self, query="", headers=None, timeout=10):
        s = EventStream(self.srv.port, query, headers, timeout)
        self.addCleanup(s.close)
        return s

    def test_events_arrive_in_order_as_they_happen_with_ids_and_no_lease(self):
        c = self.srv.client
        s = self.open()
        self.assertEqual(s.resp.status, 200)
        self.assertEqual(s.resp.getheader("Content-Type"), "text/event-stream")
        self.assertEqual(s.message(), {"retry": "1000"})
        st, _, a = c.acquire("s/a", owner="one", ttl_ms=60000)
        first = s.event()
        self.assertEqual((first["data"]["kind"], first["data"]["owner"], first["data"]["token"]),
                         ("granted", "one", a["token"]))
        self.assertEqual(first["id"], str(first["data"]["seq"]))
        c.renew("s/a", a["lease"])
        c.release("s/a", a["lease"])
        st, _, b = c.acquire("s/b", owner="two", ttl_ms=100)  # expires on its own
        got = [s.event() for _ in range(4)]
        self.assertEqual([(e["data"]["kind"], e["data"]["lock"]) for e in got],
                         [("renewed", "s/a"), ("released", "s/a"), ("granted", "s/b"), ("expired", "s/b")])
        seqs = [first["data"]["seq"]] + [e["data"]["seq"] for e in got]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + 5)))
        text = "".join(s.raw)
        for lease in (a["lease"], b["lease"]):
            self.assertNotIn(lease, text)

    def test_last_event_id_resumes_after_that_event(self):
        c = self.srv.client
        s = self.open()
        for i in range(3):
            c.acquire("r/%d" % i)
        got = [s.event() for _ in range(3)]
        s.close()
        c.acquire("r/3")  # while no stream is open
        again = self.open(headers={"Last-Event-ID": got[0]["id"]})
        self.assertEqual([again.event()["data"]["lock"] for _ in range(3)], ["r/1", "r/2", "r/3"])
        # ?after= wins over the header; the prefix filters.
        q = self.open("?after=%s&prefix=r/2" % got[0]["id"], headers={"Last-Event-ID": got[2]["id"]})
        self.assertEqual(q.event()["data"]["lock"], "r/2")

    def test_bad_and_unservable_ids_get_clear_errors(self):
        c = self.srv.client
        c.acquire("x/1")
        latest = c.request("GET", "/v1/events")[2]["latest"]
        for header, status in (("abc", 400), ("-1", 400), ("", 400), (str(latest + 5), 410), ("5", 410)):
            st, _, body = c.request("GET", "/v1/events/stream", headers={"Last-Event-ID": header})
            self.assertEqual(st, status, (header, body))
        for q in ("?after=x", "?prefix=bad%20name"):
            self.assertEqual(c.request("GET", "/v1/events/stream" + q)[0], 400, q)

    def test_an_id_from_before_a_restart_gets_410_not_a_wrong_position(self):
        # Each run numbers its events from its start time, so even a run with more
        # events than the client saw cannot be confused with the old one.
        c = self.srv.client
        c.acquire("k/1")
        old = c.request("GET", "/v1/events")[2]["latest"]
        self.srv.restart(kill9=True)
        c = self.srv.client
        for i in range(5):
            c.acquire("k/n%d" % i)
        st, _, body = c.request("GET", "/v1/events/stream", headers={"Last-Event-ID": str(old)})
        self.assertEqual((st, body["error"]), (410, "too_old"), body)
        self.assertIn("before this server's start", body["message"])
        self.assertEqual(c.request("GET", "/v1/events?after=%d" % old)[0], 410)

    def test_a_stream_behind_the_ring_is_told_and_ends(self):
        srv = Server(extra_args=["--events-keep", "3"])
        self.addCleanup(srv.cleanup)
        c = srv.client
        c.acquire("w/0")
        first = c.request("GET", "/v1/events")[2]["latest"]
        for i in range(1, 5):
            c.acquire("w/%d" % i)
        st, _, body = c.request("GET", "/v1/events/stream?after=%d" % first)
        self.assertEqual((st, body["error"]), (410, "too_old"))

    def test_many_streams_and_hangups_cost_nothing_lasting(self):
        c = self.srv.client
        streams = [self.open() for _ in range(50)]
        self.srv.wait_until(lambda: self.srv.metric("leasegate_event_streams") == 50, what="50 open streams")
        for s in streams[:25]:
            s.close()
        c.acquire("h/1")  # the closed ones learn it on this write
        for s in streams[25:]:
            self.assertEqual(s.event()["data"]["lock"], "h/1")
        self.srv.wait_until(lambda: self.srv.metric("leasegate_event_streams") == 25, what="the closed streams to go")
        for s in streams[25:]:
            s.close()
        c.acquire("h/2")
        self.srv.wait_until(lambda: self.srv.metric("leasegate_event_streams") == 0, what="every stream to go")
        self.srv.stop_clean()  # no leak, no crash with streams gone (the ASan build checks)

    def test_a_server_stop_ends_open_streams(self):
        s = self.open()
        s.message()
        self.srv.stop_clean()
        self.assertIsNone(s.message())


class EventStreamDurabilityTest(unittest.TestCase):
    def test_nothing_is_streamed_before_its_batch_is_durable(self):
        slow = SlowGrant(self)
        s = EventStream(slow.srv.port, timeout=30)
        self.addCleanup(s.close)
        s.message()
        slow.begin()
        readable, _, _ = select.select([s.conn.sock], [], [], 0.3)
        self.assertEqual(readable, [], "an event was streamed before its batch was durable")
        self.assertEqual(s.event()["data"]["token"], slow.end()["token"])


if __name__ == "__main__":
    unittest.main()
