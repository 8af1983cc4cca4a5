"""Black-box harness for leasegate integration tests.

Starts the real binary (path from $LEASEGATE_BIN) on 127.0.0.1 with a free port and
a temporary data directory, talks HTTP/1.1 keep-alive to it, and always stops it.

Only loopback traffic; every wait here is bounded in time.

With LEASEGATE_TEST_STORE=etcd, every Server not given an explicit store keeps its
state in one shared one-member etcd (started on first use, stopped at exit) under a
key prefix of its own, so the same tests check the etcd store as well.
"""

import atexit
import hashlib
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

# Any IPv4 address, or [::] (a dual-stack socket: tests reach it at 127.0.0.1 and at ::1), or
# [::1] (--listen localhost:0 where localhost is ::1 first, as in a minimal Debian root).
READY_RE = re.compile(r"^leasegate: listening on (https?)://(\d+\.\d+\.\d+\.\d+|\[::\]|\[::1\]):(\d+)\s*$")
LEADING_RE = re.compile(r"^leasegate: leading; serving on ")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
# On etcd a gateway serves only once elected; after a kill -9 the old leader key must
# expire first (--leader-ttl ETCD_LEADER_TTL_S), so this bound is generous.
LEADER_TIMEOUT_S = 20.0
ETCD_LEADER_TTL_S = 2

_live_servers = []
_live_lock = threading.Lock()


METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+-?\d+)?$')


def parse_metrics(text):
    """Prometheus text -> {"name{labels}": value}; every sample line must parse."""
    values = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        if not m:
            raise AssertionError("not a Prometheus sample line: %r" % line)
        values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return values


def on_etcd():
    """True when the tests run against the etcd store (LEASEGATE_TEST_STORE=etcd)."""
    return os.environ.get("LEASEGATE_TEST_STORE", "") == "etcd"


def sqlite_only(testcase, why):
    """Skips testcase on the etcd store: for what only SQLite has (the database file,
    fsync faults, the disk)."""
    if on_etcd():
        testcase.skipTest("sqlite store only: " + why)


_etcd = None


def _shared_etcd():
    """The one-member etcd of this test process, started on first use."""
    global _etcd
    if _etcd is None:
        import etcd_fixture  # imports this module: only once it is loaded
        if not etcd_fixture.available():
            raise RuntimeError("LEASEGATE_TEST_STORE=etcd: " + etcd_fixture.missing_reason())
        _etcd = etcd_fixture.Etcd(1)
    return _etcd


def _stop_etcd():
    global _etcd
    if _etcd is not None:
        _etcd.stop()
        _etcd = None


def _etcd_store_for(data_dir):
    """The --store URL that stands in for data_dir: two Servers on one data dir, or one
    Server across restarts, see the same lock space, like on one database file."""
    digest = hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:20]
    return "etcd://%s/leasegate-it/%s" % (_shared_etcd().endpoint, digest)


class ServerTestCase(unittest.TestCase):
    """One server shared by every test of the class (cls.srv), stopped cleanly at the end."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server()

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()


# Every client on 127.0.0.0/8 is one peer of the server's shares; a client on IPv6's loopback
# ::1 is another. A server that must tell two peers apart listens on both (DUAL_STACK), and
# the other peer connects to ::1 (OTHER_PEER).
OTHER_PEER = "::1"
DUAL_STACK = ["--listen", "[::]:0"]


def other_peer_works():
    """Can this machine reach a dual-stack socket at ::1 (IPv6 on, bindv6only off)?"""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::", 0))
            s.listen(1)
            with socket.create_connection(("::1", s.getsockname()[1]), timeout=2):
                pass
            with socket.create_connection(("127.0.0.1", s.getsockname()[1]), timeout=2):
                pass
        return True
    except OSError:
        return False


def chunked(data, size):
    """data in HTTP/1.1 chunked transfer coding, size bytes per chunk, with the last chunk."""
    out = b""
    for i in range(0, len(data), size):
        part = data[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


def kill_process(proc, sig=signal.SIGKILL, timeout=STOP_TIMEOUT_S):
    """Sends sig to proc by PID (if it still runs) and waits up to timeout.
    Returns True when the process has ended."""
    if proc is None:
        return True
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
    return True


def resume_process(proc):
    """Sends SIGCONT to proc by PID if it still runs, so that a paused process can be
    stopped; does not wait (kill_process would wait for it to end, which it need not)."""
    if proc is not None and proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def stop_process(proc, timeout=STOP_TIMEOUT_S):
    """SIGTERM by PID, wait, SIGKILL if needed. Returns the exit code (None: never started)."""
    if proc is None:
        return None
    if not kill_process(proc, signal.SIGTERM, timeout):
        kill_process(proc)
    return proc.returncode


def binary_path():
    """Path of the leasegate binary; exits the test run clearly when unset."""
    path = os.environ.get("LEASEGATE_BIN")
    if not path:
        sys.stderr.write(
            "LEASEGATE_BIN is not set: point it at the leasegate binary, e.g.\n"
            "  LEASEGATE_BIN=build/leasegate python3 tests/integration/test_misc.py\n")
        sys.exit(2)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.stderr.write("LEASEGATE_BIN=%r is not an executable file\n" % path)
        sys.exit(2)
    return os.path.abspath(path)


def serve_to_exit(args, timeout=10.0):
    """`leasegate serve ARGS` (on a free port, a fresh SQLite file) expected to stop at
    once, as a refused configuration does: the CompletedProcess, stdout and stderr as
    text. A server that starts instead is killed after timeout (TimeoutExpired)."""
    d = tempfile.mkdtemp(prefix="leasegate-serve-exit-")
    try:
        return subprocess.run([binary_path(), "serve", "--listen", "127.0.0.1:0", "--data",
                               os.path.join(d, "x.db")] + list(args), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, cwd=d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def raise_nofile_limit(want=65536):
    """Raise RLIMIT_NOFILE soft limit to the hard limit (inherited by the server); as
    root, first raise the hard limit to `want` when it is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            soft, hard = want, want
        except (ValueError, OSError):
            pass
    if hard == resource.RLIM_INFINITY:
        target = 1 << 20
    else:
        target = hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def slow_disk_env(ms, only_if=None):
    """Environment for Server(extra_env=...) that makes every fsync take `ms` longer
    (tests/faults/slowsync.c), or None when the library was not built. Widens the
    window in which an answer waits for its commit. With `only_if` (a path), only
    while that file exists."""
    lib = os.environ.get("LEASEGATE_SLOWSYNC")
    if not lib or not os.path.exists(lib):
        return None
    env = {"LD_PRELOAD": lib, "SLOWSYNC_MS": str(ms)}
    if only_if:
        env["SLOWSYNC_IF"] = only_if
    if os.environ.get("LEASEGATE_SANITIZED") == "1":
        # The library is built with the sanitizers too; ASan then is not first in
        # the preload order, which is fine for a library this small.
        env["ASAN_OPTIONS"] = "verify_asan_link_order=0"
    return env


def now_ms():
    return int(time.time() * 1000)


def _parse_body(data, headers):
    text = data.decode("utf-8", errors="replace")
    ctype = headers.get("content-type", "")
    if "json" in ctype or text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return text
    return text


class Client:
    """One keep-alive HTTP/1.1 connection to the server (not thread-safe); HTTPS when
    given an ssl.SSLContext (tls), which must trust the server's certificate.

    request() returns (status, headers, body) where headers is a dict with
    lower-case names and body is the parsed JSON, or the text when not JSON.
    The raw text of the last response is kept in .last_text.
    """

    def __init__(self, port, timeout=30.0, tls=None, host="127.0.0.1"):
        self.port = port
        self.host = host
        self.timeout = timeout
        self.tls = tls
        self.conn = None
        self.last_text = ""
        self.last_raw = b""

    def _connect(self):
        self.close()
        if self.tls is not None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                    context=self.tls)
        else:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None

    def request(self, method, path, body=None, raw=None, headers=None, timeout=None):
        hdrs = {}
        if headers:
            hdrs.update(headers)
        payload = None
        if raw is not None:
            payload = raw if isinstance(raw, (bytes, bytearray)) else raw.encode("utf-8")
        elif body is not None:
            payload = json.dumps(body).encode("utf-8")
        if payload is not None:
            if not any(k.lower() == "content-type" for k in hdrs):
                hdrs["Content-Type"] = "application/json"
        elif method in ("POST", "PUT", "PATCH"):
            hdrs.setdefault("Content-Length", "0")
        # One retry only for a keep-alive connection that the server closed while
        # idle: the request never reached it in that case.
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                self._connect()
            self.conn.timeout = timeout if timeout is not None else self.timeout
            if self.conn.sock is not None:
                self.conn.sock.settimeout(self.conn.timeout)
            try:
                self.conn.request(method, path, body=payload, headers=hdrs)
                resp = self.conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError, http.client.CannotSendRequest,
                    http.client.BadStatusLine):
                self.close()
                if attempt == 0 and not fresh:
                    continue
                raise
            except Exception:
                self.close()
                raise
            rheaders = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close:
                self.close()
            self.last_raw = data
            self.last_text = data.decode("utf-8", errors="replace")
            return resp.status, rheaders, _parse_body(data, rheaders)
        raise AssertionError("unreachable")

    # Convenience wrappers ---------------------------------------------------
    def acquire(self, name, owner="tester", **fields):
        body = {"owner": owner}
        body.update(fields)
        wait_ms = fields.get("wait_ms", 0)
        timeout = self.timeout
        if isinstance(wait_ms, int) and not isinstance(wait_ms, bool) and 0 < wait_ms <= 3600000:
            timeout = max(timeout, wait_ms / 1000.0 + 10)
        return self.request("POST", "/v1/locks/%s/acquire" % name, body=body, timeout=timeout)

    def renew(self, name, lease, **fields):
        body = {"lease": lease}
        body.update(fields)
        return self.request("POST", "/v1/locks/%s/renew" % name, body=body)

    def release(self, name, lease):
        return self.request("POST", "/v1/locks/%s/release" % name, body={"lease": lease})

    def get_lock(self, name):
        return self.request("GET", "/v1/locks/%s" % name)

    def fence(self, resource_name, token):
        return self.request("POST", "/v1/fence/%s" % resource_name, body={"token": token})


class Server:
    """The real leasegate binary, started on a free loopback port."""

    def __init__(self, extra_args=None, data_dir=None, start=True, extra_env=None, store=None, tls=None,
                 new_lock_space=True):
        """tls: an ssl.SSLContext that trusts the server's certificate, for a server
        started with --tls-cert/--tls-key; its clients then speak HTTPS.
        new_lock_space: with a store, start with --new-lock-space (the lock space is made on
        a fresh prefix; harmless once it exists), as every test on a prefix of its own does."""
        self.bin = binary_path()
        self.tls = tls
        self.extra_args = list(extra_args or [])
        self.extra_env = dict(extra_env or {})
        self._own_dir = data_dir is None
        self.dir = data_dir or tempfile.mkdtemp(prefix="leasegate-it-")
        self.data_path = os.path.join(self.dir, "leasegate.db")
        # --store URL in place of --data (test_etcd.py, or every test on etcd). Only the
        # gateways the etcd mode made up wait for leadership in start(): test_etcd.py
        # watches its own elections.
        self.wait_leader = store is None and on_etcd()
        if self.wait_leader:
            store = _etcd_store_for(self.dir)
            if "--leader-ttl" not in self.extra_args:
                self.extra_args += ["--leader-ttl", str(ETCD_LEADER_TTL_S)]
        self.store = store
        self.new_lock_space = new_lock_space
        self.proc = None
        self.port = None
        self.url = None
        self.client = None
        self.stdout_lines = []
        self._stderr_file = None
        self.starts = 0
        with _live_lock:
            _live_servers.append(self)
        if start:
            self.start()

    # Lifecycle ------------------------------------------------------------
    def start(self):
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("server already running")
        raise_nofile_limit()
        self._finish_files()  # a server that stopped by itself left its files open
        self.starts += 1
        err_path = os.path.join(self.dir, "stderr.%d.log" % self.starts)
        self._stderr_file = open(err_path, "wb")
        self._stderr_path = err_path
        args = [self.bin, "serve", "--listen", "127.0.0.1:0"]
        args += ["--store", self.store] if self.store else ["--data", self.data_path]
        if self.store and self.new_lock_space:
            args.append("--new-lock-space")
        args += self.extra_args
        env = dict(os.environ, **self.extra_env) if self.extra_env else None
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr_file, cwd=self.dir, env=env)
        port_box = []
        ready = threading.Event()
        leading = []
        settled = threading.Event()  # the leading line came, or stdout ended
        proc = self.proc
        lines = self.stdout_lines

        def reader():
            # Reads stdout for the whole life of the process so the pipe never fills.
            for raw_line in proc.stdout:
                line = raw_line.decode("utf-8", errors="replace").rstrip("\r\n")
                lines.append(line)
                m = READY_RE.match(line)
                if m and not ready.is_set():
                    port_box.append((m.group(1), m.group(2), int(m.group(3))))
                    ready.set()
                if LEADING_RE.match(line):
                    leading.append(line)
                    settled.set()
            ready.set()
            settled.set()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        ready.wait(START_TIMEOUT_S)
        if not port_box:
            rc = self.proc.poll()
            self._force_kill()
            raise RuntimeError(
                "leasegate did not print its listening line within %.0f s (exit=%r)\n"
                "stdout: %r\nstderr: %s" % (START_TIMEOUT_S, rc, lines[-10:], self.stderr_text()[-2000:]))
        scheme, bound, self.port = port_box[0]
        # Where the tests reach it: 127.0.0.1, unless it listens on ::1 only.
        self.host = "::1" if bound == "[::1]" else "127.0.0.1"
        if (scheme == "https") != (self.tls is not None):
            self._force_kill()
            raise RuntimeError("leasegate serves %s, but the test's Server was given tls=%r" % (scheme, self.tls))
        self.url = "%s://%s:%d" % (scheme, "[::1]" if self.host == "::1" else self.host, self.port)
        if self.client is not None:
            self.client.close()
        self.client = Client(self.port, tls=self.tls, host=self.host)
        # On etcd the gateway serves once elected and loaded, and says so on stdout. (Not
        # asked at /healthz: --auth-metrics closes that to a client without a key.)
        if self.wait_leader and not (settled.wait(LEADER_TIMEOUT_S) and leading):
            rc = self.proc.poll()
            self._force_kill()
            raise RuntimeError("leasegate on %s did not lead within %.0f s (exit=%r)\nstderr: %s"
                               % (self.store, LEADER_TIMEOUT_S, rc, self.stderr_text()[-2000:]))
        return self

    def stderr_text(self):
        try:
            with open(self._stderr_path, "rb") as f:
                return f.read().decode("utf-8", errors="replace")
        except (OSError, AttributeError):
            return ""

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def _close_clients(self):
        if self.client is not None:
            self.client.close()

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM by PID, wait, SIGKILL if needed. Returns the exit code."""
        self._close_clients()
        if self.proc is None:
            return None
        rc = stop_process(self.proc, timeout)
        self._finish_files()
        return rc

    def kill9(self):
        self._close_clients()
        if self.proc is None:
            return None
        self._force_kill()
        rc = self.proc.returncode
        self._finish_files()
        return rc

    def _force_kill(self):
        kill_process(self.proc)

    def _finish_files(self):
        if self._stderr_file is not None:
            try:
                self._stderr_file.close()
            except OSError:
                pass
            self._stderr_file = None
        if self.proc is not None and self.proc.stdout is not None:
            try:
                self.proc.stdout.close()
            except (OSError, ValueError):
                pass

    def stop_clean(self):
        """SIGTERM and insist on exit status 0: a graceful stop that fails, or a
        sanitizer report (leak, overflow) at exit, fails the test."""
        rc = self.stop()
        if rc != 0:
            raise AssertionError("leasegate exited with status %s on SIGTERM:\n%s" % (rc, self.stderr_text()))

    def restart(self, kill9=False):
        """Stop (SIGTERM, or SIGKILL when kill9) and start again on the same data file."""
        if self.running():
            if kill9:
                self.kill9()
            else:
                self.stop_clean()
        return self.start()

    def cleanup(self):
        try:
            if self.running():
                self.stop_clean()
            else:
                self._finish_files()
        finally:
            if self._own_dir and os.path.isdir(self.dir):
                shutil.rmtree(self.dir, ignore_errors=True)
            with _live_lock:
                if self in _live_servers:
                    _live_servers.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    # Observations ---------------------------------------------------------
    def healthy_body(self):
        """What GET /healthz answers while this server serves: on etcd it also names its
        role and the leader's URL (its own)."""
        if self.wait_leader:
            return {"status": "ok", "role": "leader", "leader": self.url}
        return {"status": "ok"}

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS for pid %d" % self.proc.pid)

    def new_client(self, timeout=30.0):
        return Client(self.port, timeout=timeout, tls=self.tls)

    def request(self, method, path, body=None, raw=None, headers=None, timeout=None):
        return self.client.request(method, path, body=body, raw=raw, headers=headers, timeout=timeout)

    @property
    def last_text(self):
        return self.client.last_text

    # Same convenience wrappers as Client, on the default connection.
    def acquire(self, name, owner="tester", **fields):
        return self.client.acquire(name, owner, **fields)

    def renew(self, name, lease, **fields):
        return self.client.renew(name, lease, **fields)

    def release(self, name, lease):
        return self.client.release(name, lease)

    def get_lock(self, name):
        return self.client.get_lock(name)

    def fence(self, resource_name, token):
        return self.client.fence(resource_name, token)

    def wait_until(self, predicate, timeout=5.0, interval=0.02, what="condition"):
        """Poll predicate() until true; bounded by timeout. Returns last value."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = predicate()
            if last:
                return last
            if time.monotonic() >= deadline:
                raise AssertionError("timed out after %.1f s waiting for %s (last=%r)" % (timeout, what, last))
            time.sleep(interval)

    def metric(self, name):
        """One value from /metrics."""
        st, _, text = self.request("GET", "/metrics")
        if st != 200:
            raise AssertionError("GET /metrics -> %d" % st)
        return parse_metrics(text)[name]

    def waiters(self, name, client=None):
        st, _, body = (client or self.client).get_lock(name)
        if st != 200:
            raise AssertionError("GET /v1/locks/%s -> %d %r" % (name, st, body))
        return body["waiters"]


def _cleanup_all():
    with _live_lock:
        servers = list(_live_servers)
    for s in servers:
        try:
            s.cleanup()
        except Exception:
            pass


# atexit runs the last registered first: the servers stop before their etcd does.
atexit.register(_stop_etcd)
atexit.register(_cleanup_all)


def _on_sigterm(signum, frame):
    _cleanup_all()
    sys.exit(128 + signum)


try:
    signal.signal(signal.SIGTERM, _on_sigterm)
except ValueError:  # not in main thread
    pass


# Server-Sent Events -----------------------------------------------------------
class EventStream:
    """One GET /v1/events/stream answer (or another stream: path) over its own HTTP/1.1
    connection, read message by message (Server-Sent Events)."""

    def __init__(self, port, query="", headers=None, timeout=10, path="/v1/events/stream"):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("GET", path + query, headers=headers or {})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.raw = []  # every line read

    def close(self):
        self.conn.close()

    def message(self):
        """The next message as a dict of its fields (comments and blank lines skipped),
        or None when the stream ended. A socket timeout raises."""
        fields = {}
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.decode("utf-8")
            self.raw.append(line)
            line = line.rstrip("\r\n")
            if not line:
                if fields:
                    return fields
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            # Several data lines are one data, joined by line feeds (the SSE standard).
            fields[name] = fields[name] + "\n" + value if name == "data" and name in fields else value

    def event(self):
        """The next event message (id + JSON data), skipping the retry hint."""
        while True:
            m = self.message()
            if m is None or "data" in m:
                return m if m is None else dict(m, data=json.loads(m["data"]))


# Raw-socket helpers ----------------------------------------------------------
def raw_http(port, data, timeout=10.0, read_until_close=False, host="127.0.0.1"):
    """Send raw bytes on a fresh connection; return (status, headers, body_bytes)."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_response(s, timeout=timeout)
    finally:
        s.close()


class RawReader:
    """Reads HTTP/1.1 responses from a socket, keeping bytes that belong to the next one
    (so pipelined responses on one connection can be read one after the other)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def read_response(self, timeout=10.0):
        """One response (Content-Length, chunked or until close): (status, headers, body)."""
        deadline = time.monotonic() + timeout
        sock = self.sock

        def more():
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("response not complete in time")
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            self.buf += chunk
            return chunk

        while b"\r\n\r\n" not in self.buf:
            if not more():
                raise ConnectionError("connection closed before response headers (got %r)" % self.buf[:200])
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if status in (100, 101, 102, 103):
            return self.read_response(max(0.001, deadline - time.monotonic()))
        if "content-length" in headers:
            n = int(headers["content-length"])
            while len(self.buf) < n:
                if not more():
                    break
            body, self.buf = self.buf[:n], self.buf[n:]
            return status, headers, body
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                while b"\r\n" not in self.buf:
                    if not more():
                        return status, headers, body
                size_line, _, self.buf = self.buf.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(self.buf) < size + 2:
                    if not more():
                        return status, headers, body + self.buf
                body += self.buf[:size]
                self.buf = self.buf[size + 2:]
                if size == 0:
                    return status, headers, body
        while more():
            pass
        body, self.buf = self.buf, b""
        return status, headers, body


def read_response(sock, timeout=10.0):
    """Read one HTTP/1.1 response from a fresh reader (use RawReader for several)."""
    return RawReader(sock).read_response(timeout)


def find_key(obj, key):
    """True when `key` appears as an object key anywhere inside obj."""
    if isinstance(obj, dict):
        return key in obj or any(find_key(v, key) for v in obj.values())
    if isinstance(obj, list):
        return any(find_key(v, key) for v in obj)
    return False


def random_lease():
    return str(uuid.uuid4())


def run_tests():
    """unittest.main wrapper: exit non-zero on failure; cleans servers up."""
    import unittest
    try:
        unittest.main(verbosity=2)
    finally:
        _cleanup_all()
