#!/usr/bin/env python3
"""Generate a leasegate SQLite database with many locks, for the start-up benchmark.

    python3 bench/gen_db.py OUT.db [--locks 1000000] [--held-every 10] [--schema-from src/store/store_sqlite.c]

The schema is taken from the SCHEMA string in src/store/store_sqlite.c (so it cannot drift).
Lock i is named bench/lock-NNNNNNN and has last_token i+1. Every --held-every-th lock is
held: a random 16-byte lease, owner, token = its last_token, ttl 1 h, expires_at_ms one hour
in the future (so start-up keeps it held; with --expired one hour in the past, so start-up
must release it). The others are idle (holder columns NULL).
meta.last_token = the largest token.
"""
import argparse
import os
import re
import sqlite3
import sys
import time


def schema_from_source(path):
    src = open(path, encoding="utf-8").read()
    m = re.search(r"static const char SCHEMA\[\]\s*=\s*(.*?);\s*\n", src, re.S)
    if not m:
        sys.exit(f"gen_db: no SCHEMA string in {path}")
    # The initializer is string literals and names of macros that are string literals.
    macros = {name: "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body))
              for name, body in re.findall(r"#define (\w+)\s+((?:[^\n]*\\\n)*[^\n]*)", src)}
    parts = []
    for tok in re.findall(r'"(?:[^"\\]|\\.)*"|\w+', m.group(1)):
        parts.append(tok[1:-1] if tok.startswith('"') else macros.get(tok, ""))
    sql = "".join(parts)
    if "CREATE TABLE" not in sql or "locks(" not in sql:
        sys.exit(f"gen_db: SCHEMA in {path} does not look like the schema")
    return sql


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--locks", type=int, default=1_000_000)
    ap.add_argument("--held-every", type=int, default=10)
    ap.add_argument("--expired", action="store_true",
                    help="held locks' expires_at_ms lies in the past (start-up must release them)")
    ap.add_argument("--schema-from", default=os.path.join(here, "..", "src", "store", "store_sqlite.c"))
    a = ap.parse_args()
    if a.locks < 1 or a.held_every < 1:
        sys.exit("gen_db: --locks and --held-every must be >= 1")
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(a.out + suffix)
        except FileNotFoundError:
            pass
    t0 = time.time()
    db = sqlite3.connect(a.out)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    db.executescript(schema_from_source(a.schema_from))
    now_ms = int(time.time() * 1000)
    held = 0

    def rows():
        nonlocal held
        for i in range(a.locks):
            tok = i + 1
            name = f"bench/lock-{i:07d}"
            if i % a.held_every == 0:
                held += 1
                acq = now_ms - 7_200_000 if a.expired else now_ms
                yield (name, tok, os.urandom(16), f"gen-{i % 97}", tok, 3_600_000, acq,
                       acq + 3_600_000, 1, '{"host":"gen"}')
            else:
                yield (name, tok, None, None, None, None, None, None, None, None)

    with db:
        db.executemany(
            "INSERT INTO locks(name, last_token, lease, owner, token, ttl_ms, acquired_at_ms,"
            " expires_at_ms, count, metadata) VALUES(?,?,?,?,?,?,?,?,?,?)", rows())
        db.execute("UPDATE meta SET value = ? WHERE key = 'last_token'", (a.locks,))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    size = os.path.getsize(a.out)
    print(f"gen_db: {a.out}: {a.locks} locks ({held} held), last_token {a.locks}, "
          f"{size / 1e6:.1f} MB, {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
