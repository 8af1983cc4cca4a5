"""One HTTP/1.1 request to one server over asyncio streams: the twin of
Endpoint.request for the asyncio client.

Why not http.client in a thread: a thread cannot be cancelled. A cancelled task's
long-poll would stay in the lock's queue until its wait ran out, and a grant it got
meanwhile would be held by nobody until its TTL. Here cancelling the task closes the
connection at once: the server drops the waiter, and a grant it could not deliver is
released (DESIGN.md, long-polling).

A fresh connection per request ("Connection: close"), as in the blocking client. The
answer is read whole: by Content-Length, chunked, or up to the server's close. The
first-byte watch is the blocking client's (transport.py): a connection not made within
first_byte is given up, and an answer not complete within it makes the client ask the
server's /readyz, again every first_byte, giving the attempt up unless it is ready.
Failures are raised as the blocking client's are (transport.NETWORK_ERRORS): OSError
(refused, reset, TimeoutError, ssl errors) or http.client.HTTPException (a malformed
or cut answer).
"""

import asyncio
import http.client

from .plan import Pause
from .transport import NETWORK_ERRORS, Response, Stalled

MAX_LINE = 64 * 1024  # one status or header line
MAX_HEADERS = 200
MAX_BODY = 64 * 1024 * 1024  # an answer larger than this is refused, not buffered


async def request(endpoint, method, path, body=None, headers=None, timeout=10.0, first_byte=None):
    """Sends one request (body: bytes or None) to `endpoint` (a transport.Endpoint)
    and reads the whole answer within `timeout` seconds, all of it; returns a Response.
    With first_byte (seconds), the first-byte watch (above) may raise Stalled.
    Cancelling the calling task closes the connection."""
    head = _head(endpoint, method, endpoint.prefix + path, body, headers or {})
    async with asyncio.timeout(timeout):
        connect = asyncio.open_connection(
            endpoint.host, endpoint.port, ssl=endpoint.ssl_context,
            server_hostname=endpoint.host if endpoint.https else None, limit=MAX_LINE)
        reader, writer = await (asyncio.wait_for(connect, first_byte) if first_byte else connect)
        try:
            writer.write(head + (body or b""))
            await writer.drain()
            answer = asyncio.ensure_future(_read_response(reader, method))
            try:
                while first_byte and not (await asyncio.wait({answer}, timeout=first_byte))[0]:
                    if not await ready(endpoint, first_byte):
                        raise Stalled("%s: no answer within %gs, and /readyz did not say it is ready"
                                      % (endpoint.url, first_byte))
                response = await answer
            finally:
                answer.cancel()  # a no-op once it is done
        except BaseException:
            writer.transport.abort()  # at once, even for TLS: nothing more is owed to this server
            raise
        writer.close()
        return response


async def open_stream(endpoint, path, headers, first_byte, timeout):
    """GET path as a stream (observe): returns (status, headers, reader, writer) once the
    answer's head came, within `timeout` (the connection within first_byte); the body
    is the caller's to read (body_chunks, read_body) and the connection to abort."""
    head = _head(endpoint, "GET", endpoint.prefix + path, None, headers)
    connect = asyncio.open_connection(endpoint.host, endpoint.port, ssl=endpoint.ssl_context,
                                      server_hostname=endpoint.host if endpoint.https else None, limit=MAX_LINE)
    reader, writer = await asyncio.wait_for(connect, first_byte)
    try:
        writer.write(head)
        async with asyncio.timeout(timeout):
            await writer.drain()
            status, answer_headers = await _read_head(reader)
    except BaseException:
        writer.transport.abort()
        raise
    return status, answer_headers, reader, writer


async def body_chunks(reader, headers, silence):
    """The body's bytes as they come (de-chunked), until its end; TimeoutError when
    nothing came for `silence` seconds."""
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    while True:
        if not chunked:
            data = await asyncio.wait_for(reader.read(64 * 1024), silence)
            if not data:
                return
            yield data
            continue
        size_text = (await asyncio.wait_for(_read_line(reader), silence)).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise http.client.HTTPException("bad chunk size: %r" % size_text[:40]) from None
        if size == 0:
            return
        yield await asyncio.wait_for(_read_exactly(reader, _bounded(size)), silence)
        if await asyncio.wait_for(_read_line(reader), silence):
            raise http.client.HTTPException("no CRLF after a chunk")


async def read_body(reader, headers, limit, timeout):
    """The whole body (of an error answer), at most `limit` bytes, within `timeout`."""
    body = b""
    async with asyncio.timeout(timeout):
        async for data in body_chunks(reader, headers, timeout):
            body += data
            if len(body) > limit:
                return body[:limit]
    return body


async def ready(endpoint, timeout):
    """Whether the server's GET /readyz answers within timeout, other than 503 (one
    without /readyz answers 404: it runs)."""
    try:
        return (await request(endpoint, "GET", "/readyz", timeout=timeout)).status != 503
    except NETWORK_ERRORS:
        return False


def _head(endpoint, method, target, body, headers):
    """The request line and headers, as bytes. A CR, LF or NUL in any of them (which
    would let a value forge a header) is refused with ValueError, as http.client does."""
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: " + endpoint.host_header, "Connection: close",
             "Accept-Encoding: identity"]
    if body is not None:
        lines.append("Content-Length: %d" % len(body))
    for name, value in headers.items():
        if name.lower() in ("host", "connection", "content-length", "transfer-encoding"):
            continue
        lines.append("%s: %s" % (name, value))
    if any(c <= " " or c == "\x7f" for c in method + target):
        raise ValueError("invalid character in the request line: %r" % lines[0][:100])
    for line in lines[1:]:
        if any(c in line for c in "\r\n\0"):
            raise ValueError("invalid character in a header: %r" % line[:100])
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_line(reader):
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise http.client.RemoteDisconnected("the server closed the connection without an answer") from None
        raise http.client.IncompleteRead(e.partial) from None
    except asyncio.LimitOverrunError:
        raise http.client.LineTooLong("status or header line") from None
    return line.rstrip(b"\r\n")


async def _read_head(reader):
    """The status and headers of the final answer (1xx ones skipped)."""
    while True:
        line = await _read_line(reader)
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
            raise http.client.BadStatusLine(line[:100].decode("latin-1"))
        status = int(parts[1])
        headers = await _read_headers(reader)
        if status >= 200:
            break
        if status == 101:
            raise http.client.HTTPException("unexpected 101 Switching Protocols")
        # 1xx interim answers (100 Continue, 103 Early Hints) precede the real one.
    return status, headers


async def _read_response(reader, method):
    status, headers = await _read_head(reader)
    if method == "HEAD" or status in (204, 304):
        return Response(status, headers, b"")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        length = headers["content-length"].strip()
        if not length.isdigit():
            raise http.client.HTTPException("bad Content-Length: %r" % length[:40])
        body = await _read_exactly(reader, _bounded(int(length)))
    else:
        body = await reader.read(MAX_BODY + 1)
        while len(body) <= MAX_BODY:
            more = await reader.read(MAX_BODY + 1 - len(body))
            if not more:
                break
            body += more
        _bounded(len(body))
    return Response(status, headers, body)


async def _read_headers(reader):
    """Headers up to the blank line, as a dict with lower-case names (the last of a
    repeated name wins, as in the blocking client)."""
    headers = {}
    for _ in range(MAX_HEADERS + 1):
        line = await _read_line(reader)
        if not line:
            return headers
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():
            raise http.client.HTTPException("malformed header line: %r" % line[:100])
        headers[name.lower()] = value.strip()
    raise http.client.HTTPException("more than %d header lines" % MAX_HEADERS)


async def _read_chunked(reader):
    body = bytearray()
    while True:
        size_text = (await _read_line(reader)).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise http.client.HTTPException("bad chunk size: %r" % size_text[:40]) from None
        if size == 0:
            while await _read_line(reader):  # trailers, up to the blank line
                pass
            return bytes(body)
        _bounded(len(body) + size)
        body += await _read_exactly(reader, size)
        if await _read_line(reader):
            raise http.client.HTTPException("no CRLF after a chunk")


async def _read_exactly(reader, n):
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as e:
        raise http.client.IncompleteRead(e.partial, n - len(e.partial)) from None


def _bounded(size):
    if size > MAX_BODY:
        raise http.client.HTTPException("answer of more than %d bytes" % MAX_BODY)
    return size


async def arun(plan):
    """Drives a plan (plan.py) with asyncio: each Attempt is sent with request(),
    each Pause awaited with asyncio.sleep; returns what the plan returns, raises what
    it raises. Cancelling the task cancels the request in flight (its connection is
    closed) and the plan with it."""
    outcome = None
    try:
        step = next(plan)
        while True:
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
                outcome = None
            else:
                try:
                    outcome = await request(step.endpoint, step.method, step.path, step.payload, step.headers,
                                            timeout=step.timeout, first_byte=step.first_byte)
                except NETWORK_ERRORS as e:
                    outcome = e
            step = plan.send(outcome)
    except StopIteration as stop:
        return stop.value
    finally:
        plan.close()
