"""TxnProxy: two TCP endpoints in front of one etcd, for --store etcd://P1,P2/PREFIX, that can
hold back or swallow one of the gateway's transactions, to test what a late copy of it does.

The gateway sends its transactions as gRPC (HTTP/2 with prior knowledge, every other call as
HTTP/1.1 JSON): a connection that starts with HTTP/2's preface carries transactions only.
Everything is passed on byte for byte, except the first transaction that starts while the
proxy is armed:
  "hold"     keeps it (nothing more of that connection reaches etcd) until replay();
  "swallow"  passes it on, and drops everything etcd sends back on that connection from then;
  "reset"    keeps it from etcd and ends its stream at once with RST_STREAM NO_ERROR, before any
             answer's header (what a misbehaving server or middlebox may do), the connection
             going on.
Either way the gateway gets no answer, gives up on that endpoint and sends the transaction
again to the other one. `caught` is the transaction (a TxnRequest message); replay() sends it
to etcd through the JSON gateway (the same transaction, written as JSON: txn_json)."""

import base64
import threading
import urllib.parse

import etcd_fixture
from member_proxy import MemberProxy

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_DATA, FRAME_HEADERS, FRAME_RST_STREAM = 0, 1, 3
FLAG_END_STREAM, FLAG_PADDED = 0x1, 0x8


def _varint(data, i):
    v = shift = 0
    while True:
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def pb_fields(data):
    """(number, wire type, value) of each field of a protobuf message: ints and bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wire)
        yield number, wire, value


def txn_json(message):
    """A TxnRequest (protobuf) as the JSON gateway's /v3/kv/txn body."""
    def b64(raw):
        return base64.b64encode(raw).decode()
    out = {"compare": [], "success": [], "failure": []}
    for number, _, value in pb_fields(message):
        if number == 1:
            cmp = {"result": "EQUAL", "target": "VERSION"}
            for n, _, v in pb_fields(value):
                if n == 1:
                    cmp["result"] = ["EQUAL", "GREATER", "LESS", "NOT_EQUAL"][v]
                elif n == 2:
                    cmp["target"] = ["VERSION", "CREATE", "MOD", "VALUE", "LEASE"][v]
                elif n == 3:
                    cmp["key"] = b64(v)
                elif n in (4, 5, 6):
                    cmp[{4: "version", 5: "create_revision", 6: "mod_revision"}[n]] = str(v)
                elif n == 7:
                    cmp["value"] = b64(v)
            out["compare"].append(cmp)
        elif number in (2, 3):
            for kind, _, request in pb_fields(value):  # RequestOp: one of its requests
                name = {1: "request_range", 2: "request_put", 3: "request_delete_range"}[kind]
                fields = {}
                for n, _, v in pb_fields(request):
                    fields[{1: "key", 2: "value" if kind == 2 else "range_end"}[n]] = b64(v)
                out["success" if number == 2 else "failure"].append({name: fields})
    return out


class TxnProxy(MemberProxy):
    def __init__(self, etcd_url):
        u = urllib.parse.urlsplit(etcd_url)
        super().__init__()
        self.etcd_url = etcd_url
        self.armed = None
        self.caught = None
        self.h2_connections = 0  # connections that carried transactions (HTTP/2)
        self.grpc_calls = 0  # streams the gateway opened on them: one per gRPC call (a transaction)
        self.kv_json_calls = 0  # JSON calls on etcd's key-value API (POST /v3/kv/...): reads, compactions
        self.listen([(u.hostname, u.port)] * 2)

    def arm(self, mode):
        with self.mu:
            self.armed, self.caught = mode, None

    def replay(self):
        """Sends the held transaction to etcd now, late: etcd's answer (JSON)."""
        return etcd_fixture.call(self.etcd_url, "/v3/kv/txn", txn_json(self.caught))

    def _serve(self, client, target):
        upstream = self.dial(client, target)
        if upstream is None:
            return
        conn = {"swallow": False, "to_client": threading.Lock()}
        first = b""
        while len(first) < len(PREFACE) and PREFACE.startswith(first):
            chunk = self._recv(client)
            if not chunk:
                break
            first += chunk
        conn["h2"] = first.startswith(PREFACE)
        threading.Thread(target=self._back, args=(upstream, client, conn), daemon=True).start()
        if conn["h2"]:
            with self.mu:
                self.h2_connections += 1
            self._h2_forth(client, upstream, first, conn)
        else:
            self._pump(client, upstream, first, count=True)

    @staticmethod
    def _recv(s):
        try:
            return s.recv(65536)
        except OSError:
            return b""

    KV_CALL = b"POST /v3/kv/"

    def _pump(self, src, dst, data, count=False):
        tail = b""  # the end of what came before, so that a call split between reads is seen
        while data:
            if count:
                seen = tail + data
                with self.mu:
                    self.kv_json_calls += seen.count(self.KV_CALL)
                tail = seen[-(len(self.KV_CALL) - 1):]
            try:
                dst.sendall(data)
            except OSError:
                break
            data = self._recv(src)
        self.hang_up(src, dst)

    def _back(self, upstream, client, conn):
        """etcd -> gateway, until the connection's transaction is swallowed. On HTTP/2, whole
        frames only, so that _h2_forth can put one of its own between them."""
        buf = b""
        while True:
            data = self._recv(upstream)
            if not data:
                break
            if conn["swallow"]:
                continue
            buf += data
            cut = len(buf)
            if conn["h2"]:
                cut = 0
                while len(buf) - cut >= 9 and len(buf) - cut >= 9 + int.from_bytes(buf[cut:cut + 3], "big"):
                    cut += 9 + int.from_bytes(buf[cut:cut + 3], "big")
            try:
                with conn["to_client"]:
                    client.sendall(buf[:cut])
            except OSError:
                break
            buf = buf[cut:]
        self.hang_up(client)

    def _h2_forth(self, client, upstream, data, conn):
        """gateway -> etcd, frame by frame after the preface: the armed transaction's stream
        is caught (its DATA is the gRPC message behind a 5-byte prefix)."""
        buf, pos = data, len(PREFACE)
        forward = True
        out = data[:pos]
        seen, caught_sid, message = set(), None, b""
        dropped = set()  # the streams reset here: none of their frames go to etcd
        while True:
            while len(buf) - pos >= 9:
                length = int.from_bytes(buf[pos:pos + 3], "big")
                if len(buf) - pos < 9 + length:
                    break
                ftype, flags = buf[pos + 3], buf[pos + 4]
                sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
                payload = buf[pos + 9:pos + 9 + length]
                frame = buf[pos:pos + 9 + length]
                pos += 9 + length
                if ftype == FRAME_HEADERS and sid not in seen:
                    seen.add(sid)
                    with self.mu:
                        self.grpc_calls += 1
                        mode, self.armed = self.armed, None
                    if mode:
                        caught_sid = sid
                        if mode == "hold":
                            forward = False
                        elif mode == "reset":
                            dropped.add(sid)
                            rst = (4).to_bytes(3, "big") + bytes([FRAME_RST_STREAM, 0]) + sid.to_bytes(4, "big")
                            try:
                                with conn["to_client"]:
                                    client.sendall(rst + (0).to_bytes(4, "big"))  # NO_ERROR
                            except OSError:
                                pass
                        else:
                            conn["swallow"] = True
                if ftype == FRAME_DATA and sid == caught_sid:
                    if flags & FLAG_PADDED:
                        payload = payload[1:len(payload) - payload[0]]
                    message += payload
                    if flags & FLAG_END_STREAM:
                        with self.mu:
                            self.caught = message[5:]
                if forward and sid not in dropped:
                    out += frame
            buf, pos = buf[pos:], 0
            if out:
                try:
                    upstream.sendall(out)
                except OSError:
                    break
                out = b""
            chunk = self._recv(client)
            if not chunk:
                break
            buf += chunk
        self.hang_up(client, upstream)
