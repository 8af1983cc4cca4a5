"""Issue 27's targeted scenario: a leader gateway paused past its lease, with three requests
in flight (headers in, bodies after), answers none of them from its stale memory.

1. gw0 leads. Client A acquires `x` (request_id rid-A), writes once through gw0's guard
   (mark t1) and checks POST /v1/fence/x {"token": t1} (accepted).
2. Three requests reach gw0 as headers only: A's second guarded PUT with part of its body, a
   fence check of t1, a retry of A's acquire with the same request_id.
3. gw0 is SIGSTOPped until gw1 leads.
4. At gw1: `x` is force-released, B acquires it (t2) and writes through gw1's guard (the
   backend applies t2); B fences t2; gw1 refuses a fence check of t1.
5. The rest of the fence check's and the replay's bodies go to gw0, then SIGCONT, then the
   rest of the PUT's body. (Sent before SIGCONT too, the PUT's end record would be pending in
   the same turn, and gw0 would hold the other answers for its commit by chance.)

gw0 talks to etcd through a proxy (stall_proxy.py) that holds its keepalives (not its
commits) from just before SIGCONT until a little after: the keepalive that would tell gw0
its lease is gone cannot win the race against the requests it holds (the review saw them
answered first; on one fast local etcd member the keepalive often came first and the
process exited before answering, which proves nothing).

Before issue 27, gw0 answered all three from memory before it exited: the fence check
200 accepted, the replay A's old grant (two holders by the servers' own answers), and the
backend applied A's t1 write after B's t2. Now each gets 503 (Retry-After: 1) or no answer,
the backend never applies t1 after t2, and gw0 exits 1.

One etcd member, two gateways at the default --leader-ttl (3), a recording backend
(applying_upstream.py). Every wait is bounded; nothing asserts how long anything took."""

import json
import os
import signal
import socket
import time
import unittest

import etcd_fixture
from applying_upstream import ApplyingUpstream
from etcd_fixture import Etcd, Gateway, wait_for, wait_leader
from harness import RawReader, parse_metrics, resume_process
from stall_proxy import StallProxy

ANSWER_TIMEOUT_S = 30.0
# After a failover a lock written less than --guard-settle before takes no write for the
# rest of it (guardq.h): short here, so that B's write waits a little.
SETTLE_S = 2
# How long gw0's keepalives are held after SIGCONT.
KEEPALIVE_STALL_S = 2.0


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())


def head(method, path, length, headers=None):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1", "Content-Length: %d" % length]
    lines += ["%s: %s" % kv for kv in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def requests_seen(g):
    """gw's count of requests whose head it has read (/metrics counts itself too)."""
    status, _, text = g.client.request("GET", "/metrics")
    assert status == 200, text
    return parse_metrics(text)["leasegate_http_requests_total"]


def answer_of(sock):
    """(status, headers, body) of the one answer on sock, or None when the connection
    closed (or stayed silent) without one."""
    try:
        return RawReader(sock).read_response(timeout=ANSWER_TIMEOUT_S)
    except (OSError, ValueError, AssertionError):
        return None


class PausedLeaderTest(unittest.TestCase):
    """The scenario runs once (setUpClass); each test checks one of its promises."""

    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd()
        cls.proxy = StallProxy(cls.etcd.members)
        cls.upstream = ApplyingUpstream()
        cls.gateways = []
        try:
            cls.run_scenario()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for g in cls.gateways:
            resume_process(g.proc)
            g.stop()
            g.cleanup()
        cls.upstream.close()
        cls.proxy.close()
        cls.etcd.stop()

    @classmethod
    def gateway(cls, via):
        g = Gateway(via, "lg-paused", ["--leader-ttl", "3", "--guard", "/store/=" + cls.upstream.url,
                                       "--guard-settle", str(SETTLE_S)])
        cls.gateways.append(g)
        return g

    @classmethod
    def run_scenario(cls):
        gw0 = cls.gateway(cls.proxy)
        assert wait_leader([gw0]) is gw0, gw0.stderr_text()
        gw1 = cls.gateway(cls.etcd)
        assert wait_for(lambda: gw1.role() == "follower"), gw1.stderr_text()
        cls.gw0, cls.gw1 = gw0, gw1
        # 1.
        status, _, a = gw0.client.acquire("x", owner="A", ttl_ms=60000, request_id="rid-A")
        assert status == 200, a
        cls.a = a
        lease_a = {"Fencing-Lease": a["lease"]}
        status, _, body = gw0.client.request("PUT", "/store/x", raw=b"A's first write", headers=lease_a)
        assert status in (200, 201, 204), body
        status, _, body = gw0.client.fence("x", a["token"])
        assert (status, body.get("accepted")) == (200, True), body
        # 2. Three heads, part of one body; gw0 has read all three heads when its request
        # count has moved past them.
        put_body = b"A's second write, late"
        fence_body = json.dumps({"token": a["token"]}).encode()
        replay_body = json.dumps({"owner": "A", "ttl_ms": 60000, "request_id": "rid-A"}).encode()
        seen = requests_seen(gw0)
        socks = [socket.create_connection(("127.0.0.1", gw0.port), timeout=ANSWER_TIMEOUT_S) for _ in range(3)]
        cls.socks = socks
        socks[0].sendall(head("PUT", "/store/x", len(put_body), lease_a) + put_body[:5])
        socks[1].sendall(head("POST", "/v1/fence/x", len(fence_body), {"Content-Type": "application/json"}))
        socks[2].sendall(head("POST", "/v1/locks/x/acquire", len(replay_body), {"Content-Type": "application/json"}))
        polls = [0]

        def heads_read():
            polls[0] += 1
            return requests_seen(gw0) >= seen + 3 + polls[0]
        assert wait_for(heads_read, timeout=10), "gw0 did not read the three heads"
        # 3.
        os.kill(gw0.pid, signal.SIGSTOP)
        try:
            assert wait_leader([gw1]) is gw1, gw1.stderr_text()
            # 4.
            status, _, body = gw1.client.request("DELETE", "/v1/locks/x")
            assert status == 200, body
            status, _, b = gw1.client.acquire("x", owner="B", ttl_ms=60000)
            assert status == 200, b
            cls.b = b
            deadline = time.monotonic() + 30
            while True:  # 503 while x settles at the new leader
                status, _, body = gw1.client.request("PUT", "/store/x", raw=b"B's write",
                                                     headers={"Fencing-Lease": b["lease"]})
                if status != 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert status in (200, 201, 204), body
            status, _, body = gw1.client.fence("x", b["token"])
            assert (status, body.get("accepted")) == (200, True), body
            cls.stale_fence_at_gw1 = gw1.client.fence("x", a["token"])
            # 5.
            socks[1].sendall(fence_body)
            socks[2].sendall(replay_body)
            time.sleep(0.2)  # the bytes are in gw0's socket buffers before it runs again
            cls.proxy.stall(json_only=True)
        finally:
            os.kill(gw0.pid, signal.SIGCONT)
        time.sleep(KEEPALIVE_STALL_S / 2)
        socks[0].sendall(put_body[5:])
        time.sleep(KEEPALIVE_STALL_S / 2)
        cls.proxy.release()
        cls.answers = [answer_of(s) for s in socks]
        for s in socks:
            s.close()
        cls.gw0_exit = gw0.wait_exit()

    def assert_not_answered_from_memory(self, answer, what):
        if answer is None:
            return  # no answer: it stopped before replying
        status, headers, body = answer
        self.assertEqual(status, 503, "%s answered %d from a deposed leader: %r" % (what, status, body))
        self.assertEqual(headers.get("retry-after"), "1", headers)
        self.assertEqual(json.loads(body)["error"], "overloaded", body)

    def test_the_new_leader_refuses_the_old_token(self):
        status, _, body = self.stale_fence_at_gw1
        self.assertEqual(status, 409, body)
        self.assertGreater(self.b["token"], self.a["token"])

    def test_the_fence_check_in_flight_is_not_answered_from_memory(self):
        self.assert_not_answered_from_memory(self.answers[1], "the fence check of the old token")

    def test_the_acquire_replay_in_flight_is_not_answered_from_memory(self):
        self.assert_not_answered_from_memory(self.answers[2], "the request_id replay of A's acquire")
        status, _, body = self.gw1.client.get_lock("x")
        self.assertEqual((status, body["holder"]["owner"], body["holder"]["token"]), (200, "B", self.b["token"]),
                         body)

    def test_the_deposed_leader_exits_1(self):
        self.assertEqual(self.gw0_exit, 1, self.gw0.stderr_text())
        self.assertIn("leadership lost", self.gw0.stderr_text())
        self.assertEqual(self.gw1.role(), "leader")

    # The guard releases a write's end only once its end record (marks and time, guardq.c)
    # has committed after the body's end: on etcd a transaction fenced on the leader key,
    # which a deposed gateway cannot make (commit.h: commit_barrier_hold is the same promise
    # for an end that records nothing).
    def test_the_backend_never_applies_the_old_token_after_the_new(self):
        applied = [int(w["token"]) for w in self.upstream.applied_to("/x")]
        self.assertEqual(applied, sorted(applied), "the backend applied a lower token after a higher one: %r"
                         % applied)
        self.assert_not_answered_from_memory(self.answers[0], "A's guarded write")


if __name__ == "__main__":
    unittest.main()
