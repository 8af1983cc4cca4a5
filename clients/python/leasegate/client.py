"""The blocking client: acquire (long-poll), lock (with a watchdog), semaphore
permits (acquire_permit, semaphore), elections (campaign, leadership, election,
observe), a lock's value (value; lease.set_value), status, list, fence.

ClientCore holds what the blocking Client and aio.AsyncClient share: the servers,
the owner label, the limits and the key. How a call retries and fails over is in
plan.py, the same for both.
"""

import os
import socket
import ssl
import time
import urllib.parse
import uuid

from . import observe as observing
from . import plan
from .blocking import run
from .durations import millis, seconds
from .lease import Lease, LockBlock
from .transport import Endpoint

DEFAULT_SERVER = "http://127.0.0.1:7400"


class ClientCore:
    """What both clients are configured with (see Client)."""

    def __init__(self, servers=None, *, owner=None, timeout="5s", retry_for="5s", cafile=None, key=None,
                 first_byte_timeout="2s"):
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
        self.first_byte_timeout = seconds(first_byte_timeout, "first_byte_timeout")
        if self.first_byte_timeout < 0.1:
            raise ValueError("first_byte_timeout: at least 100ms, not %r" % (first_byte_timeout,))
        key = key or os.environ.get("LEASEGATE_KEY") or None
        self._auth = {"Authorization": "Bearer " + key} if key else {}

    @property
    def servers(self):
        return [e.url for e in self._endpoints]

    def _acquire_plan(self, name, ttl, wait, owner, metadata, mode="write", lock_delay=None, limit=None, permits=1,
                      election=False, value=None):
        """The plan of an acquire of a lock (in `mode`, with a lock_delay), with a
        limit of a semaphore's permits, or of an election's leadership (a campaign
        with its value): (endpoint, grant, send time of its first attempt). One
        request_id goes with every attempt, so a retry whose predecessor's answer was
        lost gets that grant back instead of lock_held."""
        body = {"owner": owner or self.owner, "ttl_ms": millis(ttl, "ttl"), "request_id": uuid.uuid4().hex}
        wait_s = seconds(wait, "wait")
        if metadata is not None:
            body["metadata"] = metadata
        if election:
            body["value"] = value
            return plan.acquire(self, name, body["ttl_ms"], wait_s, body, "election")
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError("limit: expected an int, got %r" % (limit,))
            if not 1 <= limit <= 10000:
                raise ValueError("limit: the number of permits is 1..10000, not %d" % limit)
            if isinstance(permits, bool) or not isinstance(permits, int):
                raise TypeError("permits: expected an int, got %r" % (permits,))
            if not 1 <= permits <= limit:
                raise ValueError("permits: 1..limit (%d), not %d" % (limit, permits))
            body["limit"] = limit
            if permits != 1:  # the default: a server older than permits takes this acquire too
                body["permits"] = permits
        else:
            if mode not in ("write", "read"):
                raise ValueError('mode: "write" (exclusive) or "read" (shared), not %r' % (mode,))
            if mode == "read":
                body["mode"] = "read"
            if lock_delay is not None:
                body["lock_delay_ms"] = millis(lock_delay, "lock_delay")
        return plan.acquire(self, name, body["ttl_ms"], wait_s, body, "semaphore" if limit is not None else "lock")

    def _status_plan(self, name, kind="lock"):
        return plan.call(self, "GET", "/v1/%s/%s" % (plan.COLLECTIONS[kind], plan.quote(name)),
                         until=self._retry_until())

    def _value_plan(self, name):
        return plan.call(self, "GET", plan.lock_path(name, "value"), until=self._retry_until())

    def _page_plan(self, prefix, after, page_size, semaphores=False):
        query = {"prefix": prefix, "limit": page_size}
        if after is not None:
            query["after"] = after
        return plan.call(self, "GET", "/v1/%s?%s" % ("semaphores" if semaphores else "locks",
                                                     urllib.parse.urlencode(query)), until=self._retry_until())

    def _fence_plan(self, resource, token):
        if isinstance(token, str) and token.isascii() and token.isdigit():
            token = int(token)  # as leasegate run hands it over, in $LEASEGATE_TOKEN
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError("token: expected an int or a decimal string, got %r" % (token,))
        return plan.call(self, "POST", "/v1/fence/" + plan.quote(resource), {"token": token},
                         until=self._retry_until())

    def _retry_until(self):
        return time.monotonic() + self.retry_for


class Client(ClientCore):
    """A leasegate client that blocks; thread-safe, one per process is enough.
    (aio.AsyncClient is the same for asyncio.)

    servers: a URL, a comma-separated string of URLs, or a list of them (all
        serving the same lock space); default $LEASEGATE_SERVER, else
        http://127.0.0.1:7400.
    owner: the label other clients see on locks taken here (default host-pid).
    timeout: how long one request may take beyond its long-poll wait.
    retry_for: how long a call keeps retrying failed requests; an acquire keeps
        retrying for its wait when that is longer.
    cafile: a PEM file of the CAs that https servers' certificates must be signed
        by (for a private CA); default $LEASEGATE_CACERT, else the system's CAs.
        Certificates and names are always verified; a failure raises
        TLSVerificationError at once.
    key: the API key for a server run with --auth-file (sent as Authorization:
        Bearer KEY); default $LEASEGATE_KEY, else none.
    first_byte_timeout: a server that has not accepted the connection, or not
        begun its answer, within this (default 2s) is asked GET /readyz; unless it
        says it is ready (then a long-poll is waiting there, and the wait goes on),
        the request moves on to the next server. A paused or unready gateway so
        costs about twice this, not the whole timeout.

    Durations are strings with a unit ("250ms", "15s", "2m", "1h", "1.5s") or a
    datetime.timedelta; a bare number raises ValueError (see durations.py).
    """

    def acquire(self, name, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None, keep_alive=False,
                mode="write", lock_delay=None):
        """Takes the lock `name`, waiting up to `wait` in its FIFO queue; returns a Lease.

        ttl: how long the lease lasts unless renewed. keep_alive: start the watchdog,
        which renews at a third of the TTL until release() (client.lock does this).
        on_lost(error): called once, from the thread that noticed, when the lease is
        lost. mode: "write" (exclusive, the default) or "read" (shared with other
        readers; the guard refuses a read lease's writes). lock_delay: a duration
        (at most 60s): when this lease is lost (expires, force-released), nobody is
        granted the lock until that long after. Raises LockHeld when not granted
        within `wait`, Unavailable when no server answered in time.
        """
        endpoint, grant, start = run(self._acquire_plan(name, ttl, wait, owner, metadata, mode, lock_delay))
        sent = run(plan.confirm(self, name, grant, start))
        lease = Lease(self, endpoint, grant, sent, on_lost)
        return lease.keep_alive() if keep_alive else lease

    def acquire_permit(self, name, *, limit, permits=1, ttl="30s", wait="0s", owner=None, metadata=None,
                       on_lost=None, keep_alive=False):
        """Takes `permits` (1 by default, at most `limit`) of the `limit` permits of the
        semaphore `name` in one lease, waiting up to `wait` in its FIFO queue (a request
        at the head is not passed by later ones, even smaller); returns a Lease
        (``lease.semaphore`` is True, ``lease.permits`` how many it holds) with its own
        token, renewed and released like a lock's, all its permits at once. Permits
        whose holder stops renewing come back at its TTL. Raises SemaphoreFull (a
        LockHeld) when not granted within `wait`, LimitMismatch when the semaphore has
        holders or waiters under another limit.
        """
        endpoint, grant, start = run(self._acquire_plan(name, ttl, wait, owner, metadata, limit=limit,
                                                        permits=permits))
        sent = run(plan.confirm(self, name, grant, start, "semaphore"))
        lease = Lease(self, endpoint, grant, sent, on_lost, "semaphore")
        return lease.keep_alive() if keep_alive else lease

    def semaphore(self, name, *, limit, permits=1, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None):
        """``with client.semaphore("crawl/slots", limit=10, wait="1m") as permit:``

        As lock(), for `permits` of the `limit` permits of a semaphore (acquire_permit).
        """
        return LockBlock(self, name, {"limit": limit, "permits": permits, "ttl": ttl, "wait": wait, "owner": owner,
                                      "metadata": metadata, "on_lost": on_lost}, self.acquire_permit)

    def campaign(self, name, value=None, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None,
                 keep_alive=False):
        """Campaigns to lead the election `name` with `value` (any JSON-serializable
        value: what GET and observers show of the leader, such as its address), waiting
        up to `wait` behind the candidates before it; returns the leader's Lease
        (``lease.term`` = ``lease.token``, its fencing token; ``lease.value``), renewed as
        a lock's, with proclaim(value) and resign(). Raises NotLeader (a LockHeld) when
        not elected within `wait`. A campaign is never answered a leadership it did not
        get: one whose connection ends leaves the queue.
        """
        endpoint, grant, start = run(self._acquire_plan(name, ttl, wait, owner, metadata, election=True,
                                                        value=value))
        sent = run(plan.confirm(self, name, grant, start, "election"))
        lease = Lease(self, endpoint, grant, sent, on_lost, "election")
        return lease.keep_alive() if keep_alive else lease

    def leadership(self, name, value=None, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None):
        """``with client.leadership("scheduler", {"url": ...}, wait="1m") as leader:``

        As lock(), for the leadership of an election (campaign): the block runs as its
        leader, the watchdog renewing, and the leader resigns at its end; LeaseLost
        when leadership was lost while it ran (check ``leader.valid`` before steps that
        need it, or fence writes with ``leader.term``).
        """
        return LockBlock(self, name, {"value": value, "ttl": ttl, "wait": wait, "owner": owner,
                                      "metadata": metadata, "on_lost": on_lost}, self.campaign)

    def election(self, name):
        """The election's state: {name, leader: {owner, term, value, since_ms} or None,
        vacant_since_ms, candidates: [{owner, since_ms}], last_token, index}."""
        return run(self._status_plan(name, "election"))[1]

    def observe(self, name, *, last_event_id=None, retry_for=None):
        """``for event in client.observe("scheduler"):`` the election's new leaders,
        proclaimed values and vacancies as dicts, {"event": "leader", "id", "owner",
        "term", "value"} and {"event": "vacant", "id", "reason", "previous_term"}, the
        first being the state now (or, with last_event_id, the events after it). Across
        cut connections and failovers none is yielded twice or missed (observe.py).
        Raises Unavailable when no server answered for retry_for (the client's by
        default), NotFound when the server keeps no events (--events-keep 0)."""
        return observing.observe(self, name, last_event_id, retry_for)

    def value(self, name):
        """The lock's value: {name, value, value_version, value_token} (value None and
        value_version 0 when never written)."""
        return run(self._value_plan(name))[1]

    def lock(self, name, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None, mode="write",
             lock_delay=None):
        """``with client.lock("orders/42", ttl="15s", wait="1m") as lease:``

        Acquires (see acquire), keeps the lease alive with the watchdog while the
        block runs, and releases at its end. If the lease was lost meanwhile
        (``lease.valid`` turned False and on_lost was called), the block ends with
        LeaseLost, raised on exit: the block is not interrupted, so check
        ``lease.valid`` or call ``lease.check()`` before steps that need the lock.
        (A block ended by KeyboardInterrupt or SystemExit ends with that instead.)
        mode and lock_delay: as for acquire().
        """
        return LockBlock(self, name, {"ttl": ttl, "wait": wait, "owner": owner, "metadata": metadata,
                                      "on_lost": on_lost, "mode": mode, "lock_delay": lock_delay})

    def status(self, name):
        """The lock's state: {name, held, mode, holder, holders, waiters, last_token,
        delay_until_ms...} (never a lease id)."""
        return run(self._status_plan(name))[1]

    def semaphore_status(self, name):
        """The semaphore's state: {name, limit, holders, holders_total, available,
        waiters, last_token...} (never a lease id)."""
        return run(self._status_plan(name, "semaphore"))[1]

    def list(self, prefix="", *, after=None, page_size=100, semaphores=False):
        """Yields the state of every lock (with semaphores=True, every semaphore) the
        server knows whose name starts with `prefix`, in name order, fetching
        `page_size` at a time."""
        while True:
            page = run(self._page_plan(prefix, after, page_size, semaphores))[1]
            yield from page["semaphores" if semaphores else "locks"]
            after = page.get("next")
            if after is None:
                return

    def fence(self, resource, token):
        """Checks `token` (an int, or its decimal string) against the resource's high-water mark; returns
        {resource, accepted, max_token} or raises StaleToken."""
        return run(self._fence_plan(resource, token))[1]
