"""Promises at the edges: grants to clients that already left, expiry announced exactly,
not_holder reasons across restarts, a database file removed under the server, messages
that name the cause, and metadata kept as it was sent.

Clients here are raw sockets, so that they can close (FIN) or reset (RST) at exactly the
moment a test wants. Only 127.0.0.1; every wait is bounded; no timing assertions.
"""

import json
import os
import socket
import threading
import time
import unittest

import harness


def uid():
    import uuid
    return uuid.uuid4().hex[:10]


def acquire_once(srv, name, **kw):
    """One acquire on a connection of its own; raises when the server hung up."""
    c = srv.new_client(timeout=10)
    try:
        return c.acquire(name, "o", **kw)
    finally:
        c.close()


def post(path, body, extra=""):
    data = json.dumps(body).encode()
    return (("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
             % (path, extra, len(data))).encode() + data)


class LeftBeforeTheAnswerTests(harness.ServerTestCase):
    """A grant is delivered only if its answer was handed to the kernel before the client
    was seen to hang up; any other grant is released at once, not left to its TTL."""

    def held(self, name):
        st, _, b = self.srv.get_lock(name)
        self.assertEqual(st, 200, b)
        return b["held"]

    def test_non_waiting_acquire_then_fin(self):
        names = ["fin/%s/%d" % (uid(), i) for i in range(50)]
        before = self.srv.metric("leasegate_undelivered_grants_total")
        for name in names:
            s = socket.create_connection(("127.0.0.1", self.srv.port))
            # Corked, the request leaves with its FIN: a client preempted between the two calls
            # on a loaded machine would otherwise be one that had not hung up yet when its
            # grant was written, and rightly keep it (seen once under ASan in CI).
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            s.sendall(post("/v1/locks/%s/acquire" % name, {"owner": "gone", "ttl_ms": 600000}))
            s.shutdown(socket.SHUT_WR)  # FIN, as a client whose timeout fired and closed
            s.close()
        self.srv.wait_until(lambda: not any(self.held(n) for n in names), timeout=10,
                            what="every grant to a client that left to be released")
        self.assertEqual(self.srv.metric("leasegate_undelivered_grants_total") - before, len(names))

    def test_waiter_that_leaves_before_its_grant_is_written(self):
        for keep_alive in (False, True):
            with self.subTest(keep_alive=keep_alive):
                name = "finw/%s" % uid()
                st, _, h = self.srv.acquire(name, "holder", ttl_ms=600000)
                self.assertEqual(st, 200, h)
                extra = "" if keep_alive else "Connection: close\r\n"
                waiters = []
                for i in range(10):
                    s = socket.create_connection(("127.0.0.1", self.srv.port))
                    s.sendall(post("/v1/locks/%s/acquire" % name, {"owner": "w%d" % i, "ttl_ms": 600000,
                                                                   "wait_ms": 60000}, extra))
                    waiters.append(s)
                self.srv.wait_until(lambda: self.srv.waiters(name) == 10, what="10 waiters")
                for s in waiters:
                    s.shutdown(socket.SHUT_WR)
                    s.close()
                self.srv.wait_until(lambda: self.srv.waiters(name) == 0, what="gone waiters to leave")
                self.srv.release(name, h["lease"])
                self.assertFalse(self.held(name), "a waiter that left was granted the lock")

    def test_waiter_granted_then_gone_before_the_commit(self):
        """The lock passes to a waiter, and the waiter's client hangs up while the grant
        waits for its commit (a slow disk: each fsync takes 0.5 s): the grant is released,
        not kept for its TTL. (Every answer waits for the commit, so nothing can show
        the hand-over earlier: the hang-up comes 0.15 s after the release was sent.)"""
        harness.sqlite_only(self, "slowsync slows the fsync of the SQLite file; nothing opens that window on etcd")
        env = harness.slow_disk_env(500)
        if env is None:
            self.skipTest("tests/faults/slowsync was not built (LEASEGATE_SLOWSYNC unset)")
        for keep_alive in (False, True):
            with self.subTest(keep_alive=keep_alive), harness.Server(extra_env=env) as srv:
                name = "late/%s" % uid()
                st, _, h = srv.acquire(name, "holder", ttl_ms=600000)
                self.assertEqual(st, 200, h)
                s = socket.create_connection(("127.0.0.1", srv.port))
                s.sendall(post("/v1/locks/%s/acquire" % name, {"owner": "w", "ttl_ms": 600000, "wait_ms": 60000},
                               "" if keep_alive else "Connection: close\r\n"))
                srv.wait_until(lambda: srv.waiters(name) == 1, timeout=10, what="the waiter")
                rel = socket.create_connection(("127.0.0.1", srv.port))
                rel.sendall(post("/v1/locks/%s/release" % name, {"lease": h["lease"]}))
                time.sleep(0.15)
                s.shutdown(socket.SHUT_WR)
                s.close()
                self.assertEqual(harness.read_response(rel, timeout=20)[0], 200)
                rel.close()
                srv.wait_until(lambda: not srv.get_lock(name)[2]["held"], timeout=20,
                               what="the grant of the waiter that left to be released")
                self.assertGreaterEqual(srv.metric("leasegate_undelivered_grants_total"), 1)

    def test_half_closed_clients_are_treated_alike(self):
        """A client that sends its request, then closes its sending side, counts as gone
        whether or not it waited: no grant stays with it."""
        name = "half/%s" % uid()
        s = socket.create_connection(("127.0.0.1", self.srv.port))
        s.sendall(post("/v1/locks/%s/acquire" % name, {"owner": "half", "ttl_ms": 600000}))
        s.shutdown(socket.SHUT_WR)
        try:
            self.srv.wait_until(lambda: not self.held(name), timeout=10, what="the grant to be released")
        finally:
            s.close()


class ExpiryAnnouncementTests(harness.ServerTestCase):
    def test_next_holder_never_starts_before_the_previous_expiry_was_announced(self):
        """200 hand-offs by expiry: each waiter's grant comes at or after the
        expires_at_ms the previous holder was told (both read off the server)."""
        name = "handoff/%s" % uid()
        st, _, prev = self.srv.acquire(name, "h0", ttl_ms=100)
        self.assertEqual(st, 200, prev)
        for i in range(200):
            st, _, nxt = self.srv.acquire(name, "h%d" % (i + 1), ttl_ms=100, wait_ms=5000)
            self.assertEqual(st, 200, nxt)
            self.assertGreaterEqual(nxt["acquired_at_ms"], prev["expires_at_ms"], (i, prev, nxt))
            prev = nxt


class RestartReasonTests(unittest.TestCase):
    def test_not_holder_reasons_survive_a_restart(self):
        with harness.Server() as srv:
            st, _, rel = srv.acquire("r/released", "o", ttl_ms=60000)
            srv.release("r/released", rel["lease"])
            st, _, exp = srv.acquire("r/expired", "o", ttl_ms=100)
            st, _, sup = srv.acquire("r/superseded", "o", ttl_ms=100)
            st, _, nxt = srv.acquire("r/superseded", "n", ttl_ms=60000, wait_ms=5000)
            self.assertEqual(st, 200, nxt)
            srv.wait_until(lambda: not srv.get_lock("r/expired")[2]["held"], what="r/expired to expire")
            for kill9 in (False, True):
                srv.restart(kill9=kill9)
                for name, lease, reason in (("r/released", rel["lease"], "released"),
                                            ("r/expired", exp["lease"], "expired"),
                                            ("r/superseded", sup["lease"], "superseded")):
                    st, _, b = srv.renew(name, lease)
                    self.assertEqual((st, b.get("reason")), (409, reason), (kill9, name, b))
                st, _, b = srv.renew("r/released", harness.random_lease())
                self.assertEqual(b.get("reason"), "unknown")


class RemovedFileTests(unittest.TestCase):
    def test_a_deleted_wal_stops_the_server_and_loses_nothing_acknowledged(self):
        """Someone deletes the -wal file of the running server. SQLite would go on
        writing into the unlinked file, and a kill -9 later would lose everything it
        acknowledged (tokens would start at 1 again). The server must notice at its next
        commit, keep what it acknowledged, reveal nothing more, and stop."""
        harness.sqlite_only(self, "deletes the SQLite -wal file")
        with harness.Server() as srv:
            grants = []
            for i in range(50):
                st, _, g = srv.acquire("wal/%d" % i, "o", ttl_ms=600000)
                self.assertEqual(st, 200, g)
                grants.append(g)
            os.unlink(srv.data_path + "-wal")
            answered = []
            for i in range(50):
                try:
                    st, _, g = acquire_once(srv, "after/%d" % i, ttl_ms=600000)
                except (ConnectionError, OSError):
                    break
                answered.append((st, g))
                if not srv.running():
                    break
            self.assertEqual([a for a in answered if a[0] == 200], [], "grants revealed after the WAL was lost")
            srv.wait_until(lambda: not srv.running(), timeout=10, what="the server to stop")
            self.assertEqual(srv.proc.returncode, 1)
            self.assertIn("WAL file", srv.stderr_text())
            srv.kill9()
            srv.start()
            for g in grants:
                st, _, r = srv.renew(g["name"], g["lease"])
                self.assertEqual(st, 200, (g["name"], r))
            st, _, g = srv.acquire("wal/next", "o")
            self.assertGreater(g["token"], grants[-1]["token"])

    def test_a_deleted_database_file_stops_the_server(self):
        harness.sqlite_only(self, "moves the SQLite database file away")
        with harness.Server() as srv:
            st, _, g = srv.acquire("db/0", "o")
            self.assertEqual(st, 200, g)
            os.rename(srv.data_path, srv.data_path + ".moved")
            try:
                acquire_once(srv, "db/1")
            except (ConnectionError, OSError):
                pass
            srv.wait_until(lambda: not srv.running(), timeout=10, what="the server to stop")
            self.assertEqual(srv.proc.returncode, 1)
            self.assertIn("database file", srv.stderr_text())

    def test_a_chmod_or_a_second_name_changes_nothing_but_losing_the_first_name_stops_the_server(self):
        """The files are watched (inotify) and their paths checked when something
        changed: a chmod and a hard link are changes that leave both files where
        they were; then removing the database's own name (it lives on under the
        second one, so its link count never reaches 0) must stop the server."""
        harness.sqlite_only(self, "links the SQLite database file")
        with harness.Server() as srv:
            os.chmod(srv.data_path, 0o600)
            os.chmod(srv.data_path + "-wal", 0o600)
            os.link(srv.data_path, srv.data_path + ".second")
            for i in range(5):
                st, _, g = srv.acquire("ln/%d" % i, "o")
                self.assertEqual(st, 200, g)
            self.assertTrue(srv.running())
            os.unlink(srv.data_path)
            answered = []
            for i in range(20):
                try:
                    answered.append(acquire_once(srv, "ln/after/%d" % i)[0])
                except (ConnectionError, OSError):
                    break
                if not srv.running():
                    break
            self.assertNotIn(200, answered, "a grant was revealed after the database lost its name")
            srv.wait_until(lambda: not srv.running(), timeout=10, what="the server to stop")
            self.assertEqual(srv.proc.returncode, 1)
            self.assertIn("database file", srv.stderr_text())


class MessageTests(unittest.TestCase):
    def test_the_waiter_limit_is_named_not_the_lock_limit(self):
        with harness.Server(extra_args=["--max-locks", "3", "--max-waiters-per-lock", "2"]) as srv:
            for n in ("m/a", "m/b", "m/c"):
                self.assertEqual(srv.acquire(n, "h", ttl_ms=60000)[0], 200)
            clients = [srv.new_client() for _ in range(2)]
            threads = [threading.Thread(target=c.acquire, args=("m/a", "w"), kwargs={"wait_ms": 3000}, daemon=True)
                       for c in clients]
            for t in threads:
                t.start()
            srv.wait_until(lambda: srv.waiters("m/a") == 2, what="two waiters")
            st, headers, b = srv.acquire("m/a", "third", wait_ms=3000)
            self.assertEqual(st, 503, b)
            self.assertEqual(headers.get("retry-after"), "1", "a 503 says when to retry")
            self.assertIn("--max-waiters-per-lock", b["message"])
            self.assertNotIn("lock table is full", b["message"])
            st, _, b = srv.acquire("m/d", "new")
            self.assertEqual(st, 503, b)
            self.assertIn("--max-locks", b["message"])
            for t in threads:
                t.join(10)
            for c in clients:
                c.close()

    @unittest.skipUnless(os.geteuid() == 0, "mounting a small file system needs root")
    def test_disk_full(self):
        """The database's file system fills up under a stream of grants. The server must
        log the real cause (not a failed ROLLBACK), stop without revealing the grant it
        could not commit, and every grant it did acknowledge must be there once there is
        room again. (A read-only remount cannot be tested this way: the kernel refuses it
        while the server has the files open.)"""
        harness.sqlite_only(self, "fills the file system of the SQLite database")
        import subprocess
        import tempfile
        mnt = tempfile.mkdtemp(prefix="leasegate-fs-")
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt]).returncode != 0:
            self.skipTest("cannot mount a tmpfs here")
        try:
            srv = harness.Server(data_dir=mnt)
            acked = []
            try:
                for i in range(30):
                    st, _, g = acquire_once(srv, "fs/%d" % i, ttl_ms=600000)
                    self.assertEqual(st, 200, g)
                    acked.append(g)
                with open(os.path.join(mnt, "ballast"), "wb", buffering=0) as f:
                    try:
                        while True:
                            f.write(b"\0" * 65536)
                    except OSError:
                        pass
                for i in range(30, 3000):
                    try:
                        st, _, g = acquire_once(srv, "fs/%d" % i, ttl_ms=600000, metadata={"pad": "x" * 3000})
                    except (ConnectionError, OSError):
                        break
                    if st == 200:
                        acked.append(g)
                    if not srv.running():
                        break
                srv.wait_until(lambda: not srv.running(), timeout=10, what="the server to stop")
                self.assertEqual(srv.proc.returncode, 1)
                err = srv.stderr_text()
                self.assertIn("full", err)
                self.assertNotIn("cannot rollback", err)
                os.unlink(os.path.join(mnt, "ballast"))
                srv.start()
                for g in acked:
                    st, _, r = srv.renew(g["name"], g["lease"])
                    self.assertEqual(st, 200, (g["name"], r))
            finally:
                srv.cleanup()
        finally:
            subprocess.run(["umount", "-l", mnt])
            os.rmdir(mnt)


class MetadataAsSentTests(harness.ServerTestCase):
    def acquire_raw(self, name, metadata_text):
        body = ('{"owner":"m","ttl_ms":60000,"metadata":%s}' % metadata_text).encode()
        st, _, b = self.srv.request("POST", "/v1/locks/%s/acquire" % name, raw=body)
        return st, b, self.srv.last_text

    def test_metadata_comes_back_byte_for_byte(self):
        for text in ('{"x":0.1}', '{ "a" : [1, 2.50, 1e3] ,"b":"\\u00e9" }', '{"n":-0.0,"big":1.7976931348623157e308}'):
            name = "meta/%s" % uid()
            st, b, raw = self.acquire_raw(name, text)
            self.assertEqual(st, 200, raw)
            self.assertIn('"metadata":%s' % text, raw)
            self.srv.request("GET", "/v1/locks/" + name)
            self.assertIn('"metadata":%s' % text, self.srv.last_text)
            self.srv.request("GET", "/v1/locks?prefix=" + name)
            self.assertIn('"metadata":%s' % text, self.srv.last_text)
            self.assertEqual(json.loads(raw)["metadata"], json.loads(text))

    def test_the_limit_is_measured_on_what_was_sent(self):
        values = ",".join('"k%d":0.1' % i for i in range(380))
        text = "{%s}" % values
        self.assertLessEqual(len(text), 4096)
        st, b, raw = self.acquire_raw("meta/limit/%s" % uid(), text)
        self.assertEqual(st, 200, raw)
        st, b, raw = self.acquire_raw("meta/limit/%s" % uid(), '{"pad":"%s"}' % ("x" * 4090))
        self.assertEqual(st, 400, raw)
        self.assertEqual(b["field"], "metadata")

    def test_an_integer_beyond_64_bits_names_its_field(self):
        st, b, raw = self.acquire_raw("meta/big/%s" % uid(), '{"n":123456789012345678901234567890}')
        self.assertEqual(st, 400, raw)
        self.assertEqual(b["field"], "metadata")
        self.assertIn("64 bits", b["message"])


@unittest.skipUnless(os.geteuid() == 0, "network namespaces need root")
class VanishedClientTests(unittest.TestCase):
    """A waiter whose host vanishes (no FIN, no RST: a dead machine, a cut cable) must
    leave the queue within --dead-client-after, or every later waiter stalls behind it
    and the lock goes to nobody when it is released. The client runs in a network
    namespace behind a veth pair, which is then deleted."""

    NS = "lgt%d" % os.getpid()

    def ip(self, *args, check=True):
        import subprocess
        r = subprocess.run(("ip",) + args, capture_output=True, text=True)
        if check and r.returncode:
            raise AssertionError("ip %s: %s" % (" ".join(args), r.stderr))
        return r

    def setUp(self):
        import subprocess
        if subprocess.run(["ip", "netns", "add", self.NS], capture_output=True).returncode:
            self.skipTest("cannot create a network namespace here")
        # Cleanups run also when setUp fails halfway (tearDown would not).
        self.addCleanup(self.ip, "netns", "del", self.NS, check=False)
        # A chroot whose / is no mount point (a fresh Debian root made by debootstrap) can
        # create a namespace but not enter one: `ip netns exec` fails to remount /.
        entered = subprocess.run(["ip", "netns", "exec", self.NS, "true"], capture_output=True, text=True)
        if entered.returncode:
            self.skipTest("cannot enter a network namespace here: %s" % entered.stderr.strip())
        self.ip("link", "add", self.NS + "h", "type", "veth", "peer", "name", self.NS + "c")
        self.addCleanup(self.ip, "link", "del", self.NS + "h", check=False)
        self.ip("link", "set", self.NS + "c", "netns", self.NS)
        self.ip("addr", "add", "10.231.77.1/30", "dev", self.NS + "h")
        self.ip("link", "set", self.NS + "h", "up")
        self.ip("netns", "exec", self.NS, "ip", "addr", "add", "10.231.77.2/30", "dev", self.NS + "c")
        self.ip("netns", "exec", self.NS, "ip", "link", "set", self.NS + "c", "up")
        self.client = None
        self.addCleanup(lambda: self.client is not None and harness.kill_process(self.client))
        self.srv = harness.Server(extra_args=["--listen", "0.0.0.0:0", "--insecure-no-auth",
                                                  "--dead-client-after", "3"])
        self.addCleanup(self.srv.cleanup)

    def test_a_vanished_waiter_leaves_the_queue(self):
        import subprocess
        import sys
        st, _, h = self.srv.acquire("vanish", "holder", ttl_ms=600000)
        self.assertEqual(st, 200, h)
        code = ("import socket, time\n"
                "s = socket.create_connection(('10.231.77.1', %d))\n"
                "s.sendall(%r)\n"
                "time.sleep(120)\n" % (self.srv.port, post("/v1/locks/vanish/acquire",
                                                           {"owner": "ghost", "wait_ms": 600000})))
        self.client = subprocess.Popen(["ip", "netns", "exec", self.NS, sys.executable, "-c", code])
        self.srv.wait_until(lambda: self.srv.waiters("vanish") == 1, timeout=10, what="the ghost waiter")
        self.ip("link", "del", self.NS + "h")  # the client's network is gone: nothing reaches us again
        self.srv.wait_until(lambda: self.srv.waiters("vanish") == 0, timeout=30,
                            what="the vanished waiter to leave the queue")
        # The next waiter is served, not stalled behind the ghost.
        out = {}
        t = threading.Thread(target=lambda: out.update(r=acquire_once(self.srv, "vanish", wait_ms=20000)),
                             daemon=True)
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters("vanish") == 1, what="the live waiter")
        self.assertEqual(self.srv.release("vanish", h["lease"])[0], 200)
        t.join(20)
        self.assertEqual(out["r"][0], 200, out)


if __name__ == "__main__":
    harness.run_tests()
