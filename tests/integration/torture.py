#!/usr/bin/env python3
"""Crash torture with a history checker.

    python3 tests/integration/torture.py --cycles N --seed S [--locks L] [--clients C]

One leasegate server (`--guard /store/=<ApplyingUpstream>`) and C client threads that
acquire (try-once and waiting; writers and readers), renew, release, reenter, fence and
write through the guard on a few hundred locks, and take leases of 1..SEM_LIMIT permits of a
few semaphores of SEM_LIMIT permits, with TTLs from 300 ms to 10 s, while the server is
`kill -9`ed at seeded random moments and restarted on the same data file, N times.
Between the kill and the restart the database gets `PRAGMA integrity_check` (read-only;
not on the etcd store, LEASEGATE_TEST_STORE=etcd);
after each restart a probe looks at the leases the clients believe they hold (GET), at
the highest fence marks (a lower token must be refused) and at released leases (a renew
must be refused). Every request and every answer goes into one in-memory history with
wall (time.time(), the clock of the server's *_at_ms) and monotonic times; a request
that got no answer is logged with outcome "unknown", one whose connection was refused
(never sent) with outcome "refused". The clients also write their locks' values (PUT
/v1/locks/NAME/value, each value a unique id), with their writer's lease and with leases that
no longer hold (released ones, readers'), and every GET shows the value.

check(history, applied) then looks at the whole history and reports every violation
with its evidence (see check() for the rules). The seed fixes the kill schedule and each
client's choices; thread interleavings are not reproducible, so a repeat with the same
seed is a similar run, not the same one.

Only 127.0.0.1; every wait is bounded; processes are stopped by PID (harness.Server).
"""

import argparse
import bisect
import collections
import http.client
import itertools
import json
import os
import random
import shutil
import sqlite3
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if not os.environ.get("LEASEGATE_BIN"):
    _default_bin = os.path.join(HERE, "..", "..", "build", "leasegate")
    if os.path.exists(_default_bin):
        os.environ["LEASEGATE_BIN"] = os.path.abspath(_default_bin)

import harness  # noqa: E402
from applying_upstream import ApplyingUpstream  # noqa: E402

INF = float("inf")
TTLS_MS = (300, 400, 600, 1000, 2000, 4000, 10000)
SEM_LIMIT = 3  # every semaphore of a run has this many permits
REQUEST_TIMEOUT_S = 15.0
IDLE_WAIT_S = 60.0

# ---------------------------------------------------------------------------
# History
# ---------------------------------------------------------------------------

_RESP_KEEP = ("error", "reason", "token", "lease", "expires_at_ms", "acquired_at_ms", "ttl_ms",
              "count", "released", "max_token", "holder_token", "last_token", "held", "accepted",
              "field", "result", "rc", "port", "pid", "stderr", "mode", "limit", "permits", "value",
              "value_version", "value_token")


def extract(body):
    """The fields of an answer the checker needs (no metadata, messages, owners)."""
    if isinstance(body, dict):
        d = {k: body[k] for k in _RESP_KEEP if k in body}
        if "holder" in body:
            h = body["holder"]
            d["holder"] = ({k: h.get(k) for k in ("token", "expires_at_ms", "acquired_at_ms", "ttl_ms", "count")}
                           if isinstance(h, dict) else None)
        if isinstance(body.get("holders"), list):  # every holder's token: readers, permits
            d["holders"] = [h.get("token") for h in body["holders"] if isinstance(h, dict)]
        return d
    if body in (None, "", b""):
        return {}
    return {"text": str(body)[:200]}


class Event:
    """One request and its answer (or a driver event: kill, start, integrity, crash, stop).

    Times: s_ms/r_ms are time.time() in ms just before the request was sent and just
    after its answer was read (so the server handled it within [s_ms, r_ms]);
    s_mono/r_mono the same on time.monotonic() (seconds). outcome: "ok" (an answer
    arrived), "unknown" (sent, no answer), "refused" (the connection was refused: never
    sent). resp: the answer's fields (extract())."""

    __slots__ = ("seq", "cycle", "client", "kind", "lock", "lease", "req", "outcome", "status",
                 "resp", "s_ms", "r_ms", "s_mono", "r_mono")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))
        if self.req is None:
            self.req = {}
        if self.resp is None:
            self.resp = {}

    def ok(self, status=None):
        return self.outcome == "ok" and (status is None or self.status == status)

    def to_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    def __repr__(self):
        return describe(self)


def describe(e):
    """One line of evidence for an event."""
    def t(ms):
        if ms is None:
            return "-"
        return "%s.%03d(%0.1f)" % (time.strftime("%H:%M:%S", time.localtime(ms / 1000.0)), int(ms) % 1000, ms)
    parts = ["#%s" % e.seq, "cycle=%s" % e.cycle, "client=%s" % e.client, e.kind]
    if e.lock is not None:
        parts.append(("resource=%s" if e.kind == "fence" else "lock=%s") % e.lock)
    if e.lease:
        parts.append("lease=%s" % e.lease)
    if e.req:
        parts.append("req=%s" % json.dumps(e.req, sort_keys=True))
    parts.append("sent=%s" % t(e.s_ms))
    parts.append("answered=%s" % t(e.r_ms))
    parts.append("outcome=%s" % e.outcome)
    if e.status is not None:
        parts.append("status=%s" % e.status)
    if e.resp:
        parts.append("resp=%s" % json.dumps(e.resp, sort_keys=True))
    return " ".join(parts)


class History:
    def __init__(self):
        self.events = []
        self._seq = itertools.count(1)
        self.cycle = 0

    def add(self, **kw):
        e = Event(seq=next(self._seq), cycle=self.cycle, **kw)
        self.events.append(e)  # list.append is atomic under the GIL
        return e

    def save(self, path):
        with open(path, "w") as f:
            for e in self.events:
                f.write(json.dumps(e.to_dict(), sort_keys=True) + "\n")

    @staticmethod
    def load(path):
        h = History()
        with open(path) as f:
            for line in f:
                if line.strip():
                    h.events.append(Event.from_dict(json.loads(line)))
        return h


# ---------------------------------------------------------------------------
# HTTP without retries (a retried request would be two requests in one event)
# ---------------------------------------------------------------------------

class Http:
    def __init__(self, port_fn):
        self.port_fn = port_fn
        self.conn = None
        self.conn_port = None

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = None

    def call(self, method, path, body=None, raw=None, headers=None, timeout=REQUEST_TIMEOUT_S):
        """-> (outcome, status, headers, parsed body, s_ms, r_ms, s_mono, r_mono)."""
        port = self.port_fn()
        if port is None:
            now = time.time() * 1000.0
            m = time.monotonic()
            return "refused", None, {}, None, now, now, m, m
        if self.conn is None or self.conn_port != port:
            self.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            self.conn_port = port
            try:
                self.conn.connect()
            except OSError:
                self.close()
                now = time.time() * 1000.0
                m = time.monotonic()
                return "refused", None, {}, None, now, now, m, m
        self.conn.timeout = timeout
        self.conn.sock.settimeout(timeout)
        hdrs = dict(headers or {})
        payload = None
        if raw is not None:
            payload = raw
        elif body is not None:
            payload = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        s_mono = time.monotonic()
        s_ms = time.time() * 1000.0
        try:
            self.conn.request(method, path, body=payload, headers=hdrs)
            resp = self.conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self.close()
            r_ms = time.time() * 1000.0
            return "unknown", None, {}, None, s_ms, r_ms, s_mono, time.monotonic()
        r_ms = time.time() * 1000.0
        r_mono = time.monotonic()
        rh = {k.lower(): v for k, v in resp.getheaders()}
        if resp.will_close:
            self.close()
        parsed = None
        if data:
            try:
                parsed = json.loads(data.decode("utf-8", "replace"))
            except ValueError:
                parsed = data.decode("utf-8", "replace")
        return "ok", resp.status, rh, parsed, s_ms, r_ms, s_mono, r_mono


# ---------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------

def lock_name(i):
    return "t/k%03d" % i


def sem_name(i):
    return "s/k%03d" % i


def is_sem(name):
    """The history names semaphores s/... and locks t/...: the namespaces are apart."""
    return name.startswith("s/")


def api(name):
    return "/v1/semaphores/" if is_sem(name) else "/v1/locks/"


def fence_resource(lock):
    return "f/" + lock


class Actor:
    """Sends requests and logs them (the clients and the probe)."""

    def __init__(self, name, driver):
        self.name = name
        self.driver = driver
        self.http = Http(driver.current_port)

    def send(self, kind, method, path, lock=None, lease=None, req=None, body=None, raw=None,
             headers=None, timeout=REQUEST_TIMEOUT_S):
        outcome, status, rh, parsed, s_ms, r_ms, s_mono, r_mono = self.http.call(
            method, path, body=body, raw=raw, headers=headers, timeout=timeout)
        resp = extract(parsed)
        if kind == "put" and outcome == "ok" and "x-upstream" in rh:
            resp["upstream"] = True
        e = self.driver.history.add(client=self.name, kind=kind, lock=lock, lease=lease, req=req or {},
                                    outcome=outcome, status=status, resp=resp, s_ms=s_ms, r_ms=r_ms,
                                    s_mono=s_mono, r_mono=r_mono)
        return e

    # Requests ------------------------------------------------------------
    def acquire(self, lock, ttl_ms, wait_ms, mode="write", permits=1):
        body = {"owner": self.name, "ttl_ms": ttl_ms, "wait_ms": wait_ms}
        req = {"ttl_ms": ttl_ms, "wait_ms": wait_ms}
        if is_sem(lock):
            body["limit"] = req["limit"] = SEM_LIMIT
            body["permits"] = req["permits"] = permits
        elif mode == "read":
            body["mode"] = req["mode"] = "read"
        return self.send("acquire", "POST", "%s%s/acquire" % (api(lock), lock), lock=lock, req=req, body=body,
                         timeout=REQUEST_TIMEOUT_S + wait_ms / 1000.0)

    def reenter(self, lock, lease, ttl_ms):
        body = {"owner": self.name, "ttl_ms": ttl_ms, "lease": lease}
        return self.send("reentry", "POST", "/v1/locks/%s/acquire" % lock, lock=lock, lease=lease,
                         req={"ttl_ms": ttl_ms}, body=body)

    def renew(self, lock, lease, ttl_ms=None):
        body = {"lease": lease}
        req = {}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
            req["ttl_ms"] = ttl_ms
        return self.send("renew", "POST", "%s%s/renew" % (api(lock), lock), lock=lock, lease=lease, req=req,
                         body=body)

    def release(self, lock, lease):
        return self.send("release", "POST", "%s%s/release" % (api(lock), lock), lock=lock, lease=lease,
                         body={"lease": lease})

    def get(self, lock):
        return self.send("get", "GET", "%s%s" % (api(lock), lock), lock=lock)

    def fence(self, resource, token):
        return self.send("fence", "POST", "/v1/fence/%s" % resource, lock=resource, req={"token": token},
                         body={"token": token})

    def set_value(self, lock, lease, value_id, if_version=None):
        body = {"lease": lease, "value": value_id}
        req = {"id": value_id}
        if if_version is not None:
            body["if_version"] = req["if_version"] = if_version
        return self.send("value", "PUT", "/v1/locks/%s/value" % lock, lock=lock, lease=lease, req=req, body=body)

    def put(self, lock, lease, token, write_id):
        return self.send("put", "PUT", "/store/%s" % lock, lock=lock, lease=lease,
                         req={"id": write_id, "token": token}, raw=write_id.encode(),
                         headers={"Fencing-Lease": lease, "Content-Type": "application/octet-stream"})


class Client(Actor):
    """One client thread: a few leases at a time (writers, readers, permits), believed
    held until told otherwise."""

    def __init__(self, idx, driver, seed):
        Actor.__init__(self, "c%d" % idx, driver)
        self.rng = random.Random(seed)
        self.held = {}        # lock (or semaphore) -> {lease, token, count, exp, mode}
        self.released = []    # (lock, lease, token) of acknowledged releases
        self.idle = threading.Event()
        self.writes = 0
        self.values = 0
        self.thread = threading.Thread(target=self._main, name=self.name, daemon=True)

    def _pick_lock(self):
        d = self.driver
        if self.rng.random() < 0.2:
            return sem_name(self.rng.randrange(d.sems))
        if self.rng.random() < 0.5:
            return lock_name(self.rng.randrange(d.hot))
        return lock_name(self.rng.randrange(d.locks))

    def _ttl(self):
        return self.rng.choice(TTLS_MS)

    def _main(self):
        d = self.driver
        while not d.stopping.is_set():
            if not d.go.is_set():
                self.http.close()
                self.idle.set()
                d.go.wait(0.2)
                continue
            try:
                self.step()
            except Exception as exc:  # a bug in the driver must not hang the run
                d.driver_errors.append("%s: %r" % (self.name, exc))
                time.sleep(0.05)
        self.http.close()
        self.idle.set()

    def step(self):
        rng = self.rng
        r = rng.random()
        if self.released and r < 0.04:
            lock, lease, token = rng.choice(self.released)
            t = rng.random()
            if t < 0.4:
                self.renew(lock, lease)
            elif t < 0.7 or is_sem(lock):
                self.write(lock, lease, token)
            else:
                self.value(lock, lease)  # must be refused
        elif not self.held or (len(self.held) < 4 and r < 0.40):
            lock = self._pick_lock()
            if lock in self.held:
                self.do_reenter(lock)
            else:
                wait_ms = 0 if rng.random() < 0.55 else rng.randint(20, 1000)
                mode = "read" if not is_sem(lock) and rng.random() < 0.4 else "write"
                # A semaphore's lease of one permit mostly, of several (up to all) often enough.
                permits = rng.choice((1, 1, 1, 2, SEM_LIMIT)) if is_sem(lock) else 1
                e = self.acquire(lock, self._ttl(), wait_ms, mode, permits)
                if e.ok(200):
                    self.held[lock] = {"lease": e.resp["lease"], "token": e.resp["token"], "count": 1,
                                       "exp": e.resp["expires_at_ms"], "mode": mode}
        else:
            lock = rng.choice(sorted(self.held))
            h = self.held[lock]
            a = rng.random()
            if a < 0.25:
                e = self.renew(lock, h["lease"], self._ttl() if rng.random() < 0.7 else None)
                if e.ok(200):
                    h["exp"] = e.resp["expires_at_ms"]
                elif e.ok(409):
                    del self.held[lock]
            elif a < 0.45 or h["count"] >= 3 and a < 0.6:
                e = self.release(lock, h["lease"])
                if e.ok(200):
                    if e.resp.get("released"):
                        del self.held[lock]
                        self.released.append((lock, h["lease"], h["token"]))
                        del self.released[:-30]
                    else:
                        h["count"] = e.resp.get("count", h["count"] - 1)
                elif e.ok(409) or e.outcome == "unknown":
                    del self.held[lock]
            elif a < 0.55:
                self.do_reenter(lock)
            elif a < 0.70:
                self.fence(fence_resource(lock), h["token"])
            elif a < 0.85 and not is_sem(lock) and (h["mode"] == "write" or a < 0.75):
                self.write(lock, h["lease"], h["token"])  # a reader's must be refused
            elif a < 0.95 and not is_sem(lock):
                # A reader's must be refused; a writer's sometimes names the version it read last.
                e = self.value(lock, h["lease"], h.get("value_version") if rng.random() < 0.3 else None)
                if e.ok(200):
                    h["value_version"] = e.resp.get("value_version")
            else:
                e = self.get(lock)
                if e.ok(200):
                    h["value_version"] = e.resp.get("value_version")
        t = rng.random()
        if t < 0.03:
            time.sleep(rng.uniform(0.05, 0.5))   # a pause: leases run out meanwhile
        elif t < 0.23:
            time.sleep(rng.uniform(0, 0.004))

    def do_reenter(self, lock):
        h = self.held[lock]
        if is_sem(lock):  # no reentry for a permit
            e = self.renew(lock, h["lease"], self._ttl())
            if e.ok(200):
                h["exp"] = e.resp["expires_at_ms"]
            elif e.ok(409):
                del self.held[lock]
            return
        e = self.reenter(lock, h["lease"], self._ttl())
        if e.ok(200):
            h["count"] = e.resp.get("count", h["count"] + 1)
            h["exp"] = e.resp["expires_at_ms"]
        elif e.ok(409):
            del self.held[lock]

    def write(self, lock, lease, token):
        self.writes += 1
        return self.put(lock, lease, token, "%s-%d" % (self.name, self.writes))

    def value(self, lock, lease, if_version=None):
        self.values += 1
        return self.set_value(lock, lease, "%s-v%d" % (self.name, self.values), if_version)


def integrity_check(path):
    """PRAGMA integrity_check on a read-only connection -> its result as one string."""
    try:
        con = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5.0)
        try:
            rows = con.execute("PRAGMA integrity_check").fetchall()
        finally:
            con.close()
        return "\n".join(str(r[0]) for r in rows)
    except sqlite3.Error as exc:
        return "sqlite error: %s" % exc


class Result:
    def __init__(self, history, applied, violations, stats, elapsed_s, seed, cycles, driver_errors):
        self.history = history
        self.applied = applied
        self.violations = violations
        self.stats = stats
        self.elapsed_s = elapsed_s
        self.seed = seed
        self.cycles = cycles
        self.driver_errors = driver_errors


class KillNine:
    """How a cycle of the run ends and the next begins: here the server is killed with
    SIGKILL and started again on the same files (the page cache keeps every write).
    tests/powerloss/powerloss.py cuts the power of the server's file system instead."""

    def server(self, torture, args):
        """The (not yet started) harness.Server of the run."""
        return harness.Server(extra_args=args, start=False)

    def load(self, torture, srv, cycle, run_s):
        """The load runs for run_s seconds; returns False when the server ended by itself."""
        deadline = time.monotonic() + run_s
        while time.monotonic() < deadline and srv.running():
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        return srv.running()

    def crash(self, torture, srv, cycle):
        srv.kill9()

    def integrity(self, srv):
        """PRAGMA integrity_check of what the crash left, with no server running."""
        return integrity_check(srv.data_path)

    def restart(self, torture, srv, cycle):
        """Starts the server again (RuntimeError: it did not start)."""
        srv.start()

    def close(self, srv):
        """At the end of the run, once the server stopped."""


class Torture:
    """The whole run; run() returns a Result (the checker already applied)."""

    def __init__(self, cycles, seed, locks=200, clients=8, run_ms=(150, 2200), log=None,
                 keep_dir=False, extra_args=(), rollback_at=None, sems=None, crash=None):
        self.cycles = cycles
        self.seed = seed
        self.locks = locks
        self.hot = max(1, locks // 40)
        self.sems = sems if sems is not None else max(1, clients // 3)
        self.nclients = clients
        self.run_ms = run_ms
        self.log = log or (lambda msg: None)
        self.keep_dir = keep_dir
        self.extra_args = list(extra_args)
        # Fault injection to show that the checker catches lost state end to end: during
        # the down time of cycle rollback_at, the database files are replaced by the copy
        # taken during the down time two cycles earlier (what a server that lost its last
        # commits would look like). Never set in a normal run.
        self.rollback_at = rollback_at
        self.crash = crash if crash is not None else KillNine()
        self.rng = random.Random(seed)
        self.history = History()
        self.go = threading.Event()
        self.stopping = threading.Event()
        self._port = None
        self._port_lock = threading.Lock()
        self.driver_errors = []
        self.released_pool = []   # (lock, lease) of acknowledged releases, for probes
        self._scan_from = 0
        self.fence_marks = {}     # resource -> highest acknowledged max_token

    def current_port(self):
        with self._port_lock:
            return self._port

    def _set_port(self, port):
        with self._port_lock:
            self._port = port

    def _sys(self, kind, **resp):
        now = time.time() * 1000.0
        m = time.monotonic()
        return self.history.add(client="driver", kind=kind, outcome="ok", resp=resp, s_ms=now, r_ms=now,
                                s_mono=m, r_mono=m)

    def _wait_idle(self):
        deadline = time.monotonic() + IDLE_WAIT_S
        for c in self.clients:
            left = deadline - time.monotonic()
            if not c.idle.wait(max(0.0, left)):
                raise RuntimeError("client %s did not come to rest within %.0f s" % (c.name, IDLE_WAIT_S))

    def _scan(self):
        """Fence marks and released leases acknowledged so far (for the probes)."""
        evs = self.history.events
        n = len(evs)
        for e in itertools.islice(evs, self._scan_from, n):
            if e.outcome != "ok":
                continue
            if e.kind == "fence" and e.status in (200, 409) and isinstance(e.resp.get("max_token"), int):
                if e.resp["max_token"] > self.fence_marks.get(e.lock, 0):
                    self.fence_marks[e.lock] = e.resp["max_token"]
            elif e.kind == "release" and e.status == 200 and e.resp.get("released"):
                self.released_pool.append((e.lock, e.lease))
        self._scan_from = n

    def _probe(self, probe):
        """Right after a restart, with the clients at rest: every lock a client believes
        it holds (GET: the holder must still be that lease while its TTL runs), a few
        other locks, the fence marks (one below the mark must be refused) and released
        leases (a renew must be refused). The checker judges the answers."""
        self._scan()
        locks = set()
        for c in self.clients:
            locks.update(c.held)
        others = [lock_name(i) for i in self.rng.sample(range(self.locks), min(10, self.locks))]
        others += [sem_name(i) for i in range(self.sems)]
        for lock in sorted(locks) + others:
            probe.get(lock)
        marks = sorted(self.fence_marks.items())
        if len(marks) > 40:
            marks = self.rng.sample(marks, 40)
        for res, m in marks:
            if m > 1:
                probe.fence(res, m - 1)
        pool = self.released_pool
        sample = pool[-10:] + (self.rng.sample(pool[:-10], min(10, len(pool) - 10)) if len(pool) > 10 else [])
        for lock, lease in sample:
            probe.renew(lock, lease)

    def _rollback_fault(self, srv, cycle):
        files = [srv.data_path + suffix for suffix in ("", "-wal", "-shm")]
        snap = os.path.join(srv.dir, "snapshot")
        if cycle == self.rollback_at - 2:
            os.makedirs(snap, exist_ok=True)
            for f in files:
                if os.path.exists(f):
                    shutil.copyfile(f, os.path.join(snap, os.path.basename(f)))
        elif cycle == self.rollback_at and os.path.isdir(snap):
            for f in files:
                if os.path.exists(f):
                    os.remove(f)
                src = os.path.join(snap, os.path.basename(f))
                if os.path.exists(src):
                    shutil.copyfile(src, f)
            self._sys("fault", what="database files replaced by the copy from cycle %d" % (cycle - 2))

    def run(self):
        t0 = time.monotonic()
        up = ApplyingUpstream()
        srv = None
        args = ["--guard", "/store/=" + up.url] + self.extra_args
        try:
            srv = self.crash.server(self, args)
            self.data_path = srv.data_path
            srv.start()
            self._sys("start", port=srv.port, pid=srv.pid)
            self._set_port(srv.port)
            self.clients = [Client(i, self, self.seed * 1000003 + i) for i in range(self.nclients)]
            probe = Actor("probe", self)
            for c in self.clients:
                c.thread.start()
            for cycle in range(1, self.cycles + 1):
                self.history.cycle = cycle
                for c in self.clients:
                    c.idle.clear()   # set again by each client once it sees the gate closed
                self.go.set()
                if self.rng.random() < 0.2:
                    run_s = self.rng.uniform(0.0, self.run_ms[0]) / 1000.0
                else:
                    run_s = self.rng.uniform(*self.run_ms) / 1000.0
                if not self.crash.load(self, srv, cycle, run_s):
                    self._sys("crash", rc=srv.proc.returncode, stderr=srv.stderr_text()[-3000:])
                pid = srv.pid
                self.crash.crash(self, srv, cycle)
                self._set_port(None)
                self.go.clear()
                self._sys("kill", pid=pid)
                self._wait_idle()
                if not harness.on_etcd():  # on etcd there is no database file to check
                    self._sys("integrity", result=self.crash.integrity(srv))
                if self.rollback_at is not None:
                    self._rollback_fault(srv, cycle)
                try:
                    self.crash.restart(self, srv, cycle)
                except RuntimeError as exc:
                    self._sys("crash", rc=None, stderr=str(exc)[-3000:])
                    self.log("cycle %d: the server did not start again; run ended" % cycle)
                    break
                self._set_port(srv.port)
                self._sys("start", port=srv.port, pid=srv.pid)
                self._probe(probe)
                if cycle % 10 == 0 or cycle == self.cycles:
                    self.log("cycle %d/%d: %d events, %.0f s" % (cycle, self.cycles, len(self.history.events),
                                                               time.monotonic() - t0))
            self.stopping.set()
            self.go.set()
            for c in self.clients:
                c.thread.join(REQUEST_TIMEOUT_S + 5)
            probe.http.close()
            self._set_port(None)
            if srv.running():
                rc = srv.stop()
                self._sys("stop", rc=rc, stderr=srv.stderr_text()[-3000:] if rc != 0 else "")
        finally:
            self.stopping.set()
            self.go.set()
            if srv is not None:
                if self.keep_dir:
                    srv._own_dir = False
                    self.log("data kept in %s" % srv.dir)
                srv.cleanup()
                self.crash.close(srv)
            up.close()
        with up.lock:
            applied = [dict(a) for a in up.applied]
        counters = collections.Counter()
        violations = check(self.history.events, applied, counters)
        st = stats(self.history.events, applied)
        for k, v in counters.items():
            st["checked: " + k] = v
        return Result(self.history, applied, violations, st,
                      time.monotonic() - t0, self.seed, self.cycles, list(self.driver_errors))


def stats(events, applied=()):
    c = collections.Counter()
    for e in events:
        if e.client == "driver":
            c["driver:" + e.kind] += 1
            continue
        key = "%s %s" % (e.kind, e.outcome if e.outcome != "ok" else e.status)
        if e.kind == "get" and e.client == "probe":
            key = "probe " + key
        c[key] += 1
    c["applied writes"] = len(applied)
    c["events"] = len(events)
    return c


# ---------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------

class Violation:
    def __init__(self, prop, message, evidence):
        self.prop = prop
        self.message = message
        self.evidence = list(evidence)

    def __str__(self):
        lines = ["[%s] %s" % (self.prop, self.message)]
        for ev in self.evidence:
            lines.append("    " + (describe(ev) if isinstance(ev, Event) else str(ev)))
        return "\n".join(lines)

    __repr__ = __str__


PROPERTIES = (
    "two-holders",           # a writer's lease and another lease of one lock promised at one instant
    "sem-over-limit",        # more than SEM_LIMIT permits of one semaphore promised at one instant (a
                             # lease holds 1..SEM_LIMIT of them)
    "lease-lost",            # a lease refused (not_holder / guard 409) while promised
    "held-after-restart",    # GET after a restart does not show a lease still promised
    "holder-mismatch",       # GET / lock_held shows another holder while a lease is promised
    "token-unique",          # one token granted to two leases
    "token-changed",         # renew / reentry answered another token than the grant's
    "token-order",           # a grant's token not above a token revealed before it was asked for
    "token-after-restart",   # the same, with a restart in between
    "release-sticks",        # a released lease renewed / reentered / let through afterwards
    "fence-mark",            # a fence mark went back, or a lower token was accepted
    "fence-issued",          # a revealed token refused by the fence as never issued
    "upstream-order",        # applied writes of one path not in token order
    "upstream-stale",        # applied write whose lease had ended (released, superseded) before it was sent
    "read-lease-write",      # the guard let a write carrying a read lease through
    "value-stale",           # a lock's value written (200) by a lease that did not hold it as its writer,
                             # or a refused write's value shown
    "value-lost",            # an acknowledged value write not shown (an older version read after it)
    "integrity",             # PRAGMA integrity_check not ok
    "server-crash",          # the server died by itself, failed to start, or exited non-zero on SIGTERM
)


class _Seg:
    """A lease is promised to hold its lock from this segment's start (an acknowledged
    grant, reentry or renew: server stamp p, answer read at r, sent at s) until the server
    time e it announced, unless cut first: cut_p (server stamp of the lease's next
    acknowledged reentry/renew, which starts the next segment) or cut_ms (wall time when
    the lease's next release / reentry / renew of unknown effect was sent)."""

    __slots__ = ("lease", "token", "lock", "p", "r", "s", "e", "cut_p", "cut_ms", "ev")

    def __init__(self, lease, token, lock, p, ev):
        self.lease = lease
        self.token = token
        self.lock = lock
        self.p = p
        self.r = ev.r_ms
        self.s = ev.s_ms
        self.e = ev.resp["expires_at_ms"]
        self.cut_p = INF
        self.cut_ms = INF
        self.ev = ev

    def end_ms(self):
        return min(self.e, self.cut_p, self.cut_ms)


def _stamp(e):
    """Server wall time (ms, rounded down) of an acknowledged grant/reentry/renew."""
    if e.kind == "acquire":
        return e.resp["acquired_at_ms"]
    return e.resp["expires_at_ms"] - e.resp["ttl_ms"]


def _is_grant(e):
    return e.kind == "acquire" and e.ok(200) and isinstance(e.resp.get("lease"), str)


class _PrefixBest:
    """Of (time, value, item) triples, the one with the largest value among those whose
    time is before a given time."""

    def __init__(self, triples):
        self.times = [t for t, _, _ in triples]
        self.best = []
        best = None
        for x in triples:
            if best is None or x[1] > best[1]:
                best = x
            self.best.append(best)

    def before(self, t):
        i = bisect.bisect_left(self.times, t)
        return self.best[i - 1] if i else None


class _Report:
    def __init__(self, per_key_limit=1):
        self.items = []
        self.seen = collections.Counter()
        self.per_key_limit = per_key_limit

    def add(self, prop, key, message, *evidence):
        k = (prop, key)
        self.seen[k] += 1
        if self.seen[k] <= self.per_key_limit:
            self.items.append(Violation(prop, message, evidence))


def check(events, applied=(), counters=None, notes=None):
    """Checks a whole history; returns a list of Violation (empty: all properties hold).

    Time model. The server stamps a grant with acquired_at_ms and announces expires_at_ms,
    both from its wall clock rounded down, and promises the lease holds until then (its
    boot-clock deadline gets LOCKTAB_DEADLINE_SLACK_MS, 2 ms, more); renew/reentry answers give expires_at_ms and
    ttl_ms, so their stamp is expires_at_ms - ttl_ms. A client's times bracket its request:
    the server handled it after s_ms and before r_ms (same clock as the stamps). A lease's
    promise (a _Seg) starts at an acknowledged grant/reentry/renew and lasts until the
    expiry that answer announced, or until the lease's next request that may end or
    shorten it was sent: a release of any outcome except an acknowledged partial one
    (released: false), a renew/reentry of unknown outcome, a refusal; an acknowledged
    renew/reentry ends it at its own stamp and starts the next one. Two events count as
    ordered only when the evidence orders them for certain: server stamps among
    themselves, client times among themselves, and across the two only "answer read
    before the other request was sent". Nothing is widened beyond that (no slack that
    could hide a violation), and nothing is reported that an honest server could produce.

    The rules (Violation.prop):
    two-holders       an acknowledged grant, reentry or renew of lease B at stamp p while
                      another lease A of the lock was promised, one of them a writer's (two
                      readers share): A's promise started before (A's stamp < p, or A's
                      answer read before B's request was sent), p < A's announced expiry, p
                      before A's next acknowledged renewal's stamp, and B's answer read
                      before A's next ending request was sent.
    sem-over-limit    the same for permits of a semaphore: an acknowledged grant or renew
                      of a lease of n permits while other leases holding more than
                      SEM_LIMIT - n permits together were promised (each lease's permits
                      are its grant's answer's `permits`).
    lease-lost        renew/reentry/release refused not_holder, or a guard write of the
                      lease refused 409, while the lease was certainly promised (promise
                      answer read before the request was sent, its answer read before the
                      announced expiry, nothing sent on the lease in between).
    held-after-restart / holder-mismatch
                      a GET (or a lock_held or semaphore_full answer) certainly inside a
                      lease's promise that does not show that lease's token among the
                      holders (the holder, without a holders list); held-after-restart
                      when a restart lies between the promise and the read (the probes GET
                      every lock a client believes it holds right after each restart).
    token-unique      one token granted to two leases (or one lease id granted twice).
    token-changed     a renew/reentry answer with another token than the grant's.
    token-after-restart / token-order
                      a grant whose token is not above every token revealed (grant, renew,
                      holder in GET/lock_held, GET last_token, fence max_token, guard 409
                      max_token/holder_token) in an answer read before the grant was asked
                      for; token-after-restart when such a token was read before a restart
                      that completed before the grant was asked for.
    release-sticks    after an acknowledged release (released: true) was read, a request
                      of that lease sent later is renewed/reentered (200), let through by
                      the guard (2xx), or a GET/lock_held sent later shows its token as the
                      holder. The probes renew released leases after each restart.
    fence-mark        per resource, a fence answer to a request sent after an acknowledged
                      mark M was read shows max_token < M, or accepts a token < M. The
                      probes send M - 1 for the highest marks after each restart.
    fence-issued      the fence refused a token that had been revealed as never issued.
    upstream-order    the ApplyingUpstream applied writes of one path out of token order,
                      or one whose Fencing-Token is not its lease's token.
    read-lease-write  the guard let a write through (2xx) that carried a read lease.
    upstream-stale    it applied a write whose lease's release had been acknowledged, or
                      whose lock had been granted to a lease with a larger token
                      (acknowledged), before the write was sent ("after a larger token"
                      is added when it also came after a larger applied token).
    value-stale       a value write answered 200 whose lease's release was acknowledged, or
                      whose lock was granted to a lease with a larger token (acknowledged),
                      before the write was sent; one of a read lease; one answered with
                      another token than its lease's; a GET that shows the value of a write
                      that was refused (409).
    value-lost        a GET sent after a value write of version v was acknowledged (or after a
                      read that showed v) shows a version below v; a GET that shows version v
                      of an acknowledged write with another value; two acknowledged writes of
                      one lock with one version.
    integrity         PRAGMA integrity_check between a kill -9 and the restart is not ok.
    server-crash      the server died by itself, did not start, or exited non-zero on the
                      final SIGTERM (sanitizer reports included).
    """
    evs = sorted(events, key=lambda e: e.seq)
    rep = _Report()
    cnt = counters if counters is not None else collections.Counter()
    notes = notes if notes is not None else collections.defaultdict(list)
    starts_ms = sorted((e.s_ms, e.r_ms) for e in evs if e.kind == "start")
    start_s = [a for a, _ in starts_ms]

    def restart_between(a_ms, b_ms):
        """A restart began after a_ms and was complete before b_ms."""
        i = bisect.bisect_right(start_s, a_ms)
        return i < len(starts_ms) and starts_ms[i][1] < b_ms

    # -- driver events ------------------------------------------------------------
    for e in evs:
        if e.kind == "integrity" and e.resp.get("result") != "ok":
            rep.add("integrity", e.seq, "PRAGMA integrity_check after kill -9 is not ok", e)
        elif e.kind == "crash":
            rep.add("server-crash", e.seq, "the server died by itself or did not start", e)
        elif e.kind == "stop" and e.resp.get("rc") != 0:
            rep.add("server-crash", e.seq, "SIGTERM at the end: exit status %r" % e.resp.get("rc"), e)

    # -- leases and their operations ----------------------------------------------
    leases = {}          # lease -> grant event
    by_token = {}        # token -> grant event
    for e in evs:
        if not _is_grant(e):
            continue
        lease, token = e.resp["lease"], e.resp.get("token")
        if lease in leases:
            rep.add("token-unique", lease, "one lease id granted twice", leases[lease], e)
            continue
        leases[lease] = e
        prev = by_token.get(token)
        if prev is not None:
            rep.add("token-unique", token, "token %s granted to two leases" % token, prev, e)
        else:
            by_token[token] = e
    ops = collections.defaultdict(list)
    for e in evs:
        if e.kind in ("reentry", "renew", "release", "put") and e.lease in leases and e.outcome != "refused":
            ops[e.lease].append(e)

    segs_by_lock = collections.defaultdict(list)     # merged segments
    starts_by_lock = collections.defaultdict(list)   # every segment start (unmerged)
    release_acks = {}                                # lease -> acknowledged final release

    def covers(seg, e):
        """seg's promise certainly covers the moment e was handled."""
        return (seg is not None and seg.r <= e.s_ms and e.r_ms < seg.e and e.r_ms < seg.cut_p
                and e.r_ms <= seg.cut_ms)

    for lease, grant in leases.items():
        lock, token = grant.lock, grant.resp["token"]
        lops = sorted(ops.get(lease, ()), key=lambda x: (x.s_ms, x.seq))
        cur = _Seg(lease, token, lock, _stamp(grant), grant)
        segs = [cur]
        for op in lops:
            k = op.kind
            if op.s_ms < grant.r_ms:
                continue  # cannot happen with an honest client: the lease was not known yet
            if k == "put":
                if grant.resp.get("mode") == "read":
                    if op.outcome == "ok" and 200 <= op.status < 300:
                        rep.add("read-lease-write", lease, "the guard let a write with a read lease through",
                                grant, op)
                    continue
                if op.ok(409) and covers(cur, op):
                    rep.add("lease-lost", lease, "the guard refused a write of a lease that was promised "
                            "to hold the lock", cur.ev, op)
                continue
            if op.outcome == "unknown":
                if cur is not None:
                    cur.cut_ms = min(cur.cut_ms, op.s_ms)
                    cur = None
                continue
            if k in ("reentry", "renew") and op.status == 200 and "expires_at_ms" in op.resp:
                if op.resp.get("token") != token:
                    rep.add("token-changed", lease, "%s answered token %r, the grant said %r"
                            % (k, op.resp.get("token"), token), grant, op)
                seg = _Seg(lease, token, lock, _stamp(op), op)
                if cur is not None:
                    cur.cut_p = min(cur.cut_p, seg.p)
                segs.append(seg)
                cur = seg
            elif op.status == 409:
                if covers(cur, op):
                    rep.add("lease-lost", lease, "%s refused (%s) while the lease was promised to hold the lock"
                            % (k, op.resp.get("reason")), cur.ev, op)
                if cur is not None:
                    cur.cut_ms = min(cur.cut_ms, op.s_ms)
                    cur = None
            elif k == "release" and op.status == 200:
                if op.resp.get("released"):
                    release_acks.setdefault(lease, op)
                    if cur is not None:
                        cur.cut_ms = min(cur.cut_ms, op.s_ms)
                        cur = None
        starts_by_lock[lock].extend(segs)
        # Merge a renewal chain: the next segment starts before the previous one's
        # announced end (and nothing else cut it), so the lease held throughout.
        merged = []
        m = None
        for sgm in segs:
            if m is not None and m.cut_ms == INF and m.cut_p == sgm.p and sgm.p < m.e:
                m.e, m.cut_p, m.cut_ms = sgm.e, sgm.cut_p, sgm.cut_ms
                continue
            if m is not None:
                merged.append(m)
            m = _Seg(lease, token, lock, sgm.p, sgm.ev)
            m.e, m.cut_p, m.cut_ms = sgm.e, sgm.cut_p, sgm.cut_ms
        merged.append(m)
        segs_by_lock[lock].extend(merged)

    # -- two holders at once (a writer and anyone; more permits than the limit) ---------
    def mode_of(seg):
        return leases[seg.lease].resp.get("mode", "write")

    def permits_of(seg):
        return leases[seg.lease].resp.get("permits", 1)

    for lock, segs in segs_by_lock.items():
        segs.sort(key=lambda x: x.p)
        starts = sorted(starts_by_lock[lock], key=lambda x: x.p)
        active = []
        j = 0
        for E in starts:
            while j < len(segs) and segs[j].p <= E.p + 2:
                active.append(segs[j])
                j += 1
            if len(active) > 8:
                active = [S for S in active if S.e > E.p]
            cnt["grant/renew/reentry answers checked against other leases"] += 1
            permits = []  # other permits certainly promised at E's stamp
            for S in active:
                if S.lease == E.lease or S.e <= E.p:
                    continue
                if not (S.p < E.p or S.r <= E.s):
                    continue  # not certainly earlier
                if is_sem(lock):
                    if E.p < S.e and E.p < S.cut_p and E.r <= S.cut_ms and S.lease not in [x.lease for x in permits]:
                        permits.append(S)
                    continue
                if mode_of(S) == "read" and mode_of(E) == "read":
                    cnt["(answer, earlier reader) pairs allowed to overlap"] += 1
                    continue
                cnt["(answer, earlier lease) pairs compared"] += 1
                if E.p < S.e and E.p < S.cut_p and E.r <= S.cut_ms:
                    what = "granted" if E.ev.kind == "acquire" else "%s succeeded" % E.ev.kind
                    rep.add("two-holders", (lock, S.lease, E.lease),
                            "lock %s: lease %s (token %s) %s at server time %d, while lease %s (token %s) "
                            "was promised until %d and not released before (modes %s, %s)"
                            % (lock, E.lease, E.token, what, E.p, S.lease, S.token, min(S.e, S.cut_p),
                               mode_of(E), mode_of(S)),
                            S.ev, E.ev)
            if is_sem(lock):
                others = sum(permits_of(S) for S in permits)
                cnt["permit answers compared against the limit"] += 1
                cnt["permit answers with other permits promised"] += bool(permits)
                cnt["permit answers that filled the semaphore"] += others + permits_of(E) == SEM_LIMIT
                cnt["answers of leases of several permits compared"] += permits_of(E) > 1
                if others + permits_of(E) > SEM_LIMIT:
                    what = "granted" if E.ev.kind == "acquire" else "%s succeeded" % E.ev.kind
                    rep.add("sem-over-limit", (lock, E.lease),
                            "semaphore %s: lease %s of %d permits (token %s) %s at server time %d while %d other "
                            "leases holding %d permits (limit %d) were promised"
                            % (lock, E.lease, permits_of(E), E.token, what, E.p, len(permits), others, SEM_LIMIT),
                            *([S.ev for S in permits] + [E.ev]))

    # -- what GET and lock_held show -------------------------------------------------
    index = {}
    for lock, segs in segs_by_lock.items():
        segs = sorted(segs, key=lambda x: x.r)
        pm = []
        mx = -INF
        for sg in segs:
            mx = max(mx, sg.end_ms())
            pm.append(mx)
        index[lock] = ([sg.r for sg in segs], segs, pm)
    rel_by_token = {leases[ls].resp["token"]: rel for ls, rel in release_acks.items()}
    for e in evs:
        if e.outcome != "ok":
            continue
        if e.kind == "get" and e.status == 200:
            pass
        elif e.kind == "acquire" and e.status == 409 and e.resp.get("error") in ("lock_held", "semaphore_full"):
            pass
        else:
            continue
        holder = e.resp.get("holder")
        shown = {holder.get("token")} if isinstance(holder, dict) else set()
        if isinstance(e.resp.get("holders"), list):
            shown = set(e.resp["holders"])
        for tok in shown:
            rel = rel_by_token.get(tok)
            if rel is not None and rel.lock == e.lock and rel.r_ms <= e.s_ms:
                rep.add("release-sticks", rel.lease, "%s: %s shows the released lease (token %s) as a holder"
                        % (e.lock, e.kind, tok), rel, e)
        if e.lock not in index:
            continue
        rs, segs, pm = index[e.lock]
        i = bisect.bisect_right(rs, e.s_ms) - 1
        while i >= 0 and pm[i] > e.r_ms:
            S = segs[i]
            if covers(S, e):
                cnt["reads inside a promise"] += 1
                if restart_between(S.r, e.s_ms):
                    cnt["reads inside a promise, across a restart"] += 1
                    notes["reads inside a promise, across a restart"].append(e.seq)
            if covers(S, e) and S.token not in shown:
                prop = "held-after-restart" if restart_between(S.r, e.s_ms) else "holder-mismatch"
                rep.add(prop, (e.lock, S.lease), "%s: %s shows holder tokens %r while lease %s (token %s) "
                        "was promised to hold it until %d" % (e.lock, e.kind, sorted(shown), S.lease, S.token,
                                                              S.end_ms()),
                        S.ev, e)
            i -= 1

    # -- released stays released ----------------------------------------------------------
    for lease, rel in release_acks.items():
        for op in ops.get(lease, ()):
            if op.s_ms < rel.r_ms or not op.ok():
                continue
            cnt["requests with a released lease"] += 1
            if op.kind in ("renew", "reentry") and op.status == 200:
                rep.add("release-sticks", lease, "a released lease was %s afterwards" %
                        ("renewed" if op.kind == "renew" else "reentered"), rel, op)
            elif op.kind == "put" and 200 <= op.status < 300:
                rep.add("release-sticks", lease, "the guard let a write of a released lease through", rel, op)

    # -- tokens: each grant's token above every token revealed before it was asked for ----
    reveals = []
    for e in evs:
        if e.outcome != "ok":
            continue
        toks = []
        if e.kind in ("acquire", "reentry", "renew") and e.status == 200:
            toks.append(e.resp.get("token"))
        if isinstance(e.resp.get("holder"), dict):
            toks.append(e.resp["holder"].get("token"))
        if isinstance(e.resp.get("holders"), list):
            toks += e.resp["holders"]
        if e.kind == "get":
            toks.append(e.resp.get("last_token"))
        if e.kind == "fence" and e.status in (200, 409):
            toks.append(e.resp.get("max_token"))
        if e.kind == "put" and e.status == 409:
            toks += [e.resp.get("max_token"), e.resp.get("holder_token")]
        toks = [t for t in toks if isinstance(t, int) and not isinstance(t, bool)]
        if toks:
            reveals.append((e.r_ms, max(toks), e))
    reveals.sort(key=lambda x: (x[0], x[2].seq))
    # The highest token revealed before each restart began.
    pre_restart = []
    best, best_ev, j = -1, None, 0
    for s_ms, r_ms in starts_ms:
        while j < len(reveals) and reveals[j][0] < s_ms:
            if reveals[j][1] > best:
                best, best_ev = reveals[j][1], reveals[j][2]
            j += 1
        pre_restart.append((best, best_ev))
    grants = sorted((g for g in leases.values()), key=lambda x: (x.s_ms, x.seq))
    best, best_ev, j = -1, None, 0
    cnt["grants checked against earlier revealed tokens"] = len(grants)
    for g in grants:
        while j < len(reveals) and reveals[j][0] <= g.s_ms:
            if reveals[j][1] > best:
                best, best_ev = reveals[j][1], reveals[j][2]
            j += 1
        tok = g.resp["token"]
        # The last restart that was complete before this grant was asked for.
        k = bisect.bisect_left([r for _, r in starts_ms], g.s_ms) - 1
        if k >= 0 and pre_restart[k][1] is not None and tok <= pre_restart[k][0]:
            rep.add("token-after-restart", g.seq, "grant of token %s asked for after a restart, but token %s "
                    "had been revealed before that restart" % (tok, pre_restart[k][0]), pre_restart[k][1], g)
        elif best_ev is not None and tok <= best:
            rep.add("token-order", g.seq, "grant of token %s asked for after token %s had been revealed"
                    % (tok, best), best_ev, g)

    # -- fence marks ---------------------------------------------------------------------
    fences = collections.defaultdict(list)
    for e in evs:
        if e.kind == "fence" and e.outcome == "ok":
            fences[e.lock].append(e)
    for res, fl in fences.items():
        acks = sorted((f for f in fl if f.status in (200, 409) and isinstance(f.resp.get("max_token"), int)),
                      key=lambda f: f.r_ms)
        mark, mark_ev, j = 0, None, 0
        for f in sorted(fl, key=lambda f: f.s_ms):
            while j < len(acks) and acks[j].r_ms <= f.s_ms:
                if acks[j].resp["max_token"] > mark:
                    mark, mark_ev = acks[j].resp["max_token"], acks[j]
                j += 1
            tok = f.req.get("token")
            if f.status == 400 and f.resp.get("field") == "token":
                rep.add("fence-issued", res, "fence refused token %s as never issued (last_token %r), "
                        "a token revealed before" % (tok, f.resp.get("last_token")), f)
                continue
            if mark_ev is None or f.status not in (200, 409):
                continue
            cnt["fence answers after an acknowledged mark"] += 1
            if restart_between(mark_ev.r_ms, f.s_ms):
                cnt["fence answers after an acknowledged mark, across a restart"] += 1
            if isinstance(tok, int) and tok < mark:
                cnt["fence requests below an acknowledged mark"] += 1
            mt = f.resp.get("max_token")
            if isinstance(mt, int) and mt < mark:
                rep.add("fence-mark", res, "resource %s: mark %s after an acknowledged mark %s"
                        % (res, mt, mark), mark_ev, f)
            elif f.status == 200 and isinstance(tok, int) and tok < mark:
                rep.add("fence-mark", res, "resource %s: token %s accepted after an acknowledged mark %s"
                        % (res, tok, mark), mark_ev, f)

    # -- a lock's value --------------------------------------------------------------------
    grants_by_lock = collections.defaultdict(list)  # lock -> [(r_ms, token)], acknowledged grants
    for g in leases.values():
        grants_by_lock[g.lock].append((g.r_ms, g.resp["token"]))
    for lk in grants_by_lock:
        grants_by_lock[lk].sort()
    acked_versions = collections.defaultdict(dict)  # lock -> {version: write}
    refused_ids = set()
    vwrites = [e for e in evs if e.kind == "value"]
    for w in vwrites:
        if w.ok(409):
            refused_ids.add(w.req.get("id"))
        if not w.ok(200):
            continue
        cnt["acknowledged value writes"] += 1
        ver = w.resp.get("value_version")
        prev = acked_versions[w.lock].get(ver)
        if prev is not None and prev.req.get("id") != w.req.get("id"):
            rep.add("value-lost", (w.lock, ver), "lock %s: version %s acknowledged for two writes" % (w.lock, ver),
                    prev, w)
        acked_versions[w.lock][ver] = w
        g = leases.get(w.lease)
        if g is None:
            continue
        rel = release_acks.get(w.lease)
        larger = [t for r, t in grants_by_lock[w.lock] if r <= w.s_ms and t > g.resp["token"]]
        if g.resp.get("mode") == "read":
            rep.add("value-stale", w.seq, "a read lease wrote lock %s's value" % w.lock, g, w)
        elif w.resp.get("token") != g.resp["token"]:
            rep.add("value-stale", w.seq, "a value write answered token %r, its lease's is %s"
                    % (w.resp.get("token"), g.resp["token"]), g, w)
        elif rel is not None and rel.r_ms <= w.s_ms:
            rep.add("value-stale", w.seq, "lock %s's value written by a lease whose release was acknowledged "
                    "before the write was sent" % w.lock, rel, w)
        elif larger:
            rep.add("value-stale", w.seq, "lock %s's value written by token %s after a grant of token %s was "
                    "acknowledged" % (w.lock, g.resp["token"], max(larger)), g, w)
    cnt["value writes refused"] = len(refused_ids)
    reads_by_lock = collections.defaultdict(list)
    for e in evs:
        if e.kind == "get" and e.ok(200) and not is_sem(e.lock) and isinstance(e.resp.get("value_version"), int):
            reads_by_lock[e.lock].append(e)
    for lk, reads in reads_by_lock.items():
        acks = sorted(((w.r_ms, v, w) for v, w in acked_versions[lk].items()), key=lambda x: x[0])
        seen = sorted(((r.r_ms, r.resp["value_version"], r) for r in reads), key=lambda x: x[0])
        best_ack = _PrefixBest(acks)
        best_read = _PrefixBest(seen)
        for r in reads:
            v = r.resp["value_version"]
            shown = r.resp.get("value")
            cnt["reads of a lock's value"] += 1
            if shown in refused_ids and shown is not None:
                rep.add("value-stale", r.seq, "lock %s shows the value %r of a write that was refused" % (lk, shown), r)
            w = acked_versions[lk].get(v)
            if w is not None and shown != w.req.get("id"):
                rep.add("value-lost", (lk, v), "lock %s shows version %s with value %r, its acknowledged write "
                        "wrote %r" % (lk, v, shown, w.req.get("id")), w, r)
            for best, what in ((best_ack.before(r.s_ms), "an acknowledged write"),
                               (best_read.before(r.s_ms), "an earlier read")):
                if best is not None and v < best[1]:
                    if restart_between(best[0], r.s_ms):
                        cnt["value reads behind, across a restart"] += 1
                    rep.add("value-lost", (lk, r.seq), "lock %s shows value version %s after %s showed %s"
                            % (lk, v, what, best[1]), best[2], r)
            if best_ack.before(r.s_ms) is not None and restart_between(best_ack.before(r.s_ms)[0], r.s_ms):
                cnt["value reads after an acknowledged write, across a restart"] += 1

    # -- what the backend applied ---------------------------------------------------------
    puts = {}
    for e in evs:
        if e.kind == "put" and e.req.get("id"):
            puts[e.req["id"]] = e
    sup_by_lock = collections.defaultdict(list)    # lock -> [(r_ms, token, grant)] sorted
    for g in leases.values():
        sup_by_lock[g.lock].append((g.r_ms, g.resp["token"], g))
    for lk in sup_by_lock:
        sup_by_lock[lk].sort(key=lambda x: x[0])
    sup_max = {}
    for lk, lst in sup_by_lock.items():
        pm, mx = [], (-1, None)
        for r, t, g in lst:
            if t > mx[0]:
                mx = (t, g)
            pm.append(mx)
        sup_max[lk] = ([r for r, _, _ in lst], pm)

    def applied_desc(a, i):
        return "applied[%d] %s %s token=%s lock=%s body=%r" % (i, a.get("method"), a.get("path"), a.get("token"),
                                                           a.get("lock"), a.get("body"))

    def tok_of(a):
        try:
            return int(a.get("token"))
        except (TypeError, ValueError):
            return None

    highest = {}
    for i, a in enumerate(applied):
        t = tok_of(a)
        body = a.get("body")
        if isinstance(body, (bytes, bytearray)):
            body = body.decode("utf-8", "replace")
        pe = puts.get(body)
        prev = highest.get(a["path"])
        if t is None:
            rep.add("upstream-order", (a["path"], i), "applied write without a token", applied_desc(a, i), pe)
            continue
        if prev is not None and t < prev[0]:
            rep.add("upstream-order", a["path"], "path %s: token %s applied after token %s"
                    % (a["path"], t, prev[0]), applied_desc(prev[2], prev[1]), prev[3],
                    applied_desc(a, i), pe)
        if prev is None or t > prev[0]:
            highest[a["path"]] = (t, i, a, pe)
        if pe is None or pe.lease not in leases:
            continue
        cnt["applied writes matched to their request"] += 1
        g = leases[pe.lease]
        if t != g.resp["token"]:
            rep.add("upstream-order", ("tok", i), "applied write carries token %s, its lease's is %s"
                    % (t, g.resp["token"]), applied_desc(a, i), g, pe)
        rel = release_acks.get(pe.lease)
        after_larger = prev is not None and prev[0] > t
        if rel is not None and rel.r_ms <= pe.s_ms:
            rep.add("upstream-stale", ("rel", i), "write applied%s although its lease's release was "
                    "acknowledged before the write was sent" % (" after a larger token" if after_larger else ""),
                    rel, pe, applied_desc(a, i))
        lst = sup_max.get(g.lock)
        if lst:
            k = bisect.bisect_right(lst[0], pe.s_ms) - 1
            if k >= 0 and lst[1][k][0] > g.resp["token"]:
                rep.add("upstream-stale", ("sup", i), "write applied%s although a newer lease of lock %s "
                        "(token %s) had been granted before the write was sent"
                        % (" after a larger token" if after_larger else "", g.lock, lst[1][k][0]),
                        lst[1][k][1], pe, applied_desc(a, i))
    return rep.items


def summarize(result, out=sys.stdout):
    st = result.stats
    out.write("torture: seed %d, %d cycles, %.1f s, %d events, %d applied writes\n"
              % (result.seed, result.cycles, result.elapsed_s, st["events"], st["applied writes"]))
    for k in sorted(st):
        if k not in ("events", "applied writes"):
            out.write("  %-28s %d\n" % (k, st[k]))
    for d in result.driver_errors[:10]:
        out.write("driver error: %s\n" % d)
    if result.violations:
        byprop = collections.Counter(v.prop for v in result.violations)
        out.write("VIOLATIONS (%d): %s\n" % (len(result.violations), dict(byprop)))
        for v in result.violations[:50]:
            out.write(str(v) + "\n")
    else:
        out.write("checker: no violations\n")


def default_scale():
    """(clients, locks) for this build: fewer under the sanitizers."""
    if os.environ.get("LEASEGATE_SANITIZED") == "1":
        return 6, 150
    return 8, 200


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--locks", type=int, default=None)
    ap.add_argument("--clients", type=int, default=None)
    ap.add_argument("--run-ms", default="150:2200", help="load time between kills, MIN:MAX ms")
    ap.add_argument("--save-history", metavar="PATH", help="write the history (JSON lines) and the applied writes")
    ap.add_argument("--keep-dir", action="store_true", help="keep the server's data directory")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    clients, locks = default_scale()
    lo, hi = (int(x) for x in a.run_ms.split(":"))
    print("torture: seed %d, %d cycles (repeat: %s --cycles %d --seed %d --locks %d --clients %d)"
          % (seed, a.cycles, sys.argv[0], a.cycles, seed, a.locks or locks, a.clients or clients), flush=True)
    t = Torture(a.cycles, seed, locks=a.locks or locks, clients=a.clients or clients, run_ms=(lo, hi),
                log=lambda m: print(m, flush=True), keep_dir=a.keep_dir)
    res = t.run()
    if a.save_history:
        res.history.save(a.save_history)
        with open(a.save_history + ".applied", "w") as f:
            for x in res.applied:
                d = dict(x)
                if isinstance(d.get("body"), (bytes, bytearray)):
                    d["body"] = d["body"].decode("utf-8", "replace")
                f.write(json.dumps(d, sort_keys=True) + "\n")
    summarize(res)
    return 1 if res.violations or res.driver_errors else 0


if __name__ == "__main__":
    sys.exit(main())
