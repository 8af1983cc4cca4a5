"""TlsProxy: two TLS endpoints in front of one etcd served over TLS, for --store
etcds://P1,P2/PREFIX, that show the gateway a certificate of the test's choosing, ask it for
a client certificate signed by a CA of the test's choosing, and read what the gateway sends
inside TLS.

Each connection's TLS is ended here (ALPN "h2" or "http/1.1", as the gateway asks) and the
bytes go on to etcd over a TLS connection of the proxy's own (etcd's CA, the fixture's admin
certificate). On HTTP/2 the gateway's frames are read: a stream whose first DATA starts
with a gRPC message's prefix (a zero byte) is a gRPC call (etcd's JSON gateway takes JSON);
`grpc_calls` counts them, `grpc_split` those whose HEADERS and last DATA did not come in one
TLS record (h2c.c writes a call's frames at once; libcurl wrote them in two), and
`grpc_peers` holds, for each connection that carried gRPC, the subject of the client
certificate it showed. serve() changes what new connections get; cut() ends those open."""

import select
import socket
import ssl

from member_proxy import MemberProxy

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_DATA, FRAME_HEADERS = 0, 1
FLAG_END_STREAM, FLAG_PADDED = 0x1, 0x8


class TlsProxy(MemberProxy):
    def __init__(self, etcd_url, upstream_context, cert, key, client_ca):
        """upstream_context: makes the ssl.SSLContext of a connection to etcd."""
        super().__init__()
        host, port = etcd_url.split("://")[1].rsplit(":", 1)
        self.upstream_context = upstream_context
        self.grpc_calls = 0
        self.grpc_split = 0
        self.grpc_peers = []
        self.handshakes_failed = 0
        self.grpc_socks = []  # those of the connections that carried gRPC
        self.serve(cert, key, client_ca)
        self.listen([(host, int(port))] * 2)

    def serve(self, cert, key, client_ca):
        """New connections show cert and want a client certificate signed by client_ca."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_ca)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with self.mu:
            self.context = ctx

    def cut(self, grpc_only=False):
        """Closes every connection open now, or those that carried gRPC."""
        if not grpc_only:
            super().cut()
        with self.mu:
            socks, self.grpc_socks = self.grpc_socks, []
        for s in socks:
            self.shut(s)

    def _serve(self, raw, target):
        raw.settimeout(30)
        with self.mu:
            ctx = self.context
        try:
            client = ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            with self.mu:
                self.handshakes_failed += 1
            raw.close()
            return
        if not self.track(client):
            return
        client.settimeout(None)
        alpn = client.selected_alpn_protocol() or "http/1.1"
        peer = dict(x[0] for x in client.getpeercert().get("subject", ()))
        up_ctx = self.upstream_context()
        up_ctx.set_alpn_protocols([alpn])
        try:
            upstream = up_ctx.wrap_socket(socket.create_connection(target, timeout=30),
                                          server_hostname=target[0])
        except (OSError, ssl.SSLError):
            self.shut(client)
            return
        upstream.settimeout(None)
        if not self.track(upstream):
            self.shut(client)
            return
        self._relay(client, upstream, Reader(self, client, upstream, peer) if alpn == "h2" else None)

    def _relay(self, client, upstream, reader):
        """Both ways on one thread: an SSL socket is not to be read and written at once."""
        peer_of = {client: upstream, upstream: client}
        while True:
            ready = [s for s in peer_of if s.pending()]
            if not ready:
                ready, _, _ = select.select(list(peer_of), [], [])
            for s in ready:
                try:
                    data = s.recv(65536)
                except (OSError, ssl.SSLError):
                    data = b""
                if data and s is client and reader:
                    reader.read(data)
                try:
                    if data:
                        peer_of[s].sendall(data)
                except (OSError, ssl.SSLError):
                    data = b""
                if not data:
                    for x in (client, upstream):
                        try:
                            x.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                    return


class Reader:
    """The gateway's HTTP/2 frames, one TLS record (recv) after another."""

    def __init__(self, proxy, client, upstream, peer):
        self.proxy, self.socks, self.peer = proxy, [client, upstream], peer
        self.buf, self.started, self.n = b"", False, 0
        self.streams = {}  # stream id -> {"headers": the record of its HEADERS, "grpc": bool}
        self.carried = False

    def read(self, data):
        p = self.proxy
        self.n += 1
        self.buf += data
        pos = 0
        if not self.started and len(self.buf) >= len(PREFACE):
            self.started, pos = True, len(PREFACE)
        while self.started and len(self.buf) - pos >= 9:
            length = int.from_bytes(self.buf[pos:pos + 3], "big")
            if len(self.buf) - pos < 9 + length:
                break
            ftype, flags = self.buf[pos + 3], self.buf[pos + 4]
            sid = int.from_bytes(self.buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            payload = self.buf[pos + 9:pos + 9 + length]
            pos += 9 + length
            if ftype == FRAME_HEADERS and sid not in self.streams:
                self.streams[sid] = {"headers": self.n, "grpc": None}
            elif ftype == FRAME_DATA and sid in self.streams:
                if flags & FLAG_PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                st = self.streams[sid]
                if st["grpc"] is None and payload:
                    st["grpc"] = payload[0] == 0
                if flags & FLAG_END_STREAM and st["grpc"]:
                    with p.mu:
                        p.grpc_calls += 1
                        p.grpc_split += st["headers"] != self.n
                        if not self.carried:
                            p.grpc_peers.append(self.peer)
                            p.grpc_socks += self.socks
                    self.carried = True
        self.buf = self.buf[pos:]
