"""Waiting: FIFO order, one wake per release, wait_ms timeouts, disconnects, 5,000 waiters."""

import os
import asyncio
import json
import socket
import threading
import time
import unittest

import harness


class WaiterThread(threading.Thread):
    """One acquire with wait_ms on its own connection; optionally releases after the grant."""

    def __init__(self, srv, name, owner, wait_ms=20000, ttl_ms=60000, release_after=None, log=None,
                 log_lock=None):
        super().__init__(daemon=True)
        self.srv, self.name, self.owner = srv, name, owner
        self.wait_ms, self.ttl_ms = wait_ms, ttl_ms
        self.release_after = release_after
        self.log, self.log_lock = log, log_lock
        self.resp = None
        self.exc = None
        self.done = threading.Event()
        self.t_done = None

    def run(self):
        c = self.srv.new_client(timeout=self.wait_ms / 1000.0 + 10)
        try:
            self.resp = c.acquire(self.name, self.owner, ttl_ms=self.ttl_ms, wait_ms=self.wait_ms)
            self.t_done = time.monotonic()
            st, _, b = self.resp
            if st == 200 and self.log is not None:
                with self.log_lock:
                    self.log.append((self.owner, b["token"]))
            if st == 200 and self.release_after is not None:
                time.sleep(self.release_after)
                self.release_resp = c.release(self.name, b["lease"])
        except Exception as e:
            self.exc = e
        finally:
            c.close()
            self.done.set()


class WaitingTests(harness.ServerTestCase):
    def acquire_ok(self, name, owner="holder", **kw):
        st, _, b = self.srv.acquire(name, owner, **kw)
        self.assertEqual(st, 200, b)
        return b

    def queue(self, name, owner, expected_waiters, **kw):
        w = WaiterThread(self.srv, name, owner, **kw)
        w.start()
        self.srv.wait_until(lambda: self.srv.waiters(name) == expected_waiters, timeout=5,
                            what="%s queued as waiter #%d" % (owner, expected_waiters))
        return w

    def test_fifo_chain(self):
        name = "wait/fifo"
        n = 8
        holder = self.acquire_ok(name, ttl_ms=60000)
        log, log_lock = [], threading.Lock()
        ws = []
        for i in range(n):
            ws.append(self.queue(name, "w%d" % i, i + 1, release_after=0.02, log=log, log_lock=log_lock))
            time.sleep(0.01)
        st, _, r = self.srv.release(name, holder["lease"])
        self.assertEqual(st, 200, r)
        for w in ws:
            w.join(20)
            self.assertFalse(w.is_alive())
            self.assertIsNone(w.exc, w.exc)
            self.assertEqual(w.resp[0], 200, w.resp)
            self.assertEqual(w.release_resp[0], 200, w.release_resp)
        self.assertEqual([o for o, _ in log], ["w%d" % i for i in range(n)])
        tokens = [t for _, t in log]
        self.assertEqual(tokens, sorted(tokens))
        self.assertGreater(tokens[0], holder["token"])
        st, _, g = self.srv.get_lock(name)
        self.assertEqual((g["held"], g["waiters"]), (False, 0), g)

    def _assert_exactly_one(self, ws, expected_idx, name, waiting_left):
        ws[expected_idx].done.wait(5)
        time.sleep(0.3)  # give a (wrong) second wake-up a chance to show
        done = [i for i, w in enumerate(ws) if w.done.is_set()]
        self.assertIn(expected_idx, done)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(g["waiters"], waiting_left, g)
        self.assertEqual(g["holder"]["owner"], ws[expected_idx].owner, g)
        return done

    def test_release_wakes_exactly_one(self):
        name = "wait/one"
        holder = self.acquire_ok(name, ttl_ms=60000)
        ws = [self.queue(name, "w%d" % i, i + 1) for i in range(3)]
        self.srv.release(name, holder["lease"])
        done = self._assert_exactly_one(ws, 0, name, 2)
        self.assertEqual(done, [0])
        self.assertEqual(ws[0].resp[0], 200, ws[0].resp)
        self.srv.release(name, ws[0].resp[2]["lease"])
        done = self._assert_exactly_one(ws, 1, name, 1)
        self.assertEqual(done, [0, 1])
        self.srv.release(name, ws[1].resp[2]["lease"])
        done = self._assert_exactly_one(ws, 2, name, 0)
        self.assertEqual(done, [0, 1, 2])
        self.srv.release(name, ws[2].resp[2]["lease"])
        for w in ws:
            w.join(5)

    def test_expiry_wakes_exactly_one(self):
        name = "wait/expiry-one"
        holder = self.acquire_ok(name, ttl_ms=60000)
        ws = [self.queue(name, "w%d" % i, i + 1, ttl_ms=60000) for i in range(3)]
        # The lease runs out soon only once all three are queued, however slow this machine is.
        st, _, r = self.srv.renew(name, holder["lease"], ttl_ms=200)
        self.assertEqual(st, 200, r)
        done = self._assert_exactly_one(ws, 0, name, 2)
        self.assertEqual(done, [0])
        self.assertEqual(ws[0].resp[0], 200)
        for i in range(3):
            if ws[i].resp and ws[i].resp[0] == 200:
                self.srv.release(name, ws[i].resp[2]["lease"])
            if i + 1 < 3:
                ws[i + 1].done.wait(5)
        for w in ws:
            w.join(5)
            self.assertEqual(w.resp[0], 200, w.resp)

    def test_wait_timeout_lock_held(self):
        name = "wait/timeout"
        holder = self.acquire_ok(name, ttl_ms=60000, metadata={"why": "test"})
        long_waiter = self.queue(name, "long", 1, wait_ms=20000)
        t0 = time.monotonic()
        st, _, b = self.srv.acquire(name, "impatient", wait_ms=300)
        elapsed = time.monotonic() - t0
        raw = self.srv.last_text
        self.assertEqual(st, 409, b)
        self.assertGreaterEqual(elapsed, 0.25)
        self.assertLess(elapsed, 5.0)
        self.assertEqual(b["error"], "lock_held")
        self.assertIsInstance(b["message"], str)
        self.assertEqual(b["name"], name)
        h = b["holder"]
        for k in ("owner", "token", "ttl_ms", "acquired_at_ms", "expires_at_ms", "count", "metadata"):
            self.assertIn(k, h)
        self.assertEqual(h["owner"], "holder")
        self.assertEqual(h["token"], holder["token"])
        self.assertEqual(h["metadata"], {"why": "test"})
        self.assertFalse(harness.find_key(b, "lease"), b)
        self.assertNotIn(holder["lease"], raw)
        self.assertEqual(b["waiters"], 1, "waiters still queued (the long waiter) %r" % b)
        # wait_ms 0 answers at once
        t0 = time.monotonic()
        st, _, b = self.srv.acquire(name, "try-once")
        self.assertEqual(st, 409, b)
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertEqual(b["error"], "lock_held")
        self.assertFalse(harness.find_key(b, "lease"), b)
        self.assertNotIn(holder["lease"], self.srv.last_text)
        self.assertEqual(b["waiters"], 1)
        self.assertEqual(self.srv.waiters(name), 1)
        self.srv.release(name, holder["lease"])
        long_waiter.join(10)
        self.assertEqual(long_waiter.resp[0], 200, long_waiter.resp)
        self.assertEqual(long_waiter.resp[2]["owner"], "long")
        self.srv.release(name, long_waiter.resp[2]["lease"])

    def _raw_waiter(self, name, owner, wait_ms=20000):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        body = json.dumps({"owner": owner, "ttl_ms": 60000, "wait_ms": wait_ms}).encode()
        s.sendall(("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % (name, len(body))).encode() + body)
        return s

    def test_disconnected_waiter_leaves_queue(self):
        name = "wait/disconnect-count"
        holder = self.acquire_ok(name, ttl_ms=60000)
        dead = self._raw_waiter(name, "dead")
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="raw waiter queued")
        live = self.queue(name, "live", 2)
        dead.close()
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, timeout=5,
                            what="disconnected waiter leaving the queue (waiters 2 -> 1)")
        self.srv.release(name, holder["lease"])
        live.join(10)
        self.assertEqual(live.resp[0], 200, live.resp)
        self.srv.release(name, live.resp[2]["lease"])

    def test_disconnected_waiter_skipped_on_release(self):
        name = "wait/disconnect-skip"
        holder = self.acquire_ok(name, ttl_ms=60000)
        dead = self._raw_waiter(name, "dead")
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="raw waiter queued")
        live = self.queue(name, "live", 2)
        dead.close()
        time.sleep(0.2)
        st, _, r = self.srv.release(name, holder["lease"])
        self.assertEqual(st, 200, r)
        live.done.wait(5)
        self.assertTrue(live.done.is_set(), "live waiter not granted after release (dead waiter got it?)")
        self.assertEqual(live.resp[0], 200, live.resp)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(g["holder"]["owner"], "live", g)
        self.assertEqual(g["waiters"], 0, g)
        self.srv.release(name, live.resp[2]["lease"])

    def test_mixed_wait_deadlines(self):
        """Waiters with short wait_ms time out from the middle of the queue; order of the rest holds."""
        name = "wait/mixed"
        holder = self.acquire_ok(name, ttl_ms=60000)
        # The short ones must outlast the queueing of all five, even on a slow machine.
        waits = [15000, 4000, 15000, 4500, 15000]
        log, log_lock = [], threading.Lock()
        ws = [self.queue(name, "w%d" % i, i + 1, wait_ms=wm, release_after=0.02, log=log, log_lock=log_lock)
              for i, wm in enumerate(waits)]
        for i in (1, 3):
            ws[i].join(10)
            self.assertEqual(ws[i].resp[0], 409, ws[i].resp)
            self.assertEqual(ws[i].resp[2]["error"], "lock_held")
        self.assertEqual(self.srv.waiters(name), 3)
        self.srv.release(name, holder["lease"])
        for i in (0, 2, 4):
            ws[i].join(10)
            self.assertEqual(ws[i].resp[0], 200, ws[i].resp)
        self.assertEqual([o for o, _ in log], ["w0", "w2", "w4"])
        st, _, g = self.srv.get_lock(name)
        self.assertEqual((g["held"], g["waiters"]), (False, 0), g)

    def test_try_once_concurrent_one_winner(self):
        name = "wait/race"
        n = 16
        barrier = threading.Barrier(n, timeout=10)
        results = [None] * n

        def racer(i):
            c = self.srv.new_client()
            try:
                c.request("GET", "/healthz")  # connect before the barrier
                barrier.wait()
                results[i] = c.acquire(name, "r%d" % i, ttl_ms=60000)
            except Exception as e:
                results[i] = e
            finally:
                c.close()

        ts = [threading.Thread(target=racer, args=(i,), daemon=True) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(15)
        self.assertTrue(all(isinstance(r, tuple) for r in results), results)
        winners = [r for r in results if r[0] == 200]
        self.assertEqual(len(winners), 1, [r[0] for r in results])
        for r in results:
            if r[0] != 200:
                self.assertEqual((r[0], r[2]["error"]), (409, "lock_held"), r)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(g["holder"]["token"], winners[0][2]["token"])
        self.srv.release(name, winners[0][2]["lease"])

    def test_no_overtaking_on_handover(self):
        """A try-once sent together with the release never takes the lock from the queued waiter."""
        for it in range(10):
            name = "wait/overtake/%d" % it
            holder = self.acquire_ok(name, ttl_ms=60000)
            w = self.queue(name, "queued", 1, ttl_ms=60000)
            a = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
            b = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
            try:
                rel = json.dumps({"lease": holder["lease"]}).encode()
                intr = json.dumps({"owner": "intruder", "ttl_ms": 60000}).encode()
                ra = ("POST /v1/locks/%s/release HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n\r\n" % (name, len(rel))).encode() + rel
                rb = ("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n\r\n" % (name, len(intr))).encode() + intr
                a.sendall(ra)
                b.sendall(rb)
                sta, _, _ = harness.read_response(a, timeout=10)
                stb, _, bodyb = harness.read_response(b, timeout=10)
            finally:
                a.close()
                b.close()
            self.assertEqual(sta, 200)
            self.assertEqual(stb, 409, "iteration %d: intruder overtook the queued waiter: %r" % (it, bodyb))
            w.join(10)
            self.assertEqual(w.resp[0], 200, w.resp)
            self.srv.release(name, w.resp[2]["lease"])

    def test_undeliverable_grant_released_at_once(self):
        """A waiter that vanishes (RST) just as it is granted must not keep the lock until its TTL."""
        import struct
        for it in range(5):
            name = "wait/undeliverable/%d" % it
            holder = self.acquire_ok(name, ttl_ms=60000)
            dead = self._raw_waiter(name, "dead")
            self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="raw waiter queued")
            live = self.queue(name, "live", 2)
            dead.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            dead.close()  # RST
            st, _, r = self.srv.release(name, holder["lease"])
            self.assertEqual(st, 200, r)
            live.done.wait(5)
            self.assertTrue(live.done.is_set(), "iteration %d: live waiter not granted within 5 s" % it)
            self.assertEqual(live.resp[0], 200, live.resp)
            st, _, g = self.srv.get_lock(name)
            self.assertEqual(g["holder"]["owner"], "live", g)
            self.srv.release(name, live.resp[2]["lease"])

    def test_waiter_limits_overloaded(self):
        with harness.Server(["--max-waiters-per-lock", "2", "--max-waiters", "3"]) as srv:
            st, _, h1 = srv.acquire("lim/a", "h", ttl_ms=60000)
            self.assertEqual(st, 200)
            st, _, h2 = srv.acquire("lim/b", "h", ttl_ms=60000)
            self.assertEqual(st, 200)
            ws = []
            for i in range(2):
                w = WaiterThread(srv, "lim/a", "a%d" % i, wait_ms=20000, release_after=0.01)
                w.start()
                ws.append(w)
                srv.wait_until(lambda: srv.waiters("lim/a") == i + 1, what="lim/a waiter")
            t0 = time.monotonic()
            st, _, b = srv.acquire("lim/a", "third", wait_ms=5000)
            self.assertEqual(st, 503, b)
            self.assertEqual(b["error"], "overloaded")
            self.assertIsInstance(b["message"], str)
            self.assertLess(time.monotonic() - t0, 3.0)
            self.assertEqual(srv.waiters("lim/a"), 2)
            w = WaiterThread(srv, "lim/b", "b0", wait_ms=20000, release_after=0.01)
            w.start()
            ws.append(w)
            srv.wait_until(lambda: srv.waiters("lim/b") == 1, what="lim/b waiter")
            st, _, b = srv.acquire("lim/b", "over-total", wait_ms=5000)
            self.assertEqual(st, 503, b)
            self.assertEqual(b["error"], "overloaded")
            # Try-once is unaffected by waiter limits: plain lock_held.
            st, _, b = srv.acquire("lim/b", "try-once")
            self.assertEqual((st, b["error"]), (409, "lock_held"), b)
            srv.release("lim/a", h1["lease"])
            srv.release("lim/b", h2["lease"])
            for w in ws:
                w.join(10)
                self.assertIsNone(w.exc, w.exc)
                self.assertEqual(w.resp[0], 200, w.resp)
                self.assertEqual(w.release_resp[0], 200, w.release_resp)


# --- 5,000 waiters over asyncio raw sockets -------------------------------------

async def _read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        data = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        data = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            data += chunk[:size]
            if size == 0:
                break
    else:
        data = await reader.read()
    try:
        body = json.loads(data)
    except ValueError:
        body = data.decode("utf-8", "replace")
    return status, headers, body


def _request_bytes(method, path, body=None):
    payload = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (method, path)
    if body is not None:
        head += "Content-Type: application/json\r\n"
    head += "Content-Length: %d\r\n\r\n" % len(payload)
    return head.encode() + payload


class ManyWaitersTest(unittest.TestCase):
    N = 5000
    TOTAL_TIMEOUT_S = 240.0
    RSS_LIMIT_KB = 25 * 1024  # about 17 MB seen; waiters suspended inside libmicrohttpd took 33 MB

    def setUp(self):
        harness.raise_nofile_limit()
        self.srv = harness.Server()

    def tearDown(self):
        self.srv.cleanup()

    def test_5000_waiters_fifo(self):
        result = asyncio.run(asyncio.wait_for(self._run(), self.TOTAL_TIMEOUT_S))
        grants, rss_kb, queue_s, drain_s = result
        print("\n  5000 waiters: queued in %.1f s, drained in %.1f s, server RSS while waiting %d kB"
              % (queue_s, drain_s, rss_kb))
        # AddressSanitizer's shadow memory and quarantine inflate RSS: the
        # memory bound is only meaningful for the normal build.
        if os.environ.get("LEASEGATE_SANITIZED") != "1":
            self.assertLess(rss_kb, self.RSS_LIMIT_KB, "server RSS %d kB with %d waiters" % (rss_kb, self.N))
        self.assertEqual(len(grants), self.N)
        bad = [g for g in grants if g[1] != 200]
        self.assertEqual(bad[:5], [], "waiters not granted")
        order = [g[0] for g in grants]
        first_wrong = next((k for k, i in enumerate(order) if i != k), None)
        self.assertIsNone(first_wrong, "grant order differs from arrival order at position %r: %r"
                          % (first_wrong, order[first_wrong:first_wrong + 5] if first_wrong is not None else None))
        owners = [g[2] for g in grants]
        self.assertEqual(owners, ["w%d" % i for i in range(self.N)])
        tokens = [g[3] for g in grants]
        self.assertTrue(all(a < b for a, b in zip(tokens, tokens[1:])), "tokens not strictly increasing")
        self.assertTrue(all(g[4] for g in grants), "a waiter's release failed")

    def test_mass_disconnect(self):
        """1,000 waiters hang up at once: the queue empties and the lock still works."""
        n = 1000
        name = "wait/mass-disconnect"
        st, _, holder = self.srv.acquire(name, "holder", ttl_ms=600000)
        self.assertEqual(st, 200, holder)

        async def run():
            conns = []
            for start in range(0, n, 250):
                conns += await asyncio.gather(*[asyncio.open_connection("127.0.0.1", self.srv.port)
                                                for _ in range(start, min(start + 250, n))])
            for i, (_r, w) in enumerate(conns):
                w.write(_request_bytes("POST", "/v1/locks/%s/acquire" % name,
                                       {"owner": "gone%d" % i, "wait_ms": 120000}))
            await asyncio.gather(*[w.drain() for _r, w in conns])
            return conns

        loop = asyncio.new_event_loop()
        try:
            conns = loop.run_until_complete(asyncio.wait_for(run(), 60))
            self.srv.wait_until(lambda: self.srv.waiters(name) == n, timeout=20, what="%d waiters queued" % n)
            for _r, w in conns:
                w.close()
            loop.run_until_complete(asyncio.sleep(0.05))
        finally:
            loop.close()
        self.srv.wait_until(lambda: self.srv.waiters(name) == 0, timeout=10,
                            what="all disconnected waiters leaving the queue")
        st, _, r = self.srv.release(name, holder["lease"])
        self.assertEqual(st, 200, r)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual((g["held"], g["waiters"]), (False, 0), g)
        st, _, b = self.srv.acquire(name, "after", ttl_ms=1000)
        self.assertEqual(st, 200, b)
        self.assertGreater(b["token"], holder["token"])
        st, _, text = self.srv.request("GET", "/metrics")
        self.assertRegex(text, r"(?m)^leasegate_waiters 0(\.0+)?$")

    def test_mass_wait_timeouts(self):
        """2,000 waiters with spread wait_ms all time out with 409 lock_held near their deadlines."""
        n = 2000
        name = "wait/mass-timeout"
        st, _, holder = self.srv.acquire(name, "holder", ttl_ms=600000)
        self.assertEqual(st, 200, holder)

        async def one(i, r, w, wait_ms):
            t0 = time.monotonic()
            w.write(_request_bytes("POST", "/v1/locks/%s/acquire" % name,
                                   {"owner": "t%d" % i, "wait_ms": wait_ms}))
            await w.drain()
            try:
                st, _, b = await asyncio.wait_for(_read_response(r), 30)
                return st, b.get("error") if isinstance(b, dict) else b, time.monotonic() - t0, wait_ms
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                return repr(e), None, time.monotonic() - t0, wait_ms
            finally:
                w.close()

        async def run():
            conns = []
            for start in range(0, n, 250):
                conns += await asyncio.gather(*[asyncio.open_connection("127.0.0.1", self.srv.port)
                                                for _ in range(start, min(start + 250, n))])
            return await asyncio.gather(*[one(i, r, w, 500 + (i * 7919) % 1000)
                                          for i, (r, w) in enumerate(conns)])

        results = asyncio.run(asyncio.wait_for(run(), 90))
        bad = [x for x in results if x[0] != 409 or x[1] != "lock_held"]
        self.assertEqual(bad[:5], [], "%d waiters did not time out with lock_held" % len(bad))
        early = [x for x in results if x[2] < x[3] / 1000.0 - 0.05]
        self.assertEqual(early[:5], [], "answered before wait_ms passed")
        late = [x for x in results if x[2] > x[3] / 1000.0 + 5.0]
        self.assertEqual(late[:5], [], "answered far after wait_ms passed")
        self.assertEqual(self.srv.waiters(name), 0)
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(g["holder"]["token"], holder["token"])

    async def _run(self):
        name = "wait/many"
        port = self.srv.port
        ctl_r, ctl_w = await asyncio.open_connection("127.0.0.1", port)

        async def ctl(method, path, body=None):
            ctl_w.write(_request_bytes(method, path, body))
            await ctl_w.drain()
            return await _read_response(ctl_r)

        st, _, holder = await ctl("POST", "/v1/locks/%s/acquire" % name, {"owner": "holder", "ttl_ms": 600000})
        self.assertEqual(st, 200, holder)

        grants = []  # (index, status, owner, token, release_ok) in the order responses arrive

        async def waiter(i, reader, writer):
            try:
                st, _, b = await _read_response(reader)
                if st != 200:
                    grants.append((i, st, b, None, False))
                    return
                grants.append((i, st, b["owner"], b["token"], None))
                slot = len(grants) - 1
                writer.write(_request_bytes("POST", "/v1/locks/%s/release" % name, {"lease": b["lease"]}))
                await writer.drain()
                rst, _, rb = await _read_response(reader)
                g = grants[slot]
                grants[slot] = g[:4] + (rst == 200 and rb.get("released") is True,)
            except (OSError, asyncio.IncompleteReadError) as e:
                grants.append((i, "error: %r" % e, None, None, False))
            finally:
                writer.close()

        # Connections are opened in parallel batches just ahead of use (so none sits idle
        # long enough to meet --idle-timeout); requests are queued one at a time.
        conns = []
        t_queue = time.monotonic()
        tasks = []
        for i in range(self.N):
            if i == len(conns):
                batch = await asyncio.gather(*[asyncio.open_connection("127.0.0.1", port)
                                               for _ in range(i, min(i + 250, self.N))])
                conns.extend(batch)
            reader, writer = conns[i]
            writer.write(_request_bytes("POST", "/v1/locks/%s/acquire" % name,
                                        {"owner": "w%d" % i, "ttl_ms": 60000, "wait_ms": 600000}))
            await writer.drain()
            tasks.append(asyncio.ensure_future(waiter(i, reader, writer)))
            # Arrival order: do not send the next one until the server counts this one.
            for _poll in range(2000):
                st, _, g = await ctl("GET", "/v1/locks/%s" % name)
                self.assertEqual(st, 200, g)
                if g["waiters"] >= i + 1:
                    break
                await asyncio.sleep(0.001 if _poll > 3 else 0)
            self.assertEqual(g["waiters"], i + 1, "waiter %d not counted by the server" % i)
        queue_s = time.monotonic() - t_queue

        rss_kb = self.srv.rss_kb()
        st, _, g = await ctl("GET", "/v1/locks/%s" % name)
        self.assertEqual(g["waiters"], self.N)
        # Each waits outside libmicrohttpd (a socket and a request), and gets
        # its answer and sends its release on the same connection.
        st, _, text = await ctl("GET", "/metrics")
        self.assertEqual(harness.parse_metrics(text)["leasegate_connections_parked"], self.N)
        self.assertEqual(len(grants), 0, "a waiter was answered before the holder released: %r" % grants[:3])

        t_drain = time.monotonic()
        st, _, r = await ctl("POST", "/v1/locks/%s/release" % name, {"lease": holder["lease"]})
        self.assertEqual(st, 200, r)
        await asyncio.gather(*tasks)
        drain_s = time.monotonic() - t_drain
        # On a slow disk the drain can outlast --idle-timeout: ask on a fresh connection.
        ctl_w.close()
        ctl_r, ctl_w = await asyncio.open_connection("127.0.0.1", port)
        st, _, g = await ctl("GET", "/v1/locks/%s" % name)
        self.assertEqual((g["held"], g["waiters"]), (False, 0), g)
        ctl_w.close()
        return grants, rss_kb, queue_s, drain_s


if __name__ == "__main__":
    harness.run_tests()
