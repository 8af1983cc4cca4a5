"""Guard proxy: fenced writes through leasegate to a real nginx WebDAV store.

`leasegate serve --guard PREFIX=UPSTREAM[,lock=NAME]` forwards PREFIX/... to
UPSTREAM/.... Every path under PREFIX is bound to one lock: the path below PREFIX
without the query (/store/reports/q3.csv -> lock reports/q3.csv), or NAME for the
whole route. GET, HEAD and OPTIONS pass unchecked (never with a body); every other
method must carry the lease (the secret from acquire) that holds the bound lock in
Fencing-Lease (missing or not a lease id: 428), and its token must not be below the
highest token already let through for that lock (else 409). Fencing-Token and
Fencing-Lock are optional; when sent they must be the lease's token and the bound
lock (else 400). The upstream never sees Fencing-Lease; the guard sets Fencing-Token
and Fencing-Lock itself. Only canonical targets and header values without control
bytes are forwarded (else 400).

Needs nginx with the DAV module (Debian: nginx-light) at /usr/sbin/nginx, or
$LEASEGATE_NGINX. Covers: the paused-client story with real SIGSTOPped processes,
mutual exclusion across 8 client processes, 428/409/400 checks (and that the upstream
never sees a refused request, nor any lease), path-bound and route-bound locks,
canonical targets, framing and header checks, unchanged pass-through of statuses,
end-to-end headers, bodies and query strings (hop-by-hop headers, also those a
Connection header names, dropped both ways), writes of one lock going upstream one
at a time, --guard-max-calls, 50 MiB bodies streamed in bounded memory, 502/504,
durability of the forwarded-token mark across restart and kill -9, and the guard's
/metrics counters.
"""

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import uuid

import harness
import upstream

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_SCRIPT = os.path.join(HERE, "guard_client.py")
SANITIZED = os.environ.get("LEASEGATE_SANITIZED") == "1"
GUARD_COUNTERS = ("leasegate_guard_forwarded_total", "leasegate_guard_rejected_stale_total",
                  "leasegate_guard_rejected_missing_total", "leasegate_guard_upstream_errors_total")
MIB = 1024 * 1024


def require_nginx():
    if not upstream.nginx_available():
        raise RuntimeError("test_guard needs nginx with the DAV module at %s "
                           "(Debian: apt-get install nginx-light)" % upstream.NGINX_BIN)


def uid():
    return uuid.uuid4().hex[:12]


def metric_sums(text):
    """Sum of every sample per metric name (labels, if any, summed over)."""
    sums = {}
    for key, value in harness.parse_metrics(text).items():
        name = key.split("{", 1)[0]
        sums[name] = sums.get(name, 0.0) + value
    return sums


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class GuardBase(unittest.TestCase):
    """One nginx per class; a fresh leasegate per test guarding /store/ -> nginx."""

    extra_args = []
    # The folder of nginx's tree that /store/ reaches ("" for all of it). Classes
    # with more routes on the same nginx give each its own folder: routes that
    # reach the same objects under different bindings do not start.
    STORE = ""

    @classmethod
    def setUpClass(cls):
        require_nginx()
        cls.ng = upstream.Nginx()

    @classmethod
    def tearDownClass(cls):
        cls.ng.cleanup()

    def setUp(self):
        self.srv = harness.Server(extra_args=self.guard_args() + list(self.extra_args))

    def tearDown(self):
        try:
            # Whatever a test sent, no lease ever reached the upstream.
            leaked = [e for e in self.ng.access_entries() if e["lease"] != "-"]
            self.assertEqual(leaked, [], "nginx received a Fencing-Lease header")
        finally:
            self.srv.cleanup()

    # WebDAV methods beyond the default list, so that the tests can show that every
    # write method needs a lease.
    METHODS = ",methods=GET+HEAD+OPTIONS+PUT+POST+PATCH+DELETE+MKCOL+PROPPATCH"

    def guard_args(self):
        return ["--guard", "/store/=" + self.ng.url + self.STORE + self.METHODS]

    # Requests through the guard ---------------------------------------------
    def send(self, method, path, data=None, lease=None, headers=None, client=None):
        """(status, headers, parsed body) through leasegate; raw bytes in client.last_raw.
        lease goes into Fencing-Lease; headers may add Fencing-Token / Fencing-Lock."""
        h = {"Content-Type": "application/octet-stream"}
        if lease is not None:
            h["Fencing-Lease"] = lease
        if headers:
            h.update(headers)
        return (client or self.srv.client).request(method, path, raw=data, headers=h)

    def acquire_ok(self, name, owner="g", **kw):
        kw.setdefault("ttl_ms", 60000)
        st, _, b = self.srv.acquire(name, owner, **kw)
        self.assertEqual(st, 200, b)
        return b

    @staticmethod
    def obj(stem):
        """A fresh object name, which is also the name of the lock that guards it."""
        name = "%s-%s/obj" % (stem, uid())
        return name, "/store/" + name

    # Assertions ---------------------------------------------------------------
    def assert_json_error(self, st, hdrs, body, status, error):
        self.assertEqual(st, status, body)
        self.assertIn("application/json", hdrs.get("content-type", ""), hdrs)
        self.assertIsInstance(body, dict, body)
        self.assertEqual(body.get("error"), error, body)
        self.assertIsInstance(body.get("message"), str, body)

    def assert_token_required(self, resp):
        st, hdrs, body = resp
        self.assert_json_error(st, hdrs, body, 428, "token_required")
        self.assertNotEqual(hdrs.get("x-upstream"), "nginx", "428 must come from leasegate")

    def assert_bad_request(self, resp):
        st, hdrs, body = resp
        self.assert_json_error(st, hdrs, body, 400, "bad_request")
        self.assertNotEqual(hdrs.get("x-upstream"), "nginx", "400 must come from leasegate")

    def assert_stale(self, resp, lock, token, max_token=None, holder_token="any"):
        """409 stale_token for `lock`; token is the lease's token (also once it ended,
        while the lease history remembers it), None when the lease was never one of
        this lock's (never issued, or another lock's lease)."""
        st, hdrs, body = resp
        self.assert_json_error(st, hdrs, body, 409, "stale_token")
        self.assertNotEqual(hdrs.get("x-upstream"), "nginx", "409 must come from leasegate")
        self.assertEqual(body.get("lock"), lock, body)
        self.assertIn("token", body)
        self.assertEqual(body["token"], token, body)
        self.assertIn("max_token", body)
        self.assertIsInstance(body["max_token"], int, body)
        if max_token is not None:
            self.assertEqual(body["max_token"], max_token, body)
        self.assertIn("holder_token", body)
        if holder_token != "any":
            self.assertEqual(body["holder_token"], holder_token, body)
        return body

    def assert_written(self, resp, expect=(201, 204)):
        st, hdrs, body = resp
        self.assertIn(st, expect, body)
        self.assertEqual(hdrs.get("x-upstream"), "nginx", hdrs)

    def complete_log(self):
        """nginx's access log, complete up to now: a sentinel GET through the guard is
        logged after everything sent before it."""
        sentinel = "/store/__sentinel__/" + uid()
        st, _, _ = self.send("GET", sentinel)
        self.assertEqual(st, 404)
        return self.ng.wait_logged(lambda e: e["request_uri"] == "/" + self.STORE + sentinel[len("/store/"):],
                                   what="sentinel " + sentinel)

    def assert_never_forwarded(self, marker):
        """No request whose URI (path or query) contains marker reached nginx."""
        seen = [e for e in self.complete_log() if marker in e["request_uri"]]
        self.assertEqual(seen, [], "nginx saw requests the guard should have rejected")

    def logged(self, uri):
        return [e for e in self.complete_log() if e["request_uri"] == uri]


# ----------------------------------------------------------------------------
class GuardStoryTests(GuardBase):
    """The README story with real processes, and mutual exclusion end to end."""

    def _spawn(self, *args):
        return subprocess.Popen([sys.executable, "-B", CLIENT_SCRIPT] + [str(a) for a in args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=HERE)

    @staticmethod
    def _read_event(proc, timeout=15.0):
        box = []
        t = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not box or not box[0]:
            raise AssertionError("client process gave no line in %.0f s (rc=%r)" % (timeout, proc.poll()))
        return json.loads(box[0].decode("utf-8"))

    @staticmethod
    def _reap(proc):
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for f in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if f:
                    f.close()
            except OSError:
                pass

    def test_stalled_client_is_fenced_off(self):
        # The object's path names its lock: /store/<lock> is bound to <lock>.
        lock = "story-%s/report.txt" % uid()
        path = "/store/" + lock
        a = self._spawn("stall", self.srv.port, lock, path)
        try:
            ready = self._read_event(a)
            self.assertEqual(ready["event"], "ready", ready)
            self.assertEqual(ready["put_status"], 201, ready)
            self.assertEqual(self.ng.read_file(lock), b"A1")
            # A pauses for real (GC pause, VM migration...) while holding its lease.
            os.kill(a.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            # B long-polls; it gets the lock once A's 300 ms lease has run out.
            b = self.acquire_ok(lock, "client-B", ttl_ms=60000, wait_ms=5000)
            self.assertGreater(b["token"], ready["token"])
            time.sleep(max(0.0, 0.6 - (time.monotonic() - t0)))
            self.assert_written(self.send("PUT", path, b"B", b["lease"]))
            self.assertEqual(self.ng.read_file(lock), b"B")
            # A wakes up and, unaware, writes with its old lease.
            os.kill(a.pid, signal.SIGCONT)
            a.stdin.write(b"go\n")
            a.stdin.flush()
            late = self._read_event(a)
            self.assertEqual(late["event"], "late", late)
            self.assertEqual(late["status"], 409, late)
            self.assertIn("application/json", late["content_type"])
            body = late["body"]
            self.assertEqual(body["error"], "stale_token", body)
            self.assertEqual(body["lock"], lock, body)
            # A's lease holds nothing any more: the answer names the token it had, and why.
            self.assertEqual((body["token"], body["reason"]), (ready["token"], "superseded"), body)
            self.assertEqual(body["max_token"], b["token"], body)
            self.assertEqual(body["holder_token"], b["token"], body)
            self.assertEqual(a.wait(10), 0, a.stderr.read().decode("utf-8", "replace"))
        finally:
            self._reap(a)
        # The store holds B's write, read directly and through the guard.
        self.assertEqual(self.ng.get("/" + lock), b"B")
        self.assertEqual(self.ng.read_file(lock), b"B")
        st, _, _ = self.send("GET", path)
        self.assertEqual((st, self.srv.client.last_raw), (200, b"B"))
        # nginx saw exactly two PUTs, carrying A's and B's tokens as set by the guard,
        # and never a lease.
        puts = [e for e in self.logged("/" + lock) if e["method"] == "PUT"]
        self.assertEqual([(e["token"], e["lock"], e["lease"]) for e in puts],
                         [(str(ready["token"]), lock, "-"), (str(b["token"]), lock, "-")])
        # A's lease is gone for good.
        st, _, r = self.srv.renew(lock, ready["lease"])
        self.assertEqual((st, r.get("reason")), (409, "superseded"), r)

    def test_mutual_exclusion_counter(self):
        nproc, iters = 8, 100
        lock = "counter-%s/counter" % uid()
        path = "/store/" + lock
        g = self.acquire_ok(lock, "init")
        self.assert_written(self.send("PUT", path, b"0", g["lease"]), expect=(201,))
        st, _, r = self.srv.release(lock, g["lease"])
        self.assertEqual(st, 200, r)
        procs = [self._spawn("counter", self.srv.port, lock, path, iters, "worker-%d" % i)
                 for i in range(nproc)]
        results = []
        try:
            deadline = time.monotonic() + 150
            for p in procs:
                try:
                    out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.fail("a counter client did not finish within 150 s")
                lines = [json.loads(x) for x in out.decode("utf-8").splitlines() if x.strip()]
                self.assertEqual(p.returncode, 0, (lines[-1:], err.decode("utf-8", "replace")[-2000:]))
                results.append(lines[-1])
        finally:
            for p in procs:
                self._reap(p)
        self.assertTrue(all(r["event"] == "done" for r in results), results)
        tokens = sorted(t for r in results for t in r["tokens"])
        self.assertEqual(len(tokens), nproc * iters)
        self.assertEqual(len(set(tokens)), nproc * iters, "a token was granted twice")
        self.assertEqual(self.ng.read_file(lock), str(nproc * iters).encode())
        st, _, _ = self.send("GET", path)
        self.assertEqual((st, self.srv.client.last_raw), (200, str(nproc * iters).encode()))
        puts = [e for e in self.logged("/" + lock) if e["method"] == "PUT"]
        self.assertEqual(len(puts), nproc * iters + 1)
        # In the order nginx applied them, the writes carry growing tokens.
        applied = [int(e["token"]) for e in puts]
        self.assertEqual(applied, sorted(applied))


# ----------------------------------------------------------------------------
class GuardCheckTests(GuardBase):
    """Which requests are forwarded, which are refused, and the upstream never sees the latter."""

    def test_missing_lease_428(self):
        lock = "chk/missing-%s" % uid()
        path = "/store/" + lock
        g = self.acquire_ok(lock)
        marker = "rej-missing-" + uid()
        # The token is public (GET /v1/locks/{name} shows it): it proves nothing alone,
        # and neither do the lock's name or the headers of the old contract.
        cases = [
            ("PUT", {}),
            ("PUT", {"Fencing-Token": str(g["token"])}),
            ("PUT", {"Fencing-Lock": lock}),
            ("PUT", {"Fencing-Token": str(g["token"]), "Fencing-Lock": lock}),
            ("POST", {}),
            ("DELETE", {}),
            ("PATCH", {"Fencing-Lock": lock}),
            ("MKCOL", {}),
            ("PROPPATCH", {"Fencing-Token": str(g["token"])}),
        ]
        for i, (method, hdrs) in enumerate(cases):
            with self.subTest(method=method, headers=hdrs):
                resp = self.send(method, "%s?%s=%d" % (path, marker, i), b"data", headers=hdrs)
                self.assert_token_required(resp)
        self.assertIsNone(self.ng.read_file(lock))
        self.assert_never_forwarded(marker)
        # The same write with the lease goes through.
        self.assert_written(self.send("PUT", path, b"data", g["lease"]), expect=(201,))
        self.assertEqual(self.ng.read_file(lock), b"data")

    def test_malformed_lease_428(self):
        lock = "chk/malformed-%s" % uid()
        path = "/store/" + lock
        g = self.acquire_ok(lock)
        lease = g["lease"]
        marker = "rej-malformed-" + uid()
        bad = ["abc", "", str(g["token"]), lease[:-1], lease + "0", lease.replace("-", ""),
               "{%s}" % lease, lease[:-1] + "g", "%s,%s" % (lease, lease), "urn:uuid:" + lease,
               lease.replace("-", "_")]
        for i, value in enumerate(bad):
            with self.subTest(lease=value):
                # The right token and lock alongside do not make up for it.
                resp = self.send("PUT", "%s?%s=%d" % (path, marker, i), b"x", value,
                                 headers={"Fencing-Token": str(g["token"]), "Fencing-Lock": lock})
                self.assert_token_required(resp)
        self.assertIsNone(self.ng.read_file(lock))
        self.assert_never_forwarded(marker)

    def test_fencing_token_is_optional_but_must_match(self):
        lock = "chk/token-%s" % uid()
        path = "/store/" + lock
        g = self.acquire_ok(lock)
        tok = g["token"]
        marker = "rej-token-" + uid()
        bad = ["abc", "-1", "", "0", "1.5", "12abc", "0x10", "1e3", "%d %d" % (tok, tok), str(tok) + "abc",
               "-" + str(tok), str(tok + 1), str(tok - 1), "18446744073709551617", "99999999999999999999999999"]
        for i, value in enumerate(bad):
            with self.subTest(token=value):
                self.assert_bad_request(self.send("PUT", "%s?%s=%d" % (path, marker, i), b"x", g["lease"],
                                                  headers={"Fencing-Token": value}))
        self.assertIsNone(self.ng.read_file(lock))
        self.assert_never_forwarded(marker)
        # Without it, and with the lease's own token, the write goes through; either way
        # the upstream sees the token the guard set.
        self.assert_written(self.send("PUT", path, b"1", g["lease"]), expect=(201,))
        self.assert_written(self.send("PUT", path, b"2", g["lease"], headers={"Fencing-Token": str(tok)}),
                            expect=(204,))
        self.assertEqual(self.ng.read_file(lock), b"2")
        self.assertEqual([(e["method"], e["token"], e["lock"]) for e in self.logged("/" + lock)],
                         [("PUT", str(tok), lock)] * 2)

    def test_lease_of_another_lock_409_and_other_lock_named_400(self):
        lx, ly = "chk/x-" + uid(), "chk/y-" + uid()
        gx = self.acquire_ok(lx)
        gy = self.acquire_ok(ly)
        self.assertNotEqual(gx["token"], gy["token"])
        marker = "rej-wronglock-" + uid()
        # A lease proves only the lock it holds: on another lock's path it holds nothing.
        self.assert_stale(self.send("PUT", "/store/%s?%s=a" % (ly, marker), b"x", gx["lease"]),
                          ly, None, holder_token=gy["token"])
        self.assert_stale(self.send("DELETE", "/store/%s?%s=b" % (lx, marker), None, gy["lease"]),
                          lx, None, holder_token=gx["token"])
        # Naming its own token (or lock) as well changes nothing.
        self.assert_stale(self.send("PUT", "/store/%s?%s=c" % (ly, marker), b"x", gx["lease"],
                                    headers={"Fencing-Token": str(gx["token"])}),
                          ly, None, holder_token=gy["token"])
        # A lock nobody ever held: no holder.
        nobody = "chk/nobody-" + uid()
        self.assert_stale(self.send("PUT", "/store/%s?%s=d" % (nobody, marker), b"x", gx["lease"]),
                          nobody, None, holder_token=None)
        # Fencing-Lock naming another lock than the one the path is bound to: 400, even
        # with the lease that holds the path's lock.
        for i, named in enumerate((ly, lx + "/", lx.upper(), "other")):
            with self.subTest(named=named):
                resp = self.send("PUT", "/store/%s?%s=e%d" % (lx, marker, i), b"x", gx["lease"],
                                 headers={"Fencing-Lock": named})
                self.assert_bad_request(resp)
        self.assert_never_forwarded(marker)
        # With the right pairing both go through; naming the bound lock is fine.
        self.assert_written(self.send("PUT", "/store/" + lx, b"x", gx["lease"], headers={"Fencing-Lock": lx}))
        self.assert_written(self.send("PUT", "/store/" + ly, b"y", gy["lease"]))
        self.assertEqual((self.ng.read_file(lx), self.ng.read_file(ly)), (b"x", b"y"))

    def test_expired_released_and_unknown_lease_409(self):
        lock = "chk/exp-" + uid()
        path = "/store/" + lock
        marker = "rej-expired-" + uid()
        g = self.acquire_ok(lock, ttl_ms=60000)
        self.assert_written(self.send("PUT", path, b"1", g["lease"]))
        # The short lease starts only now: a slow commit cannot expire it before the PUT.
        st, _, r = self.srv.renew(lock, g["lease"], ttl_ms=150)
        self.assertEqual(st, 200, r)
        time.sleep(0.4)
        self.assert_stale(self.send("PUT", "%s?%s=a" % (path, marker), b"2", g["lease"]),
                          lock, g["token"], max_token=g["token"], holder_token=None)
        g2 = self.acquire_ok(lock)
        st, _, r = self.srv.release(lock, g2["lease"])
        self.assertEqual(st, 200, r)
        self.assert_stale(self.send("PUT", "%s?%s=b" % (path, marker), b"3", g2["lease"]),
                          lock, g2["token"], max_token=g["token"], holder_token=None)
        # A well-formed lease this server never issued, with the lock free and held.
        self.assert_stale(self.send("PUT", "%s?%s=c" % (path, marker), b"4", harness.random_lease()),
                          lock, None, max_token=g["token"], holder_token=None)
        g3 = self.acquire_ok(lock)
        self.assert_stale(self.send("PUT", "%s?%s=d" % (path, marker), b"5", harness.random_lease()),
                          lock, None, max_token=g["token"], holder_token=g3["token"])
        self.assert_never_forwarded(marker)
        self.assertEqual(self.ng.read_file(lock), b"1")

    def test_lower_token_after_higher_forwarded_409(self):
        lock = "chk/low-%s/obj" % uid()
        path = "/store/" + lock
        a = self.acquire_ok(lock, "a", ttl_ms=60000)
        self.assert_written(self.send("PUT", path, b"A", a["lease"]), expect=(201,))
        st, _, r = self.srv.renew(lock, a["lease"], ttl_ms=200)  # a's lease runs out soon after
        self.assertEqual(st, 200, r)
        b = self.acquire_ok(lock, "b", ttl_ms=60000, wait_ms=5000)
        self.assertGreater(b["token"], a["token"])
        self.assert_written(self.send("PUT", path, b"B", b["lease"]), expect=(204,))
        for method, data in (("PUT", b"A2"), ("DELETE", None), ("POST", b"A3")):
            with self.subTest(method=method):
                self.assert_stale(self.send(method, path, data, a["lease"]),
                                  lock, a["token"], max_token=b["token"], holder_token=b["token"])
        self.assertEqual(self.ng.read_file(lock), b"B")
        st, _, r = self.srv.release(lock, b["lease"])
        self.assertEqual(st, 200, r)
        self.assert_stale(self.send("PUT", path, b"A4", a["lease"]),
                          lock, a["token"], max_token=b["token"], holder_token=None)
        self.assertEqual(self.ng.read_file(lock), b"B")
        # Exactly the two accepted PUTs reached nginx, in token order.
        self.assertEqual([(e["method"], e["token"]) for e in self.logged("/" + lock)],
                         [("PUT", str(a["token"])), ("PUT", str(b["token"]))])

    def test_accepted_writes_forwarded_with_headers(self):
        base = "fwd-%s" % uid()
        lock = base + "/deep/dir/f.bin"
        path = "/store/" + lock
        g = self.acquire_ok(lock)
        # Create, overwrite, read back, delete, delete again (nginx's 404 comes back).
        body = bytes(range(256)) * 64 + b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"
        self.assert_written(self.send("PUT", path, body, g["lease"]), expect=(201,))
        self.assertEqual(self.ng.read_file(lock), body)
        self.assert_written(self.send("PUT", path, b"v2", g["lease"]), expect=(204,))
        st, _, _ = self.send("GET", path)
        self.assertEqual((st, self.srv.client.last_raw), (200, b"v2"))
        self.assert_written(self.send("DELETE", path, None, g["lease"]), expect=(204,))
        self.assertIsNone(self.ng.read_file(lock))
        st, hdrs, _ = self.send("DELETE", path, None, g["lease"])
        self.assertEqual((st, hdrs.get("x-upstream")), (404, "nginx"))
        # A collection's path ends in "/", and a collection holds paths other locks
        # protect: where each path has its own lock, no write goes to one.
        dlock = base + "/newdir/"
        gd = self.acquire_ok(dlock)
        st, _, body = self.send("MKCOL", "/store/" + dlock, None, gd["lease"])
        self.assertEqual((st, body.get("field")), (400, "path"), body)
        self.assertFalse(os.path.isdir(self.ng.file_path(base + "/newdir")))
        # The upstream sees Fencing-Token and Fencing-Lock as the guard sets them, never
        # Fencing-Lease (nginx echoes them). The query is not part of the lock's name.
        ge = self.acquire_ok("echo")
        st, hdrs, _ = self.send("POST", "/store/echo?x=1&y=two", b"payload", ge["lease"],
                                headers={"X-Custom": "kept", "Fencing-Token": str(ge["token"]),
                                         "Fencing-Lock": "echo"})
        text = self.srv.client.last_text
        self.assertEqual(st, 200, text)
        self.assertIn("method=POST uri=/echo?x=1&y=two args=x=1&y=two", text)
        self.assertIn("token=%d lock=echo lease= custom=kept" % ge["token"], text)
        self.assertNotIn(ge["lease"], text)
        self.assertEqual((hdrs.get("x-seen-token"), hdrs.get("x-seen-lock"), hdrs.get("x-seen-lease")),
                         (str(ge["token"]), "echo", None))
        puts = [e for e in self.logged("/" + lock) if e["method"] == "PUT"]
        self.assertEqual([(e["token"], e["lock"], e["lease"]) for e in puts], [(str(g["token"]), lock, "-")] * 2)
        self.assertEqual(self.logged("/" + dlock), [])

    def test_hop_by_hop_and_connection_named_headers_dropped(self):
        ge = self.acquire_ok("echo")
        for method, lease in (("POST", ge["lease"]), ("GET", None)):
            with self.subTest(method=method):
                st, _, _ = self.send(method, "/store/echo", b"x" if lease else None, lease,
                                     headers={"X-Custom": "dropped", "X-Other": "kept",
                                              "Connection": "keep-alive, X-Custom"})
                text = self.srv.client.last_text
                self.assertEqual(st, 200, text)
                self.assertIn("custom= other=kept", text)

    def test_connection_named_answer_headers_dropped(self):
        """A header the upstream's Connection header names is of the upstream's hop only:
        the client never gets it, although it comes before the Connection header."""
        dst, dh, dbody = self.ng.request("GET", "/hop")
        self.assertEqual((dst, dh.get("x-internal"), dbody), (200, "1", b"hop\n"))  # nginx does send it
        st, h, _ = self.send("GET", "/store/hop")
        self.assertEqual((st, self.srv.client.last_raw, h.get("x-upstream")), (200, b"hop\n", "nginx"))
        self.assertNotIn("x-internal", h)
        self.assertNotIn("x-internal", h.get("connection", "").lower())

    def test_percent_encoded_path(self):
        """A percent-encoded path is read through the guard, but it cannot name a lock:
        writing to it needs a route with its own lock (GuardFixedLockTests)."""
        d = "pct-" + uid()
        self.ng.put("/%s/sp%%20ace.txt" % d, b"spaced")
        self.assertEqual(self.ng.read_file(d + "/sp ace.txt"), b"spaced")
        st, _, _ = self.send("GET", "/store/%s/sp%%20ace.txt" % d)
        self.assertEqual((st, self.srv.client.last_raw), (200, b"spaced"))
        g = self.acquire_ok(d + "/sp-ace.txt")
        self.assert_bad_request(self.send("PUT", "/store/%s/sp%%20ace.txt" % d, b"other", g["lease"]))
        self.assertEqual(self.ng.read_file(d + "/sp ace.txt"), b"spaced")

    def test_path_that_cannot_name_a_lock_refused_for_writes(self):
        g = self.acquire_ok("chk/any-" + uid())
        marker = "rej-noname-" + uid()
        for rest in ("", "sp%20ace", "a!b", "a@b", "a$b", "a+b", "a=b", "a,b", "x/acquire", "renew",
                     "x/y/release", "a" * 257):
            with self.subTest(path=rest[:40]):
                target = "/store/%s?%s" % (rest, marker)
                self.assert_bad_request(self.send("PUT", target, b"x", g["lease"]))
                self.assert_bad_request(self.send("DELETE", target, None, g["lease"]))
                # Reads of such a path pass (nginx answers).
                st, h, _ = self.send("GET", "/store/" + rest)
                self.assertEqual(h.get("x-upstream"), "nginx", (st, h))
        self.assert_never_forwarded(marker)
        # 256 bytes is still a lock name (in segments: nginx stores each as a file name).
        longest = "/".join(["len-" + uid()] + ["x" * 79] * 3)
        self.assertEqual(len(longest), 256)
        gl = self.acquire_ok(longest)
        self.assert_written(self.send("PUT", "/store/" + longest, b"long", gl["lease"]), expect=(201,))

    def test_safe_methods_pass_without_headers(self):
        d = "safe-" + uid()
        self.ng.put("/%s/f.txt" % d, b"hello safe")
        # GET, also with garbage Fencing-* headers: no checks at all.
        for hdrs in ({}, {"Fencing-Token": "abc"}, {"Fencing-Token": "1", "Fencing-Lock": "nobody/x"},
                     {"Fencing-Lease": "not-a-lease"}, {"Fencing-Lease": harness.random_lease()}):
            with self.subTest(headers=hdrs):
                st, h, _ = self.send("GET", "/store/%s/f.txt" % d, headers=hdrs)
                self.assertEqual((st, self.srv.client.last_raw), (200, b"hello safe"))
                self.assertEqual(h.get("x-upstream"), "nginx")
        # A read reaches the upstream without any Fencing-* header: a client cannot
        # forge the ones the guard sets on writes, nor pass a lease on.
        ge = self.acquire_ok("echo")
        for method in ("GET", "OPTIONS"):
            with self.subTest(method=method):
                st, h, _ = self.send(method, "/store/echo", headers={
                    "Fencing-Token": str(ge["token"]), "Fencing-Lock": "echo", "Fencing-Lease": ge["lease"]})
                self.assertEqual(st, 200, self.srv.client.last_text)
                self.assertIn("token= lock= lease= custom=", self.srv.client.last_text)
                self.assertEqual((h.get("x-seen-token"), h.get("x-seen-lock"), h.get("x-seen-lease")),
                                 (None, None, None))
        # HEAD: nginx's headers, no body, and the connection stays usable.
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        try:
            conn.request("HEAD", "/store/%s/f.txt" % d)
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.read(), b"")
            self.assertEqual(resp.getheader("X-Upstream"), "nginx")
            self.assertEqual(resp.getheader("Content-Length"), "10")
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            resp.read()
        finally:
            conn.close()
        # OPTIONS: whatever nginx answers directly, unchecked.
        dst, dh, dbody = self.ng.request("OPTIONS", "/%s/f.txt" % d)
        st, h, _ = self.send("OPTIONS", "/store/%s/f.txt" % d)
        self.assertEqual(st, dst)
        self.assertEqual(h.get("x-upstream"), "nginx")
        self.assertEqual(self.srv.client.last_raw, dbody)
        self.assertEqual(self.ng.read_file(d + "/f.txt"), b"hello safe")

    def test_upstream_answers_pass_back_unchanged(self):
        d = "pass-" + uid()
        self.ng.put("/%s/f.txt" % d, b"0123456789abcdef")
        # A file: body and headers as nginx sends them.
        dst, dh, dbody = self.ng.request("GET", "/%s/f.txt" % d)
        st, h, _ = self.send("GET", "/store/%s/f.txt" % d)
        self.assertEqual((st, self.srv.client.last_raw), (dst, dbody))
        for name in ("etag", "last-modified", "content-type", "x-upstream", "accept-ranges"):
            self.assertEqual(h.get(name), dh.get(name), name)
        etag = dh["etag"]
        # 404 with nginx's own HTML body.
        nst, nh, nbody = self.ng.request("GET", "/%s/missing" % d)
        st, h, _ = self.send("GET", "/store/%s/missing" % d)
        self.assertEqual(st, 404)
        self.assertEqual(self.srv.client.last_raw, nbody)
        self.assertIn(b"nginx", self.srv.client.last_raw)
        self.assertEqual((h.get("x-upstream"), h.get("content-type")), ("nginx", nh.get("content-type")))
        # Unusual statuses, custom headers, upstream errors: passed, not translated.
        st, h, _ = self.send("GET", "/store/teapot")
        self.assertEqual((st, h.get("x-teapot"), self.srv.client.last_raw),
                         (418, "short and stout", b"I'm a teapot\n"))
        st, h, _ = self.send("GET", "/store/fail")
        self.assertEqual((st, h.get("x-upstream"), self.srv.client.last_raw),
                         (503, "nginx", b"upstream says no\n"))
        st, h, _ = self.send("GET", "/store/redirect")       # not followed
        self.assertEqual((st, h.get("location")), (302, "/elsewhere"))
        # Request headers are forwarded: Range -> 206, If-None-Match -> 304 (no body).
        st, h, _ = self.send("GET", "/store/%s/f.txt" % d, headers={"Range": "bytes=2-5"})
        self.assertEqual((st, self.srv.client.last_raw, h.get("content-range")),
                         (206, b"2345", "bytes 2-5/16"))
        st, h, _ = self.send("GET", "/store/%s/f.txt" % d, headers={"If-None-Match": etag})
        self.assertEqual((st, self.srv.client.last_raw), (304, b""))
        st, _, _ = self.send("GET", "/store/%s/f.txt" % d)    # same connection still fine
        self.assertEqual((st, self.srv.client.last_raw), (200, b"0123456789abcdef"))

    # Headers a proxy may legitimately add, drop or rewrite (hop-by-hop, framing, Date).
    HOP_OR_FRAMING = {"connection", "keep-alive", "transfer-encoding", "content-length", "date",
                      "proxy-connection", "te", "trailer", "upgrade"}

    def _raw_headers(self, port, path):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, [(k.lower(), v) for k, v in resp.getheaders()], body
        finally:
            conn.close()

    def test_no_headers_added_or_lost(self):
        """End-to-end response headers are exactly the upstream's: nothing lost, nothing
        added (leasegate's own API defaults such as Cache-Control must not leak in)."""
        d = "hdr-" + uid()
        self.ng.put("/%s/f.txt" % d, b"headers")
        for up_path in ("/%s/f.txt" % d, "/%s/missing" % d, "/teapot", "/cached", "/redirect"):
            with self.subTest(path=up_path):
                dst, dh, dbody = self._raw_headers(self.ng.port, up_path)
                st, h, body = self._raw_headers(self.srv.port, "/store" + up_path)
                self.assertEqual((st, body), (dst, dbody))
                want = sorted((k, v) for k, v in dh if k not in self.HOP_OR_FRAMING)
                got = sorted((k, v) for k, v in h if k not in self.HOP_OR_FRAMING)
                self.assertEqual(got, want)

    def test_upstream_cache_control_kept(self):
        st, h, body = self._raw_headers(self.srv.port, "/store/cached")
        self.assertEqual((st, body), (200, b"cacheable\n"))
        self.assertEqual([v for k, v in h if k == "cache-control"], ["public, max-age=3600"])

    def test_query_string_forwarded(self):
        st, _, _ = self.send("GET", "/store/echo?a=1&b=x%20y&c=%2F&empty=")
        self.assertEqual(st, 200)
        self.assertIn("uri=/echo?a=1&b=x%20y&c=%2F&empty= args=a=1&b=x%20y&c=%2F&empty=",
                      self.srv.client.last_text)
        st, _, _ = self.send("GET", "/store/echo")
        self.assertEqual(st, 200)
        self.assertIn("uri=/echo args= ", self.srv.client.last_text)

    def test_prefix_boundaries(self):
        # Only paths starting with the prefix are proxied; the API keeps working.
        for path in ("/store", "/storefront/x", "/v1/store/x"):
            with self.subTest(path=path):
                st, h, body = self.send("GET", path)
                self.assertEqual(st, 404, body)
                self.assertNotEqual(h.get("x-upstream"), "nginx")
                self.assertEqual(body.get("error"), "not_found", body)
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))
        g = self.acquire_ok("chk/api-" + uid())
        self.assertGreater(g["token"], 0)

    def test_chunked_upload_forwarded(self):
        obj, path = self.obj("chunked")
        g = self.acquire_ok(obj)
        parts = [b"abc", b"", b"defg", bytes(range(256)) * 400]
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=15)
        try:
            conn.request("PUT", path, body=iter(parts), encode_chunked=True,
                         headers={"Fencing-Lease": g["lease"]})
            resp = conn.getresponse()
            resp.read()
            self.assertEqual(resp.status, 201)
        finally:
            conn.close()
        self.assertEqual(self.ng.read_file(obj), b"".join(parts))

    def test_expect_100_continue(self):
        """curl -T sends Expect: 100-continue: a refused write is answered at once without
        waiting for the body; an accepted one gets 100 Continue and goes through."""
        obj, path = self.obj("expect")
        marker = "rej-expect-" + uid()
        g = self.acquire_ok(obj)
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            s.sendall(("PUT /store/%s/a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n"
                       "Expect: 100-continue\r\n\r\n" % marker).encode())
            st, _, body = harness.RawReader(s).read_response(timeout=5)
            self.assertEqual(st, 428, body)
        finally:
            s.close()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            # The lease of another lock than the path's.
            s.sendall(("PUT /store/%s/b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n"
                       "Expect: 100-continue\r\nFencing-Lease: %s\r\n\r\n" % (marker, g["lease"])).encode())
            st, _, body = harness.RawReader(s).read_response(timeout=5)
            self.assertEqual(st, 409, body)
        finally:
            s.close()
        self.assert_never_forwarded(marker)
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            s.sendall(("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n"
                       "Fencing-Lease: %s\r\n\r\n" % (path, g["lease"])).encode())
            s.settimeout(5)
            first = b""
            while b"\r\n\r\n" not in first:
                chunk = s.recv(4096)
                if not chunk:
                    break
                first += chunk
            self.assertTrue(first.startswith(b"HTTP/1.1 100"), first[:200])
            s.sendall(b"hello")
            reader = harness.RawReader(s)
            reader.buf = first.partition(b"\r\n\r\n")[2]
            st, h, _ = reader.read_response(timeout=10)
            self.assertEqual((st, h.get("x-upstream")), (201, "nginx"))
        finally:
            s.close()
        self.assertEqual(self.ng.read_file(obj), b"hello")

    def test_write_at_lease_expiry_never_lands_after_newer_token(self):
        """A writes right around its lease's end while B long-polls and writes the moment
        it is granted. Whatever A gets back, the store must end with B's write, and nginx
        must have seen the tokens in non-decreasing order."""
        results = []
        for i in range(25):
            obj = "race/%d-%s/obj" % (i, uid())
            lock = obj
            a = self.acquire_ok(lock, "a", ttl_ms=100)
            t_granted = time.monotonic()
            box = {}

            def b_side():
                c = self.srv.new_client(timeout=15)
                try:
                    st, _, g = c.acquire(lock, "b", ttl_ms=60000, wait_ms=5000)
                    box["token"] = g.get("token")
                    box["put"] = self.send("PUT", "/store/" + obj, b"B", g.get("lease"), client=c)[0]
                finally:
                    c.close()

            t = threading.Thread(target=b_side, daemon=True)
            t.start()
            time.sleep(max(0.0, 0.080 + 0.0015 * i - (time.monotonic() - t_granted)))
            sta = self.send("PUT", "/store/" + obj, b"A", a["lease"])[0]
            t.join(15)
            self.assertIn(box.get("put"), (201, 204), box)
            self.assertIn(sta, (201, 204, 409))
            results.append(sta)
            self.assertEqual(self.ng.read_file(obj), b"B",
                             "iteration %d: A's write (token %d, got %d) landed after B's (token %r)"
                             % (i, a["token"], sta, box.get("token")))
            entries = self.ng.wait_logged(lambda e: e["request_uri"] == "/" + obj and e["token"] == str(box["token"]))
            # What nginx applied (2xx); A's write may have started and been cut off
            # before its end (logged with another status, applied nothing).
            tokens = [int(e["token"]) for e in entries if e["request_uri"] == "/" + obj and e["status"][0] == "2"]
            self.assertEqual(tokens, sorted(tokens), "iteration %d" % i)
            self.assertEqual(a["token"] in tokens, sta in (201, 204), (i, sta, tokens))

    def test_rejected_body_is_not_read_as_a_request(self):
        """A refused PUT's body (here shaped like a request) must never be parsed as the
        next request on the connection, nor reach nginx."""
        marker = "rej-smuggle-" + uid()
        smuggled = ("PUT /store/%s/evil HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n\r\nevil" % marker).encode()
        body = smuggled + b"z" * (200000 - len(smuggled))
        req = ("PUT /store/%s/outer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
               % (marker, len(body))).encode() + body
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            try:
                s.sendall(req)
            except (BrokenPipeError, ConnectionResetError):
                pass
            reader = harness.RawReader(s)
            st, hdrs, rbody = reader.read_response(timeout=10)
            self.assertEqual(st, 428, rbody[:300])
            self.assertEqual(json.loads(rbody.decode())["error"], "token_required")
            try:
                st2, _, b2 = reader.read_response(timeout=1.0)
                self.fail("a second response came for a body: %d %r" % (st2, b2[:200]))
            except (socket.timeout, ConnectionError, OSError):
                pass
        finally:
            s.close()
        self.assert_never_forwarded(marker)


class GuardRefusalTrailTests(GuardBase):
    """Issue 39: a stale writer's audit row had an empty owner, token 0 and no reason, the
    same as a write with no lease, and its 409 said "token": null. Each refusal's row and
    answer now name the lock, the token of the lease presented (when one was) and why."""

    def refusals(self, lock):
        st, _, body = self.srv.request("GET", "/v1/audit?lock=" + lock)
        self.assertEqual(st, 200, body)
        return [(r["token"], r["owner"], r["reason"]) for r in body["rows"] if r["kind"] == "guard_refused"]

    def test_each_refusal_says_which_lease_and_why(self):
        lock, path = self.obj("trail")
        old = self.acquire_ok(lock, "writer-a")
        self.assert_written(self.send("PUT", path, b"a", old["lease"]))
        self.assertEqual(self.srv.release(lock, old["lease"])[0], 200)
        new = self.acquire_ok(lock, "writer-b")
        self.assert_written(self.send("PUT", path, b"b", new["lease"]))
        # A released lease, then one an admin force-released.
        body = self.assert_stale(self.send("PUT", path, b"late", old["lease"]), lock, old["token"],
                                 holder_token=new["token"])
        self.assertEqual(body["reason"], "released", body)
        self.assertEqual(self.srv.request("DELETE", "/v1/locks/" + lock)[0], 200)
        body = self.assert_stale(self.send("PUT", path, b"late", new["lease"]), lock, new["token"])
        self.assertEqual(body["reason"], "revoked", body)
        # No lease, or no lease id: 428, and rows that say so.
        self.assert_token_required(self.send("PUT", path, b"x"))
        self.assert_token_required(self.send("PUT", path, b"x", "not-a-lease"))
        # A read lease holds the lock, but not for writing: its owner and token are known.
        rlock, rpath = self.obj("trail-read")
        reader = self.acquire_ok(rlock, "reader-r", mode="read")
        body = self.assert_stale(self.send("PUT", rpath, b"r", reader["lease"]), rlock, reader["token"])
        self.assertEqual(body["reason"], "read_lease", body)
        # Another lock's lease was never this lock's: no token to name.
        body = self.assert_stale(self.send("PUT", rpath, b"r", old["lease"]), rlock, None)
        self.assertEqual(body["reason"], "unknown", body)
        self.assertEqual(self.refusals(lock), [(old["token"], "", "released"), (new["token"], "", "revoked"),
                                               (0, "", "lease_missing"), (0, "", "not_a_lease")])
        self.assertEqual(self.refusals(rlock), [(reader["token"], "reader-r", "read_lease"), (0, "", "unknown")])
        # The rows and their reasons are durable: the same after kill -9 and a restart.
        self.srv.restart(kill9=True)
        self.assertEqual(self.refusals(lock), [(old["token"], "", "released"), (new["token"], "", "revoked"),
                                               (0, "", "lease_missing"), (0, "", "not_a_lease")])
        self.assertIsNone(self.srv.request("GET", "/v1/audit?lock=" + lock)[2]["rows"][0]["reason"])
        self.assertEqual(self.ng.read_file(lock), b"b")


class GuardHardeningTests(GuardBase):
    """Holes found in review: each of these failed before its fix."""

    def test_safe_method_with_body_is_not_a_write(self):
        # A GET with a body was forwarded as a PUT, unchecked. Now GET, HEAD and OPTIONS
        # with a body in any framing are refused; Content-Length: 0 is no body.
        key, path = self.obj("hard/getbody")
        g = self.acquire_ok(key)
        self.assert_written(self.send("PUT", path, b"original", g["lease"]))
        self.assert_bad_request(self.srv.client.request("GET", path, raw=b"overwritten-without-lease"))
        refused = [
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello",
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: identity\r\n\r\n",
            "HEAD %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello",
            "HEAD %s HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "OPTIONS %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello",
            "OPTIONS %s HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        ]
        for req in refused:
            with self.subTest(request=req.split("\r\n")[0] + " " + req.split("\r\n")[2]):
                st, _, _ = harness.raw_http(self.srv.port, (req % path).encode(), timeout=5)
                self.assertEqual(st, 400)
        # Content-Length: 0 declares no body: the request passes, as the read it is.
        for method in ("GET", "HEAD", "OPTIONS"):
            with self.subTest(method=method, content_length=0):
                conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=5)
                try:
                    conn.request(method, path, headers={"Content-Length": "0"})
                    resp = conn.getresponse()
                    resp.read()
                    self.assertEqual(resp.getheader("X-Upstream"), "nginx")
                    if method != "OPTIONS":
                        self.assertEqual(resp.status, 200)
                finally:
                    conn.close()
        st, _, direct = self.ng.request("GET", "/" + key)
        self.assertEqual((st, direct), (200, b"original"))
        self.assertEqual([e["method"] for e in self.logged("/" + key) if e["method"] not in ("GET", "HEAD", "OPTIONS")],
                         ["PUT"], "only the real PUT reached nginx as a write")

    def test_write_with_both_content_length_and_transfer_encoding(self):
        key, path = self.obj("hard/framing")
        g = self.acquire_ok(key)
        req = ("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\nContent-Length: 5\r\n"
               "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" % (path, g["lease"]))
        st, _, _ = harness.raw_http(self.srv.port, req.encode(), timeout=5)
        self.assertEqual(st, 400)
        self.assertIsNone(self.ng.read_file(key))
        self.assertEqual(self.logged("/" + key), [])

    def test_non_canonical_targets_rejected(self):
        """Only canonical targets go upstream, reads and writes alike: the upstream
        must not resolve a target to another object than the one its lock names."""
        marker = "noncanon-" + uid()
        g = self.acquire_ok("hard/" + marker)
        targets = ["/store/%s/a//b", "/store/%s//", "/store/%s/./b", "/store/%s/a/../b", "/store/%s/%%2e%%2e/b",
                   "/store/%s/a\\b", "/store/%s/a;b", "/store/%s/a;v=1/b", "/store/%s/a%%41",
                   "/store/%s/a%%2fb", "/store/%s/a%%2Fb", "/store/%s/a%%5cb", "/store/%s/a%%3bb",
                   "/store/%s/a%%25b", "/store/%s/a%%00b", "/store/%s/a%%0ab", "/store/%s/a%%7f",
                   "/store/%s/a%%zz", "/store/%s/a%%4", "/store/%s/a%%", "/store/%s/a#frag",
                   "/store/%s/a?q=%%zz", '/store/%s/a"b', "/store/%s/a<b", "/store/%s/a|b",
                   "/store/%s/a%%2E", "/store/%s/%%7euser"]
        for t in targets:
            target = t % marker
            with self.subTest(target=target):
                for method in ("GET", "PUT"):
                    put = method == "PUT"
                    req = ("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\n%s\r\n%s"
                           % (method, target, g["lease"], "Content-Length: 1\r\n" if put else "", "x" if put else ""))
                    st, _, body = harness.raw_http(self.srv.port, req.encode(), timeout=5)
                    self.assertEqual(st, 400, (method, body[:200]))
        self.assert_never_forwarded(marker)
        # Canonical look-alikes pass: dots inside names, needed encodings, a query.
        for target in ("/store/%s/a.b" % marker, "/store/%s/..." % marker, "/store/%s/a%%20b" % marker,
                       "/store/%s/a%%C3%%A9" % marker, "/store/%s/a?q=%%2F&r=a/b" % marker, "/store/%s/dir/" % marker):
            with self.subTest(target=target):
                st, h, _ = self.send("GET", target)
                self.assertEqual(h.get("x-upstream"), "nginx", (target, st))

    def _assert_header_refused(self, line):
        """A GET and a PUT (with the right lease) that carry the raw header line are
        answered 400 by leasegate, and nginx sees neither."""
        marker = "ctl-" + uid()
        g = self.acquire_ok("hard/" + marker)
        for method in ("GET", "PUT"):
            with self.subTest(method=method):
                target = "/store/hard/%s?%s" % (marker, method)
                put = method == "PUT"
                # Connection: close, so that an answer without a length (a 204) ends too.
                req = (b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nFencing-Lease: %s\r\n%s\r\n%s\r\n%s"
                       % (method.encode(), target.encode(), g["lease"].encode(), line,
                          b"Content-Length: 1\r\n" if put else b"", b"x" if put else b""))
                st, _, body = harness.raw_http(self.srv.port, req, timeout=5)
                self.assertEqual(st, 400, body[:200])
        self.assert_never_forwarded(marker)
        self.assertIsNone(self.ng.read_file("hard/" + marker))

    def test_header_values_with_control_bytes_rejected(self):
        """A header value with CR or another control byte is not forwarded; TAB is fine."""
        for name, line in (("SOH", b"X-Custom: a\x01b"), ("DEL", b"X-Custom: a\x7fb"), ("ESC", b"X-Custom: a\x1bb"),
                           ("bare CR", b"X-Custom: a\rb")):
            with self.subTest(value=name):
                self._assert_header_refused(line)
        st, _, body = harness.raw_http(self.srv.port, b"GET /store/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Custom: a\tb\r\n\r\n")
        self.assertEqual(st, 200)
        self.assertIn(b"custom=a\tb ", body)

    def _echo_with_raw_header(self, line):
        """What nginx's /echo reports for a GET through the guard carrying the raw line."""
        req = b"GET /store/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n\r\n" % line
        return harness.raw_http(self.srv.port, req, timeout=5)

    def test_header_value_with_nul_is_not_smuggled(self):
        """libmicrohttpd 0.9.75 cuts a header value at a NUL before leasegate sees it
        (its API gives no way to tell). What matters: the upstream gets exactly the
        header leasegate checked, never the bytes after the NUL or the NUL itself."""
        st, _, body = self._echo_with_raw_header(b"X-Custom: a\x00b\r\nX-Other: o")
        self.assertEqual(st, 200, body)
        self.assertIn(b"custom=a ", body)
        self.assertNotIn(b"\x00", body)

    def test_obs_folded_header_is_refused(self):
        """libmicrohttpd 0.9.75 reads an obs-folded line its own way (the continuation
        lands in the header's name). A server must refuse a request with a fold or
        answer as if the fold were a space (RFC 9112 5.2); the guard refuses it, and the
        upstream never sees it (before, the folded field was silently left out)."""
        self._assert_header_refused(b"X-Custom: a\r\n Fencing-Lease: forged")

    def test_header_names_that_are_not_tokens_are_refused(self):
        """libmicrohttpd 0.9.75 keeps whitespace before the colon in a header's name
        ("Transfer-Encoding : chunked" is a header named "Transfer-Encoding "), so none of
        the guard's checks of framing sees it. Passed on, a backend that reads it as
        Transfer-Encoding frames the body otherwise than the guard did: a request
        smuggled past the guard. RFC 9112 5.1: such a request is refused with 400, and
        the upstream never sees it."""
        for name, line in (("space", b"X-Custom : smuggled"), ("tab", b"X-Custom\t: smuggled"),
                           ("not a token", b"X-Custom(1): smuggled"),
                           ("framing", b"Transfer-Encoding : chunked")):
            with self.subTest(name=name):
                self._assert_header_refused(line)

    def test_dot_segments_rejected(self):
        marker = "dots-" + uid()
        for path in ("/store/../" + marker, "/store/a/../../" + marker, "/store/%2e%2e/" + marker,
                     "/store/.%2E/" + marker, "/store/./" + marker, "/store/x/.."):
            with self.subTest(path=path):
                st, h, body = self.send("GET", path)
                self.assertEqual(st, 400, body)
                self.assertEqual(body.get("error"), "bad_request", body)
                self.assertNotEqual(h.get("x-upstream"), "nginx")
        # Names that merely contain dots are fine.
        st, h, _ = self.send("GET", "/store/dotted-" + uid() + "...x/.hidden")
        self.assertEqual((st, h.get("x-upstream")), (404, "nginx"))
        self.assert_never_forwarded("/" + marker)

    def test_prefix_without_slash_matches_whole_segments(self):
        with harness.Server(extra_args=["--guard", "/bucket=" + self.ng.url]) as srv:
            st, h, _ = srv.request("GET", "/bucketfront/x")
            self.assertEqual(st, 404)
            self.assertNotEqual(h.get("x-upstream"), "nginx", "/bucket must not cover /bucketfront")
            st, h, _ = srv.request("GET", "/bucket/missing-" + uid())
            self.assertEqual((st, h.get("x-upstream")), (404, "nginx"))

    def test_forgotten_locks_take_their_guard_marks(self):
        # Guard marks of forgotten locks used to stay and fill --max-locks, so
        # every new guarded write got 503 for good.
        args = self.guard_args() + ["--max-locks", "2", "--forget-idle-after", "1"]
        with harness.Server(extra_args=args) as srv:
            def write(name):
                st, _, g = srv.acquire(name, "m", ttl_ms=60000)
                self.assertEqual(st, 200, g)
                st, h, body = srv.request("PUT", "/store/" + name, raw=b"x", headers={"Fencing-Lease": g["lease"]})
                self.assertIn(st, (201, 204), body)
                self.assertEqual(srv.release(name, g["lease"])[0], 200)
            write("fm/a")
            write("fm/b")
            srv.wait_until(lambda: harness.parse_metrics(srv.request("GET", "/metrics")[2]).get(
                "leasegate_locks_forgotten_total", 0) >= 2, timeout=15, what="locks forgotten")
            write("fm/c")
            write("fm/d")
            # The marks' rows went with the locks' rows: after a restart (with more
            # stored names than --max-locks allows new) the guard still takes writes.
            srv.restart(kill9=True)
            srv.wait_until(lambda: harness.parse_metrics(srv.request("GET", "/metrics")[2]).get(
                "leasegate_locks_forgotten_total", 0) >= 2, timeout=15, what="locks forgotten after restart")
            write("fm/e")

    def test_client_gone_while_its_mark_commits(self):
        # The reply of a write was held for its mark's commit; the client left
        # before that: the server must forget the hold, not use the freed request.
        for i in range(150):
            g = self.acquire_ok("hard/gone-%d-%s" % (i, uid()))
            sock = socket.create_connection(("127.0.0.1", self.srv.port), timeout=5)
            sock.sendall(("PUT /store/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\n"
                          "Content-Length: 100\r\n\r\n" % (g["name"], g["lease"])).encode())
            sock.close()
            self.srv.release(g["name"], g["lease"])
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))


class GuardMultiTests(GuardBase):
    """--guard is repeatable; the upstream URL may carry a base path. Routes on one
    backend reach apart subtrees of it: a route whose upstream path lies within
    another's (one object reached through two routes, so bound to two locks) stops
    the start, unless both are bound to one lock=NAME."""

    STORE = "store/"

    def guard_args(self):
        return ["--guard", "/store/=" + self.ng.url + "store/" + self.METHODS,
                "--guard", "/nested/=" + self.ng.url + "sub/"]

    def test_two_prefixes(self):
        name = "m-%s.txt" % uid()
        g = self.acquire_ok(name)
        # /nested/NAME is bound to lock NAME (the path below the prefix) and lands in sub/.
        self.assert_written(self.send("PUT", "/nested/" + name, b"in sub", g["lease"]), expect=(201,))
        self.assertEqual(self.ng.read_file("sub/" + name), b"in sub")
        st, _, _ = self.send("GET", "/nested/" + name)
        self.assertEqual((st, self.srv.client.last_raw), (200, b"in sub"))
        self.assert_token_required(self.send("PUT", "/nested/" + name, b"no"))
        # The binding is by the path below the prefix, whatever the prefix: /store/NAME
        # is bound to lock NAME too, and is another object, in store/.
        self.assert_written(self.send("PUT", "/store/" + name, b"top", g["lease"]), expect=(201,))
        self.assertEqual((self.ng.read_file("store/" + name), self.ng.read_file("sub/" + name)),
                         (b"top", b"in sub"))
        # No path under /store/ reaches sub/: /store/sub/NAME is store/sub/NAME, bound
        # to lock sub/NAME.
        st, h, _ = self.send("GET", "/store/sub/" + name)
        self.assertEqual((st, h.get("x-upstream")), (404, "nginx"))
        self.assert_stale(self.send("PUT", "/store/sub/" + name, b"no", g["lease"]), "sub/" + name, None)
        self.assertIsNone(self.ng.read_file("store/sub/" + name))
        entries = [e for e in self.complete_log() if e["method"] == "PUT"]
        self.assertEqual(sorted((e["request_uri"], e["lock"]) for e in entries if name in e["request_uri"]),
                         sorted([("/sub/" + name, name), ("/store/" + name, name)]))

    def test_routes_over_the_same_objects_do_not_start(self):
        up = self.ng.url
        for specs in (["/store/=" + up, "/nested/=" + up + "sub/"],  # what this class had before
                      ["/nested/=" + up + "sub/", "/store/=" + up],
                      ["/a/=" + up + "t", "/b/=" + up + "t/u/v/"],
                      ["/a/=" + up.rstrip("/"), "/b/=" + up + "t/"],  # no path: all of the server
                      ["/a/=" + up + "t/", "/b/=" + up + "t/"],
                      ["/a/=" + up + "t/,lock=one", "/b/=" + up + "t/u/,lock=two"],
                      ["/a/=" + up + "t/,lock=one", "/b/=" + up + "t/u/"],
                      ["/store/=" + up + "store/", "/store/vault/=" + up + "vault/,lock=v"]):  # never reached
            with self.subTest(specs=specs):
                p = harness.serve_to_exit([a for spec in specs for a in ("--guard", spec)])
                self.assertEqual((p.returncode, p.stdout), (2, ""), p.stderr)
                lines = p.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, p.stderr)
                for spec in specs:
                    self.assertIn("--guard " + spec.split("=", 1)[0], lines[0])
        # Routes bound to one lock=NAME may share objects: the one lock protects them
        # whichever route a write takes.
        lock = "shared-%s" % uid()
        with harness.Server(extra_args=["--guard", "/a/=%st/,lock=%s" % (up, lock),
                                        "--guard", "/b/=%st/u/,lock=%s" % (up, lock)]) as srv:
            st, _, g = srv.acquire(lock, "o", ttl_ms=60000)
            self.assertEqual(st, 200, g)
            name = "x-%s.txt" % uid()
            st, h, body = srv.request("PUT", "/b/" + name, raw=b"one", headers={"Fencing-Lease": g["lease"]})
            self.assertEqual((st, h.get("x-upstream")), (201, "nginx"), body)
            st, h, body = srv.request("PUT", "/a/u/" + name, raw=b"two", headers={"Fencing-Lease": g["lease"]})
            self.assertEqual((st, h.get("x-upstream")), (204, "nginx"), body)
            self.assertEqual(self.ng.read_file("t/u/" + name), b"two")
            other = {"Fencing-Lease": harness.random_lease()}
            st, h, body = srv.request("PUT", "/a/u/" + name, raw=b"no", headers=other)
            self.assertEqual((st, body.get("lock")), (409, lock), body)


class GuardFixedLockTests(GuardBase):
    """--guard PREFIX=UPSTREAM,lock=NAME binds every path under PREFIX to lock NAME."""

    FIXED = "fixed/bucket"

    STORE = "store/"

    def guard_args(self):
        return ["--guard", "/store/=" + self.ng.url + "store/",
                "--guard", "/fixed/=" + self.ng.url + "fx/,lock=" + self.FIXED]

    def test_every_path_bound_to_the_route_lock(self):
        g = self.acquire_ok(self.FIXED)
        d = "d-" + uid()
        # Any canonical path, also ones that could not name a lock themselves.
        for rest, stored in (("%s/a.txt" % d, "%s/a.txt" % d), ("%s/sp%%20ace.txt" % d, "%s/sp ace.txt" % d),
                             ("%s/x/acquire" % d, "%s/x/acquire" % d), ("%s/a!b" % d, "%s/a!b" % d),
                             ("/".join([d] + ["y" * 100] * 3),) * 2):
            with self.subTest(path=rest[:60]):
                self.assert_written(self.send("PUT", "/fixed/" + rest, rest.encode(), g["lease"]), expect=(201,))
                self.assertEqual(self.ng.read_file("fx/" + stored), rest.encode())
        # Naming the route's lock is fine; another lock is a 400.
        self.assert_written(self.send("PUT", "/fixed/%s/a.txt" % d, b"named", g["lease"],
                                      headers={"Fencing-Lock": self.FIXED}), expect=(204,))
        marker = "rej-fixed-" + uid()
        self.assert_bad_request(self.send("PUT", "/fixed/%s/a.txt?%s" % (d, marker), b"x", g["lease"],
                                          headers={"Fencing-Lock": "%s/a.txt" % d}))
        # The lease of the lock a path would name under the default binding is not it.
        other = self.acquire_ok("%s/a.txt" % d)
        self.assert_stale(self.send("PUT", "/fixed/%s/a.txt?%s" % (d, marker), b"x", other["lease"]),
                          self.FIXED, None, max_token=g["token"], holder_token=g["token"])
        self.assert_token_required(self.send("DELETE", "/fixed/%s/a.txt?%s" % (d, marker)))
        # Non-canonical targets stay refused.
        self.assert_bad_request(self.send("PUT", "/fixed/%s/x/../a.txt?%s" % (d, marker), b"x", g["lease"]))
        self.assert_never_forwarded(marker)
        self.assertEqual(self.ng.read_file("fx/%s/a.txt" % d), b"named")
        # Every forwarded write names the route's lock and the lease's token.
        puts = [e for e in self.complete_log() if e["request_uri"].startswith("/fx/") and e["method"] == "PUT"]
        self.assertEqual(len(puts), 6)
        self.assertEqual({(e["token"], e["lock"]) for e in puts}, {(str(g["token"]), self.FIXED)})
        # The other route on the same server keeps the default binding.
        self.assert_stale(self.send("PUT", "/store/%s/a.txt" % d, b"x", g["lease"]), "%s/a.txt" % d, None)
        self.assert_written(self.send("PUT", "/store/%s/a.txt" % d, b"own", other["lease"]), expect=(201,))

    def test_one_lock_one_mark_for_the_whole_route(self):
        a = self.acquire_ok(self.FIXED, "a", ttl_ms=60000)
        self.assert_written(self.send("PUT", "/fixed/one-%s" % uid(), b"a", a["lease"]), expect=(201,))
        st, _, r = self.srv.release(self.FIXED, a["lease"])
        self.assertEqual(st, 200, r)
        b = self.acquire_ok(self.FIXED, "b")
        self.assert_written(self.send("PUT", "/fixed/two-%s" % uid(), b"b", b["lease"]), expect=(201,))
        # a's lease ended: refused on any path of the route, with b's token as the mark.
        self.assert_stale(self.send("PUT", "/fixed/three-%s" % uid(), b"a", a["lease"]),
                          self.FIXED, a["token"], max_token=b["token"], holder_token=b["token"])


# ----------------------------------------------------------------------------
class _RssSampler:
    def __init__(self, srv, interval=0.02):
        self.srv, self.interval = srv, interval
        self.peak_kb = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak_kb = max(self.peak_kb, self.srv.rss_kb())
                self.samples += 1
            except (OSError, RuntimeError, ValueError):
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(2)
        return False


class GuardStreamingTests(GuardBase):
    """50 MiB through the guard both ways, with bounded memory in leasegate."""

    SIZE = 50 * MIB
    CHUNK = MIB
    RSS_LIMIT_KB = 40 * 1024

    def _chunks(self):
        block = hashlib.sha256(b"seed").digest() * (self.CHUNK // 32)
        for i in range(self.SIZE // self.CHUNK):
            yield ("%08d" % i).encode() + block[8:]

    def _check_rss(self, sampler, what):
        self.assertGreater(sampler.samples, 0)
        if SANITIZED:
            return
        self.assertLess(sampler.peak_kb, self.RSS_LIMIT_KB,
                        "%s: leasegate RSS peaked at %d KiB for a %d MiB body"
                        % (what, sampler.peak_kb, self.SIZE // MIB))

    def test_50mib_put_and_get_streamed(self):
        obj = "big-%s/blob.bin" % uid()
        g = self.acquire_ok(obj, ttl_ms=300000)
        want = hashlib.sha256()
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=60)
        try:
            with _RssSampler(self.srv) as up:
                conn.putrequest("PUT", "/store/" + obj)
                conn.putheader("Content-Length", str(self.SIZE))
                conn.putheader("Content-Type", "application/octet-stream")
                conn.putheader("Fencing-Lease", g["lease"])
                conn.endheaders()
                for i, chunk in enumerate(self._chunks()):
                    want.update(chunk)
                    conn.send(chunk)
                    if i == 45:
                        # Pause with 46 MiB sent: a guard that gathers the whole body
                        # before forwarding would hold it in memory now.
                        time.sleep(0.5)
                resp = conn.getresponse()
                resp.read()
            self.assertEqual(resp.status, 201)
            self._check_rss(up, "PUT")
            with open(self.ng.file_path(obj), "rb") as f:
                on_disk = hashlib.sha256()
                for piece in iter(lambda: f.read(MIB), b""):
                    on_disk.update(piece)
            self.assertEqual(on_disk.hexdigest(), want.hexdigest())
            # GET it back on the same connection, reading slowly at first: a guard that
            # buffered the whole answer would have read all of it from nginx meanwhile.
            with _RssSampler(self.srv) as down:
                conn.request("GET", "/store/" + obj)
                resp = conn.getresponse()
                self.assertEqual(resp.status, 200)
                self.assertEqual(resp.getheader("X-Upstream"), "nginx")
                time.sleep(1.5)
                got, n = hashlib.sha256(), 0
                while True:
                    piece = resp.read(64 * 1024)
                    if not piece:
                        break
                    got.update(piece)
                    n += len(piece)
            self.assertEqual(n, self.SIZE)
            self.assertEqual(got.hexdigest(), want.hexdigest())
            self._check_rss(down, "GET")
        finally:
            conn.close()
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual(st, 200, b)


# ----------------------------------------------------------------------------
class GuardUpstreamErrorTests(unittest.TestCase):
    """502 when nothing listens upstream, 504 when it is too slow; nothing leaks."""

    def setUp(self):
        self.closed = upstream.ClosedPort()
        self.slow = upstream.SlowUpstream()
        self.srv = harness.Server(extra_args=[
            "--guard", "/down/=" + self.closed.url,
            "--guard", "/slow/=" + self.slow.url,
            "--guard-timeout", "1"])

    def tearDown(self):
        self.srv.cleanup()
        self.slow.close()
        self.closed.close()

    def assert_error(self, resp, status, error):
        st, hdrs, body = resp
        self.assertEqual(st, status, body)
        self.assertIn("application/json", hdrs.get("content-type", ""), hdrs)
        self.assertEqual(body.get("error"), error, body)
        self.assertIsInstance(body.get("message"), str, body)

    def test_502_when_upstream_down(self):
        c = self.srv.new_client(timeout=10)
        self.assert_error(c.request("GET", "/down/x"), 502, "bad_gateway")
        g = self.srv.acquire("err/" + uid(), "e", ttl_ms=60000)[2]
        resp = c.request("PUT", "/down/" + g["name"], raw=b"data", headers={"Fencing-Lease": g["lease"]})
        self.assert_error(resp, 502, "bad_gateway")
        for _ in range(5):
            c.request("GET", "/down/warm")
        fds = fd_count(self.srv.pid)
        t0 = time.monotonic()
        for i in range(100):
            st, _, _ = c.request("GET", "/down/r%d" % i)
            self.assertEqual(st, 502)
        self.assertLess(time.monotonic() - t0, 10, "100 refused upstream connections took too long")
        self.assertLessEqual(fd_count(self.srv.pid), fds + 3, "file descriptors leak on 502")
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))

    def test_answer_with_too_large_a_head_is_refused(self):
        # Every field is kept until the head is complete and checked against the
        # Connection headers among them: an upstream's endless head cost the server
        # memory and quadratic time (20,000 fields stalled it 2.6 s, and the client got
        # no answer; 2,000 did not fit in libmicrohttpd's memory for the connection:
        # no answer either). Up to 256 fields and 12 KiB all pass.
        c = self.srv.new_client(timeout=15)
        saved = http.client._MAXHEADERS  # Python's client reads at most 100
        http.client._MAXHEADERS = 1000
        try:
            st, hdrs, body = c.request("GET", "/slow/fields?n=250")
        finally:
            http.client._MAXHEADERS = saved
        self.assertEqual((st, body), (200, "fields"))
        self.assertEqual(sum(1 for k in hdrs if k.startswith("x-f")), 250, sorted(hdrs))
        for query in ("n=20000", "n=300", "n=60&pad=250"):
            st, hdrs, body = c.request("GET", "/slow/fields?" + query)
            self.assert_error((st, hdrs, body), 502, "bad_gateway")
            self.assertIn("head is too large", body["message"])
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))

    def test_answer_head_beside_a_large_request_head_is_refused_not_dropped(self):
        # The request's head and the answer's share libmicrohttpd's 16 KiB for the
        # connection: an answer head under 12 KiB did not fit beside a request
        # head of a few KiB (both within their limits), and the client's
        # connection was closed without any answer. 502 with the reason now.
        query = "/slow/fields?n=46&pad=250"  # about 11.9 KB of fields: under 12 KiB
        c = self.srv.new_client(timeout=15)
        st, hdrs, body = c.request("GET", query, headers={"X-Pad": "p" * 1000})
        self.assertEqual((st, body), (200, "fields"))
        self.assertEqual(sum(1 for k in hdrs if k.startswith("x-f")), 46)
        for pad in (5000, 11000):
            try:
                resp = c.request("GET", query, headers={"X-Pad": "p" * pad})
            except (http.client.RemoteDisconnected, ConnectionResetError) as e:
                self.fail("request head of %d bytes: no answer at all (%r)" % (pad, e))
            self.assert_error(resp, 502, "bad_gateway")
            self.assertIn("does not fit", resp[2]["message"])
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))

    def test_504_when_upstream_silent(self):
        c = self.srv.new_client(timeout=15)
        t0 = time.monotonic()
        self.assert_error(c.request("GET", "/slow/never"), 504, "gateway_timeout")
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.8)
        self.assertLess(elapsed, 5.0)
        g = self.srv.acquire("err/never-put-" + uid(), "e", ttl_ms=60000)[2]
        resp = c.request("PUT", "/slow/" + g["name"], raw=b"data", headers={"Fencing-Lease": g["lease"]})
        self.assert_error(resp, 504, "gateway_timeout")
        # The guard hangs up on the silent upstream.
        self.assertEqual(self.slow.wait_open(0, timeout=5), 0, "upstream connections left open")
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))

    def test_sigterm_with_an_upstream_call_in_flight(self):
        # Shutdown cuts the call and closes its client; it used to free the call twice.
        # The upstream timeout is long, so the call is still running when the server stops.
        self.srv.cleanup()
        self.srv = harness.Server(extra_args=["--guard", "/slow/=" + self.slow.url, "--guard-timeout", "60"])
        out = []

        def slow_get():
            c = self.srv.new_client(timeout=30)
            try:
                out.append(c.request("GET", "/slow/never-shutdown")[0])
            except Exception as e:  # the connection is closed: that is the point
                out.append(type(e).__name__)
            c.close()

        t = threading.Thread(target=slow_get, daemon=True)
        t.start()
        deadline = time.monotonic() + 5
        while self.slow.counts()[0] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertGreaterEqual(self.slow.counts()[0], 1, "the call never reached the upstream")
        self.assertEqual(self.srv.stop(), 0, self.srv.stderr_text())
        t.join(15)
        self.assertTrue(out, "the waiting client got no answer or close")

    def test_waiting_on_upstream_does_not_block_the_server(self):
        results = []

        def slow_get():
            c = self.srv.new_client(timeout=15)
            results.append(c.request("GET", "/slow/never-bg")[0])
            c.close()

        threads = [threading.Thread(target=slow_get, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        c = self.srv.new_client(timeout=5)
        worst = 0.0
        for i in range(10):
            t0 = time.monotonic()
            st, _, b = c.request("GET", "/healthz")
            worst = max(worst, time.monotonic() - t0)
            self.assertEqual(st, 200, b)
            time.sleep(0.05)
        st, _, b = c.acquire("err/nb-" + uid(), "x", ttl_ms=60000)
        self.assertEqual(st, 200, b)
        self.assertLess(worst, 0.5, "API stalled while guard requests wait upstream")
        for t in threads:
            t.join(10)
        self.assertEqual(results, [504] * 4)

    def test_concurrent_slow_answers_overlap(self):
        """The upstream answers only once all 16 requests are in flight at once:
        a guard that forwarded them one after another would get "alone"."""
        results = []
        srv = harness.Server(extra_args=["--guard", "/slow/=" + self.slow.url, "--guard-timeout", "10"])
        self.addCleanup(srv.cleanup)

        def together_get(i):
            c = srv.new_client(timeout=15)
            st, _, _ = c.request("GET", "/slow/together?n=16&i=%d" % i)
            results.append((st, c.last_raw))
            c.close()

        threads = [threading.Thread(target=together_get, args=(i,), daemon=True) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        self.assertEqual(results, [(200, b"together")] * 16)

    def test_timeout_is_for_silence_not_total_time(self):
        # Headers after 0.5 s (< 1 s timeout): fine.
        c = self.srv.new_client(timeout=15)
        st, h, _ = c.request("GET", "/slow/late?ms=500")
        self.assertEqual((st, c.last_raw, h.get("x-upstream")), (200, b"late", "slow"))
        # A body trickling for ~4.8 s with 0.4 s gaps through a guard with a 3 s timeout
        # is a live transfer, not a stall.
        srv = harness.Server(extra_args=["--guard", "/slow/=" + self.slow.url, "--guard-timeout", "3"])
        try:
            c = srv.new_client(timeout=20)
            st, _, _ = c.request("GET", "/slow/trickle?n=12&ms=400")
            self.assertEqual(st, 200)
            self.assertEqual(c.last_raw, b"".join(b"piece%03d" % i for i in range(12)))
        finally:
            srv.cleanup()

    def test_stalled_body_is_cut_off(self):
        """Headers came (status already sent on), then the upstream went silent: the
        guard cannot send a 504 any more, but must end the client's response (close the
        connection) within about the guard timeout instead of hanging forever."""
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=15)
        try:
            s.sendall(b"GET /slow/stall-body HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            t0 = time.monotonic()
            data = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                except socket.timeout:
                    self.fail("guard still holds a stalled response after 15 s: %r" % data[:300])
                if not chunk:
                    break
                data += chunk
            elapsed = time.monotonic() - t0
        finally:
            s.close()
        # Generous: libcurl's low-speed check averages over ~5 s, so a stall is seen
        # some seconds after the 1 s guard timeout. It must not hang, though.
        self.assertLess(elapsed, 10.0)
        head, _, body = data.partition(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 200"):
            self.assertLess(len(body), 1000, "a truncated body must not look complete")
        else:
            self.assertTrue(head.startswith(b"HTTP/1.1 504") or not head, head[:100])
        self.assertEqual(self.slow.wait_open(0, timeout=5), 0)
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))


class GuardOrderTests(unittest.TestCase):
    """Writes for one lock go upstream one at a time; --guard-max-calls caps the calls."""

    def setUp(self):
        self.slow = upstream.SlowUpstream()
        self.srv = None

    def tearDown(self):
        if self.srv:
            self.srv.cleanup()
        self.slow.close()

    def _put_all(self, writes):
        """PUTs (path, lease) at once, each on its own connection; [(status, body)] in order."""
        results = [None] * len(writes)

        def put(i, path, lease):
            c = self.srv.new_client(timeout=30)
            try:
                st, _, _ = c.request("PUT", path, raw=b"x", headers={"Fencing-Lease": lease})
                results[i] = (st, c.last_raw)
            finally:
                c.close()

        threads = [threading.Thread(target=put, args=(i, p, l), daemon=True) for i, (p, l) in enumerate(writes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return results

    def test_writes_for_one_lock_go_upstream_one_at_a_time(self):
        """The upstream answers a /together?n=N request once N of them have arrived
        (else "alone" after 8 s). Writes of two locks are in flight together; two writes
        of one lock are not: the second reaches the upstream after the first's answer."""
        self.srv = harness.Server(extra_args=["--guard", "/slow/=" + self.slow.url, "--guard-timeout", "20"])
        g1 = self.srv.acquire("one/together", "o1", ttl_ms=120000)[2]
        g2 = self.srv.acquire("two/together", "o2", ttl_ms=120000)[2]
        results = self._put_all([("/slow/one/together?n=2", g1["lease"]), ("/slow/two/together?n=2", g2["lease"])])
        self.assertEqual(results, [(200, b"together")] * 2)
        # Two writes of lock one/together (same lease): 3rd and 4th arrival upstream.
        results = self._put_all([("/slow/one/together?n=4&i=1", g1["lease"]),
                                 ("/slow/one/together?n=4&i=2", g1["lease"])])
        self.assertEqual(sorted(results), [(200, b"alone"), (200, b"together")])
        self.assertEqual(self.slow.counts()[0], 4)

    def test_max_calls_503(self):
        self.srv = harness.Server(extra_args=["--guard", "/slow/=" + self.slow.url, "--guard-timeout", "3",
                                              "--guard-max-calls", "2"])
        out = []

        def slow_get(i):
            c = self.srv.new_client(timeout=15)
            try:
                out.append(c.request("GET", "/slow/never-%d" % i)[0])
            finally:
                c.close()

        threads = [threading.Thread(target=slow_get, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while self.slow.counts()[1] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.slow.counts()[1], 2, "the two calls never reached the upstream")
        g = self.srv.acquire("late", "m", ttl_ms=60000)[2]
        for method, lease in (("GET", None), ("PUT", g["lease"])):
            with self.subTest(method=method):
                st, hdrs, body = self.srv.request(method, "/slow/late?ms=10", raw=b"x" if lease else None,
                                                  headers={"Fencing-Lease": lease} if lease else None)
                self.assertEqual((st, body.get("error")), (503, "overloaded"), body)
                self.assertIn("application/json", hdrs.get("content-type", ""))
        st, _, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))
        for t in threads:
            t.join(15)
        self.assertEqual(out, [504, 504])
        # Once the calls are over, new ones go through again.
        self.srv.wait_until(lambda: self.srv.request("GET", "/slow/late?ms=10")[0] == 200, timeout=10,
                            what="a call after the cap was freed")


class GuardFlagTests(unittest.TestCase):
    """Bad --guard / --guard-timeout / --guard-max-calls values: exit 2 with one line on stderr."""

    def test_bad_flags(self):
        import tempfile
        d = tempfile.mkdtemp(prefix="leasegate-guardflags-")
        try:
            for args in (["--guard", "nonsense"], ["--guard", "/x/="], ["--guard", "=http://127.0.0.1:1/"],
                         ["--guard", "/x/=notaurl"], ["--guard"], ["--guard-timeout", "abc"],
                         ["--guard-timeout", "0"], ["--guard-timeout", "-1"], ["--guard-timeout"],
                         ["--guard", "/x/=http://127.0.0.1:1/,lock="],
                         ["--guard", "/x/=http://127.0.0.1:1/,lock=a b"],
                         ["--guard", "/x/=http://127.0.0.1:1/,lock=a%20b"],
                         ["--guard", "/x/=http://127.0.0.1:1/,lock=x/acquire"],
                         ["--guard", "/x/=http://127.0.0.1:1/,lock=" + "n" * 257],
                         ["--guard-max-calls", "0"], ["--guard-max-calls", "abc"], ["--guard-max-calls"],
                         ["--guard-settle", "-1"], ["--guard-settle", "abc"], ["--guard-settle", "3601"],
                         ["--guard-lock-max-calls", "0"], ["--guard-key-max-calls", "x"],
                         ["--guard-peer-max-calls", "0"],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods="],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=put"],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=GET+GET"],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=GET+TRACE"],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=CONNECT"],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=GET++PUT"],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=GE T"],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=" + "+".join("M%d" % i for i in range(17))],
                         ["--guard", "/x/=http://127.0.0.1:1/,methods=GET,methods=PUT"],
                         ["--guard", "/x/=http://127.0.0.1:1/,lock=a,lock=b"]):
                with self.subTest(args=args):
                    p = subprocess.run([harness.binary_path(), "serve", "--listen", "127.0.0.1:0",
                                        "--data", os.path.join(d, "x.db")] + args,
                                       stdin=subprocess.DEVNULL, capture_output=True, timeout=10, cwd=d)
                    self.assertEqual(p.returncode, 2, p.stderr)
                    self.assertEqual(p.stdout, b"")
                    self.assertEqual(len(p.stderr.decode().strip().splitlines()), 1, p.stderr)
        finally:
            import shutil
            shutil.rmtree(d, ignore_errors=True)


# ----------------------------------------------------------------------------
class GuardDurabilityTests(GuardBase):
    """The highest forwarded token per lock survives SIGTERM restarts and kill -9; and a
    lock written less than --guard-settle before a restart settles for the rest."""

    extra_args = ["--guard-settle", "2"]

    def send_settled(self, *args, **kw):
        """Sends a write; a lock that is still settling answers 503 with Retry-After,
        and the same write after that long goes through."""
        deadline = time.monotonic() + 10
        while True:
            st, hdrs, body = self.send(*args, **kw)
            if st != 503 or time.monotonic() > deadline:
                return st, hdrs, body
            self.assertIn("settling", body["message"], body)
            self.assertGreaterEqual(int(hdrs["retry-after"]), 1, hdrs)
            self.assertLessEqual(body["retry_after_ms"], 2000, body)
            time.sleep(body["retry_after_ms"] / 1000.0)

    def _story(self, kill9):
        lock = "dur-%s/obj" % uid()
        path = "/store/" + lock
        g1 = self.acquire_ok(lock, "one", ttl_ms=120000)
        self.assert_written(self.send("PUT", path, b"t1", g1["lease"]), expect=(201,))
        st, _, r = self.srv.release(lock, g1["lease"])
        self.assertEqual(st, 200, r)
        g2 = self.acquire_ok(lock, "two", ttl_ms=120000)
        self.assertGreater(g2["token"], g1["token"])
        self.assert_written(self.send("PUT", path, b"t2", g2["lease"]), expect=(204,))
        written = time.monotonic()
        if kill9:
            self.srv.kill9()
        else:
            self.assertEqual(self.srv.stop(), 0, self.srv.stderr_text())
        self.srv.start()
        st, _, info = self.srv.get_lock(lock)
        self.assertEqual(st, 200, info)
        self.assertEqual(info["holder"]["token"], g2["token"], info)
        # The mark (max_token) came back with the lock.
        self.assert_stale(self.send("PUT", path, b"late t1", g1["lease"]),
                          lock, g1["token"], max_token=g2["token"], holder_token=g2["token"])
        self.assertEqual(self.ng.read_file(lock), b"t2")
        # The holder's lease still holds across the restart: the lock was written just
        # before it, so its first write waits for the lock to settle (unless the
        # restart itself took longer than the settle time: on etcd the old leader's
        # key must expire first).
        resp = self.send("PUT", path, b"t2 again", g2["lease"])
        if resp[0] == 503:
            self.assertEqual(resp[2].get("lock"), lock, resp)
            resp = self.send_settled("PUT", path, b"t2 again", g2["lease"])
        else:
            self.assertGreaterEqual(time.monotonic() - written, 2.0, resp)
        self.assert_written(resp, expect=(204,))
        self.assertEqual(self.ng.read_file(lock), b"t2 again")
        # After a release and another restart the mark still names the last token.
        st, _, r = self.srv.release(lock, g2["lease"])
        self.assertEqual(st, 200, r)
        if kill9:
            self.srv.kill9()
        else:
            self.srv.stop()
        self.srv.start()
        self.assert_stale(self.send("PUT", path, b"late t2", g2["lease"]),
                          lock, g2["token"], max_token=g2["token"], holder_token=None)
        g3 = self.acquire_ok(lock, "three")
        self.assertGreater(g3["token"], g2["token"])
        self.assert_written(self.send_settled("PUT", path, b"t3", g3["lease"]), expect=(204,))
        self.assert_stale(self.send("PUT", path, b"late t2", g2["lease"]),
                          lock, g2["token"], max_token=g3["token"], holder_token=g3["token"])
        self.assertEqual(self.ng.read_file(lock), b"t3")
        self.assertEqual([(e["method"], e["token"]) for e in self.logged("/" + lock)],
                         [("PUT", str(t)) for t in (g1["token"], g2["token"], g2["token"], g3["token"])])

    def test_mark_survives_restart(self):
        self._story(kill9=False)

    def test_mark_survives_kill9(self):
        self._story(kill9=True)


# ----------------------------------------------------------------------------
class GuardMetricsTests(GuardBase):
    def metrics(self):
        st, hdrs, text = self.srv.request("GET", "/metrics")
        self.assertEqual(st, 200, text)
        sums = metric_sums(text)
        for name in GUARD_COUNTERS:
            self.assertIn(name, sums, "missing metric %s" % name)
        return sums

    def delta(self, before):
        after = self.metrics()
        return {n[len("leasegate_guard_"):-len("_total")]: after[n] - before[n] for n in GUARD_COUNTERS}

    def test_counters(self):
        lock, path = self.obj("met")
        g = self.acquire_ok(lock)
        before = self.metrics()
        for i in range(3):
            self.assert_written(self.send("PUT", path, b"x%d" % i, g["lease"]))
        self.assertEqual(self.delta(before),
                         {"forwarded": 3, "rejected_stale": 0, "rejected_missing": 0, "upstream_errors": 0})
        before = self.metrics()
        self.assert_token_required(self.send("PUT", path, b"x"))
        self.assert_token_required(self.send("DELETE", path, None, "abc"))
        other, other_path = self.obj("met-other")
        self.assert_stale(self.send("PUT", other_path, b"x", g["lease"]), other, None)
        self.assertEqual(self.delta(before),
                         {"forwarded": 0, "rejected_stale": 1, "rejected_missing": 2, "upstream_errors": 0})
        # Reads are forwarded too.
        before = self.metrics()
        self.assertEqual(self.send("GET", path)[0], 200)
        self.assertEqual(self.delta(before)["forwarded"], 1)


class GuardMetricsUpstreamErrorTests(unittest.TestCase):
    def test_upstream_errors_counted(self):
        with upstream.ClosedPort() as closed, upstream.SlowUpstream() as slow:
            srv = harness.Server(extra_args=["--guard", "/down/=" + closed.url,
                                             "--guard", "/slow/=" + slow.url, "--guard-timeout", "1"])
            try:
                before = metric_sums(srv.request("GET", "/metrics")[2])
                self.assertEqual(srv.request("GET", "/down/a")[0], 502)
                self.assertEqual(srv.request("GET", "/down/b")[0], 502)
                self.assertEqual(srv.request("GET", "/slow/c")[0], 504)
                after = metric_sums(srv.request("GET", "/metrics")[2])
                self.assertEqual(after["leasegate_guard_upstream_errors_total"]
                                 - before["leasegate_guard_upstream_errors_total"], 3)
                self.assertEqual(after["leasegate_guard_rejected_stale_total"]
                                 - before["leasegate_guard_rejected_stale_total"], 0)
            finally:
                srv.cleanup()


if __name__ == "__main__":
    harness.run_tests()
