"""TLS: `leasegate serve --tls-cert/--tls-key` serves HTTPS (libmicrohttpd's GnuTLS), and
every outbound https call verifies the certificate it gets: the CLI's (--cacert,
LEASEGATE_CACERT), the guard's upstream calls and a follower's forwards to the leader
(serve --cacert). Verification is never off: without the right CA each of them fails.

The tests make their own PKI with the openssl command in a temporary directory: a CA, a
certificate for 127.0.0.1 (an IP SAN) that it signs, and a second CA that signs nothing
the servers use (the "untrusted" one). Only loopback traffic; every wait is bounded."""

import http.client
import http.server
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import warnings

import harness
from harness import Server, binary_path

OPENSSL = shutil.which("openssl")


def setUpModule():
    if not OPENSSL:
        raise unittest.SkipTest("the openssl command is missing (scripts/deps.sh --test installs it)")


def openssl(*args):
    r = subprocess.run([OPENSSL] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), r.stdout.decode(errors="replace")))


class Pki:
    """A test CA and a server certificate for 127.0.0.1 and localhost, plus an untrusted
    CA; PEM files in .dir (removed by cleanup())."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-tls-")
        self.ca, self.ca_key = self._ca("ca", "leasegate test CA")
        self.cert, self.key = self._leaf("server", self.ca, self.ca_key)
        self.other_ca, self.other_ca_key = self._ca("other-ca", "a CA nobody here trusts")
        # A certificate and key that belong to neither the server nor each other.
        self.other_cert, self.other_key = self._leaf("other", self.other_ca, self.other_ca_key)
        # An RSA server certificate: what static-RSA suites (AES128-SHA) need.
        self.rsa_cert, self.rsa_key = self._leaf("rsa-server", self.ca, self.ca_key, key=["rsa:2048"])

    def path(self, name):
        return os.path.join(self.dir, name)

    def _ca(self, name, cn):
        cert, key = self.path(name + ".pem"), self.path(name + ".key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=" + cn,
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return cert, key

    def _leaf(self, name, ca, ca_key, key=("ec", "-pkeyopt", "ec_paramgen_curve:P-256")):
        cert, keyfile, csr, ext = (self.path(name + x) for x in (".pem", ".key", ".csr", ".ext"))
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                    "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
        openssl("req", "-new", "-newkey", *key, "-nodes", "-keyout", keyfile, "-out", csr, "-subj", "/CN=127.0.0.1")
        openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                "-days", "2", "-extfile", ext)
        return cert, keyfile

    def client_context(self, ca=None):
        """Trusts only `ca` (default: the test CA); checks the name as every client must."""
        return ssl.create_default_context(cafile=ca or self.ca)

    def serve_args(self):
        return ["--tls-cert", self.cert, "--tls-key", self.key]

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def curl(*args, timeout=30):
    """curl's exit status, stdout and stderr (text)."""
    r = subprocess.run(["curl", "-sS", "--max-time", "20"] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def wait_for(pred, timeout=20.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


class TlsServerTest(unittest.TestCase):
    """One HTTPS server (with an access log, to see connections from its side)."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        cls.log = os.path.join(cls.pki.dir, "access.log")
        cls.srv = Server(extra_args=cls.pki.serve_args() + ["--access-log", cls.log], tls=cls.pki.client_context())

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.pki.cleanup()

    def test_listening_line_says_https(self):
        self.assertTrue(self.srv.url.startswith("https://127.0.0.1:"), self.srv.url)

    def test_curl_with_the_ca_uses_the_api(self):
        url = self.srv.url
        rc, out, err = curl("--cacert", self.pki.ca, url + "/healthz")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["status"], "ok")
        post = ["--cacert", self.pki.ca, "-X", "POST", "-H", "Content-Type: application/json", "-d"]
        rc, out, err = curl(*post, json.dumps({"owner": "curl", "ttl_ms": 30000}), url + "/v1/locks/curl/a/acquire")
        self.assertEqual(rc, 0, err)
        grant = json.loads(out)
        self.assertEqual(grant["owner"], "curl", out)
        rc, out, err = curl(*post, json.dumps({"lease": grant["lease"], "ttl_ms": 60000}),
                            url + "/v1/locks/curl/a/renew")
        self.assertEqual((rc, json.loads(out).get("token")), (0, grant["token"]), out + err)
        rc, out, err = curl(*post, json.dumps({"lease": grant["lease"]}), url + "/v1/locks/curl/a/release")
        self.assertEqual((rc, json.loads(out).get("released")), (0, True), out + err)
        status, _, body = self.srv.get_lock("curl/a")
        self.assertEqual((status, body["held"]), (200, False), body)

    def test_curl_without_the_ca_fails_verification(self):
        # The system's CAs do not know the test CA; neither does the untrusted one.
        for args in ([], ["--cacert", self.pki.other_ca]):
            rc, out, err = curl(*(args + [self.srv.url + "/healthz"]))
            self.assertEqual(rc, 60, "curl %s: rc=%d out=%r err=%r" % (args, rc, out, err))  # peer verification
            self.assertIn("certificate", err)
        self.assertTrue(self.srv.running())

    def test_keep_alive_serves_many_requests_on_one_tls_connection(self):
        c = self.srv.new_client()
        self.addCleanup(c.close)
        status, _, grant = c.acquire("ka/x", ttl_ms=30000)
        self.assertEqual(status, 200, grant)
        sock = c.conn.sock
        local = sock.getsockname()
        for i in range(5):
            status, _, body = c.renew("ka/x", grant["lease"], ttl_ms=30000)
            self.assertEqual(status, 200, body)
            status, _, body = c.request("GET", "/v1/locks/ka/x?n=%d" % i)
            self.assertEqual((status, body["holder"]["token"]), (200, grant["token"]), body)
        status, _, body = c.release("ka/x", grant["lease"])
        self.assertEqual(status, 200, body)
        self.assertIs(c.conn.sock, sock, "the client opened a new connection")
        self.assertIsInstance(sock, ssl.SSLSocket)
        # The server's side: all 12 requests came from the one client port.
        peer = "%s:%d" % local

        def lines():
            with open(self.log) as f:
                return [l.split() for l in f if "/v1/locks/ka/x" in l]
        got = wait_for(lambda: (lambda ls: ls if len(ls) >= 12 else None)(lines()))
        self.assertIsNotNone(got, lines())
        self.assertEqual({l[1] for l in got}, {peer}, got)

    def test_long_poll_is_granted_when_the_holder_releases(self):
        status, _, held = self.srv.acquire("lp/one", ttl_ms=60000)
        self.assertEqual(status, 200, held)
        waiter = self.srv.new_client(timeout=60)
        self.addCleanup(waiter.close)
        box = {}
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("lp/one", owner="w", ttl_ms=30000,
                                                                        wait_ms=30000)))
        t.start()
        self.assertTrue(wait_for(lambda: self.srv.waiters("lp/one") == 1), "the waiter never queued")
        # Under TLS a waiter stays a suspended libmicrohttpd connection, never parked.
        self.assertEqual(self.srv.metric("leasegate_connections_parked"), 0)
        status, _, body = self.srv.release("lp/one", held["lease"])
        self.assertEqual(status, 200, body)
        t.join(40)
        self.assertFalse(t.is_alive(), "the waiter got no answer")
        status, _, grant = box["r"]
        self.assertEqual((status, grant["owner"]), (200, "w"), grant)
        self.assertGreater(grant["token"], held["token"])
        # The waiter's connection goes on serving after its long-poll.
        sock = waiter.conn.sock
        status, _, body = waiter.release("lp/one", grant["lease"])
        self.assertEqual(status, 200, body)
        self.assertIs(waiter.conn.sock, sock)

    def test_watches_long_polls_and_streams_over_tls(self):
        # Never parked under TLS (park.c writes plain bytes): suspended, still woken.
        index = self.srv.get_lock("tw/one")[2]["index"]
        latest = self.srv.request("GET", "/v1/events")[2]["latest"]
        box = {}
        clients = [self.srv.new_client(timeout=60) for _ in range(2)]
        for c in clients:
            self.addCleanup(c.close)
        threads = [threading.Thread(target=lambda: box.update(w=clients[0].request(
                       "GET", "/v1/locks/tw/one?index=%d&wait_ms=30000" % index, timeout=60))),
                   threading.Thread(target=lambda: box.update(p=clients[1].request(
                       "GET", "/v1/events?after=%d&wait_ms=30000&prefix=tw/" % latest, timeout=60)))]
        for t in threads:
            t.start()
        self.assertTrue(wait_for(lambda: self.srv.metric("leasegate_watches") == 1), "the watch never waited")
        self.assertEqual(self.srv.metric("leasegate_connections_parked"), 0)
        conn = http.client.HTTPSConnection("127.0.0.1", self.srv.port, context=self.pki.client_context(), timeout=60)
        self.addCleanup(conn.close)
        conn.request("GET", "/v1/events/stream?after=%d&prefix=tw/" % latest)
        stream = conn.getresponse()
        self.assertEqual(stream.status, 200)
        status, _, g = self.srv.acquire("tw/one", owner="tls", ttl_ms=60000)
        for t in threads:
            t.join(40)
            self.assertFalse(t.is_alive())
        self.assertEqual((box["w"][0], box["w"][2]["holder"]["owner"]), (200, "tls"))
        self.assertEqual([e["token"] for e in box["p"][2]["events"]], [g["token"]])
        lines = []
        while not any(line.startswith(b"data:") for line in lines):
            lines.append(stream.readline())
        self.assertIn(b'"lock":"tw/one"', lines[-1])
        self.assertNotIn(g["lease"].encode(), b"".join(lines))

    def test_a_waiter_that_hangs_up_leaves_the_queue(self):
        status, _, held = self.srv.acquire("lp/gone", ttl_ms=60000)
        self.assertEqual(status, 200, held)
        waiter = self.srv.new_client(timeout=60)
        t = threading.Thread(target=lambda: self._ignore_errors(
            lambda: waiter.acquire("lp/gone", owner="w", wait_ms=30000)))
        t.start()
        self.assertTrue(wait_for(lambda: self.srv.waiters("lp/gone") == 1), "the waiter never queued")
        waiter.conn.sock.shutdown(socket.SHUT_RDWR)
        self.assertTrue(wait_for(lambda: self.srv.waiters("lp/gone") == 0), "the waiter stayed in the queue")
        t.join(40)
        waiter.close()
        self.srv.release("lp/gone", held["lease"])

    @staticmethod
    def _ignore_errors(fn):
        try:
            fn()
        except (OSError, http.client.HTTPException):
            pass

    def test_fifty_tls_waiters_are_granted_in_arrival_order(self):
        n = 50
        status, _, held = self.srv.acquire("lp/fifo", ttl_ms=60000)
        self.assertEqual(status, 200, held)
        order, errors = [], []
        lock = threading.Lock()

        def wait_and_pass_on(i, c):
            try:
                status, _, g = c.acquire("lp/fifo", owner="w%d" % i, ttl_ms=30000, wait_ms=60000)
                if status != 200:
                    raise AssertionError("waiter %d: %d %r" % (i, status, g))
                with lock:
                    order.append((i, g["token"]))
                status, _, body = c.release("lp/fifo", g["lease"])
                if status != 200:
                    raise AssertionError("waiter %d release: %d %r" % (i, status, body))
            except Exception as e:  # reported below, in the test's thread
                errors.append(e)
            finally:
                c.close()

        threads = []
        for i in range(n):
            c = self.srv.new_client(timeout=90)
            t = threading.Thread(target=wait_and_pass_on, args=(i, c))
            t.start()
            threads.append(t)
            # Arrival order is the order in which they queue: one at a time.
            self.assertTrue(wait_for(lambda: self.srv.waiters("lp/fifo") == i + 1), "waiter %d never queued" % i)
        self.assertEqual(self.srv.metric("leasegate_connections_parked"), 0)
        status, _, body = self.srv.release("lp/fifo", held["lease"])
        self.assertEqual(status, 200, body)
        for t in threads:
            t.join(60)
        self.assertFalse(any(t.is_alive() for t in threads), "some waiters got no answer")
        self.assertEqual(errors, [])
        self.assertEqual([i for i, _ in order], list(range(n)))
        tokens = [tok for _, tok in order]
        self.assertEqual(tokens, sorted(tokens))
        self.assertGreater(tokens[0], held["token"])

    def test_pipelined_requests_behind_a_waiter(self):
        # Requests that arrive in one TLS record with a long-poll wait in GnuTLS's buffer
        # while the waiter is suspended, and are served once it is answered.
        status, _, held = self.srv.acquire("lp/pipe", ttl_ms=60000)
        self.assertEqual(status, 200, held)
        body = json.dumps({"owner": "w", "wait_ms": 20000}).encode()
        acquire = (b"POST /v1/locks/lp/pipe/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body) + body)
        health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        raw = socket.create_connection(("127.0.0.1", self.srv.port), timeout=20)
        with self.pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(acquire + health + health)
            self.assertTrue(wait_for(lambda: self.srv.waiters("lp/pipe") == 1), "the waiter never queued")
            status, _, body = self.srv.release("lp/pipe", held["lease"])
            self.assertEqual(status, 200, body)
            data = b""
            while data.count(b'"status":"ok"') < 2:
                chunk = s.recv(65536)
                self.assertTrue(chunk, "the connection closed after %r" % data)
                data += chunk
        self.assertEqual(data.count(b"HTTP/1.1 200 "), 3, data)
        self.assertIn(b'"owner":"w"', data)

    def test_only_tls_1_2_and_1_3(self):
        def handshake(highest):
            ctx = self.pki.client_context()
            with warnings.catch_warnings():  # the old versions are deprecated: that is the point
                warnings.simplefilter("ignore", DeprecationWarning)
                ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # lets this client offer TLS 1.0 and 1.1
                ctx.minimum_version = ssl.TLSVersion.TLSv1
                ctx.maximum_version = highest
            with ctx.wrap_socket(socket.create_connection(("127.0.0.1", self.srv.port), timeout=10),
                                 server_hostname="127.0.0.1") as s:
                return s.version()
        self.assertEqual(handshake(ssl.TLSVersion.TLSv1_3), "TLSv1.3")
        self.assertEqual(handshake(ssl.TLSVersion.TLSv1_2), "TLSv1.2")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = ssl.TLSVersion.TLSv1_1
        with self.assertRaises(ssl.SSLError):
            handshake(old)

    def test_plain_http_on_the_tls_port_fails_cleanly(self):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = b""
            try:
                while len(data) < 4096:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except ConnectionResetError:
                pass
        finally:
            s.close()
        self.assertFalse(data.startswith(b"HTTP/1.1 200"), data)
        # A TLS client that does not trust the server gives up in the handshake.
        bad = harness.Client(self.srv.port, timeout=10, tls=self.pki.client_context(self.pki.other_ca))
        with self.assertRaises(ssl.SSLCertVerificationError):
            bad.request("GET", "/healthz")
        bad.close()
        status, _, body = self.srv.request("GET", "/healthz")
        self.assertEqual((status, body["status"]), (200, "ok"))
        self.assertTrue(self.srv.running())


def s_client(port, ca, *args):
    """The suite `openssl s_client ARGS` agrees on with the server (its certificate checked
    against ca), or None when the handshake fails."""
    r = subprocess.run([OPENSSL, "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile", ca,
                        "-verify_return_error"] + list(args), input=b"", capture_output=True, timeout=30)
    m = re.search(r"Cipher is (\S+)", r.stdout.decode(errors="replace"))
    return m.group(1) if r.returncode == 0 and m and m.group(1) != "(NONE)" else None


class TlsCipherTest(unittest.TestCase):
    """Issue 39: TLS 1.2 accepted AES128-SHA and CBC suites. By default only TLS 1.3 and,
    in TLS 1.2, forward-secret AEAD suites (ECDHE with AES-GCM or ChaCha20-Poly1305);
    --tls-ciphers takes a GnuTLS priority string for those who must."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()

    def server(self, cert, key, *flags):
        srv = Server(extra_args=["--tls-cert", cert, "--tls-key", key] + list(flags), tls=self.pki.client_context())
        self.addCleanup(srv.cleanup)
        return srv

    def test_tls_1_2_takes_forward_secret_aead_suites_only(self):
        rsa = self.server(self.pki.rsa_cert, self.pki.rsa_key)
        refused = ("AES128-SHA", "AES256-SHA", "AES128-SHA256", "AES128-GCM-SHA256", "AES256-GCM-SHA384",
                   "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA", "ECDHE-RSA-AES128-SHA256",
                   "ECDHE-RSA-AES256-SHA384", "DES-CBC3-SHA")
        for suite in refused:
            with self.subTest(suite=suite):
                self.assertIsNone(s_client(rsa.port, self.pki.ca, "-tls1_2", "-cipher", suite + ":@SECLEVEL=0"))
        for suite in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"):
            with self.subTest(suite=suite):
                self.assertEqual(s_client(rsa.port, self.pki.ca, "-tls1_2", "-cipher", suite), suite)
        self.assertIsNotNone(s_client(rsa.port, self.pki.ca, "-tls1_3"))
        ec = self.server(self.pki.cert, self.pki.key)
        self.assertIsNone(s_client(ec.port, self.pki.ca, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA:@SECLEVEL=0"))
        self.assertEqual(s_client(ec.port, self.pki.ca, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"),
                         "ECDHE-ECDSA-AES128-GCM-SHA256")
        st, _, body = ec.request("GET", "/healthz")
        self.assertEqual(st, 200, body)

    def test_tls_ciphers_replaces_the_default(self):
        srv = self.server(self.pki.rsa_cert, self.pki.rsa_key, "--tls-ciphers",
                          "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2")
        self.assertEqual(s_client(srv.port, self.pki.ca, "-tls1_2", "-cipher", "AES128-SHA:@SECLEVEL=0"),
                         "AES128-SHA")
        st, _, body = srv.request("GET", "/healthz")
        self.assertEqual(st, 200, body)

    def test_a_priority_string_gnutls_refuses_stops_the_start(self):
        d = tempfile.mkdtemp(prefix="leasegate-tls-ciphers-")
        self.addCleanup(shutil.rmtree, d, True)
        base = [binary_path(), "serve", "--listen", "127.0.0.1:0", "--data", os.path.join(d, "db")]
        r = subprocess.run(base + ["--tls-cert", self.pki.cert, "--tls-key", self.pki.key, "--tls-ciphers",
                                   "NORMAL:+NO-SUCH-CIPHER"], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"--tls-ciphers 'NORMAL:+NO-SUCH-CIPHER': not a GnuTLS priority string", r.stderr)
        self.assertIn(b"NO-SUCH-CIPHER", r.stderr)
        for flags, rc in ((["--tls-ciphers", "NORMAL"], 2), (["--tls-ciphers", ""], 2)):
            r = subprocess.run(base + flags, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            self.assertEqual(r.returncode, rc, r.stderr)
            self.assertIn(b"--tls-ciphers", r.stderr)


class TlsStartTest(unittest.TestCase):
    """What a start with TLS flags that cannot work says, and its exit status."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()

    def serve(self, *flags):
        d = tempfile.mkdtemp(prefix="leasegate-tls-start-")
        self.addCleanup(shutil.rmtree, d, True)
        r = subprocess.run([binary_path(), "serve", "--listen", "127.0.0.1:0", "--data", os.path.join(d, "db")]
                           + list(flags), stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def test_a_key_that_does_not_match_the_certificate(self):
        rc, out, err = self.serve("--tls-cert", self.pki.cert, "--tls-key", self.pki.other_key)
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot start the HTTPS server", err)
        self.assertIn("do not match", err)
        self.assertNotIn("listening", out)

    def test_the_two_flags_go_together(self):
        for flags in (["--tls-cert", self.pki.cert], ["--tls-key", self.pki.key]):
            rc, _, err = self.serve(*flags)
            self.assertEqual(rc, 2, err)
            self.assertIn("--tls-cert and --tls-key go together", err)

    def test_an_http_advertise_url_with_tls_is_a_usage_error(self):
        r = subprocess.run([binary_path(), "serve", "--store", "etcd://127.0.0.1:2379/lg", "--advertise",
                            "http://10.0.0.5:7400"] + self.pki.serve_args(), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(b"with --tls-cert this gateway serves https://", r.stderr)

    def test_unreadable_and_wrong_files(self):
        missing = os.path.join(self.pki.dir, "missing.pem")
        cases = [
            (["--tls-cert", missing, "--tls-key", self.pki.key], "--tls-cert %s: No such file" % missing),
            (["--tls-cert", self.pki.key, "--tls-key", self.pki.cert], "no PEM certificate"),
            (["--tls-cert", self.pki.cert, "--tls-key", self.pki.cert], "no PEM private key"),
            (["--tls-cert", self.pki.dir, "--tls-key", self.pki.key], "not a regular file"),
            (["--cacert", missing], "--cacert %s: No such file" % missing),
            (["--cacert", self.pki.key], "--cacert %s: no PEM certificate" % self.pki.key),
        ]
        for flags, want in cases:
            rc, out, err = self.serve(*flags)
            self.assertEqual(rc, 1, (flags, err))
            self.assertIn(want, err, flags)
            self.assertNotIn("listening", out)

    def test_an_encrypted_key_is_refused_saying_so(self):
        enc = os.path.join(self.pki.dir, "encrypted.key")
        openssl("pkey", "-in", self.pki.key, "-aes256", "-passout", "pass:secret", "-out", enc)
        rc, _, err = self.serve("--tls-cert", self.pki.cert, "--tls-key", enc)
        self.assertEqual(rc, 1, err)
        self.assertIn("the key is encrypted", err)

    def test_help_serve_lists_the_flags(self):
        r = subprocess.run([binary_path(), "help", "serve"], capture_output=True, timeout=30)
        text = r.stdout.decode()
        for flag in ("--tls-cert", "--tls-key", "--cacert", "--tls-ciphers"):
            self.assertIn(flag, text)


class TlsCliTest(unittest.TestCase):
    """The CLI against an HTTPS server: verified, with --cacert or LEASEGATE_CACERT."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        cls.srv = Server(extra_args=cls.pki.serve_args(), tls=cls.pki.client_context())

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.pki.cleanup()

    def cli(self, *args, env=None, timeout=60):
        e = {k: v for k, v in os.environ.items() if k not in ("LEASEGATE_CACERT", "LEASEGATE_SERVER")}
        e.update(env or {})
        r = subprocess.run([binary_path()] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                           env=e, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def test_acquire_and_release_with_cacert(self):
        rc, out, err = self.cli("acquire", "--server", self.srv.url, "--cacert", self.pki.ca, "--lock", "cli/a")
        self.assertEqual(rc, 0, err)
        grant = json.loads(out)
        rc, out, err = self.cli("renew", "--cacert", self.pki.ca, "--server", self.srv.url, "--lock", "cli/a",
                                "--lease", grant["lease"])
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli("release", "--server", self.srv.url, "--lock", "cli/a", "--lease", grant["lease"],
                                env={"LEASEGATE_CACERT": self.pki.ca})
        self.assertEqual(rc, 0, err)
        self.assertTrue(json.loads(out)["released"])
        rc, out, err = self.cli("healthcheck", "--server", self.srv.url, "--cacert", self.pki.ca)
        self.assertEqual(rc, 0, err)

    def test_without_the_ca_the_cli_fails_saying_why(self):
        for extra in ([], ["--cacert", self.pki.other_ca]):
            rc, out, err = self.cli("acquire", "--server", self.srv.url, "--lock", "cli/b", *extra)
            self.assertEqual((rc, out), (1, ""), err)
            self.assertIn("SSL certificate problem", err)
            self.assertIn("--cacert", err)
        status, _, body = self.srv.get_lock("cli/b")
        self.assertEqual((status, body["held"]), (200, False), body)
        rc, _, err = self.cli("healthcheck", "--server", self.srv.url)
        self.assertEqual(rc, 1, err)

    def test_a_cacert_that_cannot_be_read_is_a_usage_error(self):
        missing = os.path.join(self.pki.dir, "nope.pem")
        rc, _, err = self.cli("status", "--server", self.srv.url, "--lock", "x", "--cacert", missing)
        self.assertEqual(rc, 2, err)
        self.assertIn("--cacert %s" % missing, err)

    def test_run_holds_the_lock_over_tls_and_passes_the_ca_on(self):
        out = os.path.join(self.pki.dir, "run.out")
        script = 'echo "$LEASEGATE_CACERT $LEASEGATE_SERVER $LEASEGATE_TOKEN" > "$1"'
        rc, _, err = self.cli("run", "--server", self.srv.url, "--cacert", self.pki.ca, "--lock", "cli/run",
                              "--ttl", "5s", "--", "sh", "-c", script, "sh", out)
        self.assertEqual(rc, 0, err)
        with open(out) as f:
            ca, server, token = f.read().split()
        self.assertEqual((ca, server), (self.pki.ca, self.srv.url))
        self.assertGreater(int(token), 0)
        status, _, body = self.srv.get_lock("cli/run")
        self.assertEqual((status, body["held"], body["last_token"]), (200, False, int(token)), body)


class HttpsUpstream:
    """A small HTTPS server (Python's, threads) that answers every request 200 with what
    it saw, and records (method, path, Fencing-Token, body)."""

    def __init__(self, cert, key):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                seen.append((self.command, self.path, self.headers.get("Fencing-Token"), body))
                out = json.dumps({"upstream": "https", "method": self.command, "path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_PUT = do_POST = do_DELETE = answer

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = "https://127.0.0.1:%d/" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


class TlsGuardTest(unittest.TestCase):
    """The guard's calls to an https upstream verify its certificate."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        cls.up = HttpsUpstream(cls.pki.cert, cls.pki.key)

    @classmethod
    def tearDownClass(cls):
        cls.up.stop()
        cls.pki.cleanup()

    def guard(self, extra, tls=None):
        srv = Server(extra_args=["--guard", "/store/=" + self.up.url] + extra, tls=tls)
        self.addCleanup(srv.cleanup)
        return srv

    def test_verified_with_cacert_over_tls_both_ways(self):
        srv = self.guard(["--cacert", self.pki.ca] + self.pki.serve_args(), tls=self.pki.client_context())
        status, _, body = srv.request("GET", "/store/docs/a.txt")
        self.assertEqual((status, body), (200, {"upstream": "https", "method": "GET", "path": "/docs/a.txt"}))
        status, _, grant = srv.acquire("docs/a.txt", ttl_ms=30000)
        self.assertEqual(status, 200, grant)
        status, _, body = srv.request("PUT", "/store/docs/a.txt", raw=b"hello", headers={
            "Fencing-Lease": grant["lease"], "Content-Type": "text/plain"})
        self.assertEqual((status, body.get("method")), (200, "PUT"), body)
        self.assertIn(("PUT", "/docs/a.txt", str(grant["token"]), b"hello"), self.up.seen)

    def test_refused_with_502_when_the_upstream_is_not_trusted(self):
        # The system's CAs (no --cacert) and a CA that did not sign the upstream's certificate.
        for extra in ([], ["--cacert", self.pki.other_ca]):
            srv = self.guard(extra)
            before = len(self.up.seen)
            status, _, body = srv.request("GET", "/store/docs/b.txt")
            self.assertEqual((status, body.get("error")), (502, "bad_gateway"), (extra, body))
            self.assertIn("certificate", body.get("message", ""), body)
            status, _, grant = srv.acquire("docs/b.txt", ttl_ms=30000)
            status, _, body = srv.request("PUT", "/store/docs/b.txt", raw=b"x", headers={
                "Fencing-Lease": grant["lease"], "Content-Type": "text/plain"})
            self.assertEqual(status, 502, body)
            self.assertEqual(len(self.up.seen), before, "the upstream got a request over an unverified connection")
            srv.stop_clean()


class TlsEtcdTest(unittest.TestCase):
    """Over etcd, a follower forwards to the leader's https URL, verified with --cacert."""

    def setUp(self):
        import etcd_fixture
        if not etcd_fixture.available():
            self.skipTest(etcd_fixture.missing_reason())
        self.pki = Pki()
        self.addCleanup(self.pki.cleanup)
        self.etcd = etcd_fixture.Etcd()
        self.addCleanup(self.etcd.stop)
        self.store = "etcd://%s/lg-tls-%s" % (self.etcd.endpoint, self._testMethodName)

    def gateway(self, extra=()):
        g = Server(store=self.store, tls=self.pki.client_context(),
                   extra_args=["--leader-ttl", "2"] + self.pki.serve_args() + list(extra))
        self.addCleanup(g.cleanup)
        return g

    @staticmethod
    def health(g):
        c = g.new_client(timeout=5)
        try:
            status, _, body = c.request("GET", "/healthz")
        except (OSError, http.client.HTTPException):
            # Not answered, or cut off: the gateway's standby server stops (and closes its
            # connections) the moment the gateway wins the election; ask again.
            return None
        finally:
            c.close()
        return body if status == 200 else None

    def test_a_follower_forwards_to_the_https_leader_only_when_it_trusts_it(self):
        leader = self.gateway(["--cacert", self.pki.ca])
        self.assertTrue(wait_for(lambda: (self.health(leader) or {}).get("role") == "leader", 30))
        trusting = self.gateway(["--cacert", self.pki.ca])
        doubting = self.gateway()  # the system's CAs: the leader's certificate is not trusted
        for g in (trusting, doubting):
            h = wait_for(lambda: (lambda x: x if x and x.get("leader") else None)(self.health(g)), 30)
            self.assertEqual((h["role"], h["leader"]), ("follower", leader.url), h)
            self.assertTrue(h["leader"].startswith("https://"))
        status, _, grant = trusting.acquire("fwd/tls", ttl_ms=30000)
        self.assertEqual(status, 200, grant)
        status, _, body = leader.get_lock("fwd/tls")
        self.assertEqual((status, body["holder"]["token"]), (200, grant["token"]), body)
        status, _, body = doubting.get_lock("fwd/tls")
        self.assertEqual((status, body.get("error")), (503, "overloaded"), body)
        self.assertIn("certificate", doubting.stderr_text())
        status, _, body = trusting.release("fwd/tls", grant["lease"])
        self.assertEqual(status, 200, body)


class TlsEtcdStoreTest(unittest.TestCase):
    """--store etcds://: the etcd store and election over TLS, verified with --cacert."""

    def setUp(self):
        import etcd_fixture
        from upstream import free_port
        if not etcd_fixture.available():
            self.skipTest(etcd_fixture.missing_reason())
        self.pki = Pki()
        self.addCleanup(self.pki.cleanup)
        self.etcd_dir = tempfile.mkdtemp(prefix="leasegate-etcd-tls-")
        self.addCleanup(shutil.rmtree, self.etcd_dir, True)
        port, peer = free_port(), "http://127.0.0.1:%d" % free_port()
        self.endpoint = "127.0.0.1:%d" % port
        url = "https://" + self.endpoint
        log = open(os.path.join(self.etcd_dir, "etcd.log"), "wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [etcd_fixture.ETCD_BIN, "--name", "m0", "--data-dir", os.path.join(self.etcd_dir, "data"),
             "--listen-client-urls", url, "--advertise-client-urls", url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", "m0=" + peer,
             "--cert-file", self.pki.cert, "--key-file", self.pki.key],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.addCleanup(harness.kill_process, proc)
        ctx = self.pki.client_context()

        def ready():
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ctx)
                conn.request("POST", "/v3/kv/range", body=b'{"key":"eA=="}')
                ok = conn.getresponse().status == 200
                conn.close()
                return ok
            except OSError:
                return False
        self.assertTrue(wait_for(ready, 30), "etcd with TLS did not start")

    def test_the_store_trusts_etcd_only_with_cacert(self):
        g = Server(store="etcds://%s/lg-tls" % self.endpoint, extra_args=["--leader-ttl", "2", "--cacert", self.pki.ca])
        self.addCleanup(g.cleanup)
        role = lambda: g.request("GET", "/healthz")[2].get("role")  # noqa: E731
        self.assertEqual(wait_for(lambda: role() == "leader", 30), True, g.stderr_text())
        status, _, grant = g.acquire("over/tls", ttl_ms=30000)
        self.assertEqual(status, 200, grant)
        g.restart()  # the lock space comes back from etcd, over TLS
        self.assertEqual(wait_for(lambda: role() == "leader", 30), True, g.stderr_text())
        status, _, body = g.get_lock("over/tls")
        self.assertEqual((status, body["holder"]["token"]), (200, grant["token"]), body)
        # Without --cacert (the system's CAs) the certificate is refused: no start.
        r = subprocess.run([binary_path(), "serve", "--listen", "127.0.0.1:0", "--store",
                            "etcds://%s/lg-tls" % self.endpoint], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"SSL", r.stderr)


if __name__ == "__main__":
    unittest.main()
