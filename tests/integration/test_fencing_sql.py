"""Fencing in SQL (docs/fencing-sql.md) against a real PostgreSQL and the real leasegate.

PostgreSQL 15 from Debian's postgresql-15 (pg_fixture.py: a temporary data directory, a free
loopback port, an unprivileged user, stopped by PID); examples/sql/schema.sql applied as a
user would. Tokens come from real grants: a "stalled holder" is one whose lease ran out
(ttl_ms 300) while a newer holder waited for the lock and got the next token.

- Pattern 1 (the fence in the row, `UPDATE ... WHERE fence <= $T`) and pattern 2 (the fence
  table, `INSERT ... ON CONFLICT ... WHERE fences.fence <= EXCLUDED.fence RETURNING fence`):
  after the newer holder's write, the stalled holder's write changes nothing (0 rows /
  RETURNING nothing); the newer holder writes twice with one token (and `<` would refuse
  that: the reason for `<=`); a stale write that runs while the newer one is uncommitted
  waits and is refused (READ COMMITTED) or fails with 40001 (REPEATABLE READ), and writers
  under one fence row commit one at a time in token order; fence_claim() raises.
- `POST /v1/fence` then an unconditional write: the check-then-act race lets the stalled
  holder's write land after the newer one; the atomic variants the docs give (a lock per
  resource in the backend held across check and write, or a compare-and-swap write) close it.
- examples/sql/fenced_write.py (psycopg2) and fenced_write.mjs (pg), both patterns: several
  at once keep every write; one SIGSTOPped past its lease is refused by the database after a
  newer one wrote, and says so.
- examples/sql/migration.sql run under `leasegate run` as the docs show; an older token is
  refused and applies nothing.

Skipped with one line when PostgreSQL's binaries are missing (.ci/run fails then: it runs
pg_fixture.py first). Run: LEASEGATE_BIN=build/leasegate python3 tests/integration/test_fencing_sql.py
"""

import os
import shutil
import signal
import subprocess
import sys
import unittest
import uuid

import harness
import pg_fixture
import upstream
from pg_fixture import SqlError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SQL_DIR = os.path.join(ROOT, "examples", "sql")
RUN_TIMEOUT_S = 120
# Variables the examples read, cleared from the inherited environment.
EXAMPLE_VARS = ("LEASEGATE_SERVER", "LEASEGATE_KEY", "KEY", "LOCK", "FENCE", "WRITES", "OWNER",
                "TTL_MS", "WAIT_MS", "WORK_MS")

# The statements of docs/fencing-sql.md, with psql's :'name' for the parameters.
ROW_WRITE = ("UPDATE counters SET value = :'value', fence = :'token' "
             "WHERE id = :'id' AND fence <= :'token' RETURNING value")
ROW_UPSERT = ("INSERT INTO counters AS c (id, value, fence) VALUES (:'id', :'value', :'token') "
              "ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence "
              "WHERE c.fence <= EXCLUDED.fence RETURNING value")
FENCE_CLAIM = ("INSERT INTO fences AS f (resource, fence) VALUES (:'resource', :'token') "
               "ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence "
               "WHERE f.fence <= EXCLUDED.fence RETURNING fence")


def setUpModule():
    why = pg_fixture.missing_server()
    if why:
        raise unittest.SkipTest(why)


def uid():
    return uuid.uuid4().hex[:10]


def bind(sql, **values):
    """sql with each :'name' replaced by a quoted literal (tests only: values are ours)."""
    for name, value in values.items():
        sql = sql.replace(":'%s'" % name, "'%s'" % str(value).replace("'", "''"))
    assert ":'" not in sql, sql
    return sql


class SqlFencing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pg = pg_fixture.Postgres()
        try:
            cls.server = harness.Server()
            cls.pg.psql("-f", os.path.join(SQL_DIR, "schema.sql"))
            # A backend that keeps no fence of its own, for the /v1/fence recipes.
            cls.pg.query("CREATE TABLE documents (id text PRIMARY KEY, body text NOT NULL, "
                         "version bigint NOT NULL DEFAULT 0)")
        except BaseException:
            cls.pg.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()
        cls.pg.stop()

    def setUp(self):
        self.sessions = []

    def tearDown(self):
        for s in self.sessions:
            s.close()

    def session(self, name):
        s = self.pg.session("%s-%s" % (name, uid()))
        self.sessions.append(s)
        return s

    def stalled_and_newer(self, lock):
        """Two grants of lock: the first lease runs out (its holder "stalled"), the second is
        granted after it, with a newer token. Returns (old token, new token)."""
        st, _, old = self.server.acquire(lock, "stalled", ttl_ms=300)
        self.assertEqual(st, 200, old)
        st, _, new = self.server.acquire(lock, "newer", ttl_ms=60000, wait_ms=30000)
        self.assertEqual(st, 200, new)
        self.assertGreater(new["token"], old["token"])
        return old["token"], new["token"]

    def counter(self, key):
        rows = self.pg.query("SELECT value, fence FROM counters WHERE id = '%s'" % key)
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    # Pattern 1 -----------------------------------------------------------------------------

    def test_row_fence_refuses_the_stalled_holder_after_a_newer_write(self):
        key = "row-" + uid()
        old, new = self.stalled_and_newer(key)
        self.pg.query("INSERT INTO counters (id) VALUES ('%s')" % key)
        db = self.session("writer")

        self.assertEqual(db.run(bind(ROW_WRITE, value=20, token=new, id=key)), [["20"]])
        # The same holder writes again with the same token: `<=` lets it.
        self.assertEqual(db.run(bind(ROW_WRITE, value=21, token=new, id=key)), [["21"]])
        # The stalled holder wakes up and writes: 0 rows, nothing changed.
        self.assertEqual(db.run(bind(ROW_WRITE, value=10, token=old, id=key)), [])
        self.assertEqual(self.counter(key), (21, new))
        # Why `<=`: with `<` the holder's own second write would be refused.
        strict = ROW_WRITE.replace("fence <= :'token'", "fence < :'token'")
        self.assertEqual(db.run(bind(strict, value=22, token=new, id=key)), [])

    def test_row_fence_upsert_for_a_row_that_may_not_exist(self):
        key = "row-upsert-" + uid()
        old, new = self.stalled_and_newer(key)
        db = self.session("writer")
        self.assertEqual(db.run(bind(ROW_UPSERT, id=key, value=20, token=new)), [["20"]])   # inserted
        self.assertEqual(db.run(bind(ROW_UPSERT, id=key, value=21, token=new)), [["21"]])   # updated
        self.assertEqual(db.run(bind(ROW_UPSERT, id=key, value=10, token=old)), [])         # stale
        self.assertEqual(self.counter(key), (21, new))

    def test_row_fence_orders_writes_not_holders(self):
        """A stalled holder that writes before the newer holder's first write is applied,
        then overwritten by the newer write: the database sees them in token order."""
        key = "row-order-" + uid()
        old, new = self.stalled_and_newer(key)
        self.pg.query("INSERT INTO counters (id) VALUES ('%s')" % key)
        db = self.session("writer")
        self.assertEqual(db.run(bind(ROW_WRITE, value=10, token=old, id=key)), [["10"]])
        self.assertEqual(db.run(bind(ROW_WRITE, value=20, token=new, id=key)), [["20"]])
        self.assertEqual(db.run(bind(ROW_WRITE, value=11, token=old, id=key)), [])
        self.assertEqual(self.counter(key), (20, new))

    def test_row_fence_rechecks_a_stale_write_that_waited_for_a_newer_one(self):
        """READ COMMITTED: the stale UPDATE waits for the row lock, then re-evaluates its WHERE
        on the committed newer row: 0 rows."""
        key = "row-wait-" + uid()
        old, new = self.stalled_and_newer(key)
        self.pg.query("INSERT INTO counters (id) VALUES ('%s')" % key)
        newer, stalled = self.session("newer"), self.session("stalled")
        newer.run("BEGIN")
        self.assertEqual(newer.run(bind(ROW_WRITE, value=20, token=new, id=key)), [["20"]])
        stalled.send(bind(ROW_WRITE, value=10, token=old, id=key))
        self.pg.wait_until_blocked(stalled.name)
        newer.run("COMMIT")
        self.assertEqual(stalled.result(), [])
        self.assertEqual(self.counter(key), (20, new))

    def test_row_fence_at_repeatable_read_fails_the_stale_write_with_40001(self):
        key = "row-rr-" + uid()
        old, new = self.stalled_and_newer(key)
        self.pg.query("INSERT INTO counters (id) VALUES ('%s')" % key)
        stalled, newer = self.session("stalled"), self.session("newer")
        stalled.run("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.assertEqual(stalled.run("SELECT fence FROM counters WHERE id = '%s'" % key), [["0"]])  # snapshot
        self.assertEqual(newer.run(bind(ROW_WRITE, value=20, token=new, id=key)), [["20"]])
        rows = stalled.run(bind(ROW_WRITE, value=10, token=old, id=key), errors_ok=True)
        self.assertIn("could not serialize access due to concurrent update", rows[0][0])
        stalled.run("ROLLBACK")
        # The retry the docs prescribe sees the newer fence and changes nothing.
        stalled.run("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.assertEqual(stalled.run(bind(ROW_WRITE, value=10, token=old, id=key)), [])
        stalled.run("COMMIT")
        self.assertEqual(self.counter(key), (20, new))

    # Pattern 2 -----------------------------------------------------------------------------

    def entries(self, counter):
        return [(int(n), int(t)) for n, t in
                self.pg.query("SELECT n, token FROM counter_entries WHERE counter = '%s' ORDER BY n" % counter)]

    def append_entry(self, db, counter, token, n):
        db.run("INSERT INTO counter_entries (counter, n, token, owner) VALUES ('%s', %d, %d, 'test')"
               % (counter, n, token))

    def test_fence_table_refuses_the_stalled_holder_after_a_newer_write(self):
        lock = "table-" + uid()
        old, new = self.stalled_and_newer(lock)
        db = self.session("writer")
        for n in (1, 2):  # the newer holder, twice with one token
            db.run("BEGIN")
            self.assertEqual(db.run(bind(FENCE_CLAIM, resource=lock, token=new)), [[str(new)]])
            self.append_entry(db, lock, new, n)
            db.run("COMMIT")
        # The stalled holder: RETURNING nothing, so it rolls back its writes.
        db.run("BEGIN")
        self.assertEqual(db.run(bind(FENCE_CLAIM, resource=lock, token=old)), [])
        db.run("ROLLBACK")
        self.assertEqual(self.entries(lock), [(1, new), (2, new)])
        self.assertEqual(self.pg.query("SELECT fence FROM fences WHERE resource = '%s'" % lock), [[str(new)]])
        # `<` would refuse the holder's own second write.
        strict = FENCE_CLAIM.replace("f.fence <= EXCLUDED.fence", "f.fence < EXCLUDED.fence")
        self.assertEqual(db.run(bind(strict, resource=lock, token=new)), [])
        # fence_claim() (schema.sql) raises instead, which aborts the transaction.
        self.assertEqual(db.run("SELECT fence_claim('%s', %d)" % (lock, new)), [[str(new)]])
        rows = db.run("SELECT fence_claim('%s', %d)" % (lock, old), errors_ok=True)
        self.assertIn('stale fencing token %d for "%s": its fence is %d' % (old, lock, new), rows[0][0])

    def test_fence_table_serializes_the_writers_of_one_resource_in_token_order(self):
        lock = "table-order-" + uid()
        old, new = self.stalled_and_newer(lock)
        first, second = self.session("first"), self.session("second")

        # The older holder claims first (nothing newer has written yet); the newer one
        # waits at its claim until the older transaction ends, then goes on.
        first.run("BEGIN")
        self.assertEqual(first.run(bind(FENCE_CLAIM, resource=lock, token=old)), [[str(old)]])
        second.run("BEGIN")
        second.send(bind(FENCE_CLAIM, resource=lock, token=new))
        self.pg.wait_until_blocked(second.name)
        self.append_entry(first, lock, old, 1)
        first.run("COMMIT")
        self.assertEqual(second.result(), [[str(new)]])
        self.append_entry(second, lock, new, 2)

        # Now the other way round: the newer holder's claim is uncommitted; the stale
        # claim waits for it, then finds the newer fence: RETURNING nothing.
        first.run("BEGIN")
        first.send(bind(FENCE_CLAIM, resource=lock, token=old))
        self.pg.wait_until_blocked(first.name)
        second.run("COMMIT")
        self.assertEqual(first.result(), [])
        # The refused claim still holds the row's lock until its transaction ends (so a
        # stale transaction must end at once): the holder's next claim waits for it.
        second.run("BEGIN")
        second.send(bind(FENCE_CLAIM, resource=lock, token=new))
        self.pg.wait_until_blocked(second.name)
        first.run("ROLLBACK")
        self.assertEqual(second.result(), [[str(new)]])
        second.run("COMMIT")
        self.assertEqual(self.entries(lock), [(1, old), (2, new)])

    def test_fence_table_claims_a_new_resource_once(self):
        """Two claims of a resource with no row yet: the first inserts it, the second waits
        for that insert's transaction and then takes the update path."""
        lock = "table-new-" + uid()
        old, new = self.stalled_and_newer(lock)
        a, b = self.session("a"), self.session("b")
        a.run("BEGIN")
        self.assertEqual(a.run(bind(FENCE_CLAIM, resource=lock, token=new)), [[str(new)]])
        b.run("BEGIN")
        b.send(bind(FENCE_CLAIM, resource=lock, token=old))
        self.pg.wait_until_blocked(b.name)
        a.run("COMMIT")
        self.assertEqual(b.result(), [])
        b.run("ROLLBACK")
        self.assertEqual(self.pg.query("SELECT fence FROM fences WHERE resource = '%s'" % lock), [[str(new)]])

    # The /v1/fence recipe -----------------------------------------------------------------

    def fence(self, resource, token):
        st, _, body = self.server.fence(resource, token)
        self.assertIn(st, (200, 409), body)
        return st == 200

    def body(self, doc):
        return self.pg.query("SELECT body FROM documents WHERE id = '%s'" % doc)[0][0]

    def test_fence_endpoint_then_a_plain_write_is_a_race(self):
        """The race the docs warn about, shown: both checks pass (in token order), and the
        stalled holder's write lands after the newer one."""
        doc = "race-" + uid()
        old, new = self.stalled_and_newer(doc)
        self.pg.query("INSERT INTO documents (id, body) VALUES ('%s', 'initial')" % doc)
        self.assertTrue(self.fence(doc, old))          # the old holder checks, then pauses
        self.assertTrue(self.fence(doc, new))          # the newer holder checks ...
        self.pg.query("UPDATE documents SET body = 'newer' WHERE id = '%s'" % doc)   # ... and writes
        self.pg.query("UPDATE documents SET body = 'stale' WHERE id = '%s'" % doc)   # the old one wakes up
        self.assertEqual(self.body(doc), "stale")      # the newer write is lost
        self.assertFalse(self.fence(doc, old))         # a check now would have refused it: too late

    def test_fence_endpoint_under_a_lock_per_resource_in_the_backend(self):
        """Check and write inside one transaction holding the resource's lock: the newer
        holder's check waits until the older write is done, so no write lands after a newer one."""
        for how in ("row", "advisory"):
            with self.subTest(lock=how):
                self.check_fence_endpoint_under_a_lock(how)

    def check_fence_endpoint_under_a_lock(self, how):
        doc = "locked-%s-%s" % (how, uid())
        old, new = self.stalled_and_newer(doc)
        self.pg.query("INSERT INTO documents (id, body) VALUES ('%s', 'initial')" % doc)
        stalled, newer = self.session("stalled"), self.session("newer")
        if how == "row":
            lock_row = "SELECT body FROM documents WHERE id = '%s' FOR UPDATE" % doc
        else:
            # In a statement of its own: a statement that waits for the lock reads what was
            # committed when it started, before the lock was granted.
            lock_row = ("SELECT pg_advisory_xact_lock(hashtextextended('%s', 0)); "
                        "SELECT body FROM documents WHERE id = '%s'" % (doc, doc))

        stalled.run("BEGIN")
        stalled.run(lock_row)
        self.assertTrue(self.fence(doc, old))           # the old holder checks, then pauses
        newer.run("BEGIN")
        newer.send(lock_row)                            # the newer holder cannot check yet
        self.pg.wait_until_blocked(newer.name)
        stalled.run("UPDATE documents SET body = 'stale' WHERE id = '%s'" % doc)
        stalled.run("COMMIT")
        self.assertEqual(newer.result()[0][-1], "stale")
        self.assertTrue(self.fence(doc, new))
        newer.run("UPDATE documents SET body = 'newer' WHERE id = '%s'" % doc)
        newer.run("COMMIT")
        # The old holder tries once more: its check is refused under the lock; no write.
        stalled.run("BEGIN")
        stalled.run(lock_row)
        self.assertFalse(self.fence(doc, old))
        stalled.run("ROLLBACK")
        self.assertEqual(self.body(doc), "newer")

    def test_fence_endpoint_with_a_compare_and_swap_write(self):
        """Read a version, check the token, write only if the version is unchanged; on a
        changed version, start over (and the check then refuses the stale token)."""
        doc = "cas-" + uid()
        old, new = self.stalled_and_newer(doc)
        self.pg.query("INSERT INTO documents (id, body) VALUES ('%s', 'initial')" % doc)
        cas = "UPDATE documents SET body = '%s', version = version + 1 WHERE id = '%s' AND version = %d RETURNING version"

        seen_old = int(self.pg.query("SELECT version FROM documents WHERE id = '%s'" % doc)[0][0])
        self.assertTrue(self.fence(doc, old))           # the old holder reads, checks, pauses
        seen_new = int(self.pg.query("SELECT version FROM documents WHERE id = '%s'" % doc)[0][0])
        self.assertTrue(self.fence(doc, new))
        self.assertEqual(self.pg.query(cas % ("newer", doc, seen_new)), [[str(seen_new + 1)]])
        self.assertEqual(self.pg.query(cas % ("stale", doc, seen_old)), [])   # version moved: no write
        self.assertFalse(self.fence(doc, old))          # starting over, the check refuses it
        self.assertEqual(self.body(doc), "newer")

    # The examples --------------------------------------------------------------------------

    def languages(self):
        """The examples that can run here; the test is skipped when neither can. A missing
        one is said in one line (and .ci/run fails: pg_fixture.py reports it there)."""
        langs = []
        for lang, why in (("python", pg_fixture.missing_python()), ("node", pg_fixture.missing_node())):
            if why:
                sys.stderr.write("test_fencing_sql: the %s example is not run: %s\n" % (lang, why))
            else:
                langs.append(lang)
        if not langs:
            self.skipTest("neither example can run: psycopg2 and pg are missing")
        return langs

    def example_cmd(self, lang):
        if lang == "python":
            return [pg_fixture.python_with_psycopg2(), os.path.join(SQL_DIR, "fenced_write.py")]
        return [shutil.which("node"), os.path.join(SQL_DIR, "fenced_write.mjs")]

    def start_example(self, lang, **env):
        base = {k: v for k, v in os.environ.items() if k not in EXAMPLE_VARS}
        full = self.pg.env(base)
        full["LEASEGATE_SERVER"] = "http://127.0.0.1:%d" % self.server.port
        full.update({k: str(v) for k, v in env.items()})
        return subprocess.Popen(self.example_cmd(lang), env=full, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, proc, timeout=RUN_TIMEOUT_S):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            harness.resume_process(proc)
            harness.kill_process(proc)
            out, err = proc.communicate()
            self.fail("example did not finish in %d s\nstdout: %s\nstderr: %s" % (timeout, out, err))
        return proc.returncode, out, err

    def test_examples_in_both_languages_keep_every_write(self):
        langs = self.languages()
        for fence in ("row", "table"):
            with self.subTest(fence=fence):
                key = "ex-%s-%s" % (fence, uid())
                procs = [self.start_example(langs[i % len(langs)], KEY=key, FENCE=fence, WRITES=3)
                         for i in range(4)]
                tokens = set()
                for p in procs:
                    rc, out, err = self.finish(p)
                    self.assertEqual(rc, 0, "stdout: %s\nstderr: %s" % (out, err))
                    lines = out.splitlines()
                    self.assertRegex(lines[0], r": holding %s with token \d+$" % key)
                    token = int(lines[0].rsplit(" ", 1)[1])
                    tokens.add(token)
                    self.assertEqual(len(lines), 4, out)
                    for i, line in enumerate(lines[1:], 1):
                        self.assertRegex(line, r": write %d/3 token %d: %s \d+ -> \d+$" % (i, token, key))
                self.assertEqual(len(tokens), 4)
                if fence == "row":
                    self.assertEqual(self.counter(key), (12, max(tokens)))
                else:
                    got = self.entries(key)
                    self.assertEqual([n for n, _ in got], list(range(1, 13)))
                    self.assertEqual([t for _, t in got], sorted(t for _, t in got), "writes out of token order")
                    self.assertEqual({t for _, t in got}, tokens)
                st, _, state = self.server.get_lock(key)
                self.assertFalse(state["held"], state)

    def test_an_example_stalled_past_its_lease_is_refused_by_the_database(self):
        langs = self.languages()
        for lang in langs:
            other = langs[(langs.index(lang) + 1) % len(langs)]  # the newer holder: the other one
            for fence in ("row", "table"):
                with self.subTest(lang=lang, fence=fence):
                    self.check_stalled_example(lang, other, fence)

    def check_stalled_example(self, lang, other, fence):
        key = "stall-%s-%s-%s" % (lang, fence, uid())
        stalled = self.start_example(lang, KEY=key, FENCE=fence, WRITES=1, TTL_MS=1000, WORK_MS=3000)
        try:
            line = stalled.stdout.readline()
            os.kill(stalled.pid, signal.SIGSTOP)  # a pause past its lease, after the grant
            self.assertRegex(line, r": holding %s with token \d+$" % key, stalled.stderr.read() if not line else "")
            old = int(line.split()[-1])
            wrote = self.counter(key) if fence == "row" else self.entries(key)
            self.assertFalse(wrote, "the example wrote before it could be stopped (WORK_MS is too short here)")
            # The newer holder waits for the stalled lease to run out, then writes.
            rc, out, err = self.finish(self.start_example(other, KEY=key, FENCE=fence, WRITES=1, WAIT_MS=30000))
            self.assertEqual(rc, 0, "stdout: %s\nstderr: %s" % (out, err))
            new = int(out.splitlines()[0].split()[-1])
            self.assertGreater(new, old)
        finally:
            harness.resume_process(stalled)
        rc, out, err = self.finish(stalled)
        self.assertEqual(rc, 1, "stdout: %s\nstderr: %s" % (out, err))
        self.assertNotIn(": write 1/1", out)
        resource = key  # LOCK defaults to KEY: the row and the fence table's resource
        self.assertIn("write 1/1: the database refused token %d: the fence of '%s' is %d" % (old, resource, new), err)
        self.assertIn("nothing written", err)
        if fence == "row":
            self.assertEqual(self.counter(key), (1, new))
        else:
            self.assertEqual(self.entries(key), [(1, new)])

    def test_examples_report_bad_settings_and_an_unreachable_database(self):
        for lang in self.languages():
            with self.subTest(lang=lang):
                rc, out, err = self.finish(self.start_example(lang, FENCE="rows"))
                self.assertEqual(rc, 2, err)
                self.assertIn("FENCE must be row or table", err)
                rc, out, err = self.finish(self.start_example(lang, WRITES="two"))
                self.assertEqual(rc, 2, err)
                self.assertIn("WRITES", err)
                with upstream.ClosedPort() as cp:
                    rc, out, err = self.finish(self.start_example(lang, KEY="unreached", PGPORT=cp.port))
                self.assertEqual(rc, 1, err)
                self.assertIn("database:", err)
                st, _, state = self.server.get_lock("unreached")
                self.assertFalse(state["held"])

    # The migration recipe -----------------------------------------------------------------

    def test_migration_under_leasegate_run_and_a_stale_migrator(self):
        migration = os.path.join(SQL_DIR, "migration.sql")
        psql = os.path.join(pg_fixture.PG_BIN, "psql")
        env = self.pg.env()
        env["LEASEGATE_SERVER"] = "http://127.0.0.1:%d" % self.server.port
        env["PATH"] = pg_fixture.PG_BIN + os.pathsep + env.get("PATH", "")
        # As docs/fencing-sql.md shows it (psql found on PATH there).
        cmd = [harness.binary_path(), "run", "--lock", "db/migrations", "--ttl", "30s", "--wait", "1m", "--",
               "sh", "-c", 'exec psql -X -v ON_ERROR_STOP=1 --single-transaction -v token="$LEASEGATE_TOKEN" -f '
               + migration]
        done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
        self.assertEqual(done.returncode, 0, done.stderr)
        st, _, state = self.server.get_lock("db/migrations")
        token = state["last_token"]
        self.assertFalse(state["held"])
        self.assertEqual(self.pg.query("SELECT token FROM schema_migrations"), [[str(token)]])
        self.assertEqual(self.pg.query("SELECT fence FROM fences WHERE resource = 'db/migrations'"), [[str(token)]])

        # A migrator holding an older token (it stalled past its lease) is refused at the
        # first statement, and nothing of the file is applied.
        self.pg.query("DELETE FROM schema_migrations")
        stale = subprocess.run([psql, "-X", "-v", "ON_ERROR_STOP=1", "--single-transaction",
                                "-v", "token=%d" % (token - 1), "-f", migration],
                               env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        self.assertNotEqual(stale.returncode, 0)
        self.assertIn('stale fencing token %d for "db/migrations": its fence is %d' % (token - 1, token), stale.stderr)
        self.assertEqual(self.pg.query("SELECT count(*) FROM schema_migrations"), [["0"]])

        # The next holder migrates again (the file is idempotent).
        done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
        self.assertEqual(done.returncode, 0, done.stderr)
        st, _, state = self.server.get_lock("db/migrations")
        self.assertGreater(state["last_token"], token)
        self.assertEqual(self.pg.query("SELECT token FROM schema_migrations"), [[str(state["last_token"])]])


if __name__ == "__main__":
    harness.run_tests()
