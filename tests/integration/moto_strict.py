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
"""

import sys
import urllib.parse

import moto.core.authorization as authorization
import moto.core.responses as responses
import moto.server


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


responses.BaseResponse.setup_class = setup_class
authorization.ActionAuthenticatorMixin._authenticate_and_authorize_action = check

if __name__ == "__main__":
    moto.server.main(sys.argv[1:])
