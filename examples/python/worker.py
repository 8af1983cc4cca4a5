#!/usr/bin/env python3
"""leasegate example worker: Python 3, standard library only.

ITERATIONS times, it does the classic fenced read-modify-write:

  1. acquire LOCK, long-polling up to WAIT_MS for it      POST /v1/locks/LOCK/acquire
  2. keep the lease alive: renew every TTL_MS/3 in a background thread for as long
     as the work runs                                     POST /v1/locks/LOCK/renew
  3. read the counter through the guard (404 means 0)     GET  /store/KEY
  4. write counter+1 through the guard, with the lease    PUT  /store/KEY
       Fencing-Lease: <lease from acquire>
  5. release the lock                                     POST /v1/locks/LOCK/release

The guard (`leasegate serve --guard /store/=http://storage/`) binds /store/KEY to the
lock named KEY, so LOCK defaults to KEY. It forwards the PUT only while our lease holds
that lock, so a worker that stalled past its lease gets 409 stale_token instead of
overwriting a newer value. (A LOCK other than KEY needs a guard with one lock for the
whole prefix: --guard /store/=http://storage/,lock=LOCK.)

Configuration (environment variables, all optional):
  LEASEGATE_SERVER  base URL of leasegate          (default http://127.0.0.1:7400)
  KEY               object name under the guard    (default counter)
  LOCK              lock name                      (default: KEY)
  ITERATIONS        how many increments            (default 1)
  OWNER             owner label shown to others    (default python-<host>-<pid>)
  STORE_PREFIX      the guard's path prefix        (default /store/)
  TTL_MS            lease time-to-live             (default 15000)
  WAIT_MS           how long acquire may wait      (default 60000)
  WORK_MS           pretend to work this long between read and write (default 0)

Exit status: 0 on success; 1 with a message on stderr on any unexpected HTTP status,
a lost lease or a connection failure; 2 on a bad configuration value.
"""

import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request


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


SERVER = (os.environ.get("LEASEGATE_SERVER") or "http://127.0.0.1:7400").rstrip("/")
KEY = os.environ.get("KEY") or "counter"
LOCK = os.environ.get("LOCK") or KEY  # the guard binds /store/KEY to lock KEY
ITERATIONS = env_int("ITERATIONS", 1)
OWNER = os.environ.get("OWNER") or "python-%s-%d" % (socket.gethostname(), os.getpid())
STORE_PREFIX = "/" + (os.environ.get("STORE_PREFIX") or "/store/").strip("/") + "/"
TTL_MS = env_int("TTL_MS", 15000)
WAIT_MS = env_int("WAIT_MS", 60000)
WORK_MS = env_int("WORK_MS", 0)

STORE_URL = SERVER + STORE_PREFIX + KEY


def http(method, url, body=None, headers=None, timeout=30.0):
    """One HTTP request; returns (status, body bytes) for every status, 4xx/5xx included.

    urllib raises HTTPError for statuses >= 400; it carries the answer, so it is
    unwrapped here and the callers decide which statuses they expect.
    """
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        try:
            return e.code, e.read()
        finally:
            e.close()
    except (urllib.error.URLError, OSError) as e:
        raise WorkerError("%s %s: request failed (%s); is leasegate running at %s?"
                          % (method, url, getattr(e, "reason", e), SERVER))


def lock_api(action, fields, timeout=30.0):
    """POST /v1/locks/LOCK/ACTION with a JSON body; returns (status, parsed JSON)."""
    status, data = http("POST", "%s/v1/locks/%s/%s" % (SERVER, LOCK, action),
                        body=json.dumps(fields).encode(),
                        headers={"Content-Type": "application/json"}, timeout=timeout)
    try:
        return status, json.loads(data.decode("utf-8"))
    except ValueError:
        raise WorkerError("%s: HTTP %d with a body that is not JSON: %r" % (action, status, data[:300]))


def unexpected(step, status, body):
    """The error for an answer we did not expect; body is parsed JSON or raw bytes."""
    if isinstance(body, bytes):
        text = body[:500].decode("utf-8", "replace")
    else:
        text = json.dumps(body)[:500]
    return WorkerError("%s: unexpected HTTP %d: %s" % (step, status, text))


class Renewer(threading.Thread):
    """Renews the lease every TTL/3 until stop() is called.

    If a renewal fails (409 not_holder: the lease expired, e.g. after a long pause),
    it records the error; the main thread checks `lost` before and after writing.
    Even without that check the guard would reject the write with 409 stale_token.
    """

    def __init__(self, lease, ttl_ms):
        super().__init__(daemon=True)
        self.lease = lease
        self.interval = ttl_ms / 3000.0
        self.lost = None
        self.renewals = 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.wait(self.interval):
            try:
                status, body = lock_api("renew", {"lease": self.lease})
            except WorkerError as e:
                self.lost = str(e)
                return
            if status != 200:
                self.lost = str(unexpected("renew", status, body))
                return
            self.renewals += 1

    def stop(self):
        self._stop_event.set()
        self.join(10.0)


def one_iteration(i):
    # 1. Acquire. The request stays open until we are granted the lock (waiters are
    #    served in arrival order) or WAIT_MS passes (409 lock_held).
    status, grant = lock_api("acquire", {
        "owner": OWNER, "ttl_ms": TTL_MS, "wait_ms": WAIT_MS,
        "metadata": {"example": "python", "pid": os.getpid()},
    }, timeout=WAIT_MS / 1000.0 + 30)
    if status == 409 and grant.get("error") == "lock_held":
        raise WorkerError("acquire: lock %r still held after waiting %d ms by %s"
                          % (LOCK, WAIT_MS, json.dumps(grant.get("holder"))))
    if status != 200:
        raise unexpected("acquire", status, grant)
    lease, token = grant["lease"], grant["token"]

    # 2. Renew once right away (checked here), then every TTL/3 in the background for
    #    as long as the work below runs.
    renewer = None
    released = False
    try:
        status, body = lock_api("renew", {"lease": lease})
        if status != 200:
            raise unexpected("renew", status, body)
        renewer = Renewer(lease, TTL_MS)
        renewer.start()

        # 3. Read the counter through the guard. Reads need no lease; missing is 0.
        status, data = http("GET", STORE_URL)
        if status == 404:
            value = 0
        elif status == 200:
            try:
                value = int(data.decode("ascii").strip())
            except ValueError:
                raise WorkerError("read: %r does not hold a number: %r" % (KEY, data[:100]))
        else:
            raise unexpected("read", status, data)

        if WORK_MS:
            time.sleep(WORK_MS / 1000.0)  # the "work"; the renewer keeps the lease alive
        if renewer.lost:
            raise WorkerError("lease lost before writing: " + renewer.lost)

        # 4. Write value+1 through the guard with our lease: it proves that we hold the
        #    lock /store/KEY is bound to. 409 stale_token: our lease no longer holds it
        #    (someone newer does); 428: no lease sent.
        status, data = http("PUT", STORE_URL, body=str(value + 1).encode("ascii"), headers={
            "Content-Type": "text/plain",
            "Fencing-Lease": lease,
        })
        if status not in (200, 201, 204):
            raise unexpected("write", status, data)

        # 5. Release, so the next waiter is woken at once (not when our TTL runs out).
        renewer.stop()
        released = True
        status, body = lock_api("release", {"lease": lease})
        if status != 200:
            raise unexpected("release", status, body)
    finally:
        if renewer is not None:
            renewer.stop()
        if not released:
            # Something failed while we held the lock: give it back on a best-effort
            # basis so waiters need not wait for the TTL (errors here are ignored).
            try:
                lock_api("release", {"lease": lease}, timeout=5.0)
            except WorkerError:
                pass
    print("%s: iteration %d/%d token %d: %s %d -> %d"
          % (OWNER, i, ITERATIONS, token, KEY, value, value + 1), flush=True)


def main():
    try:
        for i in range(1, ITERATIONS + 1):
            one_iteration(i)
    except WorkerError as e:
        sys.stderr.write("worker.py [%s]: %s\n" % (OWNER, e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
