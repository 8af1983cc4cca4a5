"""Fence checks in front of a storage backend's writes: WSGI and ASGI middleware.

A backend that applies writes sent by lock holders puts one of these in front of its
application. Reads (GET, HEAD, OPTIONS) pass. A write must carry its fencing token in
the ``Fencing-Token`` header (decimal digits: the guard proxy sets it; a client sends
``lease.token``), which is checked against the highest token its resource has seen:

- 409 ``stale_token`` (with ``max_token``) when it is older: the application never sees
  the request;
- 428 ``token_required`` when there is none, 400 ``bad_request`` when it is not a token;
- 503 ``fence_unavailable`` (``Retry-After: 1``) when the check could not be made.

Two ways to keep the marks:

- ``ServerFence(client)`` / ``AsyncServerFence(async_client)`` ask leasegate,
  ``POST /v1/fence/{resource}``: durable marks, shared by every replica of the backend,
  and a token that was never issued is refused (400).
- ``LocalFence()`` keeps them in this process: no round trip, for a backend that is one
  process; they start from nothing when it restarts.

A check is only as good as the order of the writes it admits: writes with tokens 5 and
6 may both pass (5 first) and then be applied 6 first, 5 second. So by default the
middleware lets one write per resource run at a time, first come first served, from
before its check until the application is done with it (for WSGI, until the response
iterable is closed; for ASGI, until the application returns). Within one process,
writes to a resource are then applied in token order. Replicas serialize nothing
between them: there the store's own precondition must decide (docs/fencing.md).

The resource is the request path without its leading "/" (``/files/a.csv`` is
``files/a.csv``), after ``prefix`` (which keeps one backend's resources apart from
another's on a shared server), or what ``resource(environ)`` / ``resource(scope)``
returns (None: refused with 400). An admitted write's token is in
``environ["leasegate.fence_token"]`` (WSGI) or ``scope["leasegate.fence_token"]`` (ASGI),
an int.
"""

import asyncio
import inspect
import json
import threading

from .errors import LeasegateError, StaleToken, Unavailable

TOKEN_HEADER = "Fencing-Token"
READS = frozenset(("GET", "HEAD", "OPTIONS"))
MAX_TOKEN = 2 ** 64 - 1


class LocalFence:
    """The highest token accepted per resource, in this process (thread-safe)."""

    def __init__(self):
        self._marks = {}
        self._lock = threading.Lock()

    def check(self, resource, token):
        """(accepted, max_token): accepted when token >= the mark, which it then becomes."""
        with self._lock:
            mark = self._marks.get(resource, 0)
            if token >= mark:
                self._marks[resource] = token
                return True, token
            return False, mark

    def mark(self, resource):
        """The highest token accepted for the resource, 0 when none was."""
        with self._lock:
            return self._marks.get(resource, 0)


class ServerFence:
    """The marks kept by leasegate: each check is client.fence(resource, token) (a
    blocking Client: retries and failover are its own)."""

    def __init__(self, client):
        self.client = client

    def check(self, resource, token):
        try:
            return True, self.client.fence(resource, token)["max_token"]
        except StaleToken as e:
            return False, e.body.get("max_token")


class AsyncServerFence:
    """ServerFence for asyncio, with an AsyncClient."""

    def __init__(self, client):
        self.client = client

    async def check(self, resource, token):
        try:
            return True, (await self.client.fence(resource, token))["max_token"]
        except StaleToken as e:
            return False, e.body.get("max_token")


def parse_token(value):
    """A token from a header's text: int, or raises ValueError."""
    text = value.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise ValueError("%s: %r is not a fencing token (decimal digits)" % (TOKEN_HEADER, value[:40]))
    token = int(text)
    if not 1 <= token <= MAX_TOKEN:
        raise ValueError("%s: %s is not a token (1..2^64-1)" % (TOKEN_HEADER, text))
    return token


def path_resource(path, prefix=""):
    """The resource a path writes: the path without its leading "/", after prefix."""
    path = path.lstrip("/")
    return prefix + path if path else None


class Refusal(Exception):
    """A write the middleware answers itself: status and JSON body."""

    def __init__(self, status, body):
        super().__init__(body.get("message"))
        self.status = status
        self.body = body

    def payload(self):
        # Tokens as JSON numbers, exact at any size (json writes Python ints exactly).
        return json.dumps(self.body).encode("utf-8")

    def headers(self):
        extra = [("Retry-After", "1")] if self.status == 503 else []
        return [("Content-Type", "application/json"), ("Content-Length", str(len(self.payload())))] + extra


def _error(code, message, **fields):
    return dict(error=code, message=message, **fields)


def _admission(header, resource):
    """The token of a write, or raises Refusal before any check."""
    if not header:
        raise Refusal(428, _error("token_required", "a write needs its fencing token in the %s header" % TOKEN_HEADER,
                                  field=TOKEN_HEADER))
    try:
        token = parse_token(header)
    except ValueError as e:
        raise Refusal(400, _error("bad_request", str(e), field=TOKEN_HEADER)) from None
    if not resource:
        raise Refusal(400, _error("bad_request", "this path names no resource to fence"))
    return token


def _decided(resource, token, outcome=None, error=None):
    """The refusal for a check's outcome (accepted, max) or its error, or None when accepted."""
    if error is not None:
        if isinstance(error, Unavailable):
            return Refusal(503, _error("fence_unavailable", "the fence check could not be made: %s" % error,
                                       resource=resource))
        status = error.status if error.status and 400 <= error.status < 500 else 502
        body = dict(error.body) if isinstance(error.body, dict) and error.body.get("error") else \
            _error("fence_unavailable", str(error))
        body["resource"] = resource
        return Refusal(status, body)
    accepted, mark = outcome
    if accepted:
        return None
    return Refusal(409, _error("stale_token", "token %d is older than %s, which %s has seen" % (token, mark, resource),
                               resource=resource, token=token, max_token=mark))


class _Turns:
    """One write per resource at a time, first come first served: a lock per resource,
    kept while someone uses or waits for it."""

    def __init__(self, make_lock):
        self._make_lock = make_lock
        self._slots = {}  # resource -> [lock, users]
        self._guard = threading.Lock()

    def join(self, resource):
        with self._guard:
            slot = self._slots.setdefault(resource, [self._make_lock(), 0])
            slot[1] += 1
            return slot[0]

    def leave(self, resource):
        with self._guard:
            slot = self._slots[resource]
            slot[1] -= 1
            if slot[1] == 0:
                del self._slots[resource]

    def busy(self):
        """Resources with a write running or waiting."""
        with self._guard:
            return len(self._slots)

    def users(self, resource):
        """Writes to the resource running or waiting."""
        with self._guard:
            return self._slots.get(resource, [None, 0])[1]


class _FairLock:
    """A lock that hands itself to its waiters in arrival order (threading.Lock does not
    promise an order)."""

    def __init__(self):
        self._guard = threading.Lock()
        self._held = False
        self._queue = []

    def acquire(self):
        with self._guard:
            if not self._held and not self._queue:
                self._held = True
                return
            turn = threading.Event()
            self._queue.append(turn)
        turn.wait()  # release() set _held for us and woke us

    def release(self):
        with self._guard:
            if self._queue:
                self._queue.pop(0).set()
            else:
                self._held = False


class FenceMiddleware:
    """WSGI middleware: ``app = FenceMiddleware(app, ServerFence(client))``.

    check: LocalFence(), ServerFence(client), or any object with check(resource, token)
        -> (accepted, max_token).
    resource: environ -> the resource a write changes (default: PATH_INFO, see
        path_resource); prefix: put before the default resource's name.
    serialize: False to admit concurrent writes to one resource.
    """

    def __init__(self, app, check, *, resource=None, prefix="", serialize=True):
        self.app = app
        self.check = check
        self.resource = resource or (lambda environ: path_resource(environ.get("PATH_INFO", ""), prefix))
        self.turns = _Turns(_FairLock) if serialize else None

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD", "GET") in READS:
            return self.app(environ, start_response)
        resource = self.resource(environ)
        try:
            token = _admission(environ.get("HTTP_FENCING_TOKEN"), resource)
        except Refusal as refusal:
            return self._refuse(refusal, start_response)
        lock = self.turns.join(resource) if self.turns is not None else None
        if lock is not None:
            lock.acquire()

        def leave():
            if lock is not None:
                lock.release()
                self.turns.leave(resource)

        try:
            try:
                refusal = _decided(resource, token, outcome=self.check.check(resource, token))
            except LeasegateError as e:
                refusal = _decided(resource, token, error=e)
            if refusal is not None:
                leave()
                return self._refuse(refusal, start_response)
            environ["leasegate.fence_token"] = token
            result = self.app(environ, start_response)
        except BaseException:
            leave()
            raise
        return _ClosingIterable(result, leave)

    @staticmethod
    def _refuse(refusal, start_response):
        start_response("%d %s" % (refusal.status, _REASONS.get(refusal.status, "Error")), refusal.headers())
        return [refusal.payload()]


class _ClosingIterable:
    """A WSGI response that runs `done` once, when the server closes it (the write's end)."""

    def __init__(self, result, done):
        self._result = result
        self._done = done

    def __iter__(self):
        return iter(self._result)

    def close(self):
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


class AsyncFenceMiddleware:
    """ASGI middleware: ``app = AsyncFenceMiddleware(app, AsyncServerFence(async_client))``.

    check: LocalFence(), AsyncServerFence(client), or any object whose check(resource,
        token) returns (accepted, max_token) or an awaitable of it.
    resource: scope -> the resource (default: scope["path"], see path_resource);
    prefix, serialize: as for FenceMiddleware. One instance serves one event loop.
    """

    def __init__(self, app, check, *, resource=None, prefix="", serialize=True):
        self.app = app
        self.check = check
        self.resource = resource or (lambda scope: path_resource(scope.get("path", ""), prefix))
        self.turns = _Turns(asyncio.Lock) if serialize else None  # asyncio.Lock wakes waiters in FIFO order

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method", "GET") in READS:
            return await self.app(scope, receive, send)
        resource = self.resource(scope)
        header = None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"fencing-token":
                header = value.decode("latin-1")
        try:
            token = _admission(header, resource)
        except Refusal as refusal:
            return await self._refuse(refusal, send)
        lock = self.turns.join(resource) if self.turns is not None else None
        try:
            if lock is not None:
                await lock.acquire()
            try:
                try:
                    outcome = self.check.check(resource, token)
                    if inspect.isawaitable(outcome):
                        outcome = await outcome
                    refusal = _decided(resource, token, outcome=outcome)
                except LeasegateError as e:
                    refusal = _decided(resource, token, error=e)
                if refusal is not None:
                    return await self._refuse(refusal, send)
                await self.app(dict(scope, **{"leasegate.fence_token": token}), receive, send)
            finally:
                if lock is not None:
                    lock.release()
        finally:
            if lock is not None:
                self.turns.leave(resource)

    @staticmethod
    async def _refuse(refusal, send):
        await send({"type": "http.response.start", "status": refusal.status,
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in refusal.headers()]})
        await send({"type": "http.response.body", "body": refusal.payload()})


_REASONS = {400: "Bad Request", 409: "Conflict", 428: "Precondition Required", 502: "Bad Gateway",
            503: "Service Unavailable"}
