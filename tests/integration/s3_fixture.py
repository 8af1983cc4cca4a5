"""S3 peers for the guard's s3:// routes, on 127.0.0.1 with free ports:

* Moto       -- moto's S3 server (through moto_strict.py, with boto3), checking SigV4
                signatures as S3 does (path and query canonicalized per spec): the first actions (an IAM user, its policy, its access key)
                run without auth, every later request must be signed with that key.
                Moto implements If-Match and If-None-Match on PutObject (412).
* FakeStore  -- a tiny S3 that stores objects in a dict and either honours
                preconditions or ignores them (a proxy or store that silently drops
                If-Match), switchable while it runs. It checks no signature. A GET's
                response-* query parameters set its answer's headers, as S3's do.
* Relay      -- a TCP relay in front of moto that keeps the head of every request going
                by, and shows each to a hook that may act on it (write to moto directly)
                or answer it itself.
* RacingProxy -- a Relay that, when it sees the PUT of a chosen key go by, first writes
                that object directly (boto3) with a chosen fencing-token: the store
                changes between the guard's HEAD and its PUT.

available() says whether moto and boto3 are importable; tests skip with one line when
they are not (and .ci/run fails if they were skipped). Every process started here is
stopped by PID; every wait is bounded.
"""

import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import harness
from member_proxy import MemberProxy
from upstream import free_port

REGION = "us-east-1"
# moto's server, checking signatures as S3 does (moto_strict.py says why).
MOTO_STRICT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moto_strict.py")
BUCKET = "lgbucket"


def available():
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
        return True
    except ImportError:
        return False


def missing_reason():
    return "moto and boto3 are not importable by %s (pip install 'moto[server]' boto3)" % sys.executable


def route(prefix, keyprefix, endpoint, options=""):
    """The --guard arguments of a route /PREFIX/ to BUCKET/KEYPREFIX at `endpoint` (a URL),
    in REGION; `options` adds to them (",lock=L,methods=PUT")."""
    return ["--guard", "/%s/=s3://%s/%s,region=%s,endpoint=%s%s" % (prefix, BUCKET, keyprefix, REGION, endpoint,
                                                                      options)]


class Moto:
    def __init__(self, copy_preconditions=True, copy_source_preconditions=True):
        """copy_preconditions=False: CopyObject's preconditions ignored, as plain moto 5.2
        ignores them (moto_strict.py); copy_source_preconditions=False: only those on the
        copy's source (x-amz-copy-source-if-*) ignored."""
        import boto3
        self.dir = tempfile.mkdtemp(prefix="leasegate-moto-")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="4")
        if not copy_preconditions:
            env["LEASEGATE_MOTO_PLAIN_COPY"] = "1"
        if not copy_source_preconditions:
            env["LEASEGATE_MOTO_PLAIN_COPY_SOURCE"] = "1"
        self.log = open(os.path.join(self.dir, "moto.log"), "wb")
        self.proc = subprocess.Popen([sys.executable, MOTO_STRICT, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=env, cwd=self.dir)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto did not start")
                time.sleep(0.1)
        anon = dict(endpoint_url=self.url, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
        iam = boto3.client("iam", **anon)
        iam.create_user(UserName="leasegate")
        policy = iam.create_policy(PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        iam.attach_user_policy(UserName="leasegate", PolicyArn=policy["Policy"]["Arn"])
        key = iam.create_access_key(UserName="leasegate")["AccessKey"]
        self.key_id, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        self.s3 = self.client()
        self.s3.create_bucket(Bucket=BUCKET)

    def client(self, endpoint=None):
        import boto3
        return boto3.client("s3", endpoint_url=endpoint or self.url, region_name=REGION,
                            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret)

    def env(self):
        """The gateway's environment: the access key, nothing on its command line."""
        return {"AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret}

    def get(self, key):
        """(body, fencing-token or None) of the object, or None when absent."""
        try:
            o = self.s3.get_object(Bucket=BUCKET, Key=key)
        except self.s3.exceptions.NoSuchKey:
            return None
        return o["Body"].read(), o["Metadata"].get("fencing-token")

    def put_direct(self, key, body, fence=None):
        meta = {"fencing-token": str(fence)} if fence is not None else {}
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=body, Metadata=meta)

    def requests(self, fragment):
        """moto's log lines of the requests whose line holds `fragment` (werkzeug logs a
        request's method and target, the query partly decoded: not the bytes sent)."""
        self.log.flush()
        with open(os.path.join(self.dir, "moto.log"), errors="replace") as f:
            return [line for line in f if fragment in line]

    def stop(self):
        harness.stop_process(self.proc)
        self.log.close()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


class _FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        store = self.server.store
        path, _, query = self.path.partition("?")
        with store.lock:
            store.seen.append((self.command, self.path, dict(self.headers)))
            obj = store.objects.get(path)
        if obj is None:
            return self._send(404)
        body, etag, fence = obj
        h = {"ETag": etag}
        if fence is not None:
            h["x-amz-meta-fencing-token"] = fence
        # As S3 does (moto 5 does not): each response-NAME parameter is the answer's NAME header.
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True):
            if k.startswith("response-"):
                h[k[len("response-"):]] = v
        self._send(200, body, h)

    def do_PUT(self):
        store = self.server.store
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with store.lock:
            store.seen.append((self.command, self.path, dict(self.headers)))
            cur = store.objects.get(self.path)
            if store.honour:
                im, inm = self.headers.get("If-Match"), self.headers.get("If-None-Match")
                if (im is not None and (cur is None or cur[1] != im)) or (inm == "*" and cur is not None):
                    return self._send(412)
            store.version += 1
            etag = '"v%d"' % store.version
            store.objects[self.path] = (body, etag, self.headers.get("x-amz-meta-fencing-token"))
        self._send(200, b"", {"ETag": etag})


class FakeStore:
    """A dict-backed S3 on 127.0.0.1 that honours preconditions only while `honour`."""

    def __init__(self, honour=True, port=0):
        self.honour = honour
        self.objects = {}
        self.seen = []
        self.version = 0
        self.lock = threading.Lock()
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", port), _FakeHandler)
        self.server.daemon_threads = True
        self.server.store = self
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def env(self):
        return {"AWS_ACCESS_KEY_ID": "AKIAFAKE", "AWS_SECRET_ACCESS_KEY": "fake-secret"}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _Requests:
    """Splits the bytes a client sends into its requests' heads and the bytes that follow
    them (a body by its Content-Length). After a head whose body has no length (a
    Transfer-Encoding), or bytes that are no head, the rest of the connection is passed on
    unread."""

    MAX_HEAD = 65536

    def __init__(self):
        self.buf = b""
        self.body = 0  # bytes of the current body not yet passed on
        self.blind = False

    def feed(self, data):
        """Yields (head, its bytes) for each head, (None, bytes) for the rest; holds back
        an incomplete head."""
        self.buf += data
        while self.buf:
            if self.blind or self.body:
                n = len(self.buf) if self.blind else min(self.body, len(self.buf))
                self.body -= 0 if self.blind else n
                out, self.buf = self.buf[:n], self.buf[n:]
                yield None, out
                continue
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                self.blind = len(self.buf) > self.MAX_HEAD
                if not self.blind:
                    return
                continue
            raw, self.buf = self.buf[:end + 4], self.buf[end + 4:]
            head = raw[:end].decode("latin-1")
            lines = (line.partition(":") for line in head.split("\r\n")[1:])
            fields = {n.strip().lower(): v.strip() for n, _, v in lines}
            try:
                self.body = int(fields.get("content-length", "0"))
            except ValueError:
                self.blind = True
            self.blind = self.blind or "transfer-encoding" in fields or self.body < 0
            yield head, raw


class Relay(MemberProxy):
    """A TCP relay on 127.0.0.1 in front of the store on `port` (moto). It keeps the head
    of every request that goes by (`heads`: str, without the blank line that ends it), and
    shows each to `hook(head)` before passing it on: the hook may act (write to the store
    directly, say), and answers None to pass the request on, or the bytes of a whole
    response to answer it itself (the store never sees it; the connection ends after it).
    close() ends every connection."""

    def __init__(self, port, hook=None):
        super().__init__()
        self.hook = hook
        self.heads = []
        self.listen([("127.0.0.1", port)], backlog=64)
        self.url = "http://" + self.endpoint

    def seen(self, start):
        """The heads kept whose request line starts with `start` ("PUT /lgbucket/k ")."""
        with self.mu:
            return [h for h in self.heads if h.startswith(start)]

    def _serve(self, client, target):
        store = self.dial(client, target)
        if store is None:
            return
        threading.Thread(target=self._answers, args=(store, client), daemon=True).start()
        self._requests(client, store)

    def _requests(self, client, store):
        requests = _Requests()
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                for head, raw in requests.feed(data):
                    answer = None
                    if head is not None:
                        with self.mu:
                            self.heads.append(head)
                        answer = self.hook(head) if self.hook else None
                    if answer is not None:
                        client.sendall(answer)
                        return
                    store.sendall(raw)
        except OSError:
            pass
        finally:
            self.hang_up(client, store)

    def _answers(self, store, client):
        try:
            while True:
                data = store.recv(65536)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            self.hang_up(store, client)


class RacingProxy(Relay):
    """A Relay in front of moto. Before it passes on the PUT of `path` (set by race(): a
    path such as /lgbucket/reports/x.csv), it writes that object directly with `fence`,
    once: the store changes between the guard's HEAD and its PUT."""

    def __init__(self, moto):
        self.moto = moto
        self.race_path = None
        self.race_fence = None
        self.raced = threading.Event()
        self.racing = threading.Lock()
        super().__init__(moto.port, self._race)

    def race(self, path, fence):
        with self.racing:
            self.race_path, self.race_fence = path, fence
            self.raced.clear()

    def _race(self, head):
        with self.racing:
            if self.race_path and not self.raced.is_set() and head.startswith("PUT %s " % self.race_path):
                self.moto.put_direct(self.race_path.split("/", 2)[2], b"written directly", self.race_fence)
                self.raced.set()
        return None
