"""Presigned URLs through an s3:// route, against moto's S3 server: URLs made by the tools users
run, unmodified (boto3's generate_presigned_url, Debian's `aws s3 presign`), with credentials made
of a lease (its token the access key id, the lease the secret), then used by plain urllib and curl,
which hold no credentials.

A presigned PUT is a write like a header-signed one: its token becomes the object's fence and must
hold the lock when the write goes (a released lease's URL, or a read lease's, is stale). A URL past
X-Amz-Date + X-Amz-Expires gets S3's 403 AccessDenied "Request has expired" and writes nothing; a
signature over another path, method or query, or another Host, gets 403 SignatureDoesNotMatch. Some
URLs are signed here by hand (SigV4 as AWS documents it for query parameters) to put a date in the
past or the future and to re-sign a changed query.

Skipped with one line when moto or boto3 is missing (.ci/run fails then); the CLI test skips
without /usr/bin/aws. Only 127.0.0.1; every wait is bounded; no timing assertions.
"""

import datetime
import hashlib
import hmac
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

import harness
import s3_fixture
from test_guard_s3 import xml_error

BUCKET = "reports"
AWS = "/usr/bin/aws"  # Debian's awscli


def uid():
    return uuid.uuid4().hex[:10]


def fetch(url, method="GET", data=None, headers=None):
    """(status, headers, body bytes) of a plain request to url (urllib: no credentials). A body
    goes as application/octet-stream unless told: urllib's default, a form, is what moto's
    server parses as a form and stores as an empty object (S3 stores the bytes)."""
    headers = dict(headers or {})
    if data is not None:
        headers.setdefault("Content-Type", "application/octet-stream")
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def with_query(url, change):
    """url with its query parameters passed through change(list of (name, value)), re-encoded
    as SigV4 encodes them."""
    parts = urllib.parse.urlsplit(url)
    q = change(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(q, quote_via=urllib.parse.quote,
                                                                                safe="-_.~")))


def hand_presign(base, method, path, token, secret, when, expires, extra=()):
    """A presigned URL of method on path (as sent: already encoded), signed at `when` (a UTC
    datetime) for `expires` seconds, as AWS's "Authenticating Requests: Using Query
    Parameters" builds it (UNSIGNED-PAYLOAD, host signed); extra: more (name, value)
    parameters, signed with the rest."""
    host = urllib.parse.urlsplit(base).netloc
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    scope = "%s/us-east-1/s3/aws4_request" % amz_date[:8]
    params = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", "%s/%s" % (token, scope)),
              ("X-Amz-Date", amz_date), ("X-Amz-Expires", str(expires)), ("X-Amz-SignedHeaders", "host")]
    params += list(extra)

    def enc(s):
        return urllib.parse.quote(s, safe="-_.~")
    query = "&".join("%s=%s" % (enc(k), enc(v)) for k, v in sorted(params))
    canonical = "\n".join([method, path, query, "host:" + host, "", "host", "UNSIGNED-PAYLOAD"])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])

    def h(k, m):
        return hmac.new(k, m.encode(), hashlib.sha256).digest()
    key = h(h(h(h(("AWS4" + secret).encode(), amz_date[:8]), "us-east-1"), "s3"), "aws4_request")
    sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    return "%s%s?%s&X-Amz-Signature=%s" % (base, path, query, sig)


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class PresignTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        # /shared/: every key of it binds lock "batch", so one lease signs for several paths.
        cls.srv = harness.Server(extra_args=[
            "--guard", "/%s/=s3://%s/pre,region=%s,endpoint=%s" % (BUCKET, s3_fixture.BUCKET, s3_fixture.REGION,
                                                                  cls.moto.url),
            "--guard", "/shared/=s3://%s/shared,region=%s,endpoint=%s,lock=batch" % (
                s3_fixture.BUCKET, s3_fixture.REGION, cls.moto.url)], extra_env=cls.moto.env())
        cls.dir = tempfile.mkdtemp(prefix="leasegate-presign-")

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.moto.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def acquire(self, lock, owner="o", **fields):
        st, _, g = self.srv.acquire(lock, owner, **fields)
        self.assertEqual(st, 200, g)
        return g

    def presigner(self, g, secret=None):
        """boto3 as a user configures it to presign with a lease (SigV4: boto3 presigns a
        custom endpoint with Signature Version 2 unless told)."""
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                            aws_access_key_id=str(g["token"]), aws_secret_access_key=secret or g["lease"],
                            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))

    def url(self, g, op, key, expires=300, bucket=BUCKET, secret=None):
        return self.presigner(g, secret).generate_presigned_url(op, Params={"Bucket": bucket, "Key": key},
                                                                ExpiresIn=expires)

    def assert_error(self, answer, status, code, message=None):
        st, _, body = answer
        self.assertEqual(st, status, body)
        e = xml_error(body.decode())
        self.assertEqual(e["code"], code, body)
        if message:
            self.assertIn(message, e["message"])
        return e

    def test_boto3_put_then_get_and_head(self):
        key = "put-%s.csv" % uid()
        g = self.acquire(key)
        st, _, body = fetch(self.url(g, "put_object", key), "PUT", b"a,b\n1,2\n", {"Content-Type": "text/csv"})
        self.assertEqual(st, 200, body)
        self.assertEqual(self.moto.get("pre/" + key), (b"a,b\n1,2\n", str(g["token"])), "the token is its fence")
        st, headers, body = fetch(self.url(g, "get_object", key))
        self.assertEqual((st, body), (200, b"a,b\n1,2\n"))
        self.assertEqual(headers["Content-Type"], "text/csv")
        st, headers, body = fetch(self.url(g, "head_object", key), "HEAD")
        self.assertEqual((st, headers["Content-Length"], body), (200, "8", b""))
        # A key with a space and a slash (under /shared/, whose keys all bind lock "batch": a lock
        # name has no space): the path is signed as sent, encoded.
        odd = "dir %s/x y.txt" % uid()
        s = self.acquire("batch")
        st, _, body = fetch(self.url(s, "put_object", odd, bucket="shared"), "PUT", b"odd")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.moto.get("shared/" + odd), (b"odd", str(s["token"])))
        self.srv.release("batch", s["lease"])
        # A read lease reads by URL too.
        self.srv.release(key, g["lease"])
        r = self.acquire(key, mode="read")
        st, _, body = fetch(self.url(r, "get_object", key))
        self.assertEqual((st, body), (200, b"a,b\n1,2\n"))

    def test_expired_url_refused(self):
        key = "expired-%s.txt" % uid()
        g = self.acquire(key)
        url = self.url(g, "put_object", key, expires=1)
        signed = datetime.datetime.strptime(urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-Date"][0],
                                            "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        deadline = time.monotonic() + 30
        while utcnow() < signed + datetime.timedelta(seconds=2.2) and time.monotonic() < deadline:
            time.sleep(0.1)
        e = self.assert_error(fetch(url, "PUT", b"late"), 403, "AccessDenied", "Request has expired")
        self.assertEqual(e["X-Amz-Expires"], "1")
        self.assertIn("ServerTime", e)
        self.assertIsNone(self.moto.get("pre/" + key), "nothing was written")
        # A date in the past, signed by hand: the same, for a read too, also once its lease is gone.
        old = utcnow() - datetime.timedelta(minutes=10)
        url = hand_presign(self.srv.url, "PUT", "/%s/%s" % (BUCKET, key), g["token"], g["lease"], old, 60)
        self.assert_error(fetch(url, "PUT", b"late"), 403, "AccessDenied", "Request has expired")
        self.assertIsNone(self.moto.get("pre/" + key))
        self.srv.release(key, g["lease"])
        url = hand_presign(self.srv.url, "GET", "/%s/%s" % (BUCKET, key), g["token"], g["lease"], old, 60)
        self.assert_error(fetch(url), 403, "AccessDenied", "Request has expired")
        # Within its time, a week long, it goes.
        g = self.acquire(key)
        url = hand_presign(self.srv.url, "PUT", "/%s/%s" % (BUCKET, key), g["token"], g["lease"],
                           utcnow() - datetime.timedelta(days=6), 604800)
        st, _, body = fetch(url, "PUT", b"on time")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.moto.get("pre/" + key), (b"on time", str(g["token"])))

    def test_time_and_form_refused(self):
        key = "form-%s.txt" % uid()
        g = self.acquire(key)
        path = "/%s/%s" % (BUCKET, key)
        future = utcnow() + datetime.timedelta(hours=1)
        url = hand_presign(self.srv.url, "PUT", path, g["token"], g["lease"], future, 60)
        self.assert_error(fetch(url, "PUT", b"early"), 403, "AccessDenied", "Request is not yet valid")
        for expires in (0, 604801):
            url = hand_presign(self.srv.url, "PUT", path, g["token"], g["lease"], utcnow(), expires)
            self.assert_error(fetch(url, "PUT", b"x"), 400, "AuthorizationQueryParametersError", "X-Amz-Expires")
        url = with_query(self.url(g, "put_object", key), lambda q: [(k, v) for k, v in q if k != "X-Amz-Date"])
        self.assert_error(fetch(url, "PUT", b"x"), 400, "AuthorizationQueryParametersError", "X-Amz-Date")
        # A signature in the query and in the Authorization header.
        url = self.url(g, "put_object", key)
        self.assert_error(fetch(url, "PUT", b"x", {
            "Authorization": "AWS4-HMAC-SHA256 Credential=%d/20260101/us-east-1/s3/aws4_request, "
                             "SignedHeaders=host, Signature=%s" % (g["token"], "0" * 64)}),
            400, "InvalidArgument", "Only one auth mechanism")
        # boto3 left to its default presigns a custom endpoint with Signature Version 2.
        import boto3
        v2 = boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                          aws_access_key_id=str(g["token"]), aws_secret_access_key=g["lease"])
        url = v2.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=60)
        self.assertIn("AWSAccessKeyId=", url)
        self.assert_error(fetch(url, "PUT", b"x"), 400, "InvalidRequest", "s3v4")
        self.assertIsNone(self.moto.get("pre/" + key), "nothing was written")

    def test_released_or_read_lease_refused(self):
        key = "released-%s.txt" % uid()
        g = self.acquire(key)
        url = self.url(g, "put_object", key)
        self.srv.release(key, g["lease"])
        e = self.assert_error(fetch(url, "PUT", b"after release"), 409, "StaleFencingToken",
                              "fencing token %d is stale" % g["token"])
        self.assertEqual(e["token"], g["token"])
        self.assertIsNone(self.moto.get("pre/" + key))
        # The next holder writes; the old URL, still within its time, changes nothing.
        b = self.acquire(key, owner="b")
        st, _, body = fetch(self.url(b, "put_object", key), "PUT", b"B's")
        self.assertEqual(st, 200, body)
        self.assert_error(fetch(url, "PUT", b"A's"), 409, "StaleFencingToken")
        self.assertEqual(self.moto.get("pre/" + key), (b"B's", str(b["token"])))
        self.srv.release(key, b["lease"])
        r = self.acquire(key, owner="reader", mode="read")
        self.assert_error(fetch(self.url(r, "put_object", key), "PUT", b"reader's"), 409, "StaleFencingToken",
                          "as a reader")
        self.assertEqual(self.moto.get("pre/" + key), (b"B's", str(b["token"])))

    def test_tampered_refused(self):
        key = "tamper-%s.txt" % uid()
        g = self.acquire(key)
        put = self.url(g, "put_object", key, expires=60)
        bad = "SignatureDoesNotMatch"
        # The query: a longer life, a parameter added, the signature changed.
        self.assert_error(fetch(with_query(put, lambda q: [(k, "3600" if k == "X-Amz-Expires" else v)
                                                           for k, v in q]), "PUT", b"x"), 403, bad)
        self.assert_error(fetch(with_query(put, lambda q: q + [("x-id", "PutObject")]), "PUT", b"x"), 403, bad)
        self.assert_error(fetch(with_query(put, lambda q: [(k, v[:-1] + ("1" if v[-1] == "0" else "0"))
                                                           if k == "X-Amz-Signature" else (k, v) for k, v in q]),
                                "PUT", b"x"), 403, bad)
        # A read whose token holds the lock is checked as well.
        self.assert_error(fetch(with_query(self.url(g, "get_object", key), lambda q: [
            (k, "3600" if k == "X-Amz-Expires" else v) for k, v in q])), 403, bad)
        # The method: a GET URL used to PUT.
        self.assert_error(fetch(self.url(g, "get_object", key), "PUT", b"x"), 403, bad)
        # Another Host than the one signed.
        self.assert_error(fetch(put, "PUT", b"x", {"Host": "localhost:%d" % self.srv.port}), 403, bad)
        # A secret that is not the lease.
        self.assert_error(fetch(self.url(g, "put_object", key, secret="0" * 36), "PUT", b"x"), 403, bad)
        self.assertIsNone(self.moto.get("pre/" + key), "nothing was written")
        # The path: one lease holds the lock of every /shared/ key; a URL of a.txt used for b.txt.
        s = self.acquire("batch")
        a = self.url(s, "put_object", "a.txt", bucket="shared")
        self.assert_error(fetch(a.replace("/shared/a.txt?", "/shared/b.txt?"), "PUT", b"x"), 403, bad)
        self.assertIsNone(self.moto.get("shared/b.txt"))
        st, _, body = fetch(a, "PUT", b"a")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.moto.get("shared/a.txt"), (b"a", str(s["token"])))
        self.srv.release("batch", s["lease"])

    def test_plus_in_query_is_a_space(self):
        """A '+' in the query is a space, as S3 reads it and as the guard itself parses the
        query (what it acts on): a URL whose spaces a client wrote as '+' (JavaScript's
        URLSearchParams does) is the one signed with %20, and a signed %2B (a plus) sent as
        '+' is another query, not the one signed."""
        key = "plus-%s.txt" % uid()
        g = self.acquire(key)
        path = "/%s/%s" % (BUCKET, key)
        st, _, body = fetch(hand_presign(self.srv.url, "PUT", path, g["token"], g["lease"], utcnow(), 60), "PUT",
                            b"plus")
        self.assertEqual(st, 200, body)
        spaced = hand_presign(self.srv.url, "GET", path, g["token"], g["lease"], utcnow(), 60,
                              [("response-content-disposition", 'attachment; filename="a b.txt"')])
        self.assertIn("%20", spaced)
        for url in (spaced, spaced.replace("%20", "+")):
            st, _, body = fetch(url)
            self.assertEqual((st, body), (200, b"plus"), url)
        plus = hand_presign(self.srv.url, "GET", path, g["token"], g["lease"], utcnow(), 60,
                            [("response-content-type", "text/a+b")])
        self.assertEqual(fetch(plus)[0], 200)
        self.assertIn("a%2Bb", plus)
        self.assert_error(fetch(plus.replace("a%2Bb", "a+b")), 403, "SignatureDoesNotMatch")

    @unittest.skipUnless(os.path.exists(AWS), "Debian's awscli (%s) is not installed (scripts/deps.sh --test)" % AWS)
    def test_aws_cli_presign_get(self):
        key = "cli-%s.txt" % uid()
        g = self.acquire(key)
        self.assertEqual(fetch(self.url(g, "put_object", key), "PUT", b"from the CLI's URL")[0], 200)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=str(g["token"]), AWS_SECRET_ACCESS_KEY=g["lease"],
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.path.join(self.dir, "aws-config"),
                   AWS_SHARED_CREDENTIALS_FILE=os.path.join(self.dir, "no-credentials"), HOME=self.dir)
        p = subprocess.run([AWS, "--endpoint-url", self.srv.url, "s3", "presign", "s3://%s/%s" % (BUCKET, key),
                            "--expires-in", "300"], env=env, capture_output=True, text=True, timeout=90,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr)
        url = p.stdout.strip()
        self.assertIn("X-Amz-Signature=", url)
        p = subprocess.run(["curl", "-sS", "--fail-with-body", url], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        self.assertEqual((p.returncode, p.stdout), (0, b"from the CLI's URL"), p.stderr)
        # Its lease released, without --auth-file the read stays open (as an unsigned read), until the
        # URL's time is out.
        self.srv.release(key, g["lease"])
        p = subprocess.run(["curl", "-sS", "--fail-with-body", url], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        self.assertEqual((p.returncode, p.stdout), (0, b"from the CLI's URL"), p.stderr)


if __name__ == "__main__":
    if not s3_fixture.available():
        print("SKIPPED: presigned URL tests: " + s3_fixture.missing_reason())
    harness.run_tests()
