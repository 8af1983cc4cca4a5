"""The S3 route's story against a real S3 or another S3-compatible store, by hand.

Skipped unless these are set (nothing here runs in CI, which has no such store):
  LEASEGATE_S3_ENDPOINT   e.g. https://s3.eu-west-1.amazonaws.com or a MinIO URL
  LEASEGATE_S3_BUCKET     a bucket the credentials may write; the test writes only under
                          leasegate-live-test/ and removes nothing
  AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN if any)

The gateway must start (the store honours If-Match and If-None-Match), a write through
it lands with its token as the fence, and a stale lease is refused.
"""

import os
import unittest
import uuid

import harness

ENDPOINT = os.environ.get("LEASEGATE_S3_ENDPOINT")
BUCKET = os.environ.get("LEASEGATE_S3_BUCKET")


@unittest.skipUnless(ENDPOINT and BUCKET and os.environ.get("AWS_REGION"),
                     "set LEASEGATE_S3_ENDPOINT, LEASEGATE_S3_BUCKET and AWS_* to run against a real store")
class LiveS3Tests(unittest.TestCase):
    def test_story(self):
        srv = harness.Server(extra_args=["--guard", "/s3/=s3://%s/leasegate-live-test,endpoint=%s" % (BUCKET, ENDPOINT)])
        try:
            name = "story-%s.txt" % uuid.uuid4().hex[:10]
            st, _, a = srv.acquire(name, "a", ttl_ms=60000)
            self.assertEqual(st, 200, a)
            h = {"Fencing-Lease": a["lease"], "Content-Type": "text/plain"}
            st, _, body = srv.request("PUT", "/s3/" + name, raw=b"from a", headers=h)
            self.assertEqual(st, 200, body)
            st, hdrs, body = srv.request("GET", "/s3/" + name)
            self.assertEqual((st, body, hdrs.get("x-amz-meta-fencing-token")), (200, "from a", str(a["token"])))
            self.assertEqual(srv.request("DELETE", "/v1/locks/" + name)[0], 200)
            st, _, b = srv.acquire(name, "b", ttl_ms=60000)
            st, _, body = srv.request("PUT", "/s3/" + name, raw=b"from b",
                                      headers={"Fencing-Lease": b["lease"], "Content-Type": "text/plain"})
            self.assertEqual(st, 200, body)
            st, _, body = srv.request("PUT", "/s3/" + name, raw=b"stale a", headers=h)
            self.assertEqual((st, body["error"]), (409, "stale_token"), body)
        finally:
            srv.cleanup()


if __name__ == "__main__":
    harness.run_tests()
