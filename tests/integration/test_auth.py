"""API keys (--auth-file), roles and prefixes, and POST bodies declared as JSON.

Every 401 and 403 path, each role's boundary, the listing rule, keys on the guard (and
the key never reaching the upstream), SIGHUP reloads (good and bad files, a waiter
across one), `leasegate keygen`, the refusal to listen beyond loopback without keys,
and 415 for a body not declared application/json (a web page's text/plain or form).
Real binary on 127.0.0.1; nginx as the guard's upstream."""

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import unittest

from harness import Client, Server, ServerTestCase, binary_path, parse_metrics, read_response
import upstream

KEY_RE = re.compile(r"^lgk_[A-Za-z0-9_-]{43}$")


def keygen(*args):
    p = subprocess.run([binary_path(), "keygen"] + list(args), capture_output=True, text=True, timeout=10)
    return p.returncode, p.stdout, p.stderr


def new_key(name, role, *prefixes):
    """(key, file line) from `leasegate keygen`."""
    rc, out, err = keygen(name, role, *prefixes)
    assert rc == 0, err
    key, line = out.splitlines()
    return key, line


class Keyed(Client):
    """A client that sends one API key with every request."""

    def __init__(self, port, key, timeout=30.0):
        super().__init__(port, timeout)
        self.key = key

    def request(self, method, path, body=None, raw=None, headers=None, timeout=None):
        hdrs = dict(headers or {})
        if self.key is not None:
            hdrs["Authorization"] = "Bearer " + self.key
        return super().request(method, path, body=body, raw=raw, headers=hdrs, timeout=timeout)


class KeyedTestCase(unittest.TestCase):
    """A test with a server of its own on an --auth-file (and nginx behind /store/ when
    there is nginx): start_keyed() starts it, as_() gives a client with a key."""

    def start_keyed(self, lines, *extra_args):
        d = tempfile.mkdtemp(prefix="leasegate-keyed-")
        keys = os.path.join(d, "keys")
        with open(keys, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.nginx = upstream.Nginx() if upstream.nginx_available() else None
        if self.nginx:
            self.addCleanup(self.nginx.cleanup)
        guard = ["--guard", "/store/=" + self.nginx.url] if self.nginx else []
        self.srv = Server(extra_args=["--auth-file", keys] + guard + list(extra_args))
        self.addCleanup(self.srv.cleanup)

    def as_(self, key, timeout=30.0):
        c = Keyed(self.srv.port, key, timeout)
        self.addCleanup(c.close)
        return c


class KeygenTest(unittest.TestCase):
    def test_two_lines_the_key_then_its_file_line(self):
        rc, out, err = keygen("billing-1", "client", "orders/", "invoices/")
        self.assertEqual(rc, 0, err)
        lines = out.split("\n")
        self.assertEqual(len(lines), 3, out)  # two lines, each ended
        self.assertEqual(lines[2], "")
        self.assertRegex(lines[0], KEY_RE)
        self.assertRegex(lines[1], r"^billing-1 client sha256:[0-9a-f]{64} orders/ invoices/$")
        self.assertNotIn(lines[0], lines[1])  # the file never holds the key itself
        self.assertNotEqual(new_key("a", "client", "x")[0], new_key("a", "client", "x")[0])
        self.assertRegex(new_key("root", "admin")[1], r"^root admin sha256:[0-9a-f]{64} \*$")

    def test_bad_arguments(self):
        for args, words in ((["x y", "client", "p"], "key name"), (["n", "boss", "p"], "role"),
                            (["n", "client"], "prefix"), (["n", "admin", "orders/"], "admin"),
                            (["n", "client", "a\tb"], "prefix"), (["only-name"], "usage")):
            rc, out, err = keygen(*args)
            self.assertEqual((rc, out), (2, ""), args)
            self.assertIn(words, err, args)


class AuthTest(unittest.TestCase):
    """One server with a client, a fence and an admin key, and nginx behind /store/."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="leasegate-auth-")
        cls.client_key, l1 = new_key("alice", "client", "orders/", "echo")
        cls.fence_key, l2 = new_key("storage", "fence", "orders/")
        cls.admin_key, l3 = new_key("root", "admin")
        cls.other_key, cls.other_line = new_key("bob", "client", "other/")
        cls.keys = os.path.join(cls.dir, "keys")
        with open(cls.keys, "w") as f:
            f.write("# keys for the test\n\n%s\n%s\n%s\n" % (l1, l2, l3))
        cls.nginx = upstream.Nginx() if upstream.nginx_available() else None
        guard = ["--guard", "/store/=" + cls.nginx.url] if cls.nginx else []
        cls.srv = Server(extra_args=["--auth-file", cls.keys] + guard)

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        if cls.nginx:
            cls.nginx.cleanup()

    def as_(self, key, timeout=30.0):
        c = Keyed(self.srv.port, key, timeout)
        self.addCleanup(c.close)
        return c

    def test_no_key_or_an_unknown_key_is_401_and_says_nothing_of_locks(self):
        held = self.as_(self.client_key).acquire("orders/held", ttl_ms=60000)
        self.assertEqual(held[0], 200, held[2])
        for key, headers in ((None, {}), (None, {"Authorization": "Basic YTpi"}),
                             ("lgk_" + "A" * 43, {}), ("", {}), ("x" * 300, {})):
            c = self.as_(key)
            answers = []
            for name in ("orders/held", "orders/never-was"):
                st, hdrs, body = c.request("GET", "/v1/locks/" + name, headers=headers)
                self.assertEqual(st, 401, body)
                self.assertEqual(body["error"], "unauthorized")
                self.assertEqual(hdrs.get("www-authenticate"), 'Bearer realm="leasegate"')
                answers.append(c.last_text)
            self.assertEqual(answers[0], answers[1], "a 401 tells a held lock from an unknown one")
            st, _, body = c.acquire("orders/held", owner="thief")
            self.assertEqual(st, 401, body)

    def test_a_client_key_within_its_prefixes(self):
        c = self.as_(self.client_key)
        st, _, g = c.acquire("orders/1", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        self.assertEqual(c.renew("orders/1", g["lease"])[0], 200)
        self.assertEqual(c.get_lock("orders/1")[0], 200)
        st, _, body = c.request("GET", "/v1/locks?prefix=orders/")
        self.assertEqual(st, 200, body)
        self.assertIn("orders/1", [lk["name"] for lk in body["locks"]])
        self.assertEqual(c.release("orders/1", g["lease"])[0], 200)

    def test_403_out_of_a_client_keys_scope(self):
        c, admin = self.as_(self.client_key), self.as_(self.admin_key)
        st, _, other = admin.acquire("other/x", ttl_ms=60000)
        self.assertEqual(st, 200, other)
        answers = []
        for name in ("other/x", "other/never-was"):
            for st, _, body in (c.acquire(name), c.get_lock(name), c.renew(name, other["lease"]),
                                c.release(name, other["lease"])):
                self.assertEqual((st, body["error"], body["key"]), (403, "forbidden", "alice"), body)
                answers.append(body["message"].replace(name, "NAME"))
        self.assertEqual(len(set(answers[0::4])), 1, "a 403 tells a held lock from an unknown one")
        # The lease of another's lock is no help out of scope: the lock is still held.
        self.assertTrue(admin.get_lock("other/x")[2]["held"])
        for path in ("/v1/locks", "/v1/locks?prefix=other/", "/v1/locks?prefix=order"):
            st, _, body = c.request("GET", path)
            self.assertEqual(st, 403, (path, body))
        st, _, body = c.fence("orders/1", 1)
        self.assertEqual(st, 403, body)
        self.assertIn("raise fences", body["message"])

    def test_a_fence_key_fences_within_its_prefixes_only(self):
        f, c = self.as_(self.fence_key), self.as_(self.client_key)
        st, _, g = c.acquire("orders/f", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        st, _, body = f.fence("orders/res", g["token"])
        self.assertEqual(st, 200, body)
        st, _, body = f.fence("other/res", g["token"])
        self.assertEqual(st, 403, body)
        for st, _, body in (f.acquire("orders/f2"), f.get_lock("orders/f"), f.request("GET", "/v1/locks")):
            self.assertEqual(st, 403, body)
            self.assertIn("role fence", body["message"])
        c.release("orders/f", g["lease"])

    def test_an_admin_key_does_everything(self):
        a = self.as_(self.admin_key)
        st, _, g = a.acquire("anything/at/all", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        self.assertEqual(a.request("GET", "/v1/locks")[0], 200)
        self.assertEqual(a.fence("anything", g["token"])[0], 200)
        self.assertEqual(a.release("anything/at/all", g["lease"])[0], 200)

    def test_health_metrics_and_dashboard_need_no_key(self):
        c = self.as_(None)
        for path in ("/healthz", "/metrics", "/"):
            self.assertEqual(c.request("GET", path)[0], 200, path)
        # The page asks for a key when the listing answers 401 or 403, and sends it.
        # (What it does in a browser is issue 15's Playwright test.)
        page = c.request("GET", "/")[2]
        self.assertIn('<input id="key" type="password"', page)
        self.assertIn("Authorization: 'Bearer ' + key", page)

    def test_the_guard_needs_a_key_for_the_bound_lock_and_keeps_it_from_the_upstream(self):
        if not self.nginx:
            self.skipTest("nginx is missing (scripts/deps.sh --test installs nginx-light)")
        c = self.as_(self.client_key)
        st, _, g = c.acquire("orders/doc", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        st, _, body = c.request("PUT", "/store/orders/doc", raw=b"v1", headers={"Fencing-Lease": g["lease"]})
        self.assertIn(st, (200, 201, 204), body)
        self.assertEqual(c.request("GET", "/store/orders/doc")[0], 200)
        for who in (self.as_(None), self.as_(self.fence_key)):
            st, _, body = who.request("PUT", "/store/orders/doc", raw=b"x" * 200000,
                                      headers={"Fencing-Lease": g["lease"]})
            self.assertIn(st, (401, 403), body)
            self.assertIn(who.request("GET", "/store/orders/doc")[0], (401, 403))
        self.assertEqual(self.nginx.read_file("orders/doc"), b"v1")
        st, hdrs, body = c.request("GET", "/store/echo")
        self.assertEqual(st, 200, body)
        self.assertEqual(hdrs.get("x-seen-authorization", ""), "", "the API key reached the upstream")
        c.release("orders/doc", g["lease"])


class ReloadBase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-reload-")
        self.key, line = new_key("first", "client", "a/")
        self.path = os.path.join(self.dir, "keys")
        self.write(line + "\n")
        self.srv = Server(extra_args=["--auth-file", self.path])
        self.addCleanup(self.srv.cleanup)

    def write(self, text):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.path)

    def hup_and_wait(self, words):
        n = self.srv.stderr_text().count(words)
        os.kill(self.srv.pid, signal.SIGHUP)
        for _ in range(100):
            if self.srv.stderr_text().count(words) > n:
                return
            threading.Event().wait(0.05)
        self.fail("no '%s' in the log after SIGHUP:\n%s" % (words, self.srv.stderr_text()))



class ReloadTest(ReloadBase):
    def test_sighup_reloads_and_a_bad_file_refuses_every_key(self):
        """SIGHUP reloads the keys; a file that does not load is not ignored (issue 37): the
        keys loaded before may hold one just revoked, so no key is trusted (503, /readyz
        not ready, the log says why) until a reload succeeds."""
        first = Keyed(self.srv.port, self.key)
        self.addCleanup(first.close)
        st, _, held = first.acquire("a/lock", ttl_ms=60000)
        self.assertEqual(st, 200, held)
        box = {}
        waiter = Keyed(self.srv.port, self.key, timeout=60)
        self.addCleanup(waiter.close)
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("a/lock", owner="w", wait_ms=30000)))
        t.start()
        for _ in range(100):
            if first.get_lock("a/lock")[2].get("waiters") == 1:
                break
            threading.Event().wait(0.05)
        second_key, second_line = new_key("second", "client", "b/")
        self.write(second_line + "\n")  # "first" is gone
        self.hup_and_wait("SIGHUP: 1 API keys")
        second = Keyed(self.srv.port, second_key)
        self.addCleanup(second.close)
        self.assertEqual(second.acquire("b/x")[0], 200)
        self.assertEqual(first.acquire("a/other")[0], 401)
        admin_key, admin_line = new_key("root", "admin")
        self.write(second_line + "\n" + admin_line + "\n")
        self.hup_and_wait("SIGHUP: 2 API keys")
        admin = Keyed(self.srv.port, admin_key)
        self.addCleanup(admin.close)
        st, _, lock = admin.get_lock("a/lock")
        self.assertEqual((st, lock["waiters"]), (200, 0), lock)  # the removed key's waiter left
        # A file that does not parse: no key passes, /readyz says why, the log too.
        self.write(second_line + "\nbroken line\n")
        self.hup_and_wait("SIGHUP: the key file does not load")
        self.assertIn("line 2", self.srv.stderr_text())
        st, _, body = second.acquire("b/y")
        self.assertEqual((st, body["error"]), (503, "overloaded"), body)
        self.assertIn("did not load", body["message"])
        st, _, ready = self.srv.request("GET", "/readyz")
        self.assertEqual((st, ready["reason"]), (503, "keys"), ready)
        self.assertIn("line 2", ready["message"])
        self.assertEqual(self.srv.request("GET", "/healthz")[0], 200)  # alive: a reload mends it
        os.remove(self.path)
        self.hup_and_wait("SIGHUP: the key file does not load")
        self.assertEqual(admin.request("GET", "/v1/locks")[0], 503)
        self.assertTrue(self.srv.running())
        # A good file again: served at once.
        self.write(second_line + "\n" + admin_line + "\n")
        self.hup_and_wait("SIGHUP: 2 API keys")
        self.assertEqual(admin.request("GET", "/v1/locks")[0], 200)
        self.assertEqual(self.srv.request("GET", "/readyz")[0], 200)
        # The waiter let in under the first file ended with its key (401 at the first
        # reload, rekey.h), long before its wait_ms.
        t.join(30)
        self.assertEqual((box["r"][0], box["r"][2]["error"]), (401, "unauthorized"), box)
        self.assertEqual(admin.release("a/lock", held["lease"])[0], 200)

    def test_sighup_ends_what_a_removed_or_narrowed_key_holds_open(self):
        """Issue 28: after a reload, a removed key's waiting acquires, long-polls and
        watches answer 401 and its event streams get `event: unauthorized` and end; a key
        narrowed off what it follows gets 403; what a key still covers goes on."""
        gone_key, gone = new_key("gone", "client", "p/")
        narrow_key, narrow = new_key("narrow", "client", "p/", "q/")
        stay_key, stay = new_key("stay", "client", "p/")
        admin_key, admin_line = new_key("root", "admin")
        self.write("\n".join([gone, narrow, stay, admin_line]) + "\n")
        self.hup_and_wait("SIGHUP: 4 API keys")
        admin = Keyed(self.srv.port, admin_key)
        self.addCleanup(admin.close)
        st, _, held = admin.acquire("p/held", ttl_ms=60000)
        self.assertEqual(st, 200, held)
        latest = admin.request("GET", "/v1/events")[2]["latest"]
        index = admin.get_lock("p/w")[2]["index"]

        def open_(path, key):
            s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=15)
            self.addCleanup(s.close)
            s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n"
                       % (path, key)).encode())
            return s

        poll = "/v1/events?prefix=%%s&after=%d&wait_ms=60000" % latest
        watch = "/v1/locks/%%s?index=%d&wait_ms=60000" % index
        # (p/poll/: the waiter below joining p/held is an event of p/.)
        gone_poll, gone_watch = open_(poll % "p/poll/", gone_key), open_(watch % "p/w", gone_key)
        gone_stream = open_("/v1/events/stream?prefix=p/", gone_key)
        gone_stream.recv(4096)  # its head and retry line
        narrow_watch, narrow_poll = open_(watch % "p/w", narrow_key), open_(poll % "q/", narrow_key)
        stay_poll = open_(poll % "p/poll/", stay_key)
        waiter = Keyed(self.srv.port, gone_key, timeout=60)
        self.addCleanup(waiter.close)
        box = {}
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("p/held", wait_ms=60000)))
        t.start()

        def counts():
            m = parse_metrics(admin.request("GET", "/metrics")[2])
            return (m["leasegate_event_polls"], m["leasegate_watches"], m["leasegate_event_streams"],
                    m["leasegate_waiters"])
        for _ in range(200):
            if counts() == (3, 2, 1, 1):
                break
            threading.Event().wait(0.05)
        self.assertEqual(counts(), (3, 2, 1, 1))
        narrowed = narrow.replace(" p/ q/", " q/")
        self.assertNotEqual(narrowed, narrow)
        self.write("\n".join([narrowed, stay, admin_line]) + "\n")
        self.hup_and_wait("SIGHUP: 3 API keys")
        for sock, status, error in ((gone_poll, 401, "unauthorized"), (gone_watch, 401, "unauthorized"),
                                    (narrow_watch, 403, "forbidden")):
            st, _, body = read_response(sock, timeout=10)
            body = json.loads(body)
            self.assertEqual((st, body["error"]), (status, error), body)
            self.assertIn("reloaded", body["message"])
        data = b""
        while b"0\r\n\r\n" not in data:  # the end of the chunked answer
            chunk = gone_stream.recv(4096)
            if not chunk:
                break
            data += chunk
        self.assertIn(b"event: unauthorized\ndata: {\"error\":\"unauthorized\"", data)
        t.join(30)
        self.assertEqual((box["r"][0], box["r"][2]["error"]), (401, "unauthorized"), box)
        self.assertEqual(counts(), (2, 0, 0, 0))  # narrow's q/ poll and stay's p/ poll go on
        self.assertEqual(admin.release("p/held", held["lease"])[0], 200)
        for sock, prefix in ((stay_poll, "p/poll/"), (narrow_poll, "q/")):
            st, _, g = admin.acquire(prefix + "x")
            st, _, body = read_response(sock, timeout=10)
            self.assertEqual(st, 200, body)
            self.assertEqual(json.loads(body)["events"][-1]["lock"], prefix + "x")


class RotationTest(ReloadBase):
    """Issue 37: a key may have two secrets during a rotation (sha256:OLD,sha256:NEW on its
    line): either is the one key, with one share and one audit identity; once the old
    secret leaves the line, what it holds open ends and it gets 401, the new one goes on."""

    def test_two_secrets_one_key_then_the_old_one_goes(self):
        old_key, old_line = new_key("svc", "client", "r/", "max_held=2")
        new_secret, new_line = new_key("svc", "client", "r/", "max_held=2")
        admin_key, admin_line = new_key("root", "admin")
        fields = old_line.split()
        fields[2] = old_line.split()[2] + "," + new_line.split()[2]
        self.write(" ".join(fields) + "\n" + admin_line + "\n")
        self.hup_and_wait("SIGHUP: 2 API keys")
        old, new, admin = (Keyed(self.srv.port, k, timeout=60) for k in (old_key, new_secret, admin_key))
        for c in (old, new, admin):
            self.addCleanup(c.close)
        st, _, held = old.acquire("r/one", ttl_ms=60000)
        self.assertEqual(st, 200, held)
        st, _, other = new.acquire("r/two", ttl_ms=60000)
        self.assertEqual(st, 200, other)
        # One share: the key holds two locks (max_held=2), whichever secret asks.
        st, _, body = new.acquire("r/three")
        self.assertEqual((st, body["error"], body["key"]), (429, "key_limit", "svc"), body)
        self.assertEqual(old.release("r/two", other["lease"])[0], 200)
        box = {}
        waiter = Keyed(self.srv.port, old_key, timeout=60)
        self.addCleanup(waiter.close)
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("r/one", owner="w", wait_ms=30000)))
        t.start()
        for _ in range(100):
            if admin.get_lock("r/one")[2].get("waiters") == 1:
                break
            threading.Event().wait(0.05)
        # One audit identity: both secrets' rows name the key.
        st, _, rows = admin.request("GET", "/v1/audit?key=svc")
        self.assertEqual(st, 200, rows)
        self.assertEqual({r["key"] for r in rows["rows"]}, {"svc"}, rows)
        self.assertGreaterEqual(len(rows["rows"]), 3, rows)
        # The rotation ends: the old secret leaves the line.
        self.write(new_line + "\n" + admin_line + "\n")
        self.hup_and_wait("SIGHUP: 2 API keys")
        t.join(30)
        self.assertEqual((box["r"][0], box["r"][2]["error"]), (401, "unauthorized"), box)  # its waiter ended
        self.assertEqual(old.get_lock("r/one")[0], 401)
        self.assertEqual(new.get_lock("r/one")[0], 200)
        self.assertEqual(new.release("r/one", held["lease"])[0], 200)

    def test_a_rotation_line_is_checked(self):
        _, a = new_key("a", "client", "r/")
        _, b = new_key("b", "client", "r/")
        ha, hb = a.split()[2], b.split()[2]
        for hashes, words in ((ha + "," + ha, "the same secret twice"),
                              (ha + "," + hb + "," + ha, "at most 2 secrets"),
                              (ha + ",", "is not sha256"),
                              (ha + ",sha256:12", "is not sha256")):
            with self.subTest(hashes=hashes):
                self.write("x client %s r/\n" % hashes)
                self.hup_and_wait("SIGHUP: the key file does not load")
                self.assertIn(words, self.srv.stderr_text().splitlines()[-1])
        # A secret is one key's only.
        fields = b.split()
        fields[2] = hb + "," + ha
        self.write(a + "\n" + " ".join(fields) + "\n")
        self.hup_and_wait("SIGHUP: the key file does not load")
        self.assertIn("the same key hash as 'a'", self.srv.stderr_text().splitlines()[-1])


class ReplayBoundToKeyTest(KeyedTestCase):
    """A retried acquire (same owner and request_id) gets the grant it made, lease
    included: only when the same key retries. Another key's identical request is a new
    acquire: 409 lock_held, or a wait, never the first key's lease."""

    def test_another_keys_retry_is_a_new_acquire(self):
        a_key, a_line = new_key("tenant-a", "client", "shared/")
        b_key, b_line = new_key("tenant-b", "client", "shared/")
        self.start_keyed([a_line, b_line])
        a, b = self.as_(a_key), self.as_(b_key)
        st, _, grant = a.acquire("shared/x", owner="billing-1", request_id="r-1", ttl_ms=60000)
        self.assertEqual(st, 200, grant)
        st, _, again = a.acquire("shared/x", owner="billing-1", request_id="r-1", ttl_ms=60000)
        self.assertEqual((st, again["lease"]), (200, grant["lease"]))  # its own retry: the same grant
        st, _, other = b.acquire("shared/x", owner="billing-1", request_id="r-1", ttl_ms=60000)
        self.assertEqual((st, other["error"]), (409, "lock_held"), other)
        self.assertNotIn(grant["lease"], b.last_text)
        st, _, other = b.acquire("shared/x", owner="billing-1", request_id="r-1", wait_ms=300)
        self.assertEqual((st, other["error"]), (409, "lock_held"), other)
        self.assertNotIn(grant["lease"], b.last_text)
        # The holder's grant is untouched: a still holds it, and releases it.
        self.assertEqual(a.renew("shared/x", grant["lease"])[0], 200)
        self.assertEqual(a.release("shared/x", grant["lease"])[0], 200)


class StartTest(unittest.TestCase):
    def start(self, *args):
        return subprocess.run([binary_path(), "serve", "--data", os.path.join(tempfile.mkdtemp(), "x.db")] +
                              list(args), capture_output=True, text=True, timeout=10)

    def test_beyond_loopback_needs_keys_or_the_insecure_flag(self):
        p = self.start("--listen", "0.0.0.0:0")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--auth-file", p.stderr)
        self.assertIn("--insecure-no-auth", p.stderr)
        p = self.start("--listen", "[::]:0")
        self.assertEqual(p.returncode, 2, p.stderr)
        srv = Server(extra_args=["--listen", "0.0.0.0:0", "--insecure-no-auth"])
        self.addCleanup(srv.cleanup)
        self.assertEqual(srv.client.request("GET", "/healthz")[0], 200)
        self.assertIn("WARNING: --insecure-no-auth", srv.stderr_text())

    def test_a_comment_after_the_fields_widens_nothing(self):
        key, line = new_key("team", "client", "orders/")
        d = tempfile.mkdtemp()
        path = os.path.join(d, "keys")
        with open(path, "w") as f:
            f.write(line + "  # billing team, ask admin before widening\n")
        srv = Server(extra_args=["--auth-file", path])
        self.addCleanup(srv.cleanup)
        c = Keyed(srv.port, key)
        self.addCleanup(c.close)
        self.assertEqual(c.acquire("orders/1")[0], 200)
        for name in ("billing/payroll", "admin/1", "before/1", "widening/z"):
            self.assertEqual(c.acquire(name)[0], 403, name)
        rc, _, err = keygen("k", "client", "#orders/")
        self.assertEqual(rc, 2, err)

    def test_a_bad_auth_file_stops_the_start(self):
        d = tempfile.mkdtemp()
        bad = os.path.join(d, "keys")
        with open(bad, "w") as f:
            f.write("alice client sha256:1234 orders/\n")
        for path, words in ((bad, "line 1"), (os.path.join(d, "missing"), "No such file")):
            p = self.start("--auth-file", path)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(words, p.stderr)
        p = self.start("--auth-metrics")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--auth-metrics needs --auth-file", p.stderr)

    def test_auth_metrics_closes_health_and_metrics_too(self):
        d = tempfile.mkdtemp()
        key, line = new_key("mon", "client", "x/")
        path = os.path.join(d, "keys")
        with open(path, "w") as f:
            f.write(line + "\n")
        srv = Server(extra_args=["--auth-file", path, "--auth-metrics"])
        self.addCleanup(srv.cleanup)
        self.assertEqual(srv.client.request("GET", "/metrics")[0], 401)
        self.assertEqual(srv.client.request("GET", "/healthz")[0], 401)
        # The dashboard's page stays open: a browser cannot send a key when it opens a
        # page, and the page holds no state (it asks for a key to read the API with).
        st, headers, _ = srv.client.request("GET", "/")
        self.assertEqual(st, 200)
        self.assertTrue(headers.get("content-type", "").startswith("text/html"), headers)
        self.assertEqual(srv.client.request("GET", "/v1/locks")[0], 401)
        c = Keyed(srv.port, key)
        self.addCleanup(c.close)
        st, _, text = c.request("GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertIn("leasegate_grants_total", parse_metrics(text))


class JsonBodyTest(ServerTestCase):
    """POST bodies must be declared application/json, so that a web page cannot send
    them without a CORS preflight (text/plain and forms need none)."""

    def test_415_unless_declared_json(self):
        c = self.srv.client
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                      "application/jsonx", ""):
            headers = {"Content-Type": ctype}
            st, _, body = c.request("POST", "/v1/locks/j/acquire", raw=b'{"owner":"page"}', headers=headers)
            self.assertEqual((st, body.get("error")), (415, "unsupported_media_type"), (ctype, body))
            st, _, body = c.request("POST", "/v1/fence/j", raw=b'{"token":1}', headers=headers)
            self.assertEqual(st, 415, (ctype, body))
        raw = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        self.addCleanup(raw.close)
        raw.sendall(b'POST /v1/locks/j/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 16\r\n\r\n{"owner":"page"}')
        self.assertTrue(raw.recv(4096).startswith(b"HTTP/1.1 415 "), "no Content-Type at all was accepted")
        self.assertFalse(c.get_lock("j")[2]["held"], "a 415 took the lock")
        for ctype in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
            st, _, g = c.request("POST", "/v1/locks/j/acquire", raw=b'{"owner":"api"}', headers={"Content-Type": ctype})
            self.assertEqual(st, 200, (ctype, g))
            self.assertEqual(c.release("j", g["lease"])[0], 200)
        # A client that writes its whole (refused) body before reading gets the answer,
        # not a reset: bodies up to 1 MiB are read and dropped.
        st, _, body = c.request("POST", "/v1/locks/j/acquire", raw=b"x" * (900 * 1024),
                                headers={"Content-Type": "text/plain"})
        self.assertEqual(st, 415, body)
        # No CORS headers are ever sent.
        st, hdrs, _ = c.request("OPTIONS", "/v1/locks/j/acquire", headers={"Origin": "http://evil.example"})
        self.assertFalse([h for h in hdrs if h.startswith("access-control-")], hdrs)


if __name__ == "__main__":
    unittest.main()
