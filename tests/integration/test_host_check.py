"""The Host check against DNS rebinding (issue 28): a request whose Host this server
does not answer for gets 421 misdirected_request before any handler runs, guarded paths
included; IP literals, localhost, the --listen host and --allowed-host names (any port)
are answered; a write whose Origin is present and not an allowed host (null included)
gets 403 forbidden with reason "origin"; --allowed-host '*' turns the check off.
The browser side (a page on a rebound name) is tests/browser/rebinding.test.mjs."""

import json
import os
import unittest

from harness import Server, raw_http
import upstream


def ask(srv, method, path, host, origin=None, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\n" % (method, path)
    if host is not None:
        head += "Host: %s\r\n" % host
    if origin is not None:
        head += "Origin: %s\r\n" % origin
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
    head += "Connection: close\r\n\r\n"
    st, h, raw = raw_http(srv.port, head.encode() + data, host=srv.host)
    return st, (json.loads(raw) if raw[:1] == b"{" else raw)


class HostCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.nginx = upstream.Nginx() if upstream.nginx_available() else None
        guard = ["--guard", "/store/=" + cls.nginx.url] if cls.nginx else []
        cls.srv = Server(extra_args=["--allowed-host", "locks.example.com"] + guard)

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        if cls.nginx:
            cls.nginx.cleanup()

    def test_a_foreign_host_gets_421_before_any_handler(self):
        port = self.srv.port
        for host in ("rebind.test", "rebind.test:%d" % port, "evil.example.com", "localhost.evil.test",
                     "127.0.0.1.evil.test", "locks.example.com.evil.test", "[::1"):
            for method, path, body in (("GET", "/v1/locks", None), ("GET", "/", None), ("GET", "/healthz", None),
                                       ("POST", "/v1/locks/rb/x/acquire", {"owner": "page"}),
                                       ("DELETE", "/v1/locks/rb/x", None), ("GET", "/v1/events", None),
                                       ("PUT", "/store/rb/x", None)):
                st, b = ask(self.srv, method, path, host, body=body)
                self.assertEqual(st, 421, (host, method, path, b))
                self.assertEqual((b["error"], b["field"]), ("misdirected_request", "host"), b)
                self.assertIn("--allowed-host", b["message"])
        # Nothing was done for those requests.
        self.assertFalse(self.srv.client.get_lock("rb/x")[2]["held"])

    def test_refusals_before_any_handler_carry_the_answer_fields(self):
        """421 (and 400 for a framing problem) leave from the first callback, before any
        handler: they still carry every answer's fields, Cache-Control: no-store first."""
        for head in ("GET /v1/locks HTTP/1.1\r\nHost: rebind.test\r\nConnection: close\r\n\r\n",
                     "POST /v1/locks/a/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\n"
                     "Content-Length: 2\r\n\r\n{}"):
            st, h, raw = raw_http(self.srv.port, head.encode())
            self.assertIn(st, (421, 400), raw)
            self.assertEqual(h.get("cache-control"), "no-store", (st, h))
            self.assertIn("application/json", h.get("content-type", ""))

    def test_ip_literals_localhost_and_allowed_names_any_port(self):
        for host in ("127.0.0.1", "127.0.0.1:%d" % self.srv.port, "127.0.0.1:1", "10.1.2.3:80", "[::1]:%d" %
                     self.srv.port, "[::1]", "localhost", "LOCALHOST:9", "localhost.", "locks.example.com",
                     "Locks.Example.COM:443", "locks.example.com.:7400", None):
            st, b = ask(self.srv, "GET", "/v1/locks", host)
            self.assertEqual(st, 200, (host, b))
        st, b = ask(self.srv, "POST", "/v1/locks/hc/ok/acquire", "locks.example.com", body={"owner": "a"})
        self.assertEqual(st, 200, b)

    def test_a_write_from_another_origin_gets_403(self):
        for origin in ("http://rebind.test:%d" % self.srv.port, "https://evil.example.com", "null",
                       "http://locks.example.com.evil.test", "file://", "http://127.0.0.1/path"):
            for method, path, body in (("POST", "/v1/locks/or/x/acquire", {"owner": "page"}),
                                       ("DELETE", "/v1/locks/or/x", None), ("PUT", "/store/or/x", None)):
                st, b = ask(self.srv, method, path, "127.0.0.1:%d" % self.srv.port, origin=origin, body=body)
                self.assertEqual(st, 403, (origin, method, b))
                self.assertEqual((b["error"], b["reason"]), ("forbidden", "origin"), b)
        self.assertFalse(self.srv.client.get_lock("or/x")[2]["held"])
        # Reads are not writes; allowed origins may write.
        st, b = ask(self.srv, "GET", "/v1/locks", "127.0.0.1", origin="http://evil.example.com")
        self.assertEqual(st, 200, b)
        for origin in ("http://127.0.0.1:%d" % self.srv.port, "http://localhost:1234", "https://locks.example.com",
                       "http://[::1]:8080"):
            st, b = ask(self.srv, "POST", "/v1/locks/or/%d/acquire" % len(origin), "localhost", origin=origin,
                        body={"owner": "dashboard"})
            self.assertEqual(st, 200, (origin, b))


    def test_an_ip_literal_origin_is_allowed_as_the_threat_model_says(self):
        """Issue 39: threat-model.md said a write whose Origin is "another host" gets 403;
        any IP-literal Origin is allowed (only names are checked). The page says so now."""
        for origin in ("http://203.0.113.9:8080", "https://198.51.100.7", "http://[2001:db8::1]:8080"):
            st, b = ask(self.srv, "POST", "/v1/locks/or/ip%d/acquire" % len(origin), "127.0.0.1", origin=origin,
                        body={"owner": "page"})
            self.assertEqual(st, 200, (origin, b))
        st, b = ask(self.srv, "POST", "/v1/locks/or/name/acquire", "127.0.0.1", origin="http://203.0.113.9.nip.test",
                    body={"owner": "page"})
        self.assertEqual(st, 403, b)
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "threat-model.md")) as f:
            page = " ".join(f.read().split())
        self.assertIn("unless the Origin's host is an IP address (any, not only the server's", page)
        self.assertIn("A page served from a bare IP address passes this check", page)


class HostCheckFlagsTest(unittest.TestCase):
    def test_star_turns_the_check_off_and_the_log_says_so(self):
        srv = Server(extra_args=["--allowed-host", "*"])
        self.addCleanup(srv.cleanup)
        st, b = ask(srv, "GET", "/v1/locks", "rebind.test")
        self.assertEqual(st, 200, b)
        st, b = ask(srv, "POST", "/v1/locks/any/acquire", "rebind.test", origin="null", body={"owner": "x"})
        self.assertEqual(st, 200, b)
        self.assertIn("no defence against DNS rebinding", srv.stderr_text())

    def test_the_listen_host_name_is_answered(self):
        srv = Server(extra_args=["--listen", "localhost:0"])
        self.addCleanup(srv.cleanup)
        st, b = ask(srv, "GET", "/healthz", "localhost:1")
        self.assertEqual(st, 200, b)
        self.assertIn("answering Host: IP addresses, localhost", srv.stderr_text())

    def test_bad_names_are_refused_at_start(self):
        import subprocess, tempfile, os
        from harness import binary_path
        for bad in ("", "a b", "evil.test:80", "http://x", "x/y"):
            p = subprocess.run([binary_path(), "serve", "--data", os.path.join(tempfile.mkdtemp(), "x.db"),
                                "--allowed-host", bad], capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn("--allowed-host", p.stderr)


if __name__ == "__main__":
    unittest.main()
