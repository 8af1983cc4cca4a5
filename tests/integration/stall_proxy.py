"""StallProxy: a TCP proxy in front of every member of an etcd cluster, for one gateway's
--store etcd://..., that can stall that gateway's etcd traffic: one way or both ways, every
connection or only the JSON ones (keepalives, elections, loads; the store's commits are
gRPC, HTTP/2 with prior knowledge, and pass).

A stalled direction is held, not dropped: the bytes wait in the proxy (the sender sees a
peer that stopped answering, as a network partition looks to TCP), and reach the other side
when the stall ends, in order. cut() instead closes every connection open now.

Only 127.0.0.1; every thread ends when the proxy is closed; every wait is bounded by the
stall, which the test ends."""

import threading
import time

from member_proxy import MemberProxy

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # how an HTTP/2 connection with prior knowledge starts
TO_ETCD, FROM_ETCD = "to_etcd", "from_etcd"


class StallProxy(MemberProxy):
    def __init__(self, members):
        """members: etcd_fixture.Member objects (or anything with .endpoint "HOST:PORT")."""
        super().__init__()
        self.stalled = set()  # the directions held now
        self.json_only = False
        self.listen([(h, int(p)) for h, p in (m.endpoint.rsplit(":", 1) for m in members)], backlog=64)

    def stall(self, directions=(TO_ETCD, FROM_ETCD), json_only=False):
        """Holds the bytes of these directions from now on (on JSON connections only, when
        json_only), until release()."""
        with self.mu:
            self.stalled = set(directions)
            self.json_only = json_only

    def release(self):
        with self.mu:
            self.stalled = set()

    def close(self):
        with self.mu:
            self.stalled = set()
        super().close()

    def _serve(self, client, target):
        upstream = self.dial(client, target, timeout=5)
        if upstream is None:
            return
        conn = {"h2": None}  # None until the first bytes say which protocol
        threading.Thread(target=self._pump, args=(upstream, client, FROM_ETCD, conn), daemon=True).start()
        self._pump(client, upstream, TO_ETCD, conn)

    def _held(self, direction, conn):
        with self.mu:
            if self.closed or direction not in self.stalled:
                return False
            return not (self.json_only and conn["h2"])

    def _pump(self, src, dst, direction, conn):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if conn["h2"] is None and direction == TO_ETCD:
                conn["h2"] = data[:3] == PREFACE[:3]  # the gateway speaks first
            while self._held(direction, conn):
                time.sleep(0.01)
            try:
                dst.sendall(data)
            except OSError:
                break
        self.hang_up(src, dst)
