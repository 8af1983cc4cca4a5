#!/usr/bin/env python3
"""Generate a leasegate SQLite database with many locks, for the start-up benchmark.

    python3 bench/gen_db.py OUT.db [--locks 1000000] [--held-every 10] [--expired] [--binary build/leasegate]

The database is built the way the server builds one: the leasegate binary creates it (it is
started on OUT.db and stopped), so its schema is the server's; the rows then go into the lock
space as schema 11 keeps it (and 13: its new columns are NULL for a lock's lease; 14 touches only
lock_values, which stays empty) (one row per name, token 0, and one per lease, its token, in the
table lockspace); a database of another version is refused, naming it, so this script moves
with the schema. Lock i is named bench/lock-NNNNNNN and has last_token i+1. Every
--held-every-th lock is held: a random 16-byte lease, owner, token = its last_token, ttl 1 h,
expires_at_ms one hour in the future (so start-up keeps it held; with --expired one hour in the
past, so start-up must release it). meta.last_token = the largest token.
"""
import argparse
import os
import sqlite3
import subprocess
import sys
import time

SCHEMA = 14  # 13 added lockspace's nullable permits and value, and lock_values; 14 lock_values.writes:
             # the rows below are as in 11


def create(binary, path):
    """The server's own empty database at path."""
    proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data", path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        for line in proc.stdout:
            if b"listening on" in line:
                break
        else:
            sys.exit("gen_db: %s did not start: %s" % (binary, proc.stderr.read().decode(errors="replace")[-500:]))
    finally:
        proc.terminate()
        proc.wait(30)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--locks", type=int, default=1_000_000)
    ap.add_argument("--held-every", type=int, default=10)
    ap.add_argument("--expired", action="store_true",
                    help="held locks' expires_at_ms lies in the past (start-up must release them)")
    ap.add_argument("--binary", default=os.environ.get("LEASEGATE_BIN", os.path.join(here, "..", "build", "leasegate")))
    a = ap.parse_args()
    if a.locks < 1 or a.held_every < 1:
        sys.exit("gen_db: --locks and --held-every must be >= 1")
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(a.out + suffix)
        except FileNotFoundError:
            pass
    t0 = time.time()
    create(a.binary, a.out)
    db = sqlite3.connect(a.out)
    version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    if version != SCHEMA:
        sys.exit(f"gen_db: {a.binary} made a database of schema {version}; this script writes schema {SCHEMA}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    now_ms = int(time.time() * 1000)
    held = 0

    def names():
        for i in range(a.locks):
            yield (f"bench/lock-{i:07d}", i + 1)

    def leases():
        nonlocal held
        for i in range(0, a.locks, a.held_every):
            held += 1
            acq = now_ms - 7_200_000 if a.expired else now_ms
            yield (f"bench/lock-{i:07d}", i + 1, os.urandom(16), f"gen-{i % 97}", 3_600_000, acq, acq + 3_600_000,
                   '{"host":"gen"}')

    with db:
        db.executemany("INSERT INTO lockspace(kind, name, token, last_token) VALUES(0, ?, 0, ?)", names())
        db.executemany("INSERT INTO lockspace(kind, name, token, lease, owner, mode, ttl_ms, acquired_at_ms,"
                       " expires_at_ms, count, metadata, lock_delay_ms) VALUES(0, ?, ?, ?, ?, 0, ?, ?, ?, 1, ?, 0)",
                       leases())
        db.execute("UPDATE meta SET value = ? WHERE key = 'last_token'", (a.locks,))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    size = os.path.getsize(a.out)
    print(f"gen_db: {a.out}: {a.locks} locks ({held} held), last_token {a.locks}, "
          f"{size / 1e6:.1f} MB, {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
