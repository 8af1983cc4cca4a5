"""A lock's value and an election's leader while etcd refuses writes (its NOSPACE alarm,
issues 37 and 40), which no test covered: a value written or a value proclaimed during the
alarm is answered 503 naming the alarm and is never shown before etcd took it; reads of what
is committed go on (a value, an election nobody changed); an election's observer is told
nothing while the alarm stands; once it is disarmed, the one change that was held for the
refused batch (and answered 503) is applied, once, and what was refused before it changed
anything never is; and a gateway killed (-9) during the alarm comes back with the last
acknowledged value and proclamation.

A one-member etcd per test on free 127.0.0.1 ports, stopped by PID, the alarm raised as etcd
raises it. Every wait is bounded; nothing asserts how long anything took. About 20 s."""

import socket
import unittest

import etcd_fixture
from etcd_fixture import Etcd, Gateway, wait_for, wait_leader
from harness import EventStream


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())


def value_path(name):
    return "/v1/locks/%s/value" % name


def election_path(name, action=""):
    return "/v1/elections/%s%s" % (name, "/" + action if action else "")


class CoordUnderAlarmTest(unittest.TestCase):
    def setUp(self):
        self.etcd = Etcd(1)
        self.gw = None

    def tearDown(self):
        if self.gw:
            self.gw.stop()
            self.gw.cleanup()
        self.etcd.stop()

    def start_gateway(self):
        # A longer leader lease than the fixture's 2 s: a loaded machine's late keepalive
        # would refuse requests for a moment (a 503 that names no alarm).
        self.gw = Gateway(self.etcd, "lg", ["--leader-ttl", "5"])
        self.assertIs(wait_leader([self.gw]), self.gw, self.gw.stderr_text())
        return self.gw.client

    def call(self, method, path, body=None):
        """The answer, asked again (bounded) while it is a 503 that names no alarm."""
        for _ in range(50):
            status, headers, answer = self.gw.client.request(method, path, body=body)
            if status != 503 or not isinstance(answer, dict) or answer.get("alarm"):
                return status, headers, answer
            wait_for(lambda: False, timeout=0.2)
        return status, headers, answer

    def ok(self, method, path, body=None):
        status, _, answer = self.call(method, path, body)
        self.assertEqual(status, 200, answer)
        return answer

    def assert_alarm(self, answer):
        status, headers, body = answer
        self.assertEqual((status, body.get("error"), body.get("alarm")), (503, "overloaded", "NOSPACE"), body)
        self.assertEqual(headers.get("retry-after"), "1")

    def raise_alarm(self):
        member = self.etcd.members[0].status()["header"]["member_id"]
        self.etcd.call("/v3/maintenance/alarm", {"action": "ACTIVATE", "memberID": member, "alarm": "NOSPACE"})

    def disarm(self):
        self.etcd.etcdctl("alarm", "disarm")
        self.assertTrue(wait_for(lambda: self.gw.client.acquire("after-alarm", ttl_ms=60000)[0] == 200, timeout=30),
                        self.gw.stderr_text()[-2000:])

    def lead_and_hold(self):
        """A lock `val` held with value {"n": 1}, and election `el` led by `o` with value "a"."""
        lock = self.ok("POST", "/v1/locks/val/acquire", {"owner": "w", "ttl_ms": 600000})
        self.assertEqual(self.ok("PUT", value_path("val"), {"lease": lock["lease"], "value": {"n": 1}})["value_version"], 1)
        lead = self.ok("POST", election_path("el", "campaign"), {"owner": "o", "value": "a", "ttl_ms": 600000})
        return lock["lease"], lead["lease"], lead["term"]

    def value_sets(self):
        """How many value_set events of lock `val` GET /v1/events shows."""
        status, _, body = self.call("GET", "/v1/events?after=0&limit=1000")
        self.assertEqual(status, 200, body)
        return sum(1 for e in body["events"] if e["type"] == "lock" and e["lock"] == "val" and e["kind"] == "value_set")

    def next_event(self, stream):
        while True:
            m = stream.event()
            if m is None:
                raise AssertionError("the observe stream ended")
            if "event" in m:
                return m["event"], m["data"]

    def test_values_and_proclamations_wait_for_etcd_and_observers_hear_only_what_it_took(self):
        self.start_gateway()
        lease, leader, term = self.lead_and_hold()
        obs = EventStream(self.gw.port, path=election_path("el", "observe"), timeout=10)
        self.assertEqual(obs.status, 200)
        self.assertEqual(self.next_event(obs), ("leader", {"owner": "o", "term": term, "value": "a"}))
        self.raise_alarm()
        # The first change meets the refusal: its batch waits, its answer is a 503.
        held_write = {"lease": lease, "value": {"n": 2}, "request_id": "alarm-1"}
        self.assert_alarm(self.gw.client.request("PUT", value_path("val"), body=held_write))
        # Refused before they change anything, now that the alarm is known; its retry too.
        self.assert_alarm(self.call("PUT", value_path("val"), held_write))
        self.assert_alarm(self.call("POST", election_path("el", "proclaim"), {"lease": leader, "value": "b"}))
        self.assert_alarm(self.call("PUT", value_path("val"), {"lease": lease, "value": {"n": 3}, "if_version": 1}))
        # The value the refused batch holds is never shown before etcd took it...
        self.assert_alarm(self.call("GET", value_path("val")))
        self.assert_alarm(self.call("GET", "/v1/locks/val"))
        # ...while what is committed and untouched is read.
        status, _, body = self.call("GET", election_path("el"))
        self.assertEqual((status, body["leader"]["value"], body["leader"]["term"]), (200, "a", term), body)
        status, _, body = self.call("GET", value_path("other"))
        self.assertEqual((status, body["value"], body["value_version"]), (200, None, 0), body)
        # The listing of elections, none of which the refused batch touches (it was a 503).
        status, _, body = self.call("GET", "/v1/elections")
        self.assertEqual((status, [(e["name"], e["leader"]["value"]) for e in body.get("elections", [])]),
                         (200, [("el", "a")]), body)
        # An observer hears nothing while etcd refuses writes.
        obs.conn.sock.settimeout(1.5)
        with self.assertRaises(socket.timeout):
            self.next_event(obs)
        obs.close()
        # A new observer (or one that reconnects) is answered: it is told only published
        # events, which are durable (it used to get the alarm's 503 until the alarm ended).
        obs = EventStream(self.gw.port, path=election_path("el", "observe"), timeout=10)
        self.assertEqual(obs.status, 200, obs.resp.read() if obs.status != 200 else "")
        self.assertEqual(self.next_event(obs), ("leader", {"owner": "o", "term": term, "value": "a"}))
        # So are the events, without the held write's.
        self.assertEqual(self.value_sets(), 1)
        self.disarm()
        # The write held for the refused batch was applied, once; the refused ones never.
        body = self.ok("GET", value_path("val"))
        self.assertEqual((body["value"], body["value_version"]), ({"n": 2}, 2), body)
        self.assertEqual(self.ok("GET", election_path("el"))["leader"]["value"], "a")
        self.assertEqual(self.value_sets(), 2)
        # A retry of the 503'd write with if_version learns it happened: its own token wrote it.
        status, _, body = self.call("PUT", value_path("val"), {"lease": lease, "value": {"n": 2}, "if_version": 1})
        self.assertEqual((status, body.get("error"), body.get("value_version")), (409, "version_mismatch", 2), body)
        self.assertEqual(body["value_token"], self.ok("GET", "/v1/locks/val")["holder"]["token"])
        # A retry with its request_id gets the answer the 503 took from it, and writes nothing.
        token = self.ok("GET", "/v1/locks/val")["holder"]["token"]
        self.assertEqual(self.ok("PUT", value_path("val"), held_write), {"name": "val", "value_version": 2, "token": token})
        self.assertEqual(self.value_sets(), 2)
        self.ok("POST", election_path("el", "proclaim"), {"lease": leader, "value": "c"})
        self.assertEqual(self.next_event(obs), ("leader", {"owner": "o", "term": term, "value": "c"}))
        self.assertIsNone(self.gw.proc.poll())

    def test_killed_during_the_alarm_it_comes_back_with_what_was_acknowledged(self):
        self.start_gateway()
        lease, leader, term = self.lead_and_hold()
        self.raise_alarm()
        # The proclamation is the first change this time: held for the refused batch.
        self.assert_alarm(self.gw.client.request("POST", election_path("el", "proclaim"),
                                                 body={"lease": leader, "value": "b"}))
        self.assert_alarm(self.call("PUT", value_path("val"), {"lease": lease, "value": {"n": 2}}))
        self.assert_alarm(self.call("GET", election_path("el")))
        self.assert_alarm(self.call("GET", "/v1/elections"))
        self.gw.kill9()
        self.etcd.etcdctl("alarm", "disarm")
        self.gw.start()
        self.assertIs(wait_leader([self.gw]), self.gw, self.gw.stderr_text())
        body = self.ok("GET", value_path("val"))
        self.assertEqual((body["value"], body["value_version"]), ({"n": 1}, 1), body)
        body = self.ok("GET", election_path("el"))["leader"]
        self.assertEqual((body["owner"], body["term"], body["value"]), ("o", term, "a"), body)
        # The leases held before the kill still hold, and write.
        self.assertEqual(self.ok("PUT", value_path("val"), {"lease": lease, "value": {"n": 3}, "if_version": 1})
                         ["value_version"], 2)
        self.assertEqual(self.ok("POST", election_path("el", "proclaim"), {"lease": leader, "value": "c"})["value"], "c")


if __name__ == "__main__":
    unittest.main()
