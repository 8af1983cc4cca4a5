"""What the client tests share: the real binary on a free loopback port, small loopback
HTTP servers (a guarded store, a recorder), a TCP proxy that counts connections, and a
private CA. Only loopback traffic; every wait is bounded; every process is stopped by
its PID.
"""

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
import uuid

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

    def metric(self, name):
        """One value of its /metrics (a plain sample line: name value)."""
        conn = http.client.HTTPConnection(self.url.split("//", 1)[1], timeout=BOUND)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        for line in text.splitlines():
            if line.split(" ", 1)[0] == name:
                return float(line.split()[1])
        raise AssertionError("no %s in /metrics" % name)

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
    each request body (and in methods its method); with `forward`, it instead forwards
    every request to `forward`, and the first one (the first of method `drop`, when
    given) it reads the whole answer of and hangs up without passing it on (an answer
    lost on the way back)."""

    def __init__(self, status=503, forward=None, drop=None):
        self.bodies = []
        self.methods = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec.bodies.append(json.loads(body))
                rec.methods.append(self.command)
                if forward is None:
                    return self.answer(status, b'{"error":"overloaded","message":"test"}')
                host, port = forward.rsplit("/", 1)[1].split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=BOUND)
                conn.request(self.command, self.path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                mine = [m for m in rec.methods if drop is None or m == drop]
                if not (self.command == (drop or self.command) and len(mine) == 1):
                    self.answer(resp.status, data)  # else the answer is dropped: nothing is sent

            do_PUT = do_POST

            def answer(self, code, data):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


class Silent:
    """A loopback port that accepts connections (the kernel completes them into the
    listen backlog) and never answers: a paused (SIGSTOP) server, as a client sees it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


def closed_port_url():
    """A loopback URL where nothing listens."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


class CountingProxy:
    """A TCP proxy on a free loopback port to `target` (host, port) that counts the
    connections it was asked for: how many attempts a client made. cut() closes every
    connection open now; between pause() and resume() new connections wait (at most
    BOUND) before they reach the target, as a client's reconnect across a partition."""

    def __init__(self, target):
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._target = target
        self._open = []
        self._mu = threading.Lock()
        self._gate = threading.Event()
        self._gate.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        self._gate.wait(BOUND)
        try:
            upstream = socket.create_connection(self._target, timeout=BOUND)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._mu:
            self._open += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            src.close()  # dst is the other pump's src

    def cut(self):
        with self._mu:
            socks, self._open = self._open, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def pause(self):
        self._gate.clear()

    def resume(self):
        self._gate.set()

    def stop(self):
        self._gate.set()
        self._listener.close()


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
