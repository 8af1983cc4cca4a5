"""MemberProxy: what the tests' proxies in front of etcd members share (stall_proxy.py,
txn_proxy.py, tls_proxy.py), and s3_fixture.Relay in front of moto: one listener on 127.0.0.1 per upstream, a thread accepting on
each, and every socket opened here, so that cut() ends the connections open now and close()
ends everything. A subclass calls MemberProxy.__init__, sets its own state, then listen()
(which starts the threads), and relays one accepted connection in _serve(sock, target)."""

import socket
import threading


class MemberProxy:
    def __init__(self):
        self.mu = threading.Lock()
        self.closed = False
        self.socks = []  # every socket opened here, closed by close() (those of a connection: cut())
        self.listeners = []
        self.endpoint = None

    def listen(self, targets, backlog=16):
        """targets: the (host, port) each listener relays to, in the order of `endpoint`."""
        for target in targets:
            ls = socket.socket()
            ls.bind(("127.0.0.1", 0))
            ls.listen(backlog)
            self.listeners.append((ls, target))
        self.endpoint = ",".join("127.0.0.1:%d" % ls.getsockname()[1] for ls, _ in self.listeners)
        for ls, target in self.listeners:
            threading.Thread(target=self._accept, args=(ls, target), daemon=True).start()

    def cut(self):
        """Closes every connection open now, as a restarted member or a network would."""
        with self.mu:
            socks, self.socks = self.socks, []
        for s in socks:
            self.shut(s)

    def close(self):
        with self.mu:
            self.closed = True
        for ls, _ in self.listeners:
            self.shut(ls)
        self.cut()

    @staticmethod
    def hang_up(*socks):
        """Ends each socket's connection both ways (its readers see EOF); it stays open."""
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    @staticmethod
    def shut(s):
        MemberProxy.hang_up(s)
        s.close()

    def dial(self, client, target, timeout=30):
        """A connection to `target` for the accepted `client`, kept by track(); None (client
        closed) when it cannot be made or the proxy is closed."""
        try:
            upstream = socket.create_connection(target, timeout=timeout)
        except OSError:
            client.close()
            return None
        upstream.settimeout(None)
        if not self.track(upstream):
            client.close()
            return None
        return upstream

    def track(self, s):
        """Keeps s for cut() and close(); False (s closed) once the proxy is closed."""
        with self.mu:
            if self.closed:
                s.close()
                return False
            self.socks.append(s)
            return True

    def _accept(self, ls, target):
        while True:
            try:
                conn, _ = ls.accept()
            except OSError:
                return  # closed
            if self.track(conn):
                threading.Thread(target=self._serve, args=(conn, target), daemon=True).start()

    def _serve(self, conn, target):
        raise NotImplementedError
