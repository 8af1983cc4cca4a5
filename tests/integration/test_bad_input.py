"""Bad input: every error is JSON {error, message}; 400s name the field; state is untouched."""

import json
import socket
import unittest

import harness

HELD = "bad/held"


class BadInputTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = harness.Server()
        st, _, b = cls.srv.acquire(HELD, "keeper", ttl_ms=3600000, metadata={"k": "v"})
        assert st == 200, b
        cls.held = b
        st, _, cls.held_state = cls.srv.get_lock(HELD)
        assert st == 200

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()

    def tearDown(self):
        # After every test: server alive and the held lock untouched.
        st, _, h = self.srv.request("GET", "/healthz")
        self.assertEqual((st, h), (200, self.srv.healthy_body()))
        st, _, g = self.srv.get_lock(HELD)
        self.assertEqual(st, 200, g)
        self.assertEqual(g, self.held_state, "held lock changed by bad input")

    # helpers -----------------------------------------------------------------
    def assert_error(self, resp, status, code):
        st, hdrs, b = resp
        self.assertEqual(st, status, b)
        self.assertIsInstance(b, dict, "error body is not JSON: %r" % (b,))
        self.assertEqual(b.get("error"), code, b)
        self.assertIsInstance(b.get("message"), str, b)
        self.assertTrue(b["message"], b)
        self.assertIn("json", hdrs.get("content-type", ""), hdrs)
        return b

    def assert_400(self, resp, field=None):
        b = self.assert_error(resp, 400, "bad_request")
        if field is not None:
            self.assertIn(field, b["message"], "message does not name %r: %r" % (field, b))
            self.assertEqual(b.get("field"), field, b)
        return b

    def post(self, path, body=None, raw=None):
        return self.srv.request("POST", path, body=body, raw=raw)

    def acq(self, body=None, raw=None, name="bad/free"):
        return self.post("/v1/locks/%s/acquire" % name, body=body, raw=raw)

    # malformed bodies ----------------------------------------------------------
    def test_malformed_json(self):
        for raw in ('{"owner": ', '{owner: "a"}', "{'owner': 'a'}", '{"owner": "a",}', "nul",
                    '{"owner": "a"} x', '{"owner": "a"}{}', "\xff\xfe", '{"owner": "\\ud800"}'):
            for path in ("/v1/locks/bad/free/acquire", "/v1/locks/%s/renew" % HELD,
                         "/v1/locks/%s/release" % HELD, "/v1/fence/bad/res"):
                self.assert_400(self.post(path, raw=raw.encode("utf-8", "surrogatepass")
                                          if isinstance(raw, str) else raw))

    def test_nul_byte_in_body(self):
        """Found by fuzzing: jansson skips a NUL byte after a number or a literal, and the
        metadata (kept as sent) was stored cut at the NUL, so that every later answer
        showing the lock (its grant, GET, the whole listing) was invalid JSON."""
        for raw in (b'{"owner":"me","metadata":{"a":1\x00}}', b'{"owner":"me","metadata":{"a":true\x00}}',
                    b'{"owner":"me"\x00}', b'{"owner":"me","ttl_ms":5000\x00}'):
            b = self.assert_400(self.acq(raw=raw, name="bad/nul"))
            self.assertIn("NUL", b["message"])
        st, _, g = self.srv.get_lock("bad/nul")
        self.assertIn(st, (200, 404), g)
        self.assertFalse(isinstance(g, dict) and g.get("held"), g)
        st, _, listing = self.srv.request("GET", "/v1/locks")
        self.assertEqual(st, 200, listing)
        self.assertIsInstance(listing, dict, "the listing is not JSON: %r" % (listing,))

    def test_invalid_utf8(self):
        self.assert_400(self.acq(raw=b'{"owner": "a\xff\xfeb"}'))

    def test_non_object_body(self):
        for raw in ("[]", '["owner"]', '"owner"', "42", "null", "true"):
            self.assert_400(self.acq(raw=raw))
            self.assert_400(self.post("/v1/fence/bad/res", raw=raw))
            self.assert_400(self.post("/v1/locks/%s/release" % HELD, raw=raw))

    def test_empty_body(self):
        # No body at all: either malformed JSON or a missing required field; 400 either way.
        self.assert_400(self.post("/v1/locks/bad/free/acquire", raw=b""))
        self.assert_400(self.post("/v1/locks/%s/release" % HELD, raw=b""))
        self.assert_400(self.post("/v1/locks/%s/renew" % HELD, raw=b""))
        self.assert_400(self.post("/v1/fence/bad/res", raw=b""))

    def test_duplicate_keys(self):
        self.assert_400(self.acq(raw=b'{"owner": "a", "owner": "b"}'))
        self.assert_400(self.post("/v1/fence/bad/res", raw=b'{"token": 5, "token": 6}'))
        self.assert_400(self.post("/v1/locks/%s/release" % HELD,
                                  raw=('{"lease": "%s", "lease": "%s"}' % (self.held["lease"], self.held["lease"])).encode()))

    # fields -----------------------------------------------------------------------
    def test_missing_required(self):
        self.assert_400(self.acq({}), "owner")
        self.assert_400(self.acq({"ttl_ms": 1000}), "owner")
        self.assert_400(self.post("/v1/locks/%s/renew" % HELD, {}), "lease")
        self.assert_400(self.post("/v1/locks/%s/renew" % HELD, {"ttl_ms": 1000}), "lease")
        self.assert_400(self.post("/v1/locks/%s/release" % HELD, {}), "lease")
        self.assert_400(self.post("/v1/fence/bad/res", {}), "token")

    def test_unknown_fields(self):
        self.assert_400(self.acq({"owner": "a", "bogus": 1}), "bogus")
        self.assert_400(self.acq({"owner": "a", "ttl": 1000}), "ttl")
        self.assert_400(self.post("/v1/locks/%s/renew" % HELD, {"lease": self.held["lease"], "owner": "x"}), "owner")
        self.assert_400(self.post("/v1/locks/%s/release" % HELD, {"lease": self.held["lease"], "force": True}), "force")
        self.assert_400(self.post("/v1/fence/bad/res", {"token": 5, "resource": "x"}), "resource")

    def test_long_field_names_are_named(self):
        """Found by fuzzing: a 400 over a field whose name is longer than 79 bytes came
        without `field` (an integer beyond 64 bits in it; an unknown name cut inside a
        UTF-8 character). It is named by its first 79 bytes or fewer, whole characters."""
        long_key = "k" * 80
        b = self.assert_error(self.acq(raw=('{"owner":"a","%s":1%s}' % (long_key, "0" * 20)).encode()),
                              400, "bad_request")
        self.assertEqual(b.get("field"), "k" * 79, b)
        utf8_key = "k" * 78 + "\u00e9"
        b = self.assert_error(self.acq({"owner": "a", utf8_key: 1}), 400, "bad_request")
        self.assertEqual(b.get("field"), "k" * 78, b)

    def test_wrong_types(self):
        cases = [
            ({"owner": 5}, "owner"), ({"owner": None}, "owner"), ({"owner": ["a"]}, "owner"),
            ({"owner": {"a": 1}}, "owner"), ({"owner": True}, "owner"),
            ({"owner": "a", "ttl_ms": "1000"}, "ttl_ms"), ({"owner": "a", "ttl_ms": None}, "ttl_ms"),
            ({"owner": "a", "ttl_ms": True}, "ttl_ms"), ({"owner": "a", "ttl_ms": [1000]}, "ttl_ms"),
            ({"owner": "a", "wait_ms": "0"}, "wait_ms"), ({"owner": "a", "wait_ms": False}, "wait_ms"),
            ({"owner": "a", "metadata": []}, "metadata"), ({"owner": "a", "metadata": "x"}, "metadata"),
            ({"owner": "a", "metadata": 5}, "metadata"), ({"owner": "a", "metadata": None}, "metadata"),
            ({"owner": "a", "lease": 5}, "lease"), ({"owner": "a", "lease": None}, "lease"),
        ]
        for body, field in cases:
            with self.subTest(body=body):
                self.assert_400(self.acq(body), field)
        self.assert_400(self.post("/v1/locks/%s/renew" % HELD, {"lease": 5}), "lease")
        self.assert_400(self.post("/v1/locks/%s/renew" % HELD, {"lease": self.held["lease"], "ttl_ms": "5"}), "ttl_ms")
        self.assert_400(self.post("/v1/locks/%s/release" % HELD, {"lease": [self.held["lease"]]}), "lease")
        for tok in ("5", None, True, [5], {"t": 5}):
            self.assert_400(self.post("/v1/fence/bad/res", {"token": tok}), "token")

    def test_owner_length(self):
        self.assert_400(self.acq({"owner": ""}), "owner")
        self.assert_400(self.acq({"owner": "o" * 129}), "owner")
        st, _, b = self.acq({"owner": "o" * 128, "ttl_ms": 100}, name="bad/owner128")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["owner"], "o" * 128)
        self.srv.release("bad/owner128", b["lease"])

    def test_number_ranges(self):
        bad_ttl = [-1, 0, 99, 86400001, 2 ** 31, 2 ** 63 - 1, -2 ** 63, 1.5, 100.0, 1e3, 1e20]
        for v in bad_ttl:
            with self.subTest(ttl_ms=v):
                self.assert_400(self.acq({"owner": "a", "ttl_ms": v}), "ttl_ms")
                self.assert_400(self.post("/v1/locks/%s/renew" % HELD, {"lease": self.held["lease"], "ttl_ms": v}),
                                "ttl_ms")
        for v in (-1, 3600001, 2 ** 40, 0.5, 10.0, -0.0):
            with self.subTest(wait_ms=v):
                self.assert_400(self.acq({"owner": "a", "wait_ms": v}), "wait_ms")
        # Integers too big for 64 bits and absurd exponents, each called what it is.
        for raw, what in ((b'{"owner": "a", "ttl_ms": 99999999999999999999999999}', "an integer"),
                          (b'{"owner": "a", "ttl_ms": 1e400}', "a number beyond the range of a double"),
                          (b'{"owner": "a", "metadata": {"x": [1, -1.5e999]}}', "a number beyond the range"),
                          (b'{"owner": "a", "wait_ms": -99999999999999999999999999}', "an integer"),
                          # jansson reads the number before it sees that nothing may stand
                          # right before it: its verdict counts, not the text before it.
                          (b'{"owner": "a", "ttl_ms": true99999999999999999999999}', "an integer"),
                          (b'{"owner": "a", "metadata": {"x": [1.5-99999999999999999999]}}', "an integer"),
                          (b'{"owner": "a", "metadata": {"x": [1-1e999]}}', "a number beyond the range")):
            st, _, b = self.acq(raw=raw)
            self.assertEqual(st, 400, b)
            self.assertIn(what, b["message"])
        for tok in (0, -1, -2 ** 63, 1.5, 2.0, 1e3):
            with self.subTest(token=tok):
                self.assert_400(self.post("/v1/fence/bad/res", {"token": tok}), "token")
        self.assert_400(self.post("/v1/fence/bad/res", raw=b'{"token": 99999999999999999999999999}'))

    def test_range_boundaries_accepted(self):
        for i, (ttl, wait) in enumerate(((100, 0), (86400000, 3600000))):
            name = "bad/bound/%d" % i
            st, _, b = self.acq({"owner": "a", "ttl_ms": ttl, "wait_ms": wait}, name=name)
            self.assertEqual(st, 200, b)
            self.assertEqual(b["ttl_ms"], ttl)
            self.srv.release(name, b["lease"])

    def test_metadata_size(self):
        # The limit counts the bytes sent: {"x":"<n chars>"} is n + 8 bytes compact.
        def compact(body):
            return json.dumps(body, separators=(",", ":"))
        ok_meta = {"x": "m" * (4096 - 8)}
        self.assertEqual(len(compact(ok_meta)), 4096)
        st, _, b = self.acq(raw=compact({"owner": "a", "ttl_ms": 100, "metadata": ok_meta}), name="bad/meta-ok")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["metadata"], ok_meta)
        self.srv.release("bad/meta-ok", b["lease"])
        big = {"x": "m" * (4096 - 7)}
        self.assert_400(self.acq(raw=compact({"owner": "a", "metadata": big})), "metadata")
        # The same object with a space after the colon is one byte more than allowed.
        self.assert_400(self.acq(raw='{"owner":"a","metadata":{"x": "%s"}}' % ("m" * (4096 - 8))), "metadata")
        many = {"k%04d" % i: i for i in range(600)}
        self.assert_400(self.acq({"owner": "a", "metadata": many}), "metadata")

    def test_metadata_depth(self):
        # Small but deeply nested metadata is refused: every reader gets it back.
        def nest(levels):  # objects nested `levels` deep
            v = 1
            for _ in range(levels):
                v = {"a": v}
            return v
        st, _, b = self.acq({"owner": "a", "ttl_ms": 100, "metadata": nest(16)}, name="bad/meta-deep-ok")
        self.assertEqual(st, 200, b)
        self.srv.release("bad/meta-deep-ok", b["lease"])
        self.assert_400(self.acq({"owner": "a", "metadata": nest(17)}), "metadata")
        deep = b'{"owner":"a","metadata":' + b'{"a":' * 1500 + b"1" + b"}" * 1500 + b"}"
        self.assert_400(self.acq(None, raw=deep), "metadata")

    # body size ------------------------------------------------------------------------
    def test_body_over_64k(self):
        pad = b" " * (65536 - len(b'{"owner":"a","ttl_ms":100}'))
        body_ok = b'{"owner":"a","ttl_ms":100}' + pad
        self.assertEqual(len(body_ok), 65536)
        st, _, b = self.srv.request("POST", "/v1/locks/bad/body64k/acquire", raw=body_ok)
        self.assertEqual(st, 200, "a body of exactly 64 KiB is within the limit: %r" % (b,))
        self.srv.release("bad/body64k", b["lease"])
        body_big = body_ok + b" "
        self.assert_error(self.srv.request("POST", "/v1/locks/bad/free/acquire", raw=body_big),
                          413, "payload_too_large")
        meta = {"x": "y" * 70000}
        self.assert_error(self.acq({"owner": "a", "metadata": meta}), 413, "payload_too_large")
        self.assert_error(self.post("/v1/fence/bad/res", raw=b'{"token": 1}' + b" " * 70000),
                          413, "payload_too_large")

    def test_header_names_that_are_not_tokens_are_refused(self):
        # libmicrohttpd keeps "X-Custom : v" as a field named "X-Custom " and puts a folded
        # line into the name: RFC 9112 5.1 and 5.2 ask a server to refuse such a request
        # with 400. The guard did (its smuggling test); the API, and so a follower that
        # forwards everything to its leader, took the request with the field ignored.
        body = b'{"owner": "a", "ttl_ms": 1000}'
        for name, line in (("space", b"X-Custom : v"), ("tab", b"X-Custom\t: v"),
                           ("not a token", b"X-Custom(1): v"), ("folded", b"X-Custom: a\r\n X-Other: b"),
                           ("framing", b"Transfer-Encoding : chunked")):
            with self.subTest(name=name):
                req = (b"POST /v1/locks/bad/token-names/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                       b"Content-Type: application/json\r\n%s\r\nContent-Length: %d\r\n\r\n%s"
                       % (line, len(body), body))
                st, _, raw = harness.raw_http(self.srv.port, req, timeout=5)
                self.assertEqual(st, 400, raw[:300])
                self.assertEqual(json.loads(raw)["error"], "bad_request")
        # Nothing was granted, and a request with proper names still is.
        st, _, b = self.srv.request("GET", "/v1/locks/bad/token-names")
        self.assertEqual((st, b["held"]), (200, False), b)
        st, _, b = self.acq({"owner": "a", "ttl_ms": 1000}, name="bad/token-names")
        self.assertEqual(st, 200, b)

    def test_huge_declared_length_rejected_before_read(self):
        # Content-Length of 1 GiB with almost nothing sent: must answer 413 without waiting.
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            s.sendall(b"POST /v1/locks/bad/free/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{")
            st, hdrs, body = harness.read_response(s, timeout=5)
        finally:
            s.close()
        self.assertEqual(st, 413)
        self.assertEqual(json.loads(body)["error"], "payload_too_large")

    def test_chunked_body_over_64k(self):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            data = b'{"owner":"a","metadata":{"x":"' + b"z" * 70000 + b'"}}'
            req = (b"POST /v1/locks/bad/free/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            req += harness.chunked(data, 8192)
            try:
                s.sendall(req)
            except (BrokenPipeError, ConnectionResetError):
                pass
            st, hdrs, body = harness.read_response(s, timeout=5)
        finally:
            s.close()
        self.assertEqual(st, 413)
        self.assertEqual(json.loads(body)["error"], "payload_too_large")

    # names ------------------------------------------------------------------------
    def test_bad_lock_names(self):
        bad_paths = [
            "/v1/locks/%s/acquire" % ("n" * 257),
            "/v1/locks/a%20b/acquire",
            "/v1/locks/a*b/acquire",
            "/v1/locks/a%2Ab/acquire",
            "/v1/locks/caf%C3%A9/acquire",
            "/v1/locks/a%22b/acquire",
            "/v1/locks/a%5Cb/acquire",
            "/v1/locks/a,b/acquire",
            "/v1/locks/a@b/acquire",
            "/v1/locks/a%3Fb/acquire",
            "/v1/locks/a%23b/acquire",
            "/v1/locks/a%25b/acquire",
            # Reserved last segments.
            "/v1/locks/x/acquire/acquire",
            "/v1/locks/x/renew/acquire",
            "/v1/locks/x/release/acquire",
            "/v1/locks/acquire/acquire",
            "/v1/locks/x%2Facquire/acquire",
        ]
        for path in bad_paths:
            with self.subTest(path=path):
                b = self.assert_400(self.post(path, {"owner": "a"}))
                self.assertIn("name", b["message"].lower(), b)
                if "field" in b:
                    self.assertEqual(b["field"], "name", b)
        for path in ("/v1/locks/%s" % ("n" * 257), "/v1/locks/a%20b", "/v1/locks/a*b"):
            with self.subTest(path=path):
                b = self.assert_400(self.srv.request("GET", path))
        for path in ("/v1/locks/%s/renew" % ("n" * 257), "/v1/locks/a*b/release"):
            with self.subTest(path=path):
                self.assert_400(self.post(path, {"lease": self.held["lease"]}))
        # An encoded NUL must not be silently cut off: any JSON 4xx rejection will do,
        # but never a success for a truncated name.
        for method, path in (("POST", "/v1/locks/a%00b/acquire"), ("GET", "/v1/locks/a%00b")):
            with self.subTest(path=path):
                st, _, b = self.srv.request(method, path, body={"owner": "a"} if method == "POST" else None)
                self.assertTrue(400 <= st < 500, (st, b))
                self.assertIsInstance(b, dict, b)
                self.assertIn("error", b)
        # Names at the limit are fine.
        st, _, g = self.srv.get_lock("n" * 256)
        self.assertEqual(st, 200, g)
        self.assertEqual(g["name"], "n" * 256)
        st, _, g = self.srv.get_lock("Az09._~:/-")
        self.assertEqual((st, g["name"]), (200, "Az09._~:/-"), g)
        # Reserved words are fine inside a name, just not as the last segment.
        st, _, g = self.srv.get_lock("acquire/x")
        self.assertEqual((st, g["name"]), (200, "acquire/x"), g)
        st, _, g = self.srv.get_lock("x/acquired")
        self.assertEqual((st, g["name"]), (200, "x/acquired"), g)

    def test_bad_query(self):
        for q in ("limit=0", "limit=1001", "limit=-1", "limit=abc", "limit=1.5", "limit=",
                  "prefix=a%20b", "prefix=%2A", "after=a%20b", "after=" + "n" * 257,
                  "prefix=" + "n" * 257):
            with self.subTest(q=q):
                b = self.assert_400(self.srv.request("GET", "/v1/locks?" + q))
                key = q.split("=")[0]
                self.assertIn(key, b["message"], b)
                if "field" in b:
                    self.assertEqual(b["field"], key, b)
        st, _, b = self.srv.request("GET", "/v1/locks?limit=1000")
        self.assertEqual(st, 200, b)
        st, _, b = self.srv.request("GET", "/v1/locks?limit=1")
        self.assertEqual(st, 200, b)
        self.assertLessEqual(len(b["locks"]), 1)

    def test_bad_fence_resources(self):
        for path in ("/v1/fence/%s" % ("r" * 257), "/v1/fence/a%20b", "/v1/fence/a*b"):
            with self.subTest(path=path):
                b = self.assert_400(self.post(path, {"token": 1}))
                if "field" in b:
                    self.assertIn(b["field"], ("resource", "name"), b)
        # Resource names may end in action words.
        st, _, b = self.post("/v1/fence/bad/acquire", {"token": 1})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["resource"], "bad/acquire")

    # routes -------------------------------------------------------------------------
    def test_unknown_routes_404(self):
        for method, path in (("GET", "/nope"), ("GET", "/v1"), ("GET", "/v1/nope"), ("POST", "/v2/locks/x/acquire"),
                             ("GET", "/v1/locksmith"), ("GET", "/v1/fencex/a"), ("GET", "/healthz/x"),
                             ("GET", "/v1/locks//acquire"), ("POST", "/v1/locks//acquire"), ("POST", "/v1/fence/"),
                             ("DELETE", "/nope")):
            with self.subTest(method=method, path=path):
                body = {"owner": "a"} if method == "POST" else None
                self.assert_error(self.srv.request(method, path, body=body), 404, "not_found")

    def test_invalid_utf8_still_gets_a_json_error(self):
        # Error messages echo what the client sent; bytes that are not UTF-8 used to
        # make the JSON body fail and the connection close without an answer.
        for path, status in (("/v1/locks/a%FFb", 400), ("/nope%FF", 404), ("/v1/fence/r%C3", 400)):
            with self.subTest(path=path):
                body = {"token": 1} if path.startswith("/v1/fence") else None
                self.assert_error(self.srv.request("POST" if body else "GET", path, body=body), status,
                                  "bad_request" if status == 400 else "not_found")
        # An unknown field whose name is cut mid-character when echoed.
        self.assert_400(self.acq({"owner": "a", "\u00e9" * 60: 1}), None)

    def test_long_targets_and_heads_get_json_errors(self):
        """Up to libmicrohttpd's own limit (a 16 KiB head), an over-long target or head
        gets our JSON error, not an HTML page or an empty reply."""
        for n in (9000, 12000, 15500):
            st, h, body = harness.raw_http(self.srv.port, ("GET /v1/locks/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                                                           % ("a" * n)).encode())
            self.assertEqual(st, 414, body[:100])
            self.assertIn("application/json", h.get("content-type", ""))
            # Refused before any handler, through the same answer fields as every answer.
            self.assertEqual(h.get("cache-control"), "no-store")
            self.assertEqual(json.loads(body)["error"], "uri_too_long")
        for n in (12500, 15500):
            st, h, body = harness.raw_http(self.srv.port, ("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: %s\r\n\r\n"
                                                           % ("b" * n)).encode())
            self.assertEqual(st, 431, body[:100])
            self.assertEqual(h.get("cache-control"), "no-store")
            self.assertEqual(json.loads(body)["error"], "headers_too_large")

    def test_wrong_method_405(self):
        cases = [
            ("GET", "/v1/locks/x/acquire", "POST"),
            ("PUT", "/v1/locks/x/acquire", "POST"),
            ("DELETE", "/v1/locks/x/release", "POST"),
            ("GET", "/v1/locks/x/renew", "POST"),
            ("POST", "/v1/locks/x", "GET"),
            ("PUT", "/v1/locks/%s" % HELD, "GET"),
            ("POST", "/v1/locks", "GET"),
            ("GET", "/v1/fence/r", "POST"),
            ("POST", "/healthz", "GET"),
            ("PUT", "/metrics", "GET"),
            ("POST", "/", "GET"),
        ]
        for method, path, allowed in cases:
            with self.subTest(method=method, path=path):
                st, hdrs, b = self.srv.request(method, path, body={"owner": "a"} if method != "GET" else None)
                self.assert_error((st, hdrs, b), 405, "method_not_allowed")
                self.assertIn("allow", hdrs, hdrs)
                allow = [m.strip() for m in hdrs["allow"].split(",")]
                self.assertIn(allowed, allow, hdrs["allow"])
                self.assertNotIn(method, allow)


if __name__ == "__main__":
    harness.run_tests()
