"""Upstreams for the guard-proxy integration tests.

* Nginx      -- a real nginx (Debian package nginx-light, or any nginx built with
                --with-http_dav_module) serving a WebDAV store from a temporary
                directory on 127.0.0.1 with a free port. Everything nginx writes
                (pid, error log, access log, temp files) stays inside that directory,
                so it runs as any user and never touches /etc, /var or /run.
* SlowUpstream -- a small Python TCP server whose behaviour is chosen by the
                request path: never answer, answer late, send the headers and then
                stall in the body, or trickle the body slowly.
* closed_port() -- a loopback port where nothing listens (connection refused).

Only loopback traffic; every wait here is bounded in time.
"""

import atexit
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import harness

NGINX_BIN = os.environ.get("LEASEGATE_NGINX", "/usr/sbin/nginx")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0

# One access-log line per request: tab separated, fields in this order.
# An empty field is logged as "-" (so "lease" is "-" unless a Fencing-Lease header came).
# Of two lines of one header, nginx 1.22 logs the first (later versions join them).
ACCESS_FIELDS = ("method", "request_uri", "status", "token", "lock", "lease", "content_length", "host",
                 "destination", "dest_token", "dest_lock")
_LOG_FORMAT = "\\t".join(["$request_method", "$request_uri", "$status", "$http_fencing_token",
                          "$http_fencing_lock", "$http_fencing_lease", "$content_length", "$http_host",
                          "$http_destination", "$http_fencing_destination_token",
                          "$http_fencing_destination_lock"])

_NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
lock_file {dir}/nginx.lock;

events {{
    worker_connections 1024;
}}

http {{
    access_log off;
    log_format guardtest "{log_format}";
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    types {{
        text/plain txt;
        application/octet-stream bin;
    }}
    default_type application/octet-stream;
    keepalive_requests 100000;
    absolute_redirect off;
    server_tokens on;

    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        access_log {dir}/access.log guardtest;
        root {data};
        client_max_body_size 0;
        add_header X-Upstream nginx always;

        location / {{
            dav_methods PUT DELETE MKCOL COPY MOVE;
            create_full_put_path on;
            dav_access user:rw group:rw all:r;
        }}
        # Echoes what nginx received (after the guard), in the body and in headers.
        location = /echo {{
            add_header X-Upstream nginx always;
            add_header X-Seen-Method $request_method always;
            add_header X-Seen-Token $http_fencing_token always;
            add_header X-Seen-Lock $http_fencing_lock always;
            add_header X-Seen-Lease $http_fencing_lease always;
            add_header X-Seen-Authorization $http_authorization always;
            return 200 "method=$request_method uri=$request_uri args=$args token=$http_fencing_token lock=$http_fencing_lock lease=$http_fencing_lease custom=$http_x_custom other=$http_x_other secret=$http_x_secret\\n";
        }}
        location = /teapot {{
            add_header X-Upstream nginx always;
            add_header X-Teapot "short and stout" always;
            return 418 "I'm a teapot\\n";
        }}
        location = /redirect {{
            add_header X-Upstream nginx always;
            return 302 /elsewhere;
        }}
        location = /cached {{
            add_header X-Upstream nginx always;
            add_header Cache-Control "public, max-age=3600" always;
            return 200 "cacheable\n";
        }}
        # An answer with a header of one hop, named by a Connection header that comes
        # after it (nginx writes its own "Connection: keep-alive" as well).
        location = /hop {{
            add_header X-Upstream nginx always;
            add_header X-Internal 1 always;
            add_header Connection X-Internal always;
            return 200 "hop\\n";
        }}
        location = /fail {{
            add_header X-Upstream nginx always;
            return 503 "upstream says no\\n";
        }}
    }}
}}
"""

_live = []
_live_lock = threading.Lock()


def nginx_available():
    return os.path.isfile(NGINX_BIN) and os.access(NGINX_BIN, os.X_OK)


def free_port():
    """A port that was free a moment ago (the caller binds it; retry on a clash)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


class ClosedPort:
    """A loopback port with nothing listening: connect() is refused.

    The socket is bound but never listen()s, so the kernel answers RST to SYNs
    and no other process can take the port while this object lives.
    """

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d/" % self.port

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def closed_port():
    return ClosedPort()


class Nginx:
    """A real nginx WebDAV store in a temporary directory, on a free loopback port."""

    def __init__(self, start=True):
        if not nginx_available():
            raise RuntimeError("nginx not found at %s (apt-get install nginx-light)" % NGINX_BIN)
        self.dir = tempfile.mkdtemp(prefix="leasegate-nginx-")
        self.data = os.path.join(self.dir, "data")
        self.conf_path = os.path.join(self.dir, "nginx.conf")
        self.access_log = os.path.join(self.dir, "access.log")
        self.error_log = os.path.join(self.dir, "error.log")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        os.makedirs(self.data)
        os.makedirs(os.path.join(self.dir, "tmp"))
        self.proc = None
        self.port = None
        self.url = None
        self._stderr = None
        with _live_lock:
            _live.append(self)
        if start:
            self.start()

    def _write_conf(self, port):
        text = _NGINX_CONF.format(dir=self.dir, data=self.data, port=port, log_format=_LOG_FORMAT)
        with open(self.conf_path, "w") as f:
            f.write(text)

    def start(self):
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("nginx already running")
        last_err = ""
        for _attempt in range(5):
            port = free_port()
            self._write_conf(port)
            self._stderr = open(self.stderr_path, "ab")
            # -e sets the error log used before the configuration is read (the
            # compiled-in default may be a file under /var/log); -p keeps relative
            # paths inside our directory.
            self.proc = subprocess.Popen(
                [NGINX_BIN, "-p", self.dir + "/", "-c", self.conf_path, "-e", self.error_log],
                stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr, cwd=self.dir)
            if self._wait_ready(port):
                self.port = port
                self.url = "http://127.0.0.1:%d/" % port
                return self
            last_err = self._tail_logs()
            self._kill()
            if "Address already in use" not in last_err:
                break
        raise RuntimeError("nginx did not start: %s" % last_err)

    def _wait_ready(self, port):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/__ready_probe__")
                resp = conn.getresponse()
                resp.read()
                conn.close()
                if resp.getheader("X-Upstream") == "nginx":
                    return True
            except OSError:
                pass
            except http.client.HTTPException:
                pass
            time.sleep(0.02)
        return False

    def _tail_logs(self):
        out = []
        for p in (self.stderr_path, self.error_log):
            try:
                with open(p, "rb") as f:
                    out.append(f.read()[-2000:].decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(out)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def _kill(self):
        harness.kill_process(self.proc)
        self._close_files()

    def _close_files(self):
        if self._stderr is not None:
            try:
                self._stderr.close()
            except OSError:
                pass
            self._stderr = None

    def stop(self):
        """SIGTERM (fast shutdown) by PID, wait, SIGKILL if needed."""
        if self.proc is None:
            return None
        rc = harness.stop_process(self.proc, STOP_TIMEOUT_S)
        self._close_files()
        return rc

    def cleanup(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            with _live_lock:
                if self in _live:
                    _live.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    # Direct access (bypassing leasegate) ------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=10.0):
        """One request on a fresh connection: (status, headers lower-cased, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def put(self, path, data):
        st, _, body = self.request("PUT", path, body=data)
        if st not in (201, 204):
            raise AssertionError("direct PUT %s -> %d %r" % (path, st, body[:200]))
        return st

    def get(self, path):
        """Body of path read over HTTP directly from nginx, or None on 404."""
        st, _, body = self.request("GET", path)
        if st == 404:
            return None
        if st != 200:
            raise AssertionError("direct GET %s -> %d %r" % (path, st, body[:200]))
        return body

    def file_path(self, rel):
        return os.path.join(self.data, rel.lstrip("/"))

    def read_file(self, rel):
        """Bytes of the stored object on disk, or None when it does not exist."""
        try:
            with open(self.file_path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def access_entries(self):
        """Parsed access-log lines: list of dicts with ACCESS_FIELDS keys."""
        try:
            with open(self.access_log, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) != len(ACCESS_FIELDS):
                continue
            out.append(dict(zip(ACCESS_FIELDS, parts)))
        return out

    def wait_logged(self, predicate, timeout=5.0, what="access-log entry"):
        """Wait until some access-log entry satisfies predicate; return the entries."""
        deadline = time.monotonic() + timeout
        while True:
            entries = self.access_entries()
            if any(predicate(e) for e in entries):
                return entries
            if time.monotonic() >= deadline:
                raise AssertionError("timed out waiting for %s in nginx access log (%d entries)"
                                     % (what, len(entries)))
            time.sleep(0.02)


class SlowUpstream:
    """A misbehaving HTTP upstream on 127.0.0.1, chosen per request path:

    * anything else        accept, read the request head, never answer
    * path contains /late?ms=N          answer 200 "late" after N ms
    * path contains /stall-body         send headers (Content-Length 1000) and 10 body
                                        bytes, then hold the connection open silently
    * path contains /trickle?n=N&ms=M   200 with Content-Length N*8, then N pieces of
                                        8 bytes with M ms between them
    * path contains /fields?n=N&pad=P   200 "fields" with N header fields X-F0: v ... X-F<N-1>: v,
                                        each value P more v's long
    * path contains /together?n=N       hold the answer until N such requests (counted
                                        since this upstream started) have arrived, so the
                                        first N are all in flight at once, then 200
                                        "together"; 200 "alone" if they had not all come
                                        within 8 s

    Connections are held until the peer closes them or the server stops. Counts
    accepted connections and how many are open now (a closed peer is noticed by a
    reader thread that waits for EOF).
    """

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d/" % self.port
        self.accepted = 0
        self.open = 0
        self.paths = []
        self._lock = threading.Lock()
        self._together = threading.Condition(self._lock)
        self._together_in = 0
        self._stop = threading.Event()
        self._conns = []
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self.open += 1
                self._conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            c.settimeout(0.2)
            buf = b""
            while b"\r\n\r\n" not in buf and not self._stop.is_set():
                try:
                    chunk = c.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    return
                buf += chunk
            if self._stop.is_set():
                return
            line = buf.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split()
            path = parts[1] if len(parts) > 1 else ""
            with self._lock:
                self.paths.append(path)
            if "/late" in path:
                ms = int(_query_int(path, "ms", 300))
                if self._stop.wait(ms / 1000.0):
                    return
                body = b"late"
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Upstream: slow\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            elif "/together" in path:
                n = int(_query_int(path, "n", 2))
                with self._together:
                    self._together_in += 1
                    self._together.notify_all()
                    met = self._together.wait_for(lambda: self._together_in >= n, timeout=8.0)
                body = b"together" if met else b"alone"
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Upstream: slow\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            elif "/fields" in path:
                n = int(_query_int(path, "n", 10))
                value = b"v" * (1 + int(_query_int(path, "pad", 0)))
                head = b"".join(b"X-F%d: %s\r\n" % (i, value) for i in range(n))
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + head +
                          b"Content-Length: 6\r\nConnection: close\r\n\r\nfields")
            elif "/stall-body" in path:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                          b"X-Upstream: slow\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
            elif "/trickle" in path:
                n = int(_query_int(path, "n", 5))
                ms = int(_query_int(path, "ms", 300))
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                          b"X-Upstream: slow\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (n * 8))
                for i in range(n):
                    if self._stop.wait(ms / 1000.0):
                        return
                    c.sendall(b"piece%03d" % (i % 1000))
            # Hold the connection open until the peer closes it (or we stop).
            while not self._stop.is_set():
                try:
                    chunk = c.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
        except OSError:
            pass
        finally:
            with self._lock:
                self.open -= 1
            try:
                c.close()
            except OSError:
                pass

    def counts(self):
        with self._lock:
            return self.accepted, self.open

    def wait_open(self, n, timeout=5.0):
        """Wait until at most n connections are open; return the open count."""
        deadline = time.monotonic() + timeout
        while True:
            _, o = self.counts()
            if o <= n or time.monotonic() >= deadline:
                return o
            time.sleep(0.02)

    def close(self):
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass
        self._thread.join(2.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _query_int(path, key, default):
    m = re.search(r"[?&]%s=(\d+)" % re.escape(key), path)
    return int(m.group(1)) if m else default


def _cleanup_all():
    with _live_lock:
        items = list(_live)
    for n in items:
        try:
            n.cleanup()
        except Exception:
            pass


atexit.register(_cleanup_all)


if __name__ == "__main__":
    # Self-check: start nginx, PUT/GET/DELETE directly, read the access log, stop.
    with Nginx() as ng:
        print("nginx on port", ng.port, "pid", ng.proc.pid, "dir", ng.dir)
        assert ng.put("/a/b/hello.txt", b"hello") == 201
        assert ng.put("/a/b/hello.txt", b"hello2") == 204
        assert ng.get("/a/b/hello.txt") == b"hello2"
        assert ng.read_file("a/b/hello.txt") == b"hello2"
        st, h, body = ng.request("GET", "/missing")
        assert st == 404 and h.get("x-upstream") == "nginx", (st, h)
        st, h, body = ng.request("POST", "/echo?x=1", body=b"zz",
                                 headers={"Fencing-Token": "7", "Fencing-Lock": "l", "Fencing-Lease": "s"})
        assert st == 200 and b"token=7 lock=l lease=s" in body and b"args=x=1" in body, body
        ng.wait_logged(lambda e: e["request_uri"] == "/echo?x=1" and (e["token"], e["lock"], e["lease"]) == ("7", "l", "s"))
        st, _, _ = ng.request("DELETE", "/a/b/hello.txt")
        assert st == 204, st
        ng.wait_logged(lambda e: e["method"] == "DELETE")
        for e in ng.access_entries():
            print(e)
        pid = ng.proc.pid
    assert not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split()[2] == "Z"
    with ClosedPort() as cp:
        try:
            socket.create_connection(("127.0.0.1", cp.port), timeout=2).close()
            raise AssertionError("closed port accepted a connection")
        except ConnectionRefusedError:
            print("closed port", cp.port, "refuses")
    with SlowUpstream() as su:
        c = socket.create_connection(("127.0.0.1", su.port), timeout=5)
        c.sendall(b"GET /late?ms=100 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        print(c.recv(1000))
        c.close()
    print("upstream self-check ok")
