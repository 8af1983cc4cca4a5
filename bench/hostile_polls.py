#!/usr/bin/env python3
"""Another tenant's latency while one key holds hostile event long-polls (issue 28).

    python3 bench/hostile_polls.py [POLLS] [PAIRS]     # default 2000 polls, 2000 pairs

Two runs, each on a fresh server (LEASEGATE_BIN, default build/leasegate, copied first so
a rebuild cannot change it) with --auth-file, on a free 127.0.0.1 port and a temporary
data directory:
  control   the victim key (billing/) makes PAIRS acquire+release pairs, one at a time;
  hostile   first the hostile key (orders/) fills the event ring (--events-keep 10000)
            with its own pairs, then holds POLLS long-polls
            GET /v1/events?after=<oldest kept - 1>&prefix=orders/zz-nothing&wait_ms=300000
            (the attack of issue 28: on main every publish re-read the ring once per poll),
            then the victim makes its PAIRS pairs as in the control.
Reports the victim's p50 and p99 per pair and pairs/s in both runs, and the ratio of the
p50s (the goal: within 2x). /metrics confirms that the polls are held throughout. Every
server is stopped by its PID.
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
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
POLLS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
PAIRS = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
RING = 10000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(binary, *args):
    out = subprocess.run([binary, "keygen"] + list(args), capture_output=True, text=True, check=True).stdout
    key, line = out.splitlines()
    return key, line


class Client:
    def __init__(self, port, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise SystemExit("%s %s: %d %s" % (method, path, r.status, data[:200]))
        return json.loads(data) if data[:1] == b"{" else data.decode()

    def pair(self, name):
        g = self.call("POST", "/v1/locks/%s/acquire" % name, {"owner": "bench"})
        self.call("POST", "/v1/locks/%s/release" % name, {"lease": g["lease"]})


class Server:
    def __init__(self, binary, workdir, keys):
        self.port = free_port()
        args = [binary, "serve", "--listen", "127.0.0.1:%d" % self.port, "--data", os.path.join(workdir, "db"),
                "--auth-file", keys, "--events-keep", str(RING), "--max-connections", str(POLLS + 200)]
        # Every client is on this machine: one peer; the key's share of held polls must
        # let the attack's polls in. (A binary from before the shares has none of these.)
        help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
        if "--peer-max-polls" in help_text:
            args += ["--peer-max-connections", str(POLLS + 200), "--peer-max-polls", str(POLLS),
                     "--key-max-polls", str(POLLS), "--peer-max-half-sent", str(POLLS + 200)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise SystemExit("the server did not start")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def metric(c, name):
    # A connection of its own each time: the admin's may have idled out meanwhile.
    c.conn.close()
    for line in c.call("GET", "/metrics").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def measure(victim):
    victim.pair("billing/warm")
    times = []
    start = time.perf_counter()
    for i in range(PAIRS):
        t = time.perf_counter()
        victim.pair("billing/%d" % (i % 16))
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    times.sort()
    return times[len(times) // 2] * 1000, times[len(times) * 99 // 100] * 1000, PAIRS / total


def run(binary, hostile_polls):
    work = tempfile.mkdtemp(prefix="lg-hostile-")
    keys = os.path.join(work, "keys")
    hostile_key, hostile_line = keygen(binary, "hostile", "client", "orders/")
    victim_key, victim_line = keygen(binary, "victim", "client", "billing/")
    admin_key, admin_line = keygen(binary, "admin", "admin")
    with open(keys, "w") as f:
        f.write("\n".join([hostile_line, victim_line, admin_line]) + "\n")
    os.chmod(keys, 0o600)
    srv = Server(binary, work, keys)
    socks = []
    try:
        hostile = Client(srv.port, hostile_key)
        admin = Client(srv.port, admin_key)
        if hostile_polls:
            for _ in range(RING // 2):
                hostile.pair("orders/churn")
            oldest = hostile.call("GET", "/v1/events?prefix=orders/&limit=1")["events"][0]["seq"]
            req = ("GET /v1/events?after=%d&prefix=orders/zz-nothing&wait_ms=300000 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Authorization: Bearer %s\r\n\r\n" % (oldest - 1, hostile_key)).encode()
            for _ in range(hostile_polls):
                s = socket.create_connection(("127.0.0.1", srv.port))
                s.sendall(req)
                socks.append(s)
            # (A server from before the gauge, main before issue 28, is given 5 s.)
            for _ in range(600):
                if metric(admin, "leasegate_event_polls") in (hostile_polls, None):
                    break
                time.sleep(0.05)
            else:
                raise SystemExit("the polls are not all waiting: %s" % metric(admin, "leasegate_event_polls"))
            if metric(admin, "leasegate_event_polls") is None:
                time.sleep(5)
        p50, p99, rate = measure(Client(srv.port, victim_key))
        held = metric(admin, "leasegate_event_polls")
        if held not in (hostile_polls, None):
            raise SystemExit("only %s of %d polls were still held at the end" % (held, hostile_polls))
        return p50, p99, rate
    finally:
        for s in socks:
            s.close()
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    src = os.environ.get("LEASEGATE_BIN", os.path.join(HERE, "..", "build", "leasegate"))
    tmp = tempfile.mkdtemp(prefix="lg-hostile-bin-")
    binary = os.path.join(tmp, "leasegate")
    shutil.copy(src, binary)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        control = run(binary, 0)
        attacked = run(binary, POLLS)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("victim acquire+release, %d pairs one at a time (p50 ms, p99 ms, pairs/s)" % PAIRS)
    print("  control                      %7.2f %7.2f %8.0f" % control)
    print("  with %5d hostile polls      %7.2f %7.2f %8.0f" % ((POLLS,) + attacked))
    print("  p50 ratio (goal <= 2.0)      %7.2f" % (attacked[0] / control[0]))


if __name__ == "__main__":
    main()
