"""Leader election (issue 40): POST /v1/elections/NAME/campaign {owner, value, ttl_ms, wait_ms,
request_id} is a FIFO lease in the elections' own namespace whose answer has `lease`, `term`
(its fencing token) and `value`; proclaim (the leader only: 409 not_leader), resign, renew as a
lock's; GET /v1/elections/NAME {leader, vacant_since_ms, candidates, index} with a watch; and
GET /v1/elections/NAME/observe, Server-Sent Events `leader` and `vacant` (with its reason).

The issue's scenario: a queue of three hands leadership over in order on resign and on expiry,
and an observer sees leader, vacant (its reason) and leader again, none missed and none twice
across a reconnect with Last-Event-ID. A candidate whose client goes away leaves the queue and
is never answered a success later. Terms fence at /v1/fence like any token. Checked by the
server's answers, never by the test's clock."""

import http.client
import json
import socket
import threading
import time
import unittest

from applying_upstream import ApplyingUpstream
from harness import Client, EventStream, Server, ServerTestCase, serve_to_exit


def path(name, action=""):
    return "/v1/elections/%s%s" % (name, "/" + action if action else "")


class Campaigner:
    """A campaign with wait_ms on a connection of its own, in a thread."""

    def __init__(self, srv, name, owner, value=None, wait_ms=60000, ttl_ms=600000, **more):
        self.client = Client(srv.port, timeout=120)
        self.result = None
        body = {"owner": owner, "value": value, "wait_ms": wait_ms, "ttl_ms": ttl_ms}
        body.update(more)
        self.thread = threading.Thread(target=self._run, args=(name, body), daemon=True)
        self.thread.start()

    def _run(self, name, body):
        try:
            self.result = self.client.request("POST", path(name, "campaign"), body=body, timeout=120)
        except Exception as e:  # reported by done()
            self.result = e

    def done(self, timeout=60):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("the campaign was not answered within %d s" % timeout)
        self.client.close()
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def observe(port, name, last_id=None, timeout=30):
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else None
    return EventStream(port, headers=headers, timeout=timeout, path=path(name, "observe"))


def next_message(stream):
    """The next `leader` or `vacant` message: (id, event, data)."""
    while True:
        m = stream.message()
        if m is None:
            raise AssertionError("the observe stream ended")
        if "event" in m and "data" in m:
            return int(m["id"]), m["event"], json.loads(m["data"])


class ElectionTest(ServerTestCase):
    def campaign(self, name, owner, value=None, **more):
        body = {"owner": owner, "value": value}
        body.update(more)
        return self.srv.request("POST", path(name, "campaign"), body=body)

    def get(self, name, **query):
        q = "?" + "&".join("%s=%s" % kv for kv in query.items()) if query else ""
        st, _, body = self.srv.request("GET", path(name) + q)
        self.assertEqual(st, 200, body)
        return body

    def candidates(self, name, n):
        self.srv.wait_until(lambda: self.get(name)["candidates_total"] == n, timeout=20,
                            what="%d candidates of %s" % (n, name))

    def test_a_queue_of_three_hands_over_in_order_and_the_observer_misses_nothing(self):
        name = "el/queue"
        obs = observe(self.srv.port, name)
        first_id, ev, data = next_message(obs)
        self.assertEqual((ev, data), ("vacant", {"reason": None, "previous_term": None}))  # nobody led it yet
        st, _, a = self.campaign(name, "A", {"addr": "a:1"}, ttl_ms=600000)
        self.assertEqual(st, 200, a)
        self.assertEqual((a["term"], a["token"], a["value"]), (a["token"], a["token"], {"addr": "a:1"}))
        b = Campaigner(self.srv, name, "B", {"addr": "b:1"}, ttl_ms=500)  # B will let its lease run out
        self.candidates(name, 1)
        c = Campaigner(self.srv, name, "C", {"addr": "c:1"})
        self.candidates(name, 2)
        view = self.get(name)
        self.assertEqual(view["leader"], {"owner": "A", "term": a["term"], "value": {"addr": "a:1"},
                                          "since_ms": a["acquired_at_ms"]})
        self.assertIsNone(view["vacant_since_ms"])
        self.assertEqual([x["owner"] for x in view["candidates"]], ["B", "C"])
        got = [next_message(obs)]
        self.assertEqual(got[0][1:], ("leader", {"owner": "A", "term": a["term"], "value": {"addr": "a:1"}}))
        # A resigns: B leads (in order), the observer sees vacant (resigned), then leader B.
        st, _, r = self.srv.request("POST", path(name, "resign"), body={"lease": a["lease"]})
        self.assertEqual((st, r), (200, {"name": name, "resigned": True}), r)
        st, _, gb = b.done()
        self.assertEqual(st, 200, gb)
        self.assertGreater(gb["term"], a["term"])
        got.append(next_message(obs))
        got.append(next_message(obs))
        self.assertEqual([m[1:] for m in got[1:]],
                         [("vacant", {"reason": "resigned", "previous_term": a["term"]}),
                          ("leader", {"owner": "B", "term": gb["term"], "value": {"addr": "b:1"}})])
        last_id = got[-1][0]
        obs.close()  # the observer goes away while B's lease runs out
        st, _, gc = c.done()  # C leads after B's expiry
        self.assertEqual(st, 200, gc)
        self.assertGreater(gc["term"], gb["term"])
        st, _, p = self.srv.request("POST", path(name, "proclaim"), body={"lease": gc["lease"], "value": [1, "two"]})
        self.assertEqual((st, p), (200, {"name": name, "term": gc["term"], "value": [1, "two"]}), p)
        # The reconnect with Last-Event-ID gets exactly what it missed, in order.
        obs = observe(self.srv.port, name, last_id=last_id)
        missed = [next_message(obs) for _ in range(3)]
        self.assertEqual([m[1:] for m in missed],
                         [("vacant", {"reason": "expired", "previous_term": gb["term"]}),
                          ("leader", {"owner": "C", "term": gc["term"], "value": {"addr": "c:1"}}),
                          ("leader", {"owner": "C", "term": gc["term"], "value": [1, "two"]})])
        ids = [first_id] + [m[0] for m in got + missed]
        self.assertEqual(ids, sorted(set(ids)))  # none twice, in order
        # Nothing more came, and the next change does: C's lease is revoked by an admin.
        self.assertEqual(self.srv.request("DELETE", path(name))[0], 200)
        self.assertEqual(next_message(obs)[1:], ("vacant", {"reason": "revoked", "previous_term": gc["term"]}))
        obs.close()
        view = self.get(name)
        self.assertIsNone(view["leader"])
        self.assertIsInstance(view["vacant_since_ms"], int)

    def test_only_the_leader_proclaims_or_resigns(self):
        name, other = "el/leader-only", "el/other"
        st, _, a = self.campaign(name, "a", "first", ttl_ms=600000)
        st, _, o = self.campaign(other, "o", None, ttl_ms=600000)
        for lease, reason in ((o["lease"], "unknown"), ("00000000-0000-4000-8000-000000000000", "unknown")):
            for action, body in (("proclaim", {"lease": lease, "value": "x"}), ("resign", {"lease": lease})):
                st, _, e = self.srv.request("POST", path(name, action), body=body)
                self.assertEqual((st, e["error"], e["reason"], e["leader"]["owner"]), (409, "not_leader", reason, "a"),
                                 e)
        self.assertEqual(self.get(name)["leader"]["value"], "first")
        st, _, r = self.srv.request("POST", path(name, "renew"), body={"lease": a["lease"], "ttl_ms": 600000})
        self.assertEqual((st, r["term"], r["token"]), (200, a["term"], a["term"]), r)
        self.assertEqual(self.srv.request("POST", path(name, "resign"), body={"lease": a["lease"]})[0], 200)
        st, _, e = self.srv.request("POST", path(name, "proclaim"), body={"lease": a["lease"], "value": "late"})
        self.assertEqual((st, e["error"], e["reason"], e["leader"]), (409, "not_leader", "released", None), e)
        st, _, e = self.srv.request("POST", path(name, "renew"), body={"lease": a["lease"]})
        self.assertEqual((st, e["error"]), (409, "not_holder"), e)  # renew as a lock's
        # A campaign that finds it vacant leads at once; a second one with wait_ms 0 does not.
        st, _, b = self.campaign(name, "b", None)
        self.assertEqual((st, b["value"]), (200, None), b)
        st, _, e = self.campaign(name, "c", None)
        self.assertEqual((st, e["error"], e["leader"]["owner"]), (409, "not_leader", "b"), e)

    def test_a_candidate_that_goes_away_is_never_answered_a_success(self):
        name = "el/gone"
        st, _, a = self.campaign(name, "a", None, ttl_ms=600000)
        # A candidate whose connection closes while it waits.
        sock = socket.create_connection(("127.0.0.1", self.srv.port))
        body = json.dumps({"owner": "ghost", "wait_ms": 60000}).encode()
        sock.sendall(b"POST /v1/elections/el/gone/campaign HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        self.candidates(name, 1)
        sock.close()
        self.candidates(name, 0)  # it left the queue
        w = Campaigner(self.srv, name, "next")
        self.candidates(name, 1)
        self.assertEqual(self.srv.request("POST", path(name, "resign"), body={"lease": a["lease"]})[0], 200)
        st, _, g = w.done()
        self.assertEqual((st, g["owner"]), (200, "next"), g)  # the ghost never led
        hist = [e for e in self.srv.request("GET", "/v1/events?prefix=el/gone")[2]["events"]
                if e["type"] == "election" and e["kind"] == "granted"]
        self.assertEqual([e["owner"] for e in hist], ["a", "next"])

    def test_terms_fence_and_outlive_a_crash_of_nothing(self):
        name = "el/fence"
        st, _, a = self.campaign(name, "a", None, ttl_ms=600000)
        self.assertEqual(self.srv.fence("el-store", a["term"])[0], 200)
        self.assertEqual(self.srv.request("POST", path(name, "resign"), body={"lease": a["lease"]})[0], 200)
        st, _, b = self.campaign(name, "b", None, ttl_ms=600000)
        self.assertEqual(self.srv.fence("el-store", b["term"])[0], 200)
        st, _, e = self.srv.fence("el-store", a["term"])
        self.assertEqual((st, e["error"]), (409, "stale_token"), e)  # the deposed leader's term is refused

    def test_watch_and_listing_and_bad_requests(self):
        name = "el/watched"
        index = self.get(name)["index"]
        box = {}
        w = self.srv.new_client()
        t = threading.Thread(target=lambda: box.update(r=w.request("GET", path(name) + "?index=%d&wait_ms=30000" % index)))
        t.start()
        time.sleep(0.2)  # the watch is held (not asserted: an early answer is checked by its index below)
        st, _, a = self.campaign(name, "w", {"v": 1}, ttl_ms=600000)
        t.join(30)
        w.close()
        st, _, view = box["r"]
        self.assertEqual(st, 200, view)
        if view["index"] > index:
            self.assertEqual(view["leader"]["owner"], "w", view)
        st, _, listing = self.srv.request("GET", "/v1/elections?prefix=el/w")
        self.assertEqual([e["name"] for e in listing["elections"]], [name])
        self.assertEqual(listing["elections"][0]["leader"]["value"], {"v": 1})
        # The server's clock, as the lock and semaphore listings have it.
        self.assertIsInstance(listing.get("now_ms"), int, listing)
        self.assertGreater(listing["now_ms"], 0, listing)
        for body, field in (({"value": 1}, "owner"), ({"owner": "x", "lease": a["lease"]}, "lease"),
                            ({"owner": "x", "mode": "read"}, "mode"), ({"owner": "x", "limit": 2}, "limit")):
            st, _, e = self.srv.request("POST", path(name, "campaign"), body=body)
            self.assertEqual((st, e.get("field")), (400, field), (body, e))
        st, _, e = self.srv.request("POST", path(name, "proclaim"), body={"lease": a["lease"]})
        self.assertEqual((st, e.get("field")), (400, "value"), e)
        st, _, e = self.srv.request("POST", path(name, "campaign"), body={"owner": "x", "value": "v" * 5000})
        self.assertEqual((st, e.get("field")), (413, "value"), e)
        st, _, e = self.srv.request("GET", path("el/x/campaign"))
        self.assertEqual(st, 405, e)  # an election's action word, not a name
        st, _, e = self.srv.request("POST", path("el/x/observe", "campaign"), body={"owner": "x"})
        self.assertEqual((st, e.get("field")), (400, "name"), e)
        # Elections are a namespace of their own: the lock of that name is free.
        st, _, lock = self.srv.get_lock(name)
        self.assertFalse(lock["held"], lock)


class ElectionGuardTest(unittest.TestCase):
    def test_the_leaders_lease_fences_at_the_guard(self):
        """--guard PREFIX=UPSTREAM,election=NAME: a write needs the lease of NAME's leader now,
        and the guard's order and mark for it are apart from lock NAME's."""
        up = ApplyingUpstream()
        try:
            with Server(extra_args=["--guard", "/cfg/=%s,election=svc" % up.url]) as srv:
                def put(lease, body):
                    headers = {"Content-Type": "application/octet-stream"}
                    if lease:
                        headers["Fencing-Lease"] = lease
                    return srv.request("PUT", "/cfg/app.json", raw=body, headers=headers)
                st, _, a = srv.request("POST", path("svc", "campaign"), body={"owner": "a", "ttl_ms": 600000})
                self.assertEqual(st, 200, a)
                self.assertEqual(put(None, b"x")[0], 428)
                st, h, body = put(a["lease"], b"from a")
                self.assertTrue(200 <= st < 300, (st, body))
                # The lock of the same name is another thing: its lease is not the leader's.
                st, _, lk = srv.acquire("svc", "lock-holder", ttl_ms=600000)
                st, _, e = put(lk["lease"], b"from the lock")
                self.assertEqual((st, e.get("error")), (409, "stale_token"), e)
                self.assertEqual(srv.request("POST", path("svc", "resign"), body={"lease": a["lease"]})[0], 200)
                st, _, b = srv.request("POST", path("svc", "campaign"), body={"owner": "b", "ttl_ms": 600000})
                st, _, e = put(a["lease"], b"late from a")
                self.assertEqual((st, e.get("error")), (409, "stale_token"), e)
                st, _, body = put(b["lease"], b"from b")
                self.assertTrue(200 <= st < 300, (st, body))
            with up.lock:
                applied = [(w["body"], int(w["token"])) for w in up.applied]
            self.assertEqual(applied, [(b"from a", a["term"]), (b"from b", b["term"])])
        finally:
            up.close()

    def test_election_is_for_http_routes_and_excludes_lock(self):
        for spec in ("/x/=http://127.0.0.1:1/,election=a,lock=b", "/x/=http://127.0.0.1:1/,election=a/observe"):
            p = serve_to_exit(["--guard", spec])
            self.assertEqual(p.returncode, 2, (spec, p.stderr))


class ElectionRestartTest(unittest.TestCase):
    def test_the_leader_and_its_value_survive_kill_9(self):
        with Server() as srv:
            st, _, a = srv.request("POST", path("el/crash", "campaign"),
                                   body={"owner": "a", "value": {"v": 1}, "ttl_ms": 600000})
            self.assertEqual(st, 200, a)
            obs = observe(srv.port, "el/crash")
            last_id = next_message(obs)[0]
            obs.close()
            st, _, p = srv.request("POST", path("el/crash", "proclaim"), body={"lease": a["lease"], "value": {"v": 2}})
            self.assertEqual(st, 200, p)
            srv.restart(kill9=True)
            # The events before the crash are gone: a reconnect is told so (410), and what an
            # observer does then (it was told to list the locks, which show no election).
            obs = observe(srv.port, "el/crash", last_id=last_id)
            gone = json.loads(obs.resp.read())
            obs.close()
            self.assertEqual((obs.status, gone["error"]), (410, "too_old"), gone)
            self.assertIn("observe it again without Last-Event-ID", gone["message"])
            self.assertNotIn("/v1/locks", gone["message"])
            st, _, view = srv.request("GET", path("el/crash"))
            self.assertEqual(view["leader"], {"owner": "a", "term": a["term"], "value": {"v": 2},
                                              "since_ms": a["acquired_at_ms"]})
            obs = observe(srv.port, "el/crash")
            self.assertEqual(next_message(obs)[1:], ("leader", {"owner": "a", "term": a["term"], "value": {"v": 2}}))
            obs.close()
            st, _, b = srv.request("POST", path("el/crash", "campaign"), body={"owner": "b"})
            self.assertEqual((st, b["error"]), (409, "not_leader"), b)
            self.assertEqual(srv.request("POST", path("el/crash", "resign"), body={"lease": a["lease"]})[0], 200)


class ElectionEventsOffTest(unittest.TestCase):
    def test_observe_needs_the_events(self):
        with Server(extra_args=["--events-keep", "0"]) as srv:
            st, _, e = srv.request("GET", path("el/x", "observe"))
            self.assertEqual((st, e["error"]), (404, "not_found"), e)


if __name__ == "__main__":
    unittest.main()
