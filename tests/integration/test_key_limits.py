"""Per-key limits: a key's requests hold and wait for at most max_held locks together and
wait in at most max_waiters queues (per key in the --auth-file, else --key-max-held and
--key-max-waiters); 429 key_limit above them; retries and reentries pass; counts survive
kill -9 (the key's name is stored with each grant); other keys are not affected."""

import threading
import time
import unittest

from test_auth import KeyedTestCase, keygen, new_key


class KeyLimitTest(KeyedTestCase):
    def setUp(self):
        self.small, small = new_key("small", "client", "q/", "max_held=2", "max_waiters=1")
        self.big, big = new_key("big", "client", "q/")
        self.assertTrue(small.endswith(" q/ max_held=2 max_waiters=1"), small)
        self.start_keyed([small, big], "--key-max-held", "3")

    def test_held_and_waiting_limits_per_key(self):
        small, big = self.as_(self.small), self.as_(self.big)
        st, _, a = small.acquire("q/a", request_id="ra")
        self.assertEqual(st, 200, a)
        st, _, b = small.acquire("q/b")
        self.assertEqual(st, 200, b)
        st, _, body = small.acquire("q/c")
        self.assertEqual((st, body["error"], body["limit"], body["value"]), (429, "key_limit", "max_held", 2), body)
        self.assertFalse(big.get_lock("q/c")[2]["held"])
        self.assertEqual(small.acquire("q/a", request_id="ra")[2].get("token"), a["token"])  # replay
        self.assertEqual(small.acquire("q/a", lease=a["lease"])[0], 200)                  # reentry
        self.assertEqual(small.acquire("q/b", owner="someone")[0], 409)               # busy: lock_held
        # Another key has its own count (the server's default, 3).
        big_leases = {}
        for name in ("q/x", "q/y", "q/z"):
            st, _, g = big.acquire(name, ttl_ms=60000)
            self.assertEqual(st, 200, g)
            big_leases[name] = g["lease"]
        self.assertEqual(big.acquire("q/w")[0], 429)
        # A release makes room (twice: the reentry counted once on the lease).
        self.assertEqual(small.release("q/a", a["lease"])[0], 200)
        self.assertEqual(small.release("q/a", a["lease"])[0], 200)
        st, _, c = small.acquire("q/c")
        self.assertEqual(st, 200, c)
        self.assertEqual(small.release("q/c", c["lease"])[0], 200)
        # Waiting counts: one queue at most, and toward max_held with what is held.
        box = {}
        waiter = self.as_(self.small, timeout=60)
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("q/x", wait_ms=20000)))
        t.start()
        for _ in range(200):
            if big.get_lock("q/x")[2].get("waiters") == 1:
                break
            time.sleep(0.02)
        st, _, body = small.acquire("q/y", wait_ms=1000)
        self.assertEqual((st, body.get("limit")), (429, "max_held"), body)  # 1 held + 1 waiting
        self.assertEqual(small.release("q/b", b["lease"])[0], 200)
        st, _, body = small.acquire("q/y", wait_ms=1000)
        self.assertEqual((st, body.get("limit")), (429, "max_waiters"), body)
        # The waiter is granted: it now holds q/x, and waits no more.
        self.assertEqual(big.release("q/x", big_leases["q/x"])[0], 200)
        t.join(30)
        st, _, gx = box["r"]
        self.assertEqual(st, 200, gx)
        st, _, gw = small.acquire("q/w")
        self.assertEqual(st, 200, gw)  # 2 held: q/x and q/w
        self.assertEqual(small.acquire("q/v")[0], 429)
        self.assertEqual(small.release("q/x", gx["lease"])[0], 200)
        self.assertEqual(small.acquire("q/v")[0], 200)

    def test_a_lease_that_ran_out_but_was_not_ended_yet_is_no_way_past_the_limit(self):
        """An acquire of a lock whose lease has just run out (the tick has not ended it
        yet) ends it and is granted: it must count as a grant, not as a 'lock_held'
        answer. Six clients of a key at its limit hammer such locks, 20 rounds."""
        small, big = self.as_(self.small), self.as_(self.big)
        self.assertEqual(small.acquire("q/1", ttl_ms=600000)[0], 200)
        self.assertEqual(small.acquire("q/2", ttl_ms=600000)[0], 200)
        granted = []
        for rnd in range(20):
            name = "q/L%d" % rnd
            self.assertEqual(big.acquire(name, ttl_ms=100)[0], 200)
            until = time.monotonic() + 0.25

            def hammer():
                c = self.as_(self.small, timeout=10)
                while time.monotonic() < until:
                    st, _, body = c.acquire(name)
                    if st == 200:
                        granted.append(body["name"])
            threads = [threading.Thread(target=hammer) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        self.assertEqual(granted, [], "granted beyond max_held=2")

    def test_counts_survive_a_kill_9(self):
        small = self.as_(self.small)
        self.assertEqual(small.acquire("q/1", ttl_ms=60000)[0], 200)
        st, _, g2 = small.acquire("q/2", ttl_ms=60000)
        self.assertEqual(st, 200)
        self.srv.kill9()
        self.srv.start()
        small = self.as_(self.small)
        self.assertEqual(small.acquire("q/3")[0], 429)
        self.assertEqual(small.release("q/2", g2["lease"])[0], 200)
        self.assertEqual(small.acquire("q/3")[0], 200)

    def test_bad_limits(self):
        rc, _, err = keygen("k", "client", "q/", "max_held=0")
        self.assertEqual(rc, 2)
        self.assertIn("max_held=N", err)
        rc, _, err = keygen("k", "client", "q/", "limit=3")
        self.assertEqual(rc, 2)


if __name__ == "__main__":
    unittest.main()
