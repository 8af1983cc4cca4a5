"""The asyncio client (AsyncClient) against the real leasegate binary ($LEASEGATE_BIN),
and its HTTP/1.1 reader against canned answers.

The same behaviour as the blocking client's (test_client.py) where it is shared, and
what only asyncio has: a cancelled acquire leaves the queue at once, a cancelled block
releases its lock, on_lost may be a coroutine function. Only loopback traffic; every
wait is bounded; nothing asserts how long a step took.
"""

import asyncio
import http.client
import os
import shutil
import signal
import tempfile
import time
import unittest

import leasegate
from leasegate import aiotransport
from leasegate.transport import Endpoint
from support import BOUND, CountingProxy, Recorder, Server, Silent, Store, closed_port_url, make_pki, unique


async def eventually(predicate, what, timeout=BOUND):
    """Awaits predicate() (a coroutine function) until it returns true; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        await asyncio.sleep(0.02)


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.store = Store()
        cls.server = Server("--guard", "/store/=%s/" % cls.store.url)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.store.stop()

    def setUp(self):
        self.client = leasegate.AsyncClient(self.server.url, owner="py-async-test")

    async def test_acquire_renew_release(self):
        name = unique("aio-acquire")
        lease = await self.client.acquire(name, ttl="30s", metadata={"why": "test"})
        self.assertIsInstance(lease, leasegate.AsyncLease)
        self.assertTrue(lease.valid)
        self.assertEqual((lease.name, lease.owner, lease.server), (name, "py-async-test", self.server.url))
        state = await self.client.status(name)
        self.assertEqual(state["holder"]["token"], lease.token)
        self.assertEqual(state["holder"]["metadata"], {"why": "test"})
        await lease.renew(ttl="10s")
        self.assertEqual(lease.ttl, 10.0)
        await lease.release()
        self.assertFalse(lease.valid)
        self.assertFalse((await self.client.status(name))["held"])
        await lease.release()  # a second release does nothing

    async def test_lock_block_holds_then_releases(self):
        name = unique("aio-block")
        async with self.client.lock(name, ttl="15s") as lease:
            self.assertTrue(lease.valid)
            self.assertEqual((await self.client.status(name))["holder"]["token"], lease.token)
            resp = (await lease.request("PUT", "/store/" + name, "v1")).raise_for_status()
            self.assertEqual(resp.status, 201)
        self.assertEqual(self.store.objects["/" + name], (b"v1", str(lease.token)))
        self.assertFalse((await self.client.status(name))["held"])
        self.assertIsNone(lease.lost)
        late = await lease.request("PUT", "/store/" + name, "late")  # released: refused by the guard
        self.assertRaises(leasegate.StaleToken, late.raise_for_status)

    async def test_waiters_are_handed_the_lock_in_arrival_order(self):
        name = unique("aio-fifo")
        holder = await self.client.acquire(name, ttl="30s")
        order = []

        async def waiter(label):
            # A short TTL and a long wait: the grant must be confirmed by a renewal.
            async with leasegate.AsyncClient(self.server.url, owner=label).lock(name, ttl="600ms",
                                                                                wait="20s") as lease:
                order.append((label, lease.token))
                await asyncio.sleep(0.3)

        tasks = []
        for n, label in enumerate(("first", "second")):
            tasks.append(asyncio.create_task(waiter(label)))
            await eventually(lambda: self._waiters(name, n + 1), "%s waiter" % label)
        await asyncio.sleep(0.3)  # both wait past a third of their TTL
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), BOUND)
        self.assertEqual([label for label, _ in order], ["first", "second"])
        tokens = [holder.token] + [token for _, token in order]
        self.assertEqual(tokens, sorted(set(tokens)))

    async def test_watchdog_task_keeps_a_short_lease_alive(self):
        name = unique("aio-watchdog")
        lost = []
        async with self.client.lock(name, ttl="600ms", on_lost=lost.append) as lease:
            await asyncio.sleep(2.0)  # more than three TTLs
            self.assertTrue(lease.valid)
            with self.assertRaises(leasegate.LockHeld) as held:
                await leasegate.AsyncClient(self.server.url, owner="intruder").acquire(name)
            self.assertEqual(held.exception.body["holder"]["token"], lease.token)
        self.assertEqual(lost, [])
        self.assertFalse((await self.client.status(name))["held"])

    async def test_renewal_answered_not_holder_is_a_loss_and_on_lost_may_be_a_coroutine(self):
        name = unique("aio-superseded")
        lost = []

        async def on_lost(error):
            await asyncio.sleep(0)
            lost.append(error)

        lease = await self.client.acquire(name, ttl="300ms", on_lost=on_lost)  # no watchdog
        while lease.valid:
            await asyncio.sleep(0.02)
        newer = await leasegate.AsyncClient(self.server.url).acquire(name, wait="10s")
        with self.assertRaises(leasegate.LeaseLost) as cm:
            await lease.renew()
        self.assertIsInstance(cm.exception.__cause__, leasegate.NotHolder)
        self.assertEqual(cm.exception.__cause__.body["reason"], "superseded")
        with self.assertRaises(leasegate.LeaseLost):
            await lease.renew()
        self.assertRaises(leasegate.LeaseLost, lease.check)
        await eventually(lambda: asyncio.sleep(0, bool(lost)), "on_lost")
        self.assertEqual(len(lost), 1)
        self.assertIs(lost[0].lease, lease)
        await newer.release()

    async def test_errors_are_named_after_the_contract_codes(self):
        name = unique("aio-errors")
        async with self.client.lock(name):
            with self.assertRaises(leasegate.LockHeld) as cm:
                await self.client.acquire(name, wait="0s")
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.body["waiters"]), (409, "lock_held", 0))
        with self.assertRaises(leasegate.BadRequest) as bad:
            await self.client.acquire("no spaces allowed")
        self.assertEqual(bad.exception.body["field"], "name")
        fenced = unique("aio-fence")
        token = cm.exception.body["holder"]["token"]
        self.assertTrue((await self.client.fence(fenced, token))["accepted"])
        with self.assertRaises(leasegate.StaleToken):
            await self.client.fence(fenced, token - 1)

    async def test_readers_and_semaphore_permits(self):
        name = unique("aio-rw")
        async with self.client.lock(name, mode="read") as a, self.client.lock(name, mode="read") as b:
            self.assertEqual((a.mode, b.mode), ("read", "read"))
            with self.assertRaises(leasegate.LockHeld):
                await self.client.acquire(name)
            resp = await a.request("PUT", "/store/" + name, "from a reader")
            self.assertRaises(leasegate.StaleToken, resp.raise_for_status)
        sem = unique("aio-sem")
        async with self.client.semaphore(sem, limit=1) as p:
            self.assertTrue(p.semaphore)
            with self.assertRaises(leasegate.SemaphoreFull):
                await self.client.acquire_permit(sem, limit=1)
            await p.renew()
            self.assertEqual((await self.client.semaphore_status(sem))["holders_total"], 1)
            self.assertEqual([s["name"] async for s in self.client.list(sem, semaphores=True)], [sem])
        self.assertEqual((await self.client.semaphore_status(sem))["holders_total"], 0)

    async def test_a_bare_number_as_a_duration_is_refused(self):
        for options in ({"ttl": 15}, {"wait": 0}, {"ttl": "15"}):
            with self.subTest(options=options), self.assertRaises(ValueError):
                await self.client.acquire(unique("aio-bare"), **options)
        with self.assertRaises(ValueError):
            async with self.client.lock(unique("aio-bare"), wait=60):
                self.fail("granted")
        self.assertRaises(ValueError, leasegate.AsyncClient, self.server.url, timeout=5)

    async def test_a_cancelled_acquire_leaves_the_queue_at_once(self):
        name = unique("aio-cancel")
        holder = await self.client.acquire(name, ttl="30s")
        waiter = asyncio.create_task(leasegate.AsyncClient(self.server.url).acquire(name, wait="60s"))
        await eventually(lambda: self._waiters(name, 1), "the waiter")
        waiter.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await waiter
        # The connection was closed, so the server dropped the waiter: a thread stuck
        # in a blocking long-poll would still be queued here, for up to its 60 s.
        await eventually(lambda: self._waiters(name, 0), "the server to drop the waiter")
        await holder.release()
        self.assertFalse((await self.client.status(name))["held"])

    async def test_a_cancelled_block_releases_its_lock(self):
        name = unique("aio-cancel-block")
        entered = asyncio.Event()

        async def work():
            async with self.client.lock(name, ttl="15s"):
                entered.set()
                await asyncio.sleep(BOUND * 3)

        task = asyncio.create_task(work())
        await asyncio.wait_for(entered.wait(), BOUND)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertFalse((await self.client.status(name))["held"])
        with self.assertRaises(TimeoutError):  # asyncio.timeout cancels the block the same way
            async with asyncio.timeout(0.3):
                async with self.client.lock(name, ttl="15s"):
                    await asyncio.sleep(BOUND * 3)
        self.assertFalse((await self.client.status(name))["held"])

    async def test_list_follows_pages(self):
        prefix = unique("aio-list") + "/"
        names = [prefix + n for n in ("a", "b", "c")]
        for name in names:
            await (await self.client.acquire(name)).release()
        self.assertEqual([lock["name"] async for lock in self.client.list(prefix, page_size=2)], names)

    async def test_failover_and_unavailable(self):
        client = leasegate.AsyncClient([closed_port_url(), self.server.url])
        async with client.lock(unique("aio-failover")) as lease:
            self.assertEqual(lease.server, self.server.url)
        nobody = leasegate.AsyncClient([closed_port_url(), closed_port_url()], retry_for="200ms")
        with self.assertRaises(leasegate.Unavailable) as cm:
            await nobody.acquire(unique("aio-nobody"))
        self.assertIsNone(cm.exception.status)

    async def test_overloaded_server_is_skipped_and_retries_keep_the_request_id(self):
        busy = Recorder(503)
        try:
            lease = await leasegate.AsyncClient([busy.url, self.server.url]).acquire(unique("aio-busy"))
            self.assertEqual(lease.server, self.server.url)
            await lease.release()
            with self.assertRaises(leasegate.Overloaded):
                await leasegate.AsyncClient(busy.url, retry_for="300ms").acquire("busy/only")
        finally:
            busy.stop()
        self.assertGreater(len(busy.bodies), 2)
        self.assertEqual(len({body["request_id"] for body in busy.bodies[1:]}), 1)

    async def _waiters(self, name, count):
        return (await self.client.status(name))["waiters"] == count

    async def test_a_silent_server_is_left_after_the_first_byte_timeout(self):
        """As the blocking client's: a server that accepts and never answers (paused)
        costs the first-byte timeout and an unanswered /readyz, not the 60 s timeout."""
        with Silent() as silent:
            client = leasegate.AsyncClient([silent.url, self.server.url], timeout="60s", first_byte_timeout="300ms")
            async with asyncio.timeout(BOUND):  # past it, the client waited on the silent server
                lease = await client.acquire(unique("aio-silent"))
            self.assertEqual(lease.server, self.server.url)
            await lease.release()

    async def test_a_long_poll_outlasts_the_first_byte_timeout(self):
        name = unique("aio-long-poll")
        holder = await self.client.acquire(name, ttl="30s")
        before = self.server.metric("leasegate_waiter_disconnects_total")
        client = leasegate.AsyncClient(self.server.url, first_byte_timeout="200ms")
        task = asyncio.ensure_future(client.acquire(name, wait="30s"))
        await eventually(lambda: self._waiters(name, 1), "the waiter")
        await asyncio.sleep(1.0)  # several first-byte timeouts pass while it waits
        await holder.release()
        async with asyncio.timeout(BOUND):
            lease = await task
        self.assertEqual(self.server.metric("leasegate_waiter_disconnects_total"), before,
                         "the long-poll was given up and sent again")
        await lease.release()


class AsyncLeaseLossTest(unittest.IsolatedAsyncioTestCase):
    """A server of its own, since it is stopped (SIGSTOP) for longer than the TTL."""

    def setUp(self):
        self.store = Store()
        self.server = Server("--guard", "/store/=%s/" % self.store.url)

    def tearDown(self):
        self.server.stop()
        self.store.stop()

    async def test_stopped_server_loses_the_lease_and_the_block_raises(self):
        name = unique("aio-stopped")
        lost = []
        client = leasegate.AsyncClient(self.server.url)
        with self.assertRaises(leasegate.LeaseLost) as cm:
            async with client.lock(name, ttl="600ms", on_lost=lost.append) as lease:
                (await lease.request("PUT", "/store/" + name, "v1")).raise_for_status()
                self.server.signal(signal.SIGSTOP)  # renewals now go unanswered
                try:
                    deadline = time.monotonic() + BOUND
                    while not lost and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                    self.assertTrue(lost, "on_lost was not called")
                    self.assertFalse(lease.valid)
                finally:
                    self.server.signal(signal.SIGCONT)
                newer = await leasegate.AsyncClient(self.server.url).acquire(name, wait="10s")
                resp = await lease.request("PUT", "/store/" + name, "v2")
                self.assertRaises(leasegate.StaleToken, resp.raise_for_status)
                await newer.release()
        self.assertIs(cm.exception.lease, lease)
        self.assertEqual(len(lost), 1)
        self.assertEqual(self.store.objects["/" + name][0], b"v1")


@unittest.skipUnless(shutil.which("openssl"), "the openssl command is missing")
class AsyncTlsTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="leasegate-pyclient-aiotls-")
        cls.ca, cert, key = make_pki(cls.dir)
        cls.server = Server("--tls-cert", cert, "--tls-key", key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    async def test_cafile_verifies_the_server(self):
        client = leasegate.AsyncClient(self.server.url, cafile=self.ca)
        name = unique("aio-tls")
        async with client.lock(name, ttl="2s") as lease:
            await asyncio.sleep(1.0)  # the watchdog renews over TLS too
            self.assertTrue(lease.valid)
            self.assertEqual((await lease.request("GET", "/healthz")).json()["status"], "ok")
        self.assertFalse((await client.status(name))["held"])

    async def test_without_the_ca_the_failure_is_raised_at_once_with_the_cli_explanation(self):
        proxy = CountingProxy(("127.0.0.1", int(self.server.url.rsplit(":", 1)[1])))
        try:
            client = leasegate.AsyncClient("https://127.0.0.1:%d" % proxy.port, retry_for="30s")
            with self.assertRaises(leasegate.TLSVerificationError) as caught:
                await client.acquire(unique("aio-tls"), wait="30s")
        finally:
            proxy.stop()
        self.assertEqual(proxy.connections, 1)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(caught.exception))
        self.assertIn("needs cafile=PEM or $LEASEGATE_CACERT", str(caught.exception))


class AsyncKeyTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_key_goes_with_every_request(self):
        directory = tempfile.mkdtemp(prefix="leasegate-pyclient-aiokeys-")
        out = (await asyncio.create_subprocess_exec(os.environ["LEASEGATE_BIN"], "keygen", "app", "client", "py/",
                                                    stdout=asyncio.subprocess.PIPE))
        key, line = (await out.communicate())[0].decode().splitlines()[:2]
        with open(os.path.join(directory, "keys"), "w") as f:
            f.write(line + "\n")
        server = Server("--auth-file", os.path.join(directory, "keys"))
        try:
            client = leasegate.AsyncClient(server.url, key=key)
            name = unique("py/aio-key")
            async with client.lock(name, ttl="2s") as lease:
                await asyncio.sleep(1.0)  # renewals carry it too
                self.assertTrue(lease.valid)
            self.assertFalse((await client.status(name))["held"])
            with self.assertRaises(leasegate.Unauthorized):
                await leasegate.AsyncClient(server.url).acquire(unique("py/none"))
        finally:
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)


class AioTransportTest(unittest.IsolatedAsyncioTestCase):
    """The HTTP/1.1 reader against canned answers from a loopback socket."""

    async def answer(self, raw, method="GET", timeout=BOUND, hang=False):
        """What aiotransport.request makes of `raw`, sent back to one request (then the
        connection is closed, or with hang left open)."""
        async def serve(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(raw)
            await writer.drain()
            if hang:
                await reader.read()  # until the client gives up and closes
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        try:
            endpoint = Endpoint("http://127.0.0.1:%d" % server.sockets[0].getsockname()[1])
            return await aiotransport.request(endpoint, method, "/x", None, {}, timeout=timeout)
        finally:
            server.close()
            await server.wait_closed()

    async def test_framings(self):
        resp = await self.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello")
        self.assertEqual((resp.status, resp.body, resp.headers["x-a"]), (200, b"hello", "b"))
        resp = await self.answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nTrailer: t\r\n\r\n")
        self.assertEqual(resp.body, b"hello")
        resp = await self.answer(b"HTTP/1.0 404 Not Found\r\n\r\nuntil the close")
        self.assertEqual((resp.status, resp.body), (404, b"until the close"))
        resp = await self.answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual((resp.status, resp.body), (201, b""))
        resp = await self.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", method="HEAD")
        self.assertEqual((resp.status, resp.body), (200, b""))

    async def test_broken_answers_are_network_errors(self):
        for raw in (b"", b"nonsense\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (aiotransport.MAX_BODY + 1),
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                    b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n"):
            with self.subTest(raw=raw[:60]), self.assertRaises(http.client.HTTPException):
                await self.answer(raw)

    async def test_a_silent_server_times_out(self):
        with self.assertRaises(TimeoutError):
            await self.answer(b"HTTP/1.1 200 OK\r\n", timeout=0.2, hang=True)

    async def test_header_injection_is_refused(self):
        endpoint = Endpoint("http://127.0.0.1:9")
        for method, path, headers in (("GET", "/a b", {}), ("GET", "/a\r\nX: y", {}), ("GET", "/", {"X": "a\r\nY: b"}),
                                      ("GET", "/", {"X\r\nY": "b"})):
            with self.subTest(path=path, headers=headers), self.assertRaises(ValueError):
                await aiotransport.request(endpoint, method, path, None, headers, timeout=1)


if __name__ == "__main__":
    unittest.main()
