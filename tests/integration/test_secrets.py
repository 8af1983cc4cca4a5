"""A lease is a secret: only the acquire that was granted it (and that request's own
replay) may show it. A full run — grants, waiters, renewals, releases, expiries, every
kind of refusal, listings, metrics, the guard (accepted, stale and refused writes), fences,
a kill -9 and restart — then every answer and every line the server wrote (stdout,
stderr, the access log) is searched for every lease that was ever issued."""

import os
import signal
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from harness import Server, binary_path, sqlite_only
import upstream


class LeaseNeverShownTest(unittest.TestCase):
    def test_no_lease_in_any_answer_or_log(self):
        ng = upstream.Nginx() if upstream.nginx_available() else None
        if ng:
            self.addCleanup(ng.cleanup)
        guard = ["--guard", "/store/=" + ng.url] if ng else []
        srv = Server(extra_args=guard + ["--access-log", "access.log"])
        self.addCleanup(srv.cleanup)
        c = srv.client
        leases, seen = [], []

        def ask(method, path, body=None, raw=None, headers=None, allowed_lease=None):
            st, hdrs, got = c.request(method, path, body=body, raw=raw, headers=headers)
            text = c.last_text + " " + " ".join("%s: %s" % kv for kv in hdrs.items())
            if allowed_lease:
                text = text.replace(allowed_lease, "")
            seen.append((method, path, st, text))
            return st, got

        def acquire(name, **fields):
            body = {"owner": "o"}
            body.update(fields)
            st, hdrs, got = c.request("POST", "/v1/locks/%s/acquire" % name, body=body)
            if st == 200:
                leases.append(got["lease"])
                text = c.last_text.replace(got["lease"], "")
                seen.append(("POST", name, st, text + " ".join("%s: %s" % kv for kv in hdrs.items())))
            else:
                seen.append(("POST", name, st, c.last_text))
            return st, got

        st, a = acquire("s/a", ttl_ms=60000, request_id="r1", metadata={"k": "v"})
        self.assertEqual(st, 200, a)
        st, _, replay = c.request("POST", "/v1/locks/s/a/acquire", body={"owner": "o", "ttl_ms": 60000,
                                                                        "request_id": "r1", "metadata": {"k": "v"}})
        self.assertEqual((st, replay["lease"]), (200, a["lease"]))
        seen.append(("replay", "s/a", st, c.last_text.replace(a["lease"], "")))
        acquire("s/a", owner="other")                               # 409 lock_held
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"], "ttl_ms": 60000})
        ask("POST", "/v1/locks/s/b/renew", {"lease": a["lease"]})   # not_holder: wrong lock
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"], "ttl_ms": 1})  # bad request
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"] + "x"})         # not a lease
        ask("GET", "/v1/locks/s/a")
        ask("GET", "/v1/locks?prefix=s/")
        # A waiter, granted at the release.
        box = {}
        w = srv.new_client(timeout=30)
        self.addCleanup(w.close)
        t = threading.Thread(target=lambda: box.update(r=w.acquire("s/a", owner="w", wait_ms=20000, ttl_ms=60000)))
        t.start()
        for _ in range(100):
            if c.get_lock("s/a")[2].get("waiters") == 1:
                break
            time.sleep(0.05)
        ask("POST", "/v1/locks/s/a/release", {"lease": a["lease"]})
        t.join(30)
        st, _, wg = box["r"]
        self.assertEqual(st, 200, wg)
        leases.append(wg["lease"])
        ask("POST", "/v1/locks/s/a/release", {"lease": a["lease"]})  # not_holder: released
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"]})
        # An expiry, and the expired lease used again.
        st, e = acquire("s/e", ttl_ms=100)
        time.sleep(0.3)
        ask("POST", "/v1/locks/s/e/renew", {"lease": e["lease"]})    # not_holder: expired
        ask("GET", "/v1/locks/s/e")
        st, f = acquire("s/f", ttl_ms=60000)
        ask("POST", "/v1/fence/s/f", {"token": f["token"]})
        ask("POST", "/v1/fence/s/f", {"token": f["token"] - 1})      # stale
        if ng:
            ask("PUT", "/store/s/f", raw=b"x", headers={"Fencing-Lease": f["lease"]})
            ask("PUT", "/store/s/f", raw=b"x", headers={"Fencing-Lease": a["lease"]})   # ended lease
            ask("PUT", "/store/s/g", raw=b"x", headers={"Fencing-Lease": f["lease"]})   # not its lock
            ask("PUT", "/store/s/f", raw=b"x", headers={"Fencing-Lease": f["lease"] + "0"})
            ask("GET", "/store/s/f", headers={"Fencing-Lease": f["lease"]})
        ask("GET", "/metrics")
        ask("GET", "/healthz")
        srv.kill9()
        srv.start()
        c = srv.client
        ask("GET", "/v1/locks?prefix=s/")
        ask("POST", "/v1/locks/s/f/renew", {"lease": f["lease"]})
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"]})   # not_holder reason after restart
        ask("POST", "/v1/locks/s/f/release", {"lease": f["lease"]})
        srv.stop_clean()
        self.assertGreaterEqual(len(leases), 4)
        for method, path, st, text in seen:
            for lease in leases:
                self.assertNotIn(lease, text, "%s %s (%d) shows a lease" % (method, path, st))
        logs = "\n".join(srv.stdout_lines) + srv.stderr_text()
        with open(os.path.join(srv.dir, "access.log")) as f:
            logs += f.read()
        self.assertIn("/v1/locks/s/a/renew", logs)  # the access log was written
        for lease in leases:
            self.assertNotIn(lease, logs, "the server's output shows a lease")
        if ng:
            upstream_seen = ng.access_entries()
            for lease in leases:
                self.assertNotIn(lease, repr(upstream_seen), "a lease reached the upstream")


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


class UmaskTestCase(unittest.TestCase):
    """Runs each test under the umask it sets (restored after)."""

    def umask(self, value):
        old = os.umask(value)
        self.addCleanup(os.umask, old)


class SecretsAtRestTest(UmaskTestCase):
    """The database holds every live lease in plain text: it, its -wal and -shm, and every
    backup are created 0600 whatever the umask; existing ones are narrowed at start."""

    def test_database_wal_shm_and_backups_are_0600_whatever_the_umask(self):
        sqlite_only(self, "the database files")
        for umask in (0o022, 0o000):
            self.umask(umask)
            srv = Server()
            self.addCleanup(srv.cleanup)
            st, _, g = srv.client.acquire("rest/a", ttl_ms=60000)
            self.assertEqual(st, 200, g)
            for suffix in ("", "-wal"):
                self.assertEqual(mode(srv.data_path + suffix), 0o600, (umask, suffix))
            # SQLite runs in exclusive locking mode: no -shm file; were there one, 0600 too.
            if os.path.exists(srv.data_path + "-shm"):
                self.assertEqual(mode(srv.data_path + "-shm"), 0o600, (umask, "-shm"))
            # A backup of the running server (asked of it), and of its file once stopped.
            dest = os.path.join(tempfile.mkdtemp(prefix="lg-backup-"), "copy.db")
            p = subprocess.run([binary_path(), "backup", "--server", srv.url, dest], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(mode(dest), 0o600, umask)
            srv.stop()
            dest2 = dest + ".stopped"
            p = subprocess.run([binary_path(), "backup", "--data", srv.data_path, dest2], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(mode(dest2), 0o600, umask)
            with open(dest, "rb") as f:
                self.assertTrue(f.read(16).startswith(b"SQLite format 3"))

    def test_existing_files_are_narrowed_at_start_with_a_log_line(self):
        sqlite_only(self, "the database files")
        self.umask(0o022)
        srv = Server()
        self.addCleanup(srv.cleanup)
        self.assertEqual(srv.client.acquire("rest/b", ttl_ms=60000)[0], 200)
        srv.stop()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(srv.data_path + suffix):
                os.chmod(srv.data_path + suffix, 0o644)
        srv.start()
        self.assertEqual(mode(srv.data_path), 0o600)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(srv.data_path + suffix):
                self.assertEqual(mode(srv.data_path + suffix), 0o600, suffix)
        log = srv.stderr_text()
        self.assertIn("readable by its owner only (0600)", log)
        self.assertIn("%s (was 0644)" % srv.data_path, log)
        self.assertTrue(srv.client.get_lock("rest/b")[2]["held"])


class AuthFileModeTest(UmaskTestCase):
    """Whoever may write the --auth-file may give themselves an admin key: a file writable
    by its group or others is refused at start, and on SIGHUP (then no key passes until a
    reload succeeds)."""

    def keys_file(self, text, file_mode):
        d = tempfile.mkdtemp(prefix="lg-keys-")
        path = os.path.join(d, "keys")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, file_mode)
        return path

    def test_refused_at_start(self):
        out = subprocess.run([binary_path(), "keygen", "a", "admin"], capture_output=True, text=True, check=True)
        line = out.stdout.splitlines()[1]
        for file_mode, who in ((0o664, "its group"), (0o646, "others"), (0o666, "its group and others")):
            path = self.keys_file(line + "\n", file_mode)
            p = subprocess.run([binary_path(), "serve", "--listen", "127.0.0.1:0", "--data",
                                os.path.join(os.path.dirname(path), "x.db"), "--auth-file", path],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("writable by %s (mode %04o)" % (who, file_mode), p.stderr)
            self.assertIn("chmod go-w", p.stderr)

    def test_refused_on_sighup_and_no_key_passes_until_it_is_fixed(self):
        """A file others may write is refused at a reload as any file that does not load
        (issue 37): no key is trusted (503, /readyz `keys`) until a reload succeeds, since
        whoever could write it may have added one."""
        key, line = subprocess.run([binary_path(), "keygen", "a", "admin"], capture_output=True, text=True,
                                   check=True).stdout.splitlines()
        path = self.keys_file(line + "\n", 0o600)
        srv = Server(extra_args=["--auth-file", path])
        self.addCleanup(srv.cleanup)
        os.chmod(path, 0o620)
        os.kill(srv.pid, signal.SIGHUP)
        for _ in range(100):
            if "SIGHUP: the key file does not load" in srv.stderr_text():
                break
            time.sleep(0.05)
        self.assertIn("writable by its group (mode 0620)", srv.stderr_text())
        st, _, _ = srv.client.request("GET", "/v1/locks", headers={"Authorization": "Bearer " + key})
        self.assertEqual(st, 503)
        st, _, body = srv.client.request("GET", "/readyz")
        self.assertEqual((st, body["reason"]), (503, "keys"), body)
        os.chmod(path, 0o600)
        os.kill(srv.pid, signal.SIGHUP)
        for _ in range(100):
            if "SIGHUP: 1 API keys" in srv.stderr_text():
                break
            time.sleep(0.05)
        st, _, _ = srv.client.request("GET", "/v1/locks", headers={"Authorization": "Bearer " + key})
        self.assertEqual(st, 200)


class KeygenPrefixNoteTest(unittest.TestCase):
    def test_a_prefix_without_a_slash_says_what_it_covers(self):
        p = subprocess.run([binary_path(), "keygen", "t", "client", "orders"], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 2)
        self.assertIn("'orders' covers every name that starts with it", p.stderr)
        self.assertIn("orders2/", p.stderr)
        self.assertIn("(orders/)", p.stderr)
        p = subprocess.run([binary_path(), "keygen", "t", "client", "orders/", "*"], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual((p.returncode, p.stderr), (0, ""))


if __name__ == "__main__":
    unittest.main()
