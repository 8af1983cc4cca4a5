"""The nemesis checker (history.py) on made-up histories: a clean one passes, and each
promise it checks, broken once, is reported. No server is started."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from history import Op, check  # noqa: E402

T0 = 1_800_000_000.0


def op(kind, lock, t_inv, t_ack, status, body=None, **args):
    o = Op(kind, lock, **args)
    o.t_inv = T0 + t_inv
    if t_ack is not None:
        o.t_ack, o.status = T0 + t_ack, status
        o.body = body or {}
    return o


def grant(lock, lease, token, t_inv, t_ack, ttl=4.0, acquired=None):
    acquired = t_ack if acquired is None else acquired
    return op("acquire", lock, t_inv, t_ack, 200,
              {"lease": lease, "token": token, "acquired_at_ms": (T0 + acquired) * 1000,
               "expires_at_ms": (T0 + acquired + ttl) * 1000})


def clean():
    """Two holders of x one after the other, fence checks, reads, a write order."""
    return [
        grant("x", "L1", 1, 0.0, 0.1),
        op("fence", "f/x", 0.2, 0.3, 200, {"accepted": True, "max_token": 1}, token=1),
        op("read", "x", 0.4, 0.5, 200, {"held": True, "holder": {"token": 1}, "last_token": 1}),
        op("renew", "x", 0.6, 0.7, 200, {"token": 1, "expires_at_ms": (T0 + 4.7) * 1000}, lease="L1"),
        op("release", "x", 1.0, 1.1, 200, {}, lease="L1", token=1),
        grant("x", "L2", 2, 1.2, 1.3),
        op("read", "x", 1.4, 1.5, 200, {"held": True, "holder": {"token": 2}, "last_token": 2}),
        op("fence", "f/x", 1.6, 1.7, 409, {"max_token": 2}, token=1),
        op("fence", "f/x", 1.55, 1.6, 200, {"accepted": True, "max_token": 2}, token=2),
        op("acquire", "x", 1.8, None, None),  # never answered: proves nothing
    ]


class CheckerTest(unittest.TestCase):
    def assert_found(self, ops, rule, applied=None):
        found = check(ops, applied)
        self.assertTrue(any(v.startswith(rule + ":") for v in found), "%s not found in %r" % (rule, found))

    def test_a_clean_history_passes(self):
        self.assertEqual(check(clean(), {"/x": [1, 1, 2]}), [])

    def test_a_token_granted_twice(self):
        self.assert_found(clean() + [grant("y", "L9", 2, 2.0, 2.1)], "tokens")

    def test_a_token_going_backwards(self):
        self.assert_found(clean() + [grant("y", "L9", 0, 2.0, 2.1)], "tokens")

    def test_a_replay_counts_from_the_first_try_of_its_request_id(self):
        first = op("acquire", "x", 0.0, None, None, rid="r1")
        other = grant("y", "L9", 2, 0.1, 0.2)
        replay = grant("x", "L1", 1, 0.5, 0.6, acquired=0.05)
        replay.args["rid"] = "r1"
        self.assertEqual(check([first, other, replay]), [])
        self.assert_found([other, replay], "tokens")

    def test_overlapping_holds(self):
        ops = [grant("x", "L1", 1, 0.0, 0.1), grant("x", "L2", 2, 0.5, 0.6)]
        self.assert_found(ops, "overlap")

    def test_a_release_that_may_have_ended_the_hold_is_no_overlap(self):
        ops = [grant("x", "L1", 1, 0.0, 0.1), op("release", "x", 0.4, None, None, lease="L1"),
               grant("x", "L2", 2, 0.5, 0.6)]
        self.assertEqual(check(ops), [])

    def test_a_lost_renewal(self):
        ops = [grant("x", "L1", 1, 0.0, 0.1),
               op("renew", "x", 1.0, 1.1, 200, {"token": 1, "expires_at_ms": (T0 + 9.0) * 1000}, lease="L1"),
               op("renew", "x", 6.0, 6.1, 409, {"reason": "expired"}, lease="L1")]
        self.assert_found(ops, "lost")

    def test_a_lost_grant_seen_by_a_read(self):
        ops = [grant("x", "L1", 1, 0.0, 0.1), op("read", "x", 1.0, 1.1, 200, {"held": False, "last_token": 1})]
        self.assert_found(ops, "lost")

    def test_a_lost_fence_mark(self):
        ops = [op("fence", "f/x", 0.0, 0.1, 200, {"accepted": True, "max_token": 5}, token=5),
               op("fence", "f/x", 0.2, 0.3, 200, {"accepted": True, "max_token": 3}, token=3)]
        self.assert_found(ops, "fence")

    def test_a_read_older_than_a_grant(self):
        ops = [grant("x", "L1", 7, 0.0, 0.1, ttl=0.2),
               op("read", "x", 1.0, 1.1, 200, {"held": False, "last_token": 6})]
        self.assert_found(ops, "reads")

    def test_a_replay_answered_after_the_force_release(self):
        ops = [grant("x", "L1", 1, 0.0, 0.1),
               op("force", "x", 0.5, 0.6, 200, {"revoked": {"token": 1}}),
               op("acquire", "x", 0.7, 0.8, 200, {"lease": "L1", "token": 1, "acquired_at_ms": (T0 + 0.1) * 1000,
                                                  "expires_at_ms": (T0 + 4.1) * 1000})]
        self.assert_found(ops, "reads")

    def test_permits_up_to_the_limit_and_past_it(self):
        def sem(lease, token, permits, t, ttl=4.0):
            return op("sem_acquire", "ns/pool", t, t + 0.1, 200,
                      {"lease": lease, "token": token, "permits": permits, "limit": 3,
                       "acquired_at_ms": (T0 + t + 0.1) * 1000, "expires_at_ms": (T0 + t + 0.1 + ttl) * 1000})
        ok = [sem("S1", 1, 2, 0.0), sem("S2", 2, 1, 0.5)]
        self.assertEqual(check(ok), [])
        self.assert_found(ok + [sem("S3", 3, 1, 1.0)], "permits")
        released = ok + [op("sem_release", "ns/pool", 0.7, 0.8, 200, {}, lease="S1"), sem("S3", 3, 2, 1.0)]
        self.assertEqual(check(released), [])

    def test_values_of_the_holder_and_of_a_lease_that_ended(self):
        def value(lease, token, v, t, status=200, version=None):
            return op("value", "x", t, t + 0.1, status, {"value_version": version} if status == 200 else
                      {"error": "stale_token"}, lease=lease, token=token, value=v)
        base = [grant("x", "L1", 1, 0.0, 0.1), value("L1", 1, "a", 0.2, version=1), value("L1", 1, "b", 0.4, version=2),
                op("read", "x", 0.6, 0.7, 200, {"held": True, "holder": {"token": 1}, "last_token": 1,
                                                 "value_version": 2, "value": "b"}),
                op("release", "x", 1.0, 1.1, 200, {}, lease="L1", token=1),
                value("L1", 1, "late", 1.2, status=409)]
        self.assertEqual(check(base), [])
        self.assert_found(base + [value("L1", 1, "stale", 1.3, version=3)], "values")
        self.assert_found(base + [op("read", "x", 1.5, 1.6, 200, {"held": False, "last_token": 1,
                                                                  "value_version": 1, "value": "a"})], "values")
        self.assert_found(base + [op("read", "x", 1.5, 1.6, 200, {"held": False, "last_token": 1,
                                                                  "value_version": 2, "value": "late"})], "values")

    def test_the_backend_applying_an_older_token(self):
        self.assert_found(clean(), "backend", {"/x": [1, 2, 1]})


if __name__ == "__main__":
    unittest.main()
