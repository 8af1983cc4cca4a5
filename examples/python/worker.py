#!/usr/bin/env python3
"""leasegate example worker: Python 3.11+, with the client library in clients/python.

ITERATIONS times, it does the classic fenced read-modify-write:

  1. acquire LOCK, long-polling up to WAIT_MS for it      POST /v1/locks/LOCK/acquire
  2. keep the lease alive: the library's watchdog renews every TTL_MS/3 for as long
     as the `with` block runs                             POST /v1/locks/LOCK/renew
  3. read the counter through the guard (404 means 0)     GET  /store/KEY
  4. write counter+1 through the guard, with the lease    PUT  /store/KEY
       Fencing-Lease: <lease from acquire>
  5. release the lock at the end of the block             POST /v1/locks/LOCK/release

The guard (`leasegate serve --guard /store/=http://storage/`) binds /store/KEY to the
lock named KEY, so LOCK defaults to KEY. It forwards the PUT only while our lease holds
that lock, so a worker that stalled past its lease gets 409 stale_token instead of
overwriting a newer value. (A LOCK other than KEY needs a guard with one lock for the
whole prefix: --guard /store/=http://storage/,lock=LOCK.)

Configuration (environment variables, all optional):
  LEASEGATE_SERVER  base URL of leasegate, or several, comma-separated
                                                   (default http://127.0.0.1:7400)
  KEY               object name under the guard    (default counter)
  LOCK              lock name                      (default: KEY)
  ITERATIONS        how many increments            (default 1)
  OWNER             owner label shown to others    (default python-<host>-<pid>)
  STORE_PREFIX      the guard's path prefix        (default /store/)
  TTL_MS            lease time-to-live             (default 15000)
  WAIT_MS           how long acquire may wait      (default 60000)
  WORK_MS           pretend to work this long between read and write (default 0)

Exit status: 0 on success; 1 with a message on stderr on any unexpected HTTP status,
a lost lease or a connection failure (retried on every server for up to WAIT_MS, or
5 s when that is shorter); 2 on a bad configuration value.
"""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import leasegate  # noqa: E402  (found through the path above, or installed with pip)


class WorkerError(Exception):
    """Something the worker did not expect: it stops and exits 1."""


def env_int(name, default):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        sys.stderr.write("worker.py: %s must be a whole number, got %r\n" % (name, raw))
        sys.exit(2)
    return value


SERVER = os.environ.get("LEASEGATE_SERVER") or "http://127.0.0.1:7400"
KEY = os.environ.get("KEY") or "counter"
LOCK = os.environ.get("LOCK") or KEY  # the guard binds /store/KEY to lock KEY
ITERATIONS = env_int("ITERATIONS", 1)
OWNER = os.environ.get("OWNER") or "python-%s-%d" % (socket.gethostname(), os.getpid())
STORE_PREFIX = "/" + (os.environ.get("STORE_PREFIX") or "/store/").strip("/") + "/"
TTL_MS = env_int("TTL_MS", 15000)
WAIT_MS = env_int("WAIT_MS", 60000)
WORK_MS = env_int("WORK_MS", 0)

STORE_PATH = STORE_PREFIX + KEY


def unexpected(step, resp):
    return WorkerError("%s: unexpected HTTP %d: %s" % (step, resp.status, resp.text[:500]))


def one_iteration(client, i):
    try:
        # 1. Acquire. The request stays open until we are granted the lock (waiters
        #    are served in arrival order) or WAIT_MS passes (LockHeld). 2. From here
        #    on the watchdog renews the lease every TTL/3 until the block ends.
        with client.lock(LOCK, ttl="%dms" % TTL_MS, wait="%dms" % WAIT_MS,
                         metadata={"example": "python", "pid": os.getpid()}) as lease:
            # 3. Read the counter through the guard. Reads need no lease (the guard
            #    drops it); a missing object is 0.
            resp = lease.request("GET", STORE_PATH)
            if resp.status == 404:
                value = 0
            elif resp.status == 200:
                try:
                    value = int(resp.text.strip())
                except ValueError:
                    raise WorkerError("read: %r does not hold a number: %r" % (KEY, resp.body[:100]))
            else:
                raise unexpected("read", resp)

            if WORK_MS:
                time.sleep(WORK_MS / 1000.0)  # the "work"; the watchdog keeps the lease alive
            lease.check()  # LeaseLost if the watchdog could not keep it

            # 4. Write value+1 through the guard with our lease: it proves that we hold
            #    the lock /store/KEY is bound to. 409 stale_token: our lease no longer
            #    holds it (someone newer does); 428: no lease sent.
            resp = lease.request("PUT", STORE_PATH, str(value + 1), {"Content-Type": "text/plain"})
            if resp.status not in (200, 201, 204):
                raise unexpected("write", resp)
        # 5. The block's end released the lock, also when a step above failed, so the
        #    next waiter is woken at once (not when our TTL runs out).
    except leasegate.LockHeld as e:
        raise WorkerError("acquire: lock %r still held after waiting %d ms by %s"
                          % (LOCK, WAIT_MS, json.dumps(e.body.get("holder"))))
    except leasegate.LeaseLost as e:
        raise WorkerError("lease lost: %s" % e)
    except leasegate.Unavailable as e:
        raise WorkerError("request failed (%s); is leasegate running at %s?" % (e, SERVER))
    except leasegate.LeasegateError as e:
        raise WorkerError("unexpected HTTP %s: %s" % (e.status, json.dumps(e.body)[:500]))
    print("%s: iteration %d/%d token %d: %s %d -> %d"
          % (OWNER, i, ITERATIONS, lease.token, KEY, value, value + 1), flush=True)


def main():
    client = leasegate.Client(SERVER, owner=OWNER)
    try:
        for i in range(1, ITERATIONS + 1):
            one_iteration(client, i)
    except WorkerError as e:
        sys.stderr.write("worker.py [%s]: %s\n" % (OWNER, e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
