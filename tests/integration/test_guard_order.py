"""The guard's promise, attacked: what the backend APPLIES, not what leasegate hands on.

Each test here is a story that broke an earlier guard: a write whose body stalls past
its lease, a backend that applies slowly, a client that leaves after its write went
upstream, a holder of one lock writing another lock's path, a token read from the public
lock state, non-canonical paths and smuggled headers, a wall clock that jumps, SIGTERM
while bodies trickle in. The backend is tests/integration/applying_upstream.py, which
records what it applies and in which order, and never applies an incomplete request.

Only 127.0.0.1; every wait is bounded; no timing assertions (order and outcomes only).
"""

import json
import os
import signal
import socket
import threading
import time
import unittest
import uuid

import harness
from applying_upstream import ApplyingUpstream

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def uid():
    return uuid.uuid4().hex[:10]


class RawPut:
    """A PUT through the guard on its own socket, sent in pieces."""

    def __init__(self, port, path, body, headers):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.body = body
        head = "PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n" % (path, len(body))
        for k, v in headers.items():
            head += "%s: %s\r\n" % (k, v)
        self.head = (head + "\r\n").encode("latin-1")

    def send_head_and(self, n):
        self.sock.sendall(self.head + self.body[:n])

    def send_rest(self, n):
        self.sock.sendall(self.body[n:])

    def response(self, timeout=15):
        st, hdrs, body = harness.read_response(self.sock, timeout)
        return st, hdrs, json.loads(body) if body.startswith(b"{") else body

    def close(self):
        self.sock.close()


class GuardOrderBase(unittest.TestCase):
    guard_suffix = ""
    extra_args = []

    def setUp(self):
        self.up = ApplyingUpstream()
        self.srv = harness.Server(extra_args=["--guard", "/store/=" + self.up.url + self.guard_suffix]
                                  + list(self.extra_args))

    def tearDown(self):
        self.srv.cleanup()
        self.up.close()

    def acquire(self, name, **kw):
        kw.setdefault("ttl_ms", 60000)
        st, _, b = self.srv.acquire(name, "o", **kw)
        self.assertEqual(st, 200, b)
        return b

    def put(self, path, data, lease, headers=None, client=None):
        h = {"Content-Type": "application/octet-stream", "Fencing-Lease": lease}
        h.update(headers or {})
        return (client or self.srv.client).request("PUT", path, raw=data, headers=h)

    def wait_lock_free_of(self, name, lease_holder_token):
        """Until the lock no longer has the holder with that token."""
        def gone():
            st, _, b = self.srv.get_lock(name)
            return st == 200 and (not b["held"] or b["holder"]["token"] != lease_holder_token)
        self.srv.wait_until(gone, timeout=10, what="lease of token %d to end" % lease_holder_token)


class StalledBodyTests(GuardOrderBase):
    def test_body_completed_after_the_lease_ended_is_never_applied(self):
        name = "slow/%s" % uid()
        a = self.acquire(name)
        body = b"A" * 4000
        w = RawPut(self.srv.port, "/store/" + name, body, {"Fencing-Lease": a["lease"]})
        try:
            w.send_head_and(2000)
            # The write is on its way upstream (streaming), but its end is held back.
            self.up.wait_for(lambda u: u.seen_for("/" + name), what="the write to reach the upstream")
            st, _, r = self.srv.renew(name, a["lease"], ttl_ms=100)
            self.assertEqual(st, 200, r)
            self.wait_lock_free_of(name, a["token"])
            w.send_rest(2000)
            st, hdrs, err = w.response()
        finally:
            w.close()
        self.assertEqual(st, 409, err)
        self.assertEqual(err["error"], "stale_token")
        self.assertIn("expired", err["message"])
        self.up.wait_for(lambda u: u.incomplete >= 1, what="the upstream to see the cut-off request")
        self.assertEqual(self.up.applied_to("/" + name), [])

    def test_stalled_writer_overtaken_by_the_next_holder(self):
        """Kleppmann's story: A pauses mid-write past its lease, B takes the lock and
        writes, A resumes. The backend must end with B's data, never A's after B's."""
        name = "story/%s" % uid()
        a = self.acquire(name)
        body_a = b"a" * 3000
        w = RawPut(self.srv.port, "/store/" + name, body_a, {"Fencing-Lease": a["lease"]})
        try:
            w.send_head_and(1500)
            self.up.wait_for(lambda u: u.seen_for("/" + name), what="A's write to reach the upstream")
            self.srv.renew(name, a["lease"], ttl_ms=100)
            b = self.acquire(name, wait_ms=10000)
            self.assertGreater(b["token"], a["token"])
            # B's write goes through while A is still stalled: A, which can no longer
            # pass, is refused at once instead of making B wait for it.
            st, hdrs, r = self.put("/store/" + name, b"B's data", b["lease"])
            self.assertIn(st, (201, 204), r)
            w.send_rest(1500)
            st, _, err = w.response()
        finally:
            w.close()
        self.assertEqual(st, 409, err)
        applied = self.up.applied_to("/" + name)
        self.assertEqual([x["body"] for x in applied], [b"B's data"])
        self.assertEqual(applied[0]["token"], str(b["token"]))

    def test_bodyless_write_is_checked_when_it_starts(self):
        name = "del/%s" % uid()
        a = self.acquire(name)
        self.srv.release(name, a["lease"])
        st, _, err = self.srv.request("DELETE", "/store/" + name, headers={"Fencing-Lease": a["lease"]})
        self.assertEqual(st, 409, err)
        self.assertIn("released", err["message"])
        self.assertEqual(self.up.seen_for("/" + name), [])


class SlowBackendTests(GuardOrderBase):
    def test_writes_are_applied_in_token_order_when_the_backend_is_slow(self):
        """A's write takes the backend 1.5 s to apply. B (next holder, larger token) writes
        meanwhile: B's write may only reach the backend after A's answer."""
        name = "slowdisk/%s" % uid()
        a = self.acquire(name)
        out = {}

        def write_a():
            c = self.srv.new_client()
            out["a"] = self.put("/store/" + name, b"A", a["lease"], {"X-Apply-Delay-Ms": "1500"}, client=c)
            c.close()

        ta = threading.Thread(target=write_a, daemon=True)
        ta.start()
        self.up.wait_for(lambda u: u.in_apply == 1, what="A's write to be applying")
        self.assertEqual(self.srv.release(name, a["lease"])[0], 200)
        b = self.acquire(name)
        st, _, r = self.put("/store/" + name, b"B", b["lease"])
        self.assertIn(st, (201, 204), r)
        ta.join(15)
        self.assertIn(out["a"][0], (201, 204), out["a"])
        applied = self.up.applied_to("/" + name)
        self.assertEqual([x["body"] for x in applied], [b"A", b"B"])
        self.assertEqual(self.up.objects["/" + name], b"B")
        self.assertEqual(self.up.max_in_apply, 1)

    def test_client_gone_after_its_write_went_upstream_still_holds_back_the_next(self):
        """A sends a whole write and hangs up before the (slow) answer. The backend still
        applies A's write; B's must come after it, not race it."""
        name = "gone/%s" % uid()
        a = self.acquire(name)
        w = RawPut(self.srv.port, "/store/" + name, b"A", {"Fencing-Lease": a["lease"],
                                                            "X-Apply-Delay-Ms": "1500"})
        w.send_head_and(1)
        self.up.wait_for(lambda u: u.in_apply == 1, what="A's write to be applying")
        w.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        w.close()  # RST: A is gone
        self.srv.release(name, a["lease"])
        b = self.acquire(name)
        st, _, r = self.put("/store/" + name, b"B", b["lease"])
        self.assertIn(st, (201, 204), r)
        applied = self.up.applied_to("/" + name)
        self.assertEqual([x["body"] for x in applied], [b"A", b"B"])
        self.assertEqual(self.up.objects["/" + name], b"B")


class NoFsyncForUpstreamAnswersTests(unittest.TestCase):
    def test_an_upstream_answer_does_not_wait_for_an_unrelated_commit(self):
        """A guarded read passes an upstream's answer, which reveals nothing of the lock
        state: it must not wait for the fsync of someone else's grant (each fsync takes
        1.5 s here). The read's answer arrives while that grant is still unanswered."""
        harness.sqlite_only(self, "slowsync slows the fsync of the SQLite file; nothing opens that window on etcd")
        import tempfile
        slow_flag = os.path.join(tempfile.mkdtemp(prefix="lg-slow-"), "slow")
        self.addCleanup(lambda: os.path.exists(slow_flag) and os.remove(slow_flag))
        env = harness.slow_disk_env(1500, only_if=slow_flag)
        if env is None:
            self.skipTest("tests/faults/slowsync was not built (LEASEGATE_SLOWSYNC unset)")
        with ApplyingUpstream() as up, harness.Server(extra_args=["--guard", "/store/=" + up.url],
                                                     extra_env=env) as srv:
            open(slow_flag, "w").close()  # start-up is done: every fsync is slow from now on
            grant = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
            body = json.dumps({"owner": "o", "ttl_ms": 60000}).encode()
            grant.sendall(b"POST /v1/locks/slow/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            # Asking the server would wait for the commit too: give the grant a moment
            # to be read (its commit then runs for 1.5 s).
            time.sleep(0.3)
            read = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
            read.sendall(b"GET /store/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            st, hdrs, _ = harness.read_response(read, 20)
            self.assertEqual((st, hdrs.get("x-upstream")), (404, "applying"))
            grant.setblocking(False)
            try:
                early = grant.recv(1)
            except BlockingIOError:
                early = None
            self.assertIsNone(early, "the grant was answered before the read: the read waited for its commit")
            grant.setblocking(True)
            self.assertEqual(harness.read_response(grant, 20)[0], 200)
            grant.close()
            read.close()


class BindingTests(GuardOrderBase):
    def test_a_lease_writes_only_the_path_of_its_lock(self):
        mine, other = "bind/%s/mine" % uid(), "bind/%s/other" % uid()
        a = self.acquire(mine)
        st, _, err = self.put("/store/" + other, b"x", a["lease"])
        self.assertEqual(st, 409, err)
        self.assertEqual(err["lock"], other)
        # Naming another lock does not help either.
        st, _, err = self.put("/store/" + mine, b"x", a["lease"], {"Fencing-Lock": other})
        self.assertEqual(st, 400, err)
        st, _, r = self.put("/store/" + mine, b"mine", a["lease"], {"Fencing-Lock": mine,
                                                                   "Fencing-Token": str(a["token"])})
        self.assertIn(st, (201, 204), r)
        self.assertEqual(self.up.seen_for("/" + other), [])
        seen = self.up.seen_for("/" + mine)[-1]["headers"]
        self.assertEqual(seen.get("fencing-token"), str(a["token"]))
        self.assertEqual(seen.get("fencing-lock"), mine)
        self.assertNotIn("fencing-lease", seen)

    def test_the_public_token_is_not_a_credential(self):
        name = "pub/%s" % uid()
        holder = self.acquire(name)
        st, _, state = self.srv.get_lock(name)
        token = state["holder"]["token"]
        self.assertEqual(token, holder["token"])
        st, _, err = self.srv.request("PUT", "/store/" + name, raw=b"forged",
                                      headers={"Fencing-Token": str(token), "Fencing-Lock": name})
        self.assertEqual(st, 428, err)
        st, _, err = self.put("/store/" + name, b"forged", str(uuid.uuid4()), {"Fencing-Token": str(token)})
        self.assertIn(st, (400, 409), err)
        self.assertEqual(self.up.seen_for("/" + name), [])

    def test_paths_that_cannot_name_a_lock_are_refused(self):
        a = self.acquire("ok/%s" % uid())
        for path in ("/store/a%20b", "/store/x/release", "/store/", "/store/" + "x" * 300):
            st, _, err = self.put(path, b"x", a["lease"])
            self.assertEqual(st, 400, (path, err))
        self.assertEqual(self.up.applied, [])


class FixedLockTests(GuardOrderBase):
    guard_suffix = ",lock=the-one-lock"

    def test_every_path_is_bound_to_the_one_lock(self):
        one = self.acquire("the-one-lock")
        other = self.acquire("another-%s" % uid())
        st, _, r = self.put("/store/any/path%20with%20spaces.txt", b"1", one["lease"])
        self.assertIn(st, (201, 204), r)
        st, _, err = self.put("/store/any/path.txt", b"2", other["lease"])
        self.assertEqual(st, 409, err)
        self.assertEqual(err["lock"], "the-one-lock")
        self.assertEqual([a["lock"] for a in self.up.applied], ["the-one-lock"])


class HygieneTests(GuardOrderBase):
    def raw(self, data):
        return harness.raw_http(self.srv.port, data)

    def test_non_canonical_targets_never_reach_the_upstream(self):
        a = self.acquire("canon")
        bad = ["/store/..;/canon", "/store/a%2F..%2F..%2Fetc", "/store/a\\b", "/store/%2e%2e/canon",
               "/store/a//canon", "/store/a/./canon", "/store/%41", "/store/a%00b", "/store/a;p=1",
               "/store/a%zz", "/store/a%2fb"]
        for target in bad:
            for method in ("GET", "PUT"):
                req = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\nContent-Length: 1\r\n\r\nx" % (
                    method, target, a["lease"])
                if method == "GET":
                    req = "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % target
                st, _, body = self.raw(req.encode())
                self.assertEqual(st, 400, (method, target, body))
        self.assertEqual(self.up.seen, [])

    def test_headers_named_in_connection_and_the_lease_are_not_forwarded(self):
        a = self.acquire("hop")
        st, _, r = self.put("/store/hop", b"x", a["lease"], {"Connection": "keep-alive, X-Private",
                                                             "X-Private": "secret", "X-Public": "ok",
                                                             "Fencing-Token": str(a["token"])})
        self.assertIn(st, (201, 204), r)
        seen = self.up.seen_for("/hop")[-1]["headers"]
        self.assertNotIn("x-private", seen)
        self.assertEqual(seen.get("x-public"), "ok")
        self.assertNotIn("fencing-lease", seen)
        # Reads pass unchecked, so they pass no lease and no unvouched token either.
        st, _, _ = self.srv.request("GET", "/store/hop", headers={"Fencing-Lease": a["lease"],
                                                                  "Fencing-Token": "99"})
        self.assertEqual(st, 200)
        seen = self.up.seen_for("/hop")[-1]["headers"]
        self.assertNotIn("fencing-lease", seen)
        self.assertNotIn("fencing-token", seen)

    def test_a_body_on_a_safe_method_is_refused_in_any_framing(self):
        for extra in ("Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
                      "Transfer-Encoding: chunked\r\n", "Content-Length: 3\r\n"):
            body = "0\r\n\r\n" if "chunked" in extra else ("abc" if "3" in extra else "")
            st, _, b = self.raw(("GET /store/safe HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n%s" % (extra, body)).encode())
            self.assertEqual(st, 400, (extra, b))
        self.assertEqual(self.up.seen, [])
        st, _, _ = self.raw(b"GET /store/safe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual(st, 404)  # passed through: the store has no such object

    def test_control_bytes_in_a_header_value_are_refused(self):
        a = self.acquire("ctl")
        st, _, b = self.raw(("PUT /store/ctl HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\nX-A: a\rb\r\n"
                             "Content-Length: 1\r\n\r\nx" % a["lease"]).encode())
        self.assertEqual(st, 400, b)
        self.assertEqual(self.up.seen, [])


class CallCapTests(GuardOrderBase):
    extra_args = ["--guard-max-calls", "2"]

    def test_calls_above_the_cap_get_503(self):
        locks = ["cap/%s/%d" % (uid(), i) for i in range(2)]
        grants = [self.acquire(n) for n in locks]
        out = {}

        def slow(i):
            c = self.srv.new_client()
            out[i] = self.put("/store/" + locks[i], b"x", grants[i]["lease"], {"X-Apply-Delay-Ms": "1500"}, client=c)
            c.close()

        threads = [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        self.up.wait_for(lambda u: u.in_apply == 2, what="two slow writes in flight")
        st, _, err = self.srv.request("GET", "/store/" + locks[0])
        self.assertEqual(st, 503, err)
        self.assertEqual(err["error"], "overloaded")
        for t in threads:
            t.join(15)
        self.assertTrue(all(out[i][0] in (201, 204) for i in range(2)), out)
        st, _, _ = self.srv.request("GET", "/store/" + locks[0])
        self.assertEqual(st, 200)


@unittest.skipUnless(os.path.exists(LIBFAKETIME), "libfaketime missing (apt-get install faketime)")
class WallClockStepTests(unittest.TestCase):
    """The server's wall clock jumps (an NTP step, an operator): expiry must not move."""

    def setUp(self):
        if os.environ.get("LEASEGATE_SANITIZED") == "1":
            self.skipTest("libfaketime and AddressSanitizer do not preload together (runs in the plain build)")
        self.up = ApplyingUpstream()
        self.srv = harness.Server(start=False)
        self.offset = os.path.join(self.srv.dir, "faketime")
        with open(self.offset, "w") as f:
            f.write("+0\n")
        self.env_before = {k: os.environ.get(k) for k in ("LD_PRELOAD", "FAKETIME_TIMESTAMP_FILE",
                                                          "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC")}
        os.environ.update({"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": self.offset,
                           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
        self.srv.extra_args = ["--guard", "/store/=" + self.up.url]

    def tearDown(self):
        for k, v in self.env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.srv.cleanup()
        self.up.close()

    def step(self, offset):
        with open(self.offset, "w") as f:
            f.write(offset + "\n")

    def test_guard_and_leases_ignore_a_wall_clock_step(self):
        self.srv.start()
        st, _, a = self.srv.acquire("clock", "o", ttl_ms=60000)
        self.assertEqual(st, 200, a)
        self.step("+1h")
        # An hour later by the wall clock, 0 s later in truth: still held, still writable.
        st, _, r = self.srv.request("PUT", "/store/clock", raw=b"x", headers={"Fencing-Lease": a["lease"]})
        self.assertIn(st, (201, 204), r)
        st, _, r = self.srv.renew("clock", a["lease"])
        self.assertEqual(st, 200, r)

    def test_a_lease_survives_a_restart_across_a_wall_clock_step(self):
        harness.sqlite_only(self, "on etcd a reloaded lease ends by the wall clock, as the gateways share no boot clock (store_etcd.c)")
        self.srv.start()
        st, _, a = self.srv.acquire("across", "o", ttl_ms=60000)
        self.assertEqual(st, 200, a)
        self.srv.stop_clean()
        self.step("+1h")
        self.srv.start()
        st, _, r = self.srv.renew("across", a["lease"])
        self.assertEqual(st, 200, r)


class SigtermWhileBodiesArriveTests(unittest.TestCase):
    """SIGTERM while hundreds of request bodies trickle in: the server must answer or
    close each, commit, and exit 0 (libmicrohttpd aborts if it stops with a suspended
    connection)."""

    def trickle_and_stop(self, make_request, srv):
        socks = []
        for i in range(400):
            s = socket.create_connection(("127.0.0.1", srv.port))
            head, body = make_request(i)
            s.sendall(head)
            socks.append([s, body])
        deadline = time.monotonic() + 20
        longest = max(len(b) for _, b in socks)
        killed = False
        try:
            # One byte per connection per round; 8 bodies end in each of the last
            # rounds, and SIGTERM comes 8 rounds before the end, so that requests
            # complete all through the server's stopping (the race this guards
            # against: a handler ran in the last libmicrohttpd pass and suspended
            # its reply, and libmicrohttpd aborted when it stopped).
            for rnd in range(longest):
                if time.monotonic() > deadline:
                    break
                for pair in socks:
                    if pair[1]:
                        try:
                            pair[0].send(pair[1][:1])
                            pair[1] = pair[1][1:]
                        except OSError:
                            pair[1] = b""
                if rnd == longest - 8:
                    os.kill(srv.pid, signal.SIGTERM)
                    killed = True
                time.sleep(0.002)
            rc = srv.proc.wait(30)
        finally:
            for s, _ in socks:
                s.close()
        self.assertTrue(killed)
        self.assertEqual(rc, 0, srv.stderr_text()[-2000:])

    def test_api_bodies(self):
        for _ in range(8):
            with harness.Server() as srv:
                def make(i):
                    body = json.dumps({"owner": "o" * (20 + i % 50), "ttl_ms": 60000}).encode()
                    return (("POST /v1/locks/t%d/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             "Content-Length: %d\r\n\r\n" % (i, len(body))).encode(), body)
                self.trickle_and_stop(make, srv)

    def test_guarded_bodies(self):
        with ApplyingUpstream() as up:
            for _ in range(3):
                with harness.Server(extra_args=["--guard", "/store/=" + up.url]) as srv:
                    leases = [srv.acquire("g%d" % i, "o", ttl_ms=60000)[2]["lease"] for i in range(400)]

                    def make(i):
                        body = b"b" * (60 + i % 50)
                        return (("PUT /store/g%d HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\n"
                                 "Content-Length: %d\r\n\r\n" % (i, leases[i], len(body))).encode(), body)
                    self.trickle_and_stop(make, srv)


if __name__ == "__main__":
    harness.run_tests()
