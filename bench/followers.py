#!/usr/bin/env python3
"""Server memory per client that waits: a long-poll acquire (parked), a watch
(GET /v1/locks/NAME?index=), an events long-poll (GET /v1/events?wait_ms=) and an
event stream (GET /v1/events/stream).

    python3 bench/followers.py [N]        # N clients of each kind (default 2000)

Each kind gets a fresh server (LEASEGATE_BIN, default build/leasegate, copied first so a
rebuild cannot change it) on a free 127.0.0.1 port with a temporary data directory; N
raw connections send the request and wait; the growth of the server's VmRSS divided by N
is reported, and /metrics confirms that all N are waiting. Every server is stopped by PID.
"""

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
GAUGES = {"acquire": "leasegate_connections_parked", "watch": "leasegate_watches",
          "poll": None, "stream": "leasegate_event_streams"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, workdir):
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:%d" % self.port, "--data",
                                      os.path.join(workdir, "db"), "--max-connections", str(N + 100),
                                      # one peer (this machine) holds them all
                                      "--peer-max-connections", str(N + 100), "--peer-max-polls", str(N + 100),
                                      "--peer-max-half-sent", str(N + 100)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                self.get("/healthz")
                return
            except OSError:
                time.sleep(0.02)
        raise SystemExit("the server did not start")

    def get(self, path):
        with urllib.request.urlopen(self.base + path, timeout=10) as r:
            return r.read().decode()

    def post(self, path, body):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])

    def metric(self, name):
        for line in self.get("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def request_for(kind, srv, i):
    if kind == "acquire":
        body = json.dumps({"owner": "w%d" % i, "wait_ms": 600000})
        return ("POST /v1/locks/bench/held/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n%s" % (len(body), body))
    if kind == "watch":
        index = json.loads(srv.get("/v1/locks/bench/held"))["index"] if i == 0 else request_for.index
        request_for.index = index
        return "GET /v1/locks/bench/held?index=%d&wait_ms=300000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % index
    if kind == "poll":
        latest = json.loads(srv.get("/v1/events"))["latest"] if i == 0 else request_for.latest
        request_for.latest = latest
        return "GET /v1/events?after=%d&wait_ms=300000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % latest
    return "GET /v1/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def measure(binary, kind):
    workdir = tempfile.mkdtemp(prefix="lg-followers-")
    srv = Server(binary, workdir)
    socks = []
    try:
        srv.post("/v1/locks/bench/held/acquire", {"owner": "holder", "ttl_ms": 600000})
        time.sleep(0.3)
        before = srv.rss_kb()
        for i in range(N):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(request_for(kind, srv, i).encode())
            socks.append(s)
        gauge = GAUGES[kind]
        for _ in range(500):
            if gauge is None or srv.metric(gauge) == N:
                break
            time.sleep(0.02)
        else:
            raise SystemExit("%s: only %s of %d are waiting" % (kind, srv.metric(gauge), N))
        time.sleep(1)
        return (srv.rss_kb() - before) / N
    finally:
        for s in socks:
            s.close()
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < N + 200:
        raise SystemExit("N=%d needs %d file descriptors; this shell allows %d" % (N, N + 200, hard))
    src = os.environ.get("LEASEGATE_BIN", os.path.join(HERE, "..", "build", "leasegate"))
    tmp = tempfile.mkdtemp(prefix="lg-followers-bin-")
    binary = os.path.join(tmp, "leasegate")
    shutil.copy2(src, binary)
    try:
        print("| client waiting (%d of them) | server KB each |" % N)
        print("|---|---|")
        for kind, what in (("acquire", "long-poll acquire (parked)"), ("watch", "watch, `GET /v1/locks/NAME?index=`"),
                           ("poll", "events long-poll, `GET /v1/events?wait_ms=`"),
                           ("stream", "event stream, `GET /v1/events/stream`")):
            print("| %s | %.1f |" % (what, measure(binary, kind)), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
