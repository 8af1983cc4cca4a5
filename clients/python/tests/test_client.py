"""The Python client against the real leasegate binary ($LEASEGATE_BIN).

Each server runs on a free 127.0.0.1 port with a temporary database and is stopped by
its PID; a guarded prefix /store/ forwards to a small in-process storage upstream.
Only loopback traffic; every wait is bounded; nothing asserts how long a step took.

Run: LEASEGATE_BIN=build/leasegate PYTHONPATH=clients/python \
         python3 -m unittest discover -s clients/python/tests -v
"""

import datetime
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import leasegate
from support import (BOUND, CountingProxy, Recorder, Server, Silent, Store, closed_port_url, make_pki, unique,
                     wait_for)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.store = Store()
        cls.server = Server("--guard", "/store/=%s/" % cls.store.url)
        cls.client = leasegate.Client(cls.server.url, owner="py-test")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.store.stop()

    def test_acquire_renew_release(self):
        name = unique("acquire")
        lease = self.client.acquire(name, ttl="30s", metadata={"why": "test"})
        self.assertTrue(lease.valid)
        self.assertEqual((lease.name, lease.owner, lease.server), (name, "py-test", self.server.url))
        state = self.client.status(name)
        self.assertTrue(state["held"])
        self.assertEqual(state["holder"]["token"], lease.token)
        self.assertEqual(state["holder"]["metadata"], {"why": "test"})
        lease.renew(ttl="10s")
        self.assertEqual(lease.ttl, 10.0)
        lease.release()
        self.assertFalse(lease.valid)
        self.assertFalse(self.client.status(name)["held"])
        lease.release()  # a second release does nothing

    def test_lock_block_holds_then_releases(self):
        name = unique("block")
        with self.client.lock(name, ttl="15s") as lease:
            self.assertTrue(lease.valid)
            self.assertEqual(lease.headers, {"Fencing-Lease": lease.lease})
            self.assertEqual(self.client.status(name)["holder"]["token"], lease.token)
        self.assertFalse(self.client.status(name)["held"])
        self.assertIsNone(lease.lost)

    def test_waiters_are_handed_the_lock_in_arrival_order(self):
        name = unique("fifo")
        holder = self.client.acquire(name, ttl="30s")
        order, errors = [], []

        def waiter(label):
            try:
                # A short TTL and a long wait: the grant must be confirmed by a renewal.
                with leasegate.Client(self.server.url, owner=label).lock(name, ttl="600ms", wait="20s") as lease:
                    order.append((label, lease.token))
                    time.sleep(0.3)
            except Exception as e:  # reported by the main thread
                errors.append(e)

        threads = []
        for n, label in enumerate(("first", "second")):
            threads.append(threading.Thread(target=waiter, args=(label,)))
            threads[-1].start()
            wait_for(lambda: self.client.status(name)["waiters"] == n + 1, "%s waiter" % label)
        time.sleep(0.3)  # both wait past a third of their TTL
        holder.release()
        for t in threads:
            t.join(BOUND)
        self.assertEqual(errors, [])
        self.assertEqual([label for label, _ in order], ["first", "second"])
        tokens = [holder.token] + [token for _, token in order]
        self.assertEqual(tokens, sorted(set(tokens)))
        self.assertFalse(self.client.status(name)["held"])

    def test_watchdog_keeps_a_short_lease_alive(self):
        name = unique("watchdog")
        lost = []
        with self.client.lock(name, ttl="600ms", on_lost=lost.append) as lease:
            time.sleep(2.0)  # more than three TTLs
            self.assertTrue(lease.valid)
            with self.assertRaises(leasegate.LockHeld) as held:
                leasegate.Client(self.server.url, owner="intruder").acquire(name)
            self.assertEqual(held.exception.body["holder"]["token"], lease.token)
        self.assertEqual(lost, [])
        self.assertFalse(self.client.status(name)["held"])

    def test_renewal_answered_not_holder_is_a_loss(self):
        name = unique("superseded")
        lost = []
        lease = self.client.acquire(name, ttl="300ms", on_lost=lost.append)  # no watchdog
        wait_for(lambda: not lease.valid, "the lease to run out")
        newer = leasegate.Client(self.server.url).acquire(name, wait="10s")
        with self.assertRaises(leasegate.LeaseLost) as cm:
            lease.renew()
        self.assertIsInstance(cm.exception.__cause__, leasegate.NotHolder)
        self.assertEqual(cm.exception.__cause__.body["reason"], "superseded")
        self.assertRaises(leasegate.LeaseLost, lease.renew)
        self.assertRaises(leasegate.LeaseLost, lease.check)
        self.assertEqual(len(lost), 1)
        self.assertIs(lost[0].lease, lease)
        newer.release()

    def test_errors_are_named_after_the_contract_codes(self):
        name = unique("errors")
        with self.client.lock(name):
            with self.assertRaises(leasegate.LockHeld) as cm:
                self.client.acquire(name, wait="0s")
        e = cm.exception
        self.assertIsInstance(e, leasegate.LeasegateError)
        self.assertEqual((e.status, e.code), (409, "lock_held"))
        self.assertEqual(e.body["waiters"], 0)
        with self.assertRaises(leasegate.BadRequest) as cm:
            self.client.acquire("no spaces allowed")
        self.assertEqual((cm.exception.status, cm.exception.body["field"]), (400, "name"))
        with self.assertRaises(leasegate.BadRequest):
            self.client.acquire(name, ttl="10ms")  # below the server's minimum
        fenced = unique("fence")
        self.assertTrue(self.client.fence(fenced, e.body["holder"]["token"])["accepted"])
        with self.assertRaises(leasegate.StaleToken):
            self.client.fence(fenced, e.body["holder"]["token"] - 1)

    def test_readers_share_the_lock_and_the_guard_refuses_their_writes(self):
        name = unique("readers")
        with self.client.lock(name, mode="read") as a, self.client.lock(name, mode="read") as b:
            self.assertEqual((a.mode, b.mode), ("read", "read"))
            self.assertLess(a.token, b.token)
            state = self.client.status(name)
            self.assertEqual((state["mode"], [h["token"] for h in state["holders"]]), ("read", [a.token, b.token]))
            with self.assertRaises(leasegate.LockHeld) as cm:
                self.client.acquire(name)  # a writer waits for every reader
            self.assertEqual(cm.exception.body["mode"], "read")
            with self.assertRaises(leasegate.StaleToken) as cm:
                a.request("PUT", "/store/" + name, "from a reader").raise_for_status()
            self.assertEqual(cm.exception.body["reason"], "read_lease")
        with self.client.lock(name, lock_delay="1s") as w:
            self.assertEqual(w.mode, "write")
        with self.assertRaises(ValueError):
            self.client.acquire(name, mode="shared")

    def test_semaphore_permits(self):
        name = unique("sem")
        with self.client.semaphore(name, limit=2, ttl="15s") as p1, \
                self.client.semaphore(name, limit=2) as p2:
            self.assertTrue(p1.semaphore and p2.semaphore)
            self.assertEqual((p1.limit, p1.mode), (2, None))
            self.assertNotEqual(p1.token, p2.token)
            with self.assertRaises(leasegate.SemaphoreFull) as cm:
                self.client.acquire_permit(name, limit=2)
            self.assertIsInstance(cm.exception, leasegate.LockHeld)
            self.assertEqual(len(cm.exception.body["holders"]), 2)
            with self.assertRaises(leasegate.LimitMismatch) as cm:
                self.client.acquire_permit(name, limit=3)
            self.assertEqual(cm.exception.body["limit"], 2)
            p1.renew(ttl="20s")
            state = self.client.semaphore_status(name)
            self.assertEqual((state["holders_total"], state["available"]), (2, 0))
            self.assertIn(name, [s["name"] for s in self.client.list(name, semaphores=True)])
            self.assertFalse(self.client.status(name)["held"])  # a lock of that name is another thing
        self.assertEqual(self.client.semaphore_status(name)["holders_total"], 0)
        permit = self.client.acquire_permit(name, limit=1, wait="1s")
        permit.release()
        for bad, error in ((0, ValueError), (10001, ValueError), ("2", TypeError), (True, TypeError)):
            with self.assertRaises(error):
                self.client.acquire_permit(name, limit=bad)

    def test_guarded_write_carries_the_lease(self):
        name = unique("guarded")
        with self.client.lock(name) as lease:
            resp = lease.request("PUT", "/store/" + name, "v1").raise_for_status()
        self.assertEqual(resp.status, 201)
        self.assertEqual(self.store.objects["/" + name], (b"v1", str(lease.token)))
        resp = lease.request("PUT", "/store/" + name, "late")  # released: refused by the guard
        self.assertEqual(resp.status, 409)
        self.assertRaises(leasegate.StaleToken, resp.raise_for_status)
        self.assertEqual(self.store.objects["/" + name][0], b"v1")

    def test_failover_past_a_closed_port(self):
        client = leasegate.Client("%s,%s" % (closed_port_url(), self.server.url))
        with client.lock(unique("failover")) as lease:
            self.assertEqual(lease.server, self.server.url)

    def test_a_silent_server_is_left_after_the_first_byte_timeout(self):
        """Issue 37: a server that accepts and never answers (paused) costs the first-byte
        timeout and a /readyz that gets no answer either, not the request's timeout."""
        with Silent() as silent:
            client = leasegate.Client([silent.url, self.server.url], timeout="60s", first_byte_timeout="300ms")
            done = []
            t = threading.Thread(target=lambda: done.append(client.acquire(unique("silent"))))
            t.start()
            t.join(BOUND)  # the request's own timeout is 60 s: past BOUND, it waited for it
            self.assertTrue(done, "the client waited on the silent server")
            self.assertEqual(done[0].server, self.server.url)
            done[0].release()

    def test_a_long_poll_outlasts_the_first_byte_timeout(self):
        """A long-poll's answer comes only at its grant: the server says it is ready
        (/readyz), so the wait goes on, in the queue, across many first-byte timeouts."""
        name = unique("long-poll")
        holder = self.client.acquire(name, ttl="30s")
        before = self.server.metric("leasegate_waiter_disconnects_total")
        client = leasegate.Client(self.server.url, first_byte_timeout="200ms")
        got = []
        t = threading.Thread(target=lambda: got.append(client.acquire(name, wait="30s")))
        t.start()
        wait_for(lambda: self.client.status(name)["waiters"] == 1, "the waiter")
        time.sleep(1.0)  # several first-byte timeouts pass while it waits
        holder.release()
        t.join(BOUND)
        self.assertTrue(got, "no grant")
        self.assertEqual(self.server.metric("leasegate_waiter_disconnects_total"), before,
                         "the long-poll was given up and sent again")
        got[0].release()

    def test_no_server_answering_is_unavailable(self):
        client = leasegate.Client([closed_port_url(), closed_port_url()], retry_for="200ms")
        with self.assertRaises(leasegate.Unavailable) as cm:
            client.acquire(unique("nobody"))
        self.assertIsNone(cm.exception.status)

    def test_overloaded_server_is_skipped_and_retries_keep_the_request_id(self):
        busy = Recorder(503)
        try:
            lease = leasegate.Client([busy.url, self.server.url]).acquire(unique("busy"))
            self.assertEqual(lease.server, self.server.url)
            lease.release()
            self.assertEqual(len(busy.bodies), 1)
            with self.assertRaises(leasegate.Overloaded):
                leasegate.Client(busy.url, retry_for="300ms").acquire("busy/only")
        finally:
            busy.stop()
        ids = {body["request_id"] for body in busy.bodies[1:]}
        self.assertGreater(len(busy.bodies), 2)
        self.assertEqual(len(ids), 1, "every retry of one acquire sends the same request_id")
        self.assertRegex(ids.pop(), r"^[\x21-\x7e]{1,64}$")

    def test_retry_after_a_lost_answer_gets_the_same_grant(self):
        proxy = Recorder(forward=self.server.url)
        name = unique("lost-answer")
        try:
            lease = leasegate.Client(proxy.url).acquire(name, ttl="30s")
            first, retry = proxy.bodies[:2]
            self.assertEqual(first["request_id"], retry["request_id"])
            holder = self.client.status(name)["holder"]
            self.assertEqual((holder["token"], holder["count"]), (lease.token, 1))
            lease.release()
        finally:
            proxy.stop()
        self.assertFalse(self.client.status(name)["held"])

    def test_a_value_write_whose_answer_was_lost_is_written_once(self):
        proxy = Recorder(forward=self.server.url, drop="PUT")
        name = unique("lost-value")
        try:
            lease = leasegate.Client(proxy.url).acquire(name, ttl="30s")
            answer = lease.set_value({"n": 1}, if_version=0)
            self.assertEqual(answer, {"name": name, "value_version": 1, "token": lease.token})
            puts = [b for b, m in zip(proxy.bodies, proxy.methods) if m == "PUT"]
            self.assertEqual(len(puts), 2, "the write whose answer was lost is sent again")
            self.assertEqual(puts[0]["request_id"], puts[1]["request_id"])
            lease.set_value({"n": 2})
            puts = [b for b, m in zip(proxy.bodies, proxy.methods) if m == "PUT"]
            self.assertNotEqual(puts[2]["request_id"], puts[0]["request_id"], "a request_id per write")
            self.assertEqual(self.client.value(name)["value_version"], 2)
            lease.release()
        finally:
            proxy.stop()

    def test_a_bare_number_as_a_duration_is_refused_before_any_request(self):
        recorder = Recorder(503)
        try:
            client = leasegate.Client(recorder.url)
            for options in ({"ttl": 15}, {"wait": 0}, {"wait": 1.5}, {"ttl": "15"}, {"ttl": "15000"}):
                with self.subTest(options=options), self.assertRaises(ValueError) as cm:
                    client.acquire(unique("bare"), **options)
                self.assertIn("no unit", str(cm.exception))
            with self.assertRaises(ValueError):
                client.lock(unique("bare"), ttl=30).__enter__()
            self.assertEqual(recorder.bodies, [], "a refused duration sent a request")
        finally:
            recorder.stop()
        for options in ({"timeout": 5}, {"retry_for": 5.0}):
            with self.subTest(options=options):
                self.assertRaises(ValueError, leasegate.Client, self.server.url, **options)
        name = unique("bare")
        lease = self.client.acquire(name, ttl="2s")
        try:
            self.assertRaises(ValueError, lease.renew, ttl=10)
            self.assertRaises(ValueError, lease.request, "GET", "/healthz", timeout=5)
            self.assertTrue(lease.valid)
        finally:
            lease.release()

    def test_fractions_and_timedeltas_reach_the_server_in_milliseconds(self):
        name = unique("units")
        lease = self.client.acquire(name, ttl="1.5s")
        self.assertEqual(lease.ttl, 1.5)
        self.assertEqual(self.client.status(name)["holder"]["ttl_ms"], 1500)
        lease.renew(ttl=datetime.timedelta(minutes=2))
        self.assertEqual(self.client.status(name)["holder"]["ttl_ms"], 120000)
        lease.release()

    def test_fence_takes_the_token_as_int_or_decimal_string(self):
        resource = unique("fence-types")
        with self.client.lock(unique("fence-types")) as lease:
            self.assertEqual(self.client.fence(resource, str(lease.token))["max_token"], lease.token)
            self.assertEqual(self.client.fence(resource, lease.token)["max_token"], lease.token)
        for bad in (None, True, "12a", "-1", 1.0):
            with self.subTest(token=bad):
                self.assertRaises(TypeError, self.client.fence, resource, bad)

    def test_a_block_interrupted_by_keyboard_interrupt_releases_and_lets_it_through(self):
        name = unique("interrupt")
        with self.assertRaises(KeyboardInterrupt):
            with self.client.lock(name, ttl="15s"):
                raise KeyboardInterrupt
        self.assertFalse(self.client.status(name)["held"])

    def test_list_follows_pages(self):
        prefix = unique("list") + "/"
        names = [prefix + n for n in ("a", "b", "c")]
        for name in names:
            self.client.acquire(name).release()
        listed = [lock["name"] for lock in self.client.list(prefix, page_size=2)]
        self.assertEqual(listed, names)


class LeaseLossTest(unittest.TestCase):
    """A server of its own, since it is stopped (SIGSTOP) for longer than the TTL."""

    def setUp(self):
        self.store = Store()
        self.server = Server("--guard", "/store/=%s/" % self.store.url)

    def tearDown(self):
        self.server.stop()
        self.store.stop()

    def test_stopped_server_loses_the_lease_and_the_block_raises(self):
        name = unique("stopped")
        lost = []
        client = leasegate.Client(self.server.url)
        with self.assertRaises(leasegate.LeaseLost) as cm:
            with client.lock(name, ttl="600ms", on_lost=lost.append) as lease:
                lease.request("PUT", "/store/" + name, "v1").raise_for_status()
                self.server.signal(signal.SIGSTOP)  # renewals now go unanswered
                try:
                    wait_for(lambda: lost, "on_lost")
                    self.assertFalse(lease.valid)
                finally:
                    self.server.signal(signal.SIGCONT)
                newer = leasegate.Client(self.server.url).acquire(name, wait="10s")
                resp = lease.request("PUT", "/store/" + name, "v2")
                self.assertEqual(resp.status, 409)
                self.assertRaises(leasegate.StaleToken, resp.raise_for_status)
                newer.release()
        self.assertIs(cm.exception.lease, lease)
        self.assertEqual(len(lost), 1)
        self.assertEqual(self.store.objects["/" + name][0], b"v1")


@unittest.skipUnless(shutil.which("openssl"), "the openssl command is missing")
class TlsTest(unittest.TestCase):
    """An HTTPS server (--tls-cert/--tls-key) whose certificate a private CA signed."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="leasegate-pyclient-tls-")
        cls.ca, cert, key = make_pki(cls.dir)
        cls.server = Server("--tls-cert", cert, "--tls-key", key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_cafile_verifies_the_server(self):
        self.assertTrue(self.server.url.startswith("https://"))
        client = leasegate.Client(self.server.url, cafile=self.ca)
        name = unique("tls")
        with client.lock(name, ttl="2s") as lease:
            time.sleep(1.0)  # the watchdog renews over TLS too
            self.assertTrue(lease.valid)
            self.assertEqual(client.status(name)["holder"]["token"], lease.token)
        self.assertFalse(client.status(name)["held"])

    def test_without_the_ca_the_failure_is_raised_at_once_with_the_cli_explanation(self):
        # Through a proxy that counts connections: a failure retried for retry_for
        # (30 s) would make many; raised at once, it makes exactly one.
        proxy = CountingProxy(("127.0.0.1", int(self.server.url.rsplit(":", 1)[1])))
        try:
            client = leasegate.Client("https://127.0.0.1:%d" % proxy.port, retry_for="30s")
            name = unique("tls")
            with self.assertRaises(leasegate.TLSVerificationError) as caught:
                client.acquire(name, wait="30s")
        finally:
            proxy.stop()
        self.assertEqual(proxy.connections, 1)
        error = caught.exception
        self.assertIsInstance(error, leasegate.Unavailable)
        self.assertIsNone(error.status)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(error))
        self.assertIn("a server whose certificate a private CA signed needs cafile=PEM or $LEASEGATE_CACERT",
                      str(error))
        self.assertFalse(leasegate.Client(self.server.url, cafile=self.ca).status(name)["held"])

    def test_a_server_failing_verification_is_passed_over_for_the_next(self):
        plain = Server()
        try:
            client = leasegate.Client([self.server.url, plain.url])
            with client.lock(unique("tls-next")) as lease:
                self.assertEqual(lease.server, plain.url)
        finally:
            plain.stop()

    def test_a_guarded_request_failing_verification_says_why(self):
        client = leasegate.Client(self.server.url, cafile=self.ca)
        lease = client.acquire(unique("tls-request"))
        try:
            lease._client = leasegate.Client(self.server.url)  # forgets the CA
            lease._endpoint = lease._client._endpoints[0]
            with self.assertRaises(leasegate.TLSVerificationError) as caught:
                lease.request("GET", "/healthz")
            self.assertIn("needs cafile=PEM", str(caught.exception))
        finally:
            lease._client = client
            lease._endpoint = client._endpoints[0]
            lease.release()


class KeyTest(unittest.TestCase):
    """A server with --auth-file: the key goes with every request (key= or $LEASEGATE_KEY)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="leasegate-pyclient-keys-")
        out = subprocess.run([os.environ["LEASEGATE_BIN"], "keygen", "app", "client", "py/"], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        cls.key = out[0]
        keys = os.path.join(cls.dir, "keys")
        with open(keys, "w") as f:
            f.write(out[1] + "\n")
        cls.server = Server("--auth-file", keys)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_the_key_goes_with_every_request(self):
        client = leasegate.Client(self.server.url, key=self.key)
        name = unique("py/key")
        with client.lock(name, ttl="2s") as lease:
            time.sleep(1.0)  # renewals carry it too
            self.assertTrue(lease.valid)
        self.assertFalse(client.status(name)["held"])
        with self.assertRaises(leasegate.Forbidden):
            client.acquire(unique("other"))

    def test_the_key_from_the_environment_and_none(self):
        os.environ["LEASEGATE_KEY"] = self.key
        try:
            self.assertFalse(leasegate.Client(self.server.url).status(unique("py/env"))["held"])
        finally:
            del os.environ["LEASEGATE_KEY"]
        with self.assertRaises(leasegate.Unauthorized):
            leasegate.Client(self.server.url).acquire(unique("py/none"))


if __name__ == "__main__":
    unittest.main()
