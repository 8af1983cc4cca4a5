"""Reentry: acquiring with the lease you hold raises count, keeps token, refreshes TTL."""

import time
import unittest

import harness


class ReentryTests(harness.ServerTestCase):
    def get(self, name):
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(st, 200, g)
        return g

    def test_reentry_count_token_ttl(self):
        name = "re/basic"
        st, _, b1 = self.srv.acquire(name, "svc", ttl_ms=1000, metadata={"a": 1})
        self.assertEqual(st, 200, b1)
        self.assertEqual(b1["count"], 1)
        time.sleep(0.3)
        st, _, b2 = self.srv.acquire(name, "svc", lease=b1["lease"], ttl_ms=5000)
        self.assertEqual(st, 200, b2)
        self.assertEqual(b2["count"], 2)
        self.assertEqual(b2["token"], b1["token"])
        self.assertEqual(b2["lease"], b1["lease"])
        self.assertEqual(b2["name"], name)
        self.assertEqual(b2["ttl_ms"], 5000)
        self.assertEqual(b2["acquired_at_ms"], b1["acquired_at_ms"], "reentry must not change acquired_at_ms")
        self.assertGreater(b2["expires_at_ms"], b1["expires_at_ms"] + 3000, "TTL not refreshed")
        g = self.get(name)
        self.assertTrue(g["held"])
        self.assertEqual(g["holder"]["count"], 2)
        self.assertEqual(g["holder"]["token"], b1["token"])
        self.assertEqual(g["holder"]["expires_at_ms"], b2["expires_at_ms"])
        self.assertEqual(g["last_token"], b1["token"])
        # Outlives the first TTL thanks to the refresh.
        time.sleep(1.0)
        self.assertTrue(self.get(name)["held"])

        st, _, r = self.srv.release(name, b1["lease"])
        self.assertEqual(st, 200, r)
        self.assertEqual((r["name"], r["released"], r["count"]), (name, False, 1))
        g = self.get(name)
        self.assertTrue(g["held"])
        self.assertEqual(g["holder"]["count"], 1)
        self.assertEqual(g["holder"]["token"], b1["token"])
        # Still renewable: it still holds.
        st, _, rn = self.srv.renew(name, b1["lease"])
        self.assertEqual(st, 200, rn)
        self.assertEqual(rn["token"], b1["token"])

        st, _, r = self.srv.release(name, b1["lease"])
        self.assertEqual(st, 200, r)
        self.assertEqual((r["released"], r["count"]), (True, 0))
        g = self.get(name)
        self.assertFalse(g["held"])
        self.assertIsNone(g["holder"])
        self.assertEqual(g["last_token"], b1["token"])
        st, _, r = self.srv.release(name, b1["lease"])
        self.assertEqual(st, 409, r)
        self.assertEqual((r["error"], r["reason"]), ("not_holder", "released"))

    def test_reentry_without_ttl_keeps_the_lease_ttl(self):
        # A reentry that names no ttl_ms must not shorten a long lease to the 30 s default.
        st, _, a = self.srv.acquire("re/keep-ttl", ttl_ms=600000)
        self.assertEqual(st, 200, a)
        st, _, b = self.srv.acquire("re/keep-ttl", lease=a["lease"])
        self.assertEqual(st, 200, b)
        self.assertEqual(b["count"], 2)
        self.assertEqual(b["ttl_ms"], 600000)
        self.assertGreaterEqual(b["expires_at_ms"], a["expires_at_ms"])
        st, _, c = self.srv.acquire("re/keep-ttl", lease=a["lease"], ttl_ms=5000)
        self.assertEqual((st, c["ttl_ms"], c["count"]), (200, 5000, 3))

    def test_deep_reentry(self):
        name = "re/deep"
        st, _, b = self.srv.acquire(name, "svc", ttl_ms=60000)
        self.assertEqual(st, 200, b)
        for depth in range(2, 11):
            st, _, r = self.srv.acquire(name, "svc", lease=b["lease"], ttl_ms=60000)
            self.assertEqual(st, 200, r)
            self.assertEqual((r["count"], r["token"]), (depth, b["token"]))
        for left in range(9, -1, -1):
            st, _, r = self.srv.release(name, b["lease"])
            self.assertEqual(st, 200, r)
            self.assertEqual((r["count"], r["released"]), (left, left == 0))
        self.assertFalse(self.get(name)["held"])

    def test_reentry_never_waits_even_with_waiters(self):
        import threading
        name = "re/with-waiter"
        st, _, b = self.srv.acquire(name, "svc", ttl_ms=60000)
        self.assertEqual(st, 200, b)
        out = {}

        def waiter():
            c = self.srv.new_client()
            try:
                out["resp"] = c.acquire(name, "other", ttl_ms=60000, wait_ms=15000)
            finally:
                c.close()

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="waiter queued")
        t0 = time.monotonic()
        st, _, r = self.srv.acquire(name, "svc", lease=b["lease"], ttl_ms=60000, wait_ms=5000)
        self.assertLess(time.monotonic() - t0, 2.0, "reentry waited")
        self.assertEqual(st, 200, r)
        self.assertEqual((r["count"], r["token"]), (2, b["token"]))
        self.assertEqual(self.srv.waiters(name), 1)
        st, _, r = self.srv.release(name, b["lease"])
        self.assertEqual((st, r["released"]), (200, False))
        time.sleep(0.2)
        self.assertNotIn("resp", out, "waiter granted while the holder still had count 1")
        st, _, r = self.srv.release(name, b["lease"])
        self.assertEqual((st, r["released"]), (200, True))
        t.join(10)
        self.assertEqual(out["resp"][0], 200, out)
        self.assertGreater(out["resp"][2]["token"], b["token"])
        self.srv.release(name, out["resp"][2]["lease"])

    def test_reentry_with_expired_lease_refused(self):
        name = "re/expired"
        st, _, b = self.srv.acquire(name, "svc", ttl_ms=150)
        self.assertEqual(st, 200, b)
        time.sleep(0.6)
        st, _, r = self.srv.acquire(name, "svc", lease=b["lease"], ttl_ms=60000)
        self.assertEqual(st, 409, r)
        self.assertEqual((r["error"], r["reason"]), ("not_holder", "expired"))
        self.assertFalse(self.get(name)["held"])

    def test_reentry_on_free_lock_with_released_lease(self):
        name = "re/released"
        st, _, b = self.srv.acquire(name, "svc", ttl_ms=60000)
        self.srv.release(name, b["lease"])
        st, _, r = self.srv.acquire(name, "svc", lease=b["lease"])
        self.assertEqual(st, 409, r)
        self.assertEqual((r["error"], r["reason"]), ("not_holder", "released"))
        g = self.get(name)
        self.assertFalse(g["held"])
        self.assertEqual(g["last_token"], b["token"])


if __name__ == "__main__":
    harness.run_tests()
