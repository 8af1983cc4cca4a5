"""The tests' S3 store checks signatures as S3 does (s3_fixture.Moto, moto_strict.py).

moto 5.2's own check signs the query (and path) of werkzeug's decoded URL as written: it
rejects boto3's correct ListObjectsV2 with Prefix='dir/', and would accept a signer that
leaves '/' unencoded, which S3 refuses. The guard's tests are only worth their store's
check, so this one proves it with boto3, the reference signer, both ways: what boto3 signs
(every byte but A-Za-z0-9-_.~ as %XX, sorted) passes; the same request signed over its
query as written with '/' and ':' bare gets 403 SignatureDoesNotMatch, while that query
encoded per spec, signed the same way by hand, passes. No leasegate is started. Only
127.0.0.1; every wait is bounded.
"""

import http.client
import unittest
import urllib.parse

import harness
import s3_fixture

KEY = "dir/sub/a b:c.csv"


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class StrictOracleTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        cls.moto.put_direct(KEY, b"a,b\n")

    @classmethod
    def tearDownClass(cls):
        cls.moto.stop()

    def test_boto3_listing_with_slashes_passes(self):
        r = self.moto.s3.list_objects_v2(Bucket=s3_fixture.BUCKET, Prefix="dir/", Delimiter="/")
        self.assertEqual([p["Prefix"] for p in r.get("CommonPrefixes", [])], ["dir/sub/"])
        r = self.moto.s3.list_objects_v2(Bucket=s3_fixture.BUCKET, Prefix="dir/sub/", Delimiter="/")
        self.assertEqual([o["Key"] for o in r.get("Contents", [])], [KEY])

    def test_boto3_get_with_overrides_passes(self):
        o = self.moto.s3.get_object(Bucket=s3_fixture.BUCKET, Key=KEY, ResponseContentType="text/csv",
                                    ResponseContentDisposition='attachment; filename="a:b.csv"')
        self.assertEqual(o["Body"].read(), b"a,b\n")

    def signed_get(self, path, query):
        """(status, body) of a GET of path?query signed by botocore over the query as written
        (its url form: split at '&', sorted, not encoded again), sent exactly as written."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        url = "%s%s?%s" % (self.moto.url, path, query)
        req = AWSRequest(method="GET", url=url)
        req.headers["X-Amz-Content-SHA256"] = "UNSIGNED-PAYLOAD"
        S3SigV4Auth(Credentials(self.moto.key_id, self.moto.secret), "s3", s3_fixture.REGION).add_auth(req)
        conn = http.client.HTTPConnection("127.0.0.1", self.moto.port, timeout=30)
        try:
            conn.putrequest("GET", "%s?%s" % (path, query), skip_accept_encoding=True)
            for k, v in req.headers.items():
                conn.putheader(k, v)
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def test_query_signed_as_written_fails(self):
        path = "/" + s3_fixture.BUCKET
        bare = "delimiter=/&list-type=2&prefix=dir/"
        status, body = self.signed_get(path, bare)
        self.assertEqual(status, 403, body)
        self.assertIn(b"SignatureDoesNotMatch", body)
        status, body = self.signed_get(path, urllib.parse.quote(bare, safe="=&"))
        self.assertEqual(status, 200, body)
        self.assertIn(b"<Prefix>dir/sub/</Prefix>", body)

    def test_override_signed_as_written_fails(self):
        path = "/%s/%s" % (s3_fixture.BUCKET, urllib.parse.quote(KEY, safe="/"))
        bare = "response-content-type=text/csv"
        status, body = self.signed_get(path, bare)
        self.assertEqual(status, 403, body)
        self.assertIn(b"SignatureDoesNotMatch", body)
        status, body = self.signed_get(path, "response-content-type=text%2Fcsv")
        self.assertEqual(status, 200, body)
        self.assertEqual(body, b"a,b\n")


if __name__ == "__main__":
    harness.run_tests()
