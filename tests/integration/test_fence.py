"""Fence: per-resource high-water marks; stale tokens refused; max survives restart and kill -9."""

import threading
import time
import unittest

import harness


# Tokens above the last one issued are refused (FenceLimitTests); these tests use made-up
# tokens, so the server starts with the counter at FLOOR, as if that many had been issued.
FLOOR = 2 ** 62


class FenceTests(unittest.TestCase):
    def setUp(self):
        self.srv = harness.Server(extra_args=["--min-token", str(FLOOR)])

    def tearDown(self):
        self.srv.cleanup()

    def accepted(self, res, token, expect_max=None):
        st, hdrs, b = self.srv.fence(res, token)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["resource"], res)
        self.assertIs(b["accepted"], True)
        self.assertEqual(b["max_token"], token if expect_max is None else expect_max)
        return b

    def stale(self, res, token, max_token):
        st, hdrs, b = self.srv.fence(res, token)
        self.assertEqual(st, 409, b)
        self.assertEqual(b["error"], "stale_token")
        self.assertIsInstance(b["message"], str)
        self.assertEqual(b["resource"], res)
        self.assertEqual(b["token"], token)
        self.assertEqual(b["max_token"], max_token)
        self.assertNotEqual(b.get("accepted"), True)
        return b

    def test_sequence(self):
        r = "db/invoices"
        self.accepted(r, 5)
        self.accepted(r, 5)          # equal accepted again
        self.accepted(r, 7)          # higher accepted
        self.stale(r, 6, 7)          # lower refused
        self.stale(r, 1, 7)
        self.accepted(r, 7)
        self.accepted(r, 1000)
        self.stale(r, 999, 1000)

    def test_first_token_any_value(self):
        self.accepted("first/one", 1)
        self.accepted("first/big", 123456789)
        self.stale("first/big", 1, 123456789)

    def test_resources_independent(self):
        self.accepted("ind/a", 10)
        self.accepted("ind/b", 3)
        self.stale("ind/b", 2, 3)
        self.stale("ind/a", 9, 10)
        self.accepted("ind/a/b", 1)  # a resource under another is its own

    def test_large_tokens_exact(self):
        big = 2 ** 61 + 1  # not representable as a double
        self.accepted("big/r", big)
        self.stale("big/r", big - 1, big)
        self.accepted("big/r", FLOOR)
        self.stale("big/r", big, FLOOR)

    def test_percent_encoded_resource(self):
        self.accepted("enc/res", 4)
        st, _, b = self.srv.request("POST", "/v1/fence/enc%2Fres", body={"token": 3})
        self.assertEqual(st, 409, b)
        self.assertEqual((b["resource"], b["max_token"]), ("enc/res", 4))

    def test_fence_with_lock_tokens(self):
        """The intended use: holder tokens in grant order; a superseded holder's token is refused."""
        st, _, a = self.srv.acquire("fl/lock", "a", ttl_ms=150)
        self.assertEqual(st, 200)
        time.sleep(0.5)
        st, _, b = self.srv.acquire("fl/lock", "b", ttl_ms=60000)
        self.assertEqual(st, 200)
        self.accepted("fl/res", b["token"])
        self.stale("fl/res", a["token"], b["token"])

    def test_survives_sigterm(self):
        self.accepted("persist/a", 7)
        self.accepted("persist/b", 40)
        self.assertEqual(self.srv.stop(), 0)
        self.srv.start()
        self.stale("persist/a", 6, 7)
        self.accepted("persist/a", 7)
        self.stale("persist/b", 39, 40)
        self.accepted("persist/b", 41)

    def test_survives_kill9(self):
        self.accepted("crash/a", 7)
        self.accepted("crash/a", 9)
        self.srv.kill9()
        self.srv.start()
        self.stale("crash/a", 8, 9)
        self.accepted("crash/a", 9)

    def test_kill9_under_load(self):
        """Threads raise maxima while the server is kill -9'd: every acknowledged max survives."""
        port = self.srv.port
        acked = {}  # resource -> highest token acknowledged with 200
        lock = threading.Lock()
        stop = threading.Event()

        def worker(idx):
            c = harness.Client(port, timeout=10)
            res = "load/%d" % idx
            tok = 1
            try:
                while not stop.is_set() and tok < 200000:
                    st, _, b = c.fence(res, tok)
                    if st != 200:
                        return
                    with lock:
                        acked[res] = max(acked.get(res, 0), b["max_token"])
                    tok += 1
            except Exception:
                pass
            finally:
                c.close()

        ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
        for t in ts:
            t.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(acked.values()) < 400:
            time.sleep(0.05)
        self.srv.kill9()
        stop.set()
        for t in ts:
            t.join(15)
        self.assertTrue(acked)
        self.srv.start()
        for res, mx in acked.items():
            st, _, b = self.srv.fence(res, mx - 1) if mx > 1 else (409, None, {"max_token": mx})
            self.assertEqual(st, 409, (res, mx, b))
            self.assertGreaterEqual(b["max_token"], mx, (res, b))
            # At most the one in-flight request per worker may have landed unacknowledged.
            self.assertLessEqual(b["max_token"], mx + 1, (res, b))


class FenceLimitTests(unittest.TestCase):
    """Tokens that were never issued, and resources that stay idle."""

    def test_a_token_never_issued_is_refused_and_poisons_nothing(self):
        with harness.Server() as srv:
            st, _, g = srv.acquire("real", "o")
            self.assertEqual(st, 200, g)
            st, _, b = srv.fence("victim", 2 ** 63 - 1)
            self.assertEqual(st, 400, b)
            self.assertEqual((b["error"], b["field"], b["last_token"]), ("bad_request", "token", g["token"]))
            st, _, b = srv.fence("victim", g["token"] + 1)
            self.assertEqual(st, 400, b)
            # The real holder's token still works: the forged one left no mark.
            st, _, b = srv.fence("victim", g["token"])
            self.assertEqual((st, b["max_token"]), (200, g["token"]), b)

    def test_idle_resources_are_forgotten_but_marks_never_go_back(self):
        with harness.Server(extra_args=["--forget-idle-after", "1", "--max-fences", "2",
                                        "--min-token", "100"]) as srv:
            self.assertEqual(srv.fence("idle/a", 50)[0], 200)
            self.assertEqual(srv.fence("idle/b", 60)[0], 200)
            st, _, b = srv.fence("idle/c", 70)
            self.assertEqual(st, 503, b)  # --max-fences
            srv.wait_until(lambda: srv.metric("leasegate_fence_resources") == 0, timeout=10,
                           what="idle resources to be forgotten")
            # Forgotten, yet a stale token is still refused (the mark lives on as a floor) ...
            st, _, b = srv.fence("idle/a", 49)
            self.assertEqual((st, b.get("max_token")), (409, 50), b)
            # ... across kill -9 too, and the room is back for new resources.
            srv.kill9()
            srv.start()
            st, _, b = srv.fence("idle/b", 59)
            self.assertEqual((st, b.get("max_token")), (409, 60), b)
            self.assertEqual(srv.fence("idle/c", 70)[0], 200)
            self.assertEqual(srv.fence("idle/a", 50)[0], 200)


if __name__ == "__main__":
    harness.run_tests()
