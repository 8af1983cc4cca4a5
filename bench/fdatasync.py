#!/usr/bin/env python3
"""The durable floor of one commit on a file system: a bare pwrite + fdatasync, timed.

    python3 bench/fdatasync.py DIR [--n 500] [--bytes 4096]

Writes a file in DIR (the data directory's file system), grown to its full size and made durable
first, then times N rounds of one pwrite of BYTES at the next offset (wrapping around, so the file
never grows: as SQLite's WAL, rewritten from its start after a checkpoint) followed by fdatasync.
Prints one line: fdatasync_mean_us=... fdatasync_p50_us=... fdatasync_p99_us=... n=...
A group commit that makes a grant durable cannot take less: one hand-off of a lock from one
client to the next, each commit before its answer, is bounded by 1 / (this + one request's round
trip). The file is removed at the end.
"""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--bytes", type=int, default=4096)
    a = ap.parse_args()
    if not 1 <= a.n <= 100_000 or not 512 <= a.bytes <= 1 << 20:
        sys.exit("fdatasync: --n 1..100000, --bytes 512..1048576")
    path = os.path.join(a.dir, f"fdatasync-probe.{os.getpid()}")
    slots = 64
    buf = os.urandom(a.bytes)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for i in range(slots):
            os.pwrite(fd, buf, i * a.bytes)
        os.fsync(fd)
        took = []
        for i in range(a.n):
            t0 = time.perf_counter_ns()
            if os.pwrite(fd, buf, (i % slots) * a.bytes) != a.bytes:
                sys.exit("fdatasync: short write")
            os.fdatasync(fd)
            took.append(time.perf_counter_ns() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    took.sort()
    mean = sum(took) / len(took) / 1000
    print(f"fdatasync_mean_us={mean:.1f} fdatasync_p50_us={took[len(took) // 2] / 1000:.1f} "
          f"fdatasync_p99_us={took[min(len(took) - 1, len(took) * 99 // 100)] / 1000:.1f} n={a.n}")


if __name__ == "__main__":
    main()
