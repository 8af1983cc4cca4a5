"""S3 behind the guard: --guard PREFIX=s3://BUCKET/KEYPREFIX,region=R,endpoint=URL.

Against a real S3 API (moto's server, which checks SigV4 signatures and implements
If-Match / If-None-Match on PutObject): signed reads and writes through the guard; the
lease's token as the object's own precondition (the fence in x-amz-meta-fencing-token,
If-Match on the ETag); a stale write refused; the store changing between the guard's
HEAD and its PUT (412 -> 409); a higher fence written straight to the store refusing the
guard's lower token, also after the gateway is killed and comes back with an empty lock
table. Against a fake store that ignores preconditions: the start stops, and a store
that starts ignoring them later gets the route's writes refused (502).

Skipped with one line when moto or boto3 is missing (.ci/run fails then). Only
127.0.0.1; every wait is bounded; no timing assertions.
"""

import os
import re
import sys
import tempfile
import time
import unittest
import uuid

import harness
import s3_fixture


def uid():
    return uuid.uuid4().hex[:10]


def xml_error(body):
    """An S3 route's error (<Error><Code>..</Code>...), as a dict of its elements: code,
    message, error (LeasegateError: the JSON API's code), fence, token, lock, argument."""
    import xml.etree.ElementTree as ET
    assert isinstance(body, str) and body.startswith("<?xml"), body
    root = ET.fromstring(body)
    assert root.tag == "Error", body
    names = {"Code": "code", "Message": "message", "LeasegateError": "error", "Fence": "fence", "Token": "token",
             "Lock": "lock", "ArgumentName": "argument", "Resource": "resource"}
    out = {}
    for child in root:
        key = names.get(child.tag, child.tag)
        out[key] = int(child.text) if key in ("fence", "token") else child.text
    return out


def run_to_exit(args, env, timeout=60):
    """`leasegate serve` with args on a fresh database, which must exit by itself:
    (status, stderr)."""
    import subprocess
    d = tempfile.mkdtemp(prefix="leasegate-s3exit-")
    try:
        p = subprocess.run([harness.binary_path(), "serve", "--listen", "127.0.0.1:0", "--data",
                            os.path.join(d, "x.db")] + args, capture_output=True, timeout=timeout,
                           env=dict(os.environ, **env), stdin=subprocess.DEVNULL, cwd=d)
        return p.returncode, p.stderr.decode("utf-8", "replace")
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


def route(endpoint, prefix="/s3/", keyprefix="reports", extra=""):
    return ["--guard", "%s=s3://%s/%s,region=%s,endpoint=%s%s" % (prefix, s3_fixture.BUCKET, keyprefix,
                                                                   s3_fixture.REGION, endpoint, extra)]


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3Tests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        cls.proxy = s3_fixture.RacingProxy(cls.moto)

    @classmethod
    def tearDownClass(cls):
        cls.proxy.close()
        cls.moto.stop()

    def setUp(self):
        self.srv = harness.Server(extra_args=route(self.proxy.url), extra_env=self.moto.env())

    def tearDown(self):
        self.srv.cleanup()

    def acquire(self, lock, owner="o", srv=None):
        st, _, g = (srv or self.srv).acquire(lock, owner, ttl_ms=60000)
        self.assertEqual(st, 200, g)
        return g

    def put(self, path, body, lease, srv=None, headers=None):
        """(status, headers, body): an error's body as xml_error's dict."""
        h = {"Fencing-Lease": lease, "Content-Type": "text/csv"}
        h.update(headers or {})
        st, hdrs, b = (srv or self.srv).request("PUT", path, raw=body, headers=h)
        return st, hdrs, xml_error(b) if st >= 300 else b

    def test_signed_reads_and_writes(self):
        name = "rw-%s.csv" % uid()
        g = self.acquire(name)
        st, hdrs, _ = self.put("/s3/" + name, b"a,b\n1,2\n", g["lease"], headers={"x-amz-meta-owner": "job-1"})
        self.assertEqual(st, 200)
        self.assertTrue(hdrs.get("etag"), hdrs)
        # The key is KEYPREFIX/ + the path below the prefix; the fence is the token.
        self.assertEqual(self.moto.get("reports/" + name), (b"a,b\n1,2\n", str(g["token"])))
        meta = self.moto.s3.head_object(Bucket=s3_fixture.BUCKET, Key="reports/" + name)["Metadata"]
        self.assertEqual(meta.get("owner"), "job-1")
        st, hdrs, body = self.srv.request("GET", "/s3/" + name)
        self.assertEqual((st, body), (200, "a,b\n1,2\n"))
        self.assertEqual(hdrs.get("x-amz-meta-fencing-token"), str(g["token"]))
        st, _, _ = self.srv.request("GET", "/s3/" + name, headers={"Range": "bytes=0-2"})
        self.assertEqual((st, self.srv.client.last_raw), (206, b"a,b"))
        st, _, _ = self.srv.request("HEAD", "/s3/" + name)
        self.assertEqual(st, 200)
        self.assertEqual(self.srv.request("GET", "/s3/none-%s" % uid())[0], 404)
        # The same holder writes twice (the fence equals its token).
        self.assertEqual(self.put("/s3/" + name, b"v2", g["lease"])[0], 200)
        self.assertEqual(self.moto.get("reports/" + name), (b"v2", str(g["token"])))
        # A client's own fencing-token metadata is dropped, never written.
        self.assertEqual(self.put("/s3/" + name, b"v3", g["lease"],
                                  headers={"x-amz-meta-fencing-token": "999999"})[0], 200)
        self.assertEqual(self.moto.get("reports/" + name), (b"v3", str(g["token"])))

    def test_refusals(self):
        """Refusals in S3's format, each with a reason; none reaches the store."""
        name = "ref-%s.csv" % uid()
        g = self.acquire(name)
        p = "/s3/" + name
        lease = {"Fencing-Lease": g["lease"]}
        cases = [
            ("PUT", p, {}, 403, "AccessDenied", "token_required"),
            ("PUT", p + "?acl", lease, 501, "NotImplemented", "bad_request"),
            ("PUT", p, dict(lease, **{"x-amz-copy-source": "/lgbucket/secret"}), 400, "InvalidArgument",
             "bad_request"),
            ("PUT", p, dict(lease, **{"x-amz-acl": "public-read"}), 400, "InvalidArgument", "bad_request"),
            ("PUT", p, dict(lease, **{"x-amz-grant-read": "id=x"}), 400, "InvalidArgument", "bad_request"),
            ("PUT", p, dict(lease, **{"x-amz-server-side-encryption-customer-algorithm": "AES256"}), 400,
             "InvalidArgument", "bad_request"),
            ("PUT", p, dict(lease, **{"x-amz-object-lock-mode": "GOVERNANCE"}), 400, "InvalidArgument",
             "bad_request"),
            ("PUT", p, dict(lease, **{"Authorization": "AWS foo:bar"}), 400, "InvalidArgument", "bad_request"),
            ("PUT", p, dict(lease, **{"If-Match": '"x"'}), 400, "InvalidArgument", "bad_request"),
            ("PUT", "/s3/.leasegate-probe", lease, 400, "InvalidArgument", "bad_request"),
            ("GET", "/s3?uploads", {}, 501, "NotImplemented", "bad_request"),
            ("PUT", p + "?partNumber=1", lease, 501, "NotImplemented", "bad_request"),
            ("POST", p, lease, 501, "NotImplemented", "bad_request"),
            ("GET", p + "?torrent", {}, 501, "NotImplemented", "bad_request"),
            ("PATCH", p, lease, 405, "MethodNotAllowed", "method_not_allowed"),
        ]
        for method, path, headers, status, code, error in cases:
            with self.subTest(method=method, path=path, headers=headers):
                st, hdrs, body = self.srv.request(method, path, raw=b"x" if method != "GET" else None,
                                                  headers=dict(headers, **{"Content-Type": "text/plain"}))
                e = xml_error(body)
                self.assertEqual((st, e["code"], e["error"]), (status, code, error), body)
                self.assertEqual(e["resource"], path.split("?")[0])
                self.assertNotIn(s3_fixture.BUCKET, body)
                self.assertNotIn(s3_fixture.BUCKET, body)
                self.assertNotIn("reports/", body)
        st, hdrs, _ = self.srv.request("PATCH", p, headers=lease)
        self.assertEqual(hdrs.get("allow"), "GET, HEAD, PUT, POST, DELETE")
        # A chunked PUT has no length: 411.
        req = ("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
               "2\r\nab\r\n0\r\n\r\n" % (p, g["lease"]))
        st, _, body = harness.raw_http(self.srv.port, req.encode())
        self.assertEqual(st, 411, body)
        self.assertIsNone(self.moto.get("reports/" + name))
        # The SDKs' default headers pass: checksums (the store checks them), Content-MD5, a private ACL,
        # storage class, server-side encryption, tagging.
        import base64, hashlib, zlib
        data = b"sdk defaults"
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        st, _, body = self.put(p, data, g["lease"], headers={
            "x-amz-checksum-crc32": crc, "x-amz-sdk-checksum-algorithm": "CRC32",
            "Content-MD5": base64.b64encode(hashlib.md5(data).digest()).decode(), "x-amz-acl": "private",
            "x-amz-storage-class": "STANDARD", "x-amz-server-side-encryption": "AES256",
            "x-amz-tagging": "team=a", "Expect": "100-continue"})
        self.assertEqual(st, 200, body)
        self.assertEqual(self.moto.get("reports/" + name), (data, str(g["token"])))
        # A checksum that does not match the body: the guard computes it too (moto checks none), and the
        # store never gets the body's last byte.
        for header, value in (("x-amz-checksum-crc32", crc),
                              ("x-amz-checksum-sha256", base64.b64encode(hashlib.sha256(data).digest()).decode())):
            st, _, body = self.put(p, b"other bytes", g["lease"], headers={header: value})
            self.assertEqual((st, body["code"]), (400, "BadDigest"), body)
        self.assertEqual(self.moto.get("reports/" + name), (data, str(g["token"])))

    def test_delete_leaves_a_tombstone_that_keeps_the_fence(self):
        """DELETE writes a tombstone (the fence stays): GET and HEAD answer 404 NoSuchKey, a
        listing leaves it out, a stale holder cannot create the object again, and the next
        holder writes it."""
        name = "del-%s.csv" % uid()
        a = self.acquire(name, "a")
        self.assertEqual(self.put("/s3/" + name, b"A", a["lease"])[0], 200)
        st, _, body = self.srv.request("DELETE", "/s3/" + name, headers={"Fencing-Lease": a["lease"]})
        self.assertEqual(st, 204, body)
        st, _, body = self.srv.request("GET", "/s3/" + name)
        self.assertEqual((st, xml_error(body)["code"]), (404, "NoSuchKey"), body)
        self.assertEqual(self.srv.request("HEAD", "/s3/" + name)[0], 404)
        self.assertEqual(self.srv.request("GET", "/s3/" + name, headers={"Range": "bytes=0-3"})[0], 404)
        st, _, listing = self.srv.request("GET", "/s3?list-type=2&prefix=" + name)
        self.assertEqual(st, 200, listing)
        self.assertNotIn("<Key>" + name, listing)
        # In the store: the tombstone, with the deleter's fence.
        self.assertEqual(self.moto.get("reports/" + name)[1], str(a["token"]))
        # The next holder; then A, stale, tries to create it again: refused by the store's fence.
        self.assertEqual(self.srv.request("DELETE", "/v1/locks/" + name)[0], 200)
        b = self.acquire(name, "b")
        self.assertEqual(self.srv.request("DELETE", "/s3/" + name, headers={"Fencing-Lease": b["lease"]})[0], 204)
        fresh = harness.Server(extra_args=route(self.proxy.url), extra_env=self.moto.env())
        try:
            # A gateway that never saw B: only the tombstone's fence can refuse A's token.
            stale = self.acquire(name, "a-again", srv=fresh)
            self.assertLess(stale["token"], b["token"])
            st, _, e = self.put("/s3/" + name, b"stale", stale["lease"], srv=fresh)
            self.assertEqual((st, e["code"], e["fence"]), (409, "StaleFencingToken", b["token"]), e)
            self.assertIn("fencing token %d is stale" % stale["token"], e["message"])
        finally:
            fresh.cleanup()
        self.assertEqual(self.put("/s3/" + name, b"B", b["lease"])[0], 200)
        self.assertEqual(self.srv.request("GET", "/s3/" + name)[2], "B")

    def test_listing_within_the_route(self):
        """ListObjectsV2 and ListObjects name the client's bucket and keys: within the
        route's key prefix, without it, without the probe key or tombstones; GET ?location
        and HEAD of the bucket are answered by the guard."""
        tag = uid()
        self.moto.put_direct("outside-%s.txt" % tag, b"not the route's")
        names = ["ls-%s/a.txt" % tag, "ls-%s/b.txt" % tag, "ls-%s/sub/c.txt" % tag, "ls-%s/gone.txt" % tag]
        for n in names:
            g = self.acquire(n)
            self.assertEqual(self.put("/s3/" + n, b"x", g["lease"])[0], 200)
        self.assertEqual(self.srv.request("DELETE", "/s3/" + names[3], headers={"Fencing-Lease": g["lease"]})[0], 204)
        import xml.etree.ElementTree as ET
        ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
        for path in ("/s3?list-type=2&prefix=ls-%s/" % tag, "/s3/?prefix=ls-%s/" % tag):
            with self.subTest(path=path):
                st, _, body = self.srv.request("GET", path)
                self.assertEqual(st, 200, body)
                root = ET.fromstring(body)
                self.assertEqual(root.find(ns + "Name").text, "s3")
                self.assertEqual(root.find(ns + "Prefix").text, "ls-%s/" % tag)
                self.assertEqual([c.find(ns + "Key").text for c in root.findall(ns + "Contents")], names[:3])
                self.assertNotIn(s3_fixture.BUCKET, body)
                self.assertNotIn("reports/", body)
        st, _, body = self.srv.request("GET", "/s3?list-type=2&delimiter=/&prefix=ls-%s/" % tag)
        root = ET.fromstring(body)
        self.assertEqual([c.find(ns + "Prefix").text for c in root.findall(ns + "CommonPrefixes")],
                         ["ls-%s/sub/" % tag])
        self.assertEqual(root.find(ns + "KeyCount").text, "3")
        st, _, body = self.srv.request("GET", "/s3?list-type=2")
        self.assertNotIn(".leasegate-probe", body)
        self.assertNotIn("outside-", body)
        st, _, body = self.srv.request("GET", "/s3?location")
        self.assertEqual(st, 200)
        self.assertIn("<LocationConstraint", body)
        self.assertEqual(self.srv.request("HEAD", "/s3")[0], 200)

    def test_stale_lease_refused_by_the_guard(self):
        name = "stale-%s.csv" % uid()
        a = self.acquire(name, "a")
        self.assertEqual(self.put("/s3/" + name, b"A", a["lease"])[0], 200)
        self.assertEqual(self.srv.request("DELETE", "/v1/locks/" + name)[0], 200)
        b = self.acquire(name, "b")
        self.assertEqual(self.put("/s3/" + name, b"B", b["lease"])[0], 200)
        st, _, body = self.put("/s3/" + name, b"stale A", a["lease"])
        self.assertEqual((st, body["code"], body["error"]), (409, "StaleFencingToken", "stale_token"), body)
        self.assertIn("force-released", body["message"])
        self.assertEqual(self.moto.get("reports/" + name), (b"B", str(b["token"])))

    def test_a_higher_fence_in_the_store_refuses_a_lower_token(self):
        """Another writer (another gateway, a script) wrote the object with a larger
        fencing-token than this lease's: the store's fence decides."""
        name = "higher-%s.csv" % uid()
        g = self.acquire(name)
        self.moto.put_direct("reports/" + name, b"newer", fence=g["token"] + 1000)
        st, _, body = self.put("/s3/" + name, b"older", g["lease"])
        self.assertEqual((st, body["error"], body["fence"]), (409, "stale_token", g["token"] + 1000), body)
        self.assertIn("fencing token %d is stale" % g["token"], body["message"])
        self.assertEqual(self.moto.get("reports/" + name), (b"newer", str(g["token"] + 1000)))

    def test_store_changes_between_head_and_put(self):
        """The object changes after the guard read its ETag and before its PUT: the
        store refuses the precondition (412), and the guard answers 409: stale_token
        when the new fence is above the token, write_conflict otherwise."""
        for bump, error in ((1000, "stale_token"), (0, "write_conflict")):
            with self.subTest(error=error):
                name = "race-%s.csv" % uid()
                g = self.acquire(name)
                self.assertEqual(self.put("/s3/" + name, b"first", g["lease"])[0], 200)
                self.proxy.race("/%s/reports/%s" % (s3_fixture.BUCKET, name), g["token"] + bump)
                st, _, body = self.put("/s3/" + name, b"second", g["lease"])
                self.assertTrue(self.proxy.raced.wait(10))
                self.assertEqual((st, body["error"]), (409, error), body)
                self.assertEqual(self.moto.get("reports/" + name), (b"written directly", str(g["token"] + bump)))
                if error == "write_conflict":
                    # Sent again with the same lease, it goes through.
                    self.assertEqual(self.put("/s3/" + name, b"third", g["lease"])[0], 200)
                    self.assertEqual(self.moto.get("reports/" + name), (b"third", str(g["token"])))

    def test_the_fence_cannot_be_lowered_by_a_self_copy_during_a_slow_upload(self):
        """The hostile review's attack: while A's upload is slow, a writer that reaches the
        store directly raises the object's fence with a metadata-only copy onto itself (same
        bytes, same ETag), and A's If-Match would still match. The guard reads the object again
        right before the upload's last byte leaves: the raised fence refuses A (409), and the
        store keeps the higher fence."""
        import socket
        name = "lower-%s.csv" % uid()
        g = self.acquire(name)
        self.assertEqual(self.put("/s3/" + name, b"v1", g["lease"])[0], 200)
        body = b"x" * 100000
        sock = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        try:
            sock.sendall(("PUT /s3/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\nContent-Type: text/csv\r\n"
                          "Content-Length: %d\r\n\r\n" % (name, g["lease"], len(body))).encode())
            sock.sendall(body[:50000])
            # The guard has read the ETag by now (its HEAD goes before the body streams), or reads it after
            # the copy; either way the fence that reaches the store is the copy's.
            self.srv.wait_until(lambda: self.srv.metric("leasegate_guard_forwarded_total") >= 3, timeout=10,
                                what="the upload under way")
            key = "reports/" + name
            self.moto.s3.copy_object(Bucket=s3_fixture.BUCKET, Key=key, CopySource={"Bucket": s3_fixture.BUCKET,
                                                                                      "Key": key},
                                     Metadata={"fencing-token": str(g["token"] + 1000)}, MetadataDirective="REPLACE")
            sock.sendall(body[50000:])
            resp = b""
            while b"\r\n\r\n" not in resp or len(resp.split(b"\r\n\r\n", 1)[1]) < int(
                    re.search(rb"(?i)content-length: (\d+)", resp).group(1) if re.search(rb"(?i)content-length: (\d+)", resp) else 0):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                resp += chunk
        finally:
            sock.close()
        status = int(resp.split(b" ", 2)[1])
        e = xml_error(resp.split(b"\r\n\r\n", 1)[1].decode())
        self.assertEqual((status, e["code"], e["fence"]), (409, "StaleFencingToken", g["token"] + 1000), resp)
        self.assertEqual(self.moto.get("reports/" + name), (b"v1", str(g["token"] + 1000)))

    def test_a_gateway_restarted_with_an_empty_table_cannot_reorder(self):
        """B (token 5 here) wrote through one gateway, which is killed (-9); a gateway
        with an empty database starts on the same bucket and issues token 1 to A: the
        object's own fence refuses A's write, although this gateway never saw B's."""
        name = "restart-%s.csv" % uid()
        for i in range(4):
            self.acquire("warmup-%s-%d" % (uid(), i))
        b = self.acquire(name, "b")
        self.assertEqual(self.put("/s3/" + name, b"B", b["lease"])[0], 200)
        self.srv.kill9()
        fresh = harness.Server(extra_args=route(self.proxy.url), extra_env=self.moto.env())
        try:
            a = self.acquire(name, "a", srv=fresh)
            self.assertLess(a["token"], b["token"])
            st, _, body = self.put("/s3/" + name, b"A", a["lease"], srv=fresh)
            self.assertEqual((st, body["error"], body["fence"]), (409, "stale_token", b["token"]), body)
            self.assertEqual(self.moto.get("reports/" + name), (b"B", str(b["token"])))
        finally:
            fresh.cleanup()
        self.srv.start()

    def test_credentials_from_a_file_and_sighup(self):
        d = tempfile.mkdtemp(prefix="leasegate-s3cred-")
        path = os.path.join(d, "credentials")
        with open(path, "w") as f:
            f.write("[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n")
        os.chmod(path, 0o600)
        # Wrong credentials: the store refuses the probe, which closes the route only: the
        # locks are served, the route's writes get 503, /healthz names the route's state.
        srv = harness.Server(extra_args=route(self.moto.url) + ["--s3-credentials", path, "--s3-probe-interval", "1"])
        try:
            name = "cred-%s.csv" % uid()
            g = self.acquire(name, srv=srv)
            st, hdrs, body = self.put("/s3/" + name, b"x", g["lease"], srv=srv)
            self.assertEqual((st, body["code"]), (503, "ServiceUnavailable"), body)
            self.assertEqual(hdrs.get("retry-after"), "1")
            st, _, health = srv.request("GET", "/healthz")
            self.assertEqual(st, 200)
            self.assertEqual(health["guard"][0]["state"], "closed", health)
            self.assertIn("HTTP 403", health["guard"][0]["detail"])
            self.assertEqual(srv.metric('leasegate_guard_route_up{route="/s3/"}'), 0)
            self.assertIn("/s3/", srv.stderr_text())
            self.assertNotIn("WRONG", srv.stderr_text(), "no credential in the log")
            # The right ones, on SIGHUP: the route opens.
            with open(path, "w") as f:
                f.write("[other]\naws_access_key_id = X\naws_secret_access_key = Y\n"
                        "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (self.moto.key_id,
                                                                                            self.moto.secret))
            import signal
            os.kill(srv.pid, signal.SIGHUP)
            srv.wait_until(lambda: srv.request("GET", "/healthz")[2]["guard"][0]["state"] == "open", timeout=20,
                           interval=0.2, what="the route open")
            self.assertEqual(srv.metric('leasegate_guard_route_up{route="/s3/"}'), 1)
            self.assertEqual(self.put("/s3/" + name, b"x", g["lease"], srv=srv)[0], 200)
            # A broken file on SIGHUP keeps the credentials there were.
            with open(path, "w") as f:
                f.write("[default]\naws_access_key_id = only-half\n")
            os.kill(srv.pid, signal.SIGHUP)
            srv.wait_until(lambda: "keeping the S3 credentials" in srv.stderr_text(), timeout=5,
                           what="the reload refused")
            self.assertEqual(self.put("/s3/" + name, b"y", g["lease"], srv=srv)[0], 200)
            self.assertNotIn(self.moto.secret, srv.stderr_text())
        finally:
            srv.cleanup()
            import shutil
            shutil.rmtree(d, ignore_errors=True)

    def test_credentials_file_modes(self):
        """--s3-credentials as --auth-file: refused when its group or others may write it
        (they could swap in keys of their own), a warning when everyone may read it."""
        d = tempfile.mkdtemp(prefix="leasegate-s3mode-")
        path = os.path.join(d, "credentials")
        try:
            with open(path, "w") as f:
                f.write("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (self.moto.key_id,
                                                                                           self.moto.secret))
            for mode in (0o620, 0o602, 0o666):
                os.chmod(path, mode)
                rc, err = run_to_exit(route(self.moto.url) + ["--s3-credentials", path], {})
                self.assertEqual(rc, 1, err)
                self.assertIn("refused: it is writable by", err)
                self.assertIn("chmod go-w", err)
            os.chmod(path, 0o644)
            srv = harness.Server(extra_args=route(self.moto.url) + ["--s3-credentials", path])
            try:
                self.assertIn("readable by every user of this machine", srv.stderr_text())
            finally:
                srv.cleanup()
        finally:
            import shutil
            shutil.rmtree(d, ignore_errors=True)


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class PreconditionProbeTests(unittest.TestCase):
    def test_a_store_that_ignores_preconditions_closes_its_route_for_good(self):
        """Its route is refused, loudly (the log, /healthz, the metric), and stays so when
        the store seems to honour them later: only a reload probes it again. The lock
        service serves all along."""
        store = s3_fixture.FakeStore(honour=False)
        srv = harness.Server(extra_args=route(store.url) + ["--s3-probe-interval", "1"], extra_env=store.env())
        try:
            st, _, health = srv.request("GET", "/healthz")
            self.assertEqual(st, 200)
            self.assertEqual(health["status"], "ok")
            self.assertEqual((health["guard"][0]["route"], health["guard"][0]["state"]), ("/s3/", "refused"), health)
            self.assertIn("ignores preconditions", health["guard"][0]["detail"])
            self.assertNotIn(":%d" % store.port, str(health), "no store URL in an answer")
            self.assertEqual(srv.metric('leasegate_guard_route_up{route="/s3/"}'), 0)
            self.assertIn("/s3/ -> %s/%s/reports" % (store.url, s3_fixture.BUCKET), srv.stderr_text())
            self.assertIn("is closed for good", srv.stderr_text())
            name = "ign-%s.csv" % uid()
            st, _, g = srv.acquire(name, "o", ttl_ms=60000)
            self.assertEqual(st, 200)
            h = {"Fencing-Lease": g["lease"], "Content-Type": "text/plain"}
            st, _, body = srv.request("PUT", "/s3/" + name, raw=b"1", headers=h)
            self.assertEqual((st, xml_error(body)["code"]), (502, "BadGateway"), body)
            store.honour = True
            time.sleep(2.5)  # two probe intervals: a closed route would have been probed
            self.assertEqual(srv.request("PUT", "/s3/" + name, raw=b"1", headers=h)[0], 502)
            # Nothing but the probe key was ever written.
            self.assertEqual({p for m, p, _ in store.seen if m == "PUT"},
                             {"/%s/reports/.leasegate-probe" % s3_fixture.BUCKET})
            import signal
            os.kill(srv.pid, signal.SIGHUP)
            srv.wait_until(lambda: srv.request("PUT", "/s3/" + name, raw=b"2", headers=h)[0] == 200, timeout=10,
                           interval=0.3, what="writes after the reload")
        finally:
            srv.cleanup()
            store.close()

    def test_a_store_that_stops_honouring_them_gets_no_writes(self):
        store = s3_fixture.FakeStore(honour=True)
        srv = harness.Server(extra_args=route(store.url) + ["--s3-probe-interval", "1"], extra_env=store.env())
        try:
            name = "flip-%s.csv" % uid()
            st, _, g = srv.acquire(name, "o", ttl_ms=60000)
            h = {"Fencing-Lease": g["lease"], "Content-Type": "text/plain"}
            self.assertEqual(srv.request("PUT", "/s3/" + name, raw=b"1", headers=h)[0], 200)
            store.honour = False
            srv.wait_until(lambda: srv.request("PUT", "/s3/" + name, raw=b"2", headers=h)[0] == 502, timeout=10,
                           interval=0.3, what="writes refused while the store ignores preconditions")
            self.assertIn("is closed for good", srv.stderr_text())
            # Reads still pass.
            self.assertEqual(srv.request("GET", "/s3/" + name)[0], 200)
        finally:
            srv.cleanup()
            store.close()

    def test_a_store_down_at_start_never_stops_the_lock_service(self):
        """The endpoint refuses connections at start: the server serves locks at once, the
        route is closed (writes 503 with Retry-After, reads 502), and it opens by itself
        once the store answers."""
        from upstream import free_port
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        srv = harness.Server(extra_args=route(url) + ["--s3-probe-interval", "1"],
                             extra_env={"AWS_ACCESS_KEY_ID": "AKIAFAKE", "AWS_SECRET_ACCESS_KEY": "fake-secret"})
        store = None
        try:
            name = "down-%s.csv" % uid()
            st, _, g = srv.acquire(name, "o", ttl_ms=60000)
            self.assertEqual(st, 200, g)
            st, _, health = srv.request("GET", "/healthz")
            self.assertEqual((st, health["guard"][0]["state"]), (200, "closed"), health)
            self.assertIn("cannot be reached", health["guard"][0]["detail"])
            self.assertNotIn(str(port), str(health), "no store URL in an answer")
            h = {"Fencing-Lease": g["lease"], "Content-Type": "text/plain"}
            st, hdrs, body = srv.request("PUT", "/s3/" + name, raw=b"1", headers=h)
            self.assertEqual((st, xml_error(body)["code"]), (503, "ServiceUnavailable"), body)
            self.assertEqual(hdrs.get("retry-after"), "1")
            self.assertNotIn(str(port), str(body))
            self.assertEqual(srv.request("GET", "/s3/" + name)[0], 502)
            self.assertIn("is closed: the store cannot be reached", srv.stderr_text())
            store = s3_fixture.FakeStore(honour=True, port=port)
            srv.wait_until(lambda: srv.request("PUT", "/s3/" + name, raw=b"2", headers=h)[0] == 200, timeout=20,
                           interval=0.3, what="the route open once the store answers")
            self.assertEqual(srv.request("GET", "/healthz")[2]["guard"][0]["state"], "open")
            self.assertIn("the route is open", srv.stderr_text())
        finally:
            srv.cleanup()
            if store:
                store.close()

    def test_flags(self):
        bad = [
            ["--guard", "/s3/=s3://ab/x,region=us-east-1"],                 # bucket too short
            ["--guard", "/s3/=s3://Bucket/x,region=us-east-1"],             # upper case
            ["--guard", "/s3/=s3://lgbucket/a//b,region=us-east-1"],        # empty segment
            ["--guard", "/s3/=s3://lgbucket/../b,region=us-east-1"],
            ["--guard", "/s3/=s3://lgbucket,region=US_EAST"],
            ["--guard", "/s3/=s3://lgbucket,region=us-east-1,endpoint=ftp://x"],
            ["--guard", "/s3/=s3://lgbucket,region=us-east-1,endpoint=http://h/path"],
            ["--guard", "/s3/=s3://lgbucket,region=us-east-1,methods=GET+PATCH"],
            ["--guard", "/x/=http://127.0.0.1:1/,region=us-east-1"],
            ["--s3-credentials", "/nonexistent"],                             # without an s3 route
            ["--s3-probe-interval", "0"],
        ]
        env = dict(os.environ)
        env.pop("AWS_REGION", None)
        for args in bad + [["--guard", "/s3/=s3://lgbucket"]]:               # no region anywhere
            with self.subTest(args=args):
                import subprocess
                p = subprocess.run([harness.binary_path(), "serve", "--listen", "127.0.0.1:0", "--data",
                                    os.path.join(tempfile.gettempdir(), "never-%s.db" % uid())] + args,
                                   capture_output=True, timeout=10, env=env, stdin=subprocess.DEVNULL)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(len(p.stderr.decode().strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    if not s3_fixture.available():
        print("SKIPPED: S3 tests: " + s3_fixture.missing_reason())
    harness.run_tests()
