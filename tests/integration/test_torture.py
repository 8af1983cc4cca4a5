"""Crash torture: 30 kill -9 cycles under load, judged by the history checker.

The run itself is tests/integration/torture.py (also a CLI for longer runs). Here:
* TortureRun: 30 cycles with the default load (scaled down when LEASEGATE_SANITIZED=1);
  the checker must find nothing, and must have had something to check (reads inside
  promised leases across restarts, fence requests below acknowledged marks, requests with
  released leases, applied writes). Then the same real history, deliberately corrupted
  one way at a time, must be caught with the right property.
* CheckerRules: small hand-made histories at the edges of each rule: what an honest
  server may do is not reported, one millisecond the other way is.

The seed is LEASEGATE_TORTURE_SEED when set, else random; a failure prints the command
that repeats the run. Pass/fail depends only on the checker's properties.
"""

import copy
import os
import random
import sys
import unittest
import uuid

import harness
import torture
from torture import Event, check

CYCLES = 30


def props(violations):
    return {v.prop for v in violations}


def new_lease():
    return str(uuid.uuid4())


class TortureRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        seed = os.environ.get("LEASEGATE_TORTURE_SEED")
        cls.seed = int(seed) if seed else random.randrange(1 << 30)
        clients, locks = torture.default_scale()
        cls.repeat = ("LEASEGATE_BIN=%s python3 tests/integration/torture.py --cycles %d --seed %d --locks %d "
                      "--clients %d" % (harness.binary_path(), CYCLES, cls.seed, locks, clients))
        sys.stderr.write("torture: seed %d (repeat: %s)\n" % (cls.seed, cls.repeat))
        t = torture.Torture(CYCLES, cls.seed, locks=locks, clients=clients)
        cls.result = t.run()
        sys.stderr.write("torture: %d events, %d applied writes, %.1f s\n"
                         % (len(cls.result.history.events), len(cls.result.applied), cls.result.elapsed_s))
        cls.events = cls.result.history.events
        cls.applied = cls.result.applied

    def test_history_is_clean(self):
        r = self.result
        self.assertEqual(r.driver_errors, [], "driver errors (seed %d)" % self.seed)
        if r.violations:
            self.fail("%d violations; repeat with: %s\n%s" % (
                len(r.violations), self.repeat, "\n".join(str(v) for v in r.violations[:20])))

    def test_the_checks_had_something_to_check(self):
        st = self.result.stats
        self.assertEqual(st["driver:kill"], CYCLES)
        self.assertEqual(st["driver:integrity"], 0 if harness.on_etcd() else CYCLES)
        for key in ("checked: reads inside a promise, across a restart",
                    "checked: fence requests below an acknowledged mark",
                    "checked: fence answers after an acknowledged mark, across a restart",
                    "checked: requests with a released lease",
                    "checked: applied writes matched to their request",
                    "checked: (answer, earlier lease) pairs compared",
                    "checked: (answer, earlier reader) pairs allowed to overlap",
                    "checked: permit answers that filled the semaphore",
                    "checked: answers of leases of several permits compared",
                    "checked: acknowledged value writes",
                    "checked: value writes refused",
                    "checked: reads of a lock's value"):
            self.assertGreater(st[key], 0, key)
        self.assertGreater(st["acquire 200"], 0)
        self.assertGreater(st["renew 409"], 0, "no lease ever ran out")

    # Corruptions of the real history ----------------------------------------------
    def corrupt(self):
        """A copy of the history and of the applied writes, and a fresh seq counter."""
        events = [copy.copy(e) for e in self.events]
        for e in events:
            e.resp = copy.deepcopy(e.resp)
        nxt = [max(e.seq for e in events)]

        def seq():
            nxt[0] += 1
            return nxt[0]
        return events, [dict(a) for a in self.applied], seq

    def grants(self, events):
        return [e for e in events if e.kind == "acquire" and e.ok(200)]

    def assertCaught(self, prop, events, applied):
        found = check(events, applied)
        self.assertIn(prop, props(found), "injected %s not reported; got %s" % (prop, props(found)))

    def test_catches_overlapping_grant(self):
        events, applied, seq = self.corrupt()
        a = next(g for g in self.grants(events) if g.resp["ttl_ms"] >= 1000 and g.resp.get("mode") == "write")
        b = copy.copy(a)
        b.resp = dict(a.resp, lease=new_lease(), token=10 ** 12, acquired_at_ms=a.resp["acquired_at_ms"] + 1,
                      expires_at_ms=a.resp["acquired_at_ms"] + 1 + 300)
        b.seq, b.client, b.s_ms, b.r_ms = seq(), "intruder", a.r_ms, a.r_ms
        events.append(b)
        self.assertCaught("two-holders", events, applied)

    def test_catches_repeated_token(self):
        events, applied, seq = self.corrupt()
        gs = self.grants(events)
        a, later = gs[0], gs[-1]
        b = copy.copy(later)
        b.resp = dict(later.resp, lease=new_lease(), token=a.resp["token"])
        b.seq = seq()
        events.append(b)
        self.assertCaught("token-unique", events, applied)

    def test_catches_token_going_back_after_restart(self):
        events, applied, seq = self.corrupt()
        gs = self.grants(events)
        # The latest restart with grants on both sides of it (a slow run, e.g. under
        # the sanitizers, may have none after its last restarts).
        start = next((st for st in reversed([e for e in events if e.kind == "start"][1:])
                      if any(g.s_ms > st.r_ms for g in gs) and any(g.r_ms < st.s_ms for g in gs)), None)
        self.assertIsNotNone(start, "no restart had grants before and after it")
        first_after = next(g for g in gs if g.s_ms > start.r_ms)
        before = max(g.resp["token"] for g in gs if g.r_ms < start.s_ms)
        first_after.resp["token"] = before   # also a repeated token
        self.assertCaught("token-after-restart", events, applied)

    def test_catches_lease_lost_over_restart(self):
        notes = {"reads inside a promise, across a restart": []}
        check(self.events, self.applied, notes=notes)
        seqs = notes["reads inside a promise, across a restart"]
        self.assertTrue(seqs)
        events, applied, _ = self.corrupt()
        g = next(e for e in events if e.seq == seqs[len(seqs) // 2])
        g.resp["holder"] = None
        g.resp["held"] = False
        g.resp["holders"] = []
        self.assertCaught("held-after-restart", events, applied)

    def test_catches_released_lease_renewed(self):
        events, applied, seq = self.corrupt()
        rel = next(e for e in events if e.kind == "release" and e.ok(200) and e.resp.get("released"))
        grant = next(g for g in self.grants(events) if g.resp["lease"] == rel.lease)
        rn = copy.copy(rel)
        now = int(rel.r_ms) + 5
        rn.kind, rn.seq, rn.s_ms, rn.r_ms = "renew", seq(), rel.r_ms + 5, rel.r_ms + 6
        rn.resp = {"token": grant.resp["token"], "ttl_ms": 1000, "expires_at_ms": now + 1000}
        events.append(rn)
        self.assertCaught("release-sticks", events, applied)

    def test_catches_fence_mark_going_back(self):
        events, applied, seq = self.corrupt()
        mark = next(e for e in reversed(events)
                    if e.kind == "fence" and e.ok(200) and e.resp.get("max_token", 0) > 1)
        f = copy.copy(mark)
        f.seq, f.s_ms, f.r_ms = seq(), mark.r_ms + 1, mark.r_ms + 2
        f.req = {"token": mark.resp["max_token"] - 1}
        f.resp = {"accepted": True, "max_token": mark.resp["max_token"] - 1}
        events.append(f)
        self.assertCaught("fence-mark", events, applied)

    def test_catches_writes_applied_out_of_order(self):
        events, applied, _ = self.corrupt()
        by_path = {}
        for i, a in enumerate(applied):
            by_path.setdefault(a["path"], []).append(i)
        i, j = next((ix[0], ix[-1]) for ix in by_path.values()
                    if len(ix) > 1 and applied[ix[0]]["token"] != applied[ix[-1]]["token"])
        applied[i], applied[j] = applied[j], applied[i]
        self.assertCaught("upstream-order", events, applied)

    def test_catches_stale_write_applied(self):
        events, applied, _ = self.corrupt()
        released = {e.lease: e for e in events if e.kind == "release" and e.ok(200) and e.resp.get("released")}
        put = next(e for e in events if e.kind == "put" and e.ok(409) and e.lease in released
                   and e.s_ms >= released[e.lease].r_ms)
        applied.append({"method": "PUT", "path": "/" + put.lock, "body": put.req["id"].encode(),
                        "token": str(put.req["token"]), "lock": put.lock})
        self.assertCaught("upstream-stale", events, applied)

    def test_catches_permits_over_the_limit(self):
        events, applied, seq = self.corrupt()
        p = next(g for g in self.grants(events) if torture.is_sem(g.lock) and g.resp["ttl_ms"] >= 1000)
        for i in range(torture.SEM_LIMIT):
            b = copy.copy(p)
            b.resp = dict(p.resp, lease=new_lease(), token=10 ** 12 + i,
                          acquired_at_ms=p.resp["acquired_at_ms"] + 1 + i,
                          expires_at_ms=p.resp["acquired_at_ms"] + 1 + i + 300)
            b.seq, b.client, b.s_ms, b.r_ms = seq(), "intruder%d" % i, p.r_ms + i, p.r_ms + i
            events.append(b)
        self.assertCaught("sem-over-limit", events, applied)

    def test_catches_a_value_written_by_a_released_lease(self):
        events, applied, seq = self.corrupt()
        rel = next(e for e in events if e.kind == "release" and e.ok(200) and e.resp.get("released")
                   and not torture.is_sem(e.lock))
        g = next(e for e in self.grants(events) if e.resp.get("lease") == rel.lease)
        w = torture.Event(seq=seq(), cycle=rel.cycle, client="intruder", kind="value", lock=rel.lock, lease=rel.lease,
                          req={"id": "stale-write"}, outcome="ok", status=200,
                          resp={"value_version": 10 ** 6, "token": g.resp["token"]},
                          s_ms=rel.r_ms + 1, r_ms=rel.r_ms + 2, s_mono=0, r_mono=0)
        events.append(w)
        self.assertCaught("value-stale", events, applied)

    def test_catches_a_lost_value(self):
        events, applied, seq = self.corrupt()
        w = next(e for e in events if e.kind == "value" and e.ok(200) and e.resp.get("value_version", 0) > 1)
        r = torture.Event(seq=seq(), cycle=w.cycle, client="probe", kind="get", lock=w.lock, outcome="ok", status=200,
                          resp={"value_version": w.resp["value_version"] - 1, "value": "older", "held": False,
                                "holder": None, "last_token": 0},
                          s_ms=w.r_ms + 1, r_ms=w.r_ms + 2, s_mono=0, r_mono=0)
        events.append(r)
        self.assertCaught("value-lost", events, applied)

    def test_catches_a_lease_of_several_permits_over_the_limit(self):
        events, applied, seq = self.corrupt()
        p = next(g for g in self.grants(events) if torture.is_sem(g.lock) and g.resp["ttl_ms"] >= 1000)
        b = copy.copy(p)
        b.resp = dict(p.resp, lease=new_lease(), token=10 ** 12, permits=torture.SEM_LIMIT,
                      acquired_at_ms=p.resp["acquired_at_ms"] + 1, expires_at_ms=p.resp["acquired_at_ms"] + 301)
        b.seq, b.client, b.s_ms, b.r_ms = seq(), "intruder", p.r_ms, p.r_ms
        events.append(b)
        self.assertCaught("sem-over-limit", events, applied)

    def test_catches_a_writer_beside_a_reader(self):
        events, applied, seq = self.corrupt()
        r = next(g for g in self.grants(events) if g.resp.get("mode") == "read" and g.resp["ttl_ms"] >= 1000)
        w = copy.copy(r)
        w.resp = dict(r.resp, lease=new_lease(), token=10 ** 12, mode="write",
                      acquired_at_ms=r.resp["acquired_at_ms"] + 1, expires_at_ms=r.resp["acquired_at_ms"] + 301)
        w.seq, w.client, w.s_ms, w.r_ms = seq(), "intruder", r.r_ms, r.r_ms
        events.append(w)
        self.assertCaught("two-holders", events, applied)

    def test_catches_a_read_lease_write_let_through(self):
        events, applied, _ = self.corrupt()
        readers = {g.resp["lease"] for g in self.grants(events) if g.resp.get("mode") == "read"}
        put = next(e for e in events if e.kind == "put" and e.ok(409) and e.lease in readers)
        put.status, put.resp = 204, {"upstream": True}
        self.assertCaught("read-lease-write", events, applied)

    def test_catches_bad_integrity(self):
        harness.sqlite_only(self, "the history has integrity checks of the SQLite file only then")
        events, applied, _ = self.corrupt()
        bad = "*** in database main ***\nPage 7 is never used"
        next(e for e in events if e.kind == "integrity").resp["result"] = bad
        self.assertCaught("integrity", events, applied)


class LostStateIsCaught(unittest.TestCase):
    """End to end: a server whose database lost its last two cycles of commits (an older
    copy put in place during one down time) is caught by the same driver and checker."""

    def test_rolled_back_database_is_reported(self):
        harness.sqlite_only(self, "puts an old copy of the SQLite files in place")
        seed = random.randrange(1 << 30)
        t = torture.Torture(6, seed, locks=40, clients=4, run_ms=(400, 900), rollback_at=4)
        r = t.run()
        self.assertEqual(r.stats["driver:fault"], 1)
        found = props(r.violations)
        self.assertTrue({"token-after-restart", "token-unique"} <= found,
                        "seed %d: lost commits not reported as reused tokens; found %s" % (seed, found))


class Hist:
    """Hand-made histories (times in ms)."""

    def __init__(self):
        self.events = []
        self.applied = []

    def add(self, kind, s, r, status=200, outcome="ok", client="c0", lock="L", lease=None, req=None, resp=None):
        e = Event(seq=len(self.events) + 1, cycle=0, client=client, kind=kind, lock=lock, lease=lease,
                  req=req or {}, outcome=outcome, status=status if outcome == "ok" else None, resp=resp or {},
                  s_ms=float(s), r_ms=float(r), s_mono=s / 1000.0, r_mono=r / 1000.0)
        self.events.append(e)
        return e

    def grant(self, at, ttl, token, client="c0", lock="L", s=None, r=None, mode=None, permits=None):
        lease = new_lease()
        resp = {"lease": lease, "token": token, "acquired_at_ms": at, "expires_at_ms": at + ttl, "ttl_ms": ttl,
                "count": 1}
        if mode:
            resp["mode"] = mode
        if permits:
            resp["permits"] = permits
        self.add("acquire", at - 1 if s is None else s, at + 1 if r is None else r, client=client, lock=lock,
                 req={"ttl_ms": ttl, "wait_ms": 0}, resp=resp)
        return lease

    def renew(self, lease, at, ttl, token, s=None, r=None, outcome="ok", status=200):
        resp = {"token": token, "ttl_ms": ttl, "expires_at_ms": at + ttl} if status == 200 else \
            {"error": "not_holder", "reason": "expired"}
        return self.add("renew", at - 1 if s is None else s, at + 1 if r is None else r, lease=lease,
                        outcome=outcome, status=status, resp=resp if outcome == "ok" else {})

    def release(self, lease, s, r, outcome="ok", released=True):
        return self.add("release", s, r, lease=lease, outcome=outcome,
                        resp={"released": released, "count": 0 if released else 1} if outcome == "ok" else {})

    def restart(self, s, r):
        self.add("kill", s, s, client="driver")
        self.add("integrity", s, s, client="driver", resp={"result": "ok"})
        self.add("start", s + 1, r, client="driver")

    def get(self, s, r, token, lock="L"):
        holder = {"token": token} if token is not None else None
        return self.add("get", s, r, lock=lock, client="probe",
                        resp={"held": token is not None, "holder": holder, "last_token": token or 0})

    def found(self):
        return props(check(self.events, self.applied))


class CheckerRules(unittest.TestCase):
    def test_readers_share_a_writer_does_not(self):
        h = Hist()
        h.grant(1000, 500, 1, mode="read")
        h.grant(1100, 500, 2, client="c1", mode="read")
        self.assertEqual(h.found(), set())
        h.grant(1200, 500, 3, client="c2", mode="write")
        self.assertEqual(h.found(), {"two-holders"})

    def test_permits_up_to_the_limit(self):
        h = Hist()
        for i in range(torture.SEM_LIMIT):
            h.grant(1000 + i, 500, i + 1, client="c%d" % i, lock="s/k000")
        self.assertEqual(h.found(), set())
        h.grant(1499, 500, 10, client="late", lock="s/k000")
        self.assertEqual(h.found(), {"sem-over-limit"})

    def test_leases_of_several_permits_count_them_all(self):
        h = Hist()
        h.grant(1000, 500, 1, client="c0", lock="s/k000", permits=torture.SEM_LIMIT - 1)
        h.grant(1001, 500, 2, client="c1", lock="s/k000", permits=1)
        self.assertEqual(h.found(), set())  # exactly the limit
        h.grant(1002, 500, 3, client="c2", lock="s/k000", permits=1)
        self.assertEqual(h.found(), {"sem-over-limit"})
        h = Hist()
        h.grant(1000, 500, 1, client="c0", lock="s/k000", permits=1)
        h.grant(1001, 500, 2, client="c1", lock="s/k000", permits=torture.SEM_LIMIT)
        self.assertEqual(h.found(), {"sem-over-limit"})
        h = Hist()  # one lease of all the permits, then another at its announced expiry
        h.grant(1000, 500, 1, client="c0", lock="s/k000", permits=torture.SEM_LIMIT)
        h.grant(1500, 500, 2, client="c1", lock="s/k000", permits=torture.SEM_LIMIT)
        self.assertEqual(h.found(), set())

    def test_values_of_the_writer_and_after_it(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.add("value", 1100, 1101, lease=a, req={"id": "v1"}, resp={"value_version": 1, "token": 1})
        h.add("get", 1200, 1201, client="probe", resp={"held": True, "holder": {"token": 1}, "last_token": 1,
                                                       "value_version": 1, "value": "v1"})
        self.assertEqual(h.found(), set())
        h.add("get", 1300, 1301, client="probe", resp={"held": True, "holder": {"token": 1}, "last_token": 1,
                                                       "value_version": 0, "value": None})
        self.assertEqual(h.found(), {"value-lost"})
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.release(a, 1100, 1101)
        h.add("value", 1050, 1060, lease=a, req={"id": "v1"}, resp={"value_version": 1, "token": 1})
        self.assertEqual(h.found(), set())  # sent before the release was answered: fine
        h.add("value", 1200, 1201, lease=a, req={"id": "v2"}, resp={"value_version": 2, "token": 1})
        self.assertEqual(h.found(), {"value-stale"})
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.add("value", 1100, 1101, lease=a, status=409, req={"id": "refused"}, resp={"error": "stale_token"})
        h.add("get", 1200, 1201, client="probe", resp={"held": True, "holder": {"token": 1}, "last_token": 1,
                                                       "value_version": 1, "value": "refused"})
        self.assertEqual(h.found(), {"value-stale"})

    def test_a_permit_at_the_announced_expiry_of_another_is_fine(self):
        h = Hist()
        for i in range(torture.SEM_LIMIT):
            h.grant(1000, 500 + i, i + 1, client="c%d" % i, lock="s/k000")
        h.grant(1500, 500, 10, client="late", lock="s/k000")
        self.assertEqual(h.found(), set())

    def test_a_reader_missing_from_the_holders_is_reported(self):
        h = Hist()
        h.grant(1000, 5000, 1, mode="read")
        h.grant(1001, 5000, 2, client="c1", mode="read")
        h.add("get", 1100, 1101, client="probe", resp={"held": True, "holder": {"token": 1}, "holders": [1, 2]})
        self.assertEqual(h.found(), set())
        h.add("get", 1200, 1201, client="probe", resp={"held": True, "holder": {"token": 1}, "holders": [1]})
        self.assertEqual(h.found(), {"holder-mismatch"})

    def test_grant_at_the_announced_expiry_is_fine(self):
        h = Hist()
        h.grant(1000, 500, 1)
        h.grant(1500, 500, 2, client="c1")
        self.assertEqual(h.found(), set())

    def test_grant_one_ms_before_the_announced_expiry_is_two_holders(self):
        h = Hist()
        h.grant(1000, 500, 1)
        h.grant(1499, 500, 2, client="c1")
        self.assertEqual(h.found(), {"two-holders"})

    def test_renewal_extends_the_promise(self):
        h = Hist()
        a = h.grant(1000, 500, 1)
        h.renew(a, 1400, 500, 1)
        h.grant(1800, 500, 2, client="c1")
        self.assertEqual(h.found(), {"two-holders"})

    def test_renew_that_shortens_ends_the_promise_sooner(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.renew(a, 1100, 300, 1)
        h.grant(1400, 500, 2, client="c1")
        self.assertEqual(h.found(), set())

    def test_renew_of_a_lease_after_another_was_granted_is_two_holders(self):
        h = Hist()
        a = h.grant(1000, 300, 1)
        h.grant(1300, 1000, 2, client="c1")
        h.renew(a, 1400, 1000, 1)   # the server kept a past its expiry and renewed it: b holds too
        self.assertEqual(h.found(), {"two-holders"})

    def test_grant_after_an_acknowledged_release_is_fine(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.release(a, 1100, 1102)
        h.grant(1101, 500, 2, client="c1", s=1100.5, r=1103)   # waiter woken by that release
        self.assertEqual(h.found(), set())

    def test_grant_answered_before_the_release_was_sent_is_two_holders(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.grant(1101, 500, 2, client="c1", s=1100.5, r=1101.5)
        h.release(a, 1102, 1104)
        self.assertEqual(h.found(), {"two-holders"})

    def test_release_of_unknown_outcome_may_have_freed_it(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.release(a, 1100, 1300, outcome="unknown")
        h.grant(1200, 500, 2, client="c1")
        self.assertEqual(h.found(), set())

    def test_partial_release_keeps_the_promise(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.release(a, 1100, 1102, released=False)
        h.grant(1200, 500, 2, client="c1")
        self.assertEqual(h.found(), {"two-holders"})

    def test_lease_must_survive_a_restart_until_its_expiry(self):
        h = Hist()
        h.grant(1000, 5000, 1)
        h.restart(2000, 2300)
        h.get(2400, 2401, 1)
        self.assertEqual(h.found(), set())
        h.get(2500, 2501, None)
        self.assertEqual(h.found(), {"held-after-restart"})

    def test_get_while_the_expiry_may_have_passed_is_not_judged(self):
        h = Hist()
        h.grant(1000, 1000, 1)
        h.restart(1500, 1800)
        h.get(1999, 2000, None)   # answered at 2000 = the announced expiry
        self.assertEqual(h.found(), set())
        h.get(1998, 1999.5, None)
        self.assertEqual(h.found(), {"held-after-restart"})

    def test_token_after_restart_must_exceed_every_revealed_one(self):
        h = Hist()
        h.grant(1000, 300, 5)
        h.restart(2000, 2300)
        h.grant(2400, 300, 6, client="c1")
        self.assertEqual(h.found(), set())
        h.grant(2500, 300, 4, client="c2", lock="M")
        self.assertEqual(h.found(), {"token-after-restart"})

    def test_token_must_exceed_every_revealed_one_without_restart_too(self):
        h = Hist()
        h.grant(1000, 300, 5)
        h.grant(1400, 300, 5, client="c1", lock="M")
        self.assertEqual(h.found(), {"token-order", "token-unique"})

    def test_token_revealed_by_get_counts(self):
        h = Hist()
        h.get(1000, 1001, 9, lock="X")
        h.restart(2000, 2300)
        h.grant(2400, 300, 9, client="c1")
        self.assertEqual(h.found(), {"token-after-restart"})

    def test_released_lease_stays_released(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.release(a, 1100, 1102)
        h.restart(2000, 2300)
        h.renew(a, 2400, 1000, 1, status=409)
        self.assertEqual(h.found(), set())
        h.renew(a, 2500, 1000, 1)
        self.assertIn("release-sticks", h.found())

    def test_get_must_not_show_a_released_lease(self):
        h = Hist()
        a = h.grant(1000, 5000, 1)
        h.release(a, 1100, 1102)
        h.restart(2000, 2300)
        h.get(2400, 2401, None)
        self.assertEqual(h.found(), set())
        h.get(2500, 2501, 1)
        self.assertEqual(h.found(), {"release-sticks"})

    def test_renew_refused_while_promised_is_a_lost_lease(self):
        h = Hist()
        a = h.grant(1000, 1000, 1)
        h.renew(a, 1999, 1000, 1, s=1998, r=2000, status=409)   # answered at the expiry: fine
        self.assertEqual(h.found(), set())
        h = Hist()
        a = h.grant(1000, 1000, 1)
        h.restart(1200, 1500)
        h.renew(a, 1600, 1000, 1, status=409)
        self.assertEqual(h.found(), {"lease-lost"})

    def test_fence_mark_never_goes_back(self):
        h = Hist()
        h.add("fence", 1000, 1001, lock="f/L", req={"token": 7}, resp={"accepted": True, "max_token": 7})
        h.restart(2000, 2300)
        h.add("fence", 2400, 2401, status=409, lock="f/L", req={"token": 6},
              resp={"error": "stale_token", "max_token": 7})
        self.assertEqual(h.found(), set())
        h.add("fence", 2500, 2501, lock="f/L", req={"token": 6}, resp={"accepted": True, "max_token": 6})
        self.assertEqual(h.found(), {"fence-mark"})

    def test_applied_writes_in_token_order(self):
        h = Hist()
        a = h.grant(1000, 300, 1)
        b = h.grant(1400, 300, 2, client="c1")
        h.add("put", 1010, 1012, lease=a, req={"id": "w1", "token": 1}, status=201)
        h.add("put", 1410, 1412, lease=b, req={"id": "w2", "token": 2}, client="c1", status=204)
        h.applied = [{"path": "/L", "token": "1", "body": b"w1"}, {"path": "/L", "token": "2", "body": b"w2"}]
        self.assertEqual(h.found(), set())
        h.applied.reverse()
        self.assertEqual(h.found(), {"upstream-order"})

    def test_write_of_a_superseded_lease_is_never_applied(self):
        h = Hist()
        a = h.grant(1000, 300, 1)
        h.grant(1400, 300, 2, client="c1")
        h.add("put", 1500, 1502, lease=a, req={"id": "w1", "token": 1}, status=201)
        h.applied = [{"path": "/L", "token": "1", "body": b"w1"}]
        self.assertEqual(h.found(), {"upstream-stale"})


if __name__ == "__main__":
    harness.run_tests()
