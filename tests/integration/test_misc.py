"""Operations and CLI: /healthz, /metrics, the dashboard, --help, bad flags, idle timeout."""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import harness

SERVE_FLAGS = ["--listen", "--data", "--max-waiters", "--max-waiters-per-lock", "--max-connections",
               "--max-locks", "--idle-timeout", "--forget-idle-after", "--guard", "--guard-timeout",
               "--min-token", "--access-log"]
parse_metrics = harness.parse_metrics


class HttpOpsTests(harness.ServerTestCase):
    def test_healthz(self):
        st, hdrs, b = self.srv.request("GET", "/healthz")
        self.assertEqual((st, b), (200, self.srv.healthy_body()))
        self.assertIn("application/json", hdrs.get("content-type", ""))

    def test_metrics(self):
        st, hdrs, text = self.srv.request("GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertTrue(hdrs.get("content-type", "").startswith("text/plain"), hdrs)
        self.assertIsInstance(text, str)
        m = parse_metrics(text)
        for name in ("leasegate_grants_total", "leasegate_locks_held", "leasegate_waiters"):
            self.assertIn(name, m, "missing metric %s" % name)
            self.assertRegex(text, r"(?m)^# TYPE %s (counter|gauge)$" % name)
        before = m
        st, _, b = self.srv.acquire("misc/metrics", "m", ttl_ms=60000)
        self.assertEqual(st, 200, b)
        st, _, text = self.srv.request("GET", "/metrics")
        after = parse_metrics(text)
        self.assertEqual(after["leasegate_grants_total"], before["leasegate_grants_total"] + 1)
        self.assertEqual(after["leasegate_locks_held"], before["leasegate_locks_held"] + 1)
        self.srv.release("misc/metrics", b["lease"])
        st, _, text = self.srv.request("GET", "/metrics")
        self.assertEqual(parse_metrics(text)["leasegate_locks_held"], before["leasegate_locks_held"])

    def test_dashboard(self):
        st, hdrs, text = self.srv.request("GET", "/")
        self.assertEqual(st, 200)
        self.assertTrue(hdrs.get("content-type", "").startswith("text/html"), hdrs)
        self.assertRegex(text.lower(), r"<!doctype html|<html")
        # A user-facing page: says what an empty table means, no notes about our tracker.
        self.assertIn("No locks yet", text)
        self.assertNotIn("issue", text)

    def test_keepalive_many_requests_one_connection(self):
        c = self.srv.new_client()
        try:
            for _ in range(200):
                st, _, b = c.request("GET", "/healthz")
                self.assertEqual(st, 200)
            self.assertIsNotNone(c.conn, "server closed a keep-alive connection")
        finally:
            c.close()

    def _raw(self, data, pieces=1, pause=0.05):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            step = max(1, len(data) // pieces)
            for i in range(0, len(data), step):
                s.sendall(data[i:i + step])
                if pieces > 1:
                    time.sleep(pause)
            return harness.read_response(s, timeout=10)
        finally:
            s.close()

    def test_body_in_slow_pieces(self):
        body = b'{"owner": "slow", "ttl_ms": 60000, "metadata": {"pad": "' + b"p" * 3000 + b'"}}'
        req = (b"POST /v1/locks/misc/slow/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
        st, _, data = self._raw(req, pieces=7)
        self.assertEqual(st, 200, data)
        b = json.loads(data)
        self.assertEqual(b["metadata"]["pad"], "p" * 3000)
        self.srv.release("misc/slow", b["lease"])

    def test_chunked_body(self):
        body = b'{"owner": "chunky", "ttl_ms": 60000}'
        req = (b"POST /v1/locks/misc/chunked/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n") + harness.chunked(body, 5)
        st, _, data = self._raw(req, pieces=3)
        self.assertEqual(st, 200, data)
        b = json.loads(data)
        self.assertEqual(b["owner"], "chunky")
        self.srv.release("misc/chunked", b["lease"])

    def test_expect_100_continue(self):
        body = b'{"owner": "expect", "ttl_ms": 60000}'
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            s.sendall(b"POST /v1/locks/misc/expect/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
            s.settimeout(3)
            try:
                first = s.recv(4096)
            except socket.timeout:
                first = b""  # some servers skip the interim response; then we just send
            if first and not first.startswith(b"HTTP/1.1 100"):
                self.fail("unexpected interim response %r" % first[:100])
            s.sendall(body)
            st, _, data = harness.read_response(s, timeout=10)
        finally:
            s.close()
        self.assertEqual(st, 200, data)
        self.srv.release("misc/expect", json.loads(data)["lease"])

    def test_pipelined_requests(self):
        req = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + b"GET /v1/locks/misc/pipe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            s.sendall(req)
            rr = harness.RawReader(s)
            st1, _, b1 = rr.read_response(timeout=5)
            st2, _, b2 = rr.read_response(timeout=5)
        finally:
            s.close()
        self.assertEqual((st1, json.loads(b1)), (200, self.srv.healthy_body()))
        self.assertEqual(st2, 200)
        self.assertEqual(json.loads(b2)["name"], "misc/pipe")


class PrometheusTests(unittest.TestCase):
    """/metrics as Prometheus reads it: promtool accepts it, with leasegate_build_info, the
    process_* family and the histograms of waits and holds, which move with the traffic."""

    def setUp(self):
        if not shutil.which("promtool"):
            self.fail("promtool is missing: scripts/deps.sh --test installs it (Debian package prometheus)")
        self.srv = harness.Server()
        self.addCleanup(self.srv.cleanup)

    def metrics(self):
        st, _, text = self.srv.request("GET", "/metrics")
        self.assertEqual(st, 200)
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, "promtool check metrics:\n%s%s" % (p.stdout, p.stderr))
        return text, parse_metrics(text)

    def test_promtool_accepts_metrics_and_the_histograms_move(self):
        text, m0 = self.metrics()
        self.assertRegex(text, r'(?m)^leasegate_build_info\{version="\d+\.\d+\.\d+"\} 1$')
        self.assertRegex(text, r"(?m)^# TYPE leasegate_acquire_wait_seconds histogram$")
        self.assertRegex(text, r"(?m)^# TYPE leasegate_hold_seconds histogram$")
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                     "process_open_fds", "process_max_fds", "process_start_time_seconds"):
            self.assertIn(name, m0, "missing %s" % name)
        self.assertGreater(m0["process_resident_memory_bytes"], 1e6)
        self.assertGreater(m0["process_max_fds"], m0["process_open_fds"])
        self.assertGreater(m0["process_open_fds"], 3)
        self.assertLessEqual(abs(m0["process_start_time_seconds"] - time.time()), 3600)

        def n(m, name):
            return m.get(name, 0)

        wait_count, wait_sum = "leasegate_acquire_wait_seconds_count", "leasegate_acquire_wait_seconds_sum"
        hold = 'leasegate_hold_seconds_count{end="%s"}'

        # Two grants at once, a release of each (one after a reentry, which is no new grant).
        st, _, a = self.srv.acquire("prom/a", ttl_ms=60000)
        self.assertEqual(st, 200, a)
        st, _, b = self.srv.acquire("prom/b", ttl_ms=60000)
        self.assertEqual(st, 200, b)
        self.assertEqual(self.srv.acquire("prom/a", lease=a["lease"])[0], 200)
        self.assertEqual(self.srv.release("prom/a", a["lease"])[0], 200)  # count 2 -> 1: no end yet
        _, m1 = self.metrics()
        self.assertEqual(n(m1, wait_count), n(m0, wait_count) + 2)
        self.assertEqual(n(m1, hold % "released"), n(m0, hold % "released"))
        self.assertEqual(self.srv.release("prom/a", a["lease"])[0], 200)
        self.assertEqual(self.srv.release("prom/b", b["lease"])[0], 200)

        # A waiter granted after the holder held on for at least HELD_S: its wait is at least that.
        HELD_S = 0.3
        st, _, h = self.srv.acquire("prom/w", ttl_ms=60000)
        self.assertEqual(st, 200, h)
        box = {}
        waiter = self.srv.new_client(timeout=60)
        self.addCleanup(waiter.close)
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("prom/w", owner="w", wait_ms=30000)))
        t.start()
        for _ in range(200):
            if self.srv.get_lock("prom/w")[2].get("waiters") == 1:
                break
            time.sleep(0.02)
        time.sleep(HELD_S)
        _, m2 = self.metrics()
        self.assertEqual(self.srv.release("prom/w", h["lease"])[0], 200)
        t.join(30)
        st, _, w = box["r"]
        self.assertEqual(st, 200, w)
        # A waiter that gives up is no grant: its wait is not counted.
        self.assertEqual(self.srv.acquire("prom/w", owner="late", wait_ms=200)[0], 409)
        _, m3 = self.metrics()
        self.assertEqual(n(m3, wait_count), n(m2, wait_count) + 1)
        self.assertGreaterEqual(n(m3, wait_sum) - n(m2, wait_sum), HELD_S)
        self.assertEqual(n(m3, hold % "released"), n(m0, hold % "released") + 3)
        self.assertGreaterEqual(n(m3, 'leasegate_hold_seconds_sum{end="released"}')
                                - n(m2, 'leasegate_hold_seconds_sum{end="released"}'), HELD_S)

        # The waiter's lease force-released; another expires by its TTL.
        st, _, body = self.srv.request("DELETE", "/v1/locks/prom/w")
        self.assertEqual(st, 200, body)
        st, _, e = self.srv.acquire("prom/e", ttl_ms=100)
        self.assertEqual(st, 200, e)
        for _ in range(250):
            if not self.srv.get_lock("prom/e")[2].get("held"):
                break
            time.sleep(0.02)
        self.assertFalse(self.srv.get_lock("prom/e")[2].get("held"))
        _, m4 = self.metrics()
        self.assertEqual(n(m4, hold % "revoked"), n(m0, hold % "revoked") + 1)
        self.assertEqual(n(m4, hold % "expired"), n(m0, hold % "expired") + 1)
        self.assertGreaterEqual(n(m4, 'leasegate_hold_seconds_sum{end="expired"}'), 0.1)
        self.assertEqual(n(m4, hold % "released"), n(m3, hold % "released"))
        # Buckets are cumulative and end at the count.
        for end in ("expired", "released", "revoked"):
            inf = n(m4, 'leasegate_hold_seconds_bucket{end="%s",le="+Inf"}' % end)
            self.assertEqual(inf, n(m4, hold % end))
            self.assertLessEqual(n(m4, 'leasegate_hold_seconds_bucket{end="%s",le="60"}' % end), inf)
        self.assertGreaterEqual(n(m4, "process_cpu_seconds_total"), n(m0, "process_cpu_seconds_total"))


class LogLineTests(unittest.TestCase):
    """Issue 37: the server's own log lines carry their time and level; with --log-format
    json each is one JSON object (time, level, msg)."""

    TEXT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (error|warn|info) leasegate: \S")

    def lines(self, *args):
        srv = harness.Server(extra_args=list(args))
        try:
            self.assertEqual(srv.acquire("misc/log", "o")[0], 200)
            srv.stop_clean()
            lines = srv.stderr_text().splitlines()
        finally:
            srv.cleanup()
        self.assertGreaterEqual(len(lines), 2, lines)
        return lines

    def test_text_lines_have_time_and_level(self):
        for line in self.lines():
            self.assertRegex(line, self.TEXT)

    def test_json_lines(self):
        for line in self.lines("--log-format", "json"):
            entry = json.loads(line)
            self.assertEqual(sorted(entry), ["level", "msg", "time"], line)
            self.assertIn(entry["level"], ("error", "warn", "info"))
            self.assertRegex(entry["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertTrue(any(json.loads(line)["level"] == "warn" for line in self.lines(
            "--log-format", "json", "--insecure-no-auth")), "the --insecure-no-auth warning")
        p = subprocess.run([harness.binary_path(), "serve", "--log-format", "xml"], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--log-format: 'xml' is not text or json", p.stderr)


class IdleTimeoutTest(unittest.TestCase):
    def test_idle_connection_closed(self):
        with harness.Server(["--idle-timeout", "1"]) as srv:
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            try:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                st, _, _ = harness.read_response(s, timeout=5)
                self.assertEqual(st, 200)
                t0 = time.monotonic()
                s.settimeout(8)
                try:
                    data = s.recv(1)
                except ConnectionResetError:
                    data = b""
                self.assertEqual(data, b"")
                self.assertLess(time.monotonic() - t0, 7.0)
            finally:
                s.close()

    def test_idle_timeout_spares_waiters(self):
        """A long-poll longer than --idle-timeout is neither cut off nor answered early."""
        import threading
        with harness.Server(["--idle-timeout", "1"]) as srv:
            st, _, h = srv.acquire("idle/x", "h", ttl_ms=60000)
            self.assertEqual(st, 200, h)
            out = {}

            def waiter(key, wait_ms):
                c = srv.new_client(timeout=20)
                try:
                    out[key] = c.acquire("idle/x", key, wait_ms=wait_ms)
                except Exception as e:
                    out[key] = e
                finally:
                    c.close()

            t_long = threading.Thread(target=waiter, args=("long", 8000), daemon=True)
            t_long.start()
            srv.wait_until(lambda: srv.waiters("idle/x") == 1, what="long waiter queued")
            t_short = threading.Thread(target=waiter, args=("short", 2500), daemon=True)
            t0 = time.monotonic()
            t_short.start()
            t_short.join(10)
            self.assertGreaterEqual(time.monotonic() - t0, 2.3)
            self.assertIsInstance(out.get("short"), tuple, out)
            self.assertEqual(out["short"][0], 409, out["short"])
            self.assertEqual(out["short"][2]["error"], "lock_held")
            time.sleep(0.5)  # the long waiter has now waited > 3 idle timeouts
            srv.release("idle/x", h["lease"])
            t_long.join(10)
            self.assertIsInstance(out.get("long"), tuple, out)
            self.assertEqual(out["long"][0], 200, out["long"])


class CliTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bin = harness.binary_path()
        cls.tmp = tempfile.mkdtemp(prefix="leasegate-cli-")

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_cli(self, *args, timeout=10):
        p = subprocess.Popen([self.bin] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=self.tmp)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail("%r did not exit within %d s (stdout %r)" % (args, timeout, out[:200]))
        return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def test_help(self):
        rc, out, err = self.run_cli("--help")
        self.assertEqual(rc, 0, err)
        text = out + err
        self.assertIn("serve", text)
        self.assertIn("--", text)
        rc, out, err = self.run_cli("serve", "--help")
        self.assertEqual(rc, 0, err)
        text = out + err
        for flag in SERVE_FLAGS:
            self.assertIn(flag, text, "serve --help does not list %s" % flag)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "leasegate.db")), "--help created a database")

    def assert_usage_error(self, *args):
        data = os.path.join(self.tmp, "x.db")
        rc, out, err = self.run_cli("serve", "--data", data, *args)
        self.assertEqual(rc, 2, "args %r: exit %r, stderr %r" % (args, rc, err))
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, "args %r: expected one stderr line, got %r" % (args, err))
        self.assertNotIn("listening", out)

    def test_bad_flags_exit_2(self):
        self.assert_usage_error("--bogus")
        self.assert_usage_error("--listen", "nonsense")
        self.assert_usage_error("--listen", "127.0.0.1:99999")
        self.assert_usage_error("--listen", "127.0.0.1:-1")
        self.assert_usage_error("--listen")
        self.assert_usage_error("--max-waiters", "abc")
        self.assert_usage_error("--max-waiters", "-5")
        self.assert_usage_error("--max-waiters-per-lock", "1x")
        self.assert_usage_error("--max-connections", "")
        self.assert_usage_error("--max-locks", "1.5")
        self.assert_usage_error("--idle-timeout", "-1")
        self.assert_usage_error("--listen", "127.0.0.1:0", "extra-positional")

    def test_unknown_subcommand(self):
        rc, out, err = self.run_cli("bogus-subcommand")
        self.assertNotEqual(rc, 0, (out, err))
        self.assertTrue(err.strip())


if __name__ == "__main__":
    harness.run_tests()
