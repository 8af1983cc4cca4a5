"""The command line's coordination commands (issue 40) against the real server:
`leasegate campaign NAME --value V -- CMD` runs CMD as the election's leader with run's
guarantees (the term in its environment, renewed, stopped when leadership is lost, resigned
when it ends); `leasegate leader NAME [--watch]` prints the election, or follows its observers'
stream one JSON line per event, across a cut connection with Last-Event-ID (none twice, none
missed); `--permits N` of run and acquire takes N of a semaphore's permits in one lease.

Run: LEASEGATE_BIN=build/leasegate python3 tests/integration/test_cli_coord.py

Every `leasegate` process runs in its own session and is killed by process group in tearDown
(test_cli.CliTestBase); only 127.0.0.1; every wait is bounded. Nothing is checked against the
test's clock: orders and states come from the server's answers and the commands' output."""

import json
import os
import queue
import signal
import subprocess
import threading
import types
import unittest

import harness
from stall_proxy import StallProxy
from test_cli import BIN, EXIT_LEASE_LOST, EXIT_NOT_ACQUIRED, EXIT_USAGE, CliTestBase, free_closed_port, wait_for


def epath(name, action=""):
    return "/v1/elections/%s%s" % (name, "/" + action if action else "")


class LineReader:
    """The lines a background process prints on stdout, read by a thread into a queue."""

    def __init__(self, proc):
        self.q = queue.Queue()
        self.proc = proc
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.q.put(line.decode("utf-8", "replace"))
        self.q.put(None)

    def next(self, timeout=30):
        try:
            line = self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no line from the watch within %d s" % timeout)
        if line is None:
            raise AssertionError("the watch ended; stderr: %s" % self.proc.stderr.read().decode("utf-8", "replace"))
        return json.loads(line)


class CampaignTests(CliTestBase):
    def election(self, name):
        st, _, body = self.srv.request("GET", epath(name))
        self.assertEqual(st, 200, body)
        return body

    def start_campaign(self, name, cmd, flags=(), server=None):
        args = [BIN, "campaign", name, "--server", server or self.srv.url] + list(flags) + ["--"] + list(cmd)
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.env(), cwd=self.dir, start_new_session=True)
        self.procs.append(p)
        return p

    def test_campaign_runs_the_command_as_leader_and_resigns_after(self):
        name = self.lock_name("camp")
        # CMD reads the election through the same binary: it leads, with the value given.
        cmd = ["sh", "-c", 'echo "$LEASEGATE_ELECTION $LEASEGATE_TERM $LEASEGATE_TOKEN"; '
                           '"$0" leader "$LEASEGATE_ELECTION" --server "$LEASEGATE_SERVER"', BIN]
        rc, out, err = self.cli(["campaign", name, "--value-json", '{"url":"http://10.0.0.7:8080"}',
                                 "--owner", "sched-1", "--server", self.srv.url, "--"] + cmd)
        self.assertEqual(rc, 0, err)
        first, state = out.split("\n", 1)
        got_name, term, token = first.split()
        self.assertEqual((got_name, term), (name, token))
        state = json.loads(state)
        self.assertEqual(state["leader"]["owner"], "sched-1")
        self.assertEqual(state["leader"]["term"], int(term))
        self.assertEqual(state["leader"]["value"], {"url": "http://10.0.0.7:8080"})
        # CMD ended: the leader resigned, and the election shows the vacancy.
        after = self.election(name)
        self.assertIsNone(after["leader"], after)
        self.assertIsNotNone(after["vacant_since_ms"], after)
        # --value is text: sent as a JSON string.
        rc, out, err = self.cli(["campaign", name, "--value", "10.0.0.8:8080", "--server", self.srv.url, "--",
                                 "sh", "-c", '"$0" leader "$LEASEGATE_ELECTION"', BIN])
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["leader"]["value"], "10.0.0.8:8080")

    def test_candidates_wait_in_order_and_no_wait_is_not_elected(self):
        name = self.lock_name("queue")
        go = self.path("go")
        # The first leader runs until the file `go` appears (a bounded loop).
        hold = ["sh", "-c", 'echo "$LEASEGATE_TERM" > "$0.term"; i=0; '
                            'while [ ! -e "$0" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done', go]
        a = self.start_campaign(name, hold, ["--owner", "a"])
        wait_for(lambda: os.path.exists(go + ".term"), 30, what="the first leader's CMD")
        b = self.start_campaign(name, ["sh", "-c", 'echo "$LEASEGATE_TERM"'], ["--owner", "b"])
        wait_for(lambda: [c["owner"] for c in self.election(name)["candidates"]] == ["b"], 30,
                 what="b among the candidates")
        rc, out, err = self.cli(["campaign", name, "--no-wait", "--owner", "c", "--server", self.srv.url, "--",
                                 "true"])
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.assertIn("not elected", err)
        self.assertIn("led by 'a'", err)
        with open(go, "w"):
            pass
        rc, _, err = self.finish(a)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.finish(b)
        self.assertEqual(rc, 0, err)
        with open(go + ".term") as f:
            first_term = int(f.read())
        self.assertGreater(int(out), first_term)  # b led after a, with a later term

    def test_a_revoked_leader_has_its_command_stopped(self):
        name = self.lock_name("revoked")
        started = self.path("started")
        p = self.start_campaign(name, ["sh", "-c", 'echo $$ > "$0"; exec sleep 60', started],
                                ["--ttl", "3s"])
        self.wait_pid_file("started", p)
        st, _, body = self.srv.request("DELETE", epath(name))  # an admin's force-release
        self.assertEqual(st, 200, body)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, EXIT_LEASE_LOST, err)
        self.assertIn("leasegate campaign:", err)

    def test_a_refused_campaign_says_campaign(self):
        rc, _, err = self.cli(["campaign", "e/big", "--value", "x" * 5000, "--server", self.srv.url, "--", "true"])
        self.assertNotEqual(rc, 0, err)
        self.assertIn("campaign failed (HTTP 413)", err)  # it said "acquire failed"

    def test_usage_errors(self):
        s = ["--server", self.srv.url]
        for args, says in [
            (["campaign"], "give the election's name"),
            (["campaign", "--value", "x", "--", "true"], "give the election's name"),
            (["campaign", "e", "--lock", "x", "--", "true"], "--lock is a lock's"),
            (["campaign", "e", "--permits", "2", "--", "true"], "--permits is a lock's or a semaphore's"),
            (["campaign", "e", "--read", "--", "true"], "--read"),
            (["campaign", "e/observe", "--", "true"], "may not end in"),
            (["campaign", "e", "--value", "a", "--value-json", "1", "--", "true"], "not both"),
            (["campaign", "e", "--value-json", "{", "--", "true"], "--value-json must be one JSON value"),
            (["campaign", "e", "--value", "a"], "no command"),
            (["run", "--lock", "x", "--value", "a", "--", "true"], "bad argument '--value'"),
            (["run", "--lock", "x", "--permits", "2", "--", "true"], "--permits is a semaphore's"),
            (["run", "--semaphore", "x", "--limit", "2", "--permits", "3", "--", "true"], "from 1 to --limit (2)"),
            (["acquire", "--semaphore", "x", "--limit", "2", "--permits", "0"], "from 1 to --limit"),
            (["acquire", "--semaphore", "x", "--limit", "2", "--permits", "1x"], "from 1 to --limit"),
            (["leader"], "give the election's name"),
            (["leader", "a/campaign"], "may not end in"),
            (["leader", "a", "--bogus"], "unknown argument"),
        ]:
            rc, _, err = self.cli(args + s)
            self.assertEqual(rc, EXIT_USAGE, (args, err))
            self.assertIn(says, err, args)


class PermitTests(CliTestBase):
    def test_permits_in_one_lease_by_acquire_and_run(self):
        sem = self.lock_name("permits")
        s = ["--server", self.srv.url]
        rc, out, err = self.cli(["acquire", "--semaphore", sem, "--limit", "5", "--permits", "3", "--owner", "a"] + s)
        self.assertEqual(rc, 0, err)
        a = json.loads(out)
        rc, out, err = self.cli(["status", "--semaphore", sem] + s)
        state = json.loads(out)
        self.assertEqual([(h["owner"], h["permits"]) for h in state["holders"]], [("a", 3)])
        self.assertEqual(state["available"], 2)
        # Three more are not free: run is not acquired, and says how many are.
        rc, _, err = self.cli(["run", "--semaphore", sem, "--limit", "5", "--permits", "3", "--no-wait", "--",
                               "true"] + [])
        self.assertEqual(rc, 1, err)  # no --server: the default server is not this one
        env = self.env(server=self.srv.url)
        rc, _, err = self.cli(["run", "--semaphore", sem, "--limit", "5", "--permits", "3", "--no-wait", "--", "true"],
                              env=env)
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.assertIn("3 permits of semaphore '%s' not acquired" % sem, err)
        self.assertIn("2 of 5 are free", err)
        # Two are: CMD holds them in one lease, which its own status shows.
        rc, out, err = self.cli(["run", "--semaphore", sem, "--limit", "5", "--permits", "2", "--no-wait", "--",
                                 "sh", "-c", '"$0" status --semaphore "$LEASEGATE_SEMAPHORE"', BIN], env=env)
        self.assertEqual(rc, 0, err)
        during = json.loads(out)
        self.assertEqual(sorted(h["permits"] for h in during["holders"]), [2, 3])
        self.assertEqual(during["available"], 0)
        rc, out, err = self.cli(["release", "--semaphore", sem, "--lease-file", "-"] + s, stdin=a["lease"].encode())
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli(["status", "--semaphore", sem] + s)
        self.assertEqual(json.loads(out)["available"], 5)  # run's lease was released when CMD ended, a's now


class LeaderWatchTests(CliTestBase):
    def campaign(self, name, owner, value=None, **more):
        body = {"owner": owner, "value": value, "ttl_ms": 60000}
        body.update(more)
        st, _, r = self.srv.request("POST", epath(name, "campaign"), body=body)
        self.assertEqual(st, 200, r)
        return r

    def watch(self, name, server):
        p = subprocess.Popen([BIN, "leader", name, "--watch", "--server", server], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(), cwd=self.dir,
                             start_new_session=True)
        self.procs.append(p)
        return LineReader(p)

    def test_leader_prints_the_election(self):
        name = self.lock_name("show")
        rc, out, err = self.cli(["leader", name, "--server", self.srv.url])
        self.assertEqual(rc, 0, err)
        self.assertIsNone(json.loads(out)["leader"])
        a = self.campaign(name, "a", {"v": 1})
        rc, out, err = self.cli(["leader", name, "--server", self.srv.url])
        self.assertEqual(rc, 0, err)
        leader = json.loads(out)["leader"]
        self.assertEqual((leader["owner"], leader["term"], leader["value"]), ("a", a["term"], {"v": 1}))
        self.srv.request("POST", epath(name, "resign"), body={"lease": a["lease"]})

    def test_watch_follows_leaders_and_vacancies_across_a_cut_connection(self):
        name = self.lock_name("watch")
        proxy = StallProxy([types.SimpleNamespace(endpoint="127.0.0.1:%d" % self.srv.port)])
        self.addCleanup(proxy.close)
        # The first server of the list is never there: the watch moves on to the proxy.
        w = self.watch(name, "http://127.0.0.1:%d,http://%s" % (free_closed_port(), proxy.endpoint))
        self.assertEqual(w.next(), {"event": "vacant", "reason": None, "previous_term": None})
        a = self.campaign(name, "a", "va")
        self.assertEqual(w.next(), {"event": "leader", "owner": "a", "term": a["term"], "value": "va"})
        st, _, body = self.srv.request("POST", epath(name, "proclaim"), body={"lease": a["lease"], "value": "va2"})
        self.assertEqual(st, 200, body)
        self.assertEqual(w.next(), {"event": "leader", "owner": "a", "term": a["term"], "value": "va2"})
        # The watch's connection is cut and held while a resigns and b leads: it reconnects
        # with the last id and prints what it missed, once.
        proxy.stall()
        proxy.cut()
        self.srv.request("POST", epath(name, "resign"), body={"lease": a["lease"]})
        b = self.campaign(name, "b", "vb")
        proxy.release()
        self.assertEqual(w.next(), {"event": "vacant", "reason": "resigned", "previous_term": a["term"]})
        self.assertEqual(w.next(), {"event": "leader", "owner": "b", "term": b["term"], "value": "vb"})
        # The next change is the next line: nothing was printed twice.
        st, _, body = self.srv.request("DELETE", epath(name))
        self.assertEqual(st, 200, body)
        self.assertEqual(w.next(), {"event": "vacant", "reason": "revoked", "previous_term": b["term"]})

    def test_watch_of_a_server_without_events_fails(self):
        srv = harness.Server(extra_args=["--events-keep", "0"])
        self.servers.append(srv)
        rc, _, err = self.cli(["leader", "e", "--watch", "--server", srv.url], timeout=30)
        self.assertEqual(rc, 1, err)
        self.assertIn("HTTP 404", err)


if __name__ == "__main__":
    unittest.main()
