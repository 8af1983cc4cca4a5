"""Following an election: GET /v1/elections/NAME/observe, Server-Sent Events.

Each event is yielded as a dict: {"event": "leader", "id": ..., "owner", "term",
"value"} for every new leader or proclaimed value, {"event": "vacant", "id": ...,
"reason": "resigned" | "expired" | "revoked" | None, "previous_term"} whenever nobody
leads. The first is the election's state when the stream opened (unless it resumes).

A stream that ends (the server stops, the connection is cut, nothing came for
SILENCE seconds, though the server sends a comment every 15 s) is opened again, on
the same server or the next, with Last-Event-ID: the id of the last event yielded,
so none is yielded twice or missed. When the server no longer keeps the events
missed (410, or a too_old event), the stream goes on from the election's state, with
a warning logged. No server answering for retry_for (the client's by default) raises
Unavailable; pass the last event's id as last_event_id to a new observe() to resume.

Observation holds what the blocking loop (observe() here) and the asyncio one
(aio.AsyncClient.observe) share: the resume point, the parser and the failover.
"""

import json
import logging
import random
import time

from . import plan
from .durations import seconds
from .errors import error_from_answer
from .transport import NETWORK_ERRORS, describe_failure

log = logging.getLogger("leasegate")

SILENCE = 45.0  # seconds without a byte (the server's keep-alive is every 15 s): the stream is dead
READ_SIZE = 64 * 1024
MAX_LINE = 1024 * 1024  # a line of the stream; an event's data is far smaller
MAX_ERROR_BODY = 64 * 1024


class Observation:
    """One observe(): the resume point, the stream's parser, the failover."""

    def __init__(self, client, name, last_event_id, retry_for):
        self.client = client
        self.path = "/v1/elections/%s/observe" % plan.quote(name)
        self.name = name
        self.last_id = None if last_event_id is None else str(last_event_id)
        self.retry_for = client.retry_for if retry_for is None else seconds(retry_for, "retry_for")
        self.failures = []
        self.failing_since = None
        self.tried = 0
        self._reset_message()
        self.buffer = b""
        self.restart = False

    def endpoint(self):
        endpoints = self.client._endpoints
        return endpoints[self.client._current % len(endpoints)]

    def headers(self):
        headers = dict(self.client._auth, Accept="text/event-stream")
        if self.last_id is not None:
            headers["Last-Event-ID"] = self.last_id
        return headers

    def answered(self, status, body):
        """A non-200 answer: returns the seconds to pause before the next try (503: the
        next server; 410: at once, from the state), or raises the answer's error."""
        if status == 410:
            self._restart()
            return 0.0
        error = error_from_answer(status, _parse(body))
        if status != 503:
            raise error
        return self.failed(self.endpoint(), error)

    def opened(self):
        """A 200: the stream is open."""
        self.failures, self.failing_since, self.tried = [], None, 0
        self.client._current %= len(self.client._endpoints)
        self.buffer = b""
        self._reset_message()

    def feed(self, data):
        """The events complete in data (bytes as they came), as dicts; the resume point
        moves past each one returned."""
        self.buffer += data
        events = []
        while True:
            end = self.buffer.find(b"\n")
            if end < 0:
                if len(self.buffer) > MAX_LINE:
                    raise error_from_answer(502, {"error": "bad_gateway",
                                                  "message": "a line of the observe stream is too long"})
                return events
            line = self.buffer[:end].rstrip(b"\r").decode("utf-8", "replace")
            self.buffer = self.buffer[end + 1:]
            event = self._line(line)
            if event is not None:
                events.append(event)

    def ended(self):
        """The stream ended: open it again (from the state, after a too_old)."""
        if self.restart:
            self.restart = False
            self._restart()

    def failed(self, endpoint, error):
        """No answer (or 503) from endpoint: returns the seconds to pause before the next
        server, or raises Unavailable once none answered for retry_for."""
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        self.failures.append(error if not isinstance(error, NETWORK_ERRORS) else describe_failure(endpoint, error))
        self.client._current += 1
        self.tried += 1
        count = len(self.client._endpoints)
        if self.tried % count:
            return 0.0
        if now - self.failing_since >= self.retry_for:
            raise plan.unavailable(self.failures[-count:])
        backoff = min(plan.BACKOFF_MAX, plan.BACKOFF_FIRST * 2 ** (self.tried // count - 1))
        return backoff * random.uniform(0.5, 1.0)

    def _restart(self):
        log.warning("observe %r: the events after %s are no longer kept; going on from the election's state",
                    self.name, self.last_id)
        self.last_id = None

    def _reset_message(self):
        self.event, self.data, self.id = None, None, None

    def _line(self, line):
        if line == "":
            event, data, ident = self.event, self.data, self.id
            self._reset_message()
            if event is None and data is None:
                return None
            return self._message(event, data, ident)
        if line.startswith(":"):
            return None  # a comment: the keep-alive
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self.event = value
        elif field == "data":
            self.data = value if self.data is None else self.data + "\n" + value
        elif field == "id":
            self.id = value
        return None

    def _message(self, event, data, ident):
        if event == "too_old":
            self.restart = True
            return None
        if event == "unauthorized":
            body = _parse(data or "")
            raise error_from_answer(403 if isinstance(body, dict) and body.get("error") == "forbidden" else 401, body)
        if event not in ("leader", "vacant"):
            return None
        fields = json.loads(data or "{}")
        if ident is not None:
            self.last_id = ident
        return dict({"event": event, "id": ident}, **fields)


def _parse(body):
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        return json.loads(body)
    except ValueError:
        return body


def observe(client, name, last_event_id=None, retry_for=None):
    """The blocking client's observe (see the module's docstring): a generator; closing
    it (or leaving the loop) closes the stream's connection."""
    o = Observation(client, name, last_event_id, retry_for)
    while True:
        endpoint = o.endpoint()
        conn = endpoint._connection(client.first_byte_timeout)
        pause, resp = 0.0, None
        try:
            conn.connect()
            conn.sock.settimeout(max(client.timeout, client.first_byte_timeout))
            conn.request("GET", endpoint.prefix + o.path, headers=o.headers())
            resp = conn.getresponse()
            if resp.status != 200:
                pause = o.answered(resp.status, resp.read(MAX_ERROR_BODY))
            else:
                o.opened()
                conn.sock.settimeout(SILENCE)
                while True:
                    data = resp.read1(READ_SIZE)
                    if not data:
                        break
                    yield from o.feed(data)
                o.ended()
                pause = plan.BACKOFF_FIRST  # a server that ends streams at once is not asked in a tight loop
        except NETWORK_ERRORS as e:
            pause = o.failed(endpoint, e)
        finally:
            if resp is not None:
                resp.close()  # its file holds the socket open past conn.close()
            conn.close()
        if pause:
            time.sleep(pause)
