"""The asyncio client: AsyncClient and AsyncLease, the twins of Client and Lease.

    client = leasegate.AsyncClient("http://127.0.0.1:7400")
    async with client.lock("orders/42", ttl="15s", wait="1m") as lease:
        (await lease.request("PUT", "/store/orders/42", data)).raise_for_status()

Every call makes the same requests, retries, fails over and raises the same errors
as the blocking client's (both run the plans of plan.py); only the I/O differs
(aiotransport.py: HTTP/1.1 over asyncio streams, no thread). The watchdog is a task
on the event loop. Cancelling a call closes its connection: a cancelled acquire
leaves the lock's queue at once.
"""

import asyncio
import inspect
import logging

from . import plan
from .aiotransport import arun, body_chunks, open_stream, read_body, request
from .observe import MAX_ERROR_BODY, SILENCE, Observation
from .client import ClientCore
from .errors import LeasegateError, LeaseLost
from .lease import LeaseCore
from .transport import NETWORK_ERRORS

log = logging.getLogger("leasegate")


class AsyncClient(ClientCore):
    """A leasegate client for asyncio. Its options are Client's (servers, owner,
    timeout, retry_for, cafile, key). One client may serve any number of tasks, on
    one event loop at a time."""

    async def acquire(self, name, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None,
                      keep_alive=False, mode="write", lock_delay=None):
        """Takes the lock `name`, waiting up to `wait` in its FIFO queue; returns an
        AsyncLease. As Client.acquire; on_lost(error) is called on the event loop
        (a coroutine function's coroutine is run as a task).

        Cancelled while waiting, the request's connection is closed, so the server
        drops it from the queue. A grant that crossed the cancellation on the wire is
        released as a courtesy when the client knows of it, else it runs out at its TTL.
        """
        return await self._take(name, self._acquire_plan(name, ttl, wait, owner, metadata, mode, lock_delay),
                                on_lost, keep_alive, "lock")

    async def acquire_permit(self, name, *, limit, permits=1, ttl="30s", wait="0s", owner=None, metadata=None,
                             on_lost=None, keep_alive=False):
        """As Client.acquire_permit: `permits` of the `limit` permits of the semaphore `name`."""
        return await self._take(name, self._acquire_plan(name, ttl, wait, owner, metadata, limit=limit,
                                                         permits=permits), on_lost, keep_alive, "semaphore")

    async def campaign(self, name, value=None, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None,
                       keep_alive=False):
        """As Client.campaign: the leadership of the election `name`, an AsyncLease with
        proclaim() and resign(). Cancelled while waiting, the campaign leaves the queue."""
        return await self._take(name, self._acquire_plan(name, ttl, wait, owner, metadata, election=True,
                                                         value=value), on_lost, keep_alive, "election")

    async def _take(self, name, acquire_plan, on_lost, keep_alive, kind):
        endpoint, grant, start = await arun(acquire_plan)
        try:
            sent = await arun(plan.confirm(self, name, grant, start, kind))
        except asyncio.CancelledError:
            self._spawn(arun(plan.courtesy_release(self, name, grant["lease"], kind)))
            raise
        lease = AsyncLease(self, endpoint, grant, sent, on_lost, kind)
        return lease.keep_alive() if keep_alive else lease

    def semaphore(self, name, *, limit, permits=1, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None):
        """``async with client.semaphore("crawl/slots", limit=10) as permit:`` (as Client.semaphore)."""
        return AsyncLockBlock(self, name, {"limit": limit, "permits": permits, "ttl": ttl, "wait": wait,
                                           "owner": owner, "metadata": metadata, "on_lost": on_lost},
                              self.acquire_permit)

    def leadership(self, name, value=None, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None):
        """``async with client.leadership("scheduler", value) as leader:`` (as Client.leadership)."""
        return AsyncLockBlock(self, name, {"value": value, "ttl": ttl, "wait": wait, "owner": owner,
                                           "metadata": metadata, "on_lost": on_lost}, self.campaign)

    async def election(self, name):
        """The election's state (as Client.election)."""
        return (await arun(self._status_plan(name, "election")))[1]

    async def value(self, name):
        """The lock's value (as Client.value)."""
        return (await arun(self._value_plan(name)))[1]

    async def observe(self, name, *, last_event_id=None, retry_for=None):
        """``async for event in client.observe("scheduler"):`` as Client.observe: the
        election's new leaders, proclaimed values and vacancies, none twice or missed
        across cut connections and failovers. Leaving the loop (or cancelling the task)
        closes the stream's connection."""
        o = Observation(self, name, last_event_id, retry_for)
        while True:
            endpoint = o.endpoint()
            writer = None
            try:
                status, headers, reader, writer = await open_stream(endpoint, o.path, o.headers(),
                                                                    self.first_byte_timeout,
                                                                    max(self.timeout, self.first_byte_timeout))
                if status != 200:
                    pause = o.answered(status, await read_body(reader, headers, MAX_ERROR_BODY, self.timeout))
                else:
                    o.opened()
                    async for data in body_chunks(reader, headers, SILENCE):
                        for event in o.feed(data):
                            yield event
                    o.ended()
                    pause = plan.BACKOFF_FIRST  # a server that ends streams at once is not asked in a tight loop
            except NETWORK_ERRORS as e:
                pause = o.failed(endpoint, e)
            finally:
                if writer is not None:
                    writer.transport.abort()
            if pause:
                await asyncio.sleep(pause)

    def lock(self, name, *, ttl="30s", wait="0s", owner=None, metadata=None, on_lost=None, mode="write",
             lock_delay=None):
        """``async with client.lock("orders/42", ttl="15s", wait="1m") as lease:``

        As Client.lock: acquires, keeps the lease alive with the watchdog task while
        the block runs, releases at its end, and ends the block with LeaseLost if the
        lease was lost meanwhile (the block is not interrupted). A block that was
        cancelled ends with CancelledError (the release is still awaited; a second
        cancellation interrupts it, and the lock then runs out at its TTL).
        """
        return AsyncLockBlock(self, name, {"ttl": ttl, "wait": wait, "owner": owner, "metadata": metadata,
                                           "on_lost": on_lost, "mode": mode, "lock_delay": lock_delay})

    async def status(self, name):
        """The lock's state (as Client.status)."""
        return (await arun(self._status_plan(name)))[1]

    async def semaphore_status(self, name):
        """The semaphore's state (as Client.semaphore_status)."""
        return (await arun(self._status_plan(name, "semaphore")))[1]

    async def list(self, prefix="", *, after=None, page_size=100, semaphores=False):
        """``async for lock in client.list(prefix)``: the state of every lock (with
        semaphores=True, every semaphore) the server knows whose name starts with
        `prefix`, in name order, `page_size` at a time."""
        while True:
            page = (await arun(self._page_plan(prefix, after, page_size, semaphores)))[1]
            for lock in page["semaphores" if semaphores else "locks"]:
                yield lock
            after = page.get("next")
            if after is None:
                return

    async def fence(self, resource, token):
        """Checks `token` (an int, or its decimal string) against the resource's
        high-water mark; returns {resource, accepted, max_token} or raises StaleToken."""
        return (await arun(self._fence_plan(resource, token)))[1]

    def _spawn(self, coro):
        """Runs coro as a task nobody awaits (a courtesy release, an on_lost coroutine),
        referenced until it is done so that it is not collected halfway."""
        task = asyncio.get_running_loop().create_task(coro)
        background = self.__dict__.setdefault("_background", set())
        background.add(task)
        task.add_done_callback(background.discard)
        task.add_done_callback(_consume)
        return task


class AsyncLease(LeaseCore):
    """A lease of the AsyncClient: LeaseCore's members (name, owner, lease, token, ttl,
    server, metadata, valid, lost, headers, check()), with coroutines to renew,
    release and send a request; the watchdog is a task on the event loop."""

    def __init__(self, client, endpoint, grant, sent, on_lost=None, kind="lock"):
        super().__init__(client, endpoint, grant, sent, on_lost, kind)
        self._stop = asyncio.Event()
        self._watchdog = None

    async def renew(self, ttl=None):
        """As Lease.renew."""
        await arun(self._renew_plan(ttl))

    async def release(self):
        """As Lease.release; the watchdog stops before anything is awaited."""
        await arun(self._release_plan())

    async def resign(self):
        """As Lease.resign: the leader steps down."""
        await arun(self._release_plan())

    async def set_value(self, value, *, if_version=None):
        """As Lease.set_value: the lock's value, by its writer."""
        return await arun(self._set_value_plan(value, if_version))

    async def proclaim(self, value):
        """As Lease.proclaim: the leader's new value."""
        return await arun(self._proclaim_plan(value))

    async def request(self, method, path, data=None, headers=None, timeout=None):
        """As Lease.request: returns a Response, whose body was read whole."""
        data, headers, timeout = self._request_args(data, headers, timeout)
        try:
            return await request(self._endpoint, method, path, data, headers, timeout=timeout)
        except NETWORK_ERRORS as e:
            raise self._unreachable(e) from e

    def keep_alive(self):
        """Starts the watchdog task, which renews at a third of the TTL until release()
        or loss; returns the lease. A second call does nothing. Needs a running loop."""
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch(),
                                                                    name="leasegate-watchdog %s" % self.name)
        return self

    async def _end_of_block(self, interrupted):
        await arun(self._end_of_block_plan(interrupted))

    def _stop_watchdog(self):
        """Stops the watchdog: a renewal in flight is cancelled (its answer would be
        ignored anyway), unless it is the watchdog itself that stops."""
        self._stop.set()
        task = self._watchdog
        if task is not None and task is not _current_task():
            task.cancel()

    def _notify(self, error):
        if self._on_lost is None:
            return
        try:
            result = self._on_lost(error)
        except Exception:
            log.exception("on_lost callback for the lease on %r failed", self.name)
            return
        if inspect.isawaitable(result):
            self._client._spawn(_logged(result, self.name))

    async def _watch(self):
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self._renewal_due_in())
                return
            except TimeoutError:
                pass
            try:
                await self.renew()
            except LeaseLost:
                return
            except LeasegateError as e:
                self._lose("the lease on %r cannot be renewed: %s" % (self.name, e), e)
                return


class AsyncLockBlock:
    """``async with client.lock(...) as lease:`` (see AsyncClient.lock) and ``async
    with client.semaphore(...) as permit:``."""

    def __init__(self, client, name, options, acquire=None):
        self._client, self._name, self._options = client, name, options
        self._acquire = acquire or client.acquire
        self._lease = None

    async def __aenter__(self):
        self._lease = await self._acquire(self._name, keep_alive=True, **self._options)
        return self._lease

    async def __aexit__(self, exc_type, exc, tb):
        await self._lease._end_of_block(exc_type is not None and not issubclass(exc_type, Exception))
        return False


def _current_task():
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


async def _logged(awaitable, name):
    try:
        await awaitable
    except Exception:
        log.exception("on_lost callback for the lease on %r failed", name)


def _consume(task):
    """Retrieves a background task's outcome, so that none is reported as never retrieved."""
    if not task.cancelled():
        task.exception()
