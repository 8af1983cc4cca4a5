"""Coordination on top of the lock (issue 40), in the Python client, against the real binary:
several permits in one lease (permits=), a lock's value only its writer can change
(lease.value, lease.set_value, client.value) and elections (campaign, leadership,
proclaim, resign, election, observe, blocking and asyncio). Only loopback traffic; every
wait is bounded; nothing asserts how long a step took.

Run: LEASEGATE_BIN=build/leasegate PYTHONPATH=clients/python \\
         python3 -m unittest discover -s clients/python/tests -p test_coord.py -v
"""

import asyncio
import queue
import threading
import unittest

import leasegate
from support import BOUND, CountingProxy, Server, unique, wait_for


def next_event(events, timeout=BOUND):
    """The next item a thread put in the queue (an event, or the exception that ended it)."""
    try:
        item = events.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError("no event within %d s" % timeout) from None
    if isinstance(item, BaseException):
        raise item
    return item


def without_id(event):
    return {k: v for k, v in event.items() if k != "id"}


class BlockingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = leasegate.Client(cls.server.url, owner="py-coord")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_permits_are_granted_first_come_first_served(self):
        name = unique("permits")
        a = self.client.acquire_permit(name, limit=5, permits=3, owner="a")
        self.assertEqual((a.permits, a.limit), (3, 5))
        got = queue.Queue()

        def take(owner, permits):
            try:
                lease = self.client.acquire_permit(name, limit=5, permits=permits, owner=owner, wait="20s")
                got.put((owner, lease))
            except Exception as e:  # reported by the assertions below
                got.put((owner, e))

        threading.Thread(target=take, args=("b", 3), daemon=True).start()
        wait_for(lambda: self.client.semaphore_status(name)["waiters"] == 1, "b waiting")
        threading.Thread(target=take, args=("c", 1), daemon=True).start()
        wait_for(lambda: self.client.semaphore_status(name)["waiters"] == 2, "c waiting")
        # 2 are free, but c stays behind b: no barging.
        state = self.client.semaphore_status(name)
        self.assertEqual(state["available"], 2)
        self.assertEqual([w["permits"] for w in state["queue"]], [3, 1])
        a.release()
        # Both are granted by that release, b first: their tokens say the order (their
        # answers may come back in either, after the same commit).
        leases = dict(got.get(timeout=BOUND) for _ in range(2))
        b, c = leases["b"], leases["c"]
        self.assertEqual((b.permits, c.permits), (3, 1))
        self.assertGreater(c.token, b.token)
        with self.client.semaphore(name, limit=5, permits=1, wait="1s") as d:
            self.assertEqual(self.client.semaphore_status(name)["available"], 0)
            self.assertEqual(d.permits, 1)
        b.release()
        c.release()
        for bad, error in ((0, ValueError), (6, ValueError), ("2", TypeError), (True, TypeError)):
            with self.assertRaises(error):
                self.client.acquire_permit(name, limit=5, permits=bad)

    def test_value_only_its_writer_changes_and_the_next_holder_reads(self):
        name = unique("value")
        with self.client.lock(name) as first:
            self.assertEqual((first.value, first.value_version), (None, 0))
            answer = first.set_value({"offset": 41})
            self.assertEqual(answer, {"name": name, "value_version": 1, "token": first.token})
            self.assertEqual((first.value, first.value_version), ({"offset": 41}, 1))
            with self.assertRaises(leasegate.VersionMismatch) as cm:
                first.set_value({"offset": 0}, if_version=0)
            self.assertEqual(cm.exception.body["value_version"], 1)
        # Released: the lease can no longer write, and nothing changes.
        with self.assertRaises(leasegate.StaleToken) as cm:
            first.set_value({"offset": 999})
        self.assertEqual(cm.exception.body["reason"], "released")
        self.assertEqual(self.client.value(name)["value"], {"offset": 41})
        # The next holder reads the checkpoint with its grant, and writes over it.
        with self.client.lock(name) as second:
            self.assertEqual((second.value, second.value_version), ({"offset": 41}, 1))
            second.set_value({"offset": second.value["offset"] + 16}, if_version=second.value_version)
        self.assertEqual(self.client.value(name), {"name": name, "value": {"offset": 57}, "value_version": 2,
                                                   "value_token": second.token})
        # A reader's lease and a permit cannot write it.
        with self.client.lock(name, mode="read") as reader:
            with self.assertRaises(leasegate.StaleToken) as cm:
                reader.set_value(1)
            self.assertEqual(cm.exception.body["reason"], "read_lease")
        with self.client.semaphore(name, limit=1) as permit:
            with self.assertRaises(TypeError):
                permit.set_value(1)

    def test_elections_hand_over_and_observers_see_every_change_once(self):
        name = unique("election")
        proxy = CountingProxy(("127.0.0.1", int(self.server.url.rsplit(":", 1)[1])))
        self.addCleanup(proxy.stop)
        # The observer's first server is never there; it fails over to the proxy.
        observer = leasegate.Client("http://127.0.0.1:1,http://127.0.0.1:%d" % proxy.port, retry_for="20s")
        events = queue.Queue()
        stop = threading.Event()

        def watch():
            try:
                for event in observer.observe(name):
                    events.put(event)
                    if stop.is_set():
                        return
            except Exception as e:  # reported by next_event
                events.put(e)

        threading.Thread(target=watch, daemon=True).start()
        self.assertEqual(without_id(next_event(events)), {"event": "vacant", "reason": None, "previous_term": None})
        a = self.client.campaign(name, {"url": "http://a"}, owner="a")
        self.assertEqual((a.term, a.value), (a.token, {"url": "http://a"}))
        self.assertEqual(without_id(next_event(events)),
                         {"event": "leader", "owner": "a", "term": a.term, "value": {"url": "http://a"}})
        with self.assertRaises(leasegate.NotLeader) as cm:
            self.client.campaign(name, "b", owner="b")
        self.assertEqual(cm.exception.body["leader"]["owner"], "a")
        a.proclaim({"url": "http://a2"})
        self.assertEqual(a.value, {"url": "http://a2"})
        self.assertEqual(next_event(events)["value"], {"url": "http://a2"})
        state = self.client.election(name)
        self.assertEqual((state["leader"]["owner"], state["leader"]["term"]), ("a", a.term))
        # b waits behind a; the observer's connection is cut and held while a resigns.
        got = queue.Queue()
        threading.Thread(target=lambda: got.put(self.client.campaign(name, "b", owner="b", wait="20s")),
                         daemon=True).start()
        wait_for(lambda: [c["owner"] for c in self.client.election(name)["candidates"]] == ["b"], "b a candidate")
        proxy.pause()
        proxy.cut()
        a.resign()
        b = got.get(timeout=BOUND)
        proxy.resume()
        self.assertEqual(without_id(next_event(events)), {"event": "vacant", "reason": "resigned",
                                                          "previous_term": a.term})
        self.assertEqual(without_id(next_event(events)), {"event": "leader", "owner": "b", "term": b.term,
                                                          "value": "b"})
        with self.assertRaises(leasegate.NotLeader):
            a.proclaim("again")  # a resigned: no longer the leader
        stop.set()
        b.resign()
        with self.client.leadership(name, "c", owner="c") as c:
            self.assertEqual(self.client.election(name)["leader"]["owner"], "c")
        self.assertGreater(c.term, b.term)
        self.assertIsNone(self.client.election(name)["leader"])  # the block's end resigned
        self.assertGreater(proxy.connections, 1)  # the observer did reconnect


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    async def asyncSetUp(self):
        self.client = leasegate.AsyncClient(self.server.url, owner="py-coord-aio")

    async def test_permits_and_values(self):
        name = unique("aio-permits")
        async with self.client.semaphore(name, limit=4, permits=3) as big:
            self.assertEqual(big.permits, 3)
            with self.assertRaises(leasegate.SemaphoreFull):
                await self.client.acquire_permit(name, limit=4, permits=2)
            small = await self.client.acquire_permit(name, limit=4, permits=1)
            await small.release()
        lock = unique("aio-value")
        async with self.client.lock(lock) as lease:
            await lease.set_value([1, 2])
            self.assertEqual(((await self.client.value(lock))["value"], lease.value_version), ([1, 2], 1))
        with self.assertRaises(leasegate.StaleToken):
            await lease.set_value(None)

    async def test_campaign_and_observe_as_an_async_iterator(self):
        name = unique("aio-election")
        seen = []

        async def watch(count):
            async for event in self.client.observe(name):
                seen.append(without_id(event))
                if len(seen) == count:
                    return

        watcher = asyncio.create_task(watch(5))
        async with asyncio.timeout(BOUND):
            while not seen:
                await asyncio.sleep(0.02)
        a = await self.client.campaign(name, "a", owner="a", ttl="1s")
        await a.proclaim("a2")
        # b waits behind a; a's lease is left to expire (never renewed): b leads after.
        b = await self.client.campaign(name, "b", owner="b", wait="20s")
        async with asyncio.timeout(BOUND):
            await watcher
        self.assertEqual(seen, [{"event": "vacant", "reason": None, "previous_term": None},
                                {"event": "leader", "owner": "a", "term": a.term, "value": "a"},
                                {"event": "leader", "owner": "a", "term": a.term, "value": "a2"},
                                {"event": "vacant", "reason": "expired", "previous_term": a.term},
                                {"event": "leader", "owner": "b", "term": b.term, "value": "b"}])
        state = await self.client.election(name)
        self.assertEqual((state["leader"]["owner"], state["candidates"]), ("b", []))
        await b.resign()
        # Leaving the loop closed the stream: a new one starts from the state now.
        async for event in self.client.observe(name):
            self.assertEqual((event["event"], event["reason"]), ("vacant", "resigned"))
            break


if __name__ == "__main__":
    unittest.main()
