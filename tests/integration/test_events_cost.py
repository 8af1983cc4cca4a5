"""Long-polls and streams cost nothing on a publish that does not concern them.

The attack from issue 28: a key confined to orders/ fills the event ring with its own
pairs, then holds long-polls from the oldest event kept with a prefix that matches
nothing, so that every publish re-read the ring once per poll. The server now counts
the ring rows it looks at for readers (leasegate_event_rows_read_total): another
tenant's events must not add to it at all, however many such polls and streams wait,
and the polls still get exactly their own events, also once their `after` has left the
ring. (Counts, never timings: bench/hostile_polls.py measures the latency.)"""

import json
import socket
import time
import unittest

from harness import parse_metrics
from test_auth import KeyedTestCase, new_key

POLLS = 60
STREAMS = 20


def metrics(c):
    st, _, text = c.request("GET", "/metrics")
    assert st == 200, text
    return parse_metrics(text)


def wait_for(pred, what, timeout_s=20):
    end = time.time() + timeout_s
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class HeldRequest:
    """A GET sent on its own socket whose answer is read later (or never)."""

    def __init__(self, port, path, key):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n"
                           % (path, key)).encode())

    def read_json(self):
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.sock.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
        while len(body) < length:
            body += self.sock.recv(65536)
        return int(head.split(b" ")[1]), json.loads(body[:length])

    def read_until(self, marker, timeout_s=20):
        self.sock.settimeout(timeout_s)
        data = b""
        while marker not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    def close(self):
        self.sock.close()


class EventsCostTest(KeyedTestCase):
    def setUp(self):
        self.hostile_key, hostile = new_key("hostile", "client", "orders/")
        self.victim_key, victim = new_key("victim", "client", "billing/")
        self.admin_key, admin = new_key("admin", "admin")
        self.start_keyed([hostile, victim, admin], "--events-keep", "400")
        self.hostile, self.victim, self.admin = (self.as_(k) for k in (self.hostile_key, self.victim_key,
                                                                         self.admin_key))

    def pairs(self, c, name, n):
        for _ in range(n):
            st, _, g = c.acquire(name)
            self.assertEqual(st, 200, g)
            self.assertEqual(c.release(name, g["lease"])[0], 200)

    def test_other_tenants_events_read_no_row_for_hostile_readers(self):
        self.pairs(self.hostile, "orders/churn", 200)  # fills the ring (400 events)
        st, _, page = self.hostile.request("GET", "/v1/events?prefix=orders/&limit=1")
        self.assertEqual(st, 200, page)
        oldest = page["events"][0]["seq"]
        path = "/v1/events?after=%d&prefix=orders/zz-nothing&wait_ms=120000" % (oldest - 1)
        held = [HeldRequest(self.srv.port, path, self.hostile_key) for _ in range(POLLS)]
        streams = [HeldRequest(self.srv.port, "/v1/events/stream?after=%d&prefix=orders/zz-nothing" % (oldest - 1),
                               self.hostile_key) for _ in range(STREAMS)]
        for h in held + streams:
            self.addCleanup(h.close)
        wait_for(lambda: metrics(self.admin).get("leasegate_event_polls") == POLLS, "the polls to wait")
        wait_for(lambda: metrics(self.admin).get("leasegate_event_streams") == STREAMS, "the streams to open")
        for s in streams:
            s.read_until(b"retry: 1000\n\n")
        time.sleep(0.3)  # the streams' first look at the ring is done
        before = metrics(self.admin)["leasegate_event_rows_read_total"]
        # Another tenant's traffic, enough to push the polls' `after` out of the ring.
        self.pairs(self.victim, "billing/1", 250)
        m = metrics(self.admin)
        self.assertEqual(m["leasegate_event_rows_read_total"], before,
                         "a publish that concerns no reader read the ring for them")
        self.assertEqual(m["leasegate_event_polls"], POLLS)
        # An event for them: every poll gets exactly it, though its `after` is long gone.
        st, _, g = self.hostile.acquire("orders/zz-nothing/1")
        self.assertEqual(st, 200, g)
        for h in held:
            st, body = h.read_json()
            self.assertEqual(st, 200, body)
            self.assertEqual([(e["kind"], e["lock"]) for e in body["events"]], [("granted", "orders/zz-nothing/1")])
            self.assertEqual(body["next"], body["latest"])
        for s in streams:
            data = s.read_until(b"orders/zz-nothing/1")
            self.assertIn(b'"kind":"granted"', data)
        m = metrics(self.admin)
        self.assertEqual(m["leasegate_event_polls"], 0)
        # Each reader looked at this one event (and what came in the same batch): not the ring.
        self.assertLessEqual(m["leasegate_event_rows_read_total"] - before, 4 * (POLLS + STREAMS))

    def test_a_fresh_poll_from_a_dropped_seq_still_gets_410(self):
        st, _, first = self.hostile.request("GET", "/v1/events?prefix=orders/&wait_ms=0")
        self.pairs(self.hostile, "orders/churn", 250)
        self.assertEqual(first["events"], [])
        st, _, body = self.hostile.request("GET", "/v1/events?after=%d&prefix=orders/" % (first["latest"] + 1))
        self.assertEqual(st, 410, body)
        self.assertEqual(body["error"], "too_old")


if __name__ == "__main__":
    unittest.main()
