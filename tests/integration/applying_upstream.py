"""An object store behind the guard that records what it APPLIES, in order.

The guard's promise is about what a backend applies, not what leasegate hands on, so
the tests of write order need a backend that tells the two apart:

* PUT/DELETE: the whole request is read (Content-Length or chunked). Only a complete
  request is applied; one whose connection ends before its body does is counted in
  `incomplete` and never applied (as any HTTP server does).
* `X-Apply-Delay-Ms: N` on a request: the store waits N ms before it applies it (a slow
  disk), then answers 201/204. The delay happens before the answer: the backend applies
  a write before it answers it, the one assumption the guard documents.
* GET returns the object (404 when absent).

Every applied write is recorded as a dict {path, token, lock, body, method}; every
request's head as {method, path, headers} in `seen` (header names lower-case), so tests
can check what crossed the guard. Keep-alive connections are served request after
request. Only 127.0.0.1; every wait is bounded.
"""

import socket
import threading
import time


class ApplyingUpstream:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d/" % self.port
        self.lock = threading.RLock()  # predicates of wait_for may call the accessors
        self.applied = []
        self.seen = []
        self.incomplete = 0
        self.objects = {}
        self.in_apply = 0
        self.max_in_apply = 0
        self._stop = threading.Event()
        self._threads = []
        t = threading.Thread(target=self._accept_loop, daemon=True)
        t.start()
        self._threads.append(t)

    # -- server ----------------------------------------------------------------
    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            t.start()

    def _recv(self, c, buf):
        while not self._stop.is_set():
            try:
                chunk = c.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return None
            return chunk
        return None

    def _read_until(self, c, buf, marker):
        while marker not in buf:
            chunk = self._recv(c, buf)
            if not chunk:
                return None
            buf += chunk
        return buf

    def _read_body(self, c, buf, headers):
        """(body, rest of buf) or (None, _) when the connection ended first."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                buf = self._read_until(c, buf, b"\r\n")
                if buf is None:
                    return None, b""
                line, _, buf = buf.partition(b"\r\n")
                size = int(line.split(b";")[0], 16)
                while len(buf) < size + 2:
                    chunk = self._recv(c, buf)
                    if not chunk:
                        return None, b""
                    buf += chunk
                body += buf[:size]
                buf = buf[size + 2:]
                if size == 0:
                    return body, buf
        n = int(headers.get("content-length", "0"))
        while len(buf) < n:
            chunk = self._recv(c, buf)
            if not chunk:
                return None, b""
            buf += chunk
        return buf[:n], buf[n:]

    def _serve(self, c):
        c.settimeout(0.2)
        buf = b""
        try:
            while not self._stop.is_set():
                buf = self._read_until(c, buf, b"\r\n\r\n")
                if buf is None:
                    return
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split()[0], lines[0].split()[1]
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                with self.lock:
                    self.seen.append({"method": method, "path": path, "headers": headers})
                body, buf = self._read_body(c, buf, headers)
                if body is None:
                    with self.lock:
                        self.incomplete += 1
                    return
                if method in ("PUT", "DELETE", "POST", "PATCH"):
                    status = self._apply(method, path, headers, body)
                    c.sendall(b"HTTP/1.1 %d X\r\nContent-Length: 0\r\nX-Upstream: applying\r\n\r\n" % status)
                else:
                    with self.lock:
                        obj = self.objects.get(path)
                    if obj is None:
                        c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nX-Upstream: applying\r\n\r\n")
                    else:
                        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Upstream: applying\r\n\r\n"
                                  % len(obj) + obj)
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def _apply(self, method, path, headers, body):
        delay = int(headers.get("x-apply-delay-ms", "0"))
        with self.lock:
            self.in_apply += 1
            self.max_in_apply = max(self.max_in_apply, self.in_apply)
        try:
            if delay:
                self._stop.wait(min(delay, 30000) / 1000.0)
            with self.lock:
                existed = path in self.objects
                if method == "DELETE":
                    self.objects.pop(path, None)
                else:
                    self.objects[path] = body
                self.applied.append({"method": method, "path": path, "body": body,
                                     "token": headers.get("fencing-token"), "lock": headers.get("fencing-lock")})
        finally:
            with self.lock:
                self.in_apply -= 1
        return 204 if existed or method == "DELETE" else 201

    # -- observations ----------------------------------------------------------
    def applied_to(self, path):
        with self.lock:
            return [a for a in self.applied if a["path"] == path]

    def seen_for(self, path):
        with self.lock:
            return [s for s in self.seen if s["path"] == path]

    def wait_for(self, predicate, timeout=10.0, what="condition"):
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                ok = predicate(self)
            if ok:
                return
            if time.monotonic() >= deadline:
                raise AssertionError("upstream: timed out waiting for %s" % what)
            time.sleep(0.01)

    def close(self):
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
