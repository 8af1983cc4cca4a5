#!/usr/bin/env python3
"""Generate a leasegate SQLite database with many locks, for the start-up benchmark.

    python3 bench/gen_db.py OUT.db --bin build/leasegate [--locks 1000000] [--held-every 10] [--expired]

The database is made the way the server makes a new one: the binary is started once on an empty
file (`serve --data OUT.db` on a free loopback port), which creates its schema, and stopped; then
the locks are inserted into the tables it created, by column name (the columns are read from the
database, so a column the server added and this script does not know is left to its default).
Two layouts are known, told apart by the tables the server created:
  - a lock space table (`lockspace`, schema 11 on): a name's record (token 0, last_token) and
    each lease's record (keyed by its token) are rows of one table;
  - a table per lock (`locks`, schema 10): the writer in its lock's row.
Anything else stops the script with the tables it found, so a schema change that moves the locks
elsewhere fails here (and in CI's smoke of bench/compare.sh) instead of measuring nothing.

Lock i is named bench/lock-NNNNNNN and has last_token i+1. Every --held-every-th lock is held by
a writer: a random 16-byte lease, owner, token = its last_token, ttl 1 h, expires_at_ms one hour
in the future (so start-up keeps it held; with --expired, in the past, so start-up must release
it). meta.last_token = the largest token.
"""
import argparse
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

# The stored enums (src/core/locktab.h: "stored enums numbered explicitly").
KIND_LOCK = 0
MODE_WRITE = 0
TOKEN_OF_NAME_RECORD = 0  # a name's own record in the lock space (a lease's is keyed by its token)


def make_empty(binary, out):
    """Start the server on an empty OUT and stop it once it serves: the server writes its schema."""
    with tempfile.TemporaryDirectory(prefix="gen_db.") as tmp:
        log_out, log_err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        with open(log_out, "w") as so, open(log_err, "w") as se:
            p = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data", out],
                                 stdout=so, stderr=se, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if re.search(r"^leasegate: listening on ", open(log_out).read(), re.M):
                    break
                if p.poll() is not None:
                    sys.exit(f"gen_db: {binary} exited with {p.returncode}: {open(log_err).read().strip()}")
                time.sleep(0.05)
            else:
                sys.exit(f"gen_db: {binary} did not report its port within 30 s")
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=30)
            if rc != 0:
                sys.exit(f"gen_db: {binary} stopped with {rc}: {open(log_err).read().strip()}")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def columns(db, table):
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def insert(db, table, rows):
    """INSERT rows (dicts of column -> value, every dict with the same keys) into TABLE by name."""
    have = set(columns(db, table))
    it = iter(rows)
    first = next(it, None)
    if first is None:
        return
    names = list(first)
    missing = [n for n in names if n not in have]
    if missing:
        sys.exit(f"gen_db: the server's table {table} has no column {', '.join(missing)} "
                 f"(it has {', '.join(sorted(have))}): update bench/gen_db.py")
    sql = f"INSERT INTO {table}({', '.join(names)}) VALUES({', '.join('?' * len(names))})"

    def values():
        yield tuple(first[n] for n in names)
        for r in it:
            yield tuple(r[n] for n in names)
    db.executemany(sql, values())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bin", default=os.path.join(here, "..", "build", "leasegate"),
                    help="the leasegate binary that makes the empty database (default build/leasegate)")
    ap.add_argument("--locks", type=int, default=1_000_000)
    ap.add_argument("--held-every", type=int, default=10)
    ap.add_argument("--expired", action="store_true",
                    help="held locks' expires_at_ms lies in the past (start-up must release them)")
    a = ap.parse_args()
    if a.locks < 1 or a.held_every < 1:
        sys.exit("gen_db: --locks and --held-every must be >= 1")
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(a.out + suffix)
        except FileNotFoundError:
            pass
    t0 = time.time()
    make_empty(a.bin, a.out)
    db = sqlite3.connect(a.out)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    now_ms = int(time.time() * 1000)
    held = 0

    def holder(i, tok):
        acq = now_ms - 7_200_000 if a.expired else now_ms
        return {"lease": os.urandom(16), "owner": f"gen-{i % 97}", "ttl_ms": 3_600_000,
                "acquired_at_ms": acq, "expires_at_ms": acq + 3_600_000, "count": 1,
                "metadata": '{"host":"gen"}'}

    def lockspace_rows():
        nonlocal held
        for i in range(a.locks):
            tok, name = i + 1, f"bench/lock-{i:07d}"
            yield {"kind": KIND_LOCK, "name": name, "token": TOKEN_OF_NAME_RECORD, "last_token": tok}
            if i % a.held_every == 0:
                held += 1
                yield {"kind": KIND_LOCK, "name": name, "token": tok, "last_token": None,
                       "mode": MODE_WRITE, **holder(i, tok)}

    def locks_rows():
        nonlocal held
        idle = dict.fromkeys(holder(0, 0), None)
        for i in range(a.locks):
            tok, name = i + 1, f"bench/lock-{i:07d}"
            if i % a.held_every == 0:
                held += 1
                yield {"name": name, "last_token": tok, "token": tok, **holder(i, tok)}
            else:
                yield {"name": name, "last_token": tok, "token": None, **idle}

    with db:
        if "lockspace" in tables:
            # a name's record and a lease's have different columns: two passes of one shape each
            insert(db, "lockspace", (r for r in lockspace_rows() if r["token"] == TOKEN_OF_NAME_RECORD))
            held = 0
            insert(db, "lockspace", (r for r in lockspace_rows() if r["token"] != TOKEN_OF_NAME_RECORD))
        elif "locks" in tables and "lease" in columns(db, "locks"):
            insert(db, "locks", locks_rows())
        else:
            sys.exit(f"gen_db: the server made tables {', '.join(sorted(tables))} (schema version "
                     f"{version[0] if version else '?'}), none of which gen_db knows: update bench/gen_db.py")
        if db.execute("UPDATE meta SET value = ? WHERE key = 'last_token'", (a.locks,)).rowcount != 1:
            sys.exit("gen_db: the server's meta table has no last_token")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    size = os.path.getsize(a.out)
    print(f"gen_db: {a.out}: schema {version[0] if version else '?'}, {a.locks} locks ({held} held), "
          f"last_token {a.locks}, {size / 1e6:.1f} MB, {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
