"""Request framing on every path (issue 26, defect 6; RFC 9112 6.1 and 6.3).

A Transfer-Encoding other than one `chunked` (any case), two Transfer-Encoding lines,
`chunked` beside a Content-Length, two Content-Length lines, and any Transfer-Encoding in
an HTTP/1.0 request (faulty framing there, RFC 9112 6.1) are read differently by
different servers (request smuggling): leasegate answers 400 with `field`
(Transfer-Encoding or Content-Length) and `Connection: close`, and closes the
connection, on an API POST (acquire), GET /healthz, a guarded PUT and a guarded GET
alike. No lock is granted, nothing reaches the upstream, and the lock's queue is not
held: with --guard-lock-max-calls 1, a proper write right after goes through (a held
queue would refuse it with 503). A plain `chunked`, in any case, still works.

The refused request's head is sent alone: the answer comes from the head, and a body
sent to a server that closes without reading it could turn the close into a reset that
destroys the answer before it is read. Only 127.0.0.1; every read is bounded.
"""

import json
import socket
import unittest
import uuid

import harness
from applying_upstream import ApplyingUpstream

TE, CL = "Transfer-Encoding", "Content-Length"
BODY = b'{"owner":"framing"}'

# (what, the framing header lines, the field the 400 names[, the HTTP version])
BAD = (
    ("HTTP/1.0 with chunked", [(TE, "chunked"), ("Connection", "keep-alive")], TE, "HTTP/1.0"),
    ("HTTP/1.0 with Chunked", [(TE, "Chunked")], TE, "HTTP/1.0"),
    ("identity", [(TE, "identity")], TE),
    ("gzip", [(TE, "gzip")], TE),
    ("gzip, chunked", [(TE, "gzip, chunked")], TE),
    ("chunked, identity", [(TE, "chunked, identity")], TE),
    ("chunked, chunked", [(TE, "chunked, chunked")], TE),
    ("two lines gzip + chunked", [(TE, "gzip"), (TE, "chunked")], TE),
    ("two lines chunked + chunked", [(TE, "chunked"), (TE, "chunked")], TE),
    ("chunked beside Content-Length", [(TE, "chunked"), (CL, str(len(BODY)))], TE),
    ("Content-Length beside chunked", [(CL, str(len(BODY))), (TE, "chunked")], TE),
    ("two Content-Length lines, equal", [(CL, str(len(BODY))), (CL, str(len(BODY)))], CL),
    ("two Content-Length lines, different", [(CL, str(len(BODY))), (CL, "1")], CL),
)
GOOD = ("chunked", "Chunked", "CHUNKED", "cHuNkEd")


def uid():
    return uuid.uuid4().hex[:10]


def head(method, path, lines, version="HTTP/1.1"):
    out = "%s %s %s\r\nHost: 127.0.0.1\r\n" % (method, path, version)
    out += "".join("%s: %s\r\n" % kv for kv in lines)
    return (out + "\r\n").encode("latin-1")


class FramingTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.app = ApplyingUpstream()
        try:
            cls.srv = harness.Server(extra_args=["--guard", "/app/=" + cls.app.url, "--guard-lock-max-calls", "1"])
        except Exception:
            cls.app.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.cleanup()
        finally:
            cls.app.close()

    def paths(self, u):
        """(what, method, target, extra header lines, after(): checks that the refused
        request left nothing behind and that its resource still takes a proper request)."""
        acq = "fr-%s/acquired" % u
        put = "fr-%s/put" % u
        lease = self.srv.acquire(put, "writer", ttl_ms=60000)[2]["lease"]
        get = "/fr-%s/get" % u

        def after_acquire():
            st, _, info = self.srv.get_lock(acq)
            self.assertEqual(st, 200, info)
            self.assertFalse(info["held"], info)

        def after_healthz():
            st, _, body = self.srv.request("GET", "/healthz")
            self.assertEqual((st, body), (200, self.srv.healthy_body()))

        def after_put():
            # What the upstream saw of this lock is exactly the proper PUTs sent after
            # the earlier refusals.
            self.assertEqual(len(self.app.seen_for("/" + put)), len(self.app.applied_to("/" + put)))
            st, _, body = self.srv.request("PUT", "/app/" + put, raw=b"proper",
                                           headers={"Fencing-Lease": lease, "Content-Type": "text/plain"})
            self.assertIn(st, (201, 204), body)
            applied = self.app.applied_to("/" + put)
            self.assertEqual(applied[-1]["body"], b"proper")
            self.app.wait_for(lambda a: len(a.seen_for("/" + put)) == len(applied), what="only the proper PUT")

        def after_get():
            self.assertEqual(self.app.seen_for(get), [])

        return (("acquire", "POST", "/v1/locks/%s/acquire" % acq, [("Content-Type", "application/json")],
                 after_acquire),
                ("healthz", "GET", "/healthz", [], after_healthz),
                ("guarded PUT", "PUT", "/app/" + put, [("Fencing-Lease", lease)], after_put),
                ("guarded GET", "GET", "/app" + get, [], after_get))

    def test_bad_framing_is_400_and_closes(self):
        u = uid()
        paths = self.paths(u)
        for what, lines, field, *version in BAD:
            for name, method, target, extra, after in paths:
                with self.subTest(framing=what, path=name):
                    s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
                    try:
                        s.sendall(head(method, target, extra + lines, *version))
                        reader = harness.RawReader(s)
                        st, hdrs, body = reader.read_response(10)
                        self.assertEqual(st, 400, body)
                        self.assertEqual(hdrs.get("connection", "").lower(), "close", hdrs)
                        err = json.loads(body)
                        self.assertEqual((err["error"], err["field"]), ("bad_request", field), err)
                        self.assertEqual(reader.buf, b"", "bytes after the answer")
                        # The connection is over: the body and a second request get nothing.
                        nxt = (harness.chunked(BODY, 5) if field == TE else BODY)
                        nxt += b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                        got = b""
                        try:
                            s.sendall(nxt)
                            s.settimeout(10)
                            while True:
                                chunk = s.recv(65536)
                                if not chunk:
                                    break
                                got += chunk
                        except (BrokenPipeError, ConnectionResetError):
                            pass
                        self.assertEqual(got, b"", "the connection answered after the 400")
                    finally:
                        s.close()
                    after()

    def test_chunked_in_any_case_works(self):
        u = uid()
        for i, te in enumerate(GOOD):
            with self.subTest(te=te):
                name = "fr-%s/ok-%d" % (u, i)
                s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
                try:
                    reader = harness.RawReader(s)
                    body = json.dumps({"owner": "chunky", "ttl_ms": 60000}).encode()
                    s.sendall(head("POST", "/v1/locks/%s/acquire" % name,
                                   [("Content-Type", "application/json"), (TE, te)]) + harness.chunked(body, 7))
                    st, _, raw = reader.read_response(10)
                    self.assertEqual(st, 200, raw)
                    grant = json.loads(raw)
                    s.sendall(head("PUT", "/app/" + name, [("Fencing-Lease", grant["lease"]), (TE, te)])
                              + harness.chunked(b"chunked data %d" % i, 4))
                    st, hdrs, raw = reader.read_response(10)
                    self.assertEqual((st, hdrs.get("x-upstream")), (201, "applying"), raw)
                    # The connection stays open for the next request.
                    s.sendall(head("GET", "/healthz", []))
                    st, _, raw = reader.read_response(10)
                    self.assertEqual(st, 200, raw)
                finally:
                    s.close()
                self.assertEqual([a["body"] for a in self.app.applied_to("/" + name)], [b"chunked data %d" % i])
                st, _, info = self.srv.get_lock(name)
                self.assertTrue(info["held"], info)


if __name__ == "__main__":
    harness.run_tests()
