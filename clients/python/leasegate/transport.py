"""One HTTP request to one server, blocking, with the standard library's http.client.

A fresh connection per request: the watchdog thread and the caller's thread never
share one, a server that restarted leaves no dead keep-alive connection behind, and
http.client (unlike urllib) ignores *_proxy variables, which must not reroute
traffic to a lock service. aiotransport.py is the asyncio twin of Endpoint.request.

The first-byte watch (the client's first_byte_timeout): a server that has not
accepted the connection within it is given up; one that has not begun its answer
within it is asked GET /readyz (a connection of its own, the same bound). Ready, it
is working on the request (a long-poll waits for its grant; a commit is slow) and the
wait goes on, to be asked again a first_byte_timeout later; not ready (503) or silent
(paused, stopped, cut off), the attempt is given up like one that timed out, and the
call moves on to the next server (an acquire with its request_id, so a grant made
meanwhile is given back, not doubled). A server without /readyz (404) counts as ready.
"""

import http.client
import json
import select
import socket
import ssl
import time
import urllib.parse

from .errors import error_from_answer

# What a request raises when no answer came: refused, reset, timed out, cut short,
# or a certificate that failed verification (ssl.SSLCertVerificationError, an OSError).
NETWORK_ERRORS = (OSError, http.client.HTTPException)

# What the CLI says after a failed verification (src/cli/cli_http.c), with our option.
TLS_HINT = "a server whose certificate a private CA signed needs cafile=PEM or $LEASEGATE_CACERT"


def is_tls_failure(error):
    """True for a certificate that failed verification: a failure no retry fixes."""
    return isinstance(error, ssl.SSLCertVerificationError)


def describe_failure(endpoint, error):
    """One line for an attempt that got no answer: the server, what happened, and for
    a certificate failure what to do about it."""
    text = "%s: %s" % (endpoint, str(error) or type(error).__name__)
    return text + " (%s)" % TLS_HINT if is_tls_failure(error) else text


class Response:
    """An answer: status, headers (a dict with lower-case names) and body (bytes)."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def ok(self):
        return 200 <= self.status < 300

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def raise_for_status(self):
        """Raises the LeasegateError subclass named by the answer's error code
        (StaleToken, TokenRequired...) unless the status is 2xx; returns self."""
        if not self.ok:
            raise error_from_answer(self.status, self._error_body())
        return self

    def _error_body(self):
        try:
            return self.json()
        except ValueError:
            return self.text

    def __repr__(self):
        return "<Response %d, %d bytes>" % (self.status, len(self.body))


class Stalled(TimeoutError):
    """No answer began within the first-byte timeout, and the server's /readyz did not
    say it is ready: the attempt is given up (an OSError: one of NETWORK_ERRORS)."""


class Endpoint:
    """One server, from its base URL (http or https; a path prefix is kept). An https
    server's certificate is verified with ssl_context (default: the system's CAs)."""

    def __init__(self, url, ssl_context=None):
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) server URL: %r" % url)
        self.url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self.https = parts.scheme == "https"
        self.ssl_context = (ssl_context or ssl.create_default_context()) if self.https else None
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.host_header = parts.netloc.rpartition("@")[2]
        self.prefix = parts.path.rstrip("/")

    def _connection(self, timeout):
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=10.0, first_byte=None):
        """Sends one request (body: bytes or None) and reads the whole answer; raises
        one of NETWORK_ERRORS when no answer came within `timeout` seconds (per
        socket operation; with first_byte, the answer must also begin within
        `timeout` of the start, /readyz probes included: a renewal's bound is hard),
        or, with first_byte (seconds), when the connection was not made within it,
        or the answer did not begin within it and /readyz did not say the server is
        ready (Stalled; see the module's docstring)."""
        deadline = time.monotonic() + timeout
        conn = self._connection(min(timeout, first_byte) if first_byte else timeout)
        try:
            conn.connect()
            conn.sock.settimeout(timeout)
            conn.request(method, self.prefix + path, body=body, headers=headers or {})
            if first_byte:
                self._await_first_byte(conn.sock, first_byte, deadline)
                conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def _await_first_byte(self, sock, first_byte, deadline):
        """Returns once the answer's first bytes are readable on sock; raises
        socket.timeout at the deadline without them (not later: a renewal's deadline
        is its lease's bound, and a loss must be told by then), and Stalled when a
        first_byte passes without them and the server does not say it is ready (a
        /readyz probe that is itself bounded by the deadline)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("%s: no answer within the request's time" % self.url)
            if select.select([sock], [], [], min(first_byte, left))[0]:
                return
            left = deadline - time.monotonic()
            if left > 0 and not self.ready(min(first_byte, left)):
                raise Stalled("%s: no answer within %gs, and /readyz did not say it is ready" % (self.url, first_byte))

    def ready(self, timeout):
        """Whether GET /readyz answers within timeout, other than 503 (a server without
        /readyz answers 404: it runs)."""
        conn = self._connection(timeout)
        try:
            conn.request("GET", self.prefix + "/readyz")
            resp = conn.getresponse()
            resp.read()
            return resp.status != 503
        except NETWORK_ERRORS:
            return False
        finally:
            conn.close()

    def __repr__(self):
        return self.url

