"""The fence-check middleware (leasegate.fencing) in front of a storage backend: WSGI
over real HTTP (wsgiref), and ASGI called as an ASGI server calls it, checking the tokens
of real leases with the real server ($LEASEGATE_BIN) or in the process.

Run: LEASEGATE_BIN=build/leasegate PYTHONPATH=clients/python \
         python3 -m unittest clients/python/tests/test_fencing.py -v
"""

import asyncio
import http.client
import json
import threading
import unittest
import urllib.parse
import wsgiref.simple_server

import leasegate
from leasegate.fencing import (AsyncFenceMiddleware, AsyncServerFence, FenceMiddleware, LocalFence, ServerFence,
                               parse_token)
from support import BOUND, Server, closed_port_url, unique, wait_for


class _Quiet(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


class _ThreadingWSGIServer(wsgiref.simple_server.WSGIServer):
    """wsgiref's server, one thread per request (so writes can overlap)."""
    daemon_threads = True

    def process_request(self, request, client_address):
        threading.Thread(target=self._handle, args=(request, client_address), daemon=True).start()

    def _handle(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        finally:
            self.shutdown_request(request)


class Store:
    """The backend: keeps each PUT's body and the token the middleware admitted it with."""

    def __init__(self):
        self.objects = {}

    def wsgi(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "PUT":
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            self.objects[environ["PATH_INFO"]] = (body.decode(), environ.get("leasegate.fence_token"))
            start_response("201 Created", [("Content-Length", "0")])
            return [b""]
        start_response("200 OK", [("Content-Length", "4")])
        return [b"read"]

    async def asgi(self, scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "PUT":
            self.objects[scope["path"]] = (body.decode(), scope.get("leasegate.fence_token"))
            status = 201
        else:
            status = 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def serve_wsgi(app):
    httpd = wsgiref.simple_server.make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer,
                                              handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd


def put(port, path, token, body="x"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND)
    headers = {"Fencing-Token": str(token)} if token is not None else {}
    conn.request("PUT", path, body.encode(), headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data and resp.getheader("Content-Type") == "application/json" else None


async def call_asgi(app, method, path, token=None, body=b"x"):
    """One request as an ASGI server makes it: (status, JSON body or None)."""
    headers = [(b"fencing-token", str(token).encode())] if token is not None else []
    scope = {"type": "http", "method": method, "path": path, "raw_path": urllib.parse.quote(path).encode(),
             "headers": headers, "query_string": b""}
    sent = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(data) if data else None


class FencingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = leasegate.Client(cls.server.url)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def two_tokens(self):
        """Tokens of two real grants, older first."""
        older = self.client.acquire(unique("py/fence"))
        newer = self.client.acquire(unique("py/fence"))
        older.release()
        newer.release()
        return older.token, newer.token

    def check_wsgi(self, check, prefix=""):
        store = Store()
        httpd = serve_wsgi(FenceMiddleware(store.wsgi, check, prefix=prefix))
        port = httpd.server_address[1]
        try:
            old, new = self.two_tokens()
            path = "/" + unique("files")
            self.assertEqual(put(port, path, old, "v1")[0], 201)
            self.assertEqual(put(port, path, new, "v2")[0], 201)
            self.assertEqual(put(port, path, new, "v3")[0], 201, "the same token again")
            status, body = put(port, path, old, "stale")
            self.assertEqual(status, 409)
            self.assertEqual(body["error"], "stale_token")
            self.assertEqual(body["max_token"], new)
            self.assertEqual(body["resource"], prefix + path[1:])
            self.assertEqual(store.objects[path], ("v3", new), "the stale write never reached the store")
            self.assertEqual(put(port, path, None)[0], 428)
            self.assertEqual(put(port, path, "12ab")[0], 400)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND)
            conn.request("GET", path)
            self.assertEqual(conn.getresponse().status, 200, "reads pass without a token")
            conn.close()
            return port, store
        finally:
            httpd.shutdown()
            httpd.server_close()

    def test_wsgi_asking_the_server(self):
        self.check_wsgi(ServerFence(self.client), prefix="backend-a/")
        store = Store()
        httpd = serve_wsgi(FenceMiddleware(store.wsgi, ServerFence(self.client)))
        try:
            status, body = put(httpd.server_address[1], "/files/forged", 999999999)
            self.assertEqual(status, 400, "a token never issued: %r" % body)
            self.assertNotIn("/files/forged", store.objects)
        finally:
            httpd.shutdown()
            httpd.server_close()

    def test_wsgi_marks_in_the_process(self):
        self.check_wsgi(LocalFence())

    def test_wsgi_without_a_server_answers_503(self):
        store = Store()
        gone = leasegate.Client(closed_port_url(), retry_for="100ms")
        httpd = serve_wsgi(FenceMiddleware(store.wsgi, ServerFence(gone)))
        try:
            status, body = put(httpd.server_address[1], "/files/a", 5)
            self.assertEqual((status, body["error"]), (503, "fence_unavailable"))
            self.assertEqual(store.objects, {})
        finally:
            httpd.shutdown()
            httpd.server_close()

    def test_wsgi_one_write_per_resource_so_an_older_token_cannot_overtake(self):
        entered, proceed = threading.Event(), threading.Event()
        applied = []

        def slow_app(environ, start_response):
            if environ["leasegate.fence_token"] == 6:
                entered.set()
                proceed.wait(BOUND)  # the write of token 6 is still being applied
            applied.append(environ["leasegate.fence_token"])
            start_response("201 Created", [("Content-Length", "0")])
            return [b""]

        middleware = FenceMiddleware(slow_app, LocalFence())
        httpd = serve_wsgi(middleware)
        port = httpd.server_address[1]
        try:
            six = threading.Thread(target=put, args=(port, "/r", 6))
            six.start()
            self.assertTrue(entered.wait(BOUND))
            outcome = []
            five = threading.Thread(target=lambda: outcome.append(put(port, "/r", 5)))
            five.start()
            wait_for(lambda: middleware.turns.users("r") == 2, "the older write to wait for its turn")
            self.assertEqual(put(port, "/other", 1)[0], 201, "another resource does not wait")
            proceed.set()
            six.join(BOUND)
            five.join(BOUND)
            self.assertEqual(outcome[0][0], 409, "checked after 6 was applied: stale")
            self.assertEqual(sorted(applied), [1, 6], "5 never reached the store")
            wait_for(lambda: middleware.turns.busy() == 0, "no turn left behind")
        finally:
            proceed.set()
            httpd.shutdown()
            httpd.server_close()

    def test_asgi_asking_the_server_and_in_the_process(self):
        async def scenario(check):
            store = Store()
            app = AsyncFenceMiddleware(store.asgi, check)
            old, new = self.two_tokens()
            path = "/" + unique("files")
            self.assertEqual((await call_asgi(app, "PUT", path, old))[0], 201)
            self.assertEqual((await call_asgi(app, "PUT", path, new, b"v2"))[0], 201)
            status, body = await call_asgi(app, "PUT", path, old, b"stale")
            self.assertEqual(status, 409)
            self.assertEqual((body["error"], body["max_token"]), ("stale_token", new))
            self.assertEqual(store.objects[path], ("v2", new))
            self.assertEqual((await call_asgi(app, "PUT", path))[0], 428)
            self.assertEqual((await call_asgi(app, "GET", path))[0], 200)
            self.assertEqual((await call_asgi(app, "DELETE", path, "0"))[0], 400)
            return app

        async def main():
            async_client = leasegate.AsyncClient(self.server.url)
            await scenario(AsyncServerFence(async_client))
            app = await scenario(LocalFence())
            self.assertEqual(app.turns.busy(), 0)

        asyncio.run(asyncio.wait_for(main(), BOUND))

    def test_asgi_one_write_per_resource(self):
        async def main():
            entered, proceed = asyncio.Event(), asyncio.Event()

            async def slow_app(scope, receive, send):
                if scope["leasegate.fence_token"] == 6:
                    entered.set()
                    await proceed.wait()
                await send({"type": "http.response.start", "status": 201, "headers": []})
                await send({"type": "http.response.body", "body": b""})

            app = AsyncFenceMiddleware(slow_app, LocalFence())
            six = asyncio.create_task(call_asgi(app, "PUT", "/r", 6))
            await entered.wait()
            five = asyncio.create_task(call_asgi(app, "PUT", "/r", 5))
            while app.turns.users("r") < 2:  # bounded by the asyncio.wait_for below
                await asyncio.sleep(0.01)
            self.assertFalse(five.done(), "the older write waits for the newer one")
            proceed.set()
            self.assertEqual((await six)[0], 201)
            self.assertEqual((await five)[0], 409)
            self.assertEqual(app.turns.busy(), 0)

        asyncio.run(asyncio.wait_for(main(), BOUND))

    def test_tokens_from_headers(self):
        self.assertEqual(parse_token("18446744073709551615"), 2 ** 64 - 1)
        for bad in ("0", "-1", "18446744073709551616", "1.0", "", "٣"):
            self.assertRaises(ValueError, parse_token, bad)


if __name__ == "__main__":
    unittest.main()
