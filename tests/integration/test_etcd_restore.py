"""Backup and restore of a lock space on etcd, run as docs/high-availability.md#backup-and-restore
tells an operator, on the deployment it recommends: three members that require client
certificates, etcd's authentication on, the gateways' user restricted to lg/ (the etcdctl
commands of #authentication). A snapshot is saved, tokens are issued after it, and the lock
space alone is restored from the snapshot through a scratch one-member etcd and make-mirror,
then started with --min-token: its identity and its holders at the snapshot come back, a lease
granted after it is unknown, and no token is ever issued twice.

The hostile review of issue 37 ran the page's commands before this test: make-mirror copied
nothing and said nothing (its destination takes one member, not the comma list $LIVE; the
scratch member, restored with the snapshot's users, needs a login; the live one needs TLS and
a user, which etcdctl 3.4's make-mirror can give only as a client certificate's CommonName).

Free 127.0.0.1 ports, temporary dirs, every process stopped by PID, every wait bounded;
nothing asserts how long anything took."""

import os
import shutil
import signal
import subprocess
import tempfile
import unittest

import etcd_fixture
from etcd_fixture import Etcd, EtcdTls, Gateway, wait_for, wait_leader
from harness import kill_process
from upstream import free_port

PASSWORD = "gateway-password-5d1e"
ROOT_PASSWORD = "root-password-8a3b"


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())
    if not shutil.which("etcdctl") or not shutil.which("openssl"):
        raise unittest.SkipTest("etcdctl or openssl is missing: install the Debian packages etcd-client and openssl "
                                "(scripts/deps.sh --test)")


class RestoreTest(unittest.TestCase):
    def setUp(self):
        self.tls = EtcdTls()
        self.addCleanup(self.tls.cleanup)
        self.etcd = Etcd(3, tls=self.tls)
        self.addCleanup(self.etcd.stop)
        self.dir = tempfile.mkdtemp(prefix="leasegate-restore-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.etcd.enable_auth(ROOT_PASSWORD, PASSWORD)  # docs/high-availability.md#authentication
        self.cert, self.key = self.tls.client(None, "gateway")
        self.auth_file = os.path.join(self.dir, "etcd-user")
        with open(self.auth_file, "w") as f:
            f.write("leasegate:%s\n" % PASSWORD)
        os.chmod(self.auth_file, 0o600)
        self.gateways = []
        self.procs = []

    def tearDown(self):
        for g in self.gateways:
            g.stop()
            g.cleanup()
        for p in self.procs:
            kill_process(p, signal.SIGTERM)
            kill_process(p)

    def gateway(self, *more):
        g = Gateway(self.etcd, "lg", ["--cacert", self.tls.ca, "--etcd-cert", self.cert, "--etcd-key", self.key,
                                      "--etcd-auth-file", self.auth_file] + list(more))
        self.gateways.append(g)
        return g

    def etcdctl(self, endpoints, *args, tls=True):
        """etcdctl as root (over the admin's certificate on the live members); its output."""
        r = subprocess.run(["etcdctl", "--endpoints", endpoints] + (self.tls.etcdctl_args() if tls else [])
                           + ["--user", "root:" + ROOT_PASSWORD] + list(args), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60, env=dict(os.environ, ETCDCTL_API="3"))
        out = (r.stdout + r.stderr).decode(errors="replace")
        self.assertEqual(r.returncode, 0, "etcdctl %s: %s" % (" ".join(args), out))
        return r.stdout.decode()

    def count(self, endpoints, tls=True):
        return len(self.etcdctl(endpoints, "get", "--prefix", "lg/", "--keys-only", tls=tls).split())

    def acquire(self, g, name):
        status, _, body = g.client.acquire(name, ttl_ms=600000)
        self.assertEqual(status, 200, body)
        return body

    def test_the_documented_restore_brings_back_the_lock_space_without_repeating_a_token(self):
        a, b = self.gateway(), self.gateway()
        leader = wait_leader([a, b])
        self.assertIsNotNone(leader, a.stderr_text() + b.stderr_text())
        held = self.acquire(leader, "orders/held")
        one = self.etcd.members[0].endpoint
        snap = os.path.join(self.dir, "snap.db")
        self.etcdctl(one, "snapshot", "save", snap)
        ident = self.etcdctl(one, "get", "lg/meta/lockspace", "--print-value-only")
        after = self.acquire(leader, "orders/after")  # not in the snapshot
        last = max(after["token"], self.acquire(leader, "orders/later")["token"])
        for g in (a, b):
            g.stop()
        # The scratch member, restored from the snapshot.
        scratch_dir = os.path.join(self.dir, "lg-restore")
        peer, client = free_port(), free_port()
        r = subprocess.run(["etcdctl", "snapshot", "restore", snap, "--data-dir", scratch_dir, "--name", "scratch",
                            "--initial-cluster", "scratch=http://127.0.0.1:%d" % peer,
                            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                           env=dict(os.environ, ETCDCTL_API="3"))
        self.assertEqual(r.returncode, 0, r.stderr)
        log = open(os.path.join(self.dir, "scratch.log"), "wb")
        self.addCleanup(log.close)
        scratch_url = "http://127.0.0.1:%d" % client
        self.procs.append(subprocess.Popen(
            [etcd_fixture.ETCD_BIN, "--name", "scratch", "--data-dir", scratch_dir, "--listen-client-urls", scratch_url,
             "--advertise-client-urls", scratch_url, "--listen-peer-urls", "http://127.0.0.1:%d" % peer],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log))
        scratch_keys = wait_for(lambda: self._count_or_none(scratch_url))
        self.assertIsNotNone(scratch_keys, "the scratch member never answered")
        # The live cluster: the prefix deleted, then copied over to one member, as the gateways'
        # user (a certificate whose CommonName is that user: make-mirror has no --dest-user).
        self.etcdctl(self.etcd.endpoint, "del", "--prefix", "lg/")
        copier_cert, copier_key = self.tls.client("leasegate")
        mirror = subprocess.Popen(
            ["etcdctl", "--endpoints", scratch_url, "--user", "root:" + ROOT_PASSWORD, "make-mirror", "--prefix",
             "lg/", "--dest-prefix", "lg/", "--dest-cacert", self.tls.ca, "--dest-cert", copier_cert,
             "--dest-key", copier_key, one], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, env=dict(os.environ, ETCDCTL_API="3"))
        self.procs.append(mirror)
        copied = wait_for(lambda: self.count(self.etcd.endpoint) >= scratch_keys, step=0.5)
        mirror.send_signal(signal.SIGINT)
        out = mirror.communicate(timeout=30)[0].decode(errors="replace")
        self.assertTrue(copied, "make-mirror copied %d of %d keys: %s"
                        % (self.count(self.etcd.endpoint), scratch_keys, out))
        self.etcdctl(self.etcd.endpoint, "del", "--prefix", "lg/leader/")
        # One gateway first, with the floor: the last token ever issued.
        first = self.gateway("--min-token", str(last))
        self.assertIs(wait_leader([first]), first, first.stderr_text())
        self.assertEqual(self.etcdctl(one, "get", "lg/meta/lockspace", "--print-value-only"), ident)
        self.assertIn("joining the lock space", first.stderr_text())
        status, _, body = first.client.get_lock("orders/held")
        self.assertEqual((status, body["holder"]["token"]), (200, held["token"]), body)
        status, _, body = first.client.renew("orders/after", after["lease"])
        self.assertEqual((status, body.get("error")), (409, "not_holder"), body)
        tokens = [self.acquire(first, "orders/after")["token"]]
        self.assertGreater(tokens[0], last)
        # The rest join without the flag; the floor holds for every later leader.
        first.stop()
        rest = [self.gateway(), self.gateway()]
        leader = wait_leader(rest)
        self.assertIsNotNone(leader, "".join(g.stderr_text() for g in rest))
        tokens.append(self.acquire(leader, "orders/next")["token"])
        self.assertGreater(tokens[1], tokens[0])

    def _count_or_none(self, url):
        try:
            return self.count(url, tls=False) or None
        except AssertionError:
            return None


if __name__ == "__main__":
    unittest.main()
