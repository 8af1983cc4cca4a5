"""What a call does, without doing any I/O: shared by the blocking and the asyncio client.

Each operation is a generator that yields the steps it needs, Attempt (one HTTP
request) or Pause (a backoff), and is sent back what came of each: for an Attempt a
transport.Response, or the exception (one of transport.NETWORK_ERRORS) raised when
no answer came. It returns its result (StopIteration.value) or raises the call's
error. run() in client.py drives one with blocking I/O and time.sleep, arun() in
aio.py with asyncio, so both clients retry, fail over, back off and give up alike.

Every call goes to one of the configured servers. A connection failure, a timeout,
an answer that does not begin within the first-byte timeout from a server whose
/readyz does not say it is ready (transport.py), or a 503 moves on to the next server, and a whole round of failures backs off
before the next one, until the call's time is up. A certificate that fails
verification is not tried again: when no other server is left, the call raises
TLSVerificationError at once. Any other answer is final.
"""

import json
import random
import time
import urllib.parse

from .errors import LeasegateError, LockHeld, Overloaded, TLSVerificationError, Unavailable, error_from_answer
from .transport import Response, describe_failure, is_tls_failure

MAX_POLL = 3600.0  # the server's largest wait_ms, in seconds; longer waits poll again
MIN_ATTEMPT = 0.05  # no request gets a shorter timeout, even at its call's end
COURTESY_TIMEOUT = 1.0  # per server, for the release of a lease already lost
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 1.0  # after each round of failures, doubling


class Attempt:
    """One request: endpoint.request(method, path, payload, headers, timeout, first_byte)."""
    __slots__ = ("endpoint", "method", "path", "payload", "headers", "timeout", "first_byte")

    def __init__(self, endpoint, method, path, payload, headers, timeout, first_byte=None):
        self.endpoint, self.method, self.path = endpoint, method, path
        self.payload, self.headers, self.timeout = payload, headers, timeout
        self.first_byte = first_byte


class Pause:
    """Sleep this many seconds, then go on."""
    __slots__ = ("seconds",)

    def __init__(self, seconds):
        self.seconds = seconds


def quote(name):
    """A lock or resource name as a path: its characters ([A-Za-z0-9._~:/-]) stay as
    they are; anything else is percent-encoded, for the server to refuse by name."""
    return urllib.parse.quote(name, safe="/:~")


# What each kind of name is called in the API's paths, and an election's own words for
# an acquire and a release.
COLLECTIONS = {"lock": "locks", "semaphore": "semaphores", "election": "elections"}
ELECTION_ACTIONS = {"acquire": "campaign", "release": "resign"}


def lock_path(name, action, kind="lock"):
    """The path of an action ("acquire", "renew", "release"...) on a lock, a semaphore or
    an election (kind), in that kind's words."""
    if kind == "election":
        action = ELECTION_ACTIONS.get(action, action)
    return "/v1/%s/%s/%s" % (COLLECTIONS[kind], quote(name), action)


def call(client, method, path, body=None, *, until, wait_until=None, hard=False):
    """Sends until some server answers other than 503; returns (endpoint, parsed
    answer, monotonic time the successful attempt was sent) or raises the error of
    the answer, Unavailable, or TLSVerificationError.

    client: a ClientCore (its _endpoints, _current, timeout and _auth are used).
    until: no new attempt starts after it, once every server was tried.
    wait_until: a long-polling acquire; each attempt waits what is left of it.
    hard: no answer is awaited past `until` either (a renewal is useless later).
    """
    endpoints = client._endpoints
    count = len(endpoints)
    failures = []  # of attempts without a final answer, latest last
    untrusted = {}  # index -> why its certificate failed: never tried again in this call
    tried = 0
    while True:
        index = client._current % count
        if index in untrusted:
            client._current = index + 1
            continue
        endpoint = endpoints[index]
        sent = time.monotonic()
        timeout = client.timeout
        payload = None
        if body is not None:
            if wait_until is not None:
                wait = max(0.0, wait_until - sent)
                body = dict(body, wait_ms=int(wait * 1000))
                timeout += wait
            payload = json.dumps(body).encode("utf-8")
        if hard:
            timeout = min(timeout, until - sent)
        headers = dict(client._auth)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        outcome = yield Attempt(endpoint, method, path, payload, headers, max(timeout, MIN_ATTEMPT),
                                client.first_byte_timeout)
        if isinstance(outcome, Response):
            answer = _parse(outcome)
            if outcome.status < 300:
                client._current = index
                return endpoint, answer, sent
            error = error_from_answer(outcome.status, answer)
            if not isinstance(error, Overloaded):
                raise error
            failures.append(error)
        elif is_tls_failure(outcome):
            untrusted[index] = describe_failure(endpoint, outcome)
            if len(untrusted) == count:
                raise tls_error(list(untrusted.values())) from outcome
            client._current = index + 1
            continue  # to the next server at once: not a round's failure to back off from
        else:
            failures.append(describe_failure(endpoint, outcome))
        client._current = index + 1
        tried += 1
        live = count - len(untrusted)
        left = until - time.monotonic()
        if tried >= live and left <= 0:
            last = failures[-1]
            if isinstance(last, LeasegateError):
                raise last
            raise unavailable(list(untrusted.values()) + failures[-live:])
        if tried % live == 0:
            backoff = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (tried // live - 1))
            yield Pause(min(left, backoff * random.uniform(0.5, 1.0)))


def acquire(client, name, ttl_ms, wait_s, body, kind="lock"):
    """Long-polls for the lock (or permits of the semaphore, or the election's
    leadership), for up to wait_s seconds (in polls of at most MAX_POLL); returns
    (endpoint, grant, the monotonic time the first attempt was sent). Raises LockHeld
    (SemaphoreFull, NotLeader) when not granted in time."""
    path = lock_path(name, "acquire", kind)
    start = time.monotonic()
    wait_until = start + wait_s
    until = start + max(wait_s, client.retry_for)
    while True:
        poll_until = min(wait_until, time.monotonic() + MAX_POLL)
        try:
            endpoint, grant, _ = yield from call(client, "POST", path, body, until=until, wait_until=poll_until)
            return endpoint, grant, start
        except LockHeld:
            if poll_until >= wait_until:
                raise


def confirm(client, name, grant, start, kind="lock"):
    """The moment that bounds a grant from below: when its acquire was first sent, or,
    for a grant that came long after that (a wait in the queue, retries), when a
    renewal was sent, since the grant was made at an unknown moment in between. On
    failure releases the grant as a courtesy and raises."""
    if time.monotonic() - start <= grant["ttl_ms"] / 3000.0:
        return start
    try:
        return (yield from call(client, "POST", lock_path(name, "renew", kind), {"lease": grant["lease"]},
                                until=time.monotonic() + client.retry_for))[2]
    except LeasegateError:
        yield from courtesy_release(client, name, grant["lease"], kind)
        raise


def courtesy_release(client, name, lease_id, kind="lock"):
    """One short release attempt per server, errors ignored: for a lease that may
    already be gone, where the server frees the lock at its TTL anyway."""
    payload = json.dumps({"lease": lease_id}).encode("utf-8")
    headers = dict(client._auth, **{"Content-Type": "application/json"})
    for endpoint in client._endpoints:
        outcome = yield Attempt(endpoint, "POST", lock_path(name, "release", kind), payload, headers,
                                min(client.timeout, COURTESY_TIMEOUT), client.first_byte_timeout)
        if isinstance(outcome, Response) and outcome.status != 503:
            return


def tls_error(failures):
    return TLSVerificationError("certificate verification failed: " + "; ".join(failures))


def unavailable(failures):
    return Unavailable("no leasegate server answered: " + "; ".join(str(f) for f in failures))


def _parse(resp):
    """The JSON of an answer, or for an error answer that is not JSON, its text."""
    try:
        return resp.json()
    except ValueError:
        if resp.status < 300:
            raise LeasegateError("HTTP %d with a body that is not JSON: %r" % (resp.status, resp.body[:200]),
                                 resp.status) from None
        return resp.text
