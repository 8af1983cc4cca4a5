#!/usr/bin/env python3
"""What one change costs when many unread watches wait on a large lock view (issue 39, item 1).

    python3 bench/watch_amplification.py [WATCHES] [-- EXTRA SERVE FLAGS...]   # default 500

One fresh server (LEASEGATE_BIN, default build/leasegate, copied first so that a rebuild
cannot change it) with --auth-file, on a free 127.0.0.1 port and a temporary data directory:
  1. the hostile key (orders/) takes 100 read leases of orders/big, each with 4 KiB of
     metadata (a view of about 440 KB), and parks WATCHES watches
     GET /v1/locks/orders/big?index=N&wait_ms=300000 on sockets it never reads;
  2. the victim key (billing/) makes acquire+release pairs, one at a time, throughout;
  3. the hostile key renews one of its leases: every watch is due.
Reports, as the largest growth seen over the 10 s after the renew against the moment before
it: the server's RSS, the kernel's TCP memory of the connections to the server (from
`ss -tm`: what the unread sockets hold, at the server's ends and at the clients'), the sum,
and /proc/net/sockstat's TCP mem (host-wide, so other processes' sockets add noise); the victim's p50, p99 and max per pair
in the 2 s before the renew and for the pairs begun in the 3 s after it; how many watches were admitted (a share may refuse some: 429).
Every server is stopped by its PID.
"""

import http.client
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
READERS = 100
WINDOW_S = 10  # sampled after the renew: longer than the slowest wake-up measured (main, 2,000 watches)
STORM_S = 3    # the victim's pairs begun this long after the renew are its latency during the wake-up
PAD = "x" * (4096 - 16)  # {"pad":"..."}: 4 KiB of metadata per lease


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
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

    def call(self, method, path, body=None, ok=(200,)):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status not in ok:
            raise SystemExit("%s %s: %d %s" % (method, path, r.status, data[:200]))
        return json.loads(data) if data[:1] == b"{" else data.decode()


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def sockstat_tcp_bytes():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


SKMEM = re.compile(r"skmem:\(r(\d+),rb\d+,t(\d+),tb\d+,f\d+,w(\d+)")


def tcp_bytes(port, end="sport"):
    """Kernel memory of the TCP sockets of the server's port (end "sport": the server's
    ends, "dport": its clients')."""
    out = subprocess.run(["ss", "-tmnH", "( %s = :%d )" % (end, port)], capture_output=True, text=True).stdout
    return sum(int(r) + max(int(t), int(w)) for r, t, w in SKMEM.findall(out))


def sample(pid, port):
    return (rss_bytes(pid), tcp_bytes(port, "sport"), tcp_bytes(port, "dport"), sockstat_tcp_bytes())


def metric(port, key, name):
    c = Client(port, key)
    try:
        for line in c.call("GET", "/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    finally:
        c.conn.close()
    return None


class Victim(threading.Thread):
    def __init__(self, port, key):
        super().__init__(daemon=True)
        self.client = Client(port, key)
        self.samples = []  # (end time, seconds)
        self.stop = threading.Event()

    def run(self):
        i = 0
        while not self.stop.is_set():
            t = time.perf_counter()
            g = self.client.call("POST", "/v1/locks/billing/%d/acquire" % (i % 16), {"owner": "victim"})
            self.client.call("POST", "/v1/locks/billing/%d/release" % (i % 16), {"lease": g["lease"]})
            self.samples.append((time.perf_counter(), time.perf_counter() - t))
            i += 1


def stats(samples):
    times = sorted(s for _, s in samples)
    if not times:
        return (0.0, 0.0, 0.0)
    return times[len(times) // 2] * 1000, times[min(len(times) - 1, len(times) * 99 // 100)] * 1000, times[-1] * 1000


def run(binary, watches, extra):
    work = tempfile.mkdtemp(prefix="lg-watchamp-")
    keys = os.path.join(work, "keys")
    hostile_key, hostile_line = keygen(binary, "hostile", "client", "orders/")
    victim_key, victim_line = keygen(binary, "victim", "client", "billing/")
    admin_key, admin_line = keygen(binary, "admin", "admin")
    with open(keys, "w") as f:
        f.write("\n".join([hostile_line, victim_line, admin_line]) + "\n")
    os.chmod(keys, 0o600)
    port = free_port()
    n = str(watches + 500)
    args = [binary, "serve", "--listen", "127.0.0.1:%d" % port, "--data", os.path.join(work, "db"), "--auth-file",
            keys, "--max-connections", n, "--peer-max-connections", n, "--peer-max-polls", n, "--key-max-polls", n,
            "--peer-max-half-sent", n, "--key-max-held", "1000"] + extra
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socks = []
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        hostile = Client(port, hostile_key)
        leases = [hostile.call("POST", "/v1/locks/orders/big/acquire",
                               {"owner": "reader-%d" % i, "mode": "read", "ttl_ms": 600000,
                                "metadata": {"pad": PAD}})["lease"] for i in range(READERS)]
        view = hostile.call("GET", "/v1/locks/orders/big")
        view_bytes = len(json.dumps(view))
        req = ("GET /v1/locks/orders/big?index=%d&wait_ms=300000 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Authorization: Bearer %s\r\n\r\n" % (view["index"], hostile_key)).encode()
        for _ in range(watches):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(req)
            socks.append(s)
        # Admitted watches wait; refused ones were answered 429 (unread here, as the rest).
        deadline = time.monotonic() + 60
        admitted = 0
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = metric(port, admin_key, "leasegate_watches")
            if now == admitted:
                break
            admitted = now
        victim = Victim(port, victim_key)
        victim.start()
        time.sleep(2)
        before = sample(proc.pid, port)
        t_renew = time.perf_counter()
        hostile.call("POST", "/v1/locks/orders/big/renew", {"lease": leases[0]})
        peak = [0] * 5
        end = time.monotonic() + WINDOW_S
        while time.monotonic() < end:
            now = sample(proc.pid, port)
            grow = [a - b for a, b in zip(now, before)]
            grow.insert(3, grow[0] + grow[1] + grow[2])
            peak = [max(a, b) for a, b in zip(peak, grow)]
            time.sleep(0.05)
        victim.stop.set()
        victim.join(60)
        left = metric(port, admin_key, "leasegate_watches")
        calm = [s for s in victim.samples if s[0] < t_renew]
        # The pairs that ended within STORM_S of the renew, and every one that began in it.
        storm = [s for s in victim.samples if s[0] >= t_renew and s[0] - s[1] < t_renew + STORM_S]
        return {"view_bytes": view_bytes, "admitted": admitted, "left": left, "peak": peak,
                "calm": stats(calm), "storm": stats(storm), "pairs": (len(calm), len(storm))}
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    watches = int(argv[0]) if argv else 500
    src = os.environ.get("LEASEGATE_BIN", os.path.join(HERE, "..", "build", "leasegate"))
    tmp = tempfile.mkdtemp(prefix="lg-watchamp-bin-")
    binary = os.path.join(tmp, "leasegate")
    shutil.copy(src, binary)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        r = run(binary, watches, extra)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mb = lambda b: b / 1e6
    print("view of orders/big: %d bytes; %d watches sent, %d admitted, %s still waiting 10 s after the renew"
          % (r["view_bytes"], watches, r["admitted"], r["left"]))
    print("growth after one renew (peak over %d s): server RSS %.1f MB, kernel TCP memory of its connections "
          "%.1f MB at the server's ends + %.1f MB at the clients', sum %.1f MB; host-wide sockstat TCP mem %.1f MB"
          % ((WINDOW_S,) + tuple(mb(x) for x in r["peak"])))
    print("victim acquire+release (p50 ms, p99 ms, max ms): before %.2f %.2f %.2f (%d pairs), "
          "begun in the %d s after the renew %.2f %.2f %.2f (%d pairs)"
          % (r["calm"] + (r["pairs"][0], STORM_S) + r["storm"] + (r["pairs"][1],)))


if __name__ == "__main__":
    main()
