"""The Python client against the real leasegate binary ($LEASEGATE_BIN).

Each server runs on a free 127.0.0.1 port with a temporary database and is stopped by
its PID; a guarded prefix /store/ forwards to a small in-process storage upstream.
Only loopback traffic; every wait is bounded; nothing asserts how long a step took.

Run: LEASEGATE_BIN=build/leasegate PYTHONPATH=clients/python \
         python3 -m unittest discover -s clients/python/tests -v
"""

import datetime
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

import leasegate
from leasegate.durations import seconds

READY = re.compile(r"^leasegate: listening on (https?://127\.0\.0\.1:\d+)\s*$")
BOUND = 20.0  # the longest any wait in these tests may take


def unique(prefix):
    return "%s/%s" % (prefix, uuid.uuid4().hex[:8])


def wait_for(predicate, what, timeout=BOUND):
    """Polls predicate() until it is true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


class Server:
    """The real binary on a free loopback port, with its own temporary database."""

    def __init__(self, *args):
        binary = os.environ.get("LEASEGATE_BIN")
        if not binary or not os.access(binary, os.X_OK):
            raise RuntimeError("set LEASEGATE_BIN to the leasegate binary (e.g. build/leasegate)")
        self.dir = tempfile.mkdtemp(prefix="leasegate-pyclient-")
        self.stderr = open(os.path.join(self.dir, "stderr.log"), "wb")
        self.proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0",
                                      "--data", os.path.join(self.dir, "test.db"), *args],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr)
        found = []
        ready = threading.Event()

        def read_stdout():  # for the whole life of the process, so the pipe never fills
            for line in self.proc.stdout:
                m = READY.match(line.decode("utf-8", "replace"))
                if m and not found:
                    found.append(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        ready.wait(10)
        if not found:
            self.stop()
            raise RuntimeError("leasegate did not start; see " + self.stderr.name)
        self.url = found[0]

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()
        self.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class LoopbackHTTP:
    """A ThreadingHTTPServer on a free loopback port running `handler`."""

    def __init__(self, handler):
        handler.log_message = lambda *args: None
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Store(LoopbackHTTP):
    """The guard's upstream: keeps each PUT (path -> (body, Fencing-Token))."""

    def __init__(self):
        self.objects = {}
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_PUT(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                store.objects[self.path] = (body, self.headers.get("Fencing-Token"))
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

        super().__init__(Handler)


class Recorder(LoopbackHTTP):
    """A server that answers every request with `status` and a JSON body, and keeps
    each request body; with drop_first, it instead forwards the first request to
    `forward`, reads the whole answer and hangs up without passing it on (an answer
    lost on the way back), and forwards every later one."""

    def __init__(self, status=503, forward=None):
        self.bodies = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec.bodies.append(json.loads(body))
                if forward is None:
                    return self.answer(status, b'{"error":"overloaded","message":"test"}')
                host, port = forward.rsplit("/", 1)[1].split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=BOUND)
                conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if len(rec.bodies) > 1:  # the first answer is dropped: nothing is sent
                    self.answer(resp.status, data)

            def answer(self, code, data):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


def closed_port_url():
    """A loopback URL where nothing listens."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.store = Store()
        cls.server = Server("--guard", "/store/=%s/" % cls.store.url)
        cls.client = leasegate.Client(cls.server.url, owner="py-test")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.store.stop()

    def test_acquire_renew_release(self):
        name = unique("acquire")
        lease = self.client.acquire(name, ttl="30s", metadata={"why": "test"})
        self.assertTrue(lease.valid)
        self.assertEqual((lease.name, lease.owner, lease.server), (name, "py-test", self.server.url))
        state = self.client.status(name)
        self.assertTrue(state["held"])
        self.assertEqual(state["holder"]["token"], lease.token)
        self.assertEqual(state["holder"]["metadata"], {"why": "test"})
        lease.renew(ttl="10s")
        self.assertEqual(lease.ttl, 10.0)
        lease.release()
        self.assertFalse(lease.valid)
        self.assertFalse(self.client.status(name)["held"])
        lease.release()  # a second release does nothing

    def test_lock_block_holds_then_releases(self):
        name = unique("block")
        with self.client.lock(name, ttl="15s") as lease:
            self.assertTrue(lease.valid)
            self.assertEqual(lease.headers, {"Fencing-Lease": lease.lease})
            self.assertEqual(self.client.status(name)["holder"]["token"], lease.token)
        self.assertFalse(self.client.status(name)["held"])
        self.assertIsNone(lease.lost)

    def test_waiters_are_handed_the_lock_in_arrival_order(self):
        name = unique("fifo")
        holder = self.client.acquire(name, ttl="30s")
        order, errors = [], []

        def waiter(label):
            try:
                # A short TTL and a long wait: the grant must be confirmed by a renewal.
                with leasegate.Client(self.server.url, owner=label).lock(name, ttl="600ms", wait="20s") as lease:
                    order.append((label, lease.token))
                    time.sleep(0.3)
            except Exception as e:  # reported by the main thread
                errors.append(e)

        threads = []
        for n, label in enumerate(("first", "second")):
            threads.append(threading.Thread(target=waiter, args=(label,)))
            threads[-1].start()
            wait_for(lambda: self.client.status(name)["waiters"] == n + 1, "%s waiter" % label)
        time.sleep(0.3)  # both wait past a third of their TTL
        holder.release()
        for t in threads:
            t.join(BOUND)
        self.assertEqual(errors, [])
        self.assertEqual([label for label, _ in order], ["first", "second"])
        tokens = [holder.token] + [token for _, token in order]
        self.assertEqual(tokens, sorted(set(tokens)))
        self.assertFalse(self.client.status(name)["held"])

    def test_watchdog_keeps_a_short_lease_alive(self):
        name = unique("watchdog")
        lost = []
        with self.client.lock(name, ttl="600ms", on_lost=lost.append) as lease:
            time.sleep(2.0)  # more than three TTLs
            self.assertTrue(lease.valid)
            with self.assertRaises(leasegate.LockHeld) as held:
                leasegate.Client(self.server.url, owner="intruder").acquire(name)
            self.assertEqual(held.exception.body["holder"]["token"], lease.token)
        self.assertEqual(lost, [])
        self.assertFalse(self.client.status(name)["held"])

    def test_renewal_answered_not_holder_is_a_loss(self):
        name = unique("superseded")
        lost = []
        lease = self.client.acquire(name, ttl="300ms", on_lost=lost.append)  # no watchdog
        wait_for(lambda: not lease.valid, "the lease to run out")
        newer = leasegate.Client(self.server.url).acquire(name, wait="10s")
        with self.assertRaises(leasegate.LeaseLost) as cm:
            lease.renew()
        self.assertIsInstance(cm.exception.__cause__, leasegate.NotHolder)
        self.assertEqual(cm.exception.__cause__.body["reason"], "superseded")
        self.assertRaises(leasegate.LeaseLost, lease.renew)
        self.assertRaises(leasegate.LeaseLost, lease.check)
        self.assertEqual(len(lost), 1)
        self.assertIs(lost[0].lease, lease)
        newer.release()

    def test_errors_are_named_after_the_contract_codes(self):
        name = unique("errors")
        with self.client.lock(name):
            with self.assertRaises(leasegate.LockHeld) as cm:
                self.client.acquire(name, wait=0)
        e = cm.exception
        self.assertIsInstance(e, leasegate.LeasegateError)
        self.assertEqual((e.status, e.code), (409, "lock_held"))
        self.assertEqual(e.body["waiters"], 0)
        with self.assertRaises(leasegate.BadRequest) as cm:
            self.client.acquire("no spaces allowed")
        self.assertEqual((cm.exception.status, cm.exception.body["field"]), (400, "name"))
        with self.assertRaises(leasegate.BadRequest):
            self.client.acquire(name, ttl="10ms")  # below the server's minimum
        fenced = unique("fence")
        self.assertTrue(self.client.fence(fenced, e.body["holder"]["token"])["accepted"])
        with self.assertRaises(leasegate.StaleToken):
            self.client.fence(fenced, e.body["holder"]["token"] - 1)

    def test_guarded_write_carries_the_lease(self):
        name = unique("guarded")
        with self.client.lock(name) as lease:
            resp = lease.request("PUT", "/store/" + name, "v1").raise_for_status()
        self.assertEqual(resp.status, 201)
        self.assertEqual(self.store.objects["/" + name], (b"v1", str(lease.token)))
        resp = lease.request("PUT", "/store/" + name, "late")  # released: refused by the guard
        self.assertEqual(resp.status, 409)
        self.assertRaises(leasegate.StaleToken, resp.raise_for_status)
        self.assertEqual(self.store.objects["/" + name][0], b"v1")

    def test_failover_past_a_closed_port(self):
        client = leasegate.Client("%s,%s" % (closed_port_url(), self.server.url))
        with client.lock(unique("failover")) as lease:
            self.assertEqual(lease.server, self.server.url)

    def test_no_server_answering_is_unavailable(self):
        client = leasegate.Client([closed_port_url(), closed_port_url()], retry_for="200ms")
        with self.assertRaises(leasegate.Unavailable) as cm:
            client.acquire(unique("nobody"))
        self.assertIsNone(cm.exception.status)

    def test_overloaded_server_is_skipped_and_retries_keep_the_request_id(self):
        busy = Recorder(503)
        try:
            lease = leasegate.Client([busy.url, self.server.url]).acquire(unique("busy"))
            self.assertEqual(lease.server, self.server.url)
            lease.release()
            self.assertEqual(len(busy.bodies), 1)
            with self.assertRaises(leasegate.Overloaded):
                leasegate.Client(busy.url, retry_for="300ms").acquire("busy/only")
        finally:
            busy.stop()
        ids = {body["request_id"] for body in busy.bodies[1:]}
        self.assertGreater(len(busy.bodies), 2)
        self.assertEqual(len(ids), 1, "every retry of one acquire sends the same request_id")
        self.assertRegex(ids.pop(), r"^[\x21-\x7e]{1,64}$")

    def test_retry_after_a_lost_answer_gets_the_same_grant(self):
        proxy = Recorder(forward=self.server.url)
        name = unique("lost-answer")
        try:
            lease = leasegate.Client(proxy.url).acquire(name, ttl="30s")
            first, retry = proxy.bodies[:2]
            self.assertEqual(first["request_id"], retry["request_id"])
            holder = self.client.status(name)["holder"]
            self.assertEqual((holder["token"], holder["count"]), (lease.token, 1))
            lease.release()
        finally:
            proxy.stop()
        self.assertFalse(self.client.status(name)["held"])

    def test_list_follows_pages(self):
        prefix = unique("list") + "/"
        names = [prefix + n for n in ("a", "b", "c")]
        for name in names:
            self.client.acquire(name).release()
        listed = [lock["name"] for lock in self.client.list(prefix, page_size=2)]
        self.assertEqual(listed, names)


class LeaseLossTest(unittest.TestCase):
    """A server of its own, since it is stopped (SIGSTOP) for longer than the TTL."""

    def setUp(self):
        self.store = Store()
        self.server = Server("--guard", "/store/=%s/" % self.store.url)

    def tearDown(self):
        self.server.stop()
        self.store.stop()

    def test_stopped_server_loses_the_lease_and_the_block_raises(self):
        name = unique("stopped")
        lost = []
        client = leasegate.Client(self.server.url)
        with self.assertRaises(leasegate.LeaseLost) as cm:
            with client.lock(name, ttl="600ms", on_lost=lost.append) as lease:
                lease.request("PUT", "/store/" + name, "v1").raise_for_status()
                self.server.signal(signal.SIGSTOP)  # renewals now go unanswered
                try:
                    wait_for(lambda: lost, "on_lost")
                    self.assertFalse(lease.valid)
                finally:
                    self.server.signal(signal.SIGCONT)
                newer = leasegate.Client(self.server.url).acquire(name, wait="10s")
                resp = lease.request("PUT", "/store/" + name, "v2")
                self.assertEqual(resp.status, 409)
                self.assertRaises(leasegate.StaleToken, resp.raise_for_status)
                newer.release()
        self.assertIs(cm.exception.lease, lease)
        self.assertEqual(len(lost), 1)
        self.assertEqual(self.store.objects["/" + name][0], b"v1")


def make_pki(directory):
    """A CA and a certificate for 127.0.0.1 that it signs, made with the openssl command:
    the paths of (CA, certificate, key)."""
    ca, ca_key, cert, key, csr, ext = (os.path.join(directory, n) for n in
                                       ("ca.pem", "ca.key", "cert.pem", "cert.key", "cert.csr", "cert.ext"))
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for cmd in (["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=test CA",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"],
                ["req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
                ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                 "-days", "2", "-extfile", ext]):
        subprocess.run(["openssl", *cmd], check=True, capture_output=True, timeout=60)
    return ca, cert, key


@unittest.skipUnless(shutil.which("openssl"), "the openssl command is missing")
class TlsTest(unittest.TestCase):
    """An HTTPS server (--tls-cert/--tls-key) whose certificate a private CA signed."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="leasegate-pyclient-tls-")
        cls.ca, cert, key = make_pki(cls.dir)
        cls.server = Server("--tls-cert", cert, "--tls-key", key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_cafile_verifies_the_server(self):
        self.assertTrue(self.server.url.startswith("https://"))
        client = leasegate.Client(self.server.url, cafile=self.ca)
        name = unique("tls")
        with client.lock(name, ttl="2s") as lease:
            time.sleep(1.0)  # the watchdog renews over TLS too
            self.assertTrue(lease.valid)
            self.assertEqual(client.status(name)["holder"]["token"], lease.token)
        self.assertFalse(client.status(name)["held"])

    def test_without_the_ca_no_request_gets_through(self):
        client = leasegate.Client(self.server.url, retry_for="200ms")
        with self.assertRaises(leasegate.Unavailable) as caught:
            client.acquire(unique("tls"))
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(caught.exception))


class KeyTest(unittest.TestCase):
    """A server with --auth-file: the key goes with every request (key= or $LEASEGATE_KEY)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="leasegate-pyclient-keys-")
        out = subprocess.run([os.environ["LEASEGATE_BIN"], "keygen", "app", "client", "py/"], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        cls.key = out[0]
        keys = os.path.join(cls.dir, "keys")
        with open(keys, "w") as f:
            f.write(out[1] + "\n")
        cls.server = Server("--auth-file", keys)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_the_key_goes_with_every_request(self):
        client = leasegate.Client(self.server.url, key=self.key)
        name = unique("py/key")
        with client.lock(name, ttl="2s") as lease:
            time.sleep(1.0)  # renewals carry it too
            self.assertTrue(lease.valid)
        self.assertFalse(client.status(name)["held"])
        with self.assertRaises(leasegate.Forbidden):
            client.acquire(unique("other"))

    def test_the_key_from_the_environment_and_none(self):
        os.environ["LEASEGATE_KEY"] = self.key
        try:
            self.assertFalse(leasegate.Client(self.server.url).status(unique("py/env"))["held"])
        finally:
            del os.environ["LEASEGATE_KEY"]
        with self.assertRaises(leasegate.Unauthorized):
            leasegate.Client(self.server.url).acquire(unique("py/none"))


class DurationTest(unittest.TestCase):
    def test_spellings(self):
        self.assertEqual(seconds("250ms"), 0.25)
        self.assertEqual(seconds("15s"), 15.0)
        self.assertEqual(seconds("2m"), 120.0)
        self.assertEqual(seconds("1h"), 3600.0)
        self.assertEqual(seconds(1.5), 1.5)
        self.assertEqual(seconds(datetime.timedelta(milliseconds=20)), 0.02)
        for bad in ("15", "1d", "-1s", ""):
            self.assertRaises(ValueError, seconds, bad)
        self.assertRaises(ValueError, seconds, -1)
        self.assertRaises(TypeError, seconds, None)


if __name__ == "__main__":
    unittest.main()
