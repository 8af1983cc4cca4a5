"""leasegate over etcd (--store etcd://...): leadership, failover and the fence on
the leader key. Starts a real one-member etcd (Debian package etcd-server) on free
127.0.0.1 ports with a temporary data dir, and stops it by PID. Skipped, saying so,
when /usr/bin/etcd is missing (scripts/deps.sh --test installs it). A follower's
forwarding is test_etcd_forward.py's, a three-member cluster test_etcd_cluster.py's.

Every wait is bounded; nothing asserts how long anything took."""

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import tempfile
import time
import unittest
import uuid
import urllib.error
import urllib.request

from harness import binary_path
import etcd_fixture
from etcd_fixture import EtcdTestCase, Gateway, b64, wait_for, wait_leader
from txn_proxy import TxnProxy


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())


class EtcdTest(EtcdTestCase):
    def leader_through(self, proxy, arm=None):
        """A gateway that leads with its etcd calls going through proxy (armed with `arm`
        before it starts), after a first gateway set the prefix up and left."""
        first = self.gateway()
        first.stop()
        first.cleanup()
        self.gateways.remove(first)

        class Via:
            endpoint = proxy.endpoint
        if arm:
            proxy.arm(arm)
        g = Gateway(Via, self.prefix)
        self.gateways.append(g)
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        return g

    def test_tokens_survive_kill9_and_restart(self):
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        held = self.acquire_ok(g, "orders/42", ttl_ms=120000)
        tokens = [held["token"]] + [self.acquire_ok(g, "t%d" % i)["token"] for i in range(5)]
        status, _, body = g.client.fence("res", tokens[-1])
        self.assertEqual(status, 200, body)
        g.kill9()
        g.start()  # its old lease still holds the leader key until it expires
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        status, _, body = g.client.get_lock("orders/42")
        self.assertEqual(status, 200, body)
        self.assertTrue(body["held"])
        self.assertEqual(body["holder"]["token"], held["token"])
        status, _, body = g.client.renew("orders/42", held["lease"])
        self.assertEqual(status, 200, body)
        self.assertGreater(self.acquire_ok(g, "after")["token"], max(tokens))
        status, _, body = g.client.fence("res", tokens[-1] - 1)
        self.assertEqual(status, 409, body)
        g.stop_clean()

    def put(self, key, value):
        self.etcd.call("/v3/kv/put", {"key": b64(self.prefix + key), "value": b64(value)})

    def value(self, key):
        kvs = self.etcd.call("/v3/kv/range", {"key": b64(self.prefix + key)}).get("kvs", [])
        return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None

    def test_a_layout_1_lock_space_loads_and_is_written_in_the_current_layout(self):
        """Issue 38: gateways before every lease had a key of its own (layout 1) kept a lock's
        writer inside the lock's record, and readers and permits under holders/ with "mode"
        always. A gateway of layout 2 or later loads such a lock space with every lease and
        token, writes every lease as a key of its own (a writer's and a permit's without
        "mode", so that a layout-1 gateway, which requires it, refuses the store rather than
        keep a writer in two places), marks the layout (3 since issue 40: a layout-2 gateway
        refuses it, rather than load a lease of several permits as one), and refuses a lock
        space of a newer layout."""
        now = int(time.time() * 1000)

        def lease(token, owner, **more):
            d = {"lease": str(uuid.uuid4()), "owner": owner, "token": token, "ttl_ms": 600000,
                 "acquired_at_ms": now, "expires_at_ms": now + 600000, "count": 1, "metadata": "{}"}
            d.update(more)
            return d
        writer = lease(5, "old-writer", count=2, request_id="again", lock_delay_ms=1000, metadata='{"a":1}')
        readers = [dict(lease(6 + i, "old-reader-%d" % i), kind=0, name="old/r", mode=1) for i in range(2)]
        permit = dict(lease(8, "old-permit"), kind=1, name="old/s", mode=0)
        self.put("/locks/old/w", json.dumps({"last_token": 5, "holder": writer}))
        self.put("/locks/old/r", json.dumps({"last_token": 7}))
        self.put("/semaphores/old/s", json.dumps({"last_token": 8, "limit": 2}))
        for h in readers + [permit]:
            self.put("/holders/%020d" % h["token"], json.dumps(h))
        self.put("/meta/last_token", "9")
        g = self.gateway()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        self.assertEqual(self.value("/meta/layout"), 3)
        st, _, body = g.client.get_lock("old/w")
        self.assertEqual((body["holder"]["owner"], body["holder"]["token"], body["holder"]["count"],
                          body["holder"]["metadata"]), ("old-writer", 5, 2, {"a": 1}), body)
        st, _, body = g.client.acquire("old/w", owner="old-writer", request_id="again")
        self.assertEqual((st, body.get("lease")), (200, writer["lease"]), body)  # its request_id kept
        st, _, body = g.client.get_lock("old/r")
        self.assertEqual((body["mode"], body["holders_total"], body["last_token"]), ("read", 2, 7), body)
        for name, h in [("old/w", writer)] + [("old/r", r) for r in readers]:
            st, _, body = g.client.renew(name, h["lease"])
            self.assertEqual((st, body.get("token")), (200, h["token"]), body)
        st, _, body = g.client.request("POST", "/v1/semaphores/old/s/renew", {"lease": permit["lease"]})
        self.assertEqual((st, body.get("token")), (200, 8), body)
        self.assertEqual(self.acquire_ok(g, "new/x")["token"], 10)
        # Written again: the writer's lease a key of its own, its lock's record the name's.
        self.assertNotIn("holder", self.value("/locks/old/w"))
        w = self.value("/holders/%020d" % 5)
        self.assertEqual((w["name"], w["kind"], w["owner"], w["count"], "mode" in w), ("old/w", 0, "old-writer", 2, False), w)
        self.assertEqual(self.value("/holders/%020d" % 6)["mode"], 1)
        self.assertNotIn("mode", self.value("/holders/%020d" % 8))
        # Its end takes its key away, and nothing brings it back.
        for _ in range(2):
            self.assertEqual(g.client.release("old/w", writer["lease"])[0], 200)
        self.assertIsNone(self.value("/holders/%020d" % 5))
        g.stop_clean()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        st, _, body = g.client.get_lock("old/w")
        self.assertEqual((body["held"], body["last_token"]), (False, 5), body)
        g.stop_clean()
        # A lock space a newer leasegate has written is refused, saying so, before anything is written.
        self.put("/meta/layout", "4")
        g.start()
        self.assertEqual(g.wait_exit(), 1, g.stderr_text())
        self.assertIn("written by a newer leasegate (layout 4", g.stderr_text())
        self.assertEqual(self.value("/meta/layout"), 4)

    def etcd_rows(self, kind):
        """{key: decoded JSON value} of every key under PREFIX/kind/ (history or audit)."""
        start = "%s/%s/" % (self.prefix, kind)
        end = start[:-1] + chr(ord(start[-1]) + 1)
        r = self.etcd.call("/v3/kv/range", {"key": b64(start), "range_end": b64(end)})
        return {base64.b64decode(kv["key"]).decode()[len(start):]:
                json.loads(base64.b64decode(kv["value"])) for kv in r.get("kvs", [])}

    def handoff(self, g, name):
        """A holds name, B waits for it, A releases: the release, A's ended lease and the
        grant to B are made by one request, so they are committed in one batch.
        Returns (A's grant, B's grant)."""
        a = self.acquire_ok(g, name, owner="first", ttl_ms=60000)
        box = {}
        waiter = g.new_client()
        t = threading.Thread(target=lambda: box.update(
            r=waiter.acquire(name, owner="second", wait_ms=20000, ttl_ms=60000)))
        t.start()
        self.assertTrue(wait_for(lambda: g.client.get_lock(name)[2].get("waiters") == 1), "no waiter")
        status, _, body = g.client.release(name, a["lease"])
        self.assertEqual(status, 200, body)
        t.join(30)
        waiter.close()
        self.assertEqual(box["r"][0], 200, box["r"])
        return a, box["r"][2]

    def test_a_batch_writes_one_history_key_and_one_audit_key(self):
        """The rows of one batch go under one key each for the lease history and the
        audit trail, and load back, with their seqs, after a kill -9."""
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        a, b = self.handoff(g, "batch/x")
        audit = self.etcd_rows("audit")
        self.assertTrue(all(isinstance(v, list) for v in audit.values()), audit)
        # The release of a and the grant to b are in one batch, so under one key (of
        # their API key, "-" for none: each key's rows are kept apart, auditlog.h),
        # named by the largest seq in it.
        key, rows = next((k, v) for k, v in audit.items()
                         if any(r["kind"] == 2 and r["token"] == a["token"] for r in v))
        self.assertEqual([(r["kind"], r["token"]) for r in rows], [(2, a["token"]), (1, b["token"])])
        bucket, last = key.split("/")
        self.assertEqual((bucket, int(last)), ("-", max(r["seq"] for r in rows)))
        history = self.etcd_rows("history")
        self.assertTrue(all(isinstance(v, list) for v in history.values()), history)
        ended = [r for v in history.values() for r in v]
        self.assertEqual([(r["lock"], r["token"], r["how"]) for r in ended], [("batch/x", a["token"], 2)])
        # A burst of pairs from many clients: fewer keys than rows.
        def pairs(k):
            c = g.new_client()
            for i in range(5):
                st, _, x = c.acquire("burst/%d/%d" % (k, i))
                c.release("burst/%d/%d" % (k, i), x["lease"])
            c.close()
        threads = [threading.Thread(target=pairs, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        status, _, before = g.client.request("GET", "/v1/audit?limit=1000")
        self.assertEqual(status, 200, before)
        stored = [r["seq"] for v in self.etcd_rows("audit").values() for r in v]
        self.assertEqual(stored, [r["seq"] for r in before["rows"]])
        g.kill9()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        status, _, after = g.client.request("GET", "/v1/audit?limit=1000")
        self.assertEqual(status, 200, after)
        self.assertEqual(after["rows"], before["rows"])
        # The lease history came back too: a's lease is known to have been released.
        status, _, body = g.client.release("batch/x", a["lease"])
        self.assertEqual((status, body.get("reason")), (409, "released"), body)
        status, _, body = g.client.release("batch/x", b["lease"])
        self.assertEqual(status, 200, body)
        later = self.acquire_ok(g, "batch/later")
        self.assertGreater(later["token"], max(r["token"] for r in after["rows"]))
        status, _, body = g.client.request("GET", "/v1/audit?after=%d" % after["rows"][-1]["seq"])
        self.assertGreater(len(body["rows"]), 0, body)

    def test_the_per_row_layout_of_older_gateways_loads(self):
        """A store written before groups (one key per history or audit row, its value one
        JSON object) loads as it was, and goes on in the new layout beside it."""
        lease = "0f6c7a52-6d0e-4f43-9d2b-6a3b8c1d2e3f"
        old = {
            "locks/m/x": {"last_token": 5},
            "history/%020d" % 6: {"lock": "m/x", "lease": lease, "token": 5, "how": 2},
            "audit/%020d" % 8: {"at_ms": 1000, "kind": 1, "lock": "m/x", "owner": "old", "token": 5,
                                "key": "", "peer": "127.0.0.1"},
            "audit/%020d" % 9: {"at_ms": 2000, "kind": 2, "lock": "m/x", "owner": "old", "token": 5,
                                "key": "", "peer": "127.0.0.1"},
            # Gateways before commit marks kept no mark of their own: an operator adopts such a
            # lock space by writing its counter (the refusal says so), never silently.
            "meta/last_token": 5,
        }
        for k, v in old.items():
            self.etcd.call("/v3/kv/put", {"key": b64("%s/%s" % (self.prefix, k)),
                                          "value": b64(json.dumps(v))})
        g = self.gateway()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        status, _, body = g.client.request("GET", "/v1/audit")
        self.assertEqual(status, 200, body)
        self.assertEqual([(r["seq"], r["kind"], r["owner"]) for r in body["rows"]],
                         [(8, "granted", "old"), (9, "released", "old")])
        status, _, body = g.client.release("m/x", lease)
        self.assertEqual((status, body.get("reason")), (409, "released"), body)
        a, b = self.handoff(g, "m/x")
        self.assertGreater(a["token"], 5)
        g.kill9()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        status, _, body = g.client.request("GET", "/v1/audit")
        seqs = [r["seq"] for r in body["rows"]]
        self.assertEqual(seqs[:2], [8, 9])
        self.assertEqual(seqs, sorted(seqs))
        self.assertIn((b["token"], "granted"), [(r["token"], r["kind"]) for r in body["rows"]])
        for lease_id in (lease, a["lease"]):
            status, _, body = g.client.release("m/x", lease_id)
            self.assertEqual((status, body.get("reason")), (409, "released"), body)
        self.assertEqual(g.client.release("m/x", b["lease"])[0], 200)

    def test_retention_prunes_whole_batches(self):
        """--audit-keep and --lease-history with rows grouped per batch: storage keeps at
        least the newest N rows (a batch that straddles the bound stays whole until a later
        prune) and a bounded number more; a restart shows the newest N."""
        g = self.gateway(["--audit-keep", "3", "--lease-history", "4"])
        self.assertIs(wait_leader([g]), g)
        for i in range(8):
            a, b = self.handoff(g, "keep/%d" % i)
            self.assertEqual(g.client.release("keep/%d" % i, b["lease"])[0], 200)
        status, _, before = g.client.request("GET", "/v1/audit")
        self.assertEqual(status, 200, before)
        self.assertEqual(len(before["rows"]), 3, before)
        audit = [r["seq"] for v in self.etcd_rows("audit").values() for r in v]
        ended = [r["seq"] for v in self.etcd_rows("history").values() for r in v]
        self.assertEqual(audit[-3:], [r["seq"] for r in before["rows"]])
        # 3 kept, up to 3 more before the next prune, one straddling batch of 2
        self.assertLessEqual(len(audit), 3 + 3 + 2, audit)
        self.assertGreaterEqual(len(ended), 4)
        self.assertLessEqual(len(ended), 4 + 4 + 1, ended)
        g.kill9()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        status, _, after = g.client.request("GET", "/v1/audit")
        self.assertEqual(after["rows"], before["rows"])

    def test_retention_prunes_from_where_it_left(self):
        """Each prune deletes from where the key's last one ended, not from 0 (etcd walks a
        range's deleted keys too, so a range from 0 made every commit slower as the trail
        grew): over many prunes, and after a restart with smaller limits (whose first batch
        deletes what the load found past them), storage keeps the newest rows, a bounded
        number more and nothing older."""
        g = self.gateway(["--audit-keep", "5", "--lease-history", "4"])
        self.assertIs(wait_leader([g]), g)

        def check(keep_audit, keep_history):
            status, _, shown = g.client.request("GET", "/v1/audit")
            self.assertEqual(status, 200, shown)
            self.assertEqual(len(shown["rows"]), keep_audit, shown)
            audit = sorted(r["seq"] for v in self.etcd_rows("audit").values() for r in v)
            ended = sorted(r["seq"] for v in self.etcd_rows("history").values() for r in v)
            self.assertEqual(audit[-keep_audit:], [r["seq"] for r in shown["rows"]])
            # kept, up to as many more before the next prune, one straddling batch of 2
            self.assertLessEqual(len(audit), 2 * keep_audit + 2, audit)
            self.assertGreaterEqual(len(ended), keep_history, ended)
            self.assertLessEqual(len(ended), 2 * keep_history + 1, ended)
            return audit, ended

        for i in range(12):
            a, b = self.handoff(g, "left/%d" % i)
            self.assertEqual(g.client.release("left/%d" % i, b["lease"])[0], 200)
        audit1, ended1 = check(5, 4)
        g.stop_clean()
        g.extra_args = [x for x in g.extra_args]
        for flag, value in (("--audit-keep", "2"), ("--lease-history", "2")):
            g.extra_args[g.extra_args.index(flag) + 1] = value
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        for i in range(3):
            a, b = self.handoff(g, "again/%d" % i)
            self.assertEqual(g.client.release("again/%d" % i, b["lease"])[0], 200)
        audit2, ended2 = check(2, 2)
        # the second run made 12 audit rows and ended 6 leases: none of the first run's is left
        self.assertGreater(min(audit2), max(audit1), (audit1, audit2))
        self.assertGreater(min(ended2), max(ended1), (ended1, ended2))

    def test_failover_keeps_leases_and_tokens(self):
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        other = b if leader is a else a
        held = self.acquire_ok(leader, "shared", ttl_ms=120000)
        issued = [held["token"]] + [self.acquire_ok(leader, "n%d" % i)["token"] for i in range(10)]
        leader.kill9()
        self.assertIs(wait_leader([other]), other, other.stderr_text())
        status, _, body = other.client.renew("shared", held["lease"], ttl_ms=60000)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["token"], held["token"])
        self.assertGreater(self.acquire_ok(other, "fresh")["token"], max(issued))
        status, _, body = other.client.release("shared", held["lease"])
        self.assertEqual(status, 200, body)

    def test_failover_shows_the_last_acknowledged_value(self):
        """Issue 40: a lock's value is written by its holder through the leader, one version per
        write (the value names its write); the leader is killed with -9 while writes go on. The
        new leader shows a version at least the last acknowledged one, and the value of that
        very write (a later version only for a write whose answer was lost); the holder goes on
        writing there, and a released lease writes nothing."""
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        other = b if leader is a else a
        held = self.acquire_ok(leader, "cfg", ttl_ms=120000)
        acked = []
        stop = threading.Event()

        def write():
            c = leader.new_client(timeout=10)
            i = 0
            while not stop.is_set():
                try:
                    st, _, body = c.request("PUT", "/v1/locks/cfg/value",
                                            body={"lease": held["lease"], "value": {"write": i}})
                except OSError:
                    break
                if st != 200:
                    break
                acked.append((body["value_version"], i))
                i += 1
            c.close()

        t = threading.Thread(target=write)
        t.start()
        self.assertTrue(wait_for(lambda: len(acked) >= 20), "no value writes acknowledged")
        leader.kill9()
        stop.set()
        t.join(30)
        last_version, last_write = acked[-1]
        self.assertEqual(last_version, last_write + 1)  # one version per write, in order
        self.assertIs(wait_leader([other]), other, other.stderr_text())
        st, _, view = other.client.get_lock("cfg")
        self.assertEqual(st, 200, view)
        self.assertGreaterEqual(view["value_version"], last_version, view)
        self.assertEqual(view["value"], {"write": view["value_version"] - 1}, view)
        self.assertEqual(view["value_token"], held["token"])
        st, _, body = other.client.request("PUT", "/v1/locks/cfg/value",
                                           body={"lease": held["lease"], "value": "after", "if_version":
                                                 view["value_version"]})
        self.assertEqual((st, body.get("value_version")), (200, view["value_version"] + 1), body)
        self.assertEqual(other.client.release("cfg", held["lease"])[0], 200)
        st, _, body = other.client.request("PUT", "/v1/locks/cfg/value", body={"lease": held["lease"], "value": "x"})
        self.assertEqual((st, body.get("error")), (409, "stale_token"), body)
        self.assertEqual(other.client.get_lock("cfg")[2]["value"], "after")

    def test_a_value_writes_retry_is_answered_by_the_next_leader(self):
        """A value write's request_id is part of its record (PREFIX/values/NAME: "writes", one
        line per remembered write: its version, the digest of its key and value, the id), so a
        retry whose answer the killed leader took with it is answered by the next leader with
        that write's version, and nothing is written again; the grant's next write without one
        keeps the list, another grant's leaves the field out (layout 3 either way)."""
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        other = b if leader is a else a
        held = self.acquire_ok(leader, "ret/v", ttl_ms=120000)
        body = {"lease": held["lease"], "value": {"n": 1}, "if_version": 0, "request_id": "lost-1"}
        st, _, first = leader.client.request("PUT", "/v1/locks/ret/v/value", body=body)
        self.assertEqual((st, first.get("value_version")), (200, 1), first)
        record = self.value("/values/ret/v")
        digest = hashlib.sha256(b"\0" + json.dumps({"n": 1}).encode()).hexdigest()[:32]  # no key; as sent
        writes = "1 %s lost-1\n" % digest
        self.assertEqual((record["version"], record["token"], record["writes"]), (1, held["token"], writes))
        self.assertNotIn("request_id", record)
        leader.kill9()  # as if before its answer left
        self.assertIs(wait_leader([other]), other, other.stderr_text())
        self.assertEqual(self.value("/meta/layout"), 3)
        for _ in range(2):
            st, _, again = other.client.request("PUT", "/v1/locks/ret/v/value", body=body)
            self.assertEqual((st, again), (200, first))
        st, _, view = other.client.request("GET", "/v1/locks/ret/v/value")
        self.assertEqual((view["value"], view["value_version"]), ({"n": 1}, 1), view)
        st, _, second = other.client.request("PUT", "/v1/locks/ret/v/value",
                                             body={"lease": held["lease"], "value": {"n": 2}})
        self.assertEqual((st, second.get("value_version")), (200, 2), second)
        self.assertEqual(self.value("/values/ret/v")["writes"], writes)
        st, _, again = other.client.request("PUT", "/v1/locks/ret/v/value", body=body)
        self.assertEqual((st, again), (200, first))
        self.assertEqual(other.client.release("ret/v", held["lease"])[0], 200)
        next_grant = self.acquire_ok(other, "ret/v", ttl_ms=120000)
        st, _, third = other.client.request("PUT", "/v1/locks/ret/v/value",
                                            body={"lease": next_grant["lease"], "value": {"n": 3}})
        self.assertEqual((st, third.get("value_version")), (200, 3), third)
        self.assertNotIn("writes", self.value("/values/ret/v"))

    def test_paused_leader_commits_nothing_after_takeover(self):
        """The key safety test: a leader SIGSTOPped past its lease is replaced;
        after SIGCONT it grants nothing, and no token is ever issued twice."""
        a, b = self.gateway(), self.gateway()
        old = wait_leader([a, b])
        new = b if old is a else a
        before = [self.acquire_ok(old, "p%d" % i)["token"] for i in range(3)]
        os.kill(old.pid, signal.SIGSTOP)
        try:
            self.assertIs(wait_leader([new]), new, new.stderr_text())
            granted = [self.acquire_ok(new, "q%d" % i)["token"] for i in range(3)]
        finally:
            os.kill(old.pid, signal.SIGCONT)
        self.assertGreater(min(granted), max(before))
        self.assert_grants_nothing_and_exits(old, "stale")
        status, _, body = new.client.get_lock("stale")
        self.assertEqual(status, 200, body)
        self.assertFalse(body["held"], body)
        more = [self.acquire_ok(new, "r%d" % i)["token"] for i in range(3)]
        tokens = before + granted + more
        self.assertEqual(len(tokens), len(set(tokens)))
        self.assertEqual(tokens, sorted(tokens))

    def test_commit_is_fenced_on_the_leader_key(self):
        """With the leader key gone (another leader's doing, simulated by deleting it)
        while this gateway's lease still lives, its next commit writes nothing."""
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        self.acquire_ok(g, "before")
        keys = self.etcd.keys(self.prefix + "/leader/")
        self.assertEqual(len(keys), 1, keys)
        self.etcd.delete(keys[0])
        self.assert_grants_nothing_and_exits(g, "after")
        self.assertNotIn(self.prefix + "/locks/after", self.etcd.keys(self.prefix + "/locks/"))

    def test_leases_that_etcd_revokes_are_replaced_without_a_failover(self):
        """etcd 3.4 before 3.4.31 (Debian 12 has 3.4.23): its Raft leader, resumed after a
        pause, revokes every lease that ran out meanwhile in its view, however alive (etcd
        issue 15247); the nemesis suite saw it end every gateway's lease after a SIGSTOP of
        the etcd leader. Simulated here by revoking them all: the leader leads on under a
        new lease and key with its table (its commits resume once the commit mark shows
        nothing was written meanwhile), the follower takes a new lease and follows; neither
        exits. Before, both exited ("keepalive answered TTL 0") and the next leader loaded."""
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        follower = b if leader is a else a
        self.assertEqual(follower.role() if wait_for(lambda: follower.role() == "follower") else None, "follower")
        held = self.acquire_ok(leader, "kept", ttl_ms=120000)
        pids = (leader.pid, follower.pid)
        leases = self.etcd.call("/v3/lease/leases", {}).get("leases", [])
        self.assertEqual(len(leases), 2, leases)
        for lease in leases:
            self.etcd.call("/v3/lease/revoke", {"ID": lease["ID"]})
        self.assertEqual(self.etcd.keys(self.prefix + "/leader/"), [])
        # The next grant waits for the new key, then goes through.
        after = self.acquire_ok(leader, "after", ttl_ms=60000)
        self.assertGreater(after["token"], held["token"])
        status, _, body = leader.client.get_lock("kept")
        self.assertEqual((status, body["holder"]["token"]), (200, held["token"]), body)
        self.assertTrue(wait_for(lambda: leader.metric("leasegate_leases_replaced_total") >= 1), leader.stderr_text())
        self.assertTrue(wait_for(lambda: follower.role() == "follower" and len(self.etcd.keys(self.prefix + "/leader/")) == 2),
                        follower.stderr_text())
        self.assertEqual((leader.pid, follower.pid), pids)
        self.assertTrue(leader.running() and follower.running())
        self.assertEqual(leader.role(), "leader")
        status, _, body = follower.client.acquire("through-the-follower", ttl_ms=60000)
        self.assertEqual(status, 200, body)
        self.assertIn("leading again under lease", leader.stderr_text())

    def test_a_leader_whose_lease_etcd_revokes_leads_again_before_a_follower_left_its_key(self):
        """The same, but etcd revokes the leader's lease only (the nemesis suite saw that too):
        the follower's key is then the oldest. The follower, seeing the leader it followed
        still say it leads, waits for its new key and steps behind it (deletes its own key,
        to make it again): the leader leads on, nobody exits. Before the follower stepped
        behind, it led, and the old leader exited."""
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        follower = b if leader is a else a
        self.assertTrue(wait_for(lambda: follower.role() == "follower"), follower.stderr_text())
        held = self.acquire_ok(leader, "kept", ttl_ms=120000)
        pids = (leader.pid, follower.pid)
        r = self.etcd.call("/v3/kv/range", {"key": b64(self.prefix + "/leader/"),
                                            "range_end": b64(self.prefix + "/leader0"), "sort_order": "ASCEND",
                                            "sort_target": "CREATE", "keys_only": True})
        oldest = base64.b64decode(r["kvs"][0]["key"]).decode()
        self.etcd.call("/v3/lease/revoke", {"ID": str(int(oldest.rsplit("/", 1)[1], 16))})
        after = self.acquire_ok(leader, "after", ttl_ms=60000)
        self.assertGreater(after["token"], held["token"])
        self.assertTrue(wait_for(lambda: len(self.etcd.keys(self.prefix + "/leader/")) == 2), follower.stderr_text())
        self.assertEqual((leader.pid, follower.pid), pids)
        self.assertEqual((leader.role(), follower.role()), ("leader", "follower"))
        self.assertIn("steps behind it", follower.stderr_text())
        status, _, body = follower.client.get_lock("kept")
        self.assertEqual((status, body["holder"]["token"]), (200, held["token"]), body)

    def test_a_late_copy_of_a_commit_changes_nothing(self):
        """A commit whose answer does not come is sent again to the next endpoint. A copy
        that etcd applies later, after newer batches, must not write its older values over
        theirs: the commit mark lets it apply nothing. And a copy that was applied but whose
        answer was lost counts as committed."""
        proxy = TxnProxy(self.etcd.url)
        self.addCleanup(proxy.close)
        g = self.leader_through(proxy)
        self.acquire_ok(g, "late/warm")
        # The grant's transaction is held on its way: the gateway sends it again to the
        # other endpoint, which answers; then the lock is released.
        proxy.arm("hold")
        x = self.acquire_ok(g, "late/x", ttl_ms=60000)
        self.assertIsNotNone(proxy.caught)
        status, _, body = g.client.release("late/x", x["lease"])
        self.assertEqual(status, 200, body)
        # Now the held copy of the grant reaches etcd: it must not make late/x held again.
        self.assertFalse(proxy.replay().get("succeeded", False))  # (etcd leaves out a false)
        r = self.etcd.call("/v3/kv/range", {"key": b64(self.prefix + "/locks/late/x")})
        record = json.loads(base64.b64decode(r["kvs"][0]["value"]))
        self.assertNotIn("holder", record)
        self.assertEqual(record["last_token"], x["token"])
        # Applied, but the answer lost: the copy sent again finds its own mark.
        proxy.arm("swallow")
        y = self.acquire_ok(g, "late/y", ttl_ms=60000)
        self.assertIsNotNone(proxy.caught)
        self.assertEqual(g.role(), "leader")
        self.assertGreater(self.acquire_ok(g, "late/z")["token"], y["token"])
        g.kill9()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        status, _, body = g.client.get_lock("late/x")
        self.assertFalse(body["held"], body)
        status, _, body = g.client.get_lock("late/y")
        self.assertEqual(body["holder"]["token"], y["token"], body)

    def test_commits_keep_their_connection_and_survive_losing_it(self):
        """Commits go as gRPC over one kept HTTP/2 connection (h2c.c; Debian 12's libcurl
        could not send a second call with prior knowledge on a connection it kept); and when
        that connection is gone (a member restarted, a network cut it), the next commit must
        still go through at once."""
        proxy = TxnProxy(self.etcd.url)
        self.addCleanup(proxy.close)
        g = self.leader_through(proxy)
        for i in range(20):
            self.acquire_ok(g, "conn/%d" % i)
        self.assertEqual(proxy.h2_connections, 1, "not one kept HTTP/2 connection for every commit")
        proxy.cut()
        for i in range(20, 25):
            self.acquire_ok(g, "conn/%d" % i)
        self.assertEqual(g.role(), "leader")
        self.assertEqual(proxy.h2_connections, 2, "not one new HTTP/2 connection after the cut")
        status, _, body = g.client.get_lock("conn/24")
        self.assertTrue(body["held"], body)

    def test_a_stream_reset_before_its_answer_is_tried_again(self):
        """A commit's stream that the server ends with RST_STREAM NO_ERROR before any header of
        an answer got no answer: the call is made again (h2c.c treats it as a connection that
        broke, as etcd.c treats an unreachable member), not failed as "HTTP 0" (found by
        review: the commit failed and the acquire with it)."""
        proxy = TxnProxy(self.etcd.url)
        self.addCleanup(proxy.close)
        g = self.leader_through(proxy)
        self.acquire_ok(g, "reset/warm")
        for i in range(3):
            with proxy.mu:
                before = proxy.grpc_calls
            proxy.arm("reset")
            self.acquire_ok(g, "reset/%d" % i)
            with proxy.mu:
                self.assertIsNone(proxy.armed, "the armed reset was not met")
                self.assertEqual(proxy.grpc_calls - before, 2, "not the reset call and one more")
        self.assertEqual(g.role(), "leader")
        status, _, body = g.client.get_lock("reset/2")
        self.assertTrue(body["held"], body)

    def test_one_etcd_round_trip_per_request(self):
        """Issue 42: with one client, each request that changes or reveals state costs exactly
        one etcd round trip, its fenced transaction (the commit of its batch, or the barrier of
        a read), and no other call on etcd's key-value API (no read of the mark or the leader
        key beside it). Counted at a proxy that reads the HTTP/2 frames and the JSON requests,
        so an extra round trip per request fails here, however fast the machine."""
        proxy = TxnProxy(self.etcd.url)
        self.addCleanup(proxy.close)
        g = self.leader_through(proxy)
        self.acquire_ok(g, "trips/warm", ttl_ms=600000)

        def counted(action):
            with proxy.mu:
                before = (proxy.grpc_calls, proxy.kv_json_calls)
            action()
            with proxy.mu:
                return proxy.grpc_calls - before[0], proxy.kv_json_calls - before[1]

        for i in range(5):
            name = "trips/%d" % i
            held = {}
            trips = counted(lambda: held.update(self.acquire_ok(g, name, ttl_ms=600000)))
            self.assertEqual(trips, (1, 0), "etcd calls (gRPC, JSON key-value) for one acquire")
            trips = counted(lambda: self.assertEqual(g.client.release(name, held["lease"])[0], 200))
            self.assertEqual(trips, (1, 0), "etcd calls for one release")
            trips = counted(lambda: self.assertEqual(g.client.get_lock(name)[0], 200))
            self.assertEqual(trips, (1, 0), "etcd calls for one read (its barrier)")
        self.assertEqual(proxy.h2_connections, 1, "not one kept HTTP/2 connection")

    def test_a_late_copy_of_the_first_mark_changes_nothing(self):
        """A new leader's first transaction writes its mark REV.0. A copy of it that etcd
        applies late, after the leader's first batches, must not set the mark back: a late
        copy of part 1 could then apply again over newer records (a lost grant, a token given
        twice). Found by review; before the fix the replay succeeded and the gateway's next
        commit failed."""
        proxy = TxnProxy(self.etcd.url)
        self.addCleanup(proxy.close)
        g = self.leader_through(proxy, arm="hold")  # holds its first transaction: the first mark
        self.assertIsNotNone(proxy.caught)
        self.assertIn((self.prefix + "/meta/commit").encode(), proxy.caught)
        x = self.acquire_ok(g, "first/x", ttl_ms=60000)
        status, _, body = g.client.release("first/x", x["lease"])
        self.assertEqual(status, 200, body)
        mark = self.etcd.call("/v3/kv/range", {"key": b64(self.prefix + "/meta/commit")})["kvs"][0]["value"]
        self.assertFalse(proxy.replay().get("succeeded", False))
        after = self.etcd.call("/v3/kv/range", {"key": b64(self.prefix + "/meta/commit")})["kvs"][0]["value"]
        self.assertEqual(after, mark, "the late first mark set the commit mark back")
        self.assertGreater(self.acquire_ok(g, "first/y")["token"], x["token"])
        self.assertEqual(g.role(), "leader")

    def test_a_split_batch_writes_a_revocation_before_the_freed_lock(self):
        """A batch split over transactions leaves a prefix of them if the gateway dies in
        between: the force-released token's revocation must be in before the record that
        frees its lock, or a next leader would load the lock free and accept the token at
        /v1/fence again (found by review). One operation per transaction here (etcd's
        --max-txn-ops set to 2, as --etcd-max-txn-ops tells the gateway), so each is its
        own etcd revision."""
        g = self.gateway(["--etcd-max-txn-ops", "2"])
        self.assertIs(wait_leader([g]), g)
        x = self.acquire_ok(g, "split/x", ttl_ms=60000)
        st, _, body = g.client.request("DELETE", "/v1/locks/split/x")
        self.assertEqual(st, 200, body)

        def at(key, revision=None):
            req = {"key": b64(self.prefix + key)}
            if revision:
                req["revision"] = str(revision)
            return self.etcd.call("/v3/kv/range", req).get("kvs", [])
        # The lock is freed when its lease's record goes (its own record, the name's, stays).
        lease = "/holders/%020d" % x["token"]
        self.assertEqual(at(lease), [], "the force-released lease's record is still in etcd")
        revoked = int(at("/revoked/%020d" % x["token"])[0]["mod_revision"])
        self.assertEqual(len(at(lease, revoked)), 1, "the lock was freed in etcd before its token was revoked")
        g.kill9()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        st, _, body = g.client.fence("split/res", x["token"])
        self.assertEqual((st, body.get("revoked")), (409, True), body)

    def put_commit_mark(self):
        """The commit mark a gateway leaves with its records (records written by a test
        without it are not taken for a lock space: test_etcd_lockspace.py)."""
        self.etcd.call("/v3/kv/put", {"key": b64(self.prefix + "/meta/commit"), "value": b64("%020d.%020d" % (1, 0))})

    def test_a_cut_batch_leaves_younger_readers_and_permits_that_are_dropped(self):
        """A batch split over transactions and cut short can leave a reader or a permit
        it granted beside its name's record from before (a lock's writer, a smaller
        limit): no answer revealed those grants, so the load keeps the older grants and
        drops the younger ones, saying so, instead of refusing to start."""
        import time
        far = int(time.time() * 1000) + 600000
        holder = {"lease": "0f6c7a52-6d0e-4f43-9d2b-6a3b8c1d2e3f", "owner": "writer", "token": 5, "ttl_ms": 600000,
                  "acquired_at_ms": far - 600000, "expires_at_ms": far, "count": 1, "metadata": "{}"}

        def shared(token, kind, name, mode):
            h = dict(holder, token=token, owner="young-%d" % token, kind=kind, name=name, mode=mode,
                     lease="0f6c7a52-6d0e-4f43-9d2b-6a3b8c1d2e%02d" % token)
            return "holders/%020d" % token, h
        state = dict([("locks/c/x", {"last_token": 5, "holder": holder}),
                      ("semaphores/c/s", {"last_token": 7, "limit": 1}),
                      shared(6, 0, "c/x", 1), shared(7, 1, "c/s", 0), shared(8, 1, "c/s", 0)])
        for k, v in state.items():
            self.etcd.call("/v3/kv/put", {"key": b64("%s/%s" % (self.prefix, k)), "value": b64(json.dumps(v))})
        self.put_commit_mark()  # as the leader that wrote them left it
        g = self.gateway()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        st, _, lock = g.client.get_lock("c/x")
        self.assertEqual((lock["mode"], [h["token"] for h in lock["holders"]]), ("write", [5]), lock)
        st, _, sem = g.client.request("GET", "/v1/semaphores/c/s")
        self.assertEqual([h["token"] for h in sem["holders"]], [7], sem)
        err = g.stderr_text()
        self.assertIn("dropped reader token 6 of lock 'c/x'", err)
        self.assertIn("dropped permit token 8 of semaphore 'c/s'", err)
        self.assertGreater(self.acquire_ok(g, "c/y")["token"], 8)  # the counter still vouched for

    def test_a_commit_mark_not_its_predecessor_stops_the_gateway(self):
        """The commit mark is only ever this leader's: another one in etcd means another
        writer, and the commit applies nothing and stops the gateway."""
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        self.acquire_ok(g, "before")
        self.etcd.call("/v3/kv/put", {"key": b64(self.prefix + "/meta/commit"), "value": b64("9" * 41)})
        try:
            status, _, body = g.client.acquire("after")
            self.assertEqual(status, 503, body)
        except OSError:
            pass
        self.assertEqual(g.wait_exit(), 1, g.stderr_text())
        self.assertIn("commit mark", g.stderr_text())
        self.assertNotIn(self.prefix + "/locks/after", self.etcd.keys(self.prefix + "/locks/"))

    def test_many_locks_load_in_pages(self):
        """More keys than one page of the load (500), from concurrent clients, so
        that batches can outgrow one transaction (128 operations)."""
        g = self.gateway()
        self.assertIs(wait_leader([g]), g)
        results = []

        def worker(k):
            c = type(g.client)(g.port)
            for i in range(k, 640, 32):
                results.append(c.acquire("many/%03d" % i, ttl_ms=120000))
            c.close()
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(len(results), 640)
        self.assertTrue(all(r[0] == 200 for r in results), [r for r in results if r[0] != 200][:3])
        tokens = sorted(r[2]["token"] for r in results)
        self.assertEqual(tokens, list(range(tokens[0], tokens[0] + 640)))
        g.kill9()
        g.start()
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        self.assertIn("loaded 640 locks and semaphores (640 leases held", g.stderr_text())
        self.assertGreater(self.acquire_ok(g, "last")["token"], tokens[-1])

    def test_load_goes_on_when_etcd_compacts_under_it(self):
        """etcd compacting (as --auto-compaction does) the revision a leader's load is
        pinned to, while the load pages through 1500 locks: the load goes on at the
        latest revision and misses nothing. Restarted until a compaction did hit a load."""
        n = 1500
        for first in range(0, n, 100):
            self.etcd.call("/v3/kv/txn", {"success": [
                {"request_put": {"key": b64("%s/locks/c%04d" % (self.prefix, i)),
                                 "value": b64(json.dumps({"last_token": i + 1}))}}
                for i in range(first, min(n, first + 100))]})
        self.put_commit_mark()
        stop = threading.Event()

        def compactor():
            while not stop.is_set():
                try:
                    rev = self.etcd.call("/v3/kv/put", {"key": b64("elsewhere/x"), "value": b64("y")})
                    self.etcd.call("/v3/kv/compaction", {"revision": rev["header"]["revision"]})
                except OSError:
                    pass  # compacting the same revision twice is refused: go on
        t = threading.Thread(target=compactor, daemon=True)
        t.start()
        self.addCleanup(t.join, 10)
        self.addCleanup(stop.set)
        g = self.gateway()
        hit = False
        for _attempt in range(10):
            self.assertIs(wait_leader([g]), g, g.stderr_text())
            if "during the load; going on at the latest" in g.stderr_text():
                hit = True
                break
            g.stop_clean()
            g.start()
        stop.set()
        self.assertTrue(hit, "no compaction hit a load in 10 starts")
        self.assertIn("loaded %d locks" % n, g.stderr_text())
        status, _, body = g.client.get_lock("c%04d" % (n - 1))
        self.assertEqual((status, body["last_token"]), (200, n), body)
        self.assertGreater(self.acquire_ok(g, "after")["token"], n)

    def test_run_keeps_its_lease_through_a_failover(self):
        """`leasegate run --server A,B` renews through the failover (the old leader
        killed, 503 from the candidate until it leads) and its command is never stopped."""
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        other = b if leader is a else a
        scratch = tempfile.mkdtemp(prefix="leasegate-etcd-run-")
        self.addCleanup(shutil.rmtree, scratch, True)
        go = os.path.join(scratch, "go")
        script = ('echo $LEASEGATE_TOKEN > token.txt; i=0; '
                  'while [ ! -e "%s" ] && [ $i -lt 900 ]; do sleep 0.05; i=$((i+1)); done; [ -e "%s" ]' % (go, go))
        run = subprocess.Popen([binary_path(), "run", "--lock", "nightly", "--server",
                                "%s,%s" % (leader.url, other.url), "--ttl", "12s", "--grace", "1s", "--",
                                "sh", "-c", script], cwd=scratch, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(scratch, "token.txt"))), "CMD never ran")
            leader.kill9()
            self.assertIs(wait_leader([other]), other, other.stderr_text())
            first = other.client.get_lock("nightly")[2]["holder"]["expires_at_ms"]
            # A renewal through the new leader: the lease moved on, and CMD still runs.
            self.assertTrue(wait_for(lambda: other.client.get_lock("nightly")[2]["holder"]["expires_at_ms"] != first),
                            "no renewal through the new leader")
            self.assertIsNone(run.poll(), run.stderr.read() if run.poll() is not None else "")
            open(go, "w").close()
            _, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.communicate(timeout=10)
        self.assertEqual(run.returncode, 0, err)
        self.assertFalse(other.client.get_lock("nightly")[2]["held"])

    def test_usage_errors(self):
        cases = [["--store", "etcd://127.0.0.1:2379/lg", "--data", "x.db"],
                 ["--store", "etcd://127.0.0.1:2379"],
                 ["--store", "http://127.0.0.1:2379/lg"],
                 ["--leader-ttl", "5"],
                 ["--store", "etcd://127.0.0.1:2379/lg", "--leader-ttl", "1"],
                 ["--etcd-max-txn-ops", "64"],
                 ["--store", "etcd://127.0.0.1:2379/lg", "--etcd-max-txn-ops", "1"]]
        for args in cases:
            proc = subprocess.run([binary_path(), "serve"] + args, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=30)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertTrue(proc.stderr.startswith(b"leasegate serve: "), proc.stderr)


if __name__ == "__main__":
    unittest.main()
