"""Restarts: holders survive SIGTERM and kill -9; expired leases are released on start."""

import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import unittest

import harness
import upstream


class RestartTests(unittest.TestCase):
    def setUp(self):
        self.srv = harness.Server()
        self.tokens = []

    def tearDown(self):
        self.srv.cleanup()

    def acquire_ok(self, name, owner="r", **kw):
        st, _, b = self.srv.acquire(name, owner, **kw)
        self.assertEqual(st, 200, b)
        self.tokens.append(b["token"])
        return b

    def get(self, name):
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(st, 200, g)
        return g

    def _holder_survives(self, kill9):
        name = "rs/holder"
        b = self.acquire_ok(name, owner="keeper", ttl_ms=120000, metadata={"host": "h", "n": [1, 2]})
        st, _, rn = self.srv.renew(name, b["lease"], ttl_ms=110000)
        self.assertEqual(st, 200, rn)
        # A reentered holder keeps its count too.
        st, _, re = self.srv.acquire(name, "keeper", lease=b["lease"], ttl_ms=100000)
        self.assertEqual(st, 200, re)
        before = self.get(name)
        for i in range(5):
            self.acquire_ok("rs/other/%d" % i, ttl_ms=60000)
        if kill9:
            self.srv.kill9()
        else:
            self.assertEqual(self.srv.stop(), 0, self.srv.stderr_text())
        self.srv.start()
        after = self.get(name)
        # The change index is the one thing a restart moves, and only forward (each run
        # starts it from its start time), so a watcher from before never waits for nothing.
        self.assertGreater(after.pop("index"), before.pop("index"))
        self.assertEqual(after, before, "lock state changed across restart")
        self.assertTrue(after["held"])
        self.assertEqual(after["holder"]["token"], b["token"])
        self.assertEqual(after["holder"]["expires_at_ms"], re["expires_at_ms"])
        self.assertEqual(after["holder"]["count"], 2)
        self.assertEqual(after["holder"]["metadata"], {"host": "h", "n": [1, 2]})
        # Still held against others, and the lease still works.
        st, _, r = self.srv.acquire(name, "intruder")
        self.assertEqual((st, r["error"]), (409, "lock_held"), r)
        st, _, r = self.srv.renew(name, b["lease"], ttl_ms=60000)
        self.assertEqual(st, 200, r)
        self.assertEqual(r["token"], b["token"])
        # Tokens after restart are larger than all before.
        nb = self.acquire_ok("rs/new", ttl_ms=60000)
        self.assertGreater(nb["token"], max(self.tokens[:-1]))
        st, _, r = self.srv.release(name, b["lease"])
        self.assertEqual((st, r["count"]), (200, 1), r)
        st, _, r = self.srv.release(name, b["lease"])
        self.assertEqual((st, r["released"]), (200, True), r)

    def test_holder_survives_sigterm(self):
        self._holder_survives(kill9=False)

    def test_holder_survives_kill9(self):
        self._holder_survives(kill9=True)

    def _expired_while_down(self, kill9):
        short = self.acquire_ok("rs/short", ttl_ms=700)
        long_ = self.acquire_ok("rs/long", ttl_ms=120000)
        if kill9:
            self.srv.kill9()
        else:
            self.assertEqual(self.srv.stop(), 0)
        # Wait (bounded) until the short lease is well past its expiry.
        while harness.now_ms() < short["expires_at_ms"] + 300:
            time.sleep(0.05)
        self.srv.start()
        g = self.get("rs/short")
        self.assertFalse(g["held"], g)
        self.assertIsNone(g["holder"])
        self.assertEqual(g["last_token"], short["token"])
        self.assertTrue(self.get("rs/long")["held"])
        st, _, r = self.srv.renew("rs/short", short["lease"])
        self.assertEqual(st, 409, r)
        self.assertEqual(r["error"], "not_holder")
        # The contract allows the lease to be remembered as expired or forgotten.
        self.assertIn(r["reason"], ("expired", "unknown"), r)
        b = self.acquire_ok("rs/short", owner="next", ttl_ms=60000)
        self.assertGreater(b["token"], max(short["token"], long_["token"]))
        # Listing also shows it free (it has been granted before, so it is listed).
        st, _, lst = self.srv.request("GET", "/v1/locks?prefix=rs/&limit=1000")
        self.assertEqual(st, 200, lst)
        names = [x["name"] for x in lst["locks"]]
        self.assertIn("rs/short", names)
        self.assertIn("rs/long", names)

    def test_expired_while_down_sigterm(self):
        self._expired_while_down(kill9=False)

    def test_expired_while_down_kill9(self):
        self._expired_while_down(kill9=True)

    def test_a_version_3_database_is_migrated(self):
        """Schema 3 kept the lease history keyed by lease (a page written per ended lease);
        4 keys it by seq. A version 3 database keeps its counter, its holder and its
        history (the reason a released lease gives) through the migration."""
        harness.sqlite_only(self, "migrates an old SQLite schema")
        import sqlite3
        import uuid
        d = tempfile.mkdtemp(prefix="leasegate-v3-")
        self.addCleanup(shutil.rmtree, d, True)
        db = sqlite3.connect(os.path.join(d, "leasegate.db"))
        released, held = uuid.uuid4(), uuid.uuid4()
        now = int(time.time() * 1000)
        db.executescript(
            "PRAGMA journal_mode=WAL;"
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
            "CREATE TABLE locks(name TEXT PRIMARY KEY, last_token INTEGER NOT NULL, lease BLOB, owner TEXT,"
            "  token INTEGER, ttl_ms INTEGER, acquired_at_ms INTEGER, expires_at_ms INTEGER, count INTEGER,"
            "  metadata TEXT, deadline_ms INTEGER, boot INTEGER) WITHOUT ROWID;"
            "CREATE TABLE fences(resource TEXT PRIMARY KEY, max_token INTEGER NOT NULL) WITHOUT ROWID;"
            "CREATE TABLE fence_floors(bucket INTEGER PRIMARY KEY, floor INTEGER NOT NULL);"
            "CREATE TABLE guard_marks(lock TEXT PRIMARY KEY, max_token INTEGER NOT NULL) WITHOUT ROWID;"
            "CREATE TABLE lease_history(lease BLOB PRIMARY KEY, lock TEXT NOT NULL, token INTEGER NOT NULL,"
            "  how INTEGER NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;"
            "CREATE INDEX lease_history_seq ON lease_history(seq);"
            "INSERT INTO meta VALUES('schema_version', 3), ('last_token', 7), ('boot', 0);")
        db.execute("INSERT INTO locks(name, last_token) VALUES('v3/free', 6)")
        db.execute("INSERT INTO locks VALUES('v3/held', 7, ?, 'keeper', 7, 600000, ?, ?, 1, '{}', NULL, NULL)",
                   (held.bytes, now, now + 600000))
        db.execute("INSERT INTO lease_history VALUES(?, 'v3/free', 6, 2, 41)", (released.bytes,))
        db.commit()
        db.close()
        with harness.Server(data_dir=d) as srv:
            st, _, r = srv.renew("v3/free", str(released))
            self.assertEqual((st, r.get("reason")), (409, "released"), r)
            st, _, r = srv.renew("v3/held", str(held))
            self.assertEqual(st, 200, r)
            st, _, g = srv.acquire("v3/free", "new")
            self.assertEqual((st, g.get("token")), (200, 8), g)
            st, _, r = srv.release("v3/free", g["lease"])
            self.assertEqual(st, 200, r)
        db = sqlite3.connect(os.path.join(d, "leasegate.db"))
        self.assertEqual(db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0], 14)
        # Version 14 keeps, with each lock's value, the request_ids of its writer's last writes.
        self.assertIn("writes", [c[1] for c in db.execute("PRAGMA table_info(lock_values)")])
        # Version 9 keeps when the guard last let a write of each lock through.
        self.assertIn("at_ms", [c[1] for c in db.execute("PRAGMA table_info(guard_marks)")])
        # Version 11: every lease a row of the lock space, a name's own row beside them (token 0).
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.assertIn("lockspace", tables)
        self.assertFalse({"locks", "semaphores", "holders"} & tables, tables)
        self.assertEqual(db.execute("SELECT name, last_token FROM lockspace WHERE token = 0 ORDER BY name").fetchall(),
                         [("v3/free", 8), ("v3/held", 7)])
        self.assertEqual(db.execute("SELECT name, token, owner, mode FROM lockspace WHERE token <> 0").fetchall(),
                         [("v3/held", 7, "keeper", 0)])
        self.assertEqual(db.execute("SELECT seq, lock, token, how FROM lease_history ORDER BY seq").fetchall(),
                         [(41, "v3/free", 6, 2), (42, "v3/free", 8, 2)])
        db.close()

    def test_last_token_and_free_locks_survive(self):
        b = self.acquire_ok("rs/freed", ttl_ms=60000)
        self.srv.release("rs/freed", b["lease"])
        self.srv.restart(kill9=True)
        g = self.get("rs/freed")
        self.assertEqual((g["held"], g["last_token"]), (False, b["token"]), g)
        st, _, r = self.srv.release("rs/freed", b["lease"])
        self.assertEqual(st, 409, r)
        self.assertIn(r["reason"], ("released", "unknown"), r)
        self.srv.restart(kill9=False)
        g = self.get("rs/freed")
        self.assertEqual((g["held"], g["last_token"]), (False, b["token"]), g)

    def test_many_restarts_tokens_grow(self):
        for i in range(4):
            self.acquire_ok("rs/cycle/%d" % i, ttl_ms=60000)
            self.srv.restart(kill9=bool(i % 2))
        nb = self.acquire_ok("rs/cycle/final")
        self.assertEqual(self.tokens, sorted(self.tokens))
        self.assertEqual(len(self.tokens), len(set(self.tokens)))
        # All held locks still held with their tokens.
        for i in range(4):
            g = self.get("rs/cycle/%d" % i)
            self.assertEqual(g["holder"]["token"], self.tokens[i])

    def test_idle_locks_are_forgotten_and_tokens_still_grow(self):
        # --forget-idle-after: a name free that long leaves memory and the database;
        # the token counter must not go back even when every row is gone, and a full
        # --max-locks table frees up again.
        srv = harness.Server(extra_args=["--forget-idle-after", "1", "--max-locks", "2"])
        try:
            grants = []
            for name in ("fg/a", "fg/b"):
                st, _, g = srv.acquire(name, "f", ttl_ms=60000)
                self.assertEqual(st, 200, g)
                grants.append(g)
            # Checked while both are held (held locks are never forgotten), so a
            # slow machine cannot forget one before the check.
            st, _, b = srv.acquire("fg/c", "f")
            self.assertEqual(st, 503, b)
            self.assertIn("--max-locks", b["message"])
            for g in grants:
                self.assertEqual(srv.release(g["name"], g["lease"])[0], 200)
            tokens = [g["token"] for g in grants]

            def forgotten():
                return harness.parse_metrics(srv.request("GET", "/metrics")[2]).get(
                    "leasegate_locks_forgotten_total", 0) >= 2
            srv.wait_until(forgotten, timeout=15, what="idle locks forgotten")
            st, _, g = srv.get_lock("fg/a")
            self.assertEqual((st, g["held"], g["last_token"]), (200, False, 0), g)
            srv.restart(kill9=True)
            st, _, g = srv.acquire("fg/c", "f", ttl_ms=60000)
            self.assertEqual(st, 200, g)
            self.assertGreater(g["token"], max(tokens), "a token went back after its rows were forgotten")
        finally:
            srv.cleanup()

    def test_sigterm_then_a_new_waiter_arrives(self):
        # A long-poll that arrives during the shutdown drain used to be queued and
        # stay suspended, and libmicrohttpd aborts when stopped with suspended
        # connections. Now it is answered 503 and the server exits 0.
        # A guarded request to an upstream that never answers keeps the drain
        # (and so the server) up for seconds, long enough for the late waiter to
        # arrive however slow this machine is.
        slow = upstream.SlowUpstream()
        self.addCleanup(slow.close)
        srv = harness.Server(extra_args=["--guard", "/slow/=" + slow.url, "--guard-timeout", "60"])
        self.addCleanup(srv.cleanup)
        name = "rs/late"
        st, _, g = srv.acquire(name, "h", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        stuck = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        self.addCleanup(stuck.close)
        stuck.sendall(b"GET /slow/never HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        srv.wait_until(lambda: slow.counts()[1] == 1, what="the guarded request at the upstream")
        c = srv.new_client(timeout=10)
        out = {}

        def waiter():
            try:
                out["resp"] = c.acquire(name, "w", wait_ms=30000)
            except Exception as e:
                out["exc"] = e

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        srv.wait_until(lambda: srv.waiters(name) == 1, what="first waiter queued")
        os.kill(srv.pid, signal.SIGTERM)
        t.join(10)  # the first waiter is answered 503 by the shutdown
        self.assertEqual(out.get("resp", (None,))[0], 503, out)
        late = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        try:
            body = b'{"owner":"late","wait_ms":30000}'
            late.sendall(b"POST /v1/locks/rs/late/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            st, _, text = harness.read_response(late, timeout=10)
            self.assertEqual(st, 503, text)
        finally:
            late.close()
        self.assertEqual(srv.stop(timeout=30), 0, srv.stderr_text())

    def test_sigterm_under_load_exits_cleanly_and_leaves_no_unknown_holder(self):
        """16 clients acquire and release as fast as they can while SIGTERM comes:
        the stop exits 0 (no connection left suspended inside libmicrohttpd), and
        after a restart every held lock is one whose grant its client received
        and had not released (a grant nobody received must not survive)."""
        import json
        for rnd in range(3):
            port = self.srv.port
            stop = threading.Event()
            holding = {}  # client -> lease it received and has not seen released

            def worker(i):
                name = "rs/load/%d/%d" % (rnd, i)
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    rr = harness.RawReader(s)
                    while not stop.is_set():
                        body = json.dumps({"owner": "o%d" % i, "ttl_ms": 60000}).encode()
                        s.sendall(b"POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
                                  % (name.encode(), len(body)) + body)
                        st, _, data = rr.read_response(timeout=5)
                        if st != 200:
                            return
                        holding[i] = json.loads(data)["lease"]
                        body = json.dumps({"lease": holding[i]}).encode()
                        s.sendall(b"POST /v1/locks/%s/release HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
                                  % (name.encode(), len(body)) + body)
                        st, _, _ = rr.read_response(timeout=5)
                        if st != 200:
                            return
                        holding.pop(i, None)
                except (OSError, ConnectionError, ValueError):
                    return

            threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(16)]
            for t in threads:
                t.start()
            time.sleep(0.5)
            rc = self.srv.stop(timeout=30)
            stop.set()
            for t in threads:
                t.join(10)
            self.assertEqual(rc, 0, "round %d: exit status %s\n%s" % (rnd, rc, self.srv.stderr_text()))
            self.srv.start()
            for i in range(16):
                g = self.get("rs/load/%d/%d" % (rnd, i))
                if g["held"]:
                    self.assertIn(i, holding, "round %d: lock %d held by a grant no client received: %r"
                                  % (rnd, i, g))

    def test_sigterm_answers_waiters_503(self):
        name = "rs/waited"
        self.acquire_ok(name, ttl_ms=60000)
        out = {}

        def waiter():
            c = self.srv.new_client()
            try:
                out["resp"] = c.acquire(name, "w", wait_ms=30000)
            except Exception as e:
                out["exc"] = e
            finally:
                c.close()

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="waiter queued")
        t0 = time.monotonic()
        rc = self.srv.stop()
        self.assertEqual(rc, 0, self.srv.stderr_text())
        self.assertLess(time.monotonic() - t0, 8.0, "graceful stop took too long")
        t.join(10)
        self.assertNotIn("exc", out, out)
        st, _, b = out["resp"]
        self.assertEqual(st, 503, b)
        self.assertEqual(b["error"], "overloaded")
        self.assertIn("shutting down", b["message"])
        self.srv.start()
        self.assertTrue(self.get(name)["held"])

    def test_sigterm_with_many_waiters(self):
        """SIGTERM with 300 waiters on 3 locks: every waiter gets 503 overloaded, exit 0, state kept."""
        import asyncio
        import json
        holders = {}
        for k in range(3):
            holders["rs/many/%d" % k] = self.acquire_ok("rs/many/%d" % k, ttl_ms=120000)
        n = 300
        port = self.srv.port

        async def one(i):
            name = "rs/many/%d" % (i % 3)
            r, w = await asyncio.open_connection("127.0.0.1", port)
            body = json.dumps({"owner": "w%d" % i, "wait_ms": 60000}).encode()
            w.write(("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\n\r\n" % (name, len(body))).encode() + body)
            await w.drain()
            try:
                head = await r.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                clen = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                data = await r.readexactly(clen[0]) if clen else await r.read()
                return status, json.loads(data)
            except (OSError, asyncio.IncompleteReadError) as e:
                return "no response: %r" % e, None
            finally:
                w.close()

        async def run():
            tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
            for _ in range(400):
                counts = [self.srv.waiters("rs/many/%d" % k) for k in range(3)]
                if sum(counts) == n:
                    break
                await asyncio.sleep(0.025)
            self.assertEqual(sum(counts), n)
            loop = asyncio.get_running_loop()
            rc = await loop.run_in_executor(None, self.srv.stop)
            results = await asyncio.wait_for(asyncio.gather(*tasks), 20)
            return rc, results

        rc, results = asyncio.run(run())
        self.assertEqual(rc, 0, self.srv.stderr_text())
        bad = [r for r in results if r[0] != 503 or r[1].get("error") != "overloaded"]
        self.assertEqual(bad[:5], [], "%d of %d waiters did not get 503 overloaded" % (len(bad), n))
        self.srv.start()
        for name, h in holders.items():
            g = self.get(name)
            self.assertEqual((g["held"], g["holder"]["token"], g["waiters"]), (True, h["token"], 0), g)


if __name__ == "__main__":
    harness.run_tests()
