"""Waiters parked outside libmicrohttpd: they must look exactly like any other
waiter to the client, their connection must serve the next request, and no byte
a client sent after a waiting acquire may be lost.

`leasegate_connections_parked` tells which way a waiter went; the tests that
expect the libmicrohttpd way (chunked bodies, pipelining, Connection: close,
HTTP/1.0) check both the gauge and the answers.
"""

import http.client
import json
import re
import signal
import socket
import subprocess
import time

import harness


def acquire_bytes(name, owner, wait_ms, version="HTTP/1.1", extra_headers="", chunked=False, prefix=b""):
    body = json.dumps({"owner": owner, "ttl_ms": 60000, "wait_ms": wait_ms}).encode()
    head = "POST /v1/locks/%s/acquire %s\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s" % (
        name, version, extra_headers)
    if chunked:
        return prefix + (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + harness.chunked(body, 7)
    return prefix + (head + "Content-Length: %d\r\n\r\n" % len(body)).encode() + body


def release_bytes(name, lease):
    body = json.dumps({"lease": lease}).encode()
    return ("POST /v1/locks/%s/release HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (name, len(body))).encode() + body


def get_bytes(path):
    return ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path).encode()


class ParkingTests(harness.ServerTestCase):
    def parked(self):
        return self.srv.metric("leasegate_connections_parked")

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        self.addCleanup(s.close)
        return s, harness.RawReader(s)

    def hold(self, name):
        st, _, body = self.srv.acquire(name, "holder", ttl_ms=60000)
        self.assertEqual(st, 200, body)
        return body

    def wait_queued(self, name, n=1):
        self.srv.wait_until(lambda: self.srv.waiters(name) == n, what="%d waiter(s) on %s" % (n, name))

    def send_waiter(self, name, data, queued=1, parked=None):
        """A fresh connection sends `data` (a waiting acquire, maybe more); returns
        once `queued` waiters are on the lock, checking the parked gauge if given."""
        s, rr = self.connect()
        s.sendall(data)
        self.wait_queued(name, queued)
        if parked is not None:
            self.assertEqual(self.parked(), parked)
        return s, rr

    def test_waiter_parked_and_connection_serves_next_requests(self):
        name = "park/reuse"
        holder = self.hold(name)
        s, rr = self.send_waiter(name, acquire_bytes(name, "w", 20000), parked=1)
        self.srv.release(name, holder["lease"])
        st, headers, body = rr.read_response()
        grant = json.loads(body)
        self.assertEqual((st, grant["owner"]), (200, "w"), body)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertEqual(headers["cache-control"], "no-store")
        self.assertIn("date", headers)
        self.assertNotIn("connection", headers)
        self.assertEqual(self.parked(), 0)
        # The same connection: a plain request, then a second wait, parked again.
        s.sendall(get_bytes("/v1/locks/" + name))
        st, _, body = rr.read_response()
        self.assertEqual((st, json.loads(body)["holder"]["owner"]), (200, "w"))
        s2, rr2 = self.send_waiter(name, acquire_bytes(name, "w2", 20000), parked=1)
        s.sendall(release_bytes(name, grant["lease"]))
        st, _, body = rr.read_response()
        self.assertEqual(st, 200, body)
        st, _, body = rr2.read_response()
        second = json.loads(body)
        self.assertEqual((st, second["owner"], second["token"]), (200, "w2", grant["token"] + 1))
        s2.sendall(acquire_bytes(name, "w2-again", 300))  # times out while parked
        st, _, body = rr2.read_response()
        self.assertEqual((st, json.loads(body)["error"]), (409, "lock_held"), body)
        s2.sendall(release_bytes(name, second["lease"]))
        self.assertEqual(rr2.read_response()[0], 200)

    def test_request_pipelined_behind_a_wait_is_answered(self):
        """libmicrohttpd has already read the second request: the waiter stays inside it."""
        name = "park/pipelined"
        holder = self.hold(name)
        s, rr = self.send_waiter(name, acquire_bytes(name, "w", 20000) + get_bytes("/healthz"), parked=0)
        self.srv.release(name, holder["lease"])
        st, _, body = rr.read_response()
        grant = json.loads(body)
        self.assertEqual((st, grant["owner"]), (200, "w"), body)
        st, _, body = rr.read_response()
        self.assertEqual((st, json.loads(body)), (200, self.srv.healthy_body()))
        s.sendall(release_bytes(name, grant["lease"]))  # and the connection goes on
        self.assertEqual(rr.read_response()[0], 200)

    def test_request_sent_while_parked_is_answered_after_the_grant(self):
        name = "park/sent-while-parked"
        holder = self.hold(name)
        s, rr = self.send_waiter(name, acquire_bytes(name, "w", 20000), parked=1)
        s.sendall(get_bytes("/healthz"))  # waits in the kernel until the connection is back
        time.sleep(0.2)
        self.assertEqual(self.srv.waiters(name), 1, "the second request must not end the wait")
        self.srv.release(name, holder["lease"])
        st, _, body = rr.read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "w"), body)
        st, _, body = rr.read_response()
        self.assertEqual((st, json.loads(body)), (200, self.srv.healthy_body()))

    def test_no_request_lost_among_many_fresh_connections(self):
        """200 connections opened at once, half sending a GET in the same write
        as their waiting acquire: every request gets its answer, in order."""
        name = "park/many"
        holder = self.hold(name)
        conns = []
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
            self.addCleanup(s.close)
            data = acquire_bytes(name, "w%d" % i, 1500)
            if i % 2:
                data += get_bytes("/healthz")
            s.sendall(data)
            conns.append((i, s, harness.RawReader(s)))
        for i, s, rr in conns:
            st, _, body = rr.read_response()
            self.assertEqual((st, json.loads(body)["error"]), (409, "lock_held"), "connection %d: %r" % (i, body))
            if i % 2:
                st, _, body = rr.read_response()
                self.assertEqual((st, json.loads(body)), (200, self.srv.healthy_body()), "connection %d" % i)
            s.sendall(get_bytes("/v1/locks/" + name))
            st, _, body = rr.read_response()
            self.assertEqual((st, json.loads(body)["holder"]["owner"]), (200, "holder"), "connection %d" % i)
        self.srv.release(name, holder["lease"])

    def test_chunked_waiter_waits_inside_mhd(self):
        name = "park/chunked"
        holder = self.hold(name)
        s, rr = self.send_waiter(name, acquire_bytes(name, "w", 20000, chunked=True), parked=0)
        self.srv.release(name, holder["lease"])
        st, _, body = rr.read_response()
        grant = json.loads(body)
        self.assertEqual((st, grant["owner"]), (200, "w"), body)
        # After a chunked body the connection's byte count is unknown: never parked again.
        s2, rr2 = self.send_waiter(name, acquire_bytes(name, "w2", 20000))
        s.sendall(acquire_bytes(name, "w3", 20000))
        self.wait_queued(name, 2)
        self.assertEqual(self.parked(), 1)
        self.srv.release(name, grant["lease"])
        st, _, body = rr2.read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "w2"), body)
        s2.sendall(release_bytes(name, json.loads(body)["lease"]))
        self.assertEqual(rr2.read_response()[0], 200)
        st, _, body = rr.read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "w3"), body)
        self.srv.release(name, json.loads(body)["lease"])

    def test_connection_close_and_http10_waiters_wait_inside_mhd(self):
        for version, extra in (("HTTP/1.1", "Connection: close\r\n"), ("HTTP/1.0", "")):
            name = "park/closing/" + version[-3:]
            holder = self.hold(name)
            data = acquire_bytes(name, "w", 20000, version=version, extra_headers=extra)
            s, rr = self.send_waiter(name, data, parked=0)
            self.srv.release(name, holder["lease"])
            st, _, body = rr.read_response()
            self.assertEqual((st, json.loads(body)["owner"]), (200, "w"), body)
            s.settimeout(5)
            self.assertEqual(s.recv(1), b"", "%s %s: connection left open" % (version, extra))
            self.srv.release(name, json.loads(body)["lease"])

    def test_leading_empty_line_is_not_miscounted(self):
        """Empty lines before a request line are skipped by libmicrohttpd and not in
        its header size: the waiter is not parked, and still answered."""
        name = "park/leading-crlf"
        holder = self.hold(name)
        s, rr = self.send_waiter(name, acquire_bytes(name, "w", 20000, prefix=b"\r\n"), parked=0)
        self.srv.release(name, holder["lease"])
        st, _, body = rr.read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "w"), body)
        self.srv.release(name, json.loads(body)["lease"])

    def test_parked_hangup_leaves_queue_and_grant_goes_on(self):
        name = "park/hangup"
        holder = self.hold(name)
        socks = []
        for i in range(3):
            socks.append(self.send_waiter(name, acquire_bytes(name, "w%d" % i, 20000), queued=i + 1))
        self.assertEqual(self.parked(), 3)
        socks[0][0].close()
        self.wait_queued(name, 2)
        self.assertEqual(self.parked(), 2)
        self.srv.release(name, holder["lease"])
        st, _, body = socks[1][1].read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "w1"), body)
        socks[1][0].sendall(release_bytes(name, json.loads(body)["lease"]))
        self.assertEqual(socks[1][1].read_response()[0], 200)
        st, _, body = socks[2][1].read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "w2"), body)
        self.srv.release(name, json.loads(body)["lease"])

    def test_waiters_doze_and_are_woken_every_way(self):
        """A parked waiter is kept as a compact record while it waits (dormant.h,
        `leasegate_waiters_dormant`), and made a whole request again for each
        way its wait can end: a timeout, a hang-up, a grant, in FIFO order."""
        name = "park/doze"
        dormant = lambda: self.srv.metric("leasegate_waiters_dormant")
        holder = self.hold(name)
        a = self.send_waiter(name, acquire_bytes(name, "a", 60000), queued=1)
        b = self.send_waiter(name, acquire_bytes(name, "b", 300), queued=2)
        c = self.send_waiter(name, acquire_bytes(name, "c", 60000), queued=3)
        d = self.send_waiter(name, acquire_bytes(name, "d", 60000), queued=4)
        self.assertEqual((self.parked(), dormant()), (4, 4))
        # b's wait runs out: woken to answer 409, its connection serves on.
        st, _, body = b[1].read_response()
        self.assertEqual((st, json.loads(body)["error"]), (409, "lock_held"), body)
        b[0].sendall(get_bytes("/v1/locks/" + name))
        st, _, body = b[1].read_response()
        self.assertEqual((st, json.loads(body)["waiters"]), (200, 3), body)
        self.assertEqual(dormant(), 3)
        # a hangs up: woken to leave the queue.
        a[0].close()
        self.wait_queued(name, 2)
        self.assertEqual((self.parked(), dormant()), (2, 2))
        # The release hands the lock to c (the oldest left), woken before its grant,
        # then c's release to d.
        self.srv.release(name, holder["lease"])
        st, _, body = c[1].read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "c"), body)
        self.assertEqual(dormant(), 1)
        c[0].sendall(release_bytes(name, json.loads(body)["lease"]))
        self.assertEqual(c[1].read_response()[0], 200)
        st, _, body = d[1].read_response()
        self.assertEqual((st, json.loads(body)["owner"]), (200, "d"), body)
        self.assertEqual((self.parked(), dormant()), (0, 0))
        d[0].sendall(release_bytes(name, json.loads(body)["lease"]))
        self.assertEqual(d[1].read_response()[0], 200)


def socket_send_queue(server_port, client_port):
    """(bytes queued to send, send buffer size) of the server's side of one
    connection, from `ss` (iproute2), or None."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", "( sport = :%d and dport = :%d )"
                          % (server_port, client_port)], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"skmem:\(([^)]*)\)", out)
    if not m:
        return None
    fields = dict(re.match(r"([a-z_]+)(\d+)", kv).groups() for kv in m.group(1).split(","))
    return int(fields["w"]), int(fields["tb"])


def settled_send_queue(server_port, client_port):
    """The send queue once it stops changing (bounded)."""
    last = None
    for _ in range(100):
        time.sleep(0.01)
        q = socket_send_queue(server_port, client_port)
        if q == last:
            return q
        last = q
    return last


class ParkingServerTests(harness.unittest.TestCase):
    def stuck_connection(self, srv, name):
        """A connection whose answers the server can no longer write: the client
        does not read, and the server's send buffer is full. `name` must be held
        with a large metadata (its GET answers fill the buffer quickly). Returns
        the socket and the number of answers queued on it."""
        s = socket.socket()
        self.addCleanup(s.close)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.connect(("127.0.0.1", srv.port))
        cport = s.getsockname()[1]
        sent = 0
        polls = 0
        base = self.requests_total(srv)  # counts itself

        def queue_once_all_read():
            """The send queue, once the server has read every request sent
            (each poll of the count is a request too)."""

            def all_read():
                nonlocal polls
                polls += 1
                return self.requests_total(srv) == base + sent + polls
            srv.wait_until(all_read, timeout=10, what="the server read all %d requests" % sent)
            return settled_send_queue(srv.port, cport)

        # Fill the server's send buffer with answers this client never reads,
        # until what is queued comes near the buffer's size: a round must not
        # reach it (each answer holds the metadata twice, in `holder` and in
        # `holders`, and the kernel counts about twice its bytes).
        q = None
        for _ in range(100):
            s.sendall(get_bytes("/v1/locks/" + name) * 10)
            sent += 10
            q = queue_once_all_read()
            self.assertIsNotNone(q, "ss shows no such connection")
            if q[0] > q[1] - 600000:
                break
        # Then small answers, each batch sent once the last was read and well
        # inside the room left: a quarter of it at the cost per answer the last
        # batch showed (one at a time at first, and again at the end).
        # libmicrohttpd must not be left halfway through an answer, nor with
        # requests it cannot answer, or it never reads the acquire. (One at a
        # time all the way took some 2,000 rounds of `ss`, over 200 s on a
        # loaded machine, and the file then passed ctest's TIMEOUT.)
        cost = None
        for _ in range(3000):
            if q[0] >= q[1]:
                break
            n = 1 if cost is None else max(1, (q[1] - q[0]) // (4 * cost))
            s.sendall(get_bytes("/healthz") * n)
            sent += n
            before = q[0]
            q = queue_once_all_read()
            self.assertIsNotNone(q, "ss shows no such connection")
            cost = max(128, -(-(q[0] - before) // n))  # bytes the kernel counts per answer, rounded up
        self.assertGreaterEqual(q[0], q[1], "could not fill the server's send buffer: %r" % (q,))
        return s, sent

    def test_answer_the_client_does_not_read_is_given_up_after_idle_timeout(self):
        """A parked answer that cannot be written (the client stopped reading)
        must not hold its connection, slot and grant for ever."""
        with harness.Server(["--idle-timeout", "2"]) as srv:
            name = "park/stuck"
            st, _, _ = srv.acquire(name, "h", ttl_ms=600000, metadata={"pad": "x" * 4000})
            self.assertEqual(st, 200)
            s, _ = self.stuck_connection(srv, name)
            s.sendall(acquire_bytes(name, "w", 200))  # parks, then its 409 cannot be written
            srv.wait_until(lambda: srv.waiters(name) == 0 and self.parked(srv) == 1, timeout=10,
                           what="the wait over, its answer stuck in the parked connection")
            srv.wait_until(lambda: self.parked(srv) == 0, timeout=15,
                           what="the stuck answer given up after --idle-timeout")

    def test_answer_written_once_the_client_reads_again(self):
        """A parked answer that did not fit in the socket goes out when the
        client makes room, after every earlier answer, and the connection then
        serves the next request."""
        with harness.Server(["--idle-timeout", "60"]) as srv:
            name = "park/slow-reader"
            st, _, holder = srv.acquire(name, "h", ttl_ms=600000, metadata={"pad": "x" * 4000})
            self.assertEqual(st, 200)
            s, sent = self.stuck_connection(srv, name)
            s.sendall(acquire_bytes(name, "w", 200))
            srv.wait_until(lambda: srv.waiters(name) == 0 and self.parked(srv) == 1, timeout=10,
                           what="the wait over, its answer waiting for room")
            rr = harness.RawReader(s)
            for i in range(sent):
                st, _, _ = rr.read_response()
                self.assertEqual(st, 200, "answer %d of %d" % (i + 1, sent))
            st, _, body = rr.read_response()
            self.assertEqual((st, json.loads(body)["error"]), (409, "lock_held"), body)
            srv.wait_until(lambda: self.parked(srv) == 0, what="the connection handed back")
            s.sendall(get_bytes("/v1/locks/" + name))
            st, _, body = rr.read_response()
            self.assertEqual((st, json.loads(body)["holder"]["token"]), (200, holder["token"]), body)

    def parked(self, srv):
        return srv.metric("leasegate_connections_parked")

    def requests_total(self, srv):
        return srv.metric("leasegate_http_requests_total")

    def test_connection_close_in_any_connection_header(self):
        with harness.Server() as srv:
            name = "park/two-connection-headers"
            st, _, holder = srv.acquire(name, "h", ttl_ms=60000)
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            self.addCleanup(s.close)
            s.sendall(acquire_bytes(name, "w", 20000,
                                    extra_headers="Connection: keep-alive\r\nConnection: TE, Close\r\n"))
            srv.wait_until(lambda: srv.waiters(name) == 1, what="waiter queued")
            self.assertEqual(self.parked(srv), 0)
            srv.release(name, holder["lease"])
            rr = harness.RawReader(s)
            st, headers, body = rr.read_response()
            self.assertEqual((st, json.loads(body)["owner"]), (200, "w"), body)
            s.settimeout(5)
            self.assertEqual(s.recv(1), b"", "connection left open despite Connection: close")

    def test_parked_waiters_count_against_max_connections(self):
        with harness.Server(["--max-connections", "16"]) as srv:
            name = "park/limit"
            st, _, holder = srv.acquire(name, "h", ttl_ms=60000)
            self.assertEqual(st, 200)
            waiters = []  # with srv.client's connection, 16 in all
            for i in range(15):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                self.addCleanup(s.close)
                s.sendall(acquire_bytes(name, "w%d" % i, 20000))
                waiters.append(s)

            def refused():
                extra = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                try:
                    extra.sendall(get_bytes("/healthz"))
                    extra.settimeout(5)
                    return extra.recv(100) == b""
                except (ConnectionResetError, BrokenPipeError):
                    return True
                finally:
                    extra.close()

            # Once the 15 waiters are parked, no further connection is served.
            srv.wait_until(refused, what="a 17th connection refused")
            waiters[0].close()
            check = srv.new_client()
            self.addCleanup(check.close)

            def one_left():
                # The server may accept this connection before it has seen the
                # hang-up, and then refuses it: the slot is not free yet.
                try:
                    return srv.waiters(name, check) == 14
                except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                    check.close()
                    return False

            srv.wait_until(one_left, what="15 queued, then one left")
            st, _, body = check.release(name, holder["lease"])
            self.assertEqual(st, 200, body)
            st, _, body = harness.read_response(waiters[1])
            self.assertEqual((st, json.loads(body)["owner"]), (200, "w1"), body)

    def test_shutdown_answers_parked_waiters_503(self):
        srv = harness.Server()
        self.addCleanup(srv.cleanup)
        name = "park/shutdown"
        st, _, _ = srv.acquire(name, "h", ttl_ms=60000)
        self.assertEqual(st, 200)
        readers = []
        for i in range(3):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            self.addCleanup(s.close)
            s.sendall(acquire_bytes(name, "w%d" % i, 20000))
            readers.append((s, harness.RawReader(s)))
        srv.wait_until(lambda: srv.waiters(name) == 3, what="3 waiters")
        self.assertEqual(self.parked(srv), 3)
        srv.proc.send_signal(signal.SIGTERM)
        for s, rr in readers:
            st, headers, body = rr.read_response()
            self.assertEqual((st, json.loads(body)["error"]), (503, "overloaded"), body)
            self.assertEqual(headers.get("retry-after"), "1", "a parked 503 says when to retry too")
        srv.stop_clean()
        for s, rr in readers:
            s.settimeout(5)
            self.assertEqual(s.recv(1), b"", "connection left open after the server exited")


if __name__ == "__main__":
    harness.run_tests()
