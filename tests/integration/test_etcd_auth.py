"""Gateways on etcd run the way etcd clusters are run (issue 37): three members over TLS
that require client certificates (--client-cert-auth), with etcd's authentication on and
the gateways' user restricted to their prefix by a role, set up with the etcdctl commands of
docs/high-availability.md#authentication. The gateways show --etcd-cert/--etcd-key and log in
as --etcd-auth-file's user (its token on the JSON gateway and as gRPC metadata for commits),
log in again when etcd ends their token, and say plainly why they cannot start: no client
certificate, one etcd does not trust, a refused login, no user, a role without the prefix, a
password file others may write.

The certificates are made with the openssl command in a temporary directory; the members
run on free 127.0.0.1 ports and are stopped by PID. Every wait is bounded; nothing asserts
how long anything took."""

import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error

from harness import binary_path
import etcd_fixture
from etcd_fixture import Etcd, EtcdTls, Gateway, b64, wait_for, wait_leader

PASSWORD = "gateway-password-7f3a"
ROOT_PASSWORD = "root-password-19c2"
TOKEN_TTL_S = 3  # etcd's --auth-token-ttl: a client idle this long must log in again


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())
    if not shutil.which("etcdctl") or not shutil.which("openssl"):
        raise unittest.SkipTest("etcdctl or openssl is missing: install the Debian packages etcd-client and openssl "
                                "(scripts/deps.sh --test)")


class EtcdAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tls = EtcdTls()
        try:
            cls.etcd = Etcd(3, tls=cls.tls, extra_args=["--auth-token-ttl", str(TOKEN_TTL_S)])
        except Exception:
            cls.tls.cleanup()
            raise
        cls.dir = tempfile.mkdtemp(prefix="leasegate-etcd-auth-")
        cls.etcd.enable_auth(ROOT_PASSWORD, PASSWORD)
        e = cls.etcd.etcdctl
        # A user whose role has another prefix only.
        e("role", "add", "other")
        e("role", "grant-permission", "other", "--prefix=true", "readwrite", "other/")
        e("user", "add", "outsider", "--new-user-password=" + PASSWORD)
        e("user", "grant-role", "outsider", "other")
        # Without a CommonName: etcd's JSON gateway refuses a certificate with one while its
        # authentication is on.
        cls.cert, cls.key = cls.tls.client(None, "gateway")
        cls.auth_file = cls.password_file("auth", "leasegate:" + PASSWORD)

    @classmethod
    def tearDownClass(cls):
        cls.etcd.stop()
        cls.tls.cleanup()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def password_file(cls, name, line, mode=0o600):
        path = os.path.join(cls.dir, name)
        with open(path, "w") as f:
            f.write(line + "\n")
        os.chmod(path, mode)
        return path

    def setUp(self):
        self.gateways = []

    def tearDown(self):
        for g in self.gateways:
            g.stop()
            g.cleanup()

    def flags(self, cert=None, key=None, auth_file=None):
        return ["--cacert", self.tls.ca, "--etcd-cert", cert or self.cert, "--etcd-key", key or self.key,
                "--etcd-auth-file", auth_file or self.auth_file]

    def gateway(self, prefix, *flags):
        g = Gateway(self.etcd, prefix, list(flags) or self.flags())
        self.gateways.append(g)
        return g

    def serve_refused(self, prefix, *flags):
        r = subprocess.run([binary_path(), "serve", "--listen", "127.0.0.1:0", "--leader-ttl", "2",
                            "--new-lock-space", "--store", "etcds://%s/%s" % (self.etcd.endpoint, prefix)]
                           + list(flags), stdin=subprocess.DEVNULL, capture_output=True, timeout=90)
        return r.returncode, r.stderr.decode(errors="replace")

    def acquire_ok(self, g, name, **fields):
        status, _, body = g.client.acquire(name, **fields)
        self.assertEqual(status, 200, body)
        return body

    def test_three_gateways_with_client_certificates_and_an_etcd_user(self):
        gateways = [self.gateway("lg") for _ in range(3)]
        leader = wait_leader(gateways)
        self.assertIsNotNone(leader, "".join(g.stderr_text() for g in gateways))
        follower = next(g for g in gateways if g is not leader)
        self.assertTrue(wait_for(lambda: (follower.health() or {}).get("leader") == leader.url))
        held = self.acquire_ok(follower, "orders/1", ttl_ms=120000)  # forwarded to the leader
        tokens = [held["token"]]
        # Idle past the token's TTL: the store's next commit is refused (invalid auth token)
        # and goes through after a new login.
        time.sleep(TOKEN_TTL_S + 1.5)
        tokens.append(self.acquire_ok(leader, "after-idle")["token"])
        # etcd's roles change: tokens issued before are refused (old auth revision) until
        # each client logs in again.
        self.etcd.etcdctl("role", "grant-permission", "leasegate-lg", "read", "lg-extra")
        tokens.append(self.acquire_ok(leader, "after-role-change")["token"])
        self.assertEqual(tokens, sorted(set(tokens)))
        # Failover: the next leader logs in and loads the lock space.
        leader.kill9()
        rest = [g for g in gateways if g is not leader]
        new = wait_leader(rest)
        self.assertIsNotNone(new, "".join(g.stderr_text() for g in rest))
        status, _, body = new.client.get_lock("orders/1")
        self.assertEqual((status, body["holder"]["token"]), (200, held["token"]), body)
        self.assertGreater(self.acquire_ok(new, "after-failover")["token"], max(tokens))
        # What etcd access means: a client certificate without a token reads nothing of the
        # lock space (leases are the store's secret).
        nobody = self.tls.context(*self.tls.client(None, "nobody"))
        with self.assertRaises(urllib.error.HTTPError) as refused:
            etcd_fixture.call(self.etcd.members[0].url, "/v3/kv/range",
                              {"key": b64("lg/"), "range_end": b64("lg0")}, context=nobody)
        self.assertRegex(refused.exception.read(), b"user name is empty|permission denied")
        self.assertNotIn("password", "".join(g.stderr_text() for g in gateways).lower().replace(
            "--etcd-auth-file", ""))

    def test_start_errors_name_the_cause(self):
        rc, err = self.serve_refused("lg-start", "--cacert", self.tls.ca, "--etcd-auth-file", self.auth_file)
        self.assertEqual(rc, 1, err)
        self.assertRegex(err, "etcd (may )?asks? for a client certificate \\(its --client-cert-auth\\): give "
                              "--etcd-cert and --etcd-key")
        named = self.tls.client("gateway-cn")
        rc, err = self.serve_refused("lg-start", *self.flags(*named))
        self.assertEqual(rc, 1, err)
        self.assertIn("make the client certificate without a CommonName", err)
        stranger = EtcdTls()
        self.addCleanup(stranger.cleanup)
        cert, key = stranger.client(None, "gateway")
        rc, err = self.serve_refused("lg-start", *self.flags(cert, key))
        self.assertEqual(rc, 1, err)
        self.assertIn("refuses this gateway's client certificate", err)
        wrong = self.password_file("wrong", "leasegate:not-the-password")
        rc, err = self.serve_refused("lg-start", *self.flags(auth_file=wrong))
        self.assertEqual(rc, 1, err)
        self.assertIn("etcd refused the login of user 'leasegate' (--etcd-auth-file %s)" % wrong, err)
        self.assertIn("authentication failed", err)
        self.assertNotIn("not-the-password", err)
        rc, err = self.serve_refused("lg-start", "--cacert", self.tls.ca, "--etcd-cert", self.cert,
                                     "--etcd-key", self.key)
        self.assertEqual(rc, 1, err)
        self.assertIn("etcd has authentication enabled: give --etcd-auth-file", err)
        outsider = self.password_file("outsider", "outsider:" + PASSWORD)
        rc, err = self.serve_refused("lg-start", *self.flags(auth_file=outsider))
        self.assertEqual(rc, 1, err)
        self.assertIn("may not read lg-start/meta/lockspace", err)
        self.assertIn("readwrite on the prefix lg-start/", err)
        rc, err = self.serve_refused("lg-start", *self.flags(cert=os.path.join(self.dir, "missing.pem")))
        self.assertEqual(rc, 1, err)
        self.assertIn("--etcd-cert %s: No such file or directory" % os.path.join(self.dir, "missing.pem"), err)
        loose = self.password_file("loose", "leasegate:" + PASSWORD, 0o666)
        rc, err = self.serve_refused("lg-start", *self.flags(auth_file=loose))
        self.assertEqual((rc, "refused: it is writable by its group and others (mode 0666)" in err), (1, True), err)
        self.assertEqual(self.etcd.keys("lg-start/"), [])

    def test_a_password_file_others_may_read_is_warned_about(self):
        readable = self.password_file("readable", "leasegate:" + PASSWORD, 0o644)
        g = self.gateway("lg", *self.flags(auth_file=readable))
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        self.assertIn("WARNING: --etcd-auth-file %s may be read by others (mode 0644)" % readable, g.stderr_text())
        group = self.password_file("group", "leasegate:" + PASSWORD, 0o640)  # the service's group: no warning
        g2 = self.gateway("lg", *self.flags(auth_file=group))
        self.assertNotIn("WARNING", g2.stderr_text())
        self.acquire_ok(g, "warned")


class EtcdAuthPlainTest(unittest.TestCase):
    """An etcd user over plain TCP: the store's commits then go over its own HTTP/2
    connection (h2c.c, not libcurl), the token as the gRPC metadata "token". They must go
    with it (etcd refuses a transaction without one), and after etcd ended the token the
    next commit must log in again and go through."""

    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd(1, extra_args=["--auth-token-ttl", str(TOKEN_TTL_S)])
        cls.dir = tempfile.mkdtemp(prefix="leasegate-etcd-auth-plain-")
        cls.etcd.enable_auth(ROOT_PASSWORD, PASSWORD)
        cls.auth_file = os.path.join(cls.dir, "auth")
        with open(cls.auth_file, "w") as f:
            f.write("leasegate:" + PASSWORD + "\n")
        os.chmod(cls.auth_file, 0o600)

    @classmethod
    def tearDownClass(cls):
        cls.etcd.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_commits_carry_the_token_and_log_in_again(self):
        g = Gateway(self.etcd, "lg", ["--etcd-auth-file", self.auth_file])
        self.addCleanup(g.cleanup)
        self.addCleanup(g.stop)
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        tokens = []
        for name in ("first", "second"):
            status, _, body = g.client.acquire(name, ttl_ms=120000)
            self.assertEqual(status, 200, body)
            tokens.append(body["token"])
        time.sleep(TOKEN_TTL_S + 1.5)  # etcd ends the idle token
        status, _, body = g.client.acquire("after-idle", ttl_ms=120000)
        self.assertEqual(status, 200, body)
        tokens.append(body["token"])
        self.assertEqual(tokens, sorted(set(tokens)))
        self.assertEqual(g.role(), "leader")
        # What the commits wrote is in etcd, under the user's prefix (root's token ended too).
        self.etcd.log_in("root", ROOT_PASSWORD)
        kvs = etcd_fixture.call(self.etcd.url, "/v3/kv/range", {"key": b64("lg/holders/"),
                                                                "range_end": b64("lg/holders0")},
                                token=self.etcd.token).get("kvs", [])
        self.assertEqual(len(kvs), 3, kvs)


if __name__ == "__main__":
    unittest.main()
