"""moto's server, checking a SigV4 signature's query as S3 does.

Run as `python3 moto_strict.py -H 127.0.0.1 -p PORT` (moto.server's arguments).

S3 (and Garage, rustfs/s3s) canonicalize a request's query per the SigV4 spec: each
name and value decoded, then encoded again (every byte but A-Za-z0-9-_.~ as %XX,
upper-case hex), sorted by name, then value. moto 5.2 does not: its server-mode check
signs the query of werkzeug's rebuilt URL as written, where '/' and ':' come back
decoded. So it rejects boto3's own correct `list_objects_v2(Prefix='dir/',
Delimiter='/')` and accepts a request that signed `prefix=dir/` as written, which real
S3 refuses with SignatureDoesNotMatch. Against plain moto a signer that is wrong as S3
sees it passes the tests; against this one it fails them (test_s3_oracle.py proves both
ways with boto3).

The patch: every request remembers its target as it arrived (werkzeug's RAW_URI, still
encoded as sent), and the signature check is handed a URL whose path and query are
that target's, canonicalized as S3 does (the path likewise: moto signs werkzeug's
decoded one, so a key with a space fails there however it is sent). botocore then
takes them as written (it sorts the query's pairs, already sorted).

CopyObject's preconditions, as S3 documents them: moto 5.2 ignores If-Match and
If-None-Match on a copy's destination and x-amz-copy-source-if-match,
-if-unmodified-since and -if-modified-since on its source (it checks only
x-amz-copy-source-if-none-match), and UploadPartCopy the source's likewise. Here each gets 412 PreconditionFailed when it does not
hold (S3's rule: a source's if-match that holds overrides its if-unmodified-since). With
LEASEGATE_MOTO_PLAIN_COPY=1 in the environment they stay ignored, as plain moto ignores
them (the guard's probe must then find that and refuse copies).
"""

import calendar
import email.utils
import os
import sys
import urllib.parse

import moto.core.authorization as authorization
import moto.core.responses as responses
import moto.s3.responses as s3responses
import moto.server
from moto.s3.exceptions import MissingKey, PreconditionFailed


def canonical_path(raw):
    """S3's canonical URI of a path as received: decoded, each byte but '/' and the unreserved
    ones encoded again, once (S3 neither double-encodes nor normalizes it)."""
    return urllib.parse.quote(urllib.parse.unquote(raw, encoding="latin-1"), safe="/-_.~", encoding="latin-1")


def canonical_query(raw):
    """The SigV4 canonical query of a query string as received."""
    # WSGI's QUERY_STRING holds the bytes sent as latin-1: decoded and encoded as latin-1, each byte stays itself.
    pairs = urllib.parse.parse_qsl(raw, keep_blank_values=True, encoding="latin-1")
    enc = [tuple(urllib.parse.quote(s, safe="-_.~", encoding="latin-1") for s in kv) for kv in pairs]
    return "&".join("%s=%s" % kv for kv in sorted(enc))


_setup_class = responses.BaseResponse.setup_class
_check = authorization.ActionAuthenticatorMixin._authenticate_and_authorize_action


def setup_class(self, request, *args, **kwargs):
    environ = getattr(request, "environ", None)
    self._strict_raw = None
    if environ is not None and "RAW_URI" in environ:
        path, _, query = environ["RAW_URI"].partition("?")
        self._strict_raw = (path, query)
    return _setup_class(self, request, *args, **kwargs)


def check(self, *args, **kwargs):
    raw = getattr(self, "_strict_raw", None)
    if raw is None:
        return _check(self, *args, **kwargs)
    # The check reads the path and query of self.uri; it gets the canonical ones while it runs.
    uri = self.uri
    path, query = raw
    self.uri = urllib.parse.urlunparse(urllib.parse.urlparse(uri)._replace(path=canonical_path(path),
                                                                            query=canonical_query(query)))
    try:
        return _check(self, *args, **kwargs)
    finally:
        self.uri = uri


def _etag_in(value, etag):
    items = [v.strip().strip('"') for v in value.split(",")]
    return "*" in items or etag.strip('"') in items


def _date(value):
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


_copy_object = s3responses.S3Response.copy_object
_upload_part_copy = s3responses.S3Response.upload_part_copy


def _check_source(self):
    """x-amz-copy-source-if-match, -if-unmodified-since, -if-modified-since of a copy's source."""
    source = urllib.parse.urlparse(self.headers.get("x-amz-copy-source", ""))
    src_bucket, _, src_key = urllib.parse.unquote(source.path).lstrip("/").partition("/")
    version = urllib.parse.parse_qs(source.query).get("versionId", [None])[0]
    src = self.backend.get_object(src_bucket, src_key, version_id=version)
    if src is None:
        return
    modified = calendar.timegm(src.last_modified.utctimetuple())
    src_match = self.headers.get("x-amz-copy-source-if-match")
    unmodified = _date(self.headers.get("x-amz-copy-source-if-unmodified-since"))
    since = _date(self.headers.get("x-amz-copy-source-if-modified-since"))
    if src_match is not None and not _etag_in(src_match, src.etag):
        raise PreconditionFailed("x-amz-copy-source-If-Match")
    if src_match is None and unmodified is not None and modified > unmodified:
        raise PreconditionFailed("x-amz-copy-source-If-Unmodified-Since")
    if since is not None and modified <= since and "x-amz-copy-source-if-none-match" not in self.headers:
        raise PreconditionFailed("x-amz-copy-source-If-Modified-Since")


def upload_part_copy(self):
    """UploadPartCopy, its source's preconditions checked first."""
    _check_source(self)
    return _upload_part_copy(self)


def copy_object(self):
    """CopyObject, its destination's and its source's preconditions checked first."""
    key_name = self.parse_key_name()
    dest = self.backend.get_object(self.bucket_name, key_name)
    if_match, if_none_match = self.headers.get("If-Match"), self.headers.get("If-None-Match")
    if if_match:
        if dest is None:
            raise MissingKey(key=key_name)
        if not _etag_in(if_match, dest.etag):
            raise PreconditionFailed("If-Match")
    if if_none_match and dest is not None and _etag_in(if_none_match, dest.etag):
        raise PreconditionFailed("If-None-Match")
    _check_source(self)
    return _copy_object(self)


responses.BaseResponse.setup_class = setup_class
if os.environ.get("LEASEGATE_MOTO_PLAIN_COPY") != "1":
    s3responses.S3Response.copy_object = copy_object
    s3responses.S3Response.upload_part_copy = upload_part_copy
authorization.ActionAuthenticatorMixin._authenticate_and_authorize_action = check

if __name__ == "__main__":
    moto.server.main(sys.argv[1:])
