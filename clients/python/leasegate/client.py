"""The client: acquire (long-poll), lock (with a watchdog), status, list, fence.

Every call goes to one of the configured servers. A connection failure, a timeout
or a 503 moves on to the next server, and a whole round of failures backs off
before the next one, until the call's time is up. Any other answer is final.
"""

import contextlib
import json
import os
import random
import socket
import ssl
import time
import urllib.parse
import uuid

from .durations import millis, seconds
from .errors import LeasegateError, LockHeld, Overloaded, Unavailable, error_from_answer
from .lease import Lease
from .transport import NETWORK_ERRORS, Endpoint

DEFAULT_SERVER = "http://127.0.0.1:7400"
MAX_POLL = 3600.0  # the server's largest wait_ms; longer waits poll again
MIN_ATTEMPT = 0.05  # no request gets a shorter timeout, even at its call's end
COURTESY_TIMEOUT = 1.0  # per server, for the release of a lease already lost
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 1.0  # after each round of failures, doubling


class Client:
    """A leasegate client; thread-safe, one per process is enough.

    servers: a URL, a comma-separated string of URLs, or a list of them (all
        serving the same lock space); default $LEASEGATE_SERVER, else
        http://127.0.0.1:7400.
    owner: the label other clients see on locks taken here (default host-pid).
    timeout: how long one request may take beyond its long-poll wait.
    retry_for: how long a call keeps retrying failed requests; an acquire keeps
        retrying for its wait when that is longer.
    cafile: a PEM file of the CAs that https servers' certificates must be signed
        by (for a private CA); default $LEASEGATE_CACERT, else the system's CAs.
        Certificates and names are always verified.
    key: the API key for a server run with --auth-file (sent as Authorization:
        Bearer KEY); default $LEASEGATE_KEY, else none.

    Durations are "250ms", "15s", "2m", "1h", a number of seconds or a timedelta.
    """

    def __init__(self, servers=None, *, owner=None, timeout="5s", retry_for="5s", cafile=None, key=None):
        if servers is None:
            servers = os.environ.get("LEASEGATE_SERVER") or DEFAULT_SERVER
        if isinstance(servers, str):
            servers = servers.split(",")
        cafile = cafile or os.environ.get("LEASEGATE_CACERT") or None
        context = ssl.create_default_context(cafile=cafile)  # verifies certificates and host names
        self._endpoints = [Endpoint(url, context) for url in servers if url.strip()]
        if not self._endpoints:
            raise ValueError("no server URL given")
        self._current = 0  # the server that answered last; calls start there
        self.owner = owner or ("%s-%d" % (socket.gethostname(), os.getpid()))[:128]
        self.timeout = seconds(timeout, "timeout")
        self.retry_for = seconds(retry_for, "retry_for")
        key = key or os.environ.get("LEASEGATE_KEY") or None
        self._auth = {"Authorization": "Bearer " + key} if key else {}

    @property
    def servers(self):
        return [e.url for e in self._endpoints]

    def acquire(self, name, *, ttl="30s", wait=0, owner=None, metadata=None, on_lost=None, keep_alive=False):
        """Takes the lock `name`, waiting up to `wait` in its FIFO queue; returns a Lease.

        ttl: how long the lease lasts unless renewed. keep_alive: start the watchdog,
        which renews at a third of the TTL until release() (client.lock does this).
        on_lost(error): called once, from the thread that noticed, when the lease is
        lost. Raises LockHeld when not granted within `wait`, Unavailable when no
        server answered in time.

        One request_id is sent with every attempt of this acquire, so a retry whose
        predecessor's answer was lost gets that grant back instead of lock_held.
        """
        ttl_s = seconds(ttl, "ttl")
        wait_s = seconds(wait, "wait")
        body = {"owner": owner or self.owner, "ttl_ms": millis(ttl_s), "request_id": uuid.uuid4().hex}
        if metadata is not None:
            body["metadata"] = metadata
        path = self._lock_path(name, "acquire")
        start = time.monotonic()
        wait_until = start + wait_s
        until = start + max(wait_s, self.retry_for)
        while True:
            poll_until = min(wait_until, time.monotonic() + MAX_POLL)
            try:
                endpoint, grant, _ = self._call("POST", path, body, until=until, wait_until=poll_until)
                break
            except LockHeld:
                if poll_until >= wait_until:
                    raise
        sent = start  # any attempt may have made the grant: the first was sent first
        if time.monotonic() - sent > grant["ttl_ms"] / 3000.0:
            sent = self._confirm(name, grant)
        lease = Lease(self, endpoint, grant, sent, on_lost)
        return lease.keep_alive() if keep_alive else lease

    @contextlib.contextmanager
    def lock(self, name, *, ttl="30s", wait=0, owner=None, metadata=None, on_lost=None):
        """``with client.lock("orders/42", ttl="15s", wait="1m") as lease:``

        Acquires (see acquire), keeps the lease alive with the watchdog while the
        block runs, and releases at its end. If the lease was lost meanwhile
        (``lease.valid`` turned False and on_lost was called), the block ends with
        LeaseLost, raised on exit: the block is not interrupted, so check
        ``lease.valid`` or call ``lease.check()`` before steps that need the lock.
        """
        lease = self.acquire(name, ttl=ttl, wait=wait, owner=owner, metadata=metadata, on_lost=on_lost,
                             keep_alive=True)
        try:
            yield lease
        finally:
            lease._end_of_block()

    def status(self, name):
        """The lock's state: {name, held, holder, waiters, last_token} (never a lease id)."""
        return self._call("GET", "/v1/locks/" + _quote(name), until=self._retry_until())[1]

    def list(self, prefix="", *, after=None, page_size=100):
        """Yields the state of every lock the server knows whose name starts with
        `prefix`, in name order, fetching `page_size` at a time."""
        while True:
            query = {"prefix": prefix, "limit": page_size}
            if after is not None:
                query["after"] = after
            page = self._call("GET", "/v1/locks?" + urllib.parse.urlencode(query), until=self._retry_until())[1]
            yield from page["locks"]
            after = page.get("next")
            if after is None:
                return

    def fence(self, resource, token):
        """Checks `token` against the resource's high-water mark; returns
        {resource, accepted, max_token} or raises StaleToken."""
        return self._call("POST", "/v1/fence/" + _quote(resource), {"token": token}, until=self._retry_until())[1]

    # Used by Lease ------------------------------------------------------------
    @staticmethod
    def _lock_path(name, action):
        return "/v1/locks/%s/%s" % (_quote(name), action)

    def _call(self, method, path, body=None, *, until, wait_until=None, hard=False):
        """Sends until some server answers other than 503; returns (endpoint, parsed
        answer, monotonic time the successful attempt was sent) or raises the error
        of the answer.

        until: no new attempt starts after it, once every server was tried.
        wait_until: a long-polling acquire; each attempt waits what is left of it.
        hard: no answer is awaited past `until` either (a renewal is useless later).
        """
        failures = []
        tried = 0
        count = len(self._endpoints)
        while True:
            index = self._current % count
            endpoint = self._endpoints[index]
            sent = time.monotonic()
            timeout = self.timeout
            payload = None
            if body is not None:
                if wait_until is not None:
                    wait = max(0.0, wait_until - sent)
                    body = dict(body, wait_ms=int(wait * 1000))
                    timeout += wait
                payload = json.dumps(body).encode("utf-8")
            if hard:
                timeout = min(timeout, until - sent)
            headers = dict(self._auth)
            if payload is not None:
                headers["Content-Type"] = "application/json"
            try:
                resp = endpoint.request(method, path, payload, headers, timeout=max(timeout, MIN_ATTEMPT))
            except NETWORK_ERRORS as e:
                failures.append("%s: %s" % (endpoint, str(e) or type(e).__name__))
            else:
                answer = _parse(resp)
                if resp.status < 300:
                    self._current = index
                    return endpoint, answer, sent
                error = error_from_answer(resp.status, answer)
                if not isinstance(error, Overloaded):
                    raise error
                failures.append(error)
            self._current = index + 1
            tried += 1
            left = until - time.monotonic()
            if tried >= count and left <= 0:
                last = failures[-1]
                raise last if isinstance(last, LeasegateError) else self._unavailable(failures[-count:])
            if tried % count == 0:
                backoff = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (tried // count - 1))
                time.sleep(min(left, backoff * random.uniform(0.5, 1.0)))

    def _confirm(self, name, grant):
        """Renews a grant that came long after its acquire was sent (a wait in the
        queue, or retries): it was made at an unknown moment since, so only the send
        time of a renewal bounds it. Returns that time; on failure releases the grant
        as a courtesy and raises."""
        try:
            return self._call("POST", self._lock_path(name, "renew"), {"lease": grant["lease"]},
                              until=self._retry_until())[2]
        except LeasegateError:
            self._courtesy_release(name, grant["lease"])
            raise

    def _courtesy_release(self, name, lease_id):
        """One short release attempt per server, errors ignored: for a lease that may
        already be gone, where the server frees the lock at its TTL anyway."""
        payload = json.dumps({"lease": lease_id}).encode("utf-8")
        for endpoint in self._endpoints:
            try:
                resp = endpoint.request("POST", self._lock_path(name, "release"), payload,
                                        dict(self._auth, **{"Content-Type": "application/json"}),
                                        timeout=min(self.timeout, COURTESY_TIMEOUT))
            except NETWORK_ERRORS:
                continue
            if resp.status != 503:
                return

    def _unavailable(self, failures):
        return Unavailable("no leasegate server answered: " + "; ".join(str(f) for f in failures))

    def _retry_until(self):
        return time.monotonic() + self.retry_for


def _quote(name):
    """A lock or resource name as a path: its characters ([A-Za-z0-9._~:/-]) stay as
    they are; anything else is percent-encoded, for the server to refuse by name."""
    return urllib.parse.quote(name, safe="/:~")


def _parse(resp):
    """The JSON of an answer, or for an error answer that is not JSON, its text."""
    try:
        return resp.json()
    except ValueError:
        if resp.status < 300:
            raise LeasegateError("HTTP %d with a body that is not JSON: %r" % (resp.status, resp.body[:200]),
                                 resp.status) from None
        return resp.text
