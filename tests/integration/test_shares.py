"""Shares of what every client uses, per API key and per peer (issue 28): lock names in
the table, fence resources, held long-polls, watches and streams, and each peer's
connections and half-sent requests. One noisy key or peer uses its share up and gets
429 key_limit / peer_limit naming the share ("limit"); the others go on. Every address of
127.0.0.0/8 is one peer (issue 39: ten of them were ten shares), so a second peer is this
machine's ::1, on a server that listens on both (harness.DUAL_STACK)."""

import http.client
import json
import os
import socket
import tempfile
import time
import unittest

from harness import DUAL_STACK, OTHER_PEER, Client, Server, other_peer_works, parse_metrics
from test_auth import Keyed, KeyedTestCase, new_key


class PeerClient(Client):
    """A client that connects to ::1, on a server listening on both loopbacks: another peer."""

    def __init__(self, port, key=None):
        super().__init__(port)
        self.key = key

    def _connect(self):
        self.close()
        self.conn = http.client.HTTPConnection(OTHER_PEER, self.port, timeout=self.timeout)

    def request(self, method, path, body=None, raw=None, headers=None, timeout=None):
        hdrs = dict(headers or {})
        if self.key:
            hdrs["Authorization"] = "Bearer " + self.key
        return super().request(method, path, body=body, raw=raw, headers=hdrs, timeout=timeout)


def held_get(port, path, key=None):
    """A GET sent on a socket of its own; the answer is left unread."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    auth = "Authorization: Bearer %s\r\n" % key if key else ""
    s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % (path, auth)).encode())
    return s


def refused(st, body, error, limit):
    return st == 429 and body.get("error") == error and body.get("limit") == limit


class KeySharesTest(KeyedTestCase):
    def setUp(self):
        self.noisy_key, noisy = new_key("noisy", "client", "n/", "max_held=1")
        self.calm_key, calm = new_key("calm", "client", "c/")
        self.fencer_key, fencer = new_key("fencer", "fence", "n/")
        self.admin_key, admin = new_key("root", "admin")
        self.start_keyed([noisy, calm, fencer, admin], "--key-max-names", "20", "--key-max-fences", "5",
                         "--key-max-polls", "3", "--forget-idle-after", "2")
        self.noisy, self.calm = self.as_(self.noisy_key), self.as_(self.calm_key)
        self.admin = self.as_(self.admin_key)

    def metrics(self):
        return parse_metrics(self.admin.request("GET", "/metrics")[2])

    def test_a_key_that_churns_names_uses_up_its_own_share_only(self):
        # max_held=1 does not stop a key from filling the table with names it released.
        for i in range(20):
            st, _, g = self.noisy.acquire("n/%d" % i)
            self.assertEqual(st, 200, g)
            self.assertEqual(self.noisy.release("n/%d" % i, g["lease"])[0], 200)
        st, _, b = self.noisy.acquire("n/20")
        self.assertTrue(refused(st, b, "key_limit", "max_names"), b)
        self.assertEqual((b["key"], b["value"]), ("noisy", 20))
        # Names it already has are still its to use; other keys make new names.
        st, _, g = self.noisy.acquire("n/3")
        self.assertEqual(st, 200, g)
        self.noisy.release("n/3", g["lease"])
        for i in range(15):
            self.assertEqual(self.calm.acquire("c/%d" % i)[0], 200)
        self.assertEqual(self.metrics()['leasegate_share_refusals_total{by="key",limit="max_names"}'], 1)
        # Forgotten names give the share back.
        self.srv.wait_until(lambda: self.noisy.acquire("n/20")[0] == 200, timeout=15, interval=0.3,
                            what="the noisy key's idle names to be forgotten")

    def test_fence_resources_per_key(self):
        st, _, g = self.noisy.acquire("n/for-fence")
        self.assertEqual(st, 200, g)
        fencer = self.as_(self.fencer_key)
        for i in range(5):
            self.assertEqual(fencer.fence("n/r%d" % i, g["token"])[0], 200)
        st, _, b = fencer.fence("n/r5", g["token"])
        self.assertTrue(refused(st, b, "key_limit", "max_fences"), b)
        self.assertEqual(fencer.fence("n/r1", g["token"])[0], 200)  # a known resource
        self.assertEqual(self.admin.fence("n/r5", g["token"])[0], 200)  # another key

    def test_held_polls_watches_and_streams_per_key(self):
        st, _, latest = self.noisy.request("GET", "/v1/events?prefix=n/")
        index = self.noisy.get_lock("n/w")[2]["index"]
        held = [held_get(self.srv.port, "/v1/events?prefix=n/&after=%d&wait_ms=60000" % latest["latest"],
                         self.noisy_key),
                held_get(self.srv.port, "/v1/locks/n/w?index=%d&wait_ms=60000" % index, self.noisy_key),
                held_get(self.srv.port, "/v1/events/stream?prefix=n/", self.noisy_key)]
        for h in held:
            self.addCleanup(h.close)
        self.srv.wait_until(lambda: self.metrics()["leasegate_event_polls"] == 1 and
                            self.metrics()["leasegate_watches"] == 1 and
                            self.metrics()["leasegate_event_streams"] == 1, what="three held requests")
        for path in ("/v1/events?prefix=n/&wait_ms=60000&after=%d" % latest["latest"],
                     "/v1/locks/n/w?index=%d&wait_ms=60000" % index, "/v1/events/stream?prefix=n/"):
            st, _, b = self.noisy.request("GET", path)
            self.assertTrue(refused(st, b, "key_limit", "max_polls"), (path, b))
        # Without waiting they are answered as ever; another key holds its own.
        self.assertEqual(self.noisy.request("GET", "/v1/events?prefix=n/")[0], 200)
        other = held_get(self.srv.port, "/v1/events?prefix=c/&wait_ms=60000&after=%d" % latest["latest"],
                         self.calm_key)
        self.addCleanup(other.close)
        self.srv.wait_until(lambda: self.metrics()["leasegate_event_polls"] == 2, what="the other key's poll")
        # One ends: room again.
        held[0].close()
        self.srv.wait_until(lambda: self.metrics()["leasegate_event_polls"] == 1, what="the poll to end")
        st, _, b = self.noisy.request("GET", "/v1/events?prefix=n/&wait_ms=300&after=%d" % latest["latest"])
        self.assertEqual(st, 200, b)


@unittest.skipUnless(other_peer_works(), "no dual-stack socket reachable at ::1 here")
class PeerSharesTest(unittest.TestCase):
    def server(self, *args):
        # Beyond loopback (both stacks): keys, or the flag that says none are wanted.
        srv = Server(extra_args=DUAL_STACK + (["--insecure-no-auth"] if "--auth-file" not in args else []) +
                     list(args))
        self.addCleanup(srv.cleanup)
        return srv

    def other(self, srv, key=None):
        c = PeerClient(srv.port, key)
        self.addCleanup(c.close)
        return c

    def test_names_fences_and_polls_per_peer(self):
        srv = self.server("--peer-max-names", "10", "--peer-max-fences", "2", "--peer-max-polls", "2")
        c, o = srv.client, self.other(srv)
        for i in range(10):
            st, _, g = c.acquire("p/%d" % i)
            self.assertEqual(st, 200, g)
            c.release("p/%d" % i, g["lease"])
        st, _, b = c.acquire("p/10")
        self.assertTrue(refused(st, b, "peer_limit", "max_names"), b)
        self.assertEqual(b["peer"], "127.0.0.0/8")
        self.assertIn("reverse proxy", b["message"])
        st, _, g = o.acquire("p/10")
        self.assertEqual(st, 200, g)
        for r in ("f/a", "f/b"):
            self.assertEqual(c.fence(r, g["token"])[0], 200)
        st, _, b = c.fence("f/c", g["token"])
        self.assertTrue(refused(st, b, "peer_limit", "max_fences"), b)
        self.assertEqual(o.fence("f/c", g["token"])[0], 200)
        latest = c.request("GET", "/v1/events")[2]["latest"]
        held = [held_get(srv.port, "/v1/events?after=%d&prefix=zz/&wait_ms=60000" % latest) for _ in range(2)]
        for h in held:
            self.addCleanup(h.close)
        srv.wait_until(lambda: srv.metric("leasegate_event_polls") == 2, what="two polls")
        index = c.get_lock("p/1")[2]["index"]
        st, _, b = c.request("GET", "/v1/locks/p/1?index=%d&wait_ms=60000" % index)
        self.assertTrue(refused(st, b, "peer_limit", "max_polls"), b)
        st, _, b = o.request("GET", "/v1/locks/p/1?index=%d&wait_ms=200" % index)
        self.assertEqual(st, 200, b)
        m = parse_metrics(c.request("GET", "/metrics")[2])
        for limit in ("max_names", "max_fences", "max_polls"):
            self.assertEqual(m['leasegate_share_refusals_total{by="peer",limit="%s"}' % limit], 1, limit)

    def test_connections_per_peer(self):
        srv = self.server("--peer-max-connections", "6", "--peer-max-half-sent", "100")
        idle = []
        for _ in range(5):  # and srv.client's own: 6
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.recv(4096)
            idle.append(s)
            self.addCleanup(s.close)
        self.assertEqual(srv.client.request("GET", "/healthz")[0], 200)
        extra = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        self.addCleanup(extra.close)
        try:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            got = extra.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            got = b""
        self.assertEqual(got, b"", "a seventh connection from one peer was served")
        self.assertEqual(self.other(srv).request("GET", "/healthz")[0], 200)
        idle.pop().close()
        srv.wait_until(lambda: self.other(srv).request("GET", "/metrics")[0] == 200 and
                       parse_metrics(self.other(srv).request("GET", "/metrics")[2])
                       ['leasegate_peer_connections_refused_total{limit="max_connections"}'] >= 1,
                       what="the refusal counted")
        fresh = Client(srv.port)
        self.addCleanup(fresh.close)
        srv.wait_until(lambda: self._served(fresh), what="a connection once one closed")

    @staticmethod
    def _served(c):
        try:
            return c.request("GET", "/healthz")[0] == 200
        except OSError:
            c.close()
            return False

    def test_every_loopback_address_is_one_peer(self):
        """Issue 39: ten addresses of 127.0.0.0/8 with 20 half-sent requests each filled
        --max-connections 200 (each was a peer with a share of its own), and a client with
        a key got no answer. They are one peer: 20 in all, the rest closed at once."""
        key, line = new_key("victim", "client", "v/")
        d = tempfile.mkdtemp(prefix="leasegate-loopback-")
        keys = os.path.join(d, "keys")
        with open(keys, "w") as f:
            f.write(line + "\n")
        os.chmod(keys, 0o600)
        srv = self.server("--auth-file", keys, "--max-connections", "200", "--peer-max-connections", "100",
                          "--peer-max-half-sent", "20", "--idle-timeout", "60")
        heads = []
        for a in range(2, 12):
            for _ in range(20):
                s = socket.socket()
                self.addCleanup(s.close)
                s.settimeout(10)
                s.bind(("127.0.0.%d" % a, 0))
                s.connect(("127.0.0.1", srv.port))
                try:
                    s.sendall(b"POST /v1/locks/v/1/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
                except OSError:
                    pass  # closed at once: the peer is at its share
                heads.append(s)
        victim = self.other(srv, key)
        m = srv.wait_until(lambda: parse_metrics(victim.request("GET", "/metrics")[2]), what="metrics")
        self.assertEqual(m["leasegate_peers"], 2, "127.0.0.2..11 are one peer, ::1 the other")
        self.assertGreaterEqual(m['leasegate_peer_connections_refused_total{limit="max_half_sent"}'], 180)
        st, _, g = victim.acquire("v/1", owner="victim")
        self.assertEqual(st, 200, g)
        # What was accepted of the 200: the share, 20, each still waiting for its head.
        alive = 0
        for s in heads:
            s.setblocking(False)
            try:
                alive += s.recv(1) != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
        self.assertEqual(alive, 20)

    def test_half_sent_requests_per_peer(self):
        srv = self.server("--peer-max-half-sent", "3", "--peer-max-connections", "100")
        keep = Client(srv.port)  # an open keep-alive connection, its request done
        self.addCleanup(keep.close)
        self.assertEqual(keep.request("GET", "/healthz")[0], 200)
        slow = []
        for i in range(3):  # heads that never finish
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(b"POST /v1/locks/h/%d/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty" % i)
            slow.append(s)
            self.addCleanup(s.close)
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        self.addCleanup(extra.close)
        try:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            got = extra.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            got = b""
        self.assertEqual(got, b"", "a connection was served while its peer had 3 requests half-sent")
        st, _, b = keep.request("GET", "/healthz")
        self.assertTrue(refused(st, b, "peer_limit", "max_half_sent"), b)
        self.assertEqual(self.other(srv).request("GET", "/healthz")[0], 200)
        # The slow ones finish: the peer is served again.
        for s in slow:
            s.sendall(b"pe: application/json\r\nContent-Length: 13\r\n\r\n{\"owner\":\"x\"}")
            self.assertIn(b" 200 ", s.recv(4096))
        keep.close()
        self.assertEqual(keep.request("GET", "/healthz")[0], 200)


if __name__ == "__main__":
    unittest.main()
