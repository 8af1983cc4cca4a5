"""Leases: TTL expiry, handing over to a waiter, renew, wrong-lease errors, not_holder reasons."""

import threading
import time
import unittest

import harness


class LeaseTests(harness.ServerTestCase):
    def acquire_ok(self, name, owner="lease-test", **kw):
        st, _, b = self.srv.acquire(name, owner, **kw)
        self.assertEqual(st, 200, b)
        for k in ("name", "owner", "lease", "token", "ttl_ms", "acquired_at_ms", "expires_at_ms",
                  "count", "metadata"):
            self.assertIn(k, b)
        self.assertEqual(b["name"], name)
        self.assertEqual(b["owner"], owner)
        return b

    def assert_not_holder(self, st, body, name, reasons):
        self.assertEqual(st, 409, body)
        self.assertEqual(body["error"], "not_holder", body)
        self.assertIsInstance(body.get("message"), str)
        self.assertEqual(body.get("name"), name, body)
        if isinstance(reasons, str):
            reasons = (reasons,)
        self.assertIn(body.get("reason"), reasons, body)

    def holder_of(self, name):
        st, _, g = self.srv.get_lock(name)
        self.assertEqual(st, 200, g)
        return g

    # ------------------------------------------------------------------
    def test_grant_fields(self):
        t0 = harness.now_ms()
        b = self.acquire_ok("lease/fields", ttl_ms=5000, metadata={"host": "h1", "pid": 7})
        t1 = harness.now_ms()
        self.assertEqual(b["ttl_ms"], 5000)
        self.assertEqual(b["count"], 1)
        self.assertEqual(b["metadata"], {"host": "h1", "pid": 7})
        # Unix ms times, loosely.
        self.assertLessEqual(t0 - 2000, b["acquired_at_ms"])
        self.assertLessEqual(b["acquired_at_ms"], t1 + 2000)
        self.assertEqual(b["expires_at_ms"] - b["acquired_at_ms"], 5000)
        self.assertRegex(b["lease"], r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

    def test_default_ttl_is_30s(self):
        b = self.acquire_ok("lease/default-ttl")
        self.assertEqual(b["ttl_ms"], 30000)
        self.assertEqual(b["expires_at_ms"] - b["acquired_at_ms"], 30000)
        self.srv.release("lease/default-ttl", b["lease"])

    def test_ttl_expiry_frees_lock(self):
        name = "lease/expiry"
        b = self.acquire_ok(name, ttl_ms=60000)
        self.assertTrue(self.holder_of(name)["held"])
        # The short lease starts now that it was seen held: no race with a slow commit.
        st, _, b = self.srv.renew(name, b["lease"], ttl_ms=300)
        self.assertEqual(st, 200, b)
        # Wait (bounded) for the server to free it by itself.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            g = self.holder_of(name)
            if not g["held"]:
                break
            time.sleep(0.05)
        self.assertFalse(g["held"], g)
        self.assertIsNone(g["holder"])
        self.assertGreaterEqual(harness.now_ms(), b["expires_at_ms"] - 50,
                                "lock freed well before its expiry")
        self.assertEqual(g["last_token"], b["token"])
        b2 = self.acquire_ok(name, owner="second", ttl_ms=1000)
        self.assertGreater(b2["token"], b["token"])

    def test_waiter_granted_after_holder_ttl(self):
        name = "lease/expiry-waiter"
        holder = self.acquire_ok(name, owner="holder", ttl_ms=600)
        result = {}

        def waiter():
            c = self.srv.new_client()
            try:
                result["resp"] = c.acquire(name, "waiter", ttl_ms=5000, wait_ms=10000)
                result["at_ms"] = harness.now_ms()
            except Exception as e:  # reported below
                result["exc"] = e
            finally:
                c.close()

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        t.join(15)
        self.assertFalse(t.is_alive())
        self.assertNotIn("exc", result, result)
        st, _, b = result["resp"]
        self.assertEqual(st, 200, b)
        self.assertEqual(b["owner"], "waiter")
        self.assertGreater(b["token"], holder["token"])
        # Loose timing: not well before expiry, and within 2 s after it.
        self.assertGreaterEqual(result["at_ms"], holder["expires_at_ms"] - 100)
        self.assertLessEqual(result["at_ms"], holder["expires_at_ms"] + 2000)
        # The old holder's lease is now superseded.
        st, _, r = self.srv.renew(name, holder["lease"])
        self.assert_not_holder(st, r, name, "superseded")
        self.srv.release(name, b["lease"])

    def test_renew_extends(self):
        name = "lease/renewal"
        b = self.acquire_ok(name, ttl_ms=2000)
        time.sleep(0.2)
        st, _, r = self.srv.renew(name, b["lease"], ttl_ms=20000)
        self.assertEqual(st, 200, r)
        for k in ("name", "token", "ttl_ms", "expires_at_ms"):
            self.assertIn(k, r)
        self.assertNotIn("lease", r)
        self.assertEqual(r["name"], name)
        self.assertEqual(r["token"], b["token"])
        self.assertEqual(r["ttl_ms"], 20000)
        self.assertGreater(r["expires_at_ms"], b["expires_at_ms"] + 15000)
        g = self.holder_of(name)
        self.assertEqual(g["holder"]["expires_at_ms"], r["expires_at_ms"])
        self.assertEqual(g["holder"]["ttl_ms"], 20000)
        self.assertEqual(g["holder"]["token"], b["token"])
        # A renew without ttl_ms uses the lease's current ttl_ms (now 20000).
        st, _, r2 = self.srv.renew(name, b["lease"])
        self.assertEqual(st, 200, r2)
        self.assertEqual(r2["ttl_ms"], 20000)
        self.assertGreaterEqual(r2["expires_at_ms"], r["expires_at_ms"])
        # Lease now outlives the original 2 s TTL.
        time.sleep(2.3)
        g = self.holder_of(name)
        self.assertTrue(g["held"], g)
        self.assertEqual(g["holder"]["token"], b["token"])
        st, _, r2 = self.srv.release(name, b["lease"])
        self.assertEqual(st, 200, r2)

    def test_renew_default_ttl_is_leases_ttl(self):
        name = "lease/renew-default"
        b = self.acquire_ok(name, ttl_ms=4000)
        time.sleep(0.3)
        st, _, r = self.srv.renew(name, b["lease"])
        self.assertEqual(st, 200, r)
        self.assertEqual(r["ttl_ms"], 4000)
        self.assertGreaterEqual(r["expires_at_ms"], b["expires_at_ms"] + 200)
        self.assertLessEqual(r["expires_at_ms"], harness.now_ms() + 4000 + 1000)
        self.srv.release(name, b["lease"])

    def test_wrong_lease_leaves_state_unchanged(self):
        name = "lease/wrong"
        b = self.acquire_ok(name, ttl_ms=60000, metadata={"k": "v"})
        before = self.holder_of(name)
        bogus = harness.random_lease()
        st, _, r = self.srv.renew(name, bogus, ttl_ms=100)
        self.assert_not_holder(st, r, name, "unknown")
        self.assertNotIn(b["lease"], self.srv.last_text)
        st, _, r = self.srv.release(name, bogus)
        self.assert_not_holder(st, r, name, "unknown")
        self.assertNotIn(b["lease"], self.srv.last_text)
        # A lease of another lock is not a lease of this one.
        other = self.acquire_ok("lease/wrong-other", ttl_ms=60000)
        st, _, r = self.srv.release(name, other["lease"])
        self.assert_not_holder(st, r, name, "unknown")
        st, _, r = self.srv.renew(name, other["lease"])
        self.assert_not_holder(st, r, name, "unknown")
        self.assertEqual(self.holder_of(name), before)
        # And reentry with a foreign lease is refused too.
        st, _, r = self.srv.acquire(name, "intruder", lease=other["lease"])
        self.assert_not_holder(st, r, name, "unknown")
        self.assertEqual(self.holder_of(name), before)
        self.srv.release(name, b["lease"])
        self.srv.release("lease/wrong-other", other["lease"])

    def test_reason_expired(self):
        name = "lease/reason-expired"
        b = self.acquire_ok(name, ttl_ms=150)
        time.sleep(0.6)
        st, _, r = self.srv.renew(name, b["lease"])
        self.assert_not_holder(st, r, name, "expired")
        st, _, r = self.srv.release(name, b["lease"])
        self.assert_not_holder(st, r, name, "expired")
        st, _, r = self.srv.acquire(name, "lease-test", lease=b["lease"])
        self.assert_not_holder(st, r, name, "expired")
        self.assertFalse(self.holder_of(name)["held"])

    def test_reason_superseded(self):
        name = "lease/reason-superseded"
        b = self.acquire_ok(name, ttl_ms=150)
        time.sleep(0.6)
        b2 = self.acquire_ok(name, owner="newer", ttl_ms=60000)
        before = self.holder_of(name)
        st, _, r = self.srv.renew(name, b["lease"])
        self.assert_not_holder(st, r, name, "superseded")
        st, _, r = self.srv.release(name, b["lease"])
        self.assert_not_holder(st, r, name, "superseded")
        self.assertEqual(self.holder_of(name), before)
        # Still superseded after the newer holder released (it expired, someone else got it).
        self.srv.release(name, b2["lease"])
        st, _, r = self.srv.renew(name, b["lease"])
        self.assert_not_holder(st, r, name, "superseded")

    def test_reason_released(self):
        name = "lease/reason-released"
        b = self.acquire_ok(name, ttl_ms=60000)
        st, _, r = self.srv.release(name, b["lease"])
        self.assertEqual(st, 200, r)
        self.assertEqual((r["name"], r["released"], r["count"]), (name, True, 0))
        st, _, r = self.srv.renew(name, b["lease"])
        self.assert_not_holder(st, r, name, "released")
        st, _, r = self.srv.release(name, b["lease"])
        self.assert_not_holder(st, r, name, "released")
        # Released stays the reason even once someone else took the lock? The lease was
        # released by its holder, so "released" is the accurate reason.
        self.acquire_ok(name, owner="next", ttl_ms=60000)
        st, _, r = self.srv.renew(name, b["lease"])
        self.assert_not_holder(st, r, name, ("released",))

    def test_reason_unknown(self):
        name = "lease/reason-unknown"
        st, _, r = self.srv.renew(name, harness.random_lease())
        self.assert_not_holder(st, r, name, "unknown")
        st, _, r = self.srv.release(name, harness.random_lease())
        self.assert_not_holder(st, r, name, "unknown")
        self.assertFalse(self.holder_of(name)["held"])

    def test_garbage_lease(self):
        """openapi.yaml (LeaseId): malformed lease text is 400 bad_request naming `lease`;
        a well-formed id that does not hold the lock is 409 not_holder/unknown."""
        name = "lease/garbage"
        b = self.acquire_ok(name, ttl_ms=60000)
        before = self.holder_of(name)
        for garbage in ("not-a-uuid", "x" * 36, "00000000-0000-0000-0000-00000000000g", "",
                        b["lease"] + "0", b["lease"].replace("-", "")):
            for op in ("renew", "release"):
                st, _, r = self.srv.request("POST", "/v1/locks/%s/%s" % (name, op), body={"lease": garbage})
                self.assertEqual(st, 400, (op, garbage, r))
                self.assertEqual(r.get("error"), "bad_request", r)
                self.assertIn("lease", r.get("message", ""), r)
                self.assertEqual(r.get("field"), "lease", r)
            st, _, r = self.srv.acquire(name, "lease-test", lease=garbage)
            self.assertEqual(st, 400, ("acquire", garbage, r))
            self.assertEqual(r.get("field"), "lease", r)
        self.assertEqual(self.holder_of(name), before)
        self.srv.release(name, b["lease"])

    def test_lease_case_insensitive(self):
        """openapi.yaml: responses use lowercase lease ids; either case is accepted."""
        name = "lease/upper"
        b = self.acquire_ok(name, ttl_ms=60000)
        self.assertEqual(b["lease"], b["lease"].lower())
        st, _, r = self.srv.renew(name, b["lease"].upper(), ttl_ms=30000)
        self.assertEqual(st, 200, r)
        self.assertEqual(r["token"], b["token"])
        st, _, r = self.srv.release(name, b["lease"].upper())
        self.assertEqual(st, 200, r)
        self.assertTrue(r["released"])

    def test_release_with_waiter_hands_over(self):
        name = "lease/handover"
        b = self.acquire_ok(name, owner="first", ttl_ms=60000)
        out = {}

        def waiter():
            c = self.srv.new_client()
            try:
                out["resp"] = c.acquire(name, "second", ttl_ms=60000, wait_ms=10000)
            finally:
                c.close()

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="waiter queued")
        st, _, r = self.srv.release(name, b["lease"])
        self.assertEqual(st, 200, r)
        self.assertTrue(r["released"])
        t.join(10)
        st, _, b2 = out["resp"]
        self.assertEqual(st, 200, b2)
        self.assertGreater(b2["token"], b["token"])
        g = self.holder_of(name)
        self.assertEqual(g["holder"]["owner"], "second")
        self.assertEqual(g["waiters"], 0)
        st, _, r = self.srv.renew(name, b["lease"])
        self.assert_not_holder(st, r, name, "released")
        self.srv.release(name, b2["lease"])

    def test_many_deadlines_mixed(self):
        """Hundreds of leases with mixed TTLs, some renewed, some released, the rest expiring."""
        import random
        rng = random.Random(7)
        n = 300
        leases = []
        fate = {}
        # Each lease is renewed or released right after its grant (not after all grants),
        # so a slow machine cannot let it expire first.
        for i in range(n):
            name = "lease/mixed/%03d" % i
            b = self.acquire_ok(name, ttl_ms=rng.randint(500, 1200))
            kind = i % 3
            if kind == 0:
                st, _, r = self.srv.renew(name, b["lease"], ttl_ms=600000)
                self.assertEqual(st, 200, r)
                fate[name] = "renewed"
            elif kind == 1:
                st, _, r = self.srv.release(name, b["lease"])
                self.assertEqual(st, 200, r)
                fate[name] = "released"
            else:
                fate[name] = "expires"
            leases.append((name, b))
        latest = max(b["expires_at_ms"] for _, b in leases)
        while harness.now_ms() < latest + 700:
            time.sleep(0.05)
        for name, b in leases:
            g = self.holder_of(name)
            if fate[name] == "renewed":
                self.assertTrue(g["held"], (name, g))
                self.assertEqual(g["holder"]["token"], b["token"])
                self.srv.release(name, b["lease"])
            else:
                self.assertFalse(g["held"], (name, fate[name], g))
                st, _, r = self.srv.renew(name, b["lease"])
                self.assert_not_holder(st, r, name, "released" if fate[name] == "released" else "expired")


if __name__ == "__main__":
    harness.run_tests()
