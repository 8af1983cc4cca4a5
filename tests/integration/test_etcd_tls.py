"""The store's gRPC calls to etcds:// members (issue 42): over the gateway's own HTTP/2
connection on GnuTLS (h2c.c, tlsconn.c), not libcurl. Through a proxy that ends TLS
(tls_proxy.py) in front of a one-member etcd that requires client certificates: each
request is one gRPC call, written in one TLS record, on one kept connection that showed the
gateway's client certificate; and a certificate of etcd's signed by another CA, or for
another name, or a client certificate etcd does not trust, fails the commit (nothing
reaches etcd) with a message that says which."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd_fixture import Etcd, EtcdTls, Gateway, b64, wait_leader
from tls_proxy import TlsProxy


class EtcdTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tls = EtcdTls()
        try:
            cls.etcd = Etcd(1, tls=cls.tls)
        except Exception:
            cls.tls.cleanup()
            raise
        cls.cert, cls.key = cls.tls.client(None, "gateway")
        cls.stranger = EtcdTls()  # another CA: its server certificate is also for 127.0.0.1
        cls.other_name = cls.tls._leaf("other-name", "other.example", "serverAuth",
                                       "subjectAltName=DNS:other.example\n")
        # Signed by etcd's CA, for etcd's address, but for client authentication only (as
        # every other client of etcd holds one): not a server's certificate.
        cls.localhost_only = cls.tls._leaf("localhost-only", "localhost", "serverAuth",
                                           "subjectAltName=DNS:localhost\n")
        cls.client_only = cls.tls._leaf("client-only", "127.0.0.1", "clientAuth", "subjectAltName=IP:127.0.0.1\n")

    @classmethod
    def tearDownClass(cls):
        cls.etcd.stop()
        cls.tls.cleanup()
        cls.stranger.cleanup()

    def setUp(self):
        self.proxy = TlsProxy(self.etcd.url, self.tls.context, self.tls.server, self.tls.server_key, self.tls.ca)
        self.addCleanup(self.proxy.close)
        self.prefix = "lg-" + self._testMethodName

        class Via:
            endpoint = self.proxy.endpoint
            tls = self.tls
        self.g = Gateway(Via, self.prefix, ["--cacert", self.tls.ca, "--etcd-cert", self.cert,
                                            "--etcd-key", self.key])
        self.addCleanup(self.g.cleanup)  # a clean stop (no sanitizer report) when it still runs
        self.assertIs(wait_leader([self.g]), self.g, self.g.stderr_text())

    def acquire_ok(self, name):
        status, _, body = self.g.client.acquire(name, ttl_ms=600000)
        self.assertEqual(status, 200, body)
        return body

    def calls(self):
        with self.proxy.mu:
            return self.proxy.grpc_calls

    def test_each_request_is_one_call_in_one_record_on_one_kept_connection(self):
        self.acquire_ok("warm")
        for i in range(5):
            before = self.calls()
            held = self.acquire_ok("one/%d" % i)
            self.assertEqual(self.calls() - before, 1, "gRPC calls for one acquire")
            before = self.calls()
            self.assertEqual(self.g.client.release("one/%d" % i, held["lease"])[0], 200)
            self.assertEqual(self.calls() - before, 1, "gRPC calls for one release")
        with self.proxy.mu:
            self.assertEqual(self.proxy.grpc_split, 0, "calls whose frames came in more than one TLS record "
                             "(%d calls): not h2c's one write per call" % self.proxy.grpc_calls)
            self.assertEqual(self.proxy.grpc_peers, [{"organizationName": "gateway"}],
                             "not one kept connection showing the gateway's client certificate")
        # That connection gone (etcd restarted, a network cut it): the next commit makes a new one.
        self.proxy.cut(grpc_only=True)
        self.acquire_ok("after-cut")
        self.assertEqual(self.g.role(), "leader")
        with self.proxy.mu:
            self.assertEqual(len(self.proxy.grpc_peers), 2, "not one new connection after the cut")

    def test_a_member_given_by_name_is_looked_up_and_checked_for_that_name(self):
        # Certificates that name only "localhost": a gateway that reaches the members as
        # localhost looks the name up (resolve.c, on a thread of its own) and verifies it.
        self.proxy.serve(*self.localhost_only, self.tls.ca)

        class Named:
            endpoint = self.proxy.endpoint.replace("127.0.0.1", "localhost")
            tls = self.tls
        g = Gateway(Named, self.prefix + "-named", ["--cacert", self.tls.ca, "--etcd-cert", self.cert,
                                                   "--etcd-key", self.key])
        self.addCleanup(g.cleanup)
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        before = self.calls()
        status, _, body = g.client.acquire("named", ttl_ms=600000)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.calls() - before, 1, "gRPC calls for one acquire")
        self.assertNotIn("Sanitizer", g.stderr_text())

    def refused(self, cert, key, client_ca, why):
        """Once the gateway leads, new connections get cert and ask for a client certificate
        of client_ca, and the one that carried gRPC is cut: the next commit must not reach
        etcd, and the gateway says why."""
        self.acquire_ok("before")
        self.proxy.serve(cert, key, client_ca)
        self.proxy.cut(grpc_only=True)
        try:
            status, _, body = self.g.client.acquire("refused", ttl_ms=600000)
            self.assertNotEqual(status, 200, body)
        except OSError:
            pass  # no answer: the gateway stopped first
        r = self.etcd.call("/v3/kv/range", {"key": b64(self.prefix + "/locks/refused")})
        self.assertNotIn("kvs", r, "the commit reached etcd")
        self.assertEqual(self.g.wait_exit(), 1, self.g.stderr_text())
        self.assertIn(why, self.g.stderr_text())
        self.assertNotIn("Sanitizer", self.g.stderr_text())

    def test_etcd_with_a_certificate_of_another_ca_is_refused(self):
        self.refused(self.stranger.server, self.stranger.server_key, self.tls.ca,
                     "etcd's certificate is refused: The certificate is NOT trusted")

    def test_etcd_with_a_certificate_for_another_name_is_refused(self):
        self.refused(*self.other_name, self.tls.ca,
                     "etcd's certificate is refused: The certificate is NOT trusted. The name in the certificate "
                     "does not match the expected")

    def test_etcd_with_a_certificate_for_client_authentication_only_is_refused(self):
        # Found by review: GnuTLS checks the key purpose only when asked; Go's etcd clients
        # (etcdctl) and OpenSSL require serverAuth of a server.
        self.refused(*self.client_only, self.tls.ca,
                     "etcd's certificate is refused: The certificate is NOT trusted. The certificate chain "
                     "does not match the intended purpose")

    def test_the_json_path_refuses_a_certificate_for_client_authentication_only(self):
        # Elections, keepalives and the login that sends a password go through libcurl on
        # OpenSSL, which verifies a server's certificate for serverAuth by itself: a gateway
        # whose members show only such a certificate never starts, and sends nothing.
        self.proxy.serve(*self.client_only, self.tls.ca)

        class Via:
            endpoint = self.proxy.endpoint
            tls = self.tls
        with self.assertRaises(RuntimeError) as ctx:
            Gateway(Via, self.prefix + "-json", ["--cacert", self.tls.ca, "--etcd-cert", self.cert,
                                                 "--etcd-key", self.key])
        self.assertIn("unsuitable certificate purpose", str(ctx.exception))
        self.assertNotIn("Sanitizer", str(ctx.exception))

    def test_a_client_certificate_etcd_does_not_trust_fails_the_commit(self):
        self.refused(self.tls.server, self.tls.server_key, self.stranger.ca,
                     # its alert, or (TLS 1.3) the connection closed under the call, as it may come
                     "etcd refuses this gateway's client certificate (--etcd-cert")


if __name__ == "__main__":
    unittest.main()
