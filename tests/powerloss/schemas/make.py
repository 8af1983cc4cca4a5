#!/usr/bin/env python3
"""Writes a database of the schema the given leasegate writes, as SQL text, for the
migration cuts of tests/powerloss (powerloss.migration_cuts):

    LEASEGATE_BIN=build/leasegate python3 tests/powerloss/schemas/make.py > tests/powerloss/schemas/vN.sql

The server (on a temporary file, a guard in front of a recording upstream) is given rows of
every kind: held writers (some reentered), readers, semaphore permits (one and several to a
lease), locks' values (of held and released locks), released leases, fence marks, guarded
writes (guard marks) and the audit trail they leave; then it stops
and its database is dumped. Run it with the binary of schema N before the schema moves to
N + 1, and commit the file: from then on the power-loss test cuts the migration from N.
The times in the file are shifted to the present when a test loads it (load_fixture).
"""

import os
import sqlite3
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))

import harness  # noqa: E402
from applying_upstream import ApplyingUpstream  # noqa: E402

HOUR_MS = 3600 * 1000


def fill(srv):
    def ok(st, headers, body):
        if st not in (200, 201, 204):
            raise SystemExit("unexpected answer %s: %r" % (st, body))
        return body

    for i in range(40):
        g = ok(*srv.acquire("fx/w%02d" % i, "writer", ttl_ms=HOUR_MS))
        if i % 2:
            ok(*srv.acquire("fx/w%02d" % i, "writer", ttl_ms=HOUR_MS, lease=g["lease"]))
        if i < 10:
            ok(*srv.request("PUT", "/store/fx/w%02d" % i, raw=b"payload %d" % i,
                            headers={"Fencing-Lease": g["lease"], "Content-Type": "application/octet-stream"}))
    for i in range(10):
        for r in range(3):
            ok(*srv.acquire("fx/r%02d" % i, "reader%d" % r, ttl_ms=HOUR_MS, mode="read"))
    for i in range(3):
        for p in range(2):
            ok(*srv.request("POST", "/v1/semaphores/fx/s%d/acquire" % i,
                            body={"owner": "permit%d" % p, "ttl_ms": HOUR_MS, "limit": 3}))
    # Leases of several permits, and locks' values (schema 12 on).
    for i in range(3):
        ok(*srv.request("POST", "/v1/semaphores/fx/p%d/acquire" % i,
                        body={"owner": "wide", "ttl_ms": HOUR_MS, "limit": 5, "permits": 2 + i}))
    for i in range(10):
        g = ok(*srv.acquire("fx/v%02d" % i, "valued", ttl_ms=HOUR_MS))
        ok(*srv.request("PUT", "/v1/locks/fx/v%02d/value" % i, body={"lease": g["lease"], "value": {"n": i}}))
        if i % 2:
            ok(*srv.release("fx/v%02d" % i, g["lease"]))
    for i in range(60):
        g = ok(*srv.acquire("fx/e%02d" % (i % 20), "ended", ttl_ms=HOUR_MS))
        ok(*srv.release("fx/e%02d" % (i % 20), g["lease"]))
        if i < 40:
            ok(*srv.fence("fx/f%02d" % i, g["token"]))


def main():
    up = ApplyingUpstream()
    srv = harness.Server(extra_args=["--guard", "/store/=" + up.url])
    try:
        fill(srv)
        rc = srv.stop()
        if rc != 0:
            raise SystemExit("the server stopped with %r: %s" % (rc, srv.stderr_text()))
        db = sqlite3.connect(srv.data_path)
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        sys.stdout.write("-- A leasegate database of schema version %d, written by tests/powerloss/schemas/make.py\n"
                         "-- (%s); the migration cuts of tests/powerloss start servers on it.\n"
                         % (version, subprocess.run([harness.binary_path(), "--version"], capture_output=True,
                                                    text=True).stdout.strip()))
        for line in db.iterdump():
            sys.stdout.write(line + "\n")
        db.close()
    finally:
        srv.cleanup()
        up.close()


if __name__ == "__main__":
    main()
