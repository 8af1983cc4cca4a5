#!/usr/bin/env python3
"""leasegate example: fenced writes to PostgreSQL from Python 3.11+ (psycopg2, and the
client library in clients/python).

It takes the lock LOCK, and writes WRITES times under that one lease, each write its own
transaction carrying the lease's fencing token, so that the database itself refuses a
write from a holder that stalled past its lease once a newer holder has written:

  FENCE=row    pattern 1, the fence in the row:
                 UPDATE counters SET value = value + 1, fence = $token
                 WHERE id = $key AND fence <= $token RETURNING value
               no row: a newer token has written the row; nothing changed
  FENCE=table  pattern 2, a fence table, in the same transaction as the writes:
                 INSERT INTO fences ... ON CONFLICT (resource) DO UPDATE SET fence = ...
                 WHERE fences.fence <= EXCLUDED.fence RETURNING fence
               no row: stale, roll back; otherwise append a row to counter_entries

`<=`, not `<`: the holder writes several times with one token. The tables are in
schema.sql beside this file (apply it once). docs/fencing-sql.md explains both patterns.

There is deliberately no lease.check() before a write: a check narrows the window in
which a paused process can write late, but cannot close it (the pause can come right
after the check); the condition in the database closes it.

Configuration (environment variables, all optional):
  PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ...
                    the database, as for psql (libpq's variables)
  LEASEGATE_SERVER  base URL of leasegate, or several, comma-separated
                                                   (default http://127.0.0.1:7400)
  KEY               the counter to write           (default counter)
  LOCK              the lock, and the fence table's resource (default: KEY)
  FENCE             row or table                   (default row)
  WRITES            how many writes under the lease (default 2)
  OWNER             owner label shown to others    (default python-<host>-<pid>)
  TTL_MS            lease time-to-live             (default 15000)
  WAIT_MS           how long acquire may wait      (default 60000)
  WORK_MS           pretend to work this long before the first write (default 0)

Prints `OWNER: holding LOCK with token T` once the lock is granted, then one line per
write: `OWNER: write I/N token T: KEY OLD -> NEW`.

Exit status: 0 when every write was applied; 1 with a message on stderr when the
database refused a write as stale (nothing of that write is applied), on a database error,
a lost lease, or a failure to reach leasegate; 2 on a bad configuration value or when
psycopg2 is not installed.
"""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import leasegate  # noqa: E402  (found through the path above, or installed with pip)

try:
    import psycopg2  # Debian: apt-get install python3-psycopg2; elsewhere: pip install psycopg2
except ImportError:
    sys.stderr.write("fenced_write.py: psycopg2 is missing (Debian: apt-get install python3-psycopg2)\n")
    sys.exit(2)


class ExampleError(Exception):
    """Something that stops the example: exit 1 with the message."""


class Stale(Exception):
    """The database refused our token: a newer holder has written."""

    def __init__(self, fence):
        super().__init__(fence)
        self.fence = fence


def env_int(name, default):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        sys.stderr.write("fenced_write.py: %s must be a whole number, got %r\n" % (name, raw))
        sys.exit(2)
    return value


SERVER = os.environ.get("LEASEGATE_SERVER") or "http://127.0.0.1:7400"
KEY = os.environ.get("KEY") or "counter"
LOCK = os.environ.get("LOCK") or KEY
FENCE = os.environ.get("FENCE") or "row"
WRITES = env_int("WRITES", 2)
OWNER = os.environ.get("OWNER") or "python-%s-%d" % (socket.gethostname(), os.getpid())
TTL_MS = env_int("TTL_MS", 15000)
WAIT_MS = env_int("WAIT_MS", 60000)
WORK_MS = env_int("WORK_MS", 0)
if FENCE not in ("row", "table"):
    sys.stderr.write("fenced_write.py: FENCE must be row or table, got %r\n" % FENCE)
    sys.exit(2)


def write_row(cur, token):
    """Pattern 1: the row carries its own fence. Returns (old, new) value."""
    # The row must exist for the UPDATE to find it; a new row starts at fence 0.
    cur.execute("INSERT INTO counters (id) VALUES (%s) ON CONFLICT (id) DO NOTHING", (KEY,))
    cur.execute("UPDATE counters SET value = value + 1, fence = %(token)s"
                " WHERE id = %(key)s AND fence <= %(token)s RETURNING value",
                {"token": token, "key": KEY})
    row = cur.fetchone()
    if row is None:  # 0 rows: the row's fence is above our token
        cur.execute("SELECT fence FROM counters WHERE id = %s", (KEY,))
        raise Stale(cur.fetchone()[0])
    return row[0] - 1, row[0]


def write_table(cur, token):
    """Pattern 2: claim the fence of LOCK first, then write any rows. Returns (old, new) number."""
    cur.execute("INSERT INTO fences AS f (resource, fence) VALUES (%(lock)s, %(token)s)"
                " ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence"
                " WHERE f.fence <= EXCLUDED.fence RETURNING fence",
                {"lock": LOCK, "token": token})
    if cur.fetchone() is None:  # no row: the fence is above our token
        cur.execute("SELECT fence FROM fences WHERE resource = %s", (LOCK,))
        raise Stale(cur.fetchone()[0])
    # The fence row is now locked until COMMIT: another writer under LOCK waits at its own
    # claim, so this read stays true until we commit.
    cur.execute("SELECT coalesce(max(n), 0) FROM counter_entries WHERE counter = %s", (KEY,))
    last = cur.fetchone()[0]
    cur.execute("INSERT INTO counter_entries (counter, n, token, owner) VALUES (%s, %s, %s, %s)",
                (KEY, last + 1, token, OWNER))
    return last, last + 1


def main():
    try:
        db = psycopg2.connect("")  # everything from PGHOST, PGPORT, PGUSER, ... as for psql
    except psycopg2.Error as e:
        sys.stderr.write("fenced_write.py [%s]: database: %s\n" % (OWNER, str(e).strip()))
        return 1
    write = write_row if FENCE == "row" else write_table
    client = leasegate.Client(SERVER, owner=OWNER)
    stale = None
    try:
        try:
            with client.lock(LOCK, ttl="%dms" % TTL_MS, wait="%dms" % WAIT_MS,
                             metadata={"example": "sql-python", "pid": os.getpid()}) as lease:
                print("%s: holding %s with token %d" % (OWNER, LOCK, lease.token), flush=True)
                if WORK_MS:
                    time.sleep(WORK_MS / 1000.0)  # a long pause here is what fencing is for
                for i in range(1, WRITES + 1):
                    try:
                        with db:  # one transaction: COMMIT at the end, ROLLBACK on an exception
                            with db.cursor() as cur:
                                old, new = write(cur, lease.token)
                    except Stale as e:
                        stale = "write %d/%d: the database refused token %d: the fence of %r is %d " \
                                "(a newer holder has written); nothing written" % (
                                    i, WRITES, lease.token, KEY if FENCE == "row" else LOCK, e.fence)
                        break
                    print("%s: write %d/%d token %d: %s %d -> %d" % (OWNER, i, WRITES, lease.token, KEY, old, new),
                          flush=True)
        except leasegate.LeaseLost as e:
            if stale is None:  # else the refusal below says more
                raise ExampleError("lease lost: %s" % e)
        except leasegate.LockHeld as e:
            raise ExampleError("acquire: lock %r still held after waiting %d ms by %s"
                               % (LOCK, WAIT_MS, json.dumps(e.body.get("holder"))))
        except leasegate.Unavailable as e:
            raise ExampleError("request failed (%s); is leasegate running at %s?" % (e, SERVER))
        except leasegate.LeasegateError as e:
            raise ExampleError("unexpected HTTP %s: %s" % (e.status, json.dumps(e.body)[:500]))
        except psycopg2.Error as e:
            raise ExampleError("database: %s" % str(e).strip())
        if stale:
            raise ExampleError(stale)
    except ExampleError as e:
        sys.stderr.write("fenced_write.py [%s]: %s\n" % (OWNER, e))
        return 1
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
