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


def hand_presign(base, method, path, token, secret, when, expires, extra=(), region="us-east-1", service="s3"):
    """A presigned URL of method on path (as sent: already encoded), signed at `when` (a UTC
    datetime) for `expires` seconds, as AWS's "Authenticating Requests: Using Query
    Parameters" builds it (UNSIGNED-PAYLOAD, host signed); extra: more (name, value)
    parameters, signed with the rest."""
    host = urllib.parse.urlsplit(base).netloc
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    scope = "%s/%s/%s/aws4_request" % (amz_date[:8], region, service)
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
    key = h(h(h(h(("AWS4" + secret).encode(), amz_date[:8]), region), service), "aws4_request")
    sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    return "%s%s?%s&X-Amz-Signature=%s" % (base, path, query, sig)


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class PresignTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        # /honours/: a store that honours response-* overrides, as S3 does and moto 5 does not.
        cls.fake = s3_fixture.FakeStore()
        # /shared/: every key of it binds lock "batch", so one lease signs for several paths.
        cls.srv = harness.Server(extra_args=s3_fixture.route(BUCKET, "pre", cls.moto.url)
                                 + s3_fixture.route("shared", "shared", cls.moto.url, ",lock=batch")
                                 + s3_fixture.route("honours", "h", cls.fake.url), extra_env=cls.moto.env())
        cls.dir = tempfile.mkdtemp(prefix="leasegate-presign-")

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.moto.stop()
        cls.fake.close()
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

    def url(self, g, op, key, expires=300, bucket=BUCKET, secret=None, **params):
        return self.presigner(g, secret).generate_presigned_url(op, Params=dict(params, Bucket=bucket, Key=key),
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
        # (Forwarded to moto, which cannot check a signature over ';' or '"' in a value: see
        # test_response_overrides_reach_the_store_and_the_answer.)
        spaced = hand_presign(self.srv.url, "GET", path, g["token"], g["lease"], utcnow(), 60,
                              [("response-content-disposition", "attachment filename=a b.txt")])
        self.assertIn("%20", spaced)
        for url in (spaced, spaced.replace("%20", "+")):
            st, _, body = fetch(url)
            self.assertEqual((st, body), (200, b"plus"), url)
        plus = hand_presign(self.srv.url, "GET", path, g["token"], g["lease"], utcnow(), 60,
                            [("response-content-type", "text/a+b")])
        self.assertEqual(fetch(plus)[0], 200)
        self.assertIn("a%2Bb", plus)
        self.assert_error(fetch(plus.replace("a%2Bb", "a+b")), 403, "SignatureDoesNotMatch")

    def test_response_overrides_reach_the_store_and_the_answer(self):
        """response-* parameters of a GET or HEAD go to the store, signed by the guard with the rest
        of the query; the answer carries the headers they name (S3 sets them; moto 5 sets none, so
        /honours/ is a store that does, and moto checks the guard's signature over them)."""
        overrides = {"ResponseContentDisposition": 'attachment; filename="x.csv"',
                     "ResponseContentType": "text/csv; charset=utf-8", "ResponseContentLanguage": "fr",
                     "ResponseExpires": "Wed, 21 Oct 2015 07:28:00 GMT", "ResponseCacheControl": "no-cache, max-age=0",
                     "ResponseContentEncoding": "identity"}
        header = {"ResponseContentDisposition": "Content-Disposition", "ResponseContentType": "Content-Type",
                  "ResponseContentLanguage": "Content-Language", "ResponseExpires": "Expires",
                  "ResponseCacheControl": "Cache-Control", "ResponseContentEncoding": "Content-Encoding"}
        key = "over-%s.csv" % uid()
        g = self.acquire(key)
        st, _, body = fetch(self.url(g, "put_object", key, bucket="honours"), "PUT", b"a,b\n")
        self.assertEqual(st, 200, body)
        # Presigned, fetched by urllib and by curl.
        st, headers, body = fetch(self.url(g, "get_object", key, bucket="honours", **overrides))
        self.assertEqual((st, body), (200, b"a,b\n"))
        for param, name in header.items():
            self.assertEqual(headers[name], overrides[param], name)
        p = subprocess.run(["curl", "-sS", "--fail-with-body", "-D", "-", "-o", "/dev/null",
                            self.url(g, "get_object", key, bucket="honours",
                                     ResponseContentDisposition='attachment; filename="y.csv"')],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('content-disposition: attachment; filename="y.csv"', p.stdout.lower())
        # Header-signed, by boto3: GetObject and HeadObject.
        s3 = self.presigner(g)
        o = s3.get_object(Bucket="honours", Key=key, **overrides)
        self.assertEqual(o["Body"].read(), b"a,b\n")
        self.assertEqual((o["ContentDisposition"], o["ContentType"], o["ContentLanguage"], o["CacheControl"]),
                         ('attachment; filename="x.csv"', "text/csv; charset=utf-8", "fr", "no-cache, max-age=0"))
        o = s3.head_object(Bucket="honours", Key=key, ResponseContentType="text/plain")
        self.assertEqual(o["ContentType"], "text/plain")
        # Through moto, which checks the guard's signature over the forwarded query as S3 does: each
        # value with every byte but A-Za-z0-9-_.~ as %XX ('/', ':', ';', ',', '"' too), as the guard
        # writes it (libcurl 7.88 signs the query as written).
        sent = dict(overrides, ResponseContentDisposition='attachment; filename="x:y.csv"')
        key = "over-%s.csv" % uid()
        m = self.acquire(key)
        self.assertEqual(fetch(self.url(m, "put_object", key), "PUT", b"m")[0], 200)
        self.assertEqual(fetch(self.url(m, "get_object", key, **sent))[::2], (200, b"m"))
        self.assertEqual(self.presigner(m).get_object(Bucket=BUCKET, Key=key, **sent)["Body"].read(), b"m")
        forwarded = self.moto.requests("/pre/%s?" % key)
        self.assertEqual(len(forwarded), 2, forwarded)
        for line in forwarded:
            self.assertIn("&response-expires=", line)
            self.assertIn(" 200 ", line)
        self.srv.release(key, m["lease"])

    def test_response_overrides_refused_as_s3_refuses_them(self):
        key = "anon-%s.txt" % uid()
        g = self.acquire(key)
        self.assertEqual(fetch(self.url(g, "put_object", key, bucket="honours"), "PUT", b"<b>hi</b>")[0], 200)
        base = "%s/honours/%s" % (self.srv.url, key)
        self.assertEqual(fetch(base)[::2], (200, b"<b>hi</b>"), "an unsigned read is open (no --auth-file)")
        # Anonymous: unsigned, or signed with a token that holds no lease of the lock (not checked).
        self.assert_error(fetch(base + "?response-content-type=text/html"), 400, "InvalidRequest",
                          "Request specific response headers cannot be used for anonymous GET requests")
        url = self.url(g, "get_object", key, bucket="honours", ResponseContentType="text/html")
        self.assertEqual(fetch(url)[0], 200)
        self.srv.release(key, g["lease"])
        self.assert_error(fetch(url), 400, "InvalidRequest", "anonymous")
        self.assertEqual(fetch(url, "HEAD")[0], 400, "a HEAD's answer has no body: its status says it")
        # A response-* S3 does not have, on a GET or HEAD.
        e = self.assert_error(fetch(base + "?response-x-frame=deny"), 400, "InvalidArgument",
                              "response-x-frame is not in the set of overridable response headers")
        self.assertEqual(e["argument"], "response-x-frame")
        self.assertEqual(fetch(base, "HEAD")[0], 200)

    def test_credential_scope_names_the_route_region_and_s3(self):
        """The signing key is derived from the scope's region and service, so the guard once took
        a request signed for any of them. S3 answers 400 with the region it expects; boto3 and
        the CLI configured for another region follow that answer and sign again with it."""
        import boto3
        from botocore.config import Config
        key = "scope-%s.txt" % uid()
        g = self.acquire(key)
        path = "/%s/%s" % (BUCKET, key)
        # Presigned by hand for another region, or another service: refused, nothing written.
        for region, service, message in (("eu-west-1", "s3", "the region \"eu-west-1\" is wrong; expecting "
                                                              "\"us-east-1\""),
                                         ("us-east-1", "ec2", "incorrect service \"ec2\". This endpoint belongs to "
                                                              "\"s3\"")):
            url = hand_presign(self.srv.url, "PUT", path, g["token"], g["lease"], utcnow(), 60,
                               region=region, service=service)
            e = self.assert_error(fetch(url, "PUT", b"x"), 400, "AuthorizationQueryParametersError", message)
            self.assertEqual(e.get("Region"), "us-east-1" if service == "s3" else None)
            self.assertEqual(fetch(url)[0], 400, "a GET as well")
        self.assertIsNone(self.moto.get("pre/" + key), "nothing was written")
        # A read of another region's signature is refused too when its token holds no lease of the
        # lock (then the signature itself is not checked).
        other = hand_presign(self.srv.url, "GET", path, 999999, g["lease"], utcnow(), 60, region="eu-west-1")
        self.assert_error(fetch(other), 400, "AuthorizationQueryParametersError", "eu-west-1")
        # boto3 configured for another region: the guard's 400 AuthorizationHeaderMalformed names
        # us-east-1 in <Region>, and botocore signs the request again for it.
        seen = []

        def record(request, **kwargs):
            seen.append(request.headers["Authorization"].decode().split("/")[2])
        s3 = boto3.client("s3", endpoint_url=self.srv.url, region_name="eu-west-1",
                          aws_access_key_id=str(g["token"]), aws_secret_access_key=g["lease"],
                          config=Config(s3={"addressing_style": "path"}))
        s3.meta.events.register("before-send.s3.PutObject", record)
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"redirected")
        self.assertEqual(seen, ["eu-west-1", "us-east-1"], "signed again for the region the guard named")
        self.assertEqual(self.moto.get("pre/" + key), (b"redirected", str(g["token"])))
        # Signed for another service, an SDK gets the error (no region helps).
        same = boto3.client("s3", endpoint_url=self.srv.url, region_name="us-east-1",
                            aws_access_key_id=str(g["token"]), aws_secret_access_key=g["lease"],
                            config=Config(s3={"addressing_style": "path"}))
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        req = AWSRequest(method="GET", url=self.srv.url + path, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        S3SigV4Auth(Credentials(str(g["token"]), g["lease"]), "sqs", "us-east-1").add_auth(req)
        e = self.assert_error(fetch(self.srv.url + path, headers=dict(req.headers.items())), 400,
                              "AuthorizationHeaderMalformed", "incorrect service 'sqs'. This endpoint belongs to 's3'.")
        self.assertNotIn("Region", e)
        # The route's own region goes, header-signed and presigned (the rest of this file, too).
        self.assertEqual(same.get_object(Bucket=BUCKET, Key=key)["Body"].read(), b"redirected")
        self.srv.release(key, g["lease"])

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
