"""A granted lease: its renewal (by hand or by the watchdog thread), its loss, its release.

The client cannot see the server's clock, so it bounds the lease with its own
monotonic clock: a lease is trusted until ``ttl`` after the moment the last
successful renewal (or the acquire) was *sent*. The server started counting later
than that, so the client always gives up first, never after the server.

LeaseCore holds that bound and decides renewals, losses and releases as plans
(plan.py); Lease runs them blocking with a watchdog thread, aio.AsyncLease with
asyncio and a watchdog task, so both lose and release a lease alike.
"""

import logging
import threading
import time
import uuid

from . import plan
from .blocking import run
from .durations import millis, seconds
from .errors import LeasegateError, LeaseLost, NotHolder, NotLeader
from .transport import NETWORK_ERRORS, describe_failure, is_tls_failure

log = logging.getLogger("leasegate")


class LeaseCore:
    """One grant of a lock, permits of a semaphore, or the leadership of an election:
    what Lease and AsyncLease share.

    kind: "lock", "semaphore" or "election".
    name, owner, metadata: as granted.
    mode: "write" or "read" for a lock; None otherwise.
    semaphore: True for permits of a semaphore (limit: its number of permits;
        permits: how many of them this lease holds).
    value: a lock's value when it was granted (what the last writer left; None when
        none), then as set_value() wrote it; an election's: the leader's value, as
        campaigned or proclaimed. value_version: a lock's value's version (0: never
        written), the if_version of a read-modify-write; None otherwise.
    term: an election's term (the leader's fencing token, = token); None otherwise.
    lease: the lease id, the secret that renews, releases and writes through the guard.
    token: the fencing token (an int that only grows across grants).
    ttl: the lease's time-to-live in seconds, as the server last confirmed it.
    server: base URL of the server that granted it (guarded requests go there).
    lost: None, or the LeaseLost error once the lease was lost.
    """

    def __init__(self, client, endpoint, grant, sent, on_lost=None, kind="lock"):
        self._client = client
        self._endpoint = endpoint
        self.kind = kind
        self.semaphore = kind == "semaphore"
        self.mode = grant.get("mode", "write") if kind == "lock" else None
        self.limit = grant.get("limit") if self.semaphore else None
        self.permits = grant.get("permits", 1) if self.semaphore else None
        self.value = grant.get("value") if kind != "semaphore" else None
        self.value_version = grant.get("value_version", 0) if kind == "lock" else None
        self.term = grant.get("term", grant["token"]) if kind == "election" else None
        self.name = grant["name"]
        self.owner = grant["owner"]
        self.lease = grant["lease"]
        self.token = grant["token"]
        self.metadata = grant.get("metadata", {})
        self.ttl = grant["ttl_ms"] / 1000.0
        self.lost = None
        self._on_lost = on_lost
        self._deadline = sent + self.ttl
        self._state = threading.Lock()  # guards _deadline, lost, _ending (the watchdog thread shares them)
        self._ending = False  # release() began: a renewal failing now is no loss

    @property
    def server(self):
        return self._endpoint.url

    @property
    def headers(self):
        """Headers that prove this lease to the guard: add them to a write under a
        guarded prefix (the guard drops them before forwarding)."""
        return {"Fencing-Lease": self.lease}

    @property
    def valid(self):
        """True while the client can vouch that the server still holds this lease: not
        released, not lost, and within the TTL since the last successful renewal was sent."""
        with self._state:
            return not self._ending and self.lost is None and time.monotonic() < self._deadline

    def check(self):
        """Raises LeaseLost unless the lease is valid: call it before work that must
        not run unprotected (writes through the guard are checked there anyway)."""
        if not self.valid:
            self._lose_by_deadline()
            raise self._lost_error()

    # Plans, run by the subclasses ---------------------------------------------
    def _renew_plan(self, ttl):
        body = {"lease": self.lease}
        if ttl is not None:
            body["ttl_ms"] = millis(ttl, "ttl")
        try:
            _, answer, sent = yield from plan.call(self._client, "POST",
                                                   plan.lock_path(self.name, "renew", self.kind), body,
                                                   until=self._deadline, hard=True)
        except NotHolder as e:
            self._lose("the server says the lease on %r no longer holds it (%s)"
                       % (self.name, e.body.get("reason", e.message)), e)
        except LeasegateError as e:
            if e.status not in (None, 503):
                raise
            self._lose("no renewal of the lease on %r succeeded within its TTL (%s)" % (self.name, e), e)
        else:
            with self._state:
                renewed = self.lost is None and time.monotonic() < self._deadline
                if renewed:
                    self.ttl = answer["ttl_ms"] / 1000.0
                    self._deadline = sent + self.ttl
            if renewed:
                return
            self._lose_by_deadline()
        raise self._lost_error()

    def _release_plan(self):
        with self._state:
            if self._ending:
                return
            self._ending = True
            trusted = self.lost is None and time.monotonic() < self._deadline
        self._stop_watchdog()
        if not trusted:
            yield from plan.courtesy_release(self._client, self.name, self.lease, self.kind)
            return
        try:
            yield from plan.call(self._client, "POST", plan.lock_path(self.name, "release", self.kind),
                                 {"lease": self.lease}, until=time.monotonic() + self._client.retry_for)
        except (NotHolder, NotLeader) as e:  # an election's resign answers not_leader
            if e.body.get("reason") == "released":  # a retry after a release whose answer was lost
                return
            self._lose("the lease on %r had ended before its release (%s)" % (self.name, e.body.get("reason")),
                       e, ending=True)
            raise self._lost_error()

    def _set_value_plan(self, value, if_version):
        if self.kind != "lock":
            raise TypeError("set_value: a lock's value; this is a lease of %s %r" % (self._kind_article(), self.name))
        # One request_id for every attempt: a retry whose first answer was lost is
        # answered with that write's version, not written again.
        body = {"lease": self.lease, "value": value, "request_id": uuid.uuid4().hex}
        if if_version is not None:
            if isinstance(if_version, bool) or not isinstance(if_version, int):
                raise TypeError("if_version: expected an int, got %r" % (if_version,))
            body["if_version"] = if_version
        _, answer, _ = yield from plan.call(self._client, "PUT", plan.lock_path(self.name, "value"), body,
                                            until=time.monotonic() + self._client.retry_for)
        self.value, self.value_version = value, answer["value_version"]
        return answer

    def _proclaim_plan(self, value):
        if self.kind != "election":
            raise TypeError("proclaim: an election's leader proclaims; this is a lease of %s %r"
                            % (self._kind_article(), self.name))
        _, answer, _ = yield from plan.call(self._client, "POST", plan.lock_path(self.name, "proclaim", "election"),
                                            {"lease": self.lease, "value": value},
                                            until=time.monotonic() + self._client.retry_for)
        self.value = value
        return answer

    def _kind_article(self):
        return {"lock": "a lock", "semaphore": "a semaphore", "election": "an election"}[self.kind]

    def _end_of_block_plan(self, interrupted):
        """The end of a lock block: release, and raise LeaseLost if the lease was lost
        while the block ran (the block's own exception, if any, is kept as its
        context). interrupted: the block ends with a BaseException that is not an
        Exception (KeyboardInterrupt, SystemExit, asyncio.CancelledError), which must
        go on as it is: the loss is then only recorded (lease.lost, on_lost)."""
        if not self.valid:
            self._lose_by_deadline()
        try:
            yield from self._release_plan()
        except LeaseLost:
            pass
        except LeasegateError as e:
            # The work is done and the server frees the lock at its TTL: not the
            # caller's failure, but worth knowing.
            log.warning("release of the lease on %r failed: %s", self.name, e)
        if self.lost is not None and not interrupted:
            raise self._lost_error()

    # What the subclasses provide ------------------------------------------------
    def _stop_watchdog(self):
        raise NotImplementedError

    def _notify(self, error):
        """Calls on_lost(error), once, from whoever noticed the loss."""
        if self._on_lost is None:
            return
        try:
            self._on_lost(error)
        except Exception:
            log.exception("on_lost callback for the lease on %r failed", self.name)

    # Internals --------------------------------------------------------------
    def _request_args(self, data, headers, timeout):
        """(body bytes, headers, timeout in seconds) of a request carrying this lease."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        headers = {**(headers or {}), **self._client._auth, **self.headers}
        return data, headers, seconds(timeout, "timeout") if timeout is not None else self._client.timeout

    def _unreachable(self, error):
        """The error for a request carrying this lease that got no answer."""
        failure = describe_failure(self.server, error)
        return plan.tls_error([failure]) if is_tls_failure(error) else plan.unavailable([failure])

    def _renewal_due_in(self):
        """Seconds until a third of the TTL has passed since the last renewal was sent."""
        with self._state:
            return max(0.0, self._deadline - self.ttl * 2 / 3 - time.monotonic())

    def _lost_error(self):
        """A fresh LeaseLost to raise (the recorded one went to on_lost), or, for a
        lease released by its holder, one that says so."""
        if self.lost is None:
            return LeaseLost("the lease on %r was released" % self.name, self)
        error = LeaseLost(self.lost.message, self)
        error.__cause__ = self.lost.__cause__
        return error

    def _lose_by_deadline(self):
        self._lose("no renewal of the lease on %r succeeded within its TTL" % self.name, None)

    def _lose(self, message, cause, ending=False):
        """Records the loss once and calls on_lost once. Ignored once release() began
        (unless release itself found it): a renewal racing a release is no loss."""
        error = LeaseLost(message, self)
        error.__cause__ = cause
        with self._state:
            if self.lost is not None or (self._ending and not ending):
                return
            self.lost = error
        self._stop_watchdog()
        self._notify(error)

    def __repr__(self):
        return "<%s %s token=%d %s>" % (type(self).__name__, self.name, self.token,
                                        "valid" if self.valid else "not valid")


class Lease(LeaseCore):
    """A lease of the blocking Client; the watchdog is a daemon thread."""

    def __init__(self, client, endpoint, grant, sent, on_lost=None, kind="lock"):
        super().__init__(client, endpoint, grant, sent, on_lost, kind)
        self._stop = threading.Event()
        self._watchdog = None

    def renew(self, ttl=None):
        """Extends the lease by its TTL (or by `ttl`, which then becomes its TTL).

        Connection failures and 503 are retried on the next server until the lease
        would expire. Raises LeaseLost (after calling on_lost) when the server
        answers not_holder or no renewal succeeds in time; other errors (BadRequest
        for a bad ttl) are raised as they are.
        """
        run(self._renew_plan(ttl))

    def release(self):
        """Gives the lock back and stops the watchdog; a second call does nothing.

        A lease already lost gets one short try per server, errors ignored: the
        server frees the lock at its TTL anyway, and an exit must not hang on a dead
        server. Raises LeaseLost when the server says the lease had already ended
        (expired or superseded), and Unavailable when no server answered in time.
        """
        run(self._release_plan())

    def resign(self):
        """An election's leader steps down (release() under the election's name for it):
        the next candidate leads at once, and observers see the vacancy."""
        run(self._release_plan())

    def set_value(self, value, *, if_version=None):
        """Writes the lock's value (any JSON-serializable value; None clears it), which
        only the lock's writer can, now; returns {name, value_version, token} and updates
        lease.value and lease.value_version. if_version: write only if the value is at
        that version now (a read-modify-write: lease.value_version after the grant).

        Raises StaleToken when this lease does not hold the lock as its writer now
        (nothing changed), VersionMismatch for another version, PayloadTooLarge past the
        server's --max-value-bytes. A write whose answer was lost is sent again (to the
        next server) with the same request_id, chosen once per call: the server answers
        the retry with the first write's version and writes nothing again (it keeps the
        last write's request_id with the value, across restarts and failovers).
        """
        return run(self._set_value_plan(value, if_version))

    def proclaim(self, value):
        """An election's leader replaces its value (what GET and observers show);
        returns {name, term, value}. Raises NotLeader when this lease does not lead now."""
        return run(self._proclaim_plan(value))

    def request(self, method, path, data=None, headers=None, timeout=None):
        """Sends a request carrying this lease to the server that granted it: a write
        through the guard, e.g. ``lease.request("PUT", "/store/orders/42", b"...")``.

        data: bytes, str (sent as UTF-8) or None. timeout: a duration (default the
        client's). Returns a Response for every status; ``response.raise_for_status()``
        raises StaleToken, TokenRequired... Raises Unavailable (TLSVerificationError for
        a certificate that failed verification) when no answer came. Not retried: a
        write is the caller's call.
        """
        data, headers, timeout = self._request_args(data, headers, timeout)
        try:
            return self._endpoint.request(method, path, data, headers, timeout=timeout)
        except NETWORK_ERRORS as e:
            raise self._unreachable(e) from e

    def keep_alive(self):
        """Starts the watchdog, a daemon thread that renews at a third of the TTL until
        release() or loss (acquire(keep_alive=True) calls it); returns the lease. A
        second call does nothing."""
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="leasegate-watchdog %s" % self.name,
                                              daemon=True)
            self._watchdog.start()
        return self

    def _end_of_block(self, interrupted):
        run(self._end_of_block_plan(interrupted))

    def _stop_watchdog(self):
        self._stop.set()

    def _watch(self):
        while not self._stop.wait(self._renewal_due_in()):
            try:
                self.renew()
            except LeaseLost:
                return
            except LeasegateError as e:
                self._lose("the lease on %r cannot be renewed: %s" % (self.name, e), e)
                return


class LockBlock:
    """``with client.lock(...) as lease:`` (see Client.lock) and ``with
    client.semaphore(...) as permit:`` (see Client.semaphore)."""

    def __init__(self, client, name, options, acquire=None):
        self._client, self._name, self._options = client, name, options
        self._acquire = acquire or client.acquire
        self._lease = None

    def __enter__(self):
        self._lease = self._acquire(self._name, keep_alive=True, **self._options)
        return self._lease

    def __exit__(self, exc_type, exc, tb):
        self._lease._end_of_block(exc_type is not None and not issubclass(exc_type, Exception))
        return False
