"""What the conformance scenarios run clients against: the real leasegate binary on a fixed
free loopback port (so that a restarted server keeps its URL), gateways on etcd, a guard's
upstream, a proxy that loses answers, and a raw HTTP client for the runner's own requests.

Only 127.0.0.1; every process is stopped by its PID; every wait is bounded."""

import http.client
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

READY_RE = re.compile(r"^leasegate: (?:listening on|leading; serving on) http://127\.0\.0\.1:(\d+)\s*$")
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def free_port():
    """A port that was free a moment ago."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def now_ms():
    return int(time.time() * 1000)


def wait_until(pred, timeout, step=0.05):
    """pred()'s first true value within timeout seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() >= deadline:
            return value or None
        time.sleep(step)


def _signal(proc, sig):
    if proc is not None and proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


class Leasegate:
    """`leasegate serve` on 127.0.0.1:port with its data in workdir (or on etcd with store),
    started by start(); the same port and data across kill9() and start()."""

    def __init__(self, binary, workdir, args=(), store=None):
        self.binary = binary
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.args = list(args)
        self.store = store
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.dir, "server.%d.log" % self.starts), "wb")
        argv = [self.binary, "serve", "--listen", "127.0.0.1:%d" % self.port]
        argv += ["--store", self.store] if self.store else ["--data", os.path.join(self.dir, "leasegate.db")]
        self.proc = subprocess.Popen(argv + self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=log, cwd=self.dir)
        log.close()
        ready = threading.Event()
        proc = self.proc

        def read_stdout():  # for the whole life of the process, so the pipe never fills
            for raw in proc.stdout:
                if READY_RE.match(raw.decode("utf-8", "replace")):
                    ready.set()
            ready.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S) or proc.poll() is not None:
            self.kill9()
            raise RuntimeError("leasegate did not start; see %s" % self.dir)
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self):
        _signal(self.proc, signal.SIGSTOP)

    def resume(self):
        _signal(self.proc, signal.SIGCONT)

    def kill9(self):
        self.resume()
        _signal(self.proc, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(STOP_TIMEOUT_S)

    def stop(self):
        self.resume()
        _signal(self.proc, signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill9()

    def role(self):
        """healthz's role on etcd (leader, follower, candidate), or None."""
        try:
            status, body = Http(self.url, 2.0).call("GET", "/healthz")
        except (OSError, http.client.HTTPException):
            return None
        return body.get("role") if status == 200 and isinstance(body, dict) else None


class Etcd:
    """A one-member etcd (tests/integration/etcd_fixture.py), or None when etcd-server is not
    installed: see available()."""

    @staticmethod
    def available():
        import etcd_fixture
        return etcd_fixture.available()

    @staticmethod
    def start():
        import etcd_fixture
        return etcd_fixture.Etcd(1)


def exact_json(data):
    """JSON with integers as Python ints (exact at any size)."""
    return json.loads(data)


class Http:
    """The runner's own requests: one connection per call; (status, parsed JSON or text)."""

    def __init__(self, url, timeout=10.0):
        m = re.match(r"http://([^:/]+):(\d+)$", url)
        self.host, self.port = m.group(1), int(m.group(2))
        self.timeout = timeout

    def call(self, method, path, body=None, headers=None, timeout=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
            hdrs = dict(headers or {})
            if body is not None and not isinstance(body, bytes):
                hdrs["Content-Type"] = "application/json"
            conn.request(method, path, body=payload, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        try:
            return resp.status, exact_json(data)
        except ValueError:
            return resp.status, data.decode("utf-8", "replace")

    def lock(self, name):
        status, body = self.call("GET", "/v1/locks/" + name)
        if status != 200:
            raise AssertionError("GET /v1/locks/%s: %s %r" % (name, status, body))
        return body

    def acquire(self, name, owner="conformance-runner", **fields):
        wait_s = fields.get("wait_ms", 0) / 1000.0
        return self.call("POST", "/v1/locks/%s/acquire" % name, dict(owner=owner, **fields),
                         timeout=self.timeout + wait_s)


class Upstream:
    """A storage backend behind the guard: answers 204 to every write, 200 to reads, and
    keeps (method, path, Fencing-Token) of every request it got."""

    def __init__(self):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                seen.append((self.command, self.path, self.headers.get("Fencing-Token")))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                self._answer(200)

            def do_PUT(self):
                self._answer(204)

            do_POST = do_DELETE = do_PATCH = do_PUT

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class DropProxy:
    """An HTTP/1.1 proxy in front of one server that, when armed, loses the answer of the
    next request whose path ends with a suffix: it forwards the request, reads the whole
    answer (so the server did the work), and closes the client's connection without a byte
    of it, as a network that fails on the way back does. .dropped keeps those answers."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.mu = threading.Lock()
        self.armed = None  # a path suffix, or None
        self.dropped = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, suffix):
        with self.mu:
            self.armed = suffix

    def close(self):
        self.closed = True
        self.listener.close()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_message(sock, buf):
        """(head bytes, body bytes, rest of buf) of one message with Content-Length, or None."""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
        if re.search(rb"(?im)^transfer-encoding:", head):
            return None  # not needed by any client here: the connection is closed
        length = int(m.group(1)) if m else 0
        while len(buf) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buf += chunk
        return head + b"\r\n\r\n", buf[:length], buf[length:]

    def _serve(self, client):
        buf = b""
        client.settimeout(3600)
        try:
            while True:
                request = self._read_message(client, buf)
                if request is None:
                    return
                head, body, buf = request
                path = head.split(b" ", 2)[1].decode("latin-1")
                up = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=3600)
                try:
                    up.sendall(head + body)
                    answer = self._read_message(up, b"")
                finally:
                    up.close()
                if answer is None:
                    return
                with self.mu:
                    drop = self.armed is not None and path.endswith(self.armed)
                    if drop:
                        self.armed = None
                        self.dropped.append(exact_json(answer[1]))
                if drop:
                    return
                client.sendall(answer[0] + answer[1])
                if re.search(rb"(?im)^connection:\s*close", answer[0]):
                    return
        except OSError:
            return
        finally:
            client.close()
