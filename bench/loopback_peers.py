#!/usr/bin/env python3
"""Ten loopback addresses against --max-connections (issue 39, item 2).

    python3 bench/loopback_peers.py [ADDRESSES] [PER_ADDRESS]    # default 10 x 125

One server (LEASEGATE_BIN, default build/leasegate) on a dual-stack socket ([::]:PORT) with
--auth-file and --max-connections 1000 (so --peer-max-half-sent is its default, 125).
From each of 127.0.0.2 .. 127.0.0.(ADDRESSES+1), PER_ADDRESS connections each send half a
request head and stop. Then a client with a key asks GET /v1/locks/x from ::1 (another
peer). Reports how many connections the server holds (its open descriptors beyond those it
had before: what took from --max-connections), whether the keyed client got an answer, and
the server's leasegate_peers gauge. The server is stopped by its PID.
"""

import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ADDRESSES = int(sys.argv[1]) if len(sys.argv) > 1 else 10
PER_ADDRESS = int(sys.argv[2]) if len(sys.argv) > 2 else 125


def free_port():
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::", 0))
        return s.getsockname()[1]


def main():
    binary = os.environ.get("LEASEGATE_BIN", os.path.join(HERE, "..", "build", "leasegate"))
    work = tempfile.mkdtemp(prefix="lg-loopback-")
    out = subprocess.run([binary, "keygen", "victim", "client", "v/"], capture_output=True, text=True, check=True)
    key, line = out.stdout.splitlines()
    keys = os.path.join(work, "keys")
    with open(keys, "w") as f:
        f.write(line + "\n")
    os.chmod(keys, 0o600)
    port = free_port()
    proc = subprocess.Popen([binary, "serve", "--listen", "[::]:%d" % port, "--data", os.path.join(work, "db"),
                             "--auth-file", keys, "--max-connections", "1000", "--idle-timeout", "120"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socks = []
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        base_fds = len(os.listdir("/proc/%d/fd" % proc.pid))
        for a in range(2, ADDRESSES + 2):
            for _ in range(PER_ADDRESS):
                s = socket.socket()
                s.settimeout(5)
                s.bind(("127.0.0.%d" % a, 0))
                try:
                    s.connect(("127.0.0.1", port))
                    s.sendall(b"POST /v1/locks/v/1/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
                except OSError:
                    pass
                socks.append(s)
        time.sleep(1)
        held = len(os.listdir("/proc/%d/fd" % proc.pid)) - base_fds
        answered, peers = "no answer", "?"
        try:
            c = http.client.HTTPConnection("::1", port, timeout=5)
            c.request("GET", "/v1/locks/v/x", headers={"Authorization": "Bearer " + key})
            r = c.getresponse()
            r.read()
            answered = "HTTP %d" % r.status
            c.request("GET", "/metrics")
            for ln in c.getresponse().read().decode().splitlines():
                if ln.startswith("leasegate_peers "):
                    peers = ln.split()[1]
        except OSError as e:
            answered = "no answer (%s)" % e.__class__.__name__
        print("%d addresses x %d half-sent connections (%d), --max-connections 1000: the server holds %d; "
              "a keyed client on ::1: %s; leasegate_peers %s" % (ADDRESSES, PER_ADDRESS, len(socks), held, answered,
                                                                  peers))
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
