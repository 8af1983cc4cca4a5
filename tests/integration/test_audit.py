"""The audit trail (GET /v1/audit, admin): every grant, release, expiry, force-release,
fence refusal and guard refusal, with time, lock, owner, token, key name and peer, in seq
order; filters and paging; durable across kill -9 (same commit as the change); bounded by
--audit-keep; never a lease."""

import sqlite3
import threading
import time
import unittest

from harness import Server, on_etcd
from test_auth import KeyedTestCase, new_key


class AuditTest(KeyedTestCase):
    def setUp(self):
        self.alice, a = new_key("alice", "client", "t/")
        self.bob, b = new_key("bob", "client", "t/")
        self.root, r = new_key("root", "admin")
        self.store, f = new_key("store", "fence", "t/")
        self.start_keyed([a, b, r, f])

    def rows(self, query=""):
        st, _, body = self.as_(self.root).request("GET", "/v1/audit" + query)
        self.assertEqual(st, 200, body)
        return body

    def test_who_did_what_in_order_and_after_a_crash(self):
        alice, bob, root = self.as_(self.alice), self.as_(self.bob, timeout=60), self.as_(self.root)
        st, _, g = alice.acquire("t/a", owner="alice-job", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        box = {}
        t = threading.Thread(target=lambda: box.update(r=bob.acquire("t/a", owner="bob-job", wait_ms=20000,
                                                                     ttl_ms=60000)))
        t.start()
        for _ in range(200):
            if root.get_lock("t/a")[2].get("waiters") == 1:
                break
            time.sleep(0.02)
        self.assertEqual(alice.release("t/a", g["lease"])[0], 200)
        t.join(30)
        bg = box["r"][2]
        st, _, body = root.request("DELETE", "/v1/locks/t/a")
        self.assertEqual(st, 200, body)
        st, _, e = alice.acquire("t/e", owner="short", ttl_ms=100)
        time.sleep(0.3)
        root.get_lock("t/e")  # the expiry is noticed by now (or at this request)
        fence = self.as_(self.store)
        self.assertEqual(fence.fence("t/res", e["token"])[0], 200)
        self.assertEqual(fence.fence("t/res", g["token"])[0], 409)
        if self.nginx:
            self.assertEqual(alice.request("PUT", "/store/t/a", raw=b"x")[0], 428)
            self.assertEqual(alice.request("PUT", "/store/t/a", raw=b"x",
                                           headers={"Fencing-Lease": g["lease"]})[0], 409)
        for _ in range(100):
            body = self.rows()
            if any(r["kind"] == "expired" for r in body["rows"]):
                break
            time.sleep(0.05)
        got = [(r["kind"], r["lock"], r["owner"], r["token"], r["key"]) for r in body["rows"]]
        want = [("granted", "t/a", "alice-job", g["token"], "alice"),
                ("released", "t/a", "alice-job", g["token"], "alice"),
                ("granted", "t/a", "bob-job", bg["token"], "bob"),
                ("revoked", "t/a", "bob-job", bg["token"], "root"),
                ("granted", "t/e", "short", e["token"], "alice"),
                ("expired", "t/e", "short", e["token"], "alice"),  # the key that held it
                ("fence_refused", "t/res", "", g["token"], "store")]
        if self.nginx:
            # No lease, then alice's released one: its token and why (issue 39).
            want += [("guard_refused", "t/a", "", 0, "alice"), ("guard_refused", "t/a", "", g["token"], "alice")]
        self.assertEqual(got, want)
        self.assertEqual([r["reason"] for r in body["rows"] if r["kind"] == "guard_refused"],
                         ["lease_missing", "released"] if self.nginx else [])
        self.assertEqual({r["reason"] for r in body["rows"] if r["kind"] != "guard_refused"}, {None})
        seqs = [r["seq"] for r in body["rows"]]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual(len(set(seqs)), len(seqs))
        for r in body["rows"]:
            self.assertEqual(r["peer"] == "", r["kind"] == "expired", r)
            if r["peer"]:
                # the client's address and port as getnameinfo would write them
                self.assertRegex(r["peer"], r"^127\.0\.0\.1:[1-9][0-9]{0,4}$", r)
                self.assertLessEqual(int(r["peer"].split(":")[1]), 65535, r)
            self.assertGreater(r["at_ms"], 1700000000000)
        for lease in (g["lease"], bg["lease"], e["lease"]):
            self.assertNotIn(lease, str(body))
        # Filters and paging.
        only = self.rows("?lock=t/e")
        self.assertEqual([r["kind"] for r in only["rows"]], ["granted", "expired"])
        first = self.rows("?limit=2")
        self.assertEqual(len(first["rows"]), 2)
        self.assertEqual(first["next"], first["rows"][1]["seq"])
        rest = self.rows("?after=%d" % first["next"])
        self.assertEqual([r["seq"] for r in first["rows"] + rest["rows"]], seqs)
        self.assertIsNone(rest["next"])
        for q in ("?limit=0", "?after=-1", "?lock=bad%20name"):
            st, _, b = root.request("GET", "/v1/audit" + q)
            self.assertEqual(st, 400, (q, b))
        self.assertEqual(alice.request("GET", "/v1/audit")[0], 403)
        # Written with the changes: a kill -9 loses none, and numbering goes on.
        self.srv.kill9()
        self.srv.start()
        after = self.rows()
        self.assertEqual([r["seq"] for r in after["rows"]], seqs)
        self.assertEqual(self.as_(self.alice).acquire("t/later")[0], 200)
        self.assertGreater(self.rows("?after=%d" % seqs[-1])["rows"][0]["seq"], seqs[-1])


class HistoryTest(unittest.TestCase):
    def test_last_grants_newest_first_with_how_each_ended(self):
        srv = Server(extra_args=["--audit-keep", "40"])
        self.addCleanup(srv.cleanup)
        c = srv.client
        st, _, a = c.acquire("h/x", owner="one")
        c.release("h/x", a["lease"])
        st, _, b = c.acquire("h/x", owner="two", ttl_ms=100)
        time.sleep(0.3)
        st, _, d = c.acquire("h/x", owner="three", ttl_ms=60000)
        c.request("DELETE", "/v1/locks/h/x")
        st, _, e = c.acquire("h/x", owner="four", ttl_ms=60000)
        c.acquire("h/other")
        st, _, body = c.request("GET", "/v1/locks/h/x/history")
        self.assertEqual(st, 200, body)
        got = [(g["owner"], g["token"], g["how"], g["ended_at_ms"] is None) for g in body["grants"]]
        self.assertEqual(got, [("four", e["token"], None, True), ("three", d["token"], "revoked", False),
                               ("two", b["token"], "expired", False), ("one", a["token"], "released", False)])
        self.assertTrue(body["complete"])
        for g in body["grants"]:
            self.assertGreaterEqual(g["ended_at_ms"] or g["acquired_at_ms"], g["acquired_at_ms"])
        self.assertNotIn(a["lease"], c.last_text)
        st, _, body = c.request("GET", "/v1/locks/h/x/history?limit=2")
        self.assertEqual([g["owner"] for g in body["grants"]], ["four", "three"])
        # The trail keeps 40 rows: older grants fall out, and the answer says so.
        for i in range(30):
            st, _, g = c.acquire("h/busy")
            c.release("h/busy", g["lease"])
        st, _, body = c.request("GET", "/v1/locks/h/x/history")
        self.assertFalse(body["complete"])
        self.assertEqual(c.request("GET", "/v1/locks/h/x/history?limit=0")[0], 400)
        self.assertEqual(c.request("POST", "/v1/locks/h/x/history", body={})[0], 405)
        # "history" ends a path that reads a lock's history: no lock may be named so,
        # or GET /v1/locks/NAME could never reach it.
        for name in ("history", "h/history"):
            st, _, body = c.acquire(name)
            self.assertEqual((st, body["error"]), (400, "bad_request"), (name, body))
            self.assertIn("history", body["message"])


class RetentionTest(unittest.TestCase):
    def test_only_the_newest_are_kept_and_zero_turns_it_off(self):
        srv = Server(extra_args=["--audit-keep", "3"])
        self.addCleanup(srv.cleanup)
        c = srv.client
        for i in range(10):
            st, _, g = c.acquire("r/%d" % i)
            self.assertEqual(c.release("r/%d" % i, g["lease"])[0], 200)
        st, _, body = c.request("GET", "/v1/audit")
        self.assertEqual(st, 200, body)
        self.assertEqual([r["seq"] for r in body["rows"]], [18, 19, 20])
        self.assertEqual(body["oldest"], 18)
        srv.kill9()
        srv.start()
        st, _, body = srv.client.request("GET", "/v1/audit")
        self.assertEqual([r["seq"] for r in body["rows"]], [18, 19, 20])
        off = Server(extra_args=["--audit-keep", "0"])
        self.addCleanup(off.cleanup)
        self.assertEqual(off.client.request("GET", "/v1/audit")[0], 404)
        self.assertEqual(off.client.acquire("x")[0], 200)


class PerKeyRetentionTest(KeyedTestCase):
    """Issue 28: --audit-keep counts per key (requests without one count as one key), so
    one tenant's churn never evicts another's rows, in memory and on disk; GET /v1/audit
    filters by key (?key=, empty for rows without a key)."""

    def setUp(self):
        self.quiet, q = new_key("quiet", "client", "k/")
        self.churn, c = new_key("churn", "client", "k/")
        self.root, r = new_key("root", "admin")
        self.start_keyed([q, c, r], "--audit-keep", "5")

    def rows(self, query=""):
        st, _, body = self.as_(self.root).request("GET", "/v1/audit" + query)
        self.assertEqual(st, 200, body)
        return body

    def pairs(self, c, name, n):
        for _ in range(n):
            st, _, g = c.acquire(name)
            self.assertEqual(st, 200, g)
            self.assertEqual(c.release(name, g["lease"])[0], 200)

    def check(self, quiet_seqs):
        body = self.rows("?limit=1000")
        by_key = {}
        for r in body["rows"]:
            by_key.setdefault(r["key"], []).append(r["seq"])
        self.assertEqual(by_key["quiet"], quiet_seqs)
        self.assertEqual(len(by_key["churn"]), 5)
        self.assertEqual(sorted(by_key), ["churn", "quiet"])
        churn = self.rows("?key=churn")
        self.assertEqual([r["seq"] for r in churn["rows"]], by_key["churn"])
        self.assertEqual(churn["oldest"], by_key["churn"][0])
        self.assertTrue(all(r["key"] == "churn" for r in churn["rows"]))
        quiet = self.rows("?key=quiet&lock=k/q")
        self.assertEqual([r["seq"] for r in quiet["rows"]], quiet_seqs)
        self.assertEqual(self.rows("?key=nobody")["rows"], [])
        self.assertEqual(self.rows("?key=")["rows"], [])  # no row without a key here
        # Paging within one key.
        page = self.rows("?key=churn&limit=2")
        self.assertEqual(([r["seq"] for r in page["rows"]], page["next"]), (by_key["churn"][:2], by_key["churn"][1]))
        return by_key

    def test_one_keys_churn_never_evicts_another_keys_rows(self):
        self.pairs(self.as_(self.quiet), "k/q", 2)
        quiet_seqs = [r["seq"] for r in self.rows("?key=quiet")["rows"]]
        self.assertEqual(len(quiet_seqs), 4)
        self.pairs(self.as_(self.churn), "k/c", 30)
        self.check(quiet_seqs)
        st, _, body = self.as_(self.root).request("GET", "/v1/audit?key=no%20such")
        self.assertEqual((st, body["field"]), (400, "key"), body)
        # On disk as in memory: a kill -9 and a start load the same rows.
        self.srv.kill9()
        self.srv.start()
        self.check(quiet_seqs)
        if not on_etcd():
            # The server holds its database in exclusive locking mode: read it once stopped.
            self.assertEqual(self.srv.stop(), 0, self.srv.stderr_text())
            db = sqlite3.connect(self.srv.data_path)
            counts = dict(db.execute("SELECT key, count(*) FROM audit GROUP BY key").fetchall())
            db.close()
            self.assertEqual(counts, {"quiet": 4, "churn": 5})

    def test_concurrent_keys_evict_exactly_their_rows_on_disk(self):
        """Two keys' pairs at once, so that one batch evicts rows of both, interleaved: a
        commit deletes a batch's evicted rows by runs of consecutive seqs (store_sqlite.c,
        delete_audit_runs), and storage must then hold exactly what memory holds, per key."""
        def worker(key, name):
            c = self.as_(key)
            for _ in range(8):
                st, _, g = c.acquire(name, ttl_ms=30000)
                self.assertEqual(st, 200, g)
                self.assertEqual(c.release(name, g["lease"])[0], 200)
        threads = [threading.Thread(target=worker, args=(k, "k/%s%d" % (tag, i)))
                   for i in range(6) for k, tag in ((self.quiet, "q"), (self.churn, "c"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        memory = {k: [r["seq"] for r in self.rows("?key=" + k)["rows"]] for k in ("quiet", "churn")}
        self.assertEqual([len(v) for v in memory.values()], [5, 5], memory)
        if on_etcd():
            return
        self.assertEqual(self.srv.stop(), 0, self.srv.stderr_text())
        db = sqlite3.connect(self.srv.data_path)
        disk = {k: [seq for (seq,) in db.execute("SELECT seq FROM audit WHERE key = ? ORDER BY seq", (k,))]
                for k in ("quiet", "churn")}
        total = db.execute("SELECT count(*) FROM audit").fetchone()[0]
        db.close()
        self.assertEqual(disk, memory)
        self.assertEqual(total, 10)

    def test_an_expiry_counts_against_the_key_that_held_the_lease(self):
        churn = self.as_(self.churn)
        self.pairs(self.as_(self.quiet), "k/q", 2)
        quiet_seqs = [r["seq"] for r in self.rows("?key=quiet")["rows"]]
        for i in range(6):
            self.assertEqual(churn.acquire("k/e%d" % i, ttl_ms=100)[0], 200)
        time.sleep(0.5)
        for _ in range(100):
            if sum(r["kind"] == "expired" for r in self.rows("?key=churn")["rows"]) >= 2:
                break
            time.sleep(0.05)
        self.assertEqual([r["seq"] for r in self.rows("?key=quiet")["rows"]], quiet_seqs)
        self.assertEqual(len(self.rows("?key=churn")["rows"]), 5)


class KeylessRetentionTest(unittest.TestCase):
    def test_requests_without_a_key_count_as_one_key(self):
        srv = Server(extra_args=["--audit-keep", "4"])
        self.addCleanup(srv.cleanup)
        c = srv.client
        for i in range(5):
            st, _, g = c.acquire("nk/%d" % i)
            self.assertEqual(c.release("nk/%d" % i, g["lease"])[0], 200)
        body = c.request("GET", "/v1/audit?key=")[2]
        self.assertEqual([r["seq"] for r in body["rows"]], [7, 8, 9, 10])
        self.assertEqual(body["oldest"], 7)
        self.assertEqual(c.request("GET", "/v1/audit")[2]["rows"], body["rows"])


if __name__ == "__main__":
    unittest.main()
