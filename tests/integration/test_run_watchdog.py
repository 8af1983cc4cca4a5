"""`leasegate run` against the ways it can lose control of its command: SIGKILL or SIGSTOP of
run itself (the command's grandchildren included), a killed watchdog, a command that stops
itself (--timeout), servers that are down when run starts or one of several, and the exit
statuses that tell run's own failures from the command's (--exit-codes distinct).

Run: LEASEGATE_BIN=build/leasegate python3 tests/integration/test_run_watchdog.py
"""

import os
import signal
import subprocess
import time
import unittest

import harness
from test_cli import (CliTestBase, EXIT_FAILED, EXIT_LEASE_LOST, EXIT_NOT_ACQUIRED, free_closed_port, now_ms,
                      pid_dead, wait_for)

EXIT_TIMEOUT = 124
DISTINCT = {"unreachable": 69, "usage": 64, "not_acquired": 73, "lost": 75, "timeout": 79, "internal": 70}

# CMD: a shell whose pid is the process group, with a grandchild in the background.
FAMILY = "echo $$ > child.pid; sleep 333 & echo $! > gc.pid; sleep 334"


def ppid_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[1])


class RunWatchdogTests(CliTestBase):
    def start_family(self, lock, flags=("--ttl", "4s")):
        p = self.start_run(lock, ["sh", "-c", FAMILY], server=self.srv.url, flags=list(flags))
        child = self.wait_pid_file("child.pid", p)
        gc = self.wait_pid_file("gc.pid", p, group_leader=False)
        return p, child, gc

    def expiry_of(self, lock):
        body = self.holder(self.srv, lock)
        self.assertTrue(body["held"], body)
        return body["holder"]["expires_at_ms"]

    def test_sigkill_of_run_takes_the_whole_group(self):
        # The defect: only the direct child got the parent-death signal; `sleep 333 &` lived on
        # past the lease.
        lock = self.lock_name("kill9-family")
        p, child, gc = self.start_family(lock)
        expiry = self.expiry_of(lock)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        wait_for(lambda: pid_dead(child) and pid_dead(gc), 10.0, what="CMD and its grandchild to die")
        self.assertLess(now_ms(), expiry, "the group outlived the lease")

    def test_sigstop_of_run_stops_the_group_before_the_lease_ends(self):
        # The defect: a stopped run renewed nothing and killed nothing; CMD ran on while the
        # next holder had the lock.
        lock = self.lock_name("stopped-family")
        p, child, gc = self.start_family(lock, flags=("--ttl", "2s", "--grace", "500ms"))
        os.kill(p.pid, signal.SIGSTOP)
        try:
            c = self.srv.new_client()
            try:
                st, _, body = c.acquire(lock, owner="next", ttl_ms=30000, wait_ms=15000)
            finally:
                c.close()
            self.assertEqual(st, 200, body)
            # When the next holder gets the lock, nothing of the old command may run.
            self.assertTrue(pid_dead(child) and pid_dead(gc), "CMD still ran when the next holder got the lock")
        finally:
            os.kill(p.pid, signal.SIGCONT)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, EXIT_LEASE_LOST, err)
        h = self.holder(self.srv, lock)["holder"]
        self.assertEqual((h["owner"], h["token"]), ("next", body["token"]), "run's release touched the next holder")

    def test_killed_watchdog_makes_run_kill_the_group(self):
        lock = self.lock_name("watchdog-killed")
        p, child, gc = self.start_family(lock)
        watchdog = ppid_of(child)
        self.assertNotEqual(watchdog, p.pid, "CMD should be the watchdog's child, not run's")
        os.kill(watchdog, signal.SIGKILL)
        wait_for(lambda: pid_dead(child) and pid_dead(gc), 10.0, what="the group to die with its watchdog")
        rc, _, err = self.finish(p)
        self.assertEqual(rc, EXIT_FAILED, err)
        self.assertIn("watchdog", err)
        self.assertFalse(self.holder(self.srv, lock)["held"], "the lock was not released")

    def test_run_signals_do_not_reach_the_watchdog(self):
        # SIGTERM to run's process group (a service manager stopping the job): passed to CMD,
        # which exits cleanly, and the watchdog still reports how it ended.
        lock = self.lock_name("group-term")
        script = "trap 'exit 0' TERM; echo $$ > child.pid; while :; do sleep 0.05; done"
        p = self.start_run(lock, ["sh", "-c", script], server=self.srv.url)
        self.wait_pid_file("child.pid", p)
        os.killpg(p.pid, signal.SIGTERM)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_timeout_stops_a_stopped_command(self):
        lock = self.lock_name("timeout")
        p = self.start_run(lock, ["sh", "-c", "echo $$ > child.pid; sleep 333 & kill -STOP $$; exit 3"],
                           server=self.srv.url, flags=["--timeout", "1s", "--grace", "300ms"])
        child = self.wait_pid_file("child.pid", p)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, EXIT_TIMEOUT, err)
        self.assertIn("--timeout", err)
        self.assertTrue(pid_dead(child))
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_timeout_not_reached_keeps_the_status(self):
        p = self.start_run(self.lock_name("timeout-ok"), ["sh", "-c", "exit 6"], server=self.srv.url,
                           flags=["--timeout", "30s"])
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 6, err)

    def test_wait_retries_until_the_server_is_up(self):
        # run starts while nothing listens; the server comes up a moment later on that port.
        port = free_closed_port()
        lock = self.lock_name("late-server")
        p = self.start_run(lock, ["sh", "-c", "echo $LEASEGATE_TOKEN > token.txt"],
                           server="http://127.0.0.1:%d" % port, flags=["--wait", "30s"])
        time.sleep(0.5)
        self.assertIsNone(p.poll(), "run gave up while --wait had 29 s left")
        srv = harness.Server(extra_args=["--listen", "127.0.0.1:%d" % port], start=False)
        self.servers.append(srv)
        srv.start()
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        with open(self.path("token.txt")) as f:
            self.assertTrue(f.read().strip().isdigit())

    def test_next_server_answers_when_the_first_is_down(self):
        servers = "http://127.0.0.1:%d,%s" % (free_closed_port(), self.srv.url)
        lock = self.lock_name("two-servers")
        p = self.start_run(lock, ["sh", "-c", 'printf "%s\\n" "$LEASEGATE_SERVER" > srv.txt; sleep 1'],
                           server=servers, flags=["--ttl", "900ms", "--no-wait"])
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        with open(self.path("srv.txt")) as f:
            self.assertEqual(f.read().strip(), servers)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_unreachable_within_wait_fails_after_retrying(self):
        url = "http://127.0.0.1:%d" % free_closed_port()
        for flags in (["--wait", "700ms"], ["--no-wait"]):
            rc, _, err = self.cli(["run", "--lock", self.lock_name("down"), "--server", url] + flags +
                                  ["--", "touch", self.path("ran")])
            self.assertEqual(rc, EXIT_FAILED, (flags, err))
            self.assertIn("could not acquire", err)
        self.assertFalse(os.path.exists(self.path("ran")))

    def test_sigterm_while_waiting_ends_the_wait(self):
        lock = self.lock_name("wait-term")
        st, _, held = self.srv.acquire(lock, owner="holder", ttl_ms=60000)
        self.assertEqual(st, 200, held)
        p = self.start_run(lock, ["touch", self.path("ran")], server=self.srv.url, flags=["--wait", "60s"])
        self.srv.wait_until(lambda: self.srv.waiters(lock) == 1, what="run to wait in the queue")
        os.kill(p.pid, signal.SIGTERM)
        rc, _, err = self.finish(p, timeout=15)
        self.assertEqual(rc, 128 + signal.SIGTERM, err)
        self.assertIn("interrupted", err)
        self.assertFalse(os.path.exists(self.path("ran")))
        self.srv.wait_until(lambda: self.srv.waiters(lock) == 0, what="the waiter to leave")
        self.srv.release(lock, held["lease"])

    def test_distinct_exit_codes(self):
        down = "http://127.0.0.1:%d" % free_closed_port()
        lock = self.lock_name("codes")
        st, _, held = self.srv.acquire(lock, owner="holder", ttl_ms=60000)
        self.assertEqual(st, 200, held)
        d = ["--exit-codes", "distinct"]
        cases = [
            (["--lock", lock, "--server", down, "--no-wait"] + d + ["--", "true"], DISTINCT["unreachable"]),
            (["--lock", lock, "--server", self.srv.url, "--no-wait"] + d + ["--", "true"], DISTINCT["not_acquired"]),
            (["--lock", lock, "--ttl", "5x"] + d + ["--", "true"], DISTINCT["usage"]),
            (["--lock", lock + "-free", "--server", self.srv.url] + d + ["--", "sh", "-c", "exit 5"], 5),
            (["--lock", lock + "-free", "--server", self.srv.url] + d + ["--", "sh", "-c", "exit 70"], 1),
            (["--lock", lock + "-free", "--server", self.srv.url, "--timeout", "300ms"] + d +
             ["--", "sleep", "30"], DISTINCT["timeout"]),
            (["--lock", lock, "--server", self.srv.url, "--no-wait", "--", "true"], EXIT_NOT_ACQUIRED),
            (["--lock", lock, "--exit-codes", "loud", "--", "true"], 2),
        ]
        for args, want in cases:
            with self.subTest(args=args):
                rc, _, err = self.cli(["run"] + args)
                self.assertEqual(rc, want, err)
        self.srv.release(lock, held["lease"])

    def test_stopped_watchdog_does_not_stop_run(self):
        # Found in review: run wrote to the watchdog with a blocking send. With the watchdog
        # stopped, its socket filled up (a few hundred messages: renewals and forwarded
        # signals) and run hung in send(): no renewal, no kill, the lease ran out while CMD ran.
        lock = self.lock_name("stopped-watchdog")
        script = ("trap '' HUP; echo $$ > child.pid; i=0; "
                  "while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; [ -e go ] || exit 9")
        p = self.start_run(lock, ["sh", "-c", script], server=self.srv.url, flags=["--ttl", "1500ms"])
        child = self.wait_pid_file("child.pid", p)
        watchdog = ppid_of(child)
        os.kill(watchdog, signal.SIGSTOP)
        try:
            for _ in range(600):  # each is read by run and passed on: more than the socket holds
                os.kill(p.pid, signal.SIGHUP)
                time.sleep(0.002)
            first = self.expiry_of(lock)
            wait_for(lambda: self.expiry_of(lock) != first, 5.0, what="a renewal after the flood of signals")
        finally:
            os.kill(watchdog, signal.SIGCONT)
        self.assertFalse(pid_dead(child))
        open(self.path("go"), "w").close()
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_zombie_left_in_the_group_does_not_hold_the_lock(self):
        # Found in review: a member whose parent left the group (setsid) and never reaps it
        # stays a zombie; kill(-pgid, 0) counted it, so run held the lock for ever.
        helper = ("import os, sys, time\n"
                  "if os.fork() == 0:\n    os._exit(0)\n"
                  "os.setsid()\n"
                  "open(sys.argv[1], 'w').write('%d\\n' % os.getpid())\n"
                  "time.sleep(60)\n")
        lock = self.lock_name("zombie")
        # The command waits until the helper has set itself up (its pid file written, after
        # the fork and setsid), however long Python takes to start, then exits.
        wait_helper = ('python3 -c "$0" helper.pid >/dev/null 2>&1 & i=0; '
                       'while [ ! -s helper.pid ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done')
        p = self.start_run(lock, ["sh", "-c", wait_helper, helper], server=self.srv.url)
        self.wait_pid_file("helper.pid", p, group_leader=False)
        rc, _, err = self.finish(p, timeout=15)
        self.assertEqual(rc, 0, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_ignored_hangup_stays_ignored(self):
        # Found in review: under nohup, run passed SIGHUP on and CMD lost the ignored
        # disposition. What the caller ignores stays ignored, in CMD too.
        lock = self.lock_name("nohup")
        script = "grep SigIgn /proc/self/status > ign.txt; echo $$ > child.pid; sleep 2"
        args = [harness.binary_path(), "run", "--lock", lock, "--server", self.srv.url, "--", "sh", "-c", script]
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.env(), cwd=self.dir, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        self.procs.append(p)
        child = self.wait_pid_file("child.pid", p)
        os.kill(p.pid, signal.SIGHUP)
        with open(self.path("ign.txt")) as f:
            mask = int(f.read().split()[1], 16)
        self.assertTrue(mask & (1 << (signal.SIGHUP - 1)), "SIGHUP is not ignored in CMD")
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        self.assertTrue(pid_dead(child))

    def test_help_run_lists_the_exit_statuses(self):
        rc, out, err = self.cli(["help", "run"])
        self.assertEqual(rc, 0, err)
        for word in ("--timeout", "--exit-codes", "distinct", "69", "124", "watchdog"):
            self.assertIn(word, out)


if __name__ == "__main__":
    unittest.main()
