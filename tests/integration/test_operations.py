"""Operations: backup and restore of a live database, the token floor (--min-token),
listening on IPv6 and host names, the access log, healthcheck, --version, the messages of
usage errors, and the one line an orderly stop logs."""

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import unittest

import harness

LEASE_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def run_cli(*args, timeout=30, cwd=None, env=None):
    p = subprocess.run([harness.binary_path()] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout, cwd=cwd, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def start_serve(args, ready_re, cwd):
    """Starts `leasegate serve ARGS` (any --listen) and returns (proc, url) once it listens."""
    proc = subprocess.Popen([harness.binary_path(), "serve"] + args, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    line = b""
    deadline = time.monotonic() + harness.START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.match(ready_re, line.decode())
        if m:
            return proc, m.group(1)
    harness.kill_process(proc)
    raise AssertionError("server did not listen: %r %r" % (line, proc.stderr.read()[-2000:]))


def http_get(url, timeout=5):
    """GET with a fresh socket to any address family: (status, body text)."""
    m = re.match(r"http://(\[[^\]]+\]|[^:/]+):(\d+)(/.*)", url)
    host, port, path = m.group(1).strip("[]"), int(m.group(2)), m.group(3)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path).encode())
        st, _, body = harness.read_response(s, timeout)
    return st, body.decode()


class BackupTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-backup-")
        self.srv = harness.Server()

    def tearDown(self):
        self.srv.cleanup()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_backup_of_a_live_database_under_load_restores_held_leases(self):
        harness.sqlite_only(self, "backs up and restores the SQLite database file")
        held = {}
        for i in range(20):
            st, _, b = self.srv.acquire("held/%d" % i, "h", ttl_ms=600000)
            self.assertEqual(st, 200, b)
            held["held/%d" % i] = b
        # Grants and releases keep committing while the backup reads.
        stop = threading.Event()
        errors = []
        last_token = [0]

        def churn():
            c = self.srv.new_client()
            try:
                n = 0
                while not stop.is_set() and n < 100000:
                    st, _, b = c.acquire("churn/%d" % (n % 50), "c")
                    if st != 200:
                        errors.append((st, b))
                        return
                    last_token[0] = max(last_token[0], b["token"])
                    st, _, r = c.release("churn/%d" % (n % 50), b["lease"])
                    if st != 200:
                        errors.append((st, r))
                        return
                    n += 1
            finally:
                c.close()

        t = threading.Thread(target=churn, daemon=True)
        t.start()
        time.sleep(0.3)
        dest = os.path.join(self.dir, "copy.db")
        # The server holds its database exclusively: the copy is asked of it.
        rc, out, err = run_cli("backup", "--server", "http://127.0.0.1:%d" % self.srv.port, dest)
        time.sleep(0.2)
        stop.set()
        t.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(rc, 0, err)
        m = re.search(r"(\d+) locks, last token (\d+)", out)
        self.assertTrue(m, out)
        self.assertGreaterEqual(int(m.group(1)), 20)
        with contextlib.closing(sqlite3.connect(dest)) as db:
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            rows = db.execute("SELECT count(*) FROM lockspace WHERE token <> 0 AND name LIKE 'held/%'").fetchone()
            self.assertEqual(rows[0], 20)
        self.assertFalse(os.path.exists(dest + ".partial"))
        # The live server never noticed.
        st, _, b = self.srv.renew("held/0", held["held/0"]["lease"])
        self.assertEqual(st, 200, b)
        highest = max(last_token[0], max(b["token"] for b in held.values()))
        self.srv.stop_clean()

        # Restore as the README says: the copy becomes the database, tokens continue above
        # the last one ever issued.
        restored = harness.Server(data_dir=tempfile.mkdtemp(prefix="leasegate-restored-"), start=False)
        try:
            os.replace(dest, restored.data_path)
            restored.extra_args = ["--min-token", str(highest)]
            restored.start()
            for name, b in held.items():
                st, _, r = restored.renew(name, b["lease"])
                self.assertEqual(st, 200, (name, r))
                self.assertEqual(r["token"], b["token"])
            st, _, g = restored.acquire("after-restore", "n")
            self.assertEqual(st, 200, g)
            self.assertEqual(g["token"], highest + 1)
            restored.stop_clean()
        finally:
            restored.cleanup()
            import shutil
            shutil.rmtree(restored.dir, ignore_errors=True)

    def test_a_copy_left_by_a_killed_backup_is_removed_at_start(self):
        """A server killed while it made a backup's copy (sqlite_snapshot: a file beside the
        database, unlinked once written) leaves the copy, every lease in it; the next start
        removes it, and only it."""
        if harness.on_etcd():
            self.skipTest("SQLite's own files")
        d = tempfile.mkdtemp(prefix="leasegate-snap-")
        self.addCleanup(shutil.rmtree, d, True)
        left = os.path.join(d, "leasegate.db.snapshot-a1B2c3")
        kept = [os.path.join(d, n) for n in ("leasegate.db.snapshot-mine.bak", "other.db.snapshot-a1B2c3")]
        for path in [left] + kept:
            with open(path, "wb") as f:
                f.write(b"SQLite format 3\0")
        srv = harness.Server(data_dir=d)
        self.addCleanup(srv.cleanup)
        self.assertEqual(srv.acquire("snap/1")[0], 200)
        self.assertFalse(os.path.exists(left), "the copy a killed backup left is still there")
        for path in kept:
            self.assertTrue(os.path.exists(path), "%s is not a backup's copy, and was removed" % path)
        self.assertIn("removed %s" % left, srv.stderr_text())

    def test_a_copy_of_the_file_is_refused_while_the_server_runs_and_made_once_it_stopped(self):
        harness.sqlite_only(self, "copies the SQLite database file")
        st, _, g = self.srv.acquire("kept", "o", ttl_ms=600000)
        self.assertEqual(st, 200, g)
        dest = os.path.join(self.dir, "file-copy.db")
        rc, _, err = run_cli("backup", "--data", self.srv.data_path, dest)
        self.assertEqual(rc, 1, err)
        self.assertIn("a leasegate server is using", err)
        self.assertIn("--server", err)
        self.assertFalse(os.path.exists(dest))
        self.assertFalse(os.path.exists(dest + ".partial"))
        # The server noticed nothing, and no -shm file is used (exclusive locking).
        st, _, r = self.srv.renew("kept", g["lease"])
        self.assertEqual(st, 200, r)
        self.assertFalse(os.path.exists(self.srv.data_path + "-shm"))
        self.srv.kill9()  # what it acknowledged is in the WAL, which the copy reads
        rc, out, err = run_cli("backup", "--data", self.srv.data_path, dest)
        self.assertEqual(rc, 0, err)
        self.assertIn("1 locks, last token %d" % g["token"], out)
        with contextlib.closing(sqlite3.connect(dest)) as db:
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            self.assertEqual(db.execute("SELECT token FROM lockspace WHERE token <> 0 AND name = 'kept'").fetchone()[0], g["token"])

    def test_backup_from_the_server_needs_an_admin_key_and_a_reachable_server(self):
        harness.sqlite_only(self, "backs up the SQLite database")
        keys = os.path.join(self.dir, "keys.txt")
        made = {}
        for name, role in (("root", "admin"), ("app", "client")):
            rc, out, err = run_cli("keygen", name, role, "*")
            self.assertEqual(rc, 0, err)
            made[role] = out.splitlines()
        with open(keys, "w") as f:
            f.write("%s\n%s\n" % (made["admin"][1], made["client"][1]))
        admin, client = made["admin"][0], made["client"][0]
        srv = harness.Server(extra_args=["--auth-file", keys], start=False)
        try:
            srv.start()
            url = "http://127.0.0.1:%d" % srv.port
            dest = os.path.join(self.dir, "keyed.db")
            for key, why in ((None, "401"), (client, "403")):  # client keys are refused
                env = dict(os.environ)
                env.pop("LEASEGATE_KEY", None)
                if key:
                    env["LEASEGATE_KEY"] = key
                rc, _, err = run_cli("backup", "--server", url, dest, env=env)
                self.assertEqual(rc, 1, err)
                self.assertIn("HTTP " + why, err)
                self.assertFalse(os.path.exists(dest))
                self.assertFalse(os.path.exists(dest + ".partial"))
            env = dict(os.environ, LEASEGATE_KEY=admin)
            rc, out, err = run_cli("backup", "--server", url, dest, env=env)
            self.assertEqual(rc, 0, err)
            self.assertIn("0 locks", out)
            srv.stop_clean()
            rc, _, err = run_cli("backup", "--server", url, os.path.join(self.dir, "gone.db"), "--timeout", "2s")
            self.assertEqual(rc, 1, err)
            self.assertFalse(os.path.exists(os.path.join(self.dir, "gone.db.partial")))
        finally:
            srv.cleanup()
            import shutil
            shutil.rmtree(srv.dir, ignore_errors=True)

    def test_backup_refuses_an_existing_file_and_a_missing_database(self):
        dest = os.path.join(self.dir, "exists.db")
        with open(dest, "w") as f:
            f.write("keep me")
        rc, _, err = run_cli("backup", "--data", self.srv.data_path, dest)
        self.assertEqual(rc, 1, err)
        self.assertIn("exists", err)
        with open(dest) as f:
            self.assertEqual(f.read(), "keep me")
        missing = os.path.join(self.dir, "no-such.db")
        out_path = os.path.join(self.dir, "never.db")
        rc, _, err = run_cli("backup", "--data", missing, out_path)
        self.assertEqual(rc, 1, err)
        self.assertFalse(os.path.exists(missing), "backup created the source database")
        self.assertFalse(os.path.exists(out_path))
        self.assertFalse(os.path.exists(out_path + ".partial"))
        rc, _, err = run_cli("backup")
        self.assertEqual(rc, 2, err)
        rc, _, err = run_cli("backup", "--bogus", "x")
        self.assertEqual(rc, 2, err)
        rc, _, err = run_cli("backup", "--server", "http://127.0.0.1:%d" % self.srv.port, dest)
        self.assertEqual(rc, 1, err)
        self.assertIn("exists", err)
        with open(dest) as f:
            self.assertEqual(f.read(), "keep me")
        rc, _, err = run_cli("backup", "--data", self.srv.data_path, "--server", "http://127.0.0.1:1", out_path)
        self.assertEqual(rc, 2, err)
        rc, _, err = run_cli("backup", "--timeout", "5", out_path)
        self.assertEqual(rc, 2, err)


class MinTokenTests(unittest.TestCase):
    def setUp(self):
        self.srv = harness.Server(start=False)

    def tearDown(self):
        self.srv.cleanup()

    def test_floor_is_durable_before_the_server_answers(self):
        self.srv.extra_args = ["--min-token", "5000"]
        self.srv.start()
        st, _, _ = self.srv.request("GET", "/healthz")
        self.assertEqual(st, 200)
        self.assertEqual(self.srv.metric("leasegate_last_token"), 5000)
        # No grant yet: only the floor itself can carry the counter across kill -9.
        self.srv.kill9()
        self.srv.extra_args = []
        self.srv.start()
        st, _, b = self.srv.acquire("a", "x")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["token"], 5001)

    def test_floor_below_the_counter_changes_nothing(self):
        self.srv.start()
        for _ in range(3):
            st, _, b = self.srv.acquire("low", "x")
            self.assertEqual(st, 200, b)
            self.srv.release("low", b["lease"])
        self.srv.extra_args = ["--min-token", "2"]
        self.srv.restart()
        st, _, b = self.srv.acquire("low", "x")
        self.assertEqual(b["token"], 4)

    def test_bad_values_are_usage_errors(self):
        for v in ("-1", "abc", "9223372036854775807", ""):
            rc, _, err = run_cli("serve", "--data", os.path.join(self.srv.dir, "x.db"), "--min-token", v)
            self.assertEqual(rc, 2, (v, err))
            self.assertIn("--min-token", err)


class ListenTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-listen-")

    def tearDown(self):
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    def serve_and_check(self, listen, ready_re):
        proc, url = start_serve(["--listen", listen, "--data", os.path.join(self.dir, "l.db")], ready_re, self.dir)
        try:
            st, body = http_get(url + "/healthz")
            self.assertEqual(st, 200, body)
        finally:
            self.assertEqual(harness.stop_process(proc), 0)
            proc.stdout.close()
            proc.stderr.close()

    def test_ipv6_loopback(self):
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::1", 0))
        except OSError:
            self.skipTest("no IPv6 loopback on this machine")
        self.serve_and_check("[::1]:0", r"leasegate: listening on (http://\[::1\]:\d+)")

    def test_host_name(self):
        self.serve_and_check("localhost:0", r"leasegate: listening on (http://(?:127\.0\.0\.1|\[::1\]):\d+)")

    def test_port_in_use_says_why(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            rc, out, err = run_cli("serve", "--listen", "127.0.0.1:%d" % port, "--data",
                                   os.path.join(self.dir, "p.db"), cwd=self.dir)
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot listen on 127.0.0.1:%d" % port, err)
        self.assertIn("in use", err)

    def test_unresolvable_host_says_why(self):
        rc, _, err = run_cli("serve", "--listen", "no-such-host.invalid:0", "--data",
                             os.path.join(self.dir, "r.db"), cwd=self.dir)
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot resolve 'no-such-host.invalid'", err)

    def test_malformed_addresses_are_usage_errors(self):
        for bad in ("::1:7400", "[::1]7400", "[::1]:", "host:", ":7400", "host:70000", "[]:1"):
            rc, _, err = run_cli("serve", "--listen", bad, "--data", os.path.join(self.dir, "m.db"), cwd=self.dir)
            self.assertEqual(rc, 2, (bad, err))
            self.assertIn("--listen", err)


class AccessLogTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-log-")
        self.log = os.path.join(self.dir, "access.log")
        self.srv = harness.Server(extra_args=["--access-log", self.log])

    def tearDown(self):
        self.srv.cleanup()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_one_line_per_request_and_never_a_lease(self):
        st, _, a = self.srv.acquire("log/a", "o", ttl_ms=60000)
        self.assertEqual(st, 200, a)
        out = {}

        def waiter():
            c = self.srv.new_client()
            out["w"] = c.acquire("log/a", "w", wait_ms=10000)
            c.close()

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters("log/a") == 1, what="waiter queued")
        st, _, r = self.srv.release("log/a", a["lease"])
        self.assertEqual(st, 200, r)
        t.join(10)
        self.assertEqual(out["w"][0], 200, out)
        self.srv.request("GET", "/v1/locks/log/a?x=%20y")
        self.srv.request("GET", "/no-such-path")
        self.srv.stop_clean()
        with open(self.log) as f:
            lines = f.read().splitlines()
        pat = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z 127\.0\.0\.1:\d+ (\S+) (\S+) (\d{3}) \d+\.\d{3}ms$")
        parsed = []
        for line in lines:
            m = pat.match(line)
            self.assertTrue(m, line)
            parsed.append(m.groups())
        self.assertIn(("POST", "/v1/locks/log/a/release", "200"), parsed)
        self.assertIn(("GET", "/v1/locks/log/a?x=%20y", "200"), parsed)
        self.assertIn(("GET", "/no-such-path", "404"), parsed)
        # The acquire that waited (its connection left libmicrohttpd meanwhile) and the first one.
        self.assertEqual(parsed.count(("POST", "/v1/locks/log/a/acquire", "200")), 2, parsed)
        text = "\n".join(lines)
        self.assertNotIn(a["lease"], text)
        self.assertNotIn(out["w"][2]["lease"], text)
        self.assertIsNone(LEASE_RE.search(text))

    def test_unwritable_log_is_refused_at_start(self):
        rc, _, err = run_cli("serve", "--listen", "127.0.0.1:0", "--data", os.path.join(self.dir, "u.db"),
                             "--access-log", os.path.join(self.dir, "no", "such", "dir.log"), cwd=self.dir)
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot open access log", err)


class StopTests(unittest.TestCase):
    """Issue 39: an orderly stop said nothing (a journal showed the server gone, not why
    or whether cleanly). It logs one line, naming the signal; a kill -9 none."""

    def test_an_orderly_stop_logs_one_line(self):
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
            with self.subTest(signal=name):
                srv = harness.Server()
                self.addCleanup(srv.cleanup)
                st, _, g = srv.acquire("stop/1")
                self.assertEqual(st, 200, g)
                self.assertEqual(harness.stop_process(srv.proc) if sig == signal.SIGTERM else self.interrupt(srv), 0)
                lines = [l for l in srv.stderr_text().splitlines() if "stopped on" in l]
                self.assertEqual(len(lines), 1, srv.stderr_text())
                self.assertRegex(lines[0], r" info leasegate: stopped on %s: .*\(last token %d\)$" % (name, g["token"]))
        srv = harness.Server()
        self.addCleanup(srv.cleanup)
        srv.kill9()
        self.assertNotIn("stopped", srv.stderr_text())

    @staticmethod
    def interrupt(srv):
        srv.proc.send_signal(signal.SIGINT)
        return srv.proc.wait(harness.STOP_TIMEOUT_S)


class CommandTests(harness.ServerTestCase):
    def test_version(self):
        for arg in ("--version", "version"):
            rc, out, err = run_cli(arg)
            self.assertEqual(rc, 0, err)
            self.assertRegex(out, r"^leasegate \d+\.\d+\.\d+\n$")

    def test_healthcheck(self):
        rc, out, err = run_cli("healthcheck", "--server", self.srv.url)
        self.assertEqual(rc, 0, err)
        env = dict(os.environ, LEASEGATE_SERVER=self.srv.url)
        rc, out, err = run_cli("healthcheck", env=env)
        self.assertEqual(rc, 0, err)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        rc, out, err = run_cli("healthcheck", "--server", "http://127.0.0.1:%d" % dead)
        self.assertEqual(rc, 1, err)
        rc, out, err = run_cli("healthcheck", "--bogus")
        self.assertEqual(rc, 2, err)

    def test_duration_without_unit_names_the_unit(self):
        for cmd in (["acquire", "--lock", "a", "--ttl", "5"], ["run", "--lock", "a", "--ttl", "5", "--", "true"]):
            rc, _, err = run_cli(*cmd)
            self.assertEqual(rc, 2, (cmd, err))
            self.assertIn("'5' needs a unit", err)
        rc, _, err = run_cli("acquire", "--lock", "a", "--wait", "soon")
        self.assertEqual(rc, 2, err)
        self.assertIn("is not a duration", err)

    def test_unknown_serve_flag_is_named(self):
        rc, _, err = run_cli("serve", "--bogus")
        self.assertEqual(rc, 2, err)
        self.assertIn("unknown flag --bogus", err)
        rc, _, err = run_cli("serve", "--data")
        self.assertEqual(rc, 2, err)
        self.assertIn("needs a value", err)

    def test_second_server_on_one_database_is_refused(self):
        harness.sqlite_only(self, "the SQLite file lock; on etcd a second gateway is a candidate (test_etcd.py)")
        rc, _, err = run_cli("serve", "--listen", "127.0.0.1:0", "--data", self.srv.data_path)
        self.assertEqual(rc, 1, err)
        self.assertIn("another leasegate server is using this database", err)


if __name__ == "__main__":
    harness.run_tests()
