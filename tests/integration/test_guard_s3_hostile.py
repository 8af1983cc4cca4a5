"""Issue 36's hostile review of the S3 guard: what an attacker with a lease of another lock,
an API key with a narrow prefix, a signed request it may change on the way, or a store that
hangs could do, each a test that failed before its fix (docs/RELIABILITY.md lists them):

* a key that may read team-a/ only listed the bucket with prefix, start-after and max-keys
  of its choosing: whether a page was truncated (and moto's continuation token, the MD5 of
  the page's last key) told it whether names it may not read lay after any string, which
  spells out every name of the bucket; and a ListObjects page of moto's had an empty
  NextMarker (moto's own token, cut off);
* listings and ListParts named the store's account (Owner, Initiator);
* a lease of one object aborted another object's multipart upload (moto does not check the
  key an upload id belongs to) and the guard forgot that upload: its Complete was refused;
* an x-amz-* header added to a signed request, outside its SignedHeaders, reached the store
  (S3 refuses those: they could have been added on the way);
* one lease could take all 4096 multipart uploads the guard keeps;
* (the presigned URLs' review) a request on the bucket itself (HeadBucket, GetBucketLocation,
  CreateBucket) without a key was answered when it carried any SigV4 signature, even a junk
  one or a query naming X-Amz-Algorithm only;
* a store gone slow took every one of --guard-max-calls (reads that each wait
  --guard-timeout), and every other route got 503;
* one store that accepts connections and never answers held every other S3 route closed for
  --guard-timeout at each probe round (the probe went route by route), and SIGTERM waited for
  its probe as long.

Against moto's S3 server (signatures checked). Only 127.0.0.1; every wait is bounded; no
timing assertions.
"""

import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import uuid
import xml.etree.ElementTree as ET

import harness
import s3_fixture

BUCKET = "reports"
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def uid():
    return uuid.uuid4().hex[:8]


def listing(body):
    """A ListBucketResult as (keys, common prefixes, {other element: text})."""
    root = ET.fromstring(body)
    keys = [c.find(NS + "Key").text for c in root.findall(NS + "Contents")]
    prefixes = [c.find(NS + "Prefix").text for c in root.findall(NS + "CommonPrefixes")]
    rest = {c.tag[len(NS):]: c.text or "" for c in root if c.tag not in (NS + "Contents", NS + "CommonPrefixes")}
    return keys, prefixes, rest


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3HostileTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        cls.dir = tempfile.mkdtemp(prefix="leasegate-s3hostile-")
        p = subprocess.run([harness.binary_path(), "keygen", "team", "client", "team-a/"], capture_output=True,
                           text=True, timeout=10)
        cls.key, line = p.stdout.splitlines()
        keys = os.path.join(cls.dir, "keys")
        with open(keys, "w") as f:
            f.write(line + "\n")
        os.chmod(keys, 0o600)
        cls.srv = harness.Server(extra_args=[
            "--auth-file", keys, "--guard", "/%s/=s3://%s/hostile,region=%s,endpoint=%s" % (
                BUCKET, s3_fixture.BUCKET, s3_fixture.REGION, cls.moto.url)], extra_env=cls.moto.env())
        cls.bearer = {"Authorization": "Bearer " + cls.key}

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.moto.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def acquire(self, name):
        st, _, g = self.srv.request("POST", "/v1/locks/%s/acquire" % name, body={"owner": "t", "ttl_ms": 60000},
                                    headers=self.bearer)
        self.assertEqual(st, 200, g)
        return g

    def sdk(self, grant):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                            aws_access_key_id=str(grant["token"]), aws_secret_access_key=grant["lease"],
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def list(self, query):
        st, _, body = self.srv.request("GET", "/%s?%s" % (BUCKET, query), headers=self.bearer)
        self.assertEqual(st, 200, body)
        return listing(body)

    def test_a_listing_asks_the_store_only_about_names_the_key_reads(self):
        d = "l-" + uid()
        mine = ["team-a/%s/1.txt" % d, "team-a/%s/2.txt" % d, "team-a/%s/3.txt" % d]
        theirs = ["team-b/%s/s1" % d, "team-b/%s/s2" % d, "zz-%s/s3" % d]
        for name in mine + theirs:
            self.moto.put_direct("hostile/" + name, b"x")
        # Whether a page is truncated may not tell what lies after a string of the client's
        # choosing: here two names it may not read, then one more.
        keys, _, rest = self.list("list-type=2&max-keys=1&start-after=team-b/%s/s0" % d)
        self.assertEqual((keys, rest["IsTruncated"], rest.get("NextContinuationToken")), ([], "false", None), rest)
        keys, _, rest = self.list("list-type=2&max-keys=1&prefix=team-b/%s/" % d)
        self.assertEqual((keys, rest["IsTruncated"], rest.get("NextContinuationToken")), ([], "false", None), rest)
        keys, _, rest = self.list("max-keys=1&marker=team-b/%s/s1" % d)
        self.assertEqual((keys, rest["IsTruncated"], rest.get("NextMarker")), ([], "false", None), rest)
        # The bucket's root without a delimiter: the store is asked under team-a/ only, and
        # ListObjects' pages go on after their last key (moto's NextMarker is a token).
        seen, marker = [], ""
        for _ in range(20):
            keys, _, rest = self.list("max-keys=1&prefix=team-a/%s/&marker=%s" % (d, marker))
            seen += keys
            if rest["IsTruncated"] != "true":
                break
            self.assertEqual(rest.get("NextMarker"), keys[-1], rest)
            marker = rest["NextMarker"]
        self.assertEqual(seen, mine)
        keys, _, rest = self.list("list-type=2&max-keys=1000")
        self.assertTrue(keys and all(k.startswith("team-a/") for k in keys), keys)
        # With a delimiter that ends its prefix: the key's common prefix, made by the guard.
        keys, prefixes, _ = self.list("list-type=2&delimiter=/")
        self.assertEqual((keys, prefixes), ([], ["team-a/"]))
        # A listing that would take several of the store's: refused, in S3's words.
        st, _, body = self.srv.request("GET", "/%s?list-type=2&delimiter=//" % BUCKET, headers=self.bearer)
        self.assertEqual(st, 403, body)
        self.assertIn("<Code>AccessDenied</Code>", body)
        # An SDK's paginator sees all of the key's names and nothing else.
        import boto3
        import botocore
        from botocore.config import Config
        s3 = boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                          config=Config(signature_version=botocore.UNSIGNED, s3={"addressing_style": "path"}))

        def bearer(request, **kw):
            request.headers["Authorization"] = "Bearer " + self.key
        s3.meta.events.register("before-send.s3.*", bearer)
        names = []
        for page in s3.get_paginator("list_objects").paginate(Bucket=BUCKET, Prefix="team-a/%s/" % d,
                                                              PaginationConfig={"PageSize": 2}):
            names += [o["Key"] for o in page.get("Contents", [])]
        self.assertEqual(names, mine)

    def test_no_answer_names_the_stores_account(self):
        name = "team-a/own-%s.bin" % uid()
        g = self.acquire(name)
        s3 = self.sdk(g)
        s3.put_object(Bucket=BUCKET, Key=name, Body=b"x")
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=name)["UploadId"]
        s3.upload_part(Bucket=BUCKET, Key=name, UploadId=up, PartNumber=1, Body=b"p")
        parts = s3.list_parts(Bucket=BUCKET, Key=name, UploadId=up)
        self.assertNotIn("Owner", parts)
        self.assertNotIn("Initiator", parts)
        s3.abort_multipart_upload(Bucket=BUCKET, Key=name, UploadId=up)
        for q in ("prefix=team-a/", "list-type=2&fetch-owner=true&prefix=team-a/"):
            st, _, body = self.srv.request("GET", "/%s?%s" % (BUCKET, q), headers=self.bearer)
            self.assertEqual(st, 200, body)
            self.assertIn(name, body)
            self.assertNotIn("<Owner>", body)

    def test_a_lease_aborts_only_its_own_objects_uploads(self):
        a, b = "team-a/ab-%s.bin" % uid(), "team-a/ab-%s.bin" % uid()
        ga, gb = self.acquire(a), self.acquire(b)
        up = self.sdk(gb).create_multipart_upload(Bucket=BUCKET, Key=b)["UploadId"]
        etag = self.sdk(gb).upload_part(Bucket=BUCKET, Key=b, UploadId=up, PartNumber=1, Body=b"b's part")["ETag"]
        from botocore.exceptions import ClientError
        with self.assertRaises(ClientError) as cm:
            self.sdk(ga).abort_multipart_upload(Bucket=BUCKET, Key=a, UploadId=up)
        self.assertEqual(cm.exception.response["Error"]["Code"], "NoSuchUpload")
        self.sdk(gb).complete_multipart_upload(Bucket=BUCKET, Key=b, UploadId=up,
                                               MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        self.assertEqual(self.moto.get("hostile/" + b), (b"b's part", str(gb["token"])))

    def test_every_amz_header_is_signed(self):
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        name = "team-a/signed-%s.txt" % uid()
        g = self.acquire(name)
        path = "/%s/%s" % (BUCKET, name)
        req = AWSRequest(method="PUT", url=self.srv.url + path, data=b"signed body",
                         headers={"x-amz-meta-owner": "job-1"})
        S3SigV4Auth(Credentials(str(g["token"]), g["lease"]), "s3", "us-east-1").add_auth(req)
        headers = {k: v for k, v in req.headers.items() if k.lower() != "host"}
        # Added on the way, after the signature: metadata, or a customer's encryption key
        # that would leave the object unreadable (and unwritable: the guard's HEAD fails).
        for extra in ({"x-amz-meta-added": "later"}, {"X-Amz-Storage-Class": "GLACIER"}):
            st, _, body = self.srv.request("PUT", path, raw=b"signed body", headers=dict(headers, **extra))
            self.assertEqual(st, 403, body)
            self.assertIn("<Code>AccessDenied</Code>", body)
            self.assertIn("not signed", body)
            self.assertIsNone(self.moto.get("hostile/" + name))
        st, _, body = self.srv.request("PUT", path, raw=b"signed body", headers=headers)
        self.assertEqual(st, 200, body)
        meta = self.moto.s3.head_object(Bucket=s3_fixture.BUCKET, Key="hostile/" + name)["Metadata"]
        self.assertEqual(meta, {"owner": "job-1", "fencing-token": str(g["token"])})

    def test_a_signature_opens_no_bucket_request_without_a_key(self):
        """With --auth-file a signature names a lock, never the bucket: HeadBucket,
        GetBucketLocation and CreateBucket without a key are refused as a listing is, whatever
        the signature, header or query (before: answered 200 to a junk signature, or to a
        query that merely named X-Amz-Algorithm, while an unsigned one got 403)."""
        junk = {"Authorization": "AWS4-HMAC-SHA256 Credential=9/20260101/us-east-1/s3/aws4_request, "
                                 "SignedHeaders=host, Signature=" + "0" * 64}
        g = self.acquire("team-a/b-%s.txt" % uid())
        import boto3
        from botocore.config import Config
        presigner = boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                                 aws_access_key_id=str(g["token"]), aws_secret_access_key=g["lease"],
                                 config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        head = presigner.generate_presigned_url("head_bucket", Params={"Bucket": BUCKET}, HttpMethod="HEAD")
        location = presigner.generate_presigned_url("get_bucket_location", Params={"Bucket": BUCKET})
        for method, target, headers in (("HEAD", "/" + BUCKET, junk), ("GET", "/%s?location" % BUCKET, junk),
                                        ("PUT", "/" + BUCKET, junk), ("HEAD", "/%s?X-Amz-Algorithm=x" % BUCKET, {}),
                                        ("HEAD", head[len(self.srv.url):], {}),
                                        ("GET", location[len(self.srv.url):], {})):
            st, _, body = self.srv.request(method, target, headers=headers, raw=b"" if method == "PUT" else None)
            self.assertIn(st, (400, 403), (method, target, body))
            if method != "HEAD":
                self.assertNotIn("LocationConstraint", body)
        # With the key, the bucket answers.
        st, _, body = self.srv.request("GET", "/%s?location" % BUCKET, headers=self.bearer)
        self.assertEqual(st, 200, body)
        self.assertIn("LocationConstraint", body)

    def test_one_lock_cannot_take_every_upload(self):
        from botocore.exceptions import ClientError
        name = "team-a/many-%s.bin" % uid()
        s3 = self.sdk(self.acquire(name))
        ids = []
        try:
            for _ in range(64):
                ids.append(s3.create_multipart_upload(Bucket=BUCKET, Key=name)["UploadId"])
            with self.assertRaises(ClientError) as cm:
                s3.create_multipart_upload(Bucket=BUCKET, Key=name)
            self.assertEqual(cm.exception.response["Error"]["Code"], "SlowDown")
            self.assertIn("its most for one lock", cm.exception.response["Error"]["Message"])
            other = "team-a/other-%s.bin" % uid()
            self.sdk(self.acquire(other)).create_multipart_upload(Bucket=BUCKET, Key=other)
        finally:
            for up in ids:
                s3.abort_multipart_upload(Bucket=BUCKET, Key=name, UploadId=up)
        # Aborted, they make room again.
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=name)["UploadId"]
        s3.abort_multipart_upload(Bucket=BUCKET, Key=name, UploadId=up)


class Relay:
    """A TCP relay to moto on 127.0.0.1 that, once `stall` is set, accepts connections
    and never answers them: a store gone slow after its route opened."""

    def __init__(self, port):
        self.target = port
        self.stall = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c = self.sock.accept()[0]
            except OSError:
                return
            self.conns.append(c)
            if not self.stall.is_set():
                threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _pipe(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, c):
        try:
            up = socket.create_connection(("127.0.0.1", self.target), timeout=30)
        except OSError:
            c.close()
            return
        self.conns.append(up)
        threading.Thread(target=self._pipe, args=(up, c), daemon=True).start()
        self._pipe(c, up)

    def close(self):
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


class Silent:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3SlowStoreTests(unittest.TestCase):
    def test_a_store_that_never_answers_holds_up_no_other_route(self):
        """Before, the probe went route by route: the silent store's probe took the whole
        --guard-timeout (here 300 s) before the next route's store was asked at all."""
        moto, silent = s3_fixture.Moto(), Silent()
        srv = None
        try:
            srv = harness.Server(extra_args=[
                "--guard-timeout", "300",
                "--guard", "/silent/=s3://%s/silent,region=%s,endpoint=http://127.0.0.1:%d" % (
                    s3_fixture.BUCKET, s3_fixture.REGION, silent.port),
                "--guard", "/%s/=s3://%s/fine,region=%s,endpoint=%s" % (
                    BUCKET, s3_fixture.BUCKET, s3_fixture.REGION, moto.url)], extra_env=moto.env())

            def state(route):
                st, _, body = srv.request("GET", "/healthz")
                return {r["route"]: r["state"] for r in body["guard"]}.get(route)
            srv.wait_until(lambda: state("/%s/" % BUCKET) == "open", timeout=60, interval=0.2,
                           what="the answering store's route to open")
            self.assertEqual(state("/silent/"), "closed")
            st, _, body = srv.request("PUT", "/%s/x.txt" % BUCKET, raw=b"x")
            self.assertEqual(st, 403, body)  # open: the guard asks for the lease, no 503
            st, _, body = srv.request("GET", "/v1/locks/free")
            self.assertEqual(st, 200, body)
            # SIGTERM stops it at once: the silent store's probe is cut short (before, the
            # stop waited for it, and the harness had to kill -9).
            srv.stop_clean()
        finally:
            if srv:
                srv.cleanup()
            silent.close()
            moto.stop()


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3SlowRouteTests(unittest.TestCase):
    def test_a_slow_store_leaves_the_other_routes_calls(self):
        """Before, a store gone slow took every one of --guard-max-calls with reads that
        wait --guard-timeout, and every other route got 503."""
        moto = s3_fixture.Moto()
        relay = Relay(moto.port)
        srv, held = None, []
        try:
            srv = harness.Server(extra_args=[
                "--guard-max-calls", "8", "--guard-timeout", "120",
                "--guard", "/slow/=s3://%s/slow,region=%s,endpoint=http://127.0.0.1:%d" % (
                    s3_fixture.BUCKET, s3_fixture.REGION, relay.port),
                "--guard", "/%s/=s3://%s/fine,region=%s,endpoint=%s" % (
                    BUCKET, s3_fixture.BUCKET, s3_fixture.REGION, moto.url)], extra_env=moto.env())
            moto.put_direct("fine/x.txt", b"fine")
            srv.wait_until(lambda: all(r["state"] == "open" for r in srv.request("GET", "/healthz")[2]["guard"]),
                           timeout=30, what="both routes to open")
            relay.stall.set()
            # Reads of the slow route, each left waiting, until the guard refuses one.
            for _ in range(8):
                c = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
                c.sendall(b"GET /slow/k.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                held.append(c)
            # Three quarters of the 8 calls wait; the other two reads are refused at once.
            answers = {}
            deadline = time.monotonic() + 60
            while len(answers) < 2 and time.monotonic() < deadline:
                for c in select.select(held, [], [], 1)[0]:
                    answers[c] = answers.get(c, b"") + c.recv(65536)
            self.assertEqual(len(answers), 2, "two reads of the slow route answered")
            for text in answers.values():
                head, _, body = text.partition(b"\r\n\r\n")
                self.assertTrue(head.startswith(b"HTTP/1.1 503 "), text)
                self.assertIn(b"<Code>SlowDown</Code>", body)
                self.assertIn(b"its share of --guard-max-calls", body)
                # One Retry-After (before, every 503 had a second one, "1", beside the guard's own).
                self.assertEqual(head.lower().count(b"\r\nretry-after:"), 1, head)
            st, _, body = srv.request("GET", "/%s/x.txt" % BUCKET)
            self.assertEqual((st, body), (200, "fine"))
        finally:
            for c in held:
                c.close()
            relay.close()
            if srv:
                srv.cleanup()
            moto.stop()


if __name__ == "__main__":
    if not s3_fixture.available():
        print("SKIPPED: S3 hostile tests: " + s3_fixture.missing_reason())
    harness.run_tests()
