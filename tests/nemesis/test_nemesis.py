"""The nemesis suite (issue 27): three gateways on a three-member etcd, restarted by a
supervisor whenever they exit, serve a workload while faults are injected one after the
other; a checker (history.py) then reads every answer any client got.

Workload (threads, each call at a random gateway): acquires with a request_id, sent again
with the same request_id (at another gateway) when no answer or 503 came; renewals;
guarded writes (PUT through --guard to a backend that records what it applies in order,
applying_upstream.py); writes of the lock's value (issue 40), by the holder and, after its
release, by the released lease; fence checks; reads; releases; an admin's force-releases;
leases of 1..SEM_LIMIT permits of a semaphore of SEM_LIMIT (issue 40).

Faults, in order (each once per round):
  pause_gateway   the leader gateway SIGSTOPped past its lease with three requests in
                  flight (headers in, bodies sent while it is stopped), then SIGCONT
  kill_gateway    kill -9 of the leader gateway while batches commit
  pause_etcd      SIGSTOP of etcd's Raft leader for PAUSE_ETCD_S, then SIGCONT
  kill_etcd       kill -9 of etcd's Raft leader, restarted after a few seconds
  stall_one_way   the leader gateway's etcd traffic held one way (etcd -> gateway)
  stall_two_way   the same both ways
  restart_etcd    every etcd member stopped and started again
During pause_etcd and kill_etcd no gateway may give up leadership or exit, save for one
cause that is etcd's own (riding_out says which).

After each fault, the gateways' /metrics must show it (issue 37): a failover as an
election won by a gateway that lived through it, a fault of etcd as errors, retries or
failed keepalives counted by one; and the leader must answer /readyz 200.

Then the history must hold (history.py): no token twice or backwards, no overlapping
holds, no acknowledged grant, renewal or fence mark lost, no read older than an answer it
follows, the backend never applies a lower token after a higher one, no value written by a
lease that no longer held its lock and none lost once acknowledged, never more than
SEM_LIMIT permits held. What each fault cost
(the longest time without a grant around it) is printed, never asserted.

Run: `ctest -L nemesis` in a build of tests/nemesis (.ci/run does it), or
LEASEGATE_BIN=build/leasegate python3 tests/nemesis/test_nemesis.py. One round takes
about two minutes; LEASEGATE_NEMESIS_ROUNDS=N runs N rounds (the faults shuffled after the
first), by hand; LEASEGATE_NEMESIS_FAULTS=pause_etcd,kill_etcd runs only those faults and
LEASEGATE_NEMESIS_LEADER_TTL=N gives the gateways --leader-ttl N (what each TTL rides out,
docs/SCALE-OUT.md); LEASEGATE_NEMESIS_DUMP=FILE writes every call, fault and violation there.
Every wait is bounded; every process is stopped by PID."""

import json
import os
import random
import signal
import socket
import sys
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import etcd_fixture  # noqa: E402
from applying_upstream import ApplyingUpstream  # noqa: E402
from etcd_fixture import Etcd, Gateway, wait_for  # noqa: E402
from harness import Client, RawReader, parse_metrics, resume_process  # noqa: E402

# What each fault must show in the gateways' /metrics (summed over the gateways that ran
# through it): a failover is an election won; a fault of etcd, errors, retries or failed
# keepalives; etcd stopped, connections refused.
FAILOVER = ("leasegate_etcd_elections_won_total",)
ETCD_TROUBLE = ("leasegate_etcd_errors_total", "leasegate_etcd_retries_total",
                "leasegate_etcd_keepalive_failures_total")
EXPECTED_METRICS = {
    "pause_gateway": FAILOVER, "kill_gateway": FAILOVER, "stall_one_way": FAILOVER, "stall_two_way": FAILOVER,
    "pause_etcd": ETCD_TROUBLE, "kill_etcd": ETCD_TROUBLE,
    "restart_etcd": ('leasegate_etcd_errors_total{kind="unreachable"}',),
}
from history import History, Op, check  # noqa: E402
from stall_proxy import FROM_ETCD, TO_ETCD, StallProxy  # noqa: E402

ROUNDS = int(os.environ.get("LEASEGATE_NEMESIS_ROUNDS", "1"))
# By hand: only these faults (comma-separated names, as below), and another --leader-ttl.
FAULTS = [f for f in os.environ.get("LEASEGATE_NEMESIS_FAULTS", "").split(",") if f]
LEADER_TTL_S = int(os.environ.get("LEASEGATE_NEMESIS_LEADER_TTL", "3"))  # 3: the default --leader-ttl
LEASE_TTL_MS = 4000  # the workload's locks
SETTLE_S = 2  # --guard-settle: short, so that writes go on soon after a failover
REQUEST_TIMEOUT_S = 10.0
WORKERS = 4
LOCKS = ["n/a", "n/b", "n/c"]
SEMAPHORE = "ns/pool"  # a name apart from the locks
SEM_LIMIT = 3
PAUSE_ETCD_S = 5.0
QUIET_S = 2.0  # workload alone between faults
WAIT_S = 40.0  # bound of every wait for a leader


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())


class Cluster:
    """Three gateways, each talking to etcd through a StallProxy of its own, and a
    supervisor thread that starts again any that exits (recording when and how)."""

    def __init__(self, etcd, upstream):
        self.etcd = etcd
        self.proxies = [StallProxy(etcd.members) for _ in range(3)]
        args = ["--leader-ttl", str(LEADER_TTL_S), "--guard", "/store/=" + upstream.url,
                "--guard-settle", str(SETTLE_S)]
        self.gateways = [Gateway(p, "lg-nemesis", args) for p in self.proxies]
        self.exits = []  # (time, gateway index, exit status, its stderr file)
        self.mu = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(0.2):
            for i, g in enumerate(self.gateways):
                if g.running() or self._stop.is_set():
                    continue
                with self.mu:
                    self.exits.append((time.time(), i, g.proc.returncode,
                                       os.path.join(g.dir, "stderr.%d.log" % g.starts)))
                try:
                    g.start()
                except RuntimeError:
                    pass  # exited while starting (no etcd quorum yet): again next round

    def ports(self):
        return [g.port for g in self.gateways if g.running() and g.port]

    def exit_count(self):
        with self.mu:
            return len(self.exits)

    def leader(self, exclude=None):
        """The gateway that answers /healthz as leader (not `exclude`), or None in time."""
        return wait_for(lambda: next((g for g in self.gateways if g is not exclude and g.running()
                                      and g.role() == "leader"), None), timeout=WAIT_S)

    def proxy_of(self, g):
        return self.proxies[self.gateways.index(g)]

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        for p in self.proxies:
            p.release()
        for g in self.gateways:
            resume_process(g.proc)
            g.stop()
            g.cleanup()
        for p in self.proxies:
            p.close()


class Nemesis(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd(size=3)
        cls.upstream = ApplyingUpstream()
        cls.cluster = Cluster(cls.etcd, cls.upstream)
        cls.history = History()
        cls.stop_workload = threading.Event()
        cls.faults = []  # (name, t_start, t_end)
        cls.ride_out = []  # what went wrong during the etcd leader's faults
        cls.etcd_revocations = 0  # leader exits forced by etcd's revocation of its lease (riding_out)
        cls.metric_misses = []  # faults the metrics did not show

    @classmethod
    def tearDownClass(cls):
        cls.stop_workload.set()
        cls.cluster.stop()
        cls.upstream.close()
        for m in cls.etcd.members:
            resume_process(m.proc)
        cls.etcd.stop()

    # -- calls ---------------------------------------------------------------------------
    def call(self, kind, lock, fn, port=None, **args):
        """fn(client) at `port` (a random gateway's when None), recorded as one Op."""
        ports = self.cluster.ports()
        port = port or (random.choice(ports) if ports else None)
        op = Op(kind, lock, gw=port, **args)
        if port:
            c = Client(port, timeout=REQUEST_TIMEOUT_S)
            try:
                status, _, body = fn(c)
                op.done(status, body)
            except OSError:
                pass  # no answer
            except Exception as e:  # http.client's protocol errors: no answer either
                op.args["error"] = repr(e)
            finally:
                c.close()
        return self.history.add(op)

    def acquire(self, lock, owner, port=None, rid=None, wait_ms=0):
        """An acquire with a request_id, sent again (same request_id, random gateways) while
        it gets no answer or 503, for a few seconds: the grant, or None."""
        rid = rid or uuid.uuid4().hex
        deadline = time.monotonic() + 8
        while not self.stop_workload.is_set():
            op = self.call("acquire", lock, lambda c: c.acquire(lock, owner=owner, ttl_ms=LEASE_TTL_MS,
                                                                wait_ms=wait_ms, request_id=rid),
                           port=port, rid=rid)
            if op.status not in (None, 503) or time.monotonic() > deadline:
                return op.body if op.ok else None
            port = None
            time.sleep(0.1)
        return None

    def worker(self, k):
        owner = "w%d" % k
        while not self.stop_workload.is_set():
            lock = random.choice(LOCKS)
            g = self.acquire(lock, owner, wait_ms=random.choice([0, 0, 1000]))
            if not g:
                self.call("read", lock, lambda c: c.get_lock(lock))
                time.sleep(0.05)
                continue
            lease, token = g["lease"], g["token"]
            for _ in range(random.randint(1, 4)):
                step = random.choice(["renew", "write", "write", "value", "fence", "read"])
                if step == "renew":
                    self.call("renew", lock, lambda c: c.renew(lock, lease, ttl_ms=LEASE_TTL_MS), lease=lease)
                elif step == "write":
                    data = ("%s token %d %s" % (owner, token, uuid.uuid4().hex[:8])).encode()
                    self.call("write", lock, lambda c: c.request("PUT", "/store/" + lock, raw=data,
                                                                   headers={"Fencing-Lease": lease}),
                              lease=lease, token=token)
                elif step == "value":
                    value = uuid.uuid4().hex
                    self.call("value", lock, lambda c: c.request("PUT", "/v1/locks/%s/value" % lock,
                                                                   {"lease": lease, "value": value}),
                              lease=lease, token=token, value=value)
                elif step == "fence":
                    self.call("fence", "f/" + lock, lambda c: c.fence("f/" + lock, token), token=token)
                else:
                    self.call("read", lock, lambda c: c.get_lock(lock))
                time.sleep(random.uniform(0.01, 0.05))
            for _ in range(3):
                op = self.call("release", lock, lambda c: c.release(lock, lease), lease=lease, token=token)
                if op.status not in (None, 503):
                    break
                time.sleep(0.1)
            if random.random() < 0.3:  # a released lease's value write: refused
                value = uuid.uuid4().hex
                self.call("value", lock, lambda c: c.request("PUT", "/v1/locks/%s/value" % lock,
                                                               {"lease": lease, "value": value}),
                          lease=lease, token=token, value=value)

    def sem_worker(self, k):
        """Leases of 1..SEM_LIMIT permits of one semaphore: take (waiting a little), hold a
        moment (renewing once), give back."""
        path = "/v1/semaphores/%s/" % SEMAPHORE
        while not self.stop_workload.is_set():
            permits = random.randint(1, SEM_LIMIT)
            rid = uuid.uuid4().hex
            body = {"owner": "s%d" % k, "limit": SEM_LIMIT, "permits": permits, "ttl_ms": LEASE_TTL_MS,
                    "wait_ms": 500, "request_id": rid}
            op = self.call("sem_acquire", SEMAPHORE, lambda c: c.request("POST", path + "acquire", body), rid=rid)
            if not op.ok:
                time.sleep(0.05)
                continue
            lease = op.body["lease"]
            time.sleep(random.uniform(0.01, 0.2))
            self.call("sem_renew", SEMAPHORE, lambda c: c.request("POST", path + "renew",
                                                                  {"lease": lease, "ttl_ms": LEASE_TTL_MS}),
                      lease=lease)
            time.sleep(random.uniform(0.01, 0.2))
            for _ in range(3):
                r = self.call("sem_release", SEMAPHORE, lambda c: c.request("POST", path + "release", {"lease": lease}),
                              lease=lease)
                if r.status not in (None, 503):
                    break
                time.sleep(0.1)

    def admin(self):
        while not self.stop_workload.wait(random.uniform(1.0, 2.0)):
            lock = random.choice(LOCKS)
            self.call("force", lock, lambda c: c.request("DELETE", "/v1/locks/" + lock))

    # -- faults --------------------------------------------------------------------------
    def leader_gateway(self, exclude=None):
        g = self.cluster.leader(exclude)
        self.assertIsNotNone(g, "no gateway leads")
        return g

    def pause_gateway(self, k):
        """The issue's scenario inside the workload: three requests reach the leader as
        headers, it is stopped past its lease, another leads and force-releases the lock and
        grants it again, the bodies are sent, the old leader resumes. The in-flight calls go
        into the history (sent when their last byte is: a request is complete then)."""
        g = self.leader_gateway()
        lock, resource = "n/inflight-%d" % k, "f/n/inflight-%d" % k
        a = self.acquire(lock, "inflight", port=g.port, rid="rid-%d" % k)
        self.assertIsNotNone(a, "no grant for the in-flight lock")
        self.call("fence", resource, lambda c: c.fence(resource, a["token"]), port=g.port, token=a["token"])
        bodies = [json.dumps({"owner": "inflight", "ttl_ms": LEASE_TTL_MS, "request_id": "rid-%d" % k}).encode(),
                  json.dumps({"token": a["token"]}).encode(), b"late in-flight write"]
        heads = [("POST", "/v1/locks/%s/acquire" % lock, {"Content-Type": "application/json"}),
                 ("POST", "/v1/fence/" + resource, {"Content-Type": "application/json"}),
                 ("PUT", "/store/" + lock, {"Fencing-Lease": a["lease"]})]
        ops = [Op("acquire", lock, gw=g.port, rid="rid-%d" % k), Op("fence", resource, gw=g.port, token=a["token"]),
               Op("write", lock, gw=g.port, lease=a["lease"], token=a["token"])]
        socks = []
        for (method, path, hdrs), body in zip(heads, bodies):
            s = socket.create_connection(("127.0.0.1", g.port), timeout=REQUEST_TIMEOUT_S)
            lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1", "Content-Length: %d" % len(body)]
            s.sendall(("\r\n".join(lines + ["%s: %s" % kv for kv in hdrs.items()]) + "\r\n\r\n").encode() + body[:3])
            socks.append(s)
        time.sleep(0.5)  # the heads are read (not asserted: a head read late only weakens this fault)
        t0 = time.time()
        os.kill(g.pid, signal.SIGSTOP)
        try:
            new = self.leader_gateway(exclude=g)
            self.call("force", lock, lambda c: c.request("DELETE", "/v1/locks/" + lock), port=new.port)
            b = self.acquire(lock, "after", port=new.port)
            if b:
                self.call("fence", resource, lambda c: c.fence(resource, b["token"]), port=new.port, token=b["token"])
            for s, body, op in zip(socks, bodies, ops):
                s.sendall(body[3:])
                op.t_inv = time.time()
            time.sleep(0.2)
        finally:
            os.kill(g.pid, signal.SIGCONT)
        for s, op in zip(socks, ops):
            try:
                status, _, body = RawReader(s).read_response(timeout=REQUEST_TIMEOUT_S + 20)
                op.done(status, json.loads(body) if body.startswith(b"{") else body.decode("latin-1"))
            except (OSError, ValueError):
                pass
            s.close()
            self.history.add(op)
        return t0

    def kill_gateway(self, k):
        g = self.leader_gateway()
        before = self.metric(g, "leasegate_commits_total")
        wait_for(lambda: self.metric(g, "leasegate_commits_total") > before + 5, timeout=10)
        t0 = time.time()
        g.kill9()
        return t0

    def snapshot(self):
        """{pid: /metrics} of every gateway that answers it now."""
        out = {}
        for g in self.cluster.gateways:
            pid = g.pid if g.running() else None
            if not pid or not g.port:
                continue
            c = Client(g.port, timeout=5)
            try:
                status, _, text = c.request("GET", "/metrics")
                if status == 200:
                    out[pid] = parse_metrics(text)
            except (OSError, AssertionError):
                pass
            finally:
                c.close()
        return out

    def check_metrics(self, name, before):
        """The fault shows in the metrics of the gateways that lived through it (their
        counters only grow), and the leader is ready."""
        leader = self.cluster.leader()

        def leader_ready():
            c = Client(leader.port, timeout=5)
            try:
                return c.request("GET", "/readyz")[0] == 200
            except OSError:
                return False
            finally:
                c.close()
        ready = leader and wait_for(leader_ready, timeout=WAIT_S)
        if not ready:
            self.metric_misses.append("%s: the leader is not ready (/readyz)" % name)
        after = self.snapshot()
        lived = [pid for pid in before if pid in after]

        def grew(prefix):
            return sum(v - before[pid].get(k, 0) for pid in lived for k, v in after[pid].items()
                       if k == prefix or k.startswith(prefix + "{"))
        seen = {m: grew(m) for m in EXPECTED_METRICS.get(name, ())}
        if seen and lived and not any(v > 0 for v in seen.values()):
            self.metric_misses.append("%s: no gateway's metrics show it: %r over %d gateways" % (name, seen, len(lived)))

    def metric(self, g, name):
        c = Client(g.port, timeout=5)
        try:
            status, _, text = c.request("GET", "/metrics")
            return parse_metrics(text).get(name, 0) if status == 200 else 0
        except OSError:
            return 0
        finally:
            c.close()

    def etcd_leader(self):
        m = wait_for(self.etcd.leader, timeout=WAIT_S)
        self.assertIsNotNone(m, "etcd has no leader")
        return m

    def riding_out(self, name, fn):
        """fn() faults etcd's leader: no gateway may exit meanwhile, nor the leader change,
        with one exception, which is etcd's: etcd before 3.4.31 lets its leader, resumed
        after a pause, revoke leases that ran out in its view (etcd issue 15247). A leader
        whose lease it revoked leads again under a new key when no other candidate's key
        survived; when one did, that gateway leads and the old leader exits saying so. Such
        an exit is counted (etcd_revocations), not failed."""
        g = self.leader_gateway()
        pid, exits = g.pid, self.cluster.exit_count()
        t0 = fn()
        wait_for(self.etcd.leader, timeout=WAIT_S)
        time.sleep(2 * LEADER_TTL_S)  # what a gateway would have lost shows by then
        leader = self.cluster.leader()
        new_exits = self.cluster.exits[exits:]
        revoked = [x for x in new_exits if "etcd ended the lease this gateway led with" in self.why_lost(x[3])]
        if len(revoked) != len(new_exits) or leader is None or (leader.pid != pid and not revoked):
            self.ride_out.append("%s: gateway exits %r, leader pid %s -> %s" % (
                name, [(t, i, rc, self.why_lost(f)) for t, i, rc, f in new_exits], pid, leader and leader.pid))
        self.etcd_revocations += len(revoked)
        return t0

    @staticmethod
    def why_lost(stderr_path):
        """The 'leadership lost' line of a gateway's log, or ''."""
        try:
            with open(stderr_path, errors="replace") as f:
                return next((line.strip() for line in f if "leadership lost" in line), "")
        except OSError:
            return ""

    def pause_etcd(self, k):
        def fault():
            m = self.etcd_leader()
            t0 = time.time()
            os.kill(m.proc.pid, signal.SIGSTOP)
            time.sleep(PAUSE_ETCD_S)
            os.kill(m.proc.pid, signal.SIGCONT)
            return t0
        return self.riding_out("pause_etcd", fault)

    def kill_etcd(self, k):
        def fault():
            m = self.etcd_leader()
            t0 = time.time()
            m.kill9()
            time.sleep(3)
            self.etcd.restart(m)
            return t0
        return self.riding_out("kill_etcd", fault)

    def stall(self, directions):
        g = self.leader_gateway()
        proxy = self.cluster.proxy_of(g)
        t0 = time.time()
        proxy.stall(directions)
        try:
            self.leader_gateway(exclude=g)  # another takes over
            time.sleep(1)
        finally:
            proxy.release()
        return t0

    def stall_one_way(self, k):
        return self.stall([FROM_ETCD])

    def stall_two_way(self, k):
        return self.stall([TO_ETCD, FROM_ETCD])

    def restart_etcd(self, k):
        t0 = time.time()
        for m in self.etcd.members:
            m.stop()
        for m in self.etcd.members:
            m.start(self.etcd.cluster, state="existing")
        self.etcd_leader()
        return t0

    # -- the run -------------------------------------------------------------------------
    def test_nemesis(self):
        self.assertIsNotNone(self.cluster.leader(), "no gateway leads")
        threads = [threading.Thread(target=self.worker, args=(k,), daemon=True) for k in range(WORKERS)]
        threads += [threading.Thread(target=self.sem_worker, args=(k,), daemon=True) for k in range(2)]
        threads.append(threading.Thread(target=self.admin, daemon=True))
        for t in threads:
            t.start()
        faults = [self.pause_gateway, self.kill_gateway, self.pause_etcd, self.kill_etcd, self.stall_one_way,
                  self.stall_two_way, self.restart_etcd]
        if FAULTS:
            unknown = set(FAULTS) - {f.__name__ for f in faults}
            self.assertFalse(unknown, "LEASEGATE_NEMESIS_FAULTS names no such fault: %s" % ", ".join(sorted(unknown)))
            faults = [f for f in faults if f.__name__ in FAULTS]
        k = 0
        for r in range(ROUNDS):
            order = list(faults)
            if r:
                random.shuffle(order)
            for fault in order:
                time.sleep(QUIET_S)
                k += 1
                before = self.snapshot()
                t0 = fault(k)
                self.faults.append((fault.__name__, t0, time.time()))
                self.assertIsNotNone(self.cluster.leader(), "no gateway leads after %s" % fault.__name__)
                self.check_metrics(fault.__name__, before)
        time.sleep(QUIET_S)
        self.stop_workload.set()
        for t in threads:
            t.join(REQUEST_TIMEOUT_S * 3)
        ops = self.history.snapshot()
        applied = {}
        for w in self.upstream.applied:
            applied.setdefault(w["path"], []).append(int(w["token"]))
        self.report(ops)
        violations = check(ops, applied)
        dump = os.environ.get("LEASEGATE_NEMESIS_DUMP")
        if dump:  # every call and every violation, for reading by hand
            with open(dump, "w") as f:
                for op in ops:
                    f.write(repr(op) + "\n")
                for v in violations:
                    f.write("VIOLATION " + v + "\n")
                for name, t0, t1 in self.faults:
                    f.write("FAULT %s %.3f %.3f\n" % (name, t0, t1))
                for t, i, rc, _ in self.cluster.exits:
                    f.write("EXIT gateway %d at %.3f status %s\n" % (i, t, rc))
                for i, g in enumerate(self.cluster.gateways):
                    for n in range(1, g.starts + 1):
                        path = os.path.join(g.dir, "stderr.%d.log" % n)
                        if os.path.exists(path):
                            with open(path, errors="replace") as log:
                                f.write("".join("GATEWAY %d start %d: %s" % (i, n, line) for line in log))
        self.assertEqual(violations[:20], [], "%d violations in %d calls" % (len(violations), len(ops)))
        self.assertEqual(self.ride_out, [], "a gateway gave up during a fault of etcd's leader")
        self.assertEqual(self.metric_misses, [], "faults the gateways' metrics did not show")
        grants = [op for op in ops if op.kind == "acquire" and op.ok]
        self.assertGreater(len(grants), 10 * len(self.faults), "too little work to judge")
        self.assertGreater(len([op for op in ops if op.kind == "value" and op.ok]), len(self.faults),
                           "too few values written to judge")
        self.assertGreater(len([op for op in ops if op.kind == "sem_acquire" and op.ok]), len(self.faults),
                           "too few semaphore leases to judge")

    def report(self, ops):
        grants = sorted(op.t_ack for op in ops if op.kind == "acquire" and op.ok)
        kinds = {}
        for op in ops:
            kinds.setdefault(op.kind, [0, 0])[op.t_ack is not None] += 1
        print("\nnemesis: %d calls (%s), %d backend writes, gateway exits %d (%d of them a leader whose lease "
              "etcd revoked after a pause of its leader, with another candidate's key left)" % (
                  len(ops), ", ".join("%s %d/%d answered" % (k, v[1], v[0] + v[1]) for k, v in sorted(kinds.items())),
                  len(self.upstream.applied), self.cluster.exit_count(), self.etcd_revocations), file=sys.stderr)
        starts = [t0 for _, t0, _ in self.faults[1:]] + [float("inf")]
        for (name, t0, t1), next_t0 in zip(self.faults, starts):
            # From the fault to the next one (at most 15 s after its end): the longest
            # time without an acknowledged grant, counting from the fault itself.
            end = min(next_t0, t1 + 15)
            window = [t0] + [t for t in grants if t0 < t <= end]
            gap = max(b - a for a, b in zip(window, window[1:])) if len(window) > 1 else None
            print("nemesis: %-14s fault lasted %.1f s; longest time without a grant from it: %s" % (
                name, t1 - t0, "%.1f s" % gap if gap is not None else "no grant"), file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
