"""Unmodified S3 clients through an s3:// route, against moto's S3 server (which checks the
guard's own signatures): boto3, the AWS CLI (Debian's awscli, /usr/bin/aws), rclone, s3cmd and
the JavaScript SDK (@aws-sdk/client-s3, npm ci in tests/s3clients) and the Go SDK (Debian's
golang-github-aws-aws-sdk-go-v2-dev, built offline in GOPATH mode), each given nothing but the
gateway's URL as its endpoint (path-style, the route's PREFIX as the bucket) and credentials
made of a lease: the token as the access key id, the lease as the secret. The guard checks
their SigV4 signatures with the lease (aws-chunked bodies too, built here by hand as the Java
SDK sends them), and for each a stale holder (its lease expired while another holder wrote)
is refused and the tool shows an error naming its stale token. docs/fencing.md's "With your
S3 SDK" examples run as they stand there.

Multipart uploads: boto3's upload_file of 64 MiB and the CLI's cp of 10 MiB (moto ignores
If-Match on CompleteMultipartUpload, which the guard's probe finds: there a multipart upload
may only create an object, and the test says so). A client that is missing (awscli, rclone, s3cmd,
the npm packages, go or the Go SDK) skips its test with a line saying so; .ci/run installs them all.
Only 127.0.0.1; every wait is bounded; no timing assertions.
"""

import hashlib
import hmac
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

import harness
import s3_fixture

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
JS_DIR = os.path.join(ROOT, "tests", "s3clients")
AWS = "/usr/bin/aws"  # Debian's awscli, never a pyenv shim first on PATH
# Debian's aws-sdk-go-v2 (golang-github-aws-aws-sdk-go-v2-dev), a GOPATH tree: no module download.
GOPATH_DEBIAN = "/usr/share/gocode"
BUCKET = "reports"


def uid():
    return uuid.uuid4().hex[:10]


def have(path):
    return os.path.exists(path) and os.access(path, os.X_OK)


def js_ready():
    return shutil.which("node") and os.path.isdir(os.path.join(JS_DIR, "node_modules", "@aws-sdk", "client-s3"))


def go_ready():
    return shutil.which("go") and shutil.which("gofmt") and os.path.isdir(
        os.path.join(GOPATH_DEBIAN, "src", "github.com", "aws", "aws-sdk-go-v2", "service", "s3"))


def snippet(name):
    """The code block after '<!-- sdk-snippet: NAME -->' in docs/fencing.md."""
    with open(os.path.join(ROOT, "docs", "fencing.md")) as f:
        text = f.read()
    m = re.search(r"<!-- sdk-snippet: %s -->\n```\w+\n(.*?)```" % re.escape(name), text, re.S)
    assert m, "docs/fencing.md has no snippet %s" % name
    return m.group(1)


def flipped(data):
    """data with its last byte changed: always a change (replacing it with a fixed byte was no
    change when random data already ended in that byte, one run in 256)."""
    return data[:-1] + bytes([data[-1] ^ 1])


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3ClientTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        cls.srv = harness.Server(extra_args=[
            "--guard", "/%s/=s3://%s/pfx,region=%s,endpoint=%s" % (BUCKET, s3_fixture.BUCKET, s3_fixture.REGION,
                                                                  cls.moto.url)], extra_env=cls.moto.env())
        cls.dir = tempfile.mkdtemp(prefix="leasegate-s3clients-")

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.moto.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def acquire(self, lock, ttl_ms=60000, owner="o"):
        st, _, g = self.srv.acquire(lock, owner, ttl_ms=ttl_ms)
        self.assertEqual(st, 200, g)
        return g

    def env(self, g, **more):
        e = dict(os.environ, LEASEGATE_URL=self.srv.url, LEASE_TOKEN=str(g["token"]), LEASE=g["lease"],
                 AWS_ACCESS_KEY_ID=str(g["token"]), AWS_SECRET_ACCESS_KEY=g["lease"], AWS_DEFAULT_REGION="us-east-1",
                 AWS_CONFIG_FILE=os.path.join(self.dir, "aws-config"),
                 AWS_SHARED_CREDENTIALS_FILE=os.path.join(self.dir, "no-credentials"), HOME=self.dir)
        # A CA bundle of the machine's is for https; rclone's S3 client refuses one on its http transport.
        e.pop("AWS_CA_BUNDLE", None)
        e["NODE_NO_WARNINGS"] = "1"  # the SDK's notices about node versions go to stderr, not into answers
        e.update(more)
        return e

    def stored(self, key):
        return self.moto.get("pfx/" + key)

    def stale_holder(self, key):
        """A's lease (TTL 300 ms) ends while it 'pauses'; B acquires and writes through the
        guard. Returns (A's grant, B's grant)."""
        a = self.acquire(key, ttl_ms=300, owner="a")
        self.srv.wait_until(lambda: not self.srv.get_lock(key)[2].get("held"), timeout=10, interval=0.05,
                            what="A's lease to expire")
        b = self.acquire(key, owner="b")
        st, _, body = self.srv.request("PUT", "/%s/%s" % (BUCKET, key), raw=b"B's", headers={
            "Fencing-Lease": b["lease"]})
        self.assertEqual(st, 200, body)
        return a, b

    def assert_stale_shown(self, output, a, key):
        self.assertIn("fencing token %d is stale" % a["token"], output)
        self.assertEqual(self.stored(key)[0], b"B's", "the stale write changed nothing")

    def run_tool(self, args, env, timeout=90, cwd=None):
        p = subprocess.run(args, env=env, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                           cwd=cwd or self.dir)
        return p.returncode, p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")

    # boto3 -------------------------------------------------------------------------------

    def boto3(self, g, secret=None):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                            aws_access_key_id=str(g["token"]), aws_secret_access_key=secret or g["lease"],
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def test_boto3_key_with_a_colon(self):
        """boto3 sends a key's ':' as %3A, curl bare: both name one object to S3, so both are
        bound to the lock named with ':' (before, %3A made a path that named no lock: 400)."""
        key = "colon-%s/a:b.csv" % uid()
        g = self.acquire(key)
        s3 = self.boto3(g)
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"a,b\n")
        self.assertEqual(self.stored(key), (b"a,b\n", str(g["token"])))
        self.assertEqual(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read(), b"a,b\n")

    def test_boto3(self):
        from botocore.exceptions import ClientError
        key = "boto-%s/data.bin" % uid()
        g = self.acquire(key)
        s3 = self.boto3(g)
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"0123456789", ContentType="text/plain", Metadata={"who": "me"})
        self.assertEqual(self.stored(key), (b"0123456789", str(g["token"])))
        self.assertEqual(s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=2-5")["Body"].read(), b"2345")
        head = s3.head_object(Bucket=BUCKET, Key=key)
        self.assertEqual((head["ContentLength"], head["Metadata"]["who"]), (10, "me"))
        path = os.path.join(self.dir, "up.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(3 * 1024 * 1024))
        s3.upload_file(path, BUCKET, key)  # one PUT below the multipart threshold
        with open(path, "rb") as f:
            self.assertEqual(self.stored(key)[0], f.read())
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=key.split("/")[0] + "/")
        self.assertEqual([o["Key"] for o in listed["Contents"]], [key])
        self.assertEqual(listed["Name"], BUCKET)
        s3.delete_object(Bucket=BUCKET, Key=key)
        with self.assertRaises(ClientError) as cm:
            s3.head_object(Bucket=BUCKET, Key=key)
        self.assertEqual(cm.exception.response["Error"]["Code"], "404")
        # A wrong secret: SignatureDoesNotMatch; the store never sees the write.
        with self.assertRaises(ClientError) as cm:
            self.boto3(g, secret=str(uuid.uuid4())).put_object(Bucket=BUCKET, Key=key, Body=b"forged")
        self.assertEqual(cm.exception.response["Error"]["Code"], "SignatureDoesNotMatch")
        # A stale holder.
        skey = "boto-stale-%s.txt" % uid()
        a, _ = self.stale_holder(skey)
        with self.assertRaises(ClientError) as cm:
            self.boto3(a).put_object(Bucket=BUCKET, Key=skey, Body=b"stale")
        self.assertEqual(cm.exception.response["Error"]["Code"], "StaleFencingToken")
        self.assert_stale_shown(str(cm.exception), a, skey)

    def test_boto3_multipart(self):
        """upload_file of 64 MiB goes multipart: Create carries the token, the parts go while
        the lease holds, Complete goes with the object's precondition (If-None-Match: * on
        a new key). A stale holder cannot complete an upload it began while it held the
        lock. moto ignores If-Match on CompleteMultipartUpload, and the guard's probe finds
        that: on this store a multipart upload may only create an object (501 otherwise)."""
        from boto3.s3.transfer import TransferConfig
        from botocore.exceptions import ClientError
        key = "mpu-%s/big.bin" % uid()
        g = self.acquire(key)
        s3 = self.boto3(g)
        path = os.path.join(self.dir, "big.bin")
        with open(path, "wb") as f:
            for _ in range(64):
                f.write(os.urandom(1024 * 1024))
        s3.upload_file(path, BUCKET, key, Config=TransferConfig(max_concurrency=4))
        with open(path, "rb") as f:
            self.assertEqual(self.stored(key), (f.read(), str(g["token"])))
        # The guard's reads of the object around Complete are HeadObjects of the object itself:
        # HeadObject takes no uploadId (S3 may take HEAD ?uploadId for another resource).
        heads = self.moto.requests('"HEAD /%s/pfx/%s' % (s3_fixture.BUCKET, key))
        self.assertTrue(heads, "the guard read the object before Complete")
        self.assertEqual([h for h in heads if "uploadId" in h], [])
        # One part of it, as S3 answers a HeadObject or GetObject with partNumber (a parallel
        # download's ask): not the whole object. moto answers a HEAD's part (its length, the
        # count of parts) but a GET's with the whole object, so the GET is checked in its log.
        part = s3.head_object(Bucket=BUCKET, Key=key, PartNumber=1)
        self.assertEqual((part["ContentLength"], part.get("PartsCount")), (8 * 1024 * 1024, 8))
        s3.get_object(Bucket=BUCKET, Key=key, PartNumber=2)["Body"].read()
        self.assertEqual(len(self.moto.requests('"GET /%s/pfx/%s?partNumber=2 ' % (s3_fixture.BUCKET, key))), 1)
        os.unlink(path)
        st, _, health = self.srv.request("GET", "/healthz")
        self.assertIn("not If-Match on CompleteMultipartUpload", health["guard"][0]["detail"])
        # Overwriting through a multipart upload needs If-Match on Complete, which moto ignores.
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        etag = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=1, Body=b"small")["ETag"]
        with self.assertRaises(ClientError) as cm:
            s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up,
                                         MultipartUpload={"Parts": [{"ETag": etag, "PartNumber": 1}]})
        self.assertEqual(cm.exception.response["Error"]["Code"], "NotImplemented")
        parts = s3.list_parts(Bucket=BUCKET, Key=key, UploadId=up)
        self.assertEqual((parts["Bucket"], parts["Key"], len(parts["Parts"])), (BUCKET, key, 1))
        s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up)
        # A stale holder's upload: begun while A held the lock, completed after B wrote.
        skey = "mpu-stale-%s.bin" % uid()
        a = self.acquire(skey, owner="a")
        sa = self.boto3(a)
        up = sa.create_multipart_upload(Bucket=BUCKET, Key=skey)["UploadId"]
        etag = sa.upload_part(Bucket=BUCKET, Key=skey, UploadId=up, PartNumber=1, Body=b"stale part")["ETag"]
        # A's lease ends (an admin's force-release here: its TTL running out is the same to the guard).
        self.assertEqual(self.srv.request("DELETE", "/v1/locks/" + skey)[0], 200)
        b = self.acquire(skey, owner="b")
        self.assertEqual(self.srv.request("PUT", "/%s/%s" % (BUCKET, skey), raw=b"B's",
                                          headers={"Fencing-Lease": b["lease"]})[0], 200)
        with self.assertRaises(ClientError) as cm:
            sa.complete_multipart_upload(Bucket=BUCKET, Key=skey, UploadId=up,
                                         MultipartUpload={"Parts": [{"ETag": etag, "PartNumber": 1}]})
        self.assertEqual(cm.exception.response["Error"]["Code"], "StaleFencingToken")
        self.assert_stale_shown(str(cm.exception), a, skey)
        # B cannot complete A's upload either: an upload is finished by the lease that began it.
        with self.assertRaises(ClientError) as cm:
            self.boto3(b).complete_multipart_upload(Bucket=BUCKET, Key=skey, UploadId=up,
                                                    MultipartUpload={"Parts": [{"ETag": etag, "PartNumber": 1}]})
        self.assertEqual(cm.exception.response["Error"]["Code"], "StaleFencingToken")
        self.assertIn("did not begin this upload", str(cm.exception))
        self.assertEqual(self.stored(skey)[0], b"B's")

    # Listings of a directory, and reads with overrides: '/' and ':' in the store's query ----

    def tree(self):
        """A directory of the route, written straight into the store: (its name, a grant of its
        csv's lock). The guard asks the store with prefix=DIR%2F&delimiter=%2F: S3 signs '/' so,
        and a guard that signed it bare was refused (the tests' moto checks as S3 does)."""
        d = "dir-%s" % uid()
        for k in ("top.txt", "sub/ab.csv", "sub/c d:e.txt", "sub/deeper/x.txt"):
            self.moto.put_direct("pfx/%s/%s" % (d, k), b"a,b\n")
        return d, self.acquire(d + "/sub/ab.csv")

    def test_boto3_directory_listing_and_overrides(self):
        d, g = self.tree()
        s3 = self.boto3(g)
        r = s3.list_objects_v2(Bucket=BUCKET, Prefix=d + "/sub/", Delimiter="/")
        self.assertEqual(([o["Key"] for o in r["Contents"]], [p["Prefix"] for p in r["CommonPrefixes"]]),
                         ([d + "/sub/ab.csv", d + "/sub/c d:e.txt"], [d + "/sub/deeper/"]))
        r = s3.list_objects_v2(Bucket=BUCKET, Prefix=d + "/", Delimiter="/", StartAfter=d + "/a:b")
        self.assertEqual(([o["Key"] for o in r["Contents"]], [p["Prefix"] for p in r["CommonPrefixes"]]),
                         ([d + "/top.txt"], [d + "/sub/"]))
        r = s3.list_objects(Bucket=BUCKET, Prefix=d + "/sub/c ", Delimiter="/")
        self.assertEqual([o["Key"] for o in r["Contents"]], [d + "/sub/c d:e.txt"])
        # The first page's continuation token goes back to the store in the query too.
        r = s3.list_objects_v2(Bucket=BUCKET, Prefix=d + "/", MaxKeys=1)
        r = s3.list_objects_v2(Bucket=BUCKET, Prefix=d + "/", MaxKeys=1, ContinuationToken=r["NextContinuationToken"])
        self.assertEqual([o["Key"] for o in r["Contents"]], [d + "/sub/c d:e.txt"])
        # moto sets none of the headers these name (test_guard_s3_presign.py's FakeStore does): it
        # checks the guard's signature over them.
        o = s3.get_object(Bucket=BUCKET, Key=d + "/sub/ab.csv", ResponseContentType="text/csv",
                          ResponseContentDisposition='attachment; filename="a:b.csv"',
                          ResponseExpires="Wed, 21 Oct 2015 07:28:00 GMT")
        self.assertEqual(o["Body"].read(), b"a,b\n")

    @unittest.skipUnless(have(AWS), "Debian's awscli (%s) is not installed (scripts/deps.sh --test)" % AWS)
    def test_aws_cli_directory_listing(self):
        d, g = self.tree()
        env = self.env(g)
        base = self.aws(env)
        rc, out = self.run_tool(base + ["s3", "ls", "s3://%s/%s/" % (BUCKET, d)], env)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"PRE sub/\n")
        self.assertRegex(out, r" top\.txt\n")
        rc, out = self.run_tool(base + ["s3", "ls", "s3://%s/%s/sub/" % (BUCKET, d)], env)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"PRE deeper/\n")
        self.assertRegex(out, r" ab\.csv\n")
        self.assertRegex(out, r" c d:e\.txt\n")

    @unittest.skipUnless(have("/usr/bin/rclone"), "rclone is not installed (scripts/deps.sh --test)")
    def test_rclone_directory_listing(self):
        d, g = self.tree()
        rc, out = self.run_tool(["rclone", "lsf", "lg:%s/%s/sub" % (BUCKET, d)], self.rclone_env(g))
        self.assertEqual((rc, sorted(out.split("\n"))), (0, ["", "ab.csv", "c d:e.txt", "deeper/"]), out)

    def lease_from_docs(self):
        """The lease the docs' shell lines take (their acquire and sed, as written, on this
        server's port), as the grant they export."""
        script = snippet("lease").replace("127.0.0.1:7400", "127.0.0.1:%d" % self.srv.port)
        rc, out = self.run_tool(["bash", "-ec", script + 'echo "$LEASEGATE_URL $LEASE_TOKEN $LEASE"\n'],
                                dict(os.environ))
        self.assertEqual(rc, 0, out)
        url, token, lease = out.split()
        self.assertEqual(url, self.srv.url)
        return {"token": int(token), "lease": lease}

    def test_docs_boto3_snippet(self):
        g = self.lease_from_docs()
        rc, out = self.run_tool([sys.executable, "-c", snippet("boto3")], self.env(g))
        self.assertEqual((rc, out), (0, "a,b\n1,2\n"), out)
        self.assertEqual(self.stored("report.csv"), (b"a,b\n1,2\n", str(g["token"])))
        self.srv.release("report.csv", g["lease"])

    # aws-chunked, as the Java SDK and others send it --------------------------------------

    def chunked_put(self, g, key, data, chunk=65536, tamper=False, trailer=False):
        """A PUT with x-amz-content-sha256 STREAMING-AWS4-HMAC-SHA256-PAYLOAD, each chunk
        signed with the lease (or STREAMING-UNSIGNED-PAYLOAD-TRAILER with a CRC32 trailer)."""
        import base64
        import zlib
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        date = amz_date[:8]
        scope = "%s/us-east-1/s3/aws4_request" % date

        def h(k, m):
            return hmac.new(k, m.encode(), hashlib.sha256).digest()
        key_ = h(h(h(h(("AWS4" + g["lease"]).encode(), date), "us-east-1"), "s3"), "aws4_request")
        mode = "STREAMING-UNSIGNED-PAYLOAD-TRAILER" if trailer else "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
        host = "127.0.0.1:%d" % self.srv.port
        headers = {"host": host, "x-amz-content-sha256": mode, "x-amz-date": amz_date,
                   "x-amz-decoded-content-length": str(len(data)), "content-encoding": "aws-chunked"}
        if trailer:
            headers["x-amz-trailer"] = "x-amz-checksum-crc32"
        names = sorted(headers)
        canonical = "PUT\n/%s/%s\n\n%s\n%s\n%s" % (BUCKET, key, "".join("%s:%s\n" % (n, headers[n]) for n in names),
                                                   ";".join(names), mode)
        sts = "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest())
        seed = hmac.new(key_, sts.encode(), hashlib.sha256).hexdigest()
        empty = hashlib.sha256(b"").hexdigest()
        body, prev = b"", seed
        pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
        for n, piece in enumerate(pieces):
            if trailer:
                body += b"%x\r\n" % len(piece) + (piece + b"\r\n" if piece else b"")
                continue
            text = "AWS4-HMAC-SHA256-PAYLOAD\n%s\n%s\n%s\n%s\n%s" % (amz_date, scope, prev, empty,
                                                                     hashlib.sha256(piece).hexdigest())
            sig = hmac.new(key_, text.encode(), hashlib.sha256).hexdigest()
            prev = sig
            if tamper and n == len(pieces) - 2:
                piece = flipped(piece)
            body += b"%x;chunk-signature=%s\r\n%s\r\n" % (len(piece), sig.encode(), piece)
        if trailer:
            crc = base64.b64encode(zlib.crc32(data if not tamper else flipped(data)).to_bytes(4, "big"))
            body += b"x-amz-checksum-crc32:" + crc + b"\r\n\r\n"
        auth = "AWS4-HMAC-SHA256 Credential=%d/%s, SignedHeaders=%s, Signature=%s" % (
            g["token"], scope, ";".join(names), hmac.new(key_, sts.encode(), hashlib.sha256).hexdigest())
        send = {k: v for k, v in headers.items() if k != "host"}
        send["Authorization"] = auth
        send["Content-Length"] = str(len(body))
        return self.srv.request("PUT", "/%s/%s" % (BUCKET, key), raw=body if not tamper or trailer else body,
                                headers=send)

    def test_aws_chunked_bodies(self):
        key = "chunked-%s.bin" % uid()
        g = self.acquire(key)
        data = os.urandom(200000)
        st, _, body = self.chunked_put(g, key, data)
        self.assertEqual(st, 200, body)
        self.assertEqual(self.stored(key), (data, str(g["token"])))
        st, _, body = self.chunked_put(g, key, b"trailer " + data, trailer=True)
        self.assertEqual(st, 200, body)
        self.assertEqual(self.stored(key)[0], b"trailer " + data)
        # A chunk changed on the way: its signature fails, the store keeps what it had.
        st, _, body = self.chunked_put(g, key, b"changed" + data, tamper=True)
        self.assertEqual(st, 403, body)
        self.assertIn("SignatureDoesNotMatch", body)
        st, _, body = self.chunked_put(g, key, b"changed" + data, tamper=True, trailer=True)
        self.assertEqual(st, 400, body)
        self.assertIn("BadDigest", body)
        self.assertEqual(self.stored(key)[0], b"trailer " + data)

    # The AWS CLI ---------------------------------------------------------------------------

    def aws(self, env):
        """The CLI's command line through the gateway, path-style (its config file is env's)."""
        self.assertEqual(self.run_tool([AWS, "configure", "set", "default.s3.addressing_style", "path"], env)[0], 0)
        return [AWS, "--endpoint-url", self.srv.url]

    @unittest.skipUnless(have(AWS), "Debian's awscli (%s) is not installed (scripts/deps.sh --test)" % AWS)
    def test_aws_cli(self):
        key = "cli-%s.txt" % uid()
        g = self.acquire(key)
        env = self.env(g)
        base = self.aws(env)
        src = os.path.join(self.dir, "cli-up.txt")
        with open(src, "wb") as f:
            f.write(b"from the cli\n")
        rc, out = self.run_tool(base + ["s3", "cp", src, "s3://%s/%s" % (BUCKET, key)], env)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.stored(key), (b"from the cli\n", str(g["token"])))
        down = os.path.join(self.dir, "cli-down.txt")
        rc, out = self.run_tool(base + ["s3", "cp", "s3://%s/%s" % (BUCKET, key), down], env)
        self.assertEqual(rc, 0, out)
        with open(down, "rb") as f:
            self.assertEqual(f.read(), b"from the cli\n")
        # Above 8 MiB the CLI goes multipart (a new key: see test_boto3_multipart for moto's limit).
        big, bigkey = os.path.join(self.dir, "cli-big.bin"), "cli-big-%s.bin" % uid()
        with open(big, "wb") as f:
            f.write(os.urandom(10 * 1024 * 1024))
        gb = self.acquire(bigkey)
        rc, out = self.run_tool(base + ["s3", "cp", big, "s3://%s/%s" % (BUCKET, bigkey)], self.env(gb))
        self.assertEqual(rc, 0, out)
        with open(big, "rb") as f:
            self.assertEqual(self.stored(bigkey), (f.read(), str(gb["token"])))
        os.unlink(big)
        # Configured for another region than the route's: the guard's 400 names the route's region
        # (<Region>, as S3's), and the CLI signs the request again for it.
        rkey = "cli-region-%s.txt" % uid()
        gr = self.acquire(rkey)
        rc, out = self.run_tool(base + ["--region", "eu-west-1", "s3", "cp", src, "s3://%s/%s" % (BUCKET, rkey)],
                                self.env(gr))
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.stored(rkey), (b"from the cli\n", str(gr["token"])))
        rc, out = self.run_tool(base + ["s3", "ls", "s3://%s/" % BUCKET], env)
        self.assertEqual(rc, 0, out)
        self.assertIn(key, out)
        self.assertNotIn(".leasegate-probe", out)
        rc, out = self.run_tool(base + ["s3", "rm", "s3://%s/%s" % (BUCKET, key)], env)
        self.assertEqual(rc, 0, out)
        rc, out = self.run_tool(base + ["s3", "ls", "s3://%s/%s" % (BUCKET, key)], env)
        self.assertNotIn(key, out)
        skey = "cli-stale-%s.txt" % uid()
        a, _ = self.stale_holder(skey)
        rc, out = self.run_tool(base + ["s3", "cp", src, "s3://%s/%s" % (BUCKET, skey)], self.env(a))
        self.assertNotEqual(rc, 0, out)
        self.assertIn("StaleFencingToken", out)
        self.assert_stale_shown(out, a, skey)

    @unittest.skipUnless(have(AWS), "Debian's awscli (%s) is not installed (scripts/deps.sh --test)" % AWS)
    def test_docs_cli_snippet(self):
        g = self.acquire("report.csv")
        env = self.env(g, PATH=os.path.dirname(AWS) + os.pathsep + os.environ.get("PATH", ""))
        rc, out = self.run_tool(["bash", "-ec", snippet("cli")], env)
        self.assertEqual(rc, 0, out)
        self.assertTrue(out.endswith("a,b\n1,2\n"), out)
        self.srv.release("report.csv", g["lease"])

    # Presigned URLs (test_guard_s3_presign.py has the refusals) -------------------------------

    def test_docs_boto3_presign_snippet(self):
        g = self.lease_from_docs()
        rc, out = self.run_tool([sys.executable, "-c", snippet("boto3-presign")], self.env(g))
        self.assertEqual((rc, out), (0, "a,b\n1,2\n"), out)
        self.assertEqual(self.stored("report.csv"), (b"a,b\n1,2\n", str(g["token"])))
        self.srv.release("report.csv", g["lease"])

    @unittest.skipUnless(have(AWS), "Debian's awscli (%s) is not installed (scripts/deps.sh --test)" % AWS)
    def test_docs_cli_presign_snippet(self):
        g = self.acquire("report.csv")
        st, _, body = self.srv.request("PUT", "/%s/report.csv" % BUCKET, raw=b"a,b\n1,2\n", headers={
            "Fencing-Lease": g["lease"], "Content-Type": "text/csv"})
        self.assertEqual(st, 200, body)
        env = self.env(g, PATH=os.path.dirname(AWS) + os.pathsep + os.environ.get("PATH", ""))
        rc, out = self.run_tool(["bash", "-ec", snippet("cli-presign")], env)
        self.assertEqual((rc, out), (0, "a,b\n1,2\n"), out)
        self.srv.release("report.csv", g["lease"])

    # rclone ------------------------------------------------------------------------------

    def rclone_env(self, grant):
        """rclone's remote `lg:` (the gateway, signing with grant), all of it in the environment."""
        open(os.path.join(self.dir, "rclone.conf"), "w").close()
        return self.env(grant, RCLONE_CONFIG=os.path.join(self.dir, "rclone.conf"), RCLONE_CONFIG_LG_TYPE="s3",
                        RCLONE_CONFIG_LG_PROVIDER="Other", RCLONE_CONFIG_LG_ENDPOINT=self.srv.url,
                        RCLONE_CONFIG_LG_ACCESS_KEY_ID=str(grant["token"]),
                        RCLONE_CONFIG_LG_SECRET_ACCESS_KEY=grant["lease"], RCLONE_CONFIG_LG_REGION="us-east-1",
                        RCLONE_CONFIG_LG_FORCE_PATH_STYLE="true", RCLONE_LOW_LEVEL_RETRIES="1",
                        RCLONE_RETRIES="1")

    @unittest.skipUnless(have("/usr/bin/rclone"), "rclone is not installed (scripts/deps.sh --test)")
    def test_rclone(self):
        key = "rclone-%s.txt" % uid()
        g = self.acquire(key)
        env = self.rclone_env
        src = os.path.join(self.dir, "rclone-up.txt")
        with open(src, "wb") as f:
            f.write(b"from rclone\n")
        rc, out = self.run_tool(["rclone", "copyto", src, "lg:%s/%s" % (BUCKET, key)], env(g))
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.stored(key), (b"from rclone\n", str(g["token"])))
        rc, out = self.run_tool(["rclone", "cat", "lg:%s/%s" % (BUCKET, key)], env(g))
        self.assertEqual((rc, out), (0, "from rclone\n"), out)
        rc, out = self.run_tool(["rclone", "ls", "lg:%s" % BUCKET], env(g))
        self.assertEqual(rc, 0, out)
        self.assertIn(key, out)
        rc, out = self.run_tool(["rclone", "deletefile", "lg:%s/%s" % (BUCKET, key)], env(g))
        self.assertEqual(rc, 0, out)
        self.assertNotIn(key, self.run_tool(["rclone", "ls", "lg:%s" % BUCKET], env(g))[1])
        skey = "rclone-stale-%s.txt" % uid()
        a, _ = self.stale_holder(skey)
        rc, out = self.run_tool(["rclone", "copyto", src, "lg:%s/%s" % (BUCKET, skey)], env(a))
        self.assertNotEqual(rc, 0, out)
        self.assert_stale_shown(out, a, skey)

    # s3cmd -------------------------------------------------------------------------------

    @unittest.skipUnless(have("/usr/bin/s3cmd"), "s3cmd is not installed (scripts/deps.sh --test)")
    def test_s3cmd(self):
        key = "s3cmd-%s.txt" % uid()
        g = self.acquire(key)

        def cfg(grant):
            path = os.path.join(self.dir, "s3cfg-%d" % grant["token"])
            host = "127.0.0.1:%d" % self.srv.port
            with open(path, "w") as f:
                f.write("[default]\naccess_key = %d\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\n"
                        "use_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n"
                        "check_ssl_certificate = False\n" % (grant["token"], grant["lease"], host, host))
            return ["s3cmd", "-c", path, "--no-progress"]
        src = os.path.join(self.dir, "s3cmd-up.txt")
        with open(src, "wb") as f:
            f.write(b"from s3cmd\n")
        rc, out = self.run_tool(cfg(g) + ["put", src, "s3://%s/%s" % (BUCKET, key)], self.env(g))
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.stored(key), (b"from s3cmd\n", str(g["token"])))
        down = os.path.join(self.dir, "s3cmd-down.txt")
        rc, out = self.run_tool(cfg(g) + ["get", "--force", "s3://%s/%s" % (BUCKET, key), down], self.env(g))
        self.assertEqual(rc, 0, out)
        with open(down, "rb") as f:
            self.assertEqual(f.read(), b"from s3cmd\n")
        rc, out = self.run_tool(cfg(g) + ["ls", "s3://%s/" % BUCKET], self.env(g))
        self.assertEqual(rc, 0, out)
        self.assertIn(key, out)
        rc, out = self.run_tool(cfg(g) + ["del", "s3://%s/%s" % (BUCKET, key)], self.env(g))
        self.assertEqual(rc, 0, out)
        skey = "s3cmd-stale-%s.txt" % uid()
        a, _ = self.stale_holder(skey)
        rc, out = self.run_tool(cfg(a) + ["put", src, "s3://%s/%s" % (BUCKET, skey)], self.env(a))
        self.assertNotEqual(rc, 0, out)
        self.assert_stale_shown(out, a, skey)

    # The JavaScript SDK ------------------------------------------------------------------

    @unittest.skipUnless(js_ready(), "node or tests/s3clients/node_modules is missing (npm ci in tests/s3clients)")
    def test_javascript_sdk(self):
        key = "js-%s/data.txt" % uid()
        g = self.acquire(key)

        def js(grant, *args, **env):
            return self.run_tool(["node", os.path.join(JS_DIR, "client.mjs")] + list(args), self.env(grant, **env),
                                 cwd=JS_DIR)
        self.assertEqual(js(g, "put", key, "from the js sdk\n"), (0, "put\n"))
        self.assertEqual(self.stored(key), (b"from the js sdk\n", str(g["token"])))
        self.assertEqual(js(g, "get", key, RANGE="bytes=5-7"), (0, "the"))
        self.assertEqual(js(g, "head", key), (0, "16\n"))
        self.assertEqual(js(g, "list", key.split("/")[0] + "/"), (0, key + "\n"))
        self.assertEqual(js(g, "delete", key), (0, "deleted\n"))
        rc, out = js(g, "get", key)
        self.assertEqual(rc, 1, out)
        self.assertIn("NoSuchKey", out)
        skey = "js-stale-%s.txt" % uid()
        a, _ = self.stale_holder(skey)
        rc, out = js(a, "put", skey, "stale")
        self.assertEqual(rc, 1, out)
        self.assertIn("StaleFencingToken", out)
        self.assert_stale_shown(out, a, skey)

    @unittest.skipUnless(js_ready(), "node or tests/s3clients/node_modules is missing (npm ci in tests/s3clients)")
    def test_docs_js_snippet(self):
        g = self.acquire("report.csv")
        path = os.path.join(JS_DIR, "snippet-%s.mjs" % uid())
        with open(path, "w") as f:
            f.write(snippet("js"))
        try:
            rc, out = self.run_tool(["node", path], self.env(g), cwd=JS_DIR)
        finally:
            os.unlink(path)
        self.assertEqual((rc, out), (0, "a,b\n1,2\n"), out)
        self.srv.release("report.csv", g["lease"])

    # The Go SDK ----------------------------------------------------------------------------

    def go_program(self):
        """docs/fencing.md's Go program, gofmt-clean and built with Debian's aws-sdk-go-v2 in
        GOPATH mode, offline; built once per run (the cold build takes most of this test's
        time), its cache in the test's temporary folder."""
        cls = type(self)
        if getattr(cls, "go_binary", None):
            return cls.go_binary
        src = os.path.join(self.dir, "go-snippet")
        os.makedirs(src, exist_ok=True)
        with open(os.path.join(src, "main.go"), "w") as f:
            f.write(snippet("go"))
        env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH_DEBIAN, GOFLAGS="", GOPROXY="off",
                   GOTOOLCHAIN="local", GOCACHE=os.path.join(self.dir, "go-cache"), HOME=self.dir)
        rc, out = self.run_tool(["gofmt", "-l", "main.go"], env, cwd=src)
        self.assertEqual((rc, out), (0, ""), "the Go program in docs/fencing.md is not gofmt-formatted")
        rc, out = self.run_tool(["go", "build", "-o", "snippet", "main.go"], env, timeout=240, cwd=src)
        self.assertEqual(rc, 0, out)
        cls.go_binary = os.path.join(src, "snippet")
        return cls.go_binary

    @unittest.skipUnless(go_ready(), "go or Debian's Go SDK is missing (golang-go and golang-github-aws-aws-sdk-go-v2-dev: "
                         "scripts/deps.sh --test)")
    def test_docs_go_snippet(self):
        """The Go program as it stands in the docs: its put and get with the lease the docs'
        shell lines take; with a wrong secret SignatureDoesNotMatch; run by a stale holder,
        refused, and the SDK's error names the stale token."""
        prog = self.go_program()
        g = self.lease_from_docs()
        rc, out = self.run_tool([prog], self.env(g))
        self.assertEqual((rc, out), (0, "a,b\n1,2\n"), out)
        self.assertEqual(self.stored("report.csv"), (b"a,b\n1,2\n", str(g["token"])))
        rc, out = self.run_tool([prog], self.env(g, LEASE=str(uuid.uuid4())))
        self.assertEqual(rc, 1, out)
        self.assertIn("SignatureDoesNotMatch", out)
        self.assertEqual(self.stored("report.csv"), (b"a,b\n1,2\n", str(g["token"])))
        self.srv.release("report.csv", g["lease"])
        a, b = self.stale_holder("report.csv")
        rc, out = self.run_tool([prog], self.env(a))
        self.assertEqual(rc, 1, out)
        self.assertIn("StaleFencingToken", out)
        self.assert_stale_shown(out, a, "report.csv")
        self.srv.release("report.csv", b["lease"])



@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3KeyedTests(unittest.TestCase):
    """With --auth-file: an SDK's write and read are signed with a lease its key took; a
    signed read (a presigned URL's too) with a lease of another lock, and a signed listing,
    are refused; a listing with an API key shows only the names the key covers."""

    def test_reads_no_weaker_than_the_api(self):
        moto = s3_fixture.Moto()
        d = tempfile.mkdtemp(prefix="leasegate-s3keys-")
        try:
            p = subprocess.run([harness.binary_path(), "keygen", "team", "client", "team-a/"], capture_output=True,
                               text=True, timeout=10)
            key, line = p.stdout.splitlines()
            keys = os.path.join(d, "keys")
            with open(keys, "w") as f:
                f.write(line + "\n")
            os.chmod(keys, 0o600)
            srv = harness.Server(extra_args=[
                "--auth-file", keys, "--guard", "/%s/=s3://%s/keyed,region=%s,endpoint=%s" % (
                    BUCKET, s3_fixture.BUCKET, s3_fixture.REGION, moto.url)], extra_env=moto.env())
            try:
                bearer = {"Authorization": "Bearer " + key}
                grants = {}
                for name in ("team-a/x.txt", "team-a/sub/y.txt", "team-a/read.txt"):
                    st, _, grants[name] = srv.request("POST", "/v1/locks/%s/acquire" % name, body={"owner": "t"},
                                                      headers=bearer)
                    self.assertEqual(st, 200, grants[name])
                    moto.put_direct("keyed/" + name, b"x", grants[name]["token"])
                moto.put_direct("keyed/team-b/secret.txt", b"other team's")
                import boto3
                from botocore.config import Config
                from botocore.exceptions import ClientError

                def sdk(grant):
                    return boto3.client("s3", endpoint_url=srv.url, region_name="us-east-1",
                                        aws_access_key_id=str(grant["token"]), aws_secret_access_key=grant["lease"],
                                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
                st, _, w = srv.request("POST", "/v1/locks/team-a/w.txt/acquire", body={"owner": "t"}, headers=bearer)
                sdk(w).put_object(Bucket=BUCKET, Key="team-a/w.txt", Body=b"written")
                self.assertEqual(sdk(w).get_object(Bucket=BUCKET, Key="team-a/w.txt")["Body"].read(), b"written")
                # A read lease of the object's lock proves the right to read it.
                st, _, _ = srv.request("POST", "/v1/locks/team-a/read.txt/release",
                                       body={"lease": grants["team-a/read.txt"]["lease"]}, headers=bearer)
                self.assertEqual(st, 200)
                st, _, r = srv.request("POST", "/v1/locks/team-a/read.txt/acquire",
                                       body={"owner": "reader", "mode": "read", "ttl_ms": 60000}, headers=bearer)
                self.assertEqual(st, 200, r)
                self.assertEqual(sdk(r).get_object(Bucket=BUCKET, Key="team-a/read.txt")["Body"].read(), b"x")
                # ... but not another lock's object, nor a write with it.
                with self.assertRaises(ClientError) as cm:
                    sdk(r).get_object(Bucket=BUCKET, Key="team-a/x.txt")
                self.assertEqual(cm.exception.response["Error"]["Code"], "AccessDenied")
                with self.assertRaises(ClientError) as cm:
                    sdk(r).put_object(Bucket=BUCKET, Key="team-a/read.txt", Body=b"reader writes")
                self.assertEqual(cm.exception.response["Error"]["Code"], "StaleFencingToken")
                with self.assertRaises(ClientError) as cm:
                    sdk(w).get_object(Bucket=BUCKET, Key="team-b/secret.txt")
                self.assertEqual(cm.exception.response["Error"]["Code"], "AccessDenied")
                with self.assertRaises(ClientError) as cm:
                    sdk(w).list_objects_v2(Bucket=BUCKET)
                self.assertEqual(cm.exception.response["Error"]["Code"], "AccessDenied")
                # A presigned GET is the same signed read: made with the read lease, it reads; with
                # a lease of another lock, AccessDenied.
                import urllib.error
                import urllib.request

                def presigned_get(grant, key):
                    url = boto3.client("s3", endpoint_url=srv.url, region_name="us-east-1",
                                       aws_access_key_id=str(grant["token"]), aws_secret_access_key=grant["lease"],
                                       config=Config(signature_version="s3v4", s3={"addressing_style": "path"})
                                       ).generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key})
                    try:
                        with urllib.request.urlopen(url, timeout=30) as r:
                            return r.status, r.read()
                    except urllib.error.HTTPError as e:
                        return e.code, e.read()
                self.assertEqual(presigned_get(r, "team-a/read.txt"), (200, b"x"))
                st, body = presigned_get(r, "team-a/x.txt")
                self.assertEqual(st, 403, body)
                self.assertIn(b"<Code>AccessDenied</Code>", body)
                # Unsigned and keyless: AccessDenied, in S3's format.
                st, _, body = srv.request("GET", "/%s/team-a/x.txt" % BUCKET)
                self.assertEqual(st, 403, body)
                self.assertIn("<Code>AccessDenied</Code>", body)
                # A listing with the key shows its names only.
                st, _, body = srv.request("GET", "/%s?list-type=2" % BUCKET, headers=bearer)
                self.assertEqual(st, 200, body)
                self.assertIn("team-a/x.txt", body)
                self.assertNotIn("team-b", body)
                st, _, body = srv.request("GET", "/%s?list-type=2&delimiter=/" % BUCKET, headers=bearer)
                self.assertIn("<Prefix>team-a/</Prefix>", body)
                self.assertNotIn("team-b", body)
            finally:
                srv.cleanup()
        finally:
            moto.stop()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    if not s3_fixture.available():
        print("SKIPPED: S3 client tests: " + s3_fixture.missing_reason())
    harness.run_tests()
