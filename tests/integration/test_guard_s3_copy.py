"""CopyObject through an s3:// route: a PUT with x-amz-copy-source is a fenced write of its
destination (docs/fencing.md, "Copies"), its source an object the same client could GET
through the same route. Unmodified clients against moto's server made strict
(moto_strict.py, which also honours CopyObject's preconditions as S3 documents them):
boto3's copy_object, the AWS CLI's `s3 cp` and `s3 mv` between keys of the bucket (and `s3 cp`
of 9 MiB, in parts: UploadPartCopy, after GetObjectTagging of the source), rclone's
server-side copyto and moveto, s3cmd's cp. Then what a hostile client tries: a stale lease's
copy, a source outside the route, in another bucket, the probe key or a tombstone (refused,
the store never asked), the source's higher fence or a smuggled fencing-token carried onto
the destination, a signed copy from a lock its lease does not hold with --auth-file; and a
store that ignores preconditions on copies (moto as it is) gets no copy at all (501).

Each of these failed before copies were forwarded (every copy was refused with 400). Only
127.0.0.1; every wait is bounded; no timing assertions.
"""

import os
import shutil
import subprocess
import tempfile
import unittest
import uuid

import harness
import s3_fixture

BUCKET = "reports"
ONE = "one"  # a route bound to one lock: a move needs the source's lease too
AWS = "/usr/bin/aws"


def uid():
    return uuid.uuid4().hex[:10]


def have(path):
    return os.path.exists(path) and os.access(path, os.X_OK)


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3CopyTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        cls.srv = harness.Server(extra_args=s3_fixture.route(BUCKET, "pfx", cls.moto.url)
                                 + s3_fixture.route(ONE, "onepfx", cls.moto.url, ",lock=onelock")
                                 + s3_fixture.route("other", "otherpfx", cls.moto.url), extra_env=cls.moto.env())
        cls.dir = tempfile.mkdtemp(prefix="leasegate-s3copy-")

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.moto.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def one(self):
        """The one lease of route /one/'s lock, for every test that uses the route."""
        if not hasattr(type(self), "one_grant"):
            type(self).one_grant = self.acquire("onelock")
        return type(self).one_grant

    def acquire(self, lock, ttl_ms=60000, owner="o"):
        st, _, g = self.srv.acquire(lock, owner, ttl_ms=ttl_ms)
        self.assertEqual(st, 200, g)
        return g

    def boto3(self, g):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                            aws_access_key_id=str(g["token"]), aws_secret_access_key=g["lease"],
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def head(self, key):
        return self.moto.s3.head_object(Bucket=s3_fixture.BUCKET, Key=key)

    def env(self, g, **more):
        e = dict(os.environ, AWS_ACCESS_KEY_ID=str(g["token"]), AWS_SECRET_ACCESS_KEY=g["lease"],
                 AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.path.join(self.dir, "aws-config"),
                 AWS_SHARED_CREDENTIALS_FILE=os.path.join(self.dir, "no-credentials"), HOME=self.dir)
        e.pop("AWS_CA_BUNDLE", None)
        e.update(more)
        return e

    def run_tool(self, args, env):
        p = subprocess.run(args, env=env, capture_output=True, timeout=90, stdin=subprocess.DEVNULL, cwd=self.dir)
        return p.returncode, p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")

    def put_source(self, key, body=b"source bytes", **kw):
        g = self.acquire(key)
        self.boto3(g).put_object(Bucket=BUCKET, Key=key, Body=body, **kw)
        return g

    def copy(self, g, dest, source, **headers):
        """A raw CopyObject with Fencing-Lease (curl's way): (status, headers, body)."""
        h = {"Fencing-Lease": g["lease"], "x-amz-copy-source": source}
        h.update(headers)
        return self.srv.request("PUT", "/%s/%s" % (BUCKET, dest), raw=b"", headers=h)

    # Clients ------------------------------------------------------------------------------

    def test_boto3_copy_object(self):
        """COPY (S3's default): the source's bytes, user metadata and content headers, the
        destination's own token as its fence (not the source's fence, not one the client
        sends); REPLACE: the client's metadata. A GET through the guard reads the copy."""
        d = "boto-%s" % uid()
        src, dst = d + "/a b:1.csv", d + "/copy.csv"
        self.moto.put_direct("pfx/" + src, b"a,b\n", fence=1000)  # a fence far above the copy's token
        self.moto.s3.copy_object(Bucket=s3_fixture.BUCKET, Key="pfx/" + src, MetadataDirective="REPLACE",
                                 CopySource={"Bucket": s3_fixture.BUCKET, "Key": "pfx/" + src},
                                 ContentType="text/csv", CacheControl="max-age=60",
                                 Metadata={"who": "me", "fencing-token": "1000", "leasegate-note": "the guard's own"})
        g = self.acquire(dst)
        s3 = self.boto3(g)
        r = s3.copy_object(Bucket=BUCKET, Key=dst, CopySource={"Bucket": BUCKET, "Key": src},
                           Metadata={"fencing-token": "99999"})
        self.assertTrue(r["CopyObjectResult"]["ETag"])
        self.assertEqual(self.moto.get("pfx/" + dst), (b"a,b\n", str(g["token"])))
        h = self.head("pfx/" + dst)
        self.assertEqual(h["Metadata"], {"who": "me", "fencing-token": str(g["token"])})
        self.assertEqual((h["ContentType"], h["CacheControl"]), ("text/csv", "max-age=60"))
        self.assertEqual(s3.get_object(Bucket=BUCKET, Key=dst)["Body"].read(), b"a,b\n")
        s3.copy_object(Bucket=BUCKET, Key=dst, CopySource="%s/%s" % (BUCKET, src), MetadataDirective="REPLACE",
                       ContentType="text/plain", Metadata={"mine": "yes", "fencing-token": "99999"})
        h = self.head("pfx/" + dst)
        self.assertEqual(h["Metadata"], {"mine": "yes", "fencing-token": str(g["token"])})
        self.assertEqual(h["ContentType"], "text/plain")
        # The client's own condition on the source is kept: S3 answers 412.
        from botocore.exceptions import ClientError
        with self.assertRaises(ClientError) as cm:
            s3.copy_object(Bucket=BUCKET, Key=dst, CopySource="/%s/%s" % (BUCKET, src), CopySourceIfMatch='"0"')
        self.assertEqual(cm.exception.response["Error"]["Code"], "PreconditionFailed")

    @unittest.skipUnless(have(AWS), "awscli is not installed (scripts/deps.sh --test)")
    def test_aws_cli_cp_and_mv(self):
        """`aws s3 cp s3://b/a s3://b/b` is one CopyObject; `aws s3 mv` a copy and a DELETE of
        the source, so on a route of one lock one lease does both."""
        d = "cli-%s" % uid()
        self.put_source(d + "/a.txt", b"from the cli\n", Metadata={"k": "v"})
        g = self.acquire(d + "/b.txt")
        rc, out = self.run_tool([AWS, "--endpoint-url", self.srv.url, "s3", "cp", "s3://%s/%s/a.txt" % (BUCKET, d),
                                 "s3://%s/%s/b.txt" % (BUCKET, d)], self.env(g))
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.moto.get("pfx/%s/b.txt" % d), (b"from the cli\n", str(g["token"])))
        self.assertEqual(self.head("pfx/%s/b.txt" % d)["Metadata"]["k"], "v")
        one = self.one()
        s3 = self.boto3(one)
        s3.put_object(Bucket=ONE, Key=d + "/m.txt", Body=b"moved\n")
        rc, out = self.run_tool([AWS, "--endpoint-url", self.srv.url, "s3", "mv", "s3://%s/%s/m.txt" % (ONE, d),
                                 "s3://%s/%s/n.txt" % (ONE, d)], self.env(one))
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.moto.get("onepfx/%s/n.txt" % d), (b"moved\n", str(one["token"])))
        self.assertEqual(s3.get_object(Bucket=ONE, Key=d + "/n.txt")["Body"].read(), b"moved\n")
        from botocore.exceptions import ClientError
        with self.assertRaises(ClientError):
            s3.head_object(Bucket=ONE, Key=d + "/m.txt")  # its tombstone: 404

    @unittest.skipUnless(have(AWS), "awscli is not installed (scripts/deps.sh --test)")
    def test_aws_cli_cp_multipart_copy(self):
        """`aws s3 cp` of 9 MiB within the bucket: CreateMultipartUpload, two UploadPartCopy
        (x-amz-copy-source-range, each pinned to the source's ETag), Complete. moto ignores
        If-Match on Complete, so the destination is a new key here (docs/fencing.md)."""
        d = "mpcopy-%s" % uid()
        body = os.urandom(9 * 1024 * 1024)
        self.moto.put_direct("pfx/%s/big.bin" % d, body, fence=77)
        g = self.acquire(d + "/copy.bin")
        rc, out = self.run_tool([AWS, "--endpoint-url", self.srv.url, "s3", "cp", "s3://%s/%s/big.bin" % (BUCKET, d),
                                 "s3://%s/%s/copy.bin" % (BUCKET, d)], self.env(g))
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.moto.get("pfx/%s/copy.bin" % d), (body, str(g["token"])))
        self.assertEqual(len(self.moto.requests('"PUT /%s/pfx/%s/copy.bin?partNumber=' % (s3_fixture.BUCKET, d))), 2,
                         "two UploadPartCopy")
        # A part copy of a tombstone, of another route's object, or into an upload another
        # token began: refused before the store hears of it.
        a = self.acquire(d + "/other.bin")
        s3 = self.boto3(a)
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=d + "/other.bin")["UploadId"]
        from botocore.exceptions import ClientError
        for source, code in (({"Bucket": "other", "Key": "x"}, "AccessDenied"),
                             ({"Bucket": BUCKET, "Key": ".leasegate-probe"}, "InvalidArgument")):
            with self.assertRaises(ClientError) as cm:
                s3.upload_part_copy(Bucket=BUCKET, Key=d + "/other.bin", UploadId=up, PartNumber=1,
                                    CopySource=source, CopySourceRange="bytes=0-9")
            self.assertEqual(cm.exception.response["Error"]["Code"], code)
        with self.assertRaises(ClientError) as cm:
            self.boto3(g).upload_part_copy(Bucket=BUCKET, Key=d + "/copy.bin", UploadId=up, PartNumber=1,
                                           CopySource={"Bucket": BUCKET, "Key": d + "/big.bin"})
        self.assertIn(cm.exception.response["Error"]["Code"], ("NoSuchUpload", "StaleFencingToken"))
        part = s3.upload_part_copy(Bucket=BUCKET, Key=d + "/other.bin", UploadId=up, PartNumber=1,
                                   CopySource={"Bucket": BUCKET, "Key": d + "/big.bin"}, CopySourceRange="bytes=0-9")
        self.assertTrue(part["CopyPartResult"]["ETag"])
        s3.abort_multipart_upload(Bucket=BUCKET, Key=d + "/other.bin", UploadId=up)

    def rclone_env(self, g):
        open(os.path.join(self.dir, "rclone.conf"), "w").close()
        return self.env(g, RCLONE_CONFIG=os.path.join(self.dir, "rclone.conf"), RCLONE_CONFIG_LG_TYPE="s3",
                        RCLONE_CONFIG_LG_PROVIDER="Other", RCLONE_CONFIG_LG_ENDPOINT=self.srv.url,
                        RCLONE_CONFIG_LG_ACCESS_KEY_ID=str(g["token"]), RCLONE_CONFIG_LG_SECRET_ACCESS_KEY=g["lease"],
                        RCLONE_CONFIG_LG_REGION="us-east-1", RCLONE_CONFIG_LG_FORCE_PATH_STYLE="true",
                        RCLONE_LOW_LEVEL_RETRIES="1", RCLONE_RETRIES="1")

    @unittest.skipUnless(have("/usr/bin/rclone"), "rclone is not installed (scripts/deps.sh --test)")
    def test_rclone_server_side_copyto_and_moveto(self):
        d = "rclone-%s" % uid()
        one = self.one()
        self.boto3(one).put_object(Bucket=ONE, Key=d + "/a.txt", Body=b"from rclone\n")
        env = self.rclone_env(one)
        rc, out = self.run_tool(["rclone", "copyto", "lg:%s/%s/a.txt" % (ONE, d), "lg:%s/%s/b.txt" % (ONE, d)], env)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.moto.get("onepfx/%s/b.txt" % d), (b"from rclone\n", str(one["token"])))
        rc, out = self.run_tool(["rclone", "moveto", "lg:%s/%s/b.txt" % (ONE, d), "lg:%s/%s/c.txt" % (ONE, d)], env)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.moto.get("onepfx/%s/c.txt" % d), (b"from rclone\n", str(one["token"])))
        rc, out = self.run_tool(["rclone", "lsf", "lg:%s/%s" % (ONE, d)], env)
        self.assertEqual((rc, sorted(out.split())), (0, ["a.txt", "c.txt"]), out)
        # Server-side, not a download and an upload: the store saw CopyObjects.
        self.assertTrue(self.moto.requests("PUT /%s/onepfx/%s/c.txt" % (s3_fixture.BUCKET, d)))

    @unittest.skipUnless(have("/usr/bin/s3cmd"), "s3cmd is not installed (scripts/deps.sh --test)")
    def test_s3cmd_cp(self):
        d = "s3cmd-%s" % uid()
        self.put_source(d + "/a.txt", b"from s3cmd\n")
        g = self.acquire(d + "/b.txt")
        host = "127.0.0.1:%d" % self.srv.port
        path = os.path.join(self.dir, "s3cfg")
        with open(path, "w") as f:
            f.write("[default]\naccess_key = %d\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\n"
                    "use_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n" % (
                        g["token"], g["lease"], host, host))
        rc, out = self.run_tool(["s3cmd", "-c", path, "cp", "s3://%s/%s/a.txt" % (BUCKET, d),
                                 "s3://%s/%s/b.txt" % (BUCKET, d)], self.env(g))
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.moto.get("pfx/%s/b.txt" % d), (b"from s3cmd\n", str(g["token"])))

    # Hostile ------------------------------------------------------------------------------

    def assert_refused(self, answer, status, code, dest, source_key=None):
        st, _, body = answer
        self.assertEqual(st, status, body)
        self.assertIn("<Code>%s</Code>" % code, body)
        self.assertFalse(self.moto.requests("PUT /%s/pfx/%s" % (s3_fixture.BUCKET, dest)), "the store was asked")
        if source_key:
            self.assertFalse(self.moto.requests("HEAD /%s/%s" % (s3_fixture.BUCKET, source_key)),
                             "the store was asked about the source")

    def test_stale_lease_copy_is_refused(self):
        d = "stale-%s" % uid()
        self.put_source(d + "/src.txt")
        dst = d + "/dst.txt"
        a = self.acquire(dst, ttl_ms=300, owner="a")
        self.srv.wait_until(lambda: not self.srv.get_lock(dst)[2].get("held"), timeout=10, interval=0.05,
                            what="A's lease to expire")
        b = self.acquire(dst, owner="b")
        self.boto3(b).put_object(Bucket=BUCKET, Key=dst, Body=b"B's")
        st, _, body = self.copy(a, dst, "%s/%s/src.txt" % (BUCKET, d))
        self.assertEqual(st, 409, body)
        self.assertIn("StaleFencingToken", body)
        self.assertEqual(self.moto.get("pfx/" + dst), (b"B's", str(b["token"])))
        # A holder with a token below the object's fence (written directly, higher): refused at the fence.
        self.moto.put_direct("pfx/" + dst, b"direct", fence=b["token"] + 50)
        st, _, body = self.copy(b, dst, "%s/%s/src.txt" % (BUCKET, d))
        self.assertEqual(st, 409, body)
        self.assertIn("<Fence>%d</Fence>" % (b["token"] + 50), body)
        self.assertEqual(self.moto.get("pfx/" + dst), (b"direct", str(b["token"] + 50)))

    def test_sources_it_may_not_read(self):
        """Outside the route, another route's bucket, a path that climbs out of the key
        prefix, the probe key, a version: refused, and the store never asked."""
        d = "hostile-%s" % uid()
        dst = d + "/dst.txt"
        g = self.acquire(dst)
        self.moto.put_direct("secret-%s.txt" % d, b"outside the route")
        self.moto.put_direct("otherpfx/%s.txt" % d, b"another route's")
        cases = [
            ("%s/secret-%s.txt" % (s3_fixture.BUCKET, d), 403, "AccessDenied"),   # the store's own bucket
            ("other/%s.txt" % d, 403, "AccessDenied"),                             # another route
            ("/other/%s.txt" % d, 403, "AccessDenied"),
            ("%s/../secret-%s.txt" % (BUCKET, d), 400, "InvalidArgument"),         # climbs out of pfx/
            ("%s/%%2E%%2E/secret-%s.txt" % (BUCKET, d), 400, "InvalidArgument"),
            ("%s/a%%2F..%%2F..%%2Fsecret-%s.txt" % (BUCKET, d), 400, "InvalidArgument"),
            ("%s/.leasegate-probe" % BUCKET, 400, "InvalidArgument"),
            ("%s/%s/src.txt?versionId=1" % (BUCKET, d), 501, "NotImplemented"),
            ("%s" % BUCKET, 400, "InvalidArgument"),
            ("arn:aws:s3:us-east-1:111122223333:accesspoint/ap/object/k", 403, "AccessDenied"),
        ]
        for source, status, code in cases:
            with self.subTest(source=source):
                self.assert_refused(self.copy(g, dst, source), status, code, dst, "secret-" + d)
                self.assertFalse(self.moto.requests("HEAD /%s/otherpfx/%s" % (s3_fixture.BUCKET, d)))
        # A copy with a body, and an UploadPartCopy into an upload it did not begin: refused too.
        st, _, body = self.srv.request("PUT", "/%s/%s" % (BUCKET, dst), raw=b"x", headers={
            "Fencing-Lease": g["lease"], "x-amz-copy-source": "%s/%s/src.txt" % (BUCKET, d)})
        self.assertEqual(st, 400, body)
        st, _, body = self.srv.request("PUT", "/%s/%s?partNumber=1&uploadId=u" % (BUCKET, dst), raw=b"", headers={
            "Fencing-Lease": g["lease"], "x-amz-copy-source": "%s/%s/src.txt" % (BUCKET, d)})
        self.assertEqual(st, 409, body)  # an upload this token did not begin
        self.assertIn("<Code>NoSuchUpload</Code>", body)

    def test_tombstone_source_is_no_such_key(self):
        d = "tomb-%s" % uid()
        src, dst = d + "/src.txt", d + "/dst.txt"
        gs = self.put_source(src)
        self.boto3(gs).delete_object(Bucket=BUCKET, Key=src)
        g = self.acquire(dst)
        st, _, body = self.copy(g, dst, "%s/%s" % (BUCKET, src))
        self.assertEqual(st, 404, body)
        self.assertIn("<Code>NoSuchKey</Code>", body)
        self.assertFalse(self.moto.requests("PUT /%s/pfx/%s" % (s3_fixture.BUCKET, dst)), "the store was asked")
        self.assertIsNone(self.moto.get("pfx/" + dst))
        st, _, body = self.copy(g, dst, "%s/%s/never.txt" % (BUCKET, d))
        self.assertEqual(st, 404, body)


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class S3CopyStoreTests(unittest.TestCase):
    def test_store_that_ignores_copy_preconditions_gets_no_copy(self):
        """moto as it is ignores If-Match and If-None-Match on CopyObject: the probe finds
        that, /healthz says so, and a copy gets 501 (never an unconditional copy); PUTs go."""
        moto = s3_fixture.Moto(copy_preconditions=False)
        srv = harness.Server(extra_args=s3_fixture.route(BUCKET, "pfx", moto.url), extra_env=moto.env())
        try:
            st, _, health = srv.request("GET", "/healthz")
            self.assertIn("If-Match and If-None-Match on CopyObject (copies are refused)", health["guard"][0]["detail"])
            st, _, g = srv.acquire("a.txt", "o", ttl_ms=60000)
            st, _, body = srv.request("PUT", "/%s/a.txt" % BUCKET, raw=b"a", headers={"Fencing-Lease": g["lease"]})
            self.assertEqual(st, 200, body)
            st, _, g = srv.acquire("b.txt", "o", ttl_ms=60000)
            st, _, body = srv.request("PUT", "/%s/b.txt" % BUCKET, raw=b"", headers={
                "Fencing-Lease": g["lease"], "x-amz-copy-source": "%s/a.txt" % BUCKET})
            self.assertEqual(st, 501, body)
            self.assertIn("<Code>NotImplemented</Code>", body)
            self.assertFalse(moto.requests("PUT /%s/pfx/b.txt" % s3_fixture.BUCKET))
        finally:
            srv.cleanup()
            moto.stop()

    def test_api_keys_read_checks_of_the_source(self):
        """With --auth-file the source is read as a GET of it would be: a key that reads
        team-a/ only cannot copy team-b/'s object into team-a/ (Bearer key and
        Fencing-Lease), and a signed copy needs a lease that holds the source's lock too."""
        moto = s3_fixture.Moto()
        tmp = tempfile.mkdtemp(prefix="leasegate-s3copykeys-")
        p = subprocess.run([harness.binary_path(), "keygen", "team", "client", "team-a/"], capture_output=True,
                           text=True, timeout=10)
        key, line = p.stdout.splitlines()
        keys = os.path.join(tmp, "keys")
        with open(keys, "w") as f:
            f.write(line + "\n")
        os.chmod(keys, 0o600)
        srv = harness.Server(extra_args=["--auth-file", keys] + s3_fixture.route(BUCKET, "pfx", moto.url),
                             extra_env=moto.env())
        bearer = {"Authorization": "Bearer " + key}
        try:
            moto.put_direct("pfx/team-b/secret.txt", b"team b's")
            moto.put_direct("pfx/team-a/x.txt", b"team a's")
            st, _, g = srv.request("POST", "/v1/locks/team-a/y.txt/acquire", body={"owner": "t", "ttl_ms": 60000},
                                   headers=bearer)
            self.assertEqual(st, 200, g)
            h = dict(bearer, **{"Fencing-Lease": g["lease"], "x-amz-copy-source": BUCKET + "/team-b/secret.txt"})
            st, _, body = srv.request("PUT", "/%s/team-a/y.txt" % BUCKET, raw=b"", headers=h)
            self.assertEqual(st, 403, body)
            self.assertFalse(moto.requests("HEAD /%s/pfx/team-b/secret" % s3_fixture.BUCKET), "the store was asked")
            h["x-amz-copy-source"] = BUCKET + "/team-a/x.txt"
            st, _, body = srv.request("PUT", "/%s/team-a/y.txt" % BUCKET, raw=b"", headers=h)
            self.assertEqual(st, 200, body)
            self.assertEqual(moto.get("pfx/team-a/y.txt"), (b"team a's", str(g["token"])))
            import boto3
            from botocore.config import Config
            from botocore.exceptions import ClientError
            s3 = boto3.client("s3", endpoint_url=srv.url, region_name="us-east-1",
                              aws_access_key_id=str(g["token"]), aws_secret_access_key=g["lease"],
                              config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
            with self.assertRaises(ClientError) as cm:
                s3.copy_object(Bucket=BUCKET, Key="team-a/y.txt", CopySource=BUCKET + "/team-a/x.txt")
            self.assertEqual(cm.exception.response["Error"]["Code"], "AccessDenied")
        finally:
            srv.cleanup()
            moto.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
