"""Retry-safe acquire: a retry carrying the same request_id and owner gets the grant its lost
answer carried (same lease and token), across a lost answer and a kill -9; nothing else does."""

import json
import os
import select
import shutil
import socket
import tempfile
import threading
import time
import unittest

import harness


def acquire_and_drop_answer(port, name, body):
    """Sends an acquire on a raw socket, waits until the answer has reached this machine's
    socket buffer (so the server delivered it and keeps the grant), then resets the
    connection without reading it: the client never learns the lease."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(b"POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (name.encode(), len(data), data))
        readable, _, _ = select.select([s], [], [], 10)
        if not readable:
            raise AssertionError("no answer to the acquire within 10 s")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    finally:
        s.close()


class RetryTests(harness.ServerTestCase):
    def acquire(self, name, **fields):
        return self.srv.acquire(name, fields.pop("owner", "retrier"), **fields)

    def test_lost_answer_retry_gets_the_same_grant(self):
        name = "retry/lost-answer"
        acquire_and_drop_answer(self.srv.port, name, {"owner": "retrier", "ttl_ms": 60000, "request_id": "r-1"})
        st, _, held = self.acquire(name, ttl_ms=60000)  # without the id: held, by ourselves
        self.assertEqual((st, held.get("error")), (409, "lock_held"), held)
        st, _, g = self.acquire(name, ttl_ms=60000, request_id="r-1")
        self.assertEqual(st, 200, g)
        self.assertEqual((g["token"], g["count"]), (held["holder"]["token"], 1), g)
        st, _, again = self.acquire(name, ttl_ms=60000, request_id="r-1")
        self.assertEqual((st, again["lease"], again["token"]), (200, g["lease"], g["token"]), again)
        self.assertEqual(again["expires_at_ms"], g["expires_at_ms"], "a replay changes nothing")
        self.assertEqual(self.srv.metric("leasegate_acquire_replays_total"), 2)
        st, _, r = self.srv.release(name, g["lease"])
        self.assertEqual((st, r.get("count")), (200, 0), r)

    def test_only_the_same_owner_and_id_replay(self):
        name = "retry/others"
        st, _, g = self.acquire(name, ttl_ms=60000, request_id="same")
        self.assertEqual(st, 200, g)
        for owner, rid in (("someone-else", "same"), ("retrier", "other"), ("retrier", None)):
            fields = {"owner": owner, "ttl_ms": 60000}
            if rid:
                fields["request_id"] = rid
            st, _, b = self.acquire(name, **fields)
            self.assertEqual((st, b.get("error")), (409, "lock_held"), (owner, rid, b))
            self.assertNotIn(g["lease"], json.dumps(b))
        self.srv.release(name, g["lease"])
        # Once the grant has ended, the same id is a new acquire with a new lease and token.
        st, _, n = self.acquire(name, ttl_ms=60000, request_id="same")
        self.assertEqual(st, 200, n)
        self.assertNotEqual(n["lease"], g["lease"])
        self.assertGreater(n["token"], g["token"])
        self.srv.release(name, n["lease"])

    def test_replayed_reentry_counts_once(self):
        name = "retry/reentry"
        st, _, g = self.acquire(name, ttl_ms=60000)
        self.assertEqual(st, 200, g)
        for _ in range(3):
            st, _, r = self.acquire(name, lease=g["lease"], request_id="enter-2")
            self.assertEqual((st, r["count"], r["lease"]), (200, 2, g["lease"]), r)
        for left in (1, 0):
            st, _, r = self.srv.release(name, g["lease"])
            self.assertEqual((st, r.get("count")), (200, left), r)

    def test_waiter_granted_after_its_answer_was_lost(self):
        name = "retry/waiter"
        st, _, first = self.acquire(name, owner="first", ttl_ms=60000)
        self.assertEqual(st, 200, first)
        # The waiter's long-poll is answered only after the release; its retry must find
        # the grant made for it, not queue behind itself.
        client = self.srv.new_client(timeout=30)
        self.addCleanup(client.close)
        box = {}
        t = threading.Thread(target=lambda: box.update(r=client.acquire(
            name, "waiter", ttl_ms=60000, wait_ms=10000, request_id="w-1")))
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="the waiter queued")
        self.srv.release(name, first["lease"])
        t.join(15)
        st, _, got = box["r"]
        self.assertEqual(st, 200, got)
        st, _, again = self.acquire(name, owner="waiter", ttl_ms=60000, wait_ms=10000, request_id="w-1")
        self.assertEqual((st, again["lease"], again["token"]), (200, got["lease"], got["token"]), again)
        self.srv.release(name, got["lease"])

    def test_replay_after_kill_9(self):
        name = "retry/crash"
        st, _, g = self.acquire(name, ttl_ms=60000, request_id="before-crash")
        self.assertEqual(st, 200, g)
        self.srv.restart(kill9=True)
        st, _, again = self.acquire(name, ttl_ms=60000, request_id="before-crash")
        self.assertEqual((st, again["lease"], again["token"]), (200, g["lease"], g["token"]), again)
        self.srv.release(name, g["lease"])

    def test_a_replay_delivered_keeps_a_grant_whose_first_answer_was_not(self):
        """The first answer of a grant waits for its commit (a slow fsync); meanwhile its
        request_id's replay comes on another connection, and the first client hangs up.
        The grant is undone for an undelivered answer only when no other answer of it is
        delivered: before, the replay answered 200 with the lease while the hang-up released
        it (found by the nemesis suite: the next client got the lock as well)."""
        harness.sqlite_only(self, "a slow fsync holds the first answer")
        slow = os.path.join(tempfile.mkdtemp(prefix="leasegate-slow-"), "slow")
        self.addCleanup(shutil.rmtree, os.path.dirname(slow), True)
        env = harness.slow_disk_env(1500, only_if=slow)
        if env is None:
            self.skipTest("the slowsync library was not built")
        srv = harness.Server(extra_env=env)
        self.addCleanup(srv.cleanup)
        open(slow, "w").close()  # from now on every fsync takes 1.5 s longer
        name, body = "retry/replayed-while-held", {"owner": "retrier", "ttl_ms": 60000, "request_id": "r-held"}
        data = json.dumps(body).encode()
        first = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        first.sendall(b"POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (name.encode(), len(data), data))
        # The commit takes 1.5 s: the replay comes, and the first client goes, well within
        # it. (Not asked at /metrics: before the fix that answer, too, waited for the commit.)
        time.sleep(0.3)
        box = {}
        replay = threading.Thread(target=lambda: box.update(r=srv.new_client(timeout=30).acquire(name, **body)))
        replay.start()
        time.sleep(0.3)
        first.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        first.close()  # reset: its answer, when its commit is done, cannot be delivered
        replay.join(30)
        st, _, g = box["r"]
        self.assertEqual(st, 200, g)
        st, _, state = srv.get_lock(name)
        self.assertEqual((st, state["held"], (state["holder"] or {}).get("token")), (200, True, g["token"]), state)
        self.assertEqual(srv.metric("leasegate_acquire_replays_total"), 1)
        self.assertEqual(srv.metric("leasegate_undelivered_grants_total"), 0)
        st, _, r = srv.release(name, g["lease"])
        self.assertEqual(st, 200, r)

    def test_bad_request_ids_are_named(self):
        for bad in ("", "x" * 65, 7, None, ["a"], "tab\there"):
            st, _, b = self.acquire("retry/bad", request_id=bad)
            self.assertEqual((st, b.get("error")), (400, "bad_request"), (bad, b))
            self.assertIn("request_id", b.get("message", ""), (bad, b))
        st, _, b = self.acquire("retry/bad", request_id="x" * 64)
        self.assertEqual(st, 200, b)
        self.srv.release("retry/bad", b["lease"])


if __name__ == "__main__":
    unittest.main()
