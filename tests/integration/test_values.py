"""A lock's value that only its current writer can write (issue 40): PUT /v1/locks/NAME/value
{lease, value, if_version?} -> 200 {name, value_version, token}; every lease that does not hold
the lock now as its writer (released, expired, revoked, another lock's, a reader's) gets 409
stale_token and nothing changes; a stale if_version gets 409 version_mismatch. GET shows value,
value_version and value_token; the value outlives its writer until a holder writes another or
null, keeps its bytes as sent, is bounded by --max-value-bytes (413) and counted in the key's
share (429 max_value_bytes), is durable before its answer (kill -9 right after it), moves the
watch index, and is an event, an audit row and part of the lock's history. Checked by the
server's answers, never by the test's clock.

A write's request_id: the value remembers the request_ids of the last 16 writes of the grant
that wrote it, so a retry of one of them (its answer lost: the same request sent again, a
connection dropped, a kill -9 between the write and the retry), or its first attempt arriving
after the retry was answered and later writes made, is answered what that write was (200, its
own version) and writes nothing; the same request_id with another value or from another key
is 409 request_id_reused and writes nothing; another request_id, none, or another lease is a
write like any other; a write older than the last 16 is not recognised, so its retry with
if_version gets 409 version_mismatch and changes nothing."""

import http.client
import json
import socket
import threading
import time
import unittest

from harness import Server, ServerTestCase
from test_auth import KeyedTestCase, new_key


def put_value(c, name, lease, value, **more):
    body = {"lease": lease, "value": value}
    body.update(more)
    return c.request("PUT", "/v1/locks/%s/value" % name, body=body)


def put_raw(c, name, text):
    return c.request("PUT", "/v1/locks/%s/value" % name, raw=text.encode(),
                     headers={"Content-Type": "application/json"})


class ValueTest(ServerTestCase):
    def grant(self, name, owner="w", **fields):
        st, _, g = self.srv.acquire(name, owner, **fields)
        self.assertEqual(st, 200, g)
        return g

    def get(self, name):
        st, _, body = self.srv.get_lock(name)
        self.assertEqual(st, 200, body)
        return body

    def test_the_holder_writes_and_the_next_holder_reads(self):
        name = "val/checkpoint"
        self.assertEqual({k: self.get(name)[k] for k in ("value", "value_version", "value_token")},
                         {"value": None, "value_version": 0, "value_token": None})
        a = self.grant(name, "first", ttl_ms=600000)
        self.assertEqual((a["value"], a["value_version"]), (None, 0), a)
        st, _, body = put_value(self.srv.client, name, a["lease"], {"offset": 41, "file": "a.log"})
        self.assertEqual(st, 200, body)
        self.assertEqual(body, {"name": name, "value_version": 1, "token": a["token"]})
        view = self.get(name)
        self.assertEqual((view["value"], view["value_version"], view["value_token"]),
                         ({"offset": 41, "file": "a.log"}, 1, a["token"]), view)
        st, _, alone = self.srv.request("GET", "/v1/locks/%s/value" % name)
        self.assertEqual((st, alone), (200, {"name": name, "value": {"offset": 41, "file": "a.log"},
                                             "value_version": 1, "value_token": a["token"]}))
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)
        # The next holder reads the last one's checkpoint, and writes the next.
        view = self.get(name)
        self.assertEqual((view["held"], view["value"]), (False, {"offset": 41, "file": "a.log"}), view)
        b = self.grant(name, "second", ttl_ms=600000)
        # ... with its grant: what the last writer left, at the version to write over.
        self.assertEqual((b["value"], b["value_version"]), ({"offset": 41, "file": "a.log"}, 1), b)
        st, _, body = put_value(self.srv.client, name, b["lease"], [1, "two", None], if_version=1)
        self.assertEqual((st, body["value_version"], body["token"]), (200, 2, b["token"]), body)
        st, _, body = put_value(self.srv.client, name, b["lease"], None)
        self.assertEqual((st, body["value_version"]), (200, 3), body)
        view = self.get(name)
        self.assertEqual((view["value"], view["value_version"], view["value_token"]), (None, 3, b["token"]), view)
        self.assertEqual(self.srv.release(name, b["lease"])[0], 200)

    def test_no_lease_but_the_current_writer_changes_it(self):
        name, other = "val/fenced", "val/other"
        a = self.grant(name, "a", ttl_ms=600000)
        self.assertEqual(put_value(self.srv.client, name, a["lease"], "mine")[0], 200)
        o = self.grant(other, "o", ttl_ms=600000)

        def refused(lease, reason):
            st, _, body = put_value(self.srv.client, name, lease, "intruder")
            self.assertEqual((st, body.get("error"), body.get("reason")), (409, "stale_token", reason), body)
            self.assertEqual((body["value_version"], body["value_token"]), (1, a["token"]), body)
            view = self.get(name)
            self.assertEqual((view["value"], view["value_version"]), ("mine", 1), view)

        refused(o["lease"], "unknown")  # another lock's lease
        refused("00000000-0000-4000-8000-000000000000", "unknown")
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)
        refused(a["lease"], "released")
        r1 = self.grant(name, "reader", mode="read", ttl_ms=600000)
        refused(r1["lease"], "read_lease")
        self.assertEqual(self.srv.release(name, r1["lease"])[0], 200)
        e = self.grant(name, "expiring", ttl_ms=200)
        self.srv.wait_until(lambda: not self.get(name)["held"], timeout=10, what="the lease to run out")
        refused(e["lease"], "expired")
        f = self.grant(name, "revoked", ttl_ms=600000)
        self.assertEqual(self.srv.request("DELETE", "/v1/locks/" + name)[0], 200)
        refused(f["lease"], "revoked")
        g = self.grant(name, "next", ttl_ms=600000)
        refused(e["lease"], "superseded")
        st, _, body = put_value(self.srv.client, name, g["lease"], "next's", if_version=0)
        self.assertEqual((st, body.get("error"), body.get("value_version")), (409, "version_mismatch", 1), body)
        self.assertEqual(self.get(name)["value"], "mine")
        st, _, body = put_value(self.srv.client, name, g["lease"], "next's", if_version=1)
        self.assertEqual((st, body["value_version"], body["token"]), (200, 2, g["token"]), body)
        self.assertEqual(self.srv.release(name, g["lease"])[0], 200)
        self.assertEqual(self.srv.release(other, o["lease"])[0], 200)

    def test_bad_requests(self):
        name = "val/bad"
        a = self.grant(name, ttl_ms=600000)
        for body, field in (({"lease": a["lease"]}, "value"), ({"value": 1}, "lease"),
                            ({"lease": a["lease"], "value": 1, "if_version": -1}, "if_version"),
                            ({"lease": a["lease"], "value": 1, "if_version": "1"}, "if_version"),
                            ({"lease": a["lease"], "value": 1, "extra": 2}, "extra")):
            st, _, e = self.srv.request("PUT", "/v1/locks/%s/value" % name, body=body)
            self.assertEqual((st, e["error"], e.get("field")), (400, "bad_request", field), (body, e))
        deep = 1
        for _ in range(20):
            deep = [deep]
        st, _, e = put_value(self.srv.client, name, a["lease"], deep)
        self.assertEqual((st, e.get("field")), (400, "value"), e)
        st, _, e = put_value(self.srv.client, name, a["lease"], "x" * 5000)  # --max-value-bytes 4096
        self.assertEqual((st, e["error"], e["field"], e["max_bytes"]), (413, "payload_too_large", "value", 4096), e)
        st, _, e = self.srv.acquire("val/x/value", "w")
        self.assertEqual((st, e.get("field")), (400, "name"), e)  # a reserved last segment
        st, h, e = self.srv.request("POST", "/v1/locks/%s/value" % name, body={"lease": a["lease"], "value": 1})
        self.assertEqual((st, h.get("allow")), (405, "GET, HEAD, PUT"), e)
        self.assertEqual(self.get(name)["value_version"], 0)

    def test_kept_as_sent(self):
        name = "val/raw"
        a = self.grant(name, ttl_ms=600000)
        text = '{"lease":"%s","value":{"n": 0.10, "big": 1.0e2, "s":"\\u00e9"}}' % a["lease"]
        st, _, body = put_raw(self.srv.client, name, text)
        self.assertEqual(st, 200, body)
        for path in ("/v1/locks/%s/value" % name, "/v1/locks/%s" % name):
            conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
            try:
                conn.request("GET", path)
                data = conn.getresponse().read()
            finally:
                conn.close()
            self.assertIn(b'"value":{"n": 0.10, "big": 1.0e2, "s":"\\u00e9"}', data)

    def test_watch_events_history_and_audit(self):
        name = "val/watched"
        a = self.grant(name, "watcher-test", ttl_ms=600000)
        index = self.get(name)["index"]
        box = {}
        w = self.srv.new_client()
        t = threading.Thread(target=lambda: box.update(r=w.request(
            "GET", "/v1/locks/%s?index=%d&wait_ms=30000" % (name, index))))
        t.start()
        time.sleep(0.2)  # the watch is held (not asserted: an early answer is checked by its index below)
        st, _, body = put_value(self.srv.client, name, a["lease"], {"v": 1})
        self.assertEqual(st, 200, body)
        t.join(30)
        w.close()
        st, _, view = box["r"]
        self.assertEqual(st, 200, view)
        if view["index"] > index:  # answered for the write (not a timeout)
            self.assertEqual((view["value"], view["value_version"]), ({"v": 1}, 1), view)
        st, _, ev = self.srv.request("GET", "/v1/events?prefix=%s" % name)
        kinds = [(e["kind"], e["token"], e["type"], e["mode"]) for e in ev["events"]]
        self.assertIn(("value_set", a["token"], "lock", "write"), kinds)
        st, _, hist = self.srv.request("GET", "/v1/locks/%s/history" % name)
        self.assertEqual((st, hist["values"][0]["token"], hist["values"][0]["owner"]), (200, a["token"], "watcher-test"),
                         hist)
        self.assertEqual([g["token"] for g in hist["grants"]], [a["token"]])
        self.assertIsNone(hist["grants"][0]["how"])  # a value write does not end the grant
        st, _, audit = self.srv.request("GET", "/v1/audit?lock=%s" % name)
        self.assertIn("value_set", [r["kind"] for r in audit["rows"]])
        m = self.srv.metric("leasegate_value_writes_total")
        self.assertGreaterEqual(m, 1)


class ValueSizeTest(unittest.TestCase):
    def test_max_value_bytes(self):
        with Server(extra_args=["--max-value-bytes", "20"]) as srv:
            st, _, a = srv.acquire("small", "w", ttl_ms=600000)
            st, _, body = put_value(srv.client, "small", a["lease"], "x" * 18)  # 20 bytes with its quotes
            self.assertEqual(st, 200, body)
            st, _, body = put_value(srv.client, "small", a["lease"], "x" * 19)
            self.assertEqual((st, body.get("max_bytes")), (413, 20), body)
            self.assertEqual(srv.get_lock("small")[2]["value"], "x" * 18)


def value_of(c, name):
    st, _, body = c.request("GET", "/v1/locks/%s/value" % name)
    assert st == 200, body
    return body["value"], body["value_version"], body["value_token"]


def put_and_hang_up(port, name, body):
    """Sends a value write and closes the connection without reading its answer (an answer
    lost on the way back); waits until the server has closed its side (it has answered or
    dropped the request), within a bound."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(b"PUT /v1/locks/%s/value HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (name.encode(), len(data)) + data)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(30)
        while s.recv(4096):  # bounded by the timeout: the server closes once it has answered
            pass
    finally:
        s.close()


class ValueRetryTest(ServerTestCase):
    def grant(self, name, owner="w"):
        st, _, g = self.srv.acquire(name, owner, ttl_ms=600000)
        self.assertEqual(st, 200, g)
        return g

    def test_a_retry_of_a_write_whose_answer_was_lost_is_answered_not_written_again(self):
        name, c = "val/retry", self.srv.client
        a = self.grant(name)
        replays = self.srv.metric("leasegate_value_replays_total")
        writes = self.srv.metric("leasegate_value_writes_total")
        # Without if_version: the retry does not write the value a second time.
        first = put_value(c, name, a["lease"], {"n": 1}, request_id="w-1")
        self.assertEqual(first, (200, first[1], {"name": name, "value_version": 1, "token": a["token"]}))
        for _ in range(2):
            st, _, body = put_value(c, name, a["lease"], {"n": 1}, request_id="w-1")
            self.assertEqual((st, body), (200, first[2]))
        self.assertEqual(value_of(c, name), ({"n": 1}, 1, a["token"]))
        # With if_version: the retry is not a false version_mismatch.
        st, _, second = put_value(c, name, a["lease"], {"n": 2}, if_version=1, request_id="w-2")
        self.assertEqual((st, second["value_version"]), (200, 2), second)
        st, _, body = put_value(c, name, a["lease"], {"n": 2}, if_version=1, request_id="w-2")
        self.assertEqual((st, body), (200, second))
        self.assertEqual(value_of(c, name), ({"n": 2}, 2, a["token"]))
        self.assertEqual(self.srv.metric("leasegate_value_replays_total") - replays, 3)
        self.assertEqual(self.srv.metric("leasegate_value_writes_total") - writes, 2)
        # Another request_id, or none, is a new write.
        st, _, body = put_value(c, name, a["lease"], {"n": 2}, request_id="w-3")
        self.assertEqual((st, body["value_version"]), (200, 3), body)
        st, _, body = put_value(c, name, a["lease"], {"n": 2})
        self.assertEqual((st, body["value_version"]), (200, 4), body)
        # The grant's earlier writes are remembered too, a write without an id between them or
        # not: a retry of one is answered as it was (its own version), never written over the
        # newer value.
        st, _, body = put_value(c, name, a["lease"], {"n": 2}, if_version=1, request_id="w-2")
        self.assertEqual((st, body), (200, second))
        st, _, body = put_value(c, name, a["lease"], {"n": 2}, if_version=2, request_id="w-3")
        self.assertEqual((st, body), (200, {"name": name, "value_version": 3, "token": a["token"]}))
        st, _, body = put_value(c, name, a["lease"], {"n": 1}, request_id="w-1")
        self.assertEqual((st, body), (200, first[2]))
        self.assertEqual(value_of(c, name), ({"n": 2}, 4, a["token"]))
        # The next holder's write with the same id is its own, not a repeat of another lease's.
        st, _, body = put_value(c, name, a["lease"], {"n": 5}, request_id="same")
        self.assertEqual((st, body["value_version"]), (200, 5), body)
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)
        st, _, body = put_value(c, name, a["lease"], {"n": 5}, request_id="same")
        self.assertEqual((st, body.get("error"), body.get("reason")), (409, "stale_token", "released"), body)
        b = self.grant(name, "b")
        st, _, body = put_value(c, name, b["lease"], {"n": 6}, if_version=5, request_id="same")
        self.assertEqual((st, body), (200, {"name": name, "value_version": 6, "token": b["token"]}))
        self.assertEqual(value_of(c, name), ({"n": 6}, 6, b["token"]))
        self.assertEqual(self.srv.release(name, b["lease"])[0], 200)

    def test_a_dropped_connection_then_a_retry_writes_once(self):
        name, c = "val/dropped", self.srv.client
        a = self.grant(name)
        body = {"lease": a["lease"], "value": {"step": 1}, "if_version": 0, "request_id": "drop-1"}
        put_and_hang_up(self.srv.port, name, body)
        st, _, answer = c.request("PUT", "/v1/locks/%s/value" % name, body=body)
        self.assertEqual((st, answer), (200, {"name": name, "value_version": 1, "token": a["token"]}))
        self.assertEqual(value_of(c, name), ({"step": 1}, 1, a["token"]))
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)

    def late_first_attempt(self, name, lease, writes_after=1, **more):
        """Write 1's first attempt is slow on its way (its body still arriving: a congested
        link, a proxy, a follower forwarding it); the client's timeout sends it again, that
        retry is answered, and the client goes on to write 2 (and on, up to writes_after
        writes after write 1), as a client that retries each write before it sends the next
        does. Then the first attempt arrives: its answer."""
        c = self.srv.client
        one = json.dumps(dict({"lease": lease, "value": {"step": 1}, "request_id": "late-1"}, **more)).encode()
        late = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        try:
            late.sendall(b"PUT /v1/locks/%s/value HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                         b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (name.encode(), len(one))
                         + one[:-1])
            st, _, first = c.request("PUT", "/v1/locks/%s/value" % name, raw=one,
                                     headers={"Content-Type": "application/json"})
            self.assertEqual((st, first.get("value_version")), (200, 1), first)
            for step in range(2, writes_after + 2):
                checked = {"if_version": step - 1} if more else {}
                st, _, later = put_value(c, name, lease, {"step": step}, request_id="late-%d" % step, **checked)
                self.assertEqual((st, later.get("value_version")), (200, step), later)
            late.sendall(one[-1:])
            answer = b""
            while not answer.rstrip().endswith(b"}"):
                chunk = late.recv(4096)  # bounded by the socket's timeout; Connection: close
                if not chunk:
                    break
                answer += chunk
        finally:
            late.close()
        return answer

    def late_answer(self, answer):
        """The late attempt's status and JSON body."""
        head, _, body = answer.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), json.loads(body)

    # Failed before the value remembered more than its last write (review rev3): the late
    # attempt was a new write (200, value_version 3) and put {"step": 1} back over {"step": 2}.
    def test_a_late_first_attempt_never_writes_over_the_next_write(self):
        name = "val/late"
        a = self.grant(name)
        answer = self.late_first_attempt(name, a["lease"])
        self.assertEqual(value_of(self.srv.client, name), ({"step": 2}, 2, a["token"]), answer)
        self.assertEqual(self.late_answer(answer), (200, {"name": name, "value_version": 1, "token": a["token"]}))
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)

    def test_with_if_version_too_a_late_first_attempt_is_answered_as_it_was(self):
        name = "val/late-checked"
        a = self.grant(name)
        answer = self.late_first_attempt(name, a["lease"], if_version=0)
        self.assertEqual(self.late_answer(answer), (200, {"name": name, "value_version": 1, "token": a["token"]}))
        self.assertEqual(value_of(self.srv.client, name), ({"step": 2}, 2, a["token"]), answer)
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)

    def test_the_last_16_writes_are_remembered(self):
        """Write 1 followed by 15 more is the oldest of the 16 remembered: its late attempt is
        answered as it was."""
        name = "val/late-16"
        a = self.grant(name)
        answer = self.late_first_attempt(name, a["lease"], writes_after=15)
        self.assertEqual(self.late_answer(answer), (200, {"name": name, "value_version": 1, "token": a["token"]}))
        self.assertEqual(value_of(self.srv.client, name), ({"step": 16}, 16, a["token"]), answer)
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)

    def test_a_late_attempt_older_than_the_last_16_with_if_version_is_refused(self):
        """Write 1 followed by 16 more is forgotten: its late attempt is a new write, which the
        if_version it was sent with refuses (the value moved on); the newer value stays."""
        name = "val/late-17"
        a = self.grant(name)
        refusals = self.srv.metric('leasegate_value_refusals_total{reason="version_mismatch"}')
        answer = self.late_first_attempt(name, a["lease"], writes_after=16, if_version=0)
        st, body = self.late_answer(answer)
        self.assertEqual((st, body.get("error"), body.get("value_version")), (409, "version_mismatch", 17), body)
        self.assertEqual(value_of(self.srv.client, name), ({"step": 17}, 17, a["token"]), answer)
        self.assertEqual(self.srv.metric('leasegate_value_refusals_total{reason="version_mismatch"}') - refusals, 1)
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)

    def test_a_request_id_sent_with_another_value_is_refused(self):
        """The same request_id with another value (of the last write or an older remembered
        one, with if_version or not) is a client's mistake: 409 request_id_reused, naming it,
        and nothing written. The value is compared as sent: other spacing is another value."""
        name, c = "val/reused", self.srv.client
        a = self.grant(name)
        metric = 'leasegate_value_refusals_total{reason="request_id_reused"}'
        refusals = self.srv.metric(metric)
        st, _, first = put_value(c, name, a["lease"], {"n": 1}, request_id="r-1")
        self.assertEqual((st, first["value_version"]), (200, 1), first)
        self.assertEqual(put_value(c, name, a["lease"], {"n": 2}, request_id="r-2")[0], 200)
        for rid, value, more in (("r-2", {"n": 3}, {}), ("r-1", {"n": 3}, {"if_version": 2}),
                                 ("r-1", None, {"if_version": 0})):
            st, _, e = put_value(c, name, a["lease"], value, request_id=rid, **more)
            self.assertEqual((st, e.get("error"), e.get("request_id"), e.get("value_version"), e.get("value_token")),
                             (409, "request_id_reused", rid, 2, a["token"]), e)
            self.assertIn("'%s'" % rid, e["message"])
        st, _, e = put_raw(c, name, '{"lease": "%s", "value": {"n":1}, "request_id": "r-1"}' % a["lease"])
        self.assertEqual((st, e.get("error")), (409, "request_id_reused"), e)
        st, _, body = put_raw(c, name, '{"lease": "%s", "value": {"n": 1}, "request_id": "r-1"}' % a["lease"])
        self.assertEqual((st, body), (200, first))
        self.assertEqual(value_of(c, name), ({"n": 2}, 2, a["token"]))
        self.assertEqual(self.srv.metric(metric) - refusals, 4)
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)

    def test_bad_request_ids(self):
        name = "val/bad-id"
        a = self.grant(name)
        for rid in ("", "x" * 65, "a\nb", 7, None, ["x"]):
            st, _, e = put_value(self.srv.client, name, a["lease"], 1, request_id=rid)
            self.assertEqual((st, e.get("error"), e.get("field")), (400, "bad_request", "request_id"), (rid, e))
        st, _, body = put_value(self.srv.client, name, a["lease"], 1, request_id="x" * 64)
        self.assertEqual((st, body.get("value_version")), (200, 1), body)
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)


class ValueRestartTest(unittest.TestCase):
    def test_a_retry_across_a_kill_9_is_answered_not_written_again(self):
        with Server() as srv:
            st, _, a = srv.acquire("val/retry-crash", "a", ttl_ms=600000)
            self.assertEqual(st, 200, a)
            st, _, first = put_value(srv.client, "val/retry-crash", a["lease"], {"kept": 1}, if_version=0,
                                     request_id="crash-1")
            self.assertEqual((st, first["value_version"]), (200, 1), first)
            srv.restart(kill9=True)  # the answer lost with the server
            for _ in range(2):
                st, _, body = put_value(srv.client, "val/retry-crash", a["lease"], {"kept": 1}, if_version=0,
                                        request_id="crash-1")
                self.assertEqual((st, body), (200, first))
            self.assertEqual(value_of(srv.client, "val/retry-crash"), ({"kept": 1}, 1, a["token"]))
            # A write after the restart keeps its own id across the next one.
            st, _, second = put_value(srv.client, "val/retry-crash", a["lease"], {"kept": 2}, request_id="crash-2")
            self.assertEqual((st, second["value_version"]), (200, 2), second)
            srv.restart(kill9=True)
            st, _, body = put_value(srv.client, "val/retry-crash", a["lease"], {"kept": 2}, request_id="crash-2")
            self.assertEqual((st, body), (200, second))
            self.assertEqual(value_of(srv.client, "val/retry-crash"), ({"kept": 2}, 2, a["token"]))
            self.assertEqual(srv.metric("leasegate_value_writes_total"), 0)  # none since the restart

    def test_the_remembered_writes_survive_a_kill_9(self):
        """The list, not only the last write's id: after a kill -9 every one of the grant's last
        16 writes is answered as it was (the oldest too), one older is not recognised (its
        if_version refuses it), and another value with a remembered id is refused."""
        name = "val/list-crash"
        with Server() as srv:
            st, _, a = srv.acquire(name, "a", ttl_ms=600000)
            self.assertEqual(st, 200, a)
            answers = []
            for i in range(17):
                st, _, body = put_value(srv.client, name, a["lease"], {"n": i}, if_version=i, request_id="c-%d" % i)
                self.assertEqual((st, body["value_version"]), (200, i + 1), body)
                answers.append(body)
            srv.restart(kill9=True)
            for i in (16, 1, 8):
                st, _, body = put_value(srv.client, name, a["lease"], {"n": i}, if_version=i, request_id="c-%d" % i)
                self.assertEqual((st, body), (200, answers[i]))
            st, _, body = put_value(srv.client, name, a["lease"], {"n": 0}, if_version=0, request_id="c-0")
            self.assertEqual((st, body.get("error"), body.get("value_version")), (409, "version_mismatch", 17), body)
            st, _, body = put_value(srv.client, name, a["lease"], {"n": -1}, request_id="c-5")
            self.assertEqual((st, body.get("error")), (409, "request_id_reused"), body)
            self.assertEqual(value_of(srv.client, name), ({"n": 16}, 17, a["token"]))
            self.assertEqual(srv.metric("leasegate_value_writes_total"), 0)
            # A write after the restart joins the list, which still drops its oldest.
            st, _, body = put_value(srv.client, name, a["lease"], {"n": 17}, if_version=17, request_id="c-17")
            self.assertEqual((st, body["value_version"]), (200, 18), body)
            srv.restart(kill9=True)
            st, _, body = put_value(srv.client, name, a["lease"], {"n": 17}, if_version=17, request_id="c-17")
            self.assertEqual((st, body["value_version"]), (200, 18), body)
            st, _, body = put_value(srv.client, name, a["lease"], {"n": 2}, if_version=2, request_id="c-2")
            self.assertEqual((st, body), (200, answers[2]))
            st, _, body = put_value(srv.client, name, a["lease"], {"n": 1}, if_version=1, request_id="c-1")
            self.assertEqual((st, body.get("error"), body.get("value_version")), (409, "version_mismatch", 18), body)
            self.assertEqual(value_of(srv.client, name), ({"n": 17}, 18, a["token"]))


    def test_durable_before_answered_and_stale_across_kill_9(self):
        with Server() as srv:
            st, _, a = srv.acquire("val/crash", "a", ttl_ms=600000)
            st, _, b = srv.acquire("val/crash2", "b", ttl_ms=600000)
            self.assertEqual(srv.release("val/crash2", b["lease"])[0], 200)
            st, _, body = put_value(srv.client, "val/crash", a["lease"], {"acked": 1})
            self.assertEqual(st, 200, body)
            srv.restart(kill9=True)  # right after the answer
            view = srv.get_lock("val/crash")[2]
            self.assertEqual((view["value"], view["value_version"], view["value_token"]), ({"acked": 1}, 1, a["token"]))
            # The holder still holds, and writes; the released lease of another lock never does.
            self.assertEqual(put_value(srv.client, "val/crash", a["lease"], {"acked": 2})[0], 200)
            st, _, body = put_value(srv.client, "val/crash2", b["lease"], "stale")
            self.assertEqual((st, body["reason"]), (409, "released"), body)
            self.assertEqual(srv.release("val/crash", a["lease"])[0], 200)
            srv.restart(kill9=True)
            st, _, body = put_value(srv.client, "val/crash", a["lease"], "stale after a restart")
            self.assertEqual((st, body["error"], body["reason"]), (409, "stale_token", "released"), body)
            view = srv.get_lock("val/crash")[2]
            self.assertEqual((view["held"], view["value"], view["value_version"]), (False, {"acked": 2}, 2), view)


class ValueKeyTest(KeyedTestCase):
    def test_another_keys_write_with_the_id_is_not_a_repeat(self):
        """Another key (with the same lease) sending a remembered request_id, with the same
        value or not, is not answered the first key's write: 409 request_id_reused, nothing
        written."""
        k1, line1 = new_key("one", "client", "v/")
        k2, line2 = new_key("two", "client", "v/")
        self.start_keyed([line1, line2])
        c1, c2 = self.as_(k1), self.as_(k2)
        st, _, g = c1.acquire("v/keyed", owner="one", ttl_ms=600000)
        self.assertEqual(st, 200, g)
        st, _, first = put_value(c1, "v/keyed", g["lease"], "one's", if_version=0, request_id="k-1")
        self.assertEqual((st, first["value_version"]), (200, 1), first)
        self.assertEqual(put_value(c1, "v/keyed", g["lease"], "one's", if_version=0, request_id="k-1")[2], first)
        for value in ("two's", "one's"):
            st, _, body = put_value(c2, "v/keyed", g["lease"], value, if_version=0, request_id="k-1")
            self.assertEqual((st, body.get("error")), (409, "request_id_reused"), body)
        self.assertEqual(value_of(c1, "v/keyed"), ("one's", 1, g["token"]))
        # Its own request_id is its own write.
        st, _, body = put_value(c2, "v/keyed", g["lease"], "two's", if_version=1, request_id="k-2")
        self.assertEqual((st, body["value_version"]), (200, 2), body)
        self.assertEqual(put_value(c2, "v/keyed", g["lease"], "two's", if_version=1, request_id="k-2")[2], body)


class ValueShareTest(KeyedTestCase):
    def test_a_keys_values_count_against_its_share(self):
        k1, line1 = new_key("small", "client", "v/")
        k2, line2 = new_key("other", "client", "v/")
        self.start_keyed([line1 + " max_value_bytes=100", line2])
        c1, c2 = self.as_(k1), self.as_(k2)
        leases = []
        for i in range(3):
            st, _, g = c1.acquire("v/%d" % i, owner="small", ttl_ms=600000)
            self.assertEqual(st, 200, g)
            leases.append(g["lease"])
        self.assertEqual(put_value(c1, "v/0", leases[0], "x" * 48)[0], 200)  # 50 bytes
        self.assertEqual(put_value(c1, "v/1", leases[1], "y" * 48)[0], 200)  # 100
        st, _, e = put_value(c1, "v/2", leases[2], "z")
        self.assertEqual((st, e.get("error"), e.get("limit")), (429, "key_limit", "max_value_bytes"), e)
        # Writing over its own value counts only the difference; null frees it.
        self.assertEqual(put_value(c1, "v/0", leases[0], "x" * 38)[0], 200)  # 90
        self.assertEqual(put_value(c1, "v/2", leases[2], "z" * 8)[0], 200)  # 100
        self.assertEqual(put_value(c1, "v/1", leases[1], None)[0], 200)  # 50
        self.assertEqual(put_value(c1, "v/2", leases[2], "z" * 48)[0], 200)  # 90
        # Another key is not touched by it.
        st, _, g = c2.acquire("v/other", owner="other", ttl_ms=600000)
        self.assertEqual(put_value(c2, "v/other", g["lease"], "o" * 1000)[0], 200)


if __name__ == "__main__":
    unittest.main()
