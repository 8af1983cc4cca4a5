"""One HTTP request to one server, blocking, with the standard library's http.client.

A fresh connection per request: the watchdog thread and the caller's thread never
share one, a server that restarted leaves no dead keep-alive connection behind, and
http.client (unlike urllib) ignores *_proxy variables, which must not reroute
traffic to a lock service. aiotransport.py is the asyncio twin of Endpoint.request.
"""

import http.client
import json
import ssl
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

    def request(self, method, path, body=None, headers=None, timeout=10.0):
        """Sends one request (body: bytes or None) and reads the whole answer; raises
        one of NETWORK_ERRORS when no answer came within `timeout` seconds (per
        socket operation)."""
        if self.https:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, self.prefix + path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def __repr__(self):
        return self.url

