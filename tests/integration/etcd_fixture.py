"""etcd for the tests: one member or a three-member cluster on free 127.0.0.1 ports, each
member in a temporary data dir, stopped by PID. Needs the Debian package etcd-server
(scripts/deps.sh --test installs it); `available()` says whether it is there.

Every wait is bounded."""

import base64
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from harness import Server, kill_process, resume_process
from upstream import free_port

ETCD_BIN = "/usr/bin/etcd"
READY_TIMEOUT_S = 20.0
TTL_S = 2  # --leader-ttl for every gateway here: failovers take a few seconds
WAIT_S = 30.0  # bound of every wait for a role change


def available():
    return os.access(ETCD_BIN, os.X_OK)


def missing_reason():
    return ("%s is missing: install the Debian package etcd-server "
            "(scripts/deps.sh --test) to run the etcd tests" % ETCD_BIN)


def b64(text):
    return base64.b64encode(text.encode()).decode()


def call(url, path, body, timeout=5, context=None, token=None):
    """POST body (JSON) to etcd's v3 JSON gateway at url; the decoded answer. context: the
    ssl.SSLContext of an https:// url (etcd's CA and a client certificate); token: an etcd
    auth token (Etcd.log_in)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = token
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
        return json.loads(resp.read())


def openssl(*args):
    r = subprocess.run(["openssl"] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), r.stdout.decode(errors="replace")))


class EtcdTls:
    """A CA, etcd's server certificate for 127.0.0.1, and client certificates (client()),
    made with the openssl command as PEM files in .dir (removed by cleanup()). The members
    of an Etcd(tls=...) require a client certificate signed by the CA (--client-cert-auth);
    the fixture's own calls show one without a CommonName: with etcd's authentication on,
    etcd's JSON gateway refuses a certificate that has one (embed/serve.go), so the
    fixture logs in (Etcd.log_in) and etcdctl is given --user."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-etcd-pki-")
        self.ca, self.ca_key = self.path("ca.pem"), self.path("ca.key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", self.ca_key, "-out", self.ca, "-days", "2", "-subj", "/CN=leasegate etcd test CA",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self.server, self.server_key = self._leaf("server", "127.0.0.1", "serverAuth,clientAuth",
                                                  "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        self.admin, self.admin_key = self.client(None, "admin")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _leaf(self, name, cn, usage, more="", org="leasegate"):
        cert, key, csr, ext = (self.path(name + x) for x in (".pem", ".key", ".csr", ".ext"))
        with open(ext, "w") as f:
            f.write(more + "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=%s\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n" % usage)
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", csr, "-subj", ("/CN=" + cn) if cn else ("/O=" + org))
        openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                "-out", cert, "-days", "2", "-extfile", ext)
        os.chmod(key, 0o600)
        return cert, key

    def client(self, cn, name=None):
        """A client certificate and key: for CN cn, or without a CommonName (cn None; its
        files named by name)."""
        return self._leaf("client-" + (cn or name), cn, "clientAuth", org=name or "leasegate")

    def context(self, cert=None, key=None):
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(cert or self.admin, key or self.admin_key)
        return ctx

    def member_args(self):
        return ["--cert-file", self.server, "--key-file", self.server_key, "--client-cert-auth",
                "--trusted-ca-file", self.ca]

    def etcdctl_args(self):
        return ["--cacert", self.ca, "--cert", self.admin, "--key", self.admin_key]

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Member:
    """One etcd process; its ports are chosen by the cluster."""

    def __init__(self, name, root, client_port, peer_port, tls=None, extra_args=()):
        self.name = name
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=True)
        self.tls = tls
        self.extra_args = list(extra_args)
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", client_port)
        self.endpoint = "127.0.0.1:%d" % client_port
        self.peer_url = "http://127.0.0.1:%d" % peer_port
        self.proc = None
        self.log = None

    def start(self, initial_cluster, state="new"):
        if self.log:
            self.log.close()
        self.log = open(os.path.join(self.dir, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            [ETCD_BIN, "--name", self.name, "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
             "--initial-cluster", initial_cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "leasegate-test"]
            + (self.tls.member_args() if self.tls else []) + self.extra_args,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def call(self, path, body, timeout=5, token=None):
        return call(self.url, path, body, timeout, self.tls.context() if self.tls else None, token)

    def status(self):
        """etcd's maintenance status of this member (header.member_id, leader), or None."""
        try:
            return self.call("/v3/maintenance/status", {}, timeout=2)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def kill9(self):
        kill_process(self.proc)

    def stop(self):
        if self.proc is not None:
            kill_process(self.proc, signal.SIGTERM)
            kill_process(self.proc)
        if self.log:
            self.log.close()
            self.log = None


class Etcd:
    """An etcd cluster of `size` members (1 or 3) that has a leader and answers reads.
    .endpoint is every member's HOST:PORT, comma-separated, as --store wants them;
    .url is the first member's URL. stop() stops every member and removes the dirs.
    client_ports: the members' client ports, when a test chose them (a gateway started
    before its etcd), else free ones."""

    def __init__(self, size=1, client_ports=None, tls=None, extra_args=()):
        """client_ports: the members' client ports (default: free ones). tls: an EtcdTls:
        the members serve https and require its client certificates. extra_args: more
        flags for every member (--quota-backend-bytes, --auth-token-ttl)."""
        self.root = tempfile.mkdtemp(prefix="leasegate-etcd-")
        self.tls = tls
        self.token = None  # log_in's
        self.user = None
        for _attempt in range(5):
            self.members = [Member("m%d" % i, self.root, client_ports[i] if client_ports else free_port(), free_port(),
                                   tls, extra_args)
                            for i in range(size)]
            cluster = ",".join("%s=%s" % (m.name, m.peer_url) for m in self.members)
            for m in self.members:
                m.start(cluster)
            if self._ready():
                break
            for m in self.members:
                m.stop()
            shutil.rmtree(self.root, ignore_errors=True)
            os.makedirs(self.root, exist_ok=True)
        else:
            raise RuntimeError("etcd did not start; see %s" % self.root)
        self.cluster = cluster
        self.url = self.members[0].url
        self.endpoint = ",".join(m.endpoint for m in self.members)

    def _ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if not all(m.running() for m in self.members):
                return False
            if self.leader() is not None:
                try:
                    self.call("/v3/kv/range", {"key": b64("x")})
                    return True
                except (OSError, urllib.error.URLError):
                    pass
            time.sleep(0.1)
        return False

    def leader(self):
        """The member that leads the Raft group (as running members see it), or None."""
        for m in self.members:
            if not m.running():
                continue
            st = m.status()
            if not st or not st.get("leader"):
                continue
            for other in self.members:
                ost = other.status() if other.running() else None
                if ost and ost["header"]["member_id"] == st["leader"]:
                    return other
        return None

    def call(self, path, body):
        """A v3 gateway call on the first running member (logged in again once when etcd
        ended the token of log_in: its TTL passed, or its users or roles changed)."""
        try:
            return self._call(path, body)
        except urllib.error.HTTPError as e:
            if not self.token or e.code not in (400, 401):
                raise
            self.log_in(*self.user.split(":", 1))
            return self._call(path, body)

    def _call(self, path, body):
        err = None
        for m in self.members:
            if m.running():
                try:
                    return m.call(path, body, token=self.token)
                except (OSError, urllib.error.URLError) as e:
                    err = e
        raise err or OSError("no etcd member runs")

    def log_in(self, user, password):
        """The fixture's calls go as this etcd user from now on (etcd's auth is on), and
        its etcdctl commands with --user."""
        self.token = None
        self.token = self._call("/v3/auth/authenticate", {"name": user, "password": password})["token"]
        self.user = "%s:%s" % (user, password)

    def enable_auth(self, root_password, user_password, user="leasegate", prefix="lg/"):
        """docs/high-availability.md#authentication, command for command: root, a role with
        readwrite on the lock space's prefix only, its user, auth on; then the fixture's own
        calls go as root."""
        role = "leasegate-" + prefix.rstrip("/")
        self.etcdctl("user", "add", "root", "--new-user-password=" + root_password)
        self.etcdctl("role", "add", role)
        self.etcdctl("role", "grant-permission", role, "--prefix=true", "readwrite", prefix)
        self.etcdctl("user", "add", user, "--new-user-password=" + user_password)
        self.etcdctl("user", "grant-role", user, role)
        self.etcdctl("auth", "enable")
        self.log_in("root", root_password)

    def etcdctl(self, *args, check=True):
        """etcdctl (v3) against every member, as an operator runs it; (status, output)."""
        r = subprocess.run(["etcdctl", "--endpoints", self.endpoint] + (self.tls.etcdctl_args() if self.tls else [])
                           + (["--user", self.user] if self.user else []) + list(args),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                           env=dict(os.environ, ETCDCTL_API="3"))
        out = (r.stdout + r.stderr).decode(errors="replace")
        if check and r.returncode != 0:
            raise RuntimeError("etcdctl %s: %s" % (" ".join(args), out))
        return r.returncode, out

    def keys(self, prefix):
        """Every key under prefix, decoded."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self.call("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end), "keys_only": True})
        return [base64.b64decode(kv["key"]).decode() for kv in r.get("kvs", [])]

    def delete(self, key):
        self.call("/v3/kv/deleterange", {"key": b64(key)})

    def restart(self, member):
        """Starts a stopped member again with its data (it rejoins the cluster)."""
        member.stop()
        member.start(self.cluster, state="existing")

    def stop(self):
        for m in self.members:
            m.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Gateway(Server):
    """A leasegate on the etcd store; started as a candidate (its port is known at once)."""

    def __init__(self, etcd, prefix, extra_args=None, key=None, extra_env=None, new_lock_space=True, start=True):
        self.key = key  # sent with /healthz (for --auth-metrics)
        scheme = "etcds" if getattr(etcd, "tls", None) else "etcd"
        super().__init__(store="%s://%s/%s" % (scheme, etcd.endpoint, prefix),
                         extra_args=["--leader-ttl", str(TTL_S)] + list(extra_args or []), extra_env=extra_env,
                         new_lock_space=new_lock_space, start=start)

    def health(self):
        headers = {"Authorization": "Bearer " + self.key} if self.key else None
        try:
            status, _, body = self.client.request("GET", "/healthz", timeout=5, headers=headers)
        except (OSError, http.client.HTTPException):
            # Not answered, or cut off: a standby server stops (and closes its
            # connections) the moment its gateway wins the election; ask again.
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def role(self):
        h = self.health()
        return h.get("role") if h else None

    def wait_exit(self, timeout=WAIT_S):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def wait_for(pred, timeout=WAIT_S, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


def wait_leader(gateways):
    """The gateway that serves (role leader), once one does."""
    return wait_for(lambda: next((g for g in gateways if g.running() and g.role() == "leader"), None))

def peak_rss_kib(pid):
    """The process's peak resident memory (VmHWM), in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for pid %d" % pid)


class EtcdTestCase(unittest.TestCase):
    """A one-member etcd per test, and the gateways a test starts on it (stopped, and
    resumed first if paused, at the end)."""

    def setUp(self):
        self.etcd = Etcd()
        self.gateways = []
        self.prefix = "lg-%s" % self._testMethodName

    def tearDown(self):
        for g in self.gateways:
            resume_process(g.proc)
            g.stop()
            g.cleanup()
        self.etcd.stop()

    def gateway(self, extra_args=None, key=None):
        g = Gateway(self.etcd, self.prefix, extra_args, key)
        self.gateways.append(g)
        return g

    def assert_grants_nothing_and_exits(self, g, name):
        """A gateway that no longer leads: its next grant attempt fails (503, or no answer
        at all as it exits), and it exits 1 saying leadership was lost."""
        try:
            status, _, body = g.client.acquire(name)
            self.assertEqual(status, 503, body)
        except OSError:
            pass  # no answer: it stopped before replying
        self.assertEqual(g.wait_exit(), 1, g.stderr_text())
        self.assertIn("leadership lost", g.stderr_text())

    def acquire_ok(self, g, name, **fields):
        status, _, body = g.client.acquire(name, **fields)
        self.assertEqual(status, 200, body)
        return body

    def follower_of(self, leader, gateways):
        other = next(g for g in gateways if g is not leader)
        h = wait_for(lambda: (lambda x: x if x and x.get("leader") else None)(other.health()))
        self.assertIsNotNone(h, "the follower never learned the leader: %s\nleader: %s"
                             % (other.stderr_text()[-2000:], leader.stderr_text()[-2000:]))
        self.assertEqual((h["role"], h["leader"]), ("follower", leader.url))
        return other
