"""The command-line client against the real server: `leasegate run` and the script
subcommands (acquire, renew, release, status, list).

Run: LEASEGATE_BIN=build/leasegate python3 tests/integration/test_cli.py

Every process started here is stopped by PID in tearDown: each `leasegate run` is
started in its own session (its process group is killed), and the process group of
every CMD whose pid was written to a file is killed too. Only 127.0.0.1 is used and
every wait is bounded.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import harness

BIN = harness.binary_path()
RUN_TIMEOUT_S = 30.0

# Exit codes of src/cli/cli.h
EXIT_FAILED, EXIT_USAGE, EXIT_NOT_ACQUIRED, EXIT_NOT_HOLDER, EXIT_LEASE_LOST = 1, 2, 3, 4, 75


def now_ms():
    return time.time() * 1000.0


def pid_dead(pid):
    """True when pid no longer exists or is a zombie (it cannot run any more)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return True
    # state is the first field after the parenthesised command name
    state = stat[stat.rindex(")") + 2:].split()[0]
    return state in ("Z", "X")


def free_closed_port():
    """A loopback port that nothing listens on (bound, then closed)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(predicate, timeout, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def read_pid_file(path):
    """The pid in path once it is completely written (ends with a newline), else None."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    if not text.endswith("\n") or not text.strip().isdigit():
        return None
    return int(text.strip())


class CliTestBase(harness.ServerTestCase):
    """Shared server, a scratch directory per test, and process bookkeeping."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-cli-")
        self.procs = []       # Popen objects of `leasegate ...` (own sessions)
        self.child_pgids = []  # pids of CMDs (leaders of their own process groups)
        self.extra_pids = []  # grandchildren etc.
        self.servers = []     # per-test servers
        self._n = 0

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.killpg(p.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            for f in (p.stdout, p.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
        for pid in self.child_pgids:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in self.extra_pids:
            if not pid_dead(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for s in self.servers:
            if s.running():
                try:
                    os.kill(s.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            s.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)

    # Helpers ----------------------------------------------------------------
    def lock_name(self, stem):
        self._n += 1
        return "cli-%s-%d-%d" % (stem, os.getpid(), self._n)

    def path(self, name):
        return os.path.join(self.dir, name)

    def env(self, server=None, **extra):
        e = dict(os.environ)
        e.pop("LEASEGATE_SERVER", None)
        if server is not None:
            e["LEASEGATE_SERVER"] = server
        e.update(extra)
        return e

    def cli(self, args, env=None, timeout=RUN_TIMEOUT_S, stdin=None):
        """Runs `leasegate ARGS` to completion: (exit code, stdout, stderr). stdin: bytes to
        feed it (else /dev/null)."""
        p = subprocess.Popen([BIN] + list(args), stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env if env is not None else self.env(), cwd=self.dir, start_new_session=True)
        self.procs.append(p)
        try:
            out, err = p.communicate(input=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate(timeout=10)
            self.fail("leasegate %s did not finish in %.0f s; stderr: %s" % (" ".join(args), timeout, err))
        return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def start_run(self, lock, cmd, server=None, flags=(), env=None):
        """Starts `leasegate run` in the background (own session); returns the Popen."""
        args = [BIN, "run", "--lock", lock]
        if server is not None:
            args += ["--server", server]
        args += list(flags) + ["--"] + list(cmd)
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env if env is not None else self.env(), cwd=self.dir, start_new_session=True)
        self.procs.append(p)
        return p

    def finish(self, p, timeout=RUN_TIMEOUT_S):
        """Waits for a background process: (exit code, stdout, stderr)."""
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate(timeout=10)
            self.fail("leasegate run did not exit within %.0f s; stderr: %s" % (timeout, err))
        return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def wait_pid_file(self, name, p=None, timeout=15.0, group_leader=True):
        path = self.path(name)

        def ready():
            # The file first: a command may write it and exit before this looks.
            pid = read_pid_file(path)
            if pid is None and p is not None and p.poll() is not None:
                raise AssertionError("leasegate run exited (%r) before %s was written; stderr: %s"
                                     % (p.returncode, name, p.stderr.read().decode("utf-8", "replace")))
            return pid

        pid = wait_for(ready, timeout, what=name)
        (self.child_pgids if group_leader else self.extra_pids).append(pid)
        return pid

    def holder(self, srv, lock):
        st, _, body = srv.get_lock(lock)
        self.assertEqual(st, 200, body)
        return body

    def new_server(self):
        s = harness.Server()
        self.servers.append(s)
        return s


class RunTests(CliTestBase):
    # 1 ----------------------------------------------------------------------
    def test_token_and_lease_reach_the_child(self):
        lock = self.lock_name("env")
        cmd = ["sh", "-c",
               'env > env.tmp && mv env.tmp env.txt; i=0; '
               'while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; '
               '[ -e go ] || exit 9; echo $$ > child.pid']
        p = self.start_run(lock, cmd, server=self.srv.url,
                           flags=["--ttl", "5s", "--owner", "env-test", "--metadata", '{"job":"t1"}'])
        envfile = self.path("env.txt")
        wait_for(lambda: os.path.exists(envfile) or p.poll() is not None, 15, what="env.txt")
        if p.poll() is not None:
            self.fail("run exited early (%r): %s" % (p.returncode, p.stderr.read()))
        child_env = {}
        with open(envfile) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep and k.startswith("LEASEGATE_"):
                    child_env[k] = v
        for k in ("LEASEGATE_LOCK", "LEASEGATE_TOKEN", "LEASEGATE_LEASE", "LEASEGATE_SERVER"):
            self.assertIn(k, child_env, "child environment lacks %s: %r" % (k, child_env))
        self.assertEqual(child_env["LEASEGATE_LOCK"], lock)
        self.assertEqual(child_env["LEASEGATE_SERVER"], self.srv.url)
        body = self.holder(self.srv, lock)
        self.assertTrue(body["held"], body)
        self.assertEqual(str(body["holder"]["token"]), child_env["LEASEGATE_TOKEN"])
        self.assertEqual(body["holder"]["owner"], "env-test")
        self.assertEqual(body["holder"]["metadata"], {"job": "t1"})
        # The lease is the real one: the test can renew with it while the child runs.
        c = self.srv.new_client()
        try:
            st, _, rb = c.renew(lock, child_env["LEASEGATE_LEASE"], ttl_ms=5000)
        finally:
            c.close()
        self.assertEqual(st, 200, rb)
        self.assertEqual(str(rb["token"]), child_env["LEASEGATE_TOKEN"])
        open(self.path("go"), "w").close()
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_server_from_environment_reaches_child(self):
        lock = self.lock_name("envsrv")
        p = self.start_run(lock, ["sh", "-c", 'printf "%s\\n" "$LEASEGATE_SERVER" > srv.txt'],
                           env=self.env(server=self.srv.url))
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        with open(self.path("srv.txt")) as f:
            self.assertEqual(f.read().strip(), self.srv.url)

    # 2 ----------------------------------------------------------------------
    def test_exit_status_propagates_and_lock_released(self):
        cases = [(["sh", "-c", "exit 7"], 7),
                 (["sh", "-c", "exit 0"], 0),
                 (["sh", "-c", "kill -9 $$"], 128 + 9),
                 (["sh", "-c", "kill -TERM $$"], 128 + 15)]
        for cmd, want in cases:
            with self.subTest(cmd=cmd[-1]):
                lock = self.lock_name("status")
                p = self.start_run(lock, cmd, server=self.srv.url, flags=["--ttl", "5s"])
                rc, _, err = self.finish(p)
                self.assertEqual(rc, want, "run -- %r: stderr %s" % (cmd, err))
                body = self.holder(self.srv, lock)
                self.assertFalse(body["held"], body)

    def test_leftovers_of_command_stopped_before_release(self):
        """Beyond the contract list (documented in src/cli/cli_run.c): when CMD exits, what is
        left of its process group is stopped before the lock is released."""
        lock = self.lock_name("leftover")
        p = self.start_run(lock, ["sh", "-c", "sleep 60 & echo $! > gc.pid"], server=self.srv.url,
                           flags=["--ttl", "5s"])
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        gc = read_pid_file(self.path("gc.pid"))
        self.assertIsNotNone(gc)
        self.extra_pids.append(gc)
        self.assertTrue(pid_dead(gc), "background process of CMD survived leasegate run")
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_command_not_found_is_127_and_released(self):
        lock = self.lock_name("enoent")
        p = self.start_run(lock, ["/nonexistent/leasegate-no-such-cmd"], server=self.srv.url)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 127, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_renews_keep_a_short_lease_alive(self):
        """--ttl 2s while CMD runs 5 s: renewals (every ttl/3) keep the lock held,
        the expiry keeps moving, and run exits with CMD's status, not 75."""
        lock = self.lock_name("renew")
        p = self.start_run(lock, ["sleep", "5"], server=self.srv.url, flags=["--ttl", "2s"])
        expiries = set()
        deadline = time.monotonic() + 15
        seen_held = False
        while p.poll() is None and time.monotonic() < deadline:
            body = self.holder(self.srv, lock)
            if body["held"]:
                seen_held = True
                expiries.add(body["holder"]["expires_at_ms"])
                self.assertGreater(body["holder"]["expires_at_ms"], now_ms() - 50, body)
            elif seen_held:
                # not held any more: only acceptable when run is releasing at exit
                try:
                    wait_for(lambda: p.poll() is not None, 2.0)
                except AssertionError:
                    self.fail("lock not held while CMD still runs: %r" % body)
            time.sleep(0.05)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        self.assertTrue(seen_held)
        self.assertGreaterEqual(len(expiries), 4, "too few renewals: %r" % sorted(expiries))
        self.assertFalse(self.holder(self.srv, lock)["held"])

    # 3 ----------------------------------------------------------------------
    def test_concurrent_runs_never_overlap(self):
        lock = self.lock_name("mutex")
        log = self.path("intervals.log")
        script = ('echo "start $(date +%s%N) $LEASEGATE_TOKEN" >> "$1"; sleep 0.1; '
                  'echo "end $(date +%s%N) $LEASEGATE_TOKEN" >> "$1"')
        workers, rounds = 3, 4
        results = []
        res_lock = threading.Lock()

        def worker(w):
            for _ in range(rounds):
                p = self.start_run(lock, ["sh", "-c", script, "sh", log], server=self.srv.url,
                                   flags=["--ttl", "5s", "--wait", "30s", "--owner", "w%d" % w])
                try:
                    out, err = p.communicate(timeout=60)
                    rc = p.returncode
                except subprocess.TimeoutExpired:
                    rc, err = "timeout", b""
                with res_lock:
                    results.append((w, rc, err.decode("utf-8", "replace")))

        threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        self.assertFalse(any(t.is_alive() for t in threads), "workers did not finish")
        self.assertEqual(len(results), workers * rounds)
        for w, rc, err in results:
            self.assertEqual(rc, 0, "worker %d: %s" % (w, err))
        with open(log) as f:
            lines = [ln.split() for ln in f.read().splitlines()]
        self.assertEqual(len(lines), 2 * workers * rounds, lines)
        prev_end = None
        prev_token = 0
        for i in range(0, len(lines), 2):
            start, end = lines[i], lines[i + 1]
            self.assertEqual((start[0], end[0]), ("start", "end"), "lines %d-%d: %r %r" % (i, i + 1, start, end))
            self.assertEqual(start[2], end[2], "one interval has two tokens: %r %r" % (start, end))
            t0, t1, token = int(start[1]), int(end[1]), int(start[2])
            self.assertLessEqual(t0, t1)
            if prev_end is not None:
                self.assertGreaterEqual(t0, prev_end, "interval %d starts before the previous ends" % (i // 2))
            self.assertGreater(token, prev_token, "fencing tokens do not increase")
            prev_end, prev_token = t1, token
        self.assertFalse(self.holder(self.srv, lock)["held"])

    # 4 ----------------------------------------------------------------------
    def _lost_server_case(self, how, ignore_term=False):
        srv = self.new_server()
        lock = self.lock_name("srv-" + how)
        script = "echo $$ > child.pid; sleep 60 & echo $! > gc.pid; sleep 60"
        if ignore_term:  # inherited by both sleeps: only SIGKILL stops the group
            script = "trap '' TERM; " + script
        cmd = ["sh", "-c", script]
        p = self.start_run(lock, cmd, server=srv.url, flags=["--ttl", "2s", "--grace", "500ms"])
        child = self.wait_pid_file("child.pid", p)
        gc = self.wait_pid_file("gc.pid", p, group_leader=False)
        self.assertFalse(pid_dead(child))
        self.assertFalse(pid_dead(gc))
        # Wait for a renewal (expires_at_ms changes), then cut the server off at once,
        # so the last observed expiry is the one the lease really has.
        first = self.holder(srv, lock)["holder"]["expires_at_ms"]
        expiry = None

        def renewed():
            nonlocal expiry
            body = self.holder(srv, lock)
            self.assertTrue(body["held"], body)
            e = body["holder"]["expires_at_ms"]
            if e != first:
                expiry = e
                return True
            return False

        wait_for(renewed, 5.0, what="a renewal by leasegate run")
        if how == "kill":
            srv.kill9()
        else:
            os.kill(srv.pid, signal.SIGSTOP)
        cut_ms = now_ms()
        wait_for(lambda: pid_dead(child) and pid_dead(gc), 10.0, interval=0.02, what="child and grandchild to die")
        gone_ms = now_ms()
        self.assertLess(gone_ms, expiry,
                        "CMD's group still ran %.0f ms after the lease expired (expiry %d, server cut at %.0f)"
                        % (gone_ms - expiry, expiry, cut_ms))
        rc, _, err = self.finish(p, timeout=20)
        if how == "stop":
            os.kill(srv.pid, signal.SIGCONT)
            srv.stop()
        self.assertEqual(rc, EXIT_LEASE_LOST, err)
        self.assertIn("lease", err)
        return gone_ms, expiry

    def test_lease_lost_server_killed(self):
        self._lost_server_case("kill")

    def test_lease_lost_server_stopped(self):
        self._lost_server_case("stop")

    def test_lease_lost_server_killed_command_ignores_sigterm(self):
        self._lost_server_case("kill", ignore_term=True)

    # 5 ----------------------------------------------------------------------
    def test_lease_lost_run_stopped_and_lock_taken(self):
        lock = self.lock_name("stolen")
        p = self.start_run(lock, ["sh", "-c", "echo $$ > child.pid; sleep 60"], server=self.srv.url,
                           flags=["--ttl", "1s"])
        child = self.wait_pid_file("child.pid", p)
        os.kill(p.pid, signal.SIGSTOP)  # the supervisor only: it can no longer renew
        try:
            c = self.srv.new_client()
            try:
                st, _, body = c.acquire(lock, owner="thief", ttl_ms=30000, wait_ms=10000)
            finally:
                c.close()
            self.assertEqual(st, 200, body)
            thief_token = body["token"]
        finally:
            os.kill(p.pid, signal.SIGCONT)
        wait_for(lambda: pid_dead(child), 5.0, what="the child to be stopped after SIGCONT")
        rc, _, err = self.finish(p)
        self.assertEqual(rc, EXIT_LEASE_LOST, err)
        h = self.holder(self.srv, lock)
        self.assertTrue(h["held"], h)
        self.assertEqual(h["holder"]["owner"], "thief", "run's release touched the new holder: %r" % h)
        self.assertEqual(h["holder"]["token"], thief_token)

    def test_lease_lost_not_holder(self):
        """The lease is ended behind run's back (released with the lease from CMD's env,
        then another client acquires): the next renewal answers not_holder and CMD's group
        is stopped at once."""
        lock = self.lock_name("notholder")
        p = self.start_run(lock, ["sh", "-c", "echo $LEASEGATE_LEASE > lease.txt; echo $$ > child.pid; sleep 60"],
                           server=self.srv.url, flags=["--ttl", "3s", "--grace", "1s"])
        child = self.wait_pid_file("child.pid", p)
        with open(self.path("lease.txt")) as f:
            lease = f.read().strip()
        c = self.srv.new_client()
        try:
            st, _, body = c.release(lock, lease)
            self.assertEqual(st, 200, body)
            st, _, body = c.acquire(lock, owner="other", ttl_ms=30000)
            self.assertEqual(st, 200, body)
        finally:
            c.close()
        t0 = time.monotonic()
        # renewals every ttl/3 = 1 s; then SIGTERM; SIGKILL after grace/2
        wait_for(lambda: pid_dead(child), 5.0, what="the child to be stopped after not_holder")
        self.assertLess(time.monotonic() - t0, 3.0)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, EXIT_LEASE_LOST, err)
        self.assertIn("lease lost", err)
        self.assertEqual(self.holder(self.srv, lock)["holder"]["owner"], "other")

    # 6 ----------------------------------------------------------------------
    def test_no_wait_and_wait_on_held_lock(self):
        lock = self.lock_name("held")
        st, _, body = self.srv.acquire(lock, owner="holder-xyz", ttl_ms=60000)
        self.assertEqual(st, 200, body)
        marker = self.path("ran")
        cmd = ["sh", "-c", "touch '%s'" % marker]
        rc, _, err = self.cli(["run", "--lock", lock, "--server", self.srv.url, "--no-wait", "--"] + cmd)
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.assertIn("holder-xyz", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        t0 = time.monotonic()
        rc, _, err = self.cli(["run", "--lock", lock, "--server", self.srv.url, "--wait", "300ms", "--"] + cmd)
        elapsed = time.monotonic() - t0
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.assertIn("holder-xyz", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertGreaterEqual(elapsed, 0.25)
        self.assertLess(elapsed, 5.0)
        self.assertFalse(os.path.exists(marker), "CMD ran without the lock")
        self.srv.release(lock, body["lease"])

    # 7 ----------------------------------------------------------------------
    def _signal_passed_on(self, sig, signame):
        lock = self.lock_name("sig" + signame)
        script = ('trap \'echo "got %s" > got.txt; exit 0\' %s; echo $$ > child.pid; '
                  'i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; exit 5') % (signame, signame)
        p = self.start_run(lock, ["sh", "-c", script], server=self.srv.url, flags=["--ttl", "5s"])
        child = self.wait_pid_file("child.pid", p)
        self.assertTrue(self.holder(self.srv, lock)["held"])
        os.kill(p.pid, sig)
        rc, _, err = self.finish(p, timeout=15)
        self.assertEqual(rc, 0, err)
        with open(self.path("got.txt")) as f:
            self.assertEqual(f.read().strip(), "got %s" % signame)
        self.assertTrue(pid_dead(child))
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_sigterm_passed_to_command(self):
        self._signal_passed_on(signal.SIGTERM, "TERM")

    def test_sigint_passed_to_command(self):
        self._signal_passed_on(signal.SIGINT, "INT")

    def test_sigterm_untrapped_status_128_plus_15(self):
        lock = self.lock_name("sigdef")
        p = self.start_run(lock, ["sh", "-c", "echo $$ > child.pid; exec sleep 60"], server=self.srv.url)
        self.wait_pid_file("child.pid", p)
        os.kill(p.pid, signal.SIGTERM)
        rc, _, err = self.finish(p, timeout=15)
        self.assertEqual(rc, 128 + 15, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    # usage ------------------------------------------------------------------
    def test_run_usage_errors(self):
        lock = self.lock_name("usage")
        bad = [
            ["run", "--lock", lock, "--ttl", "15x", "--", "true"],
            ["run", "--lock", lock, "--wait", "soon", "--", "true"],
            ["run", "--lock", lock, "--", ],
            ["run", "--lock", lock, "true"],
            ["run", "--", "true"],
            ["run", "--lock", lock, "--bogus", "--", "true"],
            ["run", "--lock", lock, "--metadata", "[1]", "--", "true"],
        ]
        for args in bad:
            with self.subTest(args=args):
                rc, _, err = self.cli(args, env=self.env(server=self.srv.url))
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertTrue(err.strip(), "no message on stderr")
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_run_unreachable_server(self):
        url = "http://127.0.0.1:%d" % free_closed_port()
        marker = self.path("ran")
        rc, _, err = self.cli(["run", "--lock", self.lock_name("unreach"), "--server", url, "--wait", "500ms",
                               "--", "touch", marker], timeout=20)
        self.assertEqual(rc, EXIT_FAILED, err)
        self.assertFalse(os.path.exists(marker))


class RunSupervisorHardeningTests(CliTestBase):
    """Ways the supervisor itself could be stopped or killed while CMD runs on."""

    def test_grace_below_minimum_is_refused(self):
        rc, _, err = self.cli(["run", "--lock", self.lock_name("grace"), "--ttl", "2s", "--grace", "0ms",
                               "--server", self.srv.url, "--", "true"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--grace", err)

    def test_sigquit_is_passed_to_cmd(self):
        lock = self.lock_name("quit")
        script = "trap 'echo got QUIT > %s; exit 0' QUIT; echo $$ > %s; while :; do sleep 0.05; done" % (
            self.path("quit.txt"), self.path("child.pid"))
        p = self.start_run(lock, ["bash", "-c", script], server=self.srv.url)
        self.wait_pid_file("child.pid", p)
        os.kill(p.pid, signal.SIGQUIT)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        with open(self.path("quit.txt")) as f:
            self.assertEqual(f.read().strip(), "got QUIT")
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_job_control_stop_is_ignored(self):
        # Ctrl-Z used to stop CMD for good while its lease kept being renewed.
        lock = self.lock_name("tstp")
        # CMD lives until the test creates "go" (bounded), so it is still there
        # to be looked at however slow this machine is.
        p = self.start_run(lock, ["sh", "-c", "echo $$ > %s; i=0; "
                                  "while [ ! -e %s ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
                                  "echo done > %s" % (self.path("child.pid"), self.path("go"),
                                                      self.path("done.txt"))], server=self.srv.url)
        child = self.wait_pid_file("child.pid", p)
        os.kill(p.pid, signal.SIGTSTP)
        time.sleep(0.2)
        with open("/proc/%d/stat" % child) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        self.assertNotEqual(state, "T", "CMD was stopped by SIGTSTP")
        open(self.path("go"), "w").close()
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        with open(self.path("done.txt")) as f:
            self.assertEqual(f.read().strip(), "done")
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_killed_supervisor_takes_cmd_with_it(self):
        # SIGKILL (or the OOM killer) on the supervisor: CMD must not run on unsupervised.
        lock = self.lock_name("kill")
        p = self.start_run(lock, ["sh", "-c", "echo $$ > %s; exec sleep 60" % self.path("child.pid")],
                           server=self.srv.url)
        child = self.wait_pid_file("child.pid", p)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        wait_for(lambda: pid_dead(child), 5.0, what="CMD gone after its supervisor was killed")


class ScriptCommandTests(CliTestBase):
    def j(self, out):
        try:
            return json.loads(out)
        except ValueError:
            self.fail("stdout is not JSON: %r" % out)

    def test_get_commands_send_the_key_too(self):
        """status, list and healthcheck are GETs: they sent $LEASEGATE_KEY only with a
        body, so a server with keys answered them 401."""
        keys = os.path.join(self.dir, "keys.txt")
        rc, out, err = self.cli(["keygen", "ops", "client", "*"])
        self.assertEqual(rc, 0, err)
        key, line = out.splitlines()
        with open(keys, "w") as f:
            f.write(line + "\n")
        srv = harness.Server(extra_args=["--auth-file", keys, "--auth-metrics"], start=False)
        self.servers.append(srv)
        srv.start()
        env = self.env(srv.url, LEASEGATE_KEY=key)
        rc, out, err = self.cli(["acquire", "--lock", "keyed/1", "--owner", "o"], env=env)
        self.assertEqual(rc, 0, err)
        for args in (["status", "--lock", "keyed/1"], ["list"], ["healthcheck", "--server", srv.url]):
            rc, out, err = self.cli(args, env=env)
            self.assertEqual(rc, 0, (args, out, err))
        rc, out, err = self.cli(["status", "--lock", "keyed/1"], env=self.env(srv.url))
        self.assertNotEqual(rc, 0, out)  # and without a key it is refused

    def test_a_keys_listing_refusal_names_the_flag_and_the_default_owner_the_process(self):
        """Issue 39: `leasegate list` with a key confined to a prefix said "add ?prefix=",
        the API's spelling, not the CLI's; and acquire's default owner was "leasegate-cli",
        which says nothing of who holds the lock. Now --prefix, and HOST:PID."""
        keys = os.path.join(self.dir, "keys-narrow.txt")
        rc, out, err = self.cli(["keygen", "narrow", "client", "team/"])
        self.assertEqual(rc, 0, err)
        key, line = out.splitlines()
        with open(keys, "w") as f:
            f.write(line + "\n")
        srv = harness.Server(extra_args=["--auth-file", keys], start=False)
        self.servers.append(srv)
        srv.start()
        env = self.env(srv.url, LEASEGATE_KEY=key)
        rc, out, err = self.cli(["list"], env=env)
        self.assertEqual(rc, 1, err)
        self.assertIn("403", err)
        self.assertIn("--prefix PREFIX within 'team/'", err)
        self.assertNotIn("?prefix=", err)
        rc, out, err = self.cli(["list", "--prefix", "team/"], env=env)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli(["acquire", "--lock", "team/owned"], env=env)
        self.assertEqual(rc, 0, err)
        owner = self.j(out)["owner"]
        self.assertRegex(owner, r"^%s:[0-9]+$" % re.escape(socket.gethostname()[:63]))
        self.assertNotEqual(owner, "leasegate-cli")

    def test_a_silent_server_is_left_after_the_first_byte_timeout(self):
        """Issue 37: a server that accepts connections and never answers (a paused
        gateway) costs --first-byte-timeout and a /readyz that gets no answer either, not
        the command's timeout (30 s): the next server answers. A long-poll on a live
        server outlasts many such timeouts: its /readyz says it is ready."""
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes connections; nobody answers
        self.addCleanup(silent.close)
        servers = "http://127.0.0.1:%d,%s" % (silent.getsockname()[1], self.srv.url)
        lock = self.lock_name("silent")
        rc, out, err = self.cli(["acquire", "--lock", lock, "--owner", "o", "--server", servers,
                                 "--first-byte-timeout", "300ms"], timeout=20)
        self.assertEqual(rc, 0, err)
        lease = self.j(out)["lease"]
        rc, out, err = self.cli(["status", "--lock", lock], timeout=20,
                                env=self.env(servers, LEASEGATE_FIRST_BYTE_TIMEOUT="300ms"))
        self.assertEqual((rc, self.j(out)["held"]), (0, True), err)
        before = self.srv.metric("leasegate_waiter_disconnects_total")
        threading.Timer(1.5, lambda: self.srv.release(lock, lease)).start()
        rc, out, err = self.cli(["acquire", "--lock", lock, "--owner", "w", "--wait", "20s", "--server", self.srv.url,
                                 "--first-byte-timeout", "200ms"], timeout=30)
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.srv.metric("leasegate_waiter_disconnects_total"), before)
        rc, _, err = self.cli(["status", "--lock", lock, "--first-byte-timeout", "5"])
        self.assertEqual(rc, 2, err)
        self.assertIn("needs a unit", err)

    # 8 ----------------------------------------------------------------------
    def test_acquire_status_renew_release(self):
        lock = self.lock_name("script")
        s = ["--server", self.srv.url]
        rc, out, err = self.cli(["acquire", "--lock", lock, "--owner", "scripter", "--ttl", "20s",
                                 "--metadata", '{"k":1}'] + s)
        self.assertEqual(rc, 0, err)
        acq = self.j(out)
        self.assertIn("lease", acq)
        self.assertIn("token", acq)
        self.assertEqual(acq["ttl_ms"], 20000)
        lease = acq["lease"]

        rc, out, err = self.cli(["status", "--lock", lock] + s)
        self.assertEqual(rc, 0, err)
        st = self.j(out)
        self.assertTrue(st["held"])
        self.assertEqual(st["holder"]["owner"], "scripter")
        self.assertEqual(st["holder"]["token"], acq["token"])
        self.assertEqual(st["holder"]["metadata"], {"k": 1})

        rc, out, err = self.cli(["renew", "--lock", lock, "--lease", lease, "--ttl", "40s"] + s)
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.j(out)["ttl_ms"], 40000)

        t0 = time.monotonic()
        rc, out, err = self.cli(["acquire", "--lock", lock, "--owner", "late", "--wait", "200ms"] + s)
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.assertIn("lock_held", err)
        self.assertEqual(out, "")
        self.assertLess(time.monotonic() - t0, 5.0)

        rc, out, err = self.cli(["list", "--prefix", lock] + s)
        self.assertEqual(rc, 0, err)
        names = [x["name"] for x in self.j(out)["locks"]]
        self.assertIn(lock, names)

        rc, out, err = self.cli(["release", "--lock", lock, "--lease", lease] + s)
        self.assertEqual(rc, 0, err)
        self.j(out)
        rc, out, err = self.cli(["release", "--lock", lock, "--lease", lease] + s)
        self.assertEqual(rc, EXIT_NOT_HOLDER, err)
        self.assertIn("not_holder", err)
        self.assertEqual(out, "")
        rc, out, err = self.cli(["renew", "--lock", lock, "--lease", lease] + s)
        self.assertEqual(rc, EXIT_NOT_HOLDER, err)
        self.assertIn("not_holder", err)

        rc, out, err = self.cli(["status", "--lock", lock] + s)
        self.assertEqual(rc, 0, err)
        self.assertFalse(self.j(out)["held"])

    def test_semaphores_and_readers(self):
        sem, lock = self.lock_name("sem"), self.lock_name("rw")
        s = ["--server", self.srv.url]
        permits = []
        for i in range(2):
            rc, out, err = self.cli(["acquire", "--semaphore", sem, "--limit", "2", "--owner", "p%d" % i] + s)
            self.assertEqual(rc, 0, err)
            permits.append(self.j(out))
        self.assertEqual([p["limit"] for p in permits], [2, 2])
        rc, out, err = self.cli(["acquire", "--semaphore", sem, "--limit", "2", "--wait", "100ms"] + s)
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.assertIn("semaphore_full", err)
        rc, out, err = self.cli(["acquire", "--semaphore", sem, "--limit", "3"] + s)
        self.assertEqual(rc, EXIT_FAILED, err)
        self.assertIn("limit_mismatch", err)
        rc, out, err = self.cli(["status", "--semaphore", sem] + s)
        self.assertEqual(rc, 0, err)
        self.assertEqual([h["owner"] for h in self.j(out)["holders"]], ["p0", "p1"])
        rc, out, err = self.cli(["renew", "--semaphore", sem, "--lease-file", "-"] + s, stdin=permits[0]["lease"].encode())
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli(["release", "--semaphore", sem, "--lease-file", "-"] + s,
                                stdin=permits[0]["lease"].encode())
        self.assertEqual((rc, self.j(out)["released"]), (0, True), err)
        rc, out, err = self.cli(["release", "--lock", sem, "--lease-file", "-"] + s, stdin=permits[1]["lease"].encode())
        self.assertEqual(rc, EXIT_NOT_HOLDER, err)  # a permit holds no lock
        rc, out, err = self.cli(["list", "--semaphores", "--prefix", sem] + s)
        self.assertEqual([x["name"] for x in self.j(out)["semaphores"]], [sem])
        # Readers share; a writer is not acquired.
        readers = []
        for i in range(2):
            rc, out, err = self.cli(["acquire", "--lock", lock, "--read", "--lock-delay", "1s"] + s)
            self.assertEqual(rc, 0, err)
            readers.append(self.j(out))
        self.assertEqual([(r["mode"], r["lock_delay_ms"]) for r in readers], [("read", 1000)] * 2)
        rc, out, err = self.cli(["acquire", "--lock", lock] + s)
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        rc, out, err = self.cli(["status", "--lock", lock] + s)
        self.assertEqual((self.j(out)["mode"], self.j(out)["holders_total"]), ("read", 2))
        for r in readers:
            self.assertEqual(self.srv.release(lock, r["lease"])[0], 200)
        self.srv.release(sem, permits[1]["lease"])

    def test_run_with_a_permit_or_as_a_reader(self):
        sem, lock = self.lock_name("runsem"), self.lock_name("runrw")
        env = self.env(server=self.srv.url)
        cmd = ["sh", "-c", 'echo "$LEASEGATE_SEMAPHORE/$LEASEGATE_LOCK/$LEASEGATE_TOKEN"']
        rc, out, err = self.cli(["run", "--semaphore", sem, "--limit", "1", "--"] + cmd, env=env)
        self.assertEqual(rc, 0, err)
        name, nolock, token = out.strip().split("/", 2)
        self.assertEqual((name, nolock), (sem, ""))
        self.assertTrue(token.isdigit())
        st, _, g = self.srv.request("GET", "/v1/semaphores/%s" % sem)
        self.assertEqual((g["holders_total"], g["last_token"]), (0, int(token)), g)  # released at the end
        st, _, r = self.srv.acquire(lock, owner="other-reader", mode="read", ttl_ms=60000)
        self.assertEqual(st, 200, r)
        rc, out, err = self.cli(["run", "--lock", lock, "--read", "--no-wait", "--"] + cmd, env=env)
        self.assertEqual(rc, 0, err)  # a reader beside a reader
        rc, out, err = self.cli(["run", "--lock", lock, "--no-wait", "--"] + cmd, env=env)
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.srv.release(lock, r["lease"])
        # The semaphore full: not acquired, with the limit in the message.
        st, _, p = self.srv.request("POST", "/v1/semaphores/%s/acquire" % sem, body={"owner": "x", "limit": 1})
        rc, out, err = self.cli(["run", "--semaphore", sem, "--limit", "1", "--no-wait", "--", "true"], env=env)
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        self.assertIn("all 1 are held", err)
        self.srv.request("POST", "/v1/semaphores/%s/release" % sem, body={"lease": p["lease"]})

    def test_list_limit_and_after(self):
        base = self.lock_name("lst")
        names = [base + "-a", base + "-b", base + "-c"]
        leases = []
        for n in names:
            st, _, body = self.srv.acquire(n, owner="lister", ttl_ms=30000)
            self.assertEqual(st, 200, body)
            leases.append(body["lease"])
        rc, out, err = self.cli(["list", "--prefix", base, "--limit", "2", "--server", self.srv.url])
        self.assertEqual(rc, 0, err)
        got = [x["name"] for x in self.j(out)["locks"]]
        self.assertEqual(got, names[:2])
        rc, out, err = self.cli(["list", "--prefix", base, "--after", names[1], "--server", self.srv.url])
        self.assertEqual(rc, 0, err)
        self.assertEqual([x["name"] for x in self.j(out)["locks"]], names[2:])
        for n, l in zip(names, leases):
            self.srv.release(n, l)

    def test_usage_errors(self):
        lock = self.lock_name("u")
        env = self.env(server=self.srv.url)
        bad = [
            ["acquire", "--lock", lock, "--ttl", "15x"],
            ["acquire", "--lock", lock, "--wait", "15x"],
            ["acquire", "--owner", "x"],
            ["acquire", "--lock", lock, "--metadata", "nope"],
            ["renew", "--lock", lock],
            ["renew", "--lock", lock, "--lease", "x", "--ttl", "15x"],
            ["release", "--lease", "x"],
            ["status"],
            ["status", "--lock", lock, "--bogus", "1"],
            ["list", "--limit", "ten"],
            ["acquire", "--lock"],
            ["acquire", "--semaphore", lock],
            ["acquire", "--semaphore", lock, "--limit", "0"],
            ["acquire", "--semaphore", lock, "--limit", "10001"],
            ["acquire", "--semaphore", lock, "--limit", "2", "--read"],
            ["acquire", "--semaphore", lock, "--limit", "2", "--lock-delay", "1s"],
            ["acquire", "--lock", lock, "--limit", "2"],
            ["acquire", "--lock", lock, "--semaphore", lock, "--limit", "2"],
            ["acquire", "--lock", lock, "--lock-delay", "5"],
            ["status", "--semaphore"],
            ["run", "--semaphore", lock, "--", "true"],
            ["run", "--lock", lock, "--limit", "3", "--", "true"],
            ["run", "--lock", lock, "--lock-delay", "61s", "--", "true"],
        ]
        for args in bad:
            with self.subTest(args=args):
                rc, out, err = self.cli(args, env=env)
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertTrue(err.strip())
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_a_duration_needs_a_unit_in_every_command(self):
        # A bare number is refused before any request: exit 2 (a request to the
        # closed port would have been exit 1), a line naming the flag and the units.
        lock = self.lock_name("units")
        url = "http://127.0.0.1:%d" % free_closed_port()
        cases = [["acquire", "--lock", lock, flag] for flag in ("--ttl", "--wait")]
        cases += [["renew", "--lock", lock, "--lease", "x", "--ttl"]]
        cases += [["run", "--lock", lock, flag] for flag in ("--ttl", "--wait", "--grace", "--timeout")]
        for args in cases:
            for value in ("15", "1.5", "0"):
                with self.subTest(args=args, value=value):
                    argv = args + [value, "--server", url] + (["--", "true"] if args[0] == "run" else [])
                    rc, out, err = self.cli(argv)
                    self.assertEqual(rc, EXIT_USAGE, err)
                    self.assertEqual(out, "")
                    self.assertIn("%s '%s' needs a unit: %sms, %ss, %sm or %sh" % ((args[-1], value) + (value,) * 4),
                                  err)
            for value in ("1.5ms", "1e3ms", "-1s", " 5s", "5S", "0.0001s"):
                with self.subTest(args=args, value=value):
                    argv = args + [value, "--server", url] + (["--", "true"] if args[0] == "run" else [])
                    rc, _, err = self.cli(argv)
                    self.assertEqual(rc, EXIT_USAGE, err)
                    self.assertIn("is not a duration like 250ms, 15s, 2m, 1h or 1.5s", err)

    def test_a_duration_may_have_a_fraction(self):
        lock = self.lock_name("fraction")
        rc, out, err = self.cli(["acquire", "--lock", lock, "--ttl", "1.5s", "--server", self.srv.url])
        self.assertEqual(rc, 0, err)
        acq = self.j(out)
        self.assertEqual(acq["ttl_ms"], 1500)
        rc, out, err = self.cli(["renew", "--lock", lock, "--lease", acq["lease"], "--ttl", "0.25m",
                                 "--server", self.srv.url])
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.j(out)["ttl_ms"], 15000)
        self.srv.release(lock, acq["lease"])

    def test_unreachable_server(self):
        url = "http://127.0.0.1:%d" % free_closed_port()
        for args in (["acquire", "--lock", "x"], ["status", "--lock", "x"], ["list"],
                     ["renew", "--lock", "x", "--lease", harness.random_lease()],
                     ["release", "--lock", "x", "--lease", harness.random_lease()]):
            with self.subTest(cmd=args[0]):
                rc, out, err = self.cli(args + ["--server", url], timeout=20)
                self.assertEqual(rc, EXIT_FAILED, err)
                self.assertTrue(err.strip())
                self.assertEqual(out, "")
        # also when the closed port comes from $LEASEGATE_SERVER
        rc, out, err = self.cli(["status", "--lock", "x"], env=self.env(server=url), timeout=20)
        self.assertEqual(rc, EXIT_FAILED, err)

    def test_server_from_environment(self):
        lock = self.lock_name("envs")
        env = self.env(server=self.srv.url)
        rc, out, err = self.cli(["acquire", "--lock", lock, "--owner", "via-env"], env=env)
        self.assertEqual(rc, 0, err)
        lease = self.j(out)["lease"]
        self.assertEqual(self.holder(self.srv, lock)["holder"]["owner"], "via-env")
        rc, out, err = self.cli(["status", "--lock", lock], env=env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.j(out)["holder"]["owner"], "via-env")
        # --server wins over the environment
        bad = "http://127.0.0.1:%d" % free_closed_port()
        rc, out, err = self.cli(["status", "--lock", lock, "--server", self.srv.url], env=self.env(server=bad))
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli(["release", "--lock", lock, "--lease", lease], env=env)
        self.assertEqual(rc, 0, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])

    def test_a_lease_from_the_environment_a_file_or_stdin_and_a_warning_for_argv(self):
        """A lease on the command line is readable by every user (ps): the commands take it
        from $LEASEGATE_LEASE or --lease-file (- for stdin), and warn when --lease is used."""
        lock = self.lock_name("secret")
        env = self.env(server=self.srv.url)
        rc, out, err = self.cli(["acquire", "--lock", lock, "--ttl", "60s"], env=env)
        self.assertEqual(rc, 0, err)
        g = self.j(out)
        lease = g["lease"]
        rc, out, err = self.cli(["renew", "--lock", lock], env=dict(env, LEASEGATE_LEASE=lease))
        self.assertEqual((rc, err), (0, ""))
        path = self.path("lease")
        with open(path, "w") as f:
            f.write("  %s\n" % lease)
        rc, out, err = self.cli(["renew", "--lock", lock, "--lease-file", path, "--ttl", "30s"], env=env)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(self.j(out)["ttl_ms"], 30000)
        # A reentry from a file; never from the environment: an acquire inside `leasegate
        # run` takes a lock of its own.
        rc, out, err = self.cli(["acquire", "--lock", lock, "--lease-file", path], env=env)
        self.assertEqual((rc, self.j(out)["count"]), (0, 2), err)
        rc, out, err = self.cli(["acquire", "--lock", lock], env=dict(env, LEASEGATE_LEASE=lease))
        self.assertEqual(rc, EXIT_NOT_ACQUIRED, err)
        rc, out, err = self.cli(["release", "--lock", lock, "--lease-file", "-"], env=env,
                                stdin=(lease + "\n").encode())
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(self.j(out)["count"], 1)
        # --lease still works, with a warning on stderr that does not show the lease.
        rc, out, err = self.cli(["release", "--lock", lock, "--lease", lease], env=env)
        self.assertEqual(rc, 0, err)
        self.assertIn("warning: --lease puts the lease on the command line", err)
        self.assertNotIn(lease, err)
        self.assertFalse(self.holder(self.srv, lock)["held"])
        for args in (["renew", "--lock", lock], ["renew", "--lock", lock, "--lease", lease, "--lease-file", path],
                     ["release", "--lock", lock, "--lease-file", self.path("missing")],
                     ["release", "--lock", lock, "--lease-file", "/dev/null"]):
            with self.subTest(args=args):
                rc, out, err = self.cli(args, env=env)
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertTrue(err.strip())

    def test_other_server_error_is_exit_1(self):
        rc, out, err = self.cli(["release", "--lock", "x", "--lease", "not-a-uuid", "--server", self.srv.url])
        self.assertEqual(rc, EXIT_FAILED, err)
        self.assertIn("bad_request", err)


if __name__ == "__main__":
    harness.run_tests()
