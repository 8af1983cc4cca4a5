"""Schema 11 (issue 38): every lease is one row of its own, whatever its mode, and a name's row
keeps only what is the name's. A database written by the last binary of schema 10
(fixtures/schema10.db, made by fixtures/make_schema10.py, which says how) loads with every
lease, token, reason, revocation, lock-delay, fence mark and audit row it held. The migration is
one step inside the transaction that opens the database, so a kill -9 in its middle leaves
version 10 as it was, never a mix of the two, and the next start migrates it whole (to the
current version: every step runs in that one transaction).

Schema 13 (issue 40): a semaphore's lease may hold several permits, an election's leader lease
carries its value, and a lock's value is a row of its own. Databases written by the binaries of
schemas 11 and 12 (tests/powerloss/schemas/vN.sql, made by tests/powerloss/schemas/make.py) load
with every lease as it was, each of one permit, and take the new records at once.

Schema 14: a lock's value keeps the request_ids of the last writes of the grant that wrote it
(lock_values.writes), so a retry of one of those writes whose answer was lost in a restart is
answered, not written again. A database written by the binary of schema 13 (schemas/v13.sql)
loads with every value as it was (none with a list: no retry matches them) and takes the new
field at once."""

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import unittest
import uuid

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "schema10.db")
# The schema a start migrates to: 11's lockspace, then 12's audit reason, then 13's permits,
# leaders' values and locks' values (issue 40), then 14's remembered writes of a lock's value; every
# step of the migration is in the one opening transaction.
LATEST = 14
with open(os.path.join(HERE, "fixtures", "schema10.json")) as _f:
    MADE = json.load(_f)
DAY = 86400000
OLD_TABLES = {"locks", "semaphores", "holders"}
SCHEMAS = os.path.join(HERE, "..", "powerloss", "schemas")


def schema10_copy(into):
    """The fixture in `into`, its wall-clock times moved forward by its age, so that the leases
    it holds (each of a day) are still running as they were when it was written."""
    path = os.path.join(into, "leasegate.db")
    shutil.copyfile(FIXTURE, path)
    age = int(time.time() * 1000) - MADE["made_at_ms"]
    db = sqlite3.connect(path)
    for table in ("locks", "holders"):
        db.execute("UPDATE %s SET acquired_at_ms = acquired_at_ms + ?1, expires_at_ms = expires_at_ms + ?1"
                   " WHERE lease IS NOT NULL" % table, (age,))
    db.execute("UPDATE locks SET delay_until_ms = delay_until_ms + ?1 WHERE delay_until_ms IS NOT NULL", (age,))
    db.commit()
    db.close()
    return path


def schema_of(path):
    """(schema_version, table names, rows per table of interest), read as SQLite recovers the file."""
    db = sqlite3.connect(path)
    try:
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = {t: db.execute("SELECT count(*) FROM %s" % t).fetchone()[0]
                for t in tables & (OLD_TABLES | {"lockspace"})}
        return version, tables, rows
    finally:
        db.close()


class MigrationTest(unittest.TestCase):
    def setUp(self):
        harness.sqlite_only(self, "migrates a SQLite database")
        self.dir = tempfile.mkdtemp(prefix="leasegate-migration-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_a_schema_10_database_keeps_every_lease_and_token(self):
        path = schema10_copy(self.dir)
        with harness.Server(data_dir=self.dir) as srv:
            c = srv.client
            # Every name's last token, as the old server showed it.
            for key, last in MADE["names"].items():
                kind, name = key.split(" ", 1)
                st, _, body = c.request("GET", "/v1/%ss/%s" % (kind, name))
                self.assertEqual((st, body["last_token"]), (200, last), (key, body))
            st, _, rw = c.get_lock("fx/rw")
            self.assertEqual((rw["mode"], rw["holders_total"]), ("read", 3), rw)
            st, _, sem = c.request("GET", "/v1/semaphores/fx/sem")
            self.assertEqual((sem["limit"], sem["holders_total"], sem["available"]), (3, 2, 1), sem)
            # Every lease holds as it did: its owner, token, metadata, mode and count, and renews.
            for held in MADE["leases"]:
                base = "/v1/%ss/%s" % (held["kind"], held["name"])
                st, _, view = c.request("GET", base)
                mine = [h for h in view["holders"] if h["token"] == held["token"]]
                self.assertEqual(len(mine), 1, (held, view))
                self.assertEqual((mine[0]["owner"], mine[0]["metadata"], mine[0]["count"]),
                                 (held["owner"], held["metadata"], held["count"]), (held, view))
                if held["kind"] == "lock":
                    self.assertEqual(view["mode"], held["mode"], view)
                st, _, body = c.request("POST", base + "/renew", {"lease": held["lease"], "ttl_ms": DAY})
                self.assertEqual((st, body.get("token")), (200, held["token"]), (held, body))
            # The writer's request_id was kept: a retry of its acquire gets the same grant.
            w1 = MADE["leases"][0]
            st, _, body = c.acquire("fx/w1", owner="alice", ttl_ms=DAY, request_id="r-1")
            self.assertEqual((st, body.get("lease"), body.get("token")), (200, w1["lease"], w1["token"]), body)
            # The re-entered writer keeps its count: three releases free it.
            w2 = MADE["leases"][1]
            for left in (2, 1, 0):
                st, _, body = c.release("fx/w2", w2["lease"])
                self.assertEqual((st, body.get("count")), (200, left), body)
            # Ended leases keep their reasons; the revoked token stays revoked; the lock-delay runs.
            st, _, body = c.renew("fx/rel", MADE["released"]["lease"])
            self.assertEqual((st, body.get("reason")), (409, "released"), body)
            st, _, body = c.renew("fx/rev", MADE["revoked"]["lease"])
            self.assertEqual((st, body.get("reason")), (409, "revoked"), body)
            st, _, body = c.fence("fx-other", MADE["revoked"]["token"])
            self.assertEqual((st, body.get("revoked")), (409, True), body)
            st, _, body = c.acquire("fx/rev", owner="eve")
            self.assertEqual((st, body.get("error")), (409, "lock_held"), body)
            self.assertIsNotNone(body.get("delay_until_ms"), body)
            # The fence mark holds.
            st, _, body = c.fence(MADE["fence"]["resource"], MADE["fence"]["max_token"] - 1)
            self.assertEqual((st, body.get("max_token")), (409, MADE["fence"]["max_token"]), body)
            # Tokens go on above every token the old server issued, never below.
            st, _, body = c.request("POST", "/v1/semaphores/fx/sem/acquire", {"owner": "p3", "limit": 3})
            self.assertEqual((st, body.get("token")), (200, MADE["last_token"] + 1), body)
            st, _, body = c.request("POST", "/v1/semaphores/fx/sem/acquire", {"owner": "p4", "limit": 3})
            self.assertEqual((st, body.get("error")), (409, "semaphore_full"), body)
            # The audit trail's rows are there, and new ones follow.
            st, _, body = c.request("GET", "/v1/audit?limit=1000")
            self.assertGreaterEqual(len(body["rows"]), MADE["audit_rows"] + 1, body)
        version, tables, rows = schema_of(path)
        self.assertEqual(version, LATEST)
        self.assertIn("lockspace", tables)
        self.assertFalse(OLD_TABLES & tables, tables)

    def test_a_kill_in_the_middle_of_the_migration_leaves_the_old_schema(self):
        """The database is made large (so that its migration takes a while and writes the WAL
        as it goes); the server is killed with SIGKILL, before it listens, once its WAL has
        grown to a few sizes, and once the database file itself grows (a checkpoint: right
        after a commit, which a migration cut in two transactions would show half done);
        after each kill the file holds version 10 with every row, or the latest (LATEST) with every
        row, never a mix; then a start migrates it and serves every lease."""
        path = schema10_copy(self.dir)
        now = int(time.time() * 1000)
        writers, readers = 60000, 20000
        db = sqlite3.connect(path)
        first = MADE["last_token"] + 1
        db.executemany("INSERT INTO locks(name, last_token, lease, owner, token, ttl_ms, acquired_at_ms,"
                       " expires_at_ms, count, metadata, deadline_ms, boot, request_id, key, lock_delay_ms)"
                       " VALUES(?1, ?2, ?3, 'big', ?2, ?4, ?5, ?6, 1, '{\"pad\":\"" + "x" * 100 + "\"}', NULL, NULL,"
                       " NULL, NULL, 0)",
                       ((("big/%06d" % i), first + i, uuid.uuid4().bytes, DAY, now, now + DAY)
                        for i in range(writers)))
        db.executemany("INSERT INTO holders(token, kind, lock, lease, owner, ttl_ms, acquired_at_ms, expires_at_ms,"
                       " count, metadata, deadline_ms, boot, request_id, key, mode, lock_delay_ms)"
                       " VALUES(?1, 0, ?2, ?3, 'many', ?4, ?5, ?6, 1, '{}', NULL, NULL, NULL, NULL, 1, 0)",
                       ((first + writers + i, "shared/%03d" % (i % 100), uuid.uuid4().bytes, DAY, now, now + DAY)
                        for i in range(readers)))
        db.executemany("INSERT INTO locks(name, last_token) VALUES(?1, ?2)",
                       (("shared/%03d" % k, first + writers + readers - 1) for k in range(100)))
        last = first + writers + readers - 1
        db.execute("UPDATE meta SET value = ?1 WHERE key = 'last_token'", (last,))
        db.commit()
        db.close()
        version, tables, before = schema_of(path)
        self.assertEqual(version, 10)
        db = sqlite3.connect(path)
        held = db.execute("SELECT count(*) FROM locks WHERE lease IS NOT NULL").fetchone()[0]
        db.close()
        # Version 11 on has a row per name and one per lease.
        after = before["locks"] + before["semaphores"] + held + before["holders"]
        wal = path + "-wal"
        size = os.path.getsize(path)
        seen = {10: 0, LATEST: 0}
        # (WAL bytes, database bytes): a kill once either is reached.
        for wal_bytes, db_bytes in ((1 << 20, None), (size // 8, None), (size // 2, None), (None, size + 1),
                                    (None, size + 1)):
            proc = subprocess.Popen([harness.binary_path(), "serve", "--listen", "127.0.0.1:0", "--data", path],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self.dir)
            os.set_blocking(proc.stdout.fileno(), False)
            out = b""
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                out += proc.stdout.read() or b""
                if (b"listening" in out or (wal_bytes and os.path.exists(wal) and os.path.getsize(wal) >= wal_bytes)
                        or (db_bytes and os.path.getsize(path) >= db_bytes)):
                    break
                time.sleep(0.002)
            harness.kill_process(proc)
            proc.stdout.close()
            version, tables, rows = schema_of(path)
            if version == 10:
                self.assertTrue(OLD_TABLES <= tables and "lockspace" not in tables, tables)
                self.assertEqual(rows, before)
            else:
                self.assertEqual(version, LATEST)
                self.assertFalse(OLD_TABLES & tables, tables)
                self.assertEqual(rows, {"lockspace": after})
            seen[version] += 1
            if version == LATEST:
                break  # migrated whole: nothing left to cut
        # At least one kill came while the migration wrote (its WAL had grown, it did not listen).
        self.assertGreater(seen[10], 0, seen)
        with harness.Server(data_dir=self.dir) as srv:
            st, _, body = srv.client.get_lock("big/%06d" % (writers - 1))
            self.assertEqual((st, body["holder"]["token"], body["holder"]["owner"]), (200, last - readers, "big"), body)
            st, _, body = srv.client.get_lock("shared/007")
            self.assertEqual((body["mode"], body["holders_total"]), ("read", readers // 100), body)
            st, _, body = srv.client.acquire("fresh", owner="new")
            self.assertEqual((st, body.get("token")), (200, last + 1), body)
        version, tables, rows = schema_of(path)
        self.assertEqual(version, LATEST)

    def test_a_schema_11_database_keeps_every_lease_and_takes_the_new_records(self):
        self.older_database_keeps_every_lease(11)

    def test_a_schema_12_database_keeps_every_lease_and_takes_the_new_records(self):
        self.older_database_keeps_every_lease(12)

    def test_a_schema_13_database_keeps_every_value_and_takes_request_ids(self):
        self.older_database_keeps_every_lease(13)
        db = sqlite3.connect(os.path.join(self.dir, "leasegate.db"))
        values = dict((name, (text, version, token)) for name, text, version, token in
                      db.execute("SELECT name, value, version, token FROM lock_values WHERE name LIKE 'fx/v%'"))
        self.assertEqual(db.execute("SELECT count(*) FROM lock_values WHERE writes IS NOT NULL").fetchone()[0], 0)
        # fx/v00: still held by its writer (the fixture released the odd ones).
        blob, token = db.execute("SELECT lease, token FROM lockspace WHERE kind = 0 AND name = 'fx/v00'"
                                 " AND token <> 0").fetchone()
        db.close()
        self.assertEqual(len(values), 10)
        self.assertEqual((json.loads(values["fx/v00"][0]), values["fx/v00"][1:]), ({"n": 0}, (1, token)))
        lease = str(uuid.UUID(bytes=bytes(blob)))
        with harness.Server(data_dir=self.dir) as srv:
            for name, (text, version, writer) in values.items():
                st, _, view = srv.client.request("GET", "/v1/locks/%s/value" % name)
                self.assertEqual((view["value"], view["value_version"], view["value_token"]),
                                 (json.loads(text), version, writer), view)
            body = {"lease": lease, "value": {"n": 100}, "if_version": 1, "request_id": "after-migration"}
            st, _, first = srv.client.request("PUT", "/v1/locks/fx/v00/value", body=body)
            self.assertEqual((st, first.get("value_version")), (200, 2), first)
            srv.restart(kill9=True)
            st, _, again = srv.client.request("PUT", "/v1/locks/fx/v00/value", body=body)
            self.assertEqual((st, again), (200, first))
        db = sqlite3.connect(os.path.join(self.dir, "leasegate.db"))
        version, writes = db.execute("SELECT version, writes FROM lock_values WHERE name = 'fx/v00'").fetchone()
        self.assertEqual((version, writes.split(" ")[0], writes.split(" ")[2]), (2, "2", "after-migration\n"), writes)
        db.close()

    def test_the_benchs_database_is_made_at_the_latest_schema(self):
        """bench/gen_db.py (CI's benchmark smoke, bench/compare.sh) has the binary make its
        database and refuses a schema it does not write: it moves with the schema. It stopped
        at 14 ("made a database of schema 14; this script writes schema 13")."""
        path = os.path.join(self.dir, "leasegate.db")
        script = os.path.join(HERE, "..", "..", "bench", "gen_db.py")
        r = subprocess.run(["python3", script, path, "--locks", "20", "--held-every", "4", "--binary",
                            harness.binary_path()], capture_output=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertEqual(schema_of(path)[0], LATEST)
        with harness.Server(data_dir=self.dir) as srv:
            st, _, view = srv.get_lock("bench/lock-0000004")
            self.assertEqual((st, view["held"], view["holder"]["token"]), (200, True, 5), view)

    def older_database_keeps_every_lease(self, version):
        """A database of `version` (schemas/vN.sql, written by that schema's binary) migrates to
        LATEST with every lease as it was (each of one permit before schema 13, which has
        leases of several), and takes issue 40's records."""
        path = os.path.join(self.dir, "leasegate.db")
        with open(os.path.join(SCHEMAS, "v%d.sql" % version)) as f:
            sql = f.read()
        db = sqlite3.connect(path)
        db.executescript(sql)
        # Its leases (of an hour) as if granted now; its boot unknown here.
        newest = db.execute("SELECT max(acquired_at_ms) FROM lockspace").fetchone()[0]
        age = int(time.time() * 1000) - newest
        db.execute("UPDATE lockspace SET acquired_at_ms = acquired_at_ms + ?1, expires_at_ms = expires_at_ms + ?1"
                   " WHERE token <> 0", (age,))
        db.execute("UPDATE meta SET value = 'fixture' WHERE key = 'boot_id'")
        permits = "coalesce(permits, 1)" if version >= 13 else "1"
        leases = db.execute("SELECT kind, name, token, owner, count, mode, %s FROM lockspace WHERE token <> 0"
                            " ORDER BY token" % permits).fetchall()
        wide = db.execute("SELECT count(*) FROM lockspace WHERE %s > 1" % permits).fetchone()[0]
        last = db.execute("SELECT max(max(coalesce(last_token, 0)), max(token)) FROM lockspace").fetchone()[0]
        db.commit()
        db.close()
        self.assertEqual(schema_of(path)[0], version)
        self.assertGreater(len(leases), 50)
        with harness.Server(data_dir=self.dir) as srv:
            c = srv.client
            for kind, name, token, owner, count, mode, held in leases:
                base = "/v1/%s/%s" % ("semaphores" if kind == 1 else "locks", name)
                st, _, view = c.request("GET", base)
                mine = [h for h in view["holders"] if h["token"] == token]
                self.assertEqual(len(mine), 1, (name, token, view))
                self.assertEqual((mine[0]["owner"], mine[0]["count"]), (owner, count), view)
                if kind == 1:
                    self.assertEqual(mine[0]["permits"], held, view)
                    self.assertEqual(view["permits_used"], sum(h["permits"] for h in view["holders"]), view)
            # A migrated semaphore (3 permits, 2 held) takes a lease of one more; not of two.
            st, _, body = c.request("POST", "/v1/semaphores/fx/s0/acquire",
                                    {"owner": "wide", "limit": 3, "permits": 2})
            self.assertEqual((st, body.get("error")), (409, "semaphore_full"), body)
            st, _, body = c.request("POST", "/v1/semaphores/fx/s0/acquire",
                                    {"owner": "one", "limit": 3, "permits": 1})
            self.assertEqual((st, body.get("token")), (200, last + 1), body)
            st, _, body = c.request("POST", "/v1/semaphores/fx/new/acquire",
                                    {"owner": "wide", "limit": 5, "permits": 4, "ttl_ms": DAY})
            self.assertEqual((st, body.get("permits")), (200, 4), body)
        version, tables, rows = schema_of(path)
        self.assertEqual(version, LATEST)
        self.assertIn("lock_values", tables)
        db = sqlite3.connect(path)
        self.assertEqual(db.execute("SELECT permits FROM lockspace WHERE name = 'fx/new' AND token <> 0").fetchall(),
                         [(4,)])
        self.assertEqual(db.execute("SELECT count(*) FROM lockspace WHERE permits IS NOT NULL").fetchone()[0], wide + 1)
        db.close()


if __name__ == "__main__":
    harness.run_tests()
