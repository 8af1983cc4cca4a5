"""A hostile review of CopyObject / UploadPartCopy through an s3:// route (branch s3copy):
each test here failed on s3copy when written (and on main e053e61, which merged it), and
names the defect it shows.

* a copy on a route that does not forward GET (methods=PUT) reads what no GET may: the
  source's ETag, and its bytes wherever the client can read them;
* the guard's own metadata (x-amz-meta-leasegate-deleted, the tombstone's marker) is
  forwarded from a client's REPLACE copy: the destination reads as deleted (404) while
  its bytes are the source's;
* GetObjectTagging of a tombstone answers 200 (an empty TagSet), where GET and HEAD
  answer 404 NoSuchKey;
* a COPY carries the source's metadata, but one with an empty value is lost (libcurl
  drops a "Name:" line);
* the guard's own signature of a copy (s3sign.c) leaves an x-amz-* header it sends out
  of SignedHeaders (an empty one, which libcurl sends as "Name:"): S3 refuses "headers
  present in the request which were not signed";
* UploadPartCopy goes to a store whose probe found it ignores copy preconditions (the
  docs: "never an unconditional copy", 501), and the probe never checks the pin
  (x-amz-copy-source-if-match), so a store that ignores it gets unpinned copies (a
  source deleted meanwhile lands its tombstone's body on the destination).

Noticed in the review and tested here too: a PUT with an empty metadata value
(SignatureDoesNotMatch: libcurl 7.88 signs a "Name;" line wrong), a copy onto itself changing
nothing (S3's 400 InvalidRequest), and a copy's 200 holding an <Error> (that error).

Only 127.0.0.1; every wait is bounded; no timing assertions.
"""

import threading
import unittest
import uuid

import harness
import s3_fixture

BUCKET = "reports"


def uid():
    return uuid.uuid4().hex[:10]


def is_copy(head):
    """Whether a request head is a CopyObject or an UploadPartCopy."""
    return head.startswith("PUT ") and "\nx-amz-copy-source:" in head.lower()


def copies(relay, key):
    """The heads of the CopyObjects of `key` (the store's path) that went by `relay`."""
    return [h for h in relay.seen("PUT %s " % key) if is_copy(h)]


def behind_relay(test, moto, hook):
    """A gateway whose route reaches `moto` through a Relay that shows each request to `hook`."""
    relay = s3_fixture.Relay(moto.port, hook)
    test.addCleanup(relay.close)
    srv = harness.Server(extra_args=s3_fixture.route(BUCKET, "pfx", relay.url), extra_env=moto.env())
    test.addCleanup(srv.cleanup)
    return srv


def copy_src(test, srv, dest):
    """A copy of BUCKET/src onto BUCKET/`dest` through `srv`, under a lease of lock `dest`:
    (status, body, the lease's grant)."""
    st, _, g = srv.acquire(dest, "o", ttl_ms=60000)
    test.assertEqual(st, 200, g)
    st, _, body = srv.request("PUT", "/%s/%s" % (BUCKET, dest), raw=b"", headers={
        "Fencing-Lease": g["lease"], "x-amz-copy-source": BUCKET + "/src"})
    return st, body, g


# What S3 may answer a copy that fails once begun: 200 with an <Error> in its body.
ERROR_IN_200 = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
                b'<Message>We encountered an internal error. Please try again.</Message></Error>')


def unsigned_amz(head):
    """The x-amz-* headers of a request head that its Authorization does not sign."""
    lines = head.split("\r\n")[1:]
    auth = [v for n, _, v in (l.partition(":") for l in lines) if n.strip().lower() == "authorization"]
    signed = set()
    if auth:
        part = auth[0].split("SignedHeaders=", 1)[1].split(",", 1)[0]
        signed = set(part.strip().split(";"))
    sent = {l.partition(":")[0].strip().lower() for l in lines if ":" in l}
    return sorted(n for n in sent if n.startswith("x-amz-") and n not in signed)


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class CopyReviewTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = s3_fixture.Moto()
        cls.rec = s3_fixture.Relay(cls.moto.port)
        cls.srv = harness.Server(extra_args=s3_fixture.route(BUCKET, "pfx", cls.rec.url), extra_env=cls.moto.env())

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        cls.rec.close()
        cls.moto.stop()

    def acquire(self, lock):
        st, _, g = self.srv.acquire(lock, "o", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        return g

    def copy(self, g, dest, source, **headers):
        h = {"Fencing-Lease": g["lease"], "x-amz-copy-source": source}
        h.update(headers)
        return self.srv.request("PUT", "/%s/%s" % (BUCKET, dest), raw=b"", headers=h)

    def head(self, key):
        return self.moto.s3.head_object(Bucket=s3_fixture.BUCKET, Key=key)

    def test_replace_copy_does_not_write_the_guards_own_metadata(self):
        """Defect: with REPLACE the client's x-amz-meta-leasegate-deleted reaches the store,
        and the destination, holding the source's bytes, reads as a tombstone through the
        guard (404) and as a copy source (404). The guard's own metadata must never be the
        client's to set (the COPY path already drops it from the source)."""
        d = "smuggle-%s" % uid()
        self.moto.put_direct("pfx/%s/src" % d, b"real data")
        g = self.acquire(d + "/dst")
        st, _, body = self.copy(g, d + "/dst", "%s/%s/src" % (BUCKET, d), **{
            "x-amz-metadata-directive": "REPLACE", "x-amz-meta-leasegate-deleted": "1"})
        if st == 200:
            self.assertNotIn("leasegate-deleted", self.head("pfx/%s/dst" % d)["Metadata"])
            st, _, body = self.srv.request("GET", "/%s/%s/dst" % (BUCKET, d))
            self.assertEqual((st, body), (200, "real data"))
        else:
            self.assertEqual(st, 400, body)
            self.assertIn("InvalidArgument", body)

    def test_put_does_not_write_the_guards_own_metadata(self):
        """The same defect on a plain PUT and a CreateMultipartUpload: a client's
        x-amz-meta-leasegate-deleted made a live object read as a tombstone. Refused (400
        InvalidArgument naming the header), nothing written."""
        d = "smuggleput-%s" % uid()
        g = self.acquire(d + "/o")
        for query, name in (("", "x-amz-meta-leasegate-deleted"), ("?uploads", "X-Amz-Meta-Leasegate-Anything")):
            st, _, body = self.srv.request("POST" if query else "PUT", "/%s/%s/o%s" % (BUCKET, d, query), raw=b"x",
                                           headers={"Fencing-Lease": g["lease"], name: "1"})
            self.assertEqual(st, 400, body)
            self.assertIn("InvalidArgument", body)
            self.assertIn(name.lower(), body.lower())
        self.assertIsNone(self.moto.get("pfx/%s/o" % d))

    def test_put_with_an_empty_metadata_value(self):
        """Defect (noticed in the review): boto3's put_object(Metadata={'a': ''}) got 403
        SignatureDoesNotMatch from the store: the guard forwards the empty header as
        "x-amz-meta-a;" (libcurl's form of an empty header), and libcurl 7.88's SigV4 signs
        that line as the name "x-amz-meta-a;" (SignedHeaders=...;x-amz-meta-a;;...). Such a
        call is signed by the guard (s3sign.c) now, with its last header in: a PUT and a
        CreateMultipartUpload store the empty value, as S3 does."""
        import boto3
        from botocore.config import Config
        d = "emptyput-%s" % uid()
        g = self.acquire(d + "/o")
        s3 = boto3.client("s3", endpoint_url=self.srv.url, region_name=s3_fixture.REGION,
                          aws_access_key_id=str(g["token"]), aws_secret_access_key=g["lease"],
                          config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        s3.put_object(Bucket=BUCKET, Key=d + "/o", Body=b"x", Metadata={"a": "", "b": "v"})
        self.assertEqual(self.head("pfx/%s/o" % d)["Metadata"], {"a": "", "b": "v", "fencing-token": str(g["token"])})
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=d + "/o", Metadata={"e": ""})["UploadId"]
        s3.abort_multipart_upload(Bucket=BUCKET, Key=d + "/o", UploadId=up)

    def test_copy_onto_itself_changing_nothing_is_invalid_request(self):
        """Defect (noticed in the review): S3 refuses a copy of an object onto itself with
        metadata directive COPY and nothing else changed (400 InvalidRequest); the guard,
        which always sends REPLACE to set the fence, turned it into a REPLACE that silently
        succeeded (and dropped the object's metadata). Refused now, the store not asked;
        with REPLACE, or a storage class, it is a copy as S3 takes it."""
        d = "self-%s" % uid()
        self.moto.s3.put_object(Bucket=s3_fixture.BUCKET, Key="pfx/%s/o" % d, Body=b"s", Metadata={"x": "y"})
        g = self.acquire(d + "/o")
        for directive in ({}, {"x-amz-metadata-directive": "COPY"}):
            st, _, body = self.copy(g, d + "/o", "%s/%s/o" % (BUCKET, d), **directive)
            self.assertEqual(st, 400, body)
            self.assertIn("<Code>InvalidRequest</Code>", body)
            self.assertIn("copy an object to itself", body)
        self.assertEqual(copies(self.rec, "/%s/pfx/%s/o" % (s3_fixture.BUCKET, d)), [])
        self.assertEqual(self.head("pfx/%s/o" % d)["Metadata"], {"x": "y"})
        st, _, body = self.copy(g, d + "/o", "%s/%s/o" % (BUCKET, d), **{"x-amz-metadata-directive": "REPLACE",
                                                                           "x-amz-meta-z": "w"})
        self.assertEqual(st, 200, body)
        self.assertEqual(self.head("pfx/%s/o" % d)["Metadata"], {"z": "w", "fencing-token": str(g["token"])})

    def test_get_object_tagging_of_a_tombstone_is_no_such_key(self):
        """Defect: GET ?tagging is forwarded as a read whose answer holds no object metadata,
        so the tombstone check (s3req_read_head: x-amz-meta-leasegate-deleted) never sees one:
        a deleted object answers 200 with its (empty) tags, where GET and HEAD answer 404."""
        d = "tags-%s" % uid()
        g = self.acquire(d + "/t")
        st, _, body = self.srv.request("PUT", "/%s/%s/t" % (BUCKET, d), raw=b"x", headers={
            "Fencing-Lease": g["lease"], "x-amz-tagging": "k=v"})
        self.assertEqual(st, 200, body)
        st, _, body = self.srv.request("GET", "/%s/%s/t?tagging" % (BUCKET, d))
        self.assertEqual(st, 200, body)
        st, _, body = self.srv.request("DELETE", "/%s/%s/t" % (BUCKET, d), headers={"Fencing-Lease": g["lease"]})
        self.assertEqual(st, 204, body)
        self.assertEqual(self.srv.request("GET", "/%s/%s/t" % (BUCKET, d))[0], 404)
        st, _, body = self.srv.request("GET", "/%s/%s/t?tagging" % (BUCKET, d))
        self.assertEqual(st, 404, body)
        self.assertIn("<Code>NoSuchKey</Code>", body)

    def test_copy_carries_metadata_with_an_empty_value(self):
        """Defect: with COPY the guard carries the source's metadata as header lines from its
        HEAD; one with an empty value ("x-amz-meta-empty:") is a line libcurl reads as "do not
        send", so the copy loses it (S3's COPY keeps it)."""
        d = "empty-%s" % uid()
        self.moto.s3.put_object(Bucket=s3_fixture.BUCKET, Key="pfx/%s/src" % d, Body=b"s",
                                Metadata={"empty": "", "x": "y"})
        g = self.acquire(d + "/dst")
        st, _, body = self.copy(g, d + "/dst", "%s/%s/src" % (BUCKET, d))
        self.assertEqual(st, 200, body)
        self.assertEqual(self.head("pfx/%s/dst" % d)["Metadata"], {"empty": "", "x": "y", "fencing-token": str(g["token"])})

    def test_every_amz_header_of_a_copy_is_signed(self):
        """Defect: s3sign_lines signs only "Name: value" lines with a value; a client's empty
        header that the proxy forwards as "Name;" (libcurl then sends "Name:") goes out of
        SignedHeaders, and S3 refuses a request with an unsigned x-amz-* header (AccessDenied,
        "There were headers present in the request which were not signed"). moto does not
        check that, so the test reads what went to the store."""
        d = "signed-%s" % uid()
        self.moto.put_direct("pfx/%s/src" % d, b"s")
        g = self.acquire(d + "/dst")
        st, _, body = self.copy(g, d + "/dst", "%s/%s/src" % (BUCKET, d), **{
            "x-amz-metadata-directive": "REPLACE", "x-amz-meta-e": ""})
        self.assertEqual(st, 200, body)
        heads = copies(self.rec, "/%s/pfx/%s/dst" % (s3_fixture.BUCKET, d))
        self.assertEqual(len(heads), 1, heads)
        self.assertEqual(unsigned_amz(heads[0]), [], heads[0])


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class CopyErrorIn200Tests(unittest.TestCase):
    def test_copy_whose_200_holds_an_error_is_that_error(self):
        """Defect (noticed in the review): S3 may answer a CopyObject that fails once begun
        with 200 and an <Error> in the body; the guard passed that 200 on as it came (boto3
        reads it as a failure, other clients as success). Answered now as the error it names
        (InternalError: 500), and a copy that succeeds still answers its CopyObjectResult."""
        moto = s3_fixture.Moto()
        self.addCleanup(moto.stop)
        failed = threading.Event()

        def fail_the_copy(head):
            # The copy of a key holding /fail200 gets the 200 with an <Error>; moto is not asked.
            if is_copy(head) and "/fail200" in head.split("\r\n", 1)[0]:
                failed.set()
                return (b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(ERROR_IN_200), ERROR_IN_200))
            return None

        srv = behind_relay(self, moto, fail_the_copy)
        moto.put_direct("pfx/src", b"the source")
        st, body, g = copy_src(self, srv, "fail200")
        self.assertTrue(failed.is_set())
        self.assertEqual(st, 500, body)
        self.assertIn("<Code>InternalError</Code>", body)
        st, body, g = copy_src(self, srv, "ok")
        self.assertEqual(st, 200, body)
        self.assertIn("<CopyObjectResult", body)
        self.assertEqual(moto.get("pfx/ok"), (b"the source", str(g["token"])))


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class WriteOnlyRouteTests(unittest.TestCase):
    def test_copy_on_a_route_without_get_reads_nothing(self):
        """Defect (a read of what no GET may read): copy_source_readable (guard.c) never asks
        whether the route forwards GET. On a drop box route (methods=PUT) a GET of another's
        object is 405, but a copy of it answers 200 (its ETag, the MD5 of its bytes) and
        writes it where the client can read it: here through a second route of the same lock
        over the drop box's public/ part."""
        moto = s3_fixture.Moto()
        self.addCleanup(moto.stop)
        srv = harness.Server(extra_args=s3_fixture.route("drop", "pfx", moto.url, ",methods=PUT,lock=box")
                             + s3_fixture.route("pub", "pfx/public", moto.url, ",lock=box"), extra_env=moto.env())
        self.addCleanup(srv.cleanup)
        moto.put_direct("pfx/alice/report", b"alice's secret")
        st, _, g = srv.acquire("box", "mallory", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        self.assertEqual(srv.request("GET", "/drop/alice/report")[0], 405)
        st, _, body = srv.request("PUT", "/drop/public/x", raw=b"", headers={
            "Fencing-Lease": g["lease"], "x-amz-copy-source": "drop/alice/report"})
        self.assertIn(st, (403, 405), body)
        self.assertFalse(moto.requests("HEAD /%s/pfx/alice/report" % s3_fixture.BUCKET), "the store was asked")
        self.assertEqual(srv.request("GET", "/pub/x")[0], 404)


@unittest.skipUnless(s3_fixture.available(), s3_fixture.missing_reason())
class CopyPinReviewTests(unittest.TestCase):
    def start(self, **moto_args):
        moto = s3_fixture.Moto(**moto_args)
        srv = harness.Server(extra_args=s3_fixture.route(BUCKET, "pfx", moto.url), extra_env=moto.env())
        self.addCleanup(moto.stop)
        self.addCleanup(srv.cleanup)
        return moto, srv

    def test_upload_part_copy_on_a_store_that_ignores_copy_preconditions_is_501(self):
        """Defect: copy_conditional (guard.c begin_s3_write) gates S3_OP_COPY only; an
        UploadPartCopy goes to a store whose probe found copy preconditions ignored (plain
        moto: x-amz-copy-source-if-match too), so its source is not pinned to what the
        guard's HEAD checked (not a tombstone): docs/fencing.md promises 501 there."""
        moto, srv = self.start(copy_preconditions=False)
        moto.put_direct("pfx/src", b"0123456789")
        st, _, g = srv.acquire("dst", "o", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        import boto3
        from botocore.config import Config
        from botocore.exceptions import ClientError
        s3 = boto3.client("s3", endpoint_url=srv.url, region_name="us-east-1", aws_access_key_id=str(g["token"]),
                          aws_secret_access_key=g["lease"],
                          config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        up = s3.create_multipart_upload(Bucket=BUCKET, Key="dst")["UploadId"]
        with self.assertRaises(ClientError) as cm:
            s3.upload_part_copy(Bucket=BUCKET, Key="dst", UploadId=up, PartNumber=1, CopySource=BUCKET + "/src")
        self.assertEqual(cm.exception.response["Error"]["Code"], "NotImplemented")
        self.assertFalse(moto.requests("PUT /%s/pfx/dst?partNumber" % s3_fixture.BUCKET), "the store was asked")

    def test_probe_checks_the_source_pin(self):
        """Defect: the probe (s3.c probe_copy) checks If-Match and If-None-Match on the copy's
        destination only; a store that ignores x-amz-copy-source-if-match passes it, and every
        copy then goes unpinned: what the store copies may be a version (or a tombstone) the
        guard never read. Expected: the probe also copies with a wrong
        x-amz-copy-source-if-match, and copies get 501 when that is not 412."""
        moto, srv = self.start(copy_source_preconditions=False)
        moto.put_direct("pfx/src", b"s")
        st, body, g = copy_src(self, srv, "dst")
        self.assertEqual(st, 501, body)

    def test_unpinned_copy_lands_a_tombstone(self):
        """The consequence of the unprobed pin: the source deleted (its tombstone written)
        between the guard's HEAD of it and the copy, on a store that ignores
        x-amz-copy-source-if-match: the tombstone's body lands on the destination as an
        object (a GET through the guard reads it, 200), which no GET could ever read. With
        the pin honoured (moto_strict) the same race is 412, nothing copied; with the pin
        probed (s3.c probe_copy) this store gets no copy at all (501)."""
        moto = s3_fixture.Moto(copy_source_preconditions=False)
        self.addCleanup(moto.stop)
        tombstone = b"leasegate tombstone: deleted through the guard; its fencing-token stays\n"
        raced = threading.Event()

        def delete_the_source(head):
            # When the copy goes by, the source is deleted first: its tombstone written.
            if head.startswith("PUT /%s/pfx/dst " % s3_fixture.BUCKET) and not raced.is_set():
                moto.s3.put_object(Bucket=s3_fixture.BUCKET, Key="pfx/src", Body=tombstone, ContentType="text/plain",
                                   Metadata={"fencing-token": "99", "leasegate-deleted": "1"})
                raced.set()
            return None

        srv = behind_relay(self, moto, delete_the_source)
        moto.put_direct("pfx/src", b"the source")
        st, body, g = copy_src(self, srv, "dst")
        if st == 501:
            # Refused up front: the probe found the pin ignored, so no copy goes to this store.
            self.assertIn("NotImplemented", body)
            self.assertFalse(raced.is_set(), "the store was asked to copy")
            self.assertIsNone(moto.get("pfx/dst"))
            return
        self.assertTrue(raced.is_set())
        self.assertNotEqual(moto.get("pfx/dst"), (tombstone, str(g["token"])), "a tombstone's body was copied")


if __name__ == "__main__":
    unittest.main()
