"""The conformance scenarios: each drives one client (through its contract driver, see
PROTOCOL.md) against the real server and checks the invariants of docs/TOKEN.md it names.

A scenario records a check as (invariant, passed, what); a step that fails where the
contract says it must succeed is a failed check of the invariant the step serves, and ends
the scenario. Waits are bounded; where an invariant is about time (TOKEN-4) the check is
an order between the client's signal and the server's next grant, with the slack stated
below, never a measured duration."""

import os
import threading
import time
import uuid

from driver import DriverSkipped
from peers import DropProxy, Etcd, Http, Leasegate, Upstream, now_ms, wait_until

LOSS_TTL_MS = 2000  # the TTL of leases whose loss is tested
# TOKEN-4 with a paused server: the server is continued (and grants the next holder) this
# long after the latest moment the lease can expire, so a client that signals the loss in
# time passes although the machine is busy, and one that signals it a TTL late fails.
LOSS_SLACK_MS = 1000
LONG_TTL_MS = 10000  # leases that must survive what a scenario does to the servers


class Abort(Exception):
    """A scenario cannot go on (its failed check is recorded)."""


class NotApplicable(Exception):
    """The client lacks a capability the scenario needs."""


class Skipped(Exception):
    """The environment lacks something the scenario needs (etcd)."""


class Context:
    """One scenario run for one client: its servers, drivers and checks."""

    def __init__(self, binary, client, workdir, start_driver):
        self.binary = binary
        self.client = client
        self.workdir = workdir
        self.start_driver = start_driver  # (client, log name) -> driver.Driver
        self.checks = []  # (invariant, passed, what)
        self.drivers = []
        self.cleanups = []
        self.prefix = "conf/%s/%s" % (client, uuid.uuid4().hex[:8])
        self.capabilities = None

    def name(self, suffix):
        return "%s/%s" % (self.prefix, suffix)

    def server(self, args=(), store=None, label="server"):
        srv = Leasegate(self.binary, os.path.join(self.workdir, label), args, store)
        self.cleanups.append(srv.stop)
        return srv.start()

    def driver(self, servers, owner, needs=(), retry_for_ms=5000):
        d = self.start_driver(self.client, owner)
        self.drivers.append(d)
        d.hello(servers, owner, retry_for_ms=retry_for_ms)
        self.capabilities = d.capabilities
        missing = [c for c in needs if c not in d.capabilities]
        if missing:
            raise NotApplicable("the client lacks " + ", ".join(missing))
        return d

    def check(self, invariant, passed, what):
        self.checks.append((invariant, bool(passed), what))
        return passed

    def ok(self, invariant, answer, what):
        """answer when it succeeded; otherwise a failed check of invariant, and Abort."""
        if answer.get("ok"):
            return answer
        self.check(invariant, False, "%s failed: %s (%s)" % (what, answer.get("error"), answer.get("message")))
        raise Abort()

    def token(self, invariant, answer, what):
        """The answer's token as an int; a token that is not a decimal string fails TOKEN-8."""
        text = answer.get("token")
        if not (isinstance(text, str) and text.isascii() and text.isdigit() and (text == "0" or text[0] != "0")):
            self.check(8, False, "%s: token %r is not a decimal string" % (what, text))
            raise Abort()
        value = int(text)
        self.check(8, value < 2 ** 64, "%s: token %s is beyond 64 bits" % (what, text))
        return value

    def close(self):
        for d in self.drivers:
            d.close()
        for cleanup in reversed(self.cleanups):
            cleanup()

    def logs(self):
        return "\n".join("--- %s stderr:\n%s" % (d.name, d.stderr_tail()) for d in self.drivers)


def _released_not_lost(ctx, drv, refs):
    lost = [e for e in drv.lost_events() if e.get("lease_ref") in refs]
    ctx.check(5, not lost, "a released lease was reported lost: %r" % lost)


def s_tokens(ctx):
    """Grants, renewal, release twice, grants again: tokens exact, never 0, growing."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a")
    n1, n2 = ctx.name("one"), ctx.name("two")
    r1 = ctx.ok(1, a.call("acquire", name=n1, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire")
    t1 = ctx.token(8, r1, "acquire")
    ctx.check(3, t1 != 0, "token 0 was handed out")
    server_token = http.lock(n1)["holder"]["token"]
    ctx.check(8, t1 == server_token, "the client's token %d is not the server's %d" % (t1, server_token))
    ctx.check(11, r1.get("lease_header", {}).get("Fencing-Lease"), "no Fencing-Lease header for the guard: %r" % r1)
    rn = ctx.ok(2, a.call("renew", lease_ref=r1["lease_ref"]), "renew")
    ctx.check(2, ctx.token(2, rn, "renew") == t1, "renewal changed the token %d to %s" % (t1, rn.get("token")))
    ctx.ok(5, a.call("release", lease_ref=r1["lease_ref"]), "release")
    ctx.check(5, a.call("release", lease_ref=r1["lease_ref"]).get("ok"), "a second release failed")
    ctx.check(5, not http.lock(n1)["held"], "the lock is still held after its release")
    r2 = ctx.ok(1, a.call("acquire", name=n1, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire again")
    t2 = ctx.token(1, r2, "acquire again")
    ctx.check(1, t2 > t1, "the next grant's token %d is not above %d" % (t2, t1))
    r3 = ctx.ok(1, a.call("acquire", name=n2, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire of another lock")
    t3 = ctx.token(1, r3, "acquire of another lock")
    ctx.check(1, t3 > t2, "another lock's grant got %d, not above %d (one counter for all)" % (t3, t2))
    ctx.check(3, 0 not in (t2, t3), "token 0 was handed out")
    for r in (r2, r3):
        ctx.ok(5, a.call("release", lease_ref=r["lease_ref"]), "release")
    _released_not_lost(ctx, a, {r1["lease_ref"], r2["lease_ref"], r3["lease_ref"]})


def s_large_tokens(ctx):
    """Tokens beyond 2^53 (--min-token 2^62) reach the application exactly, and back."""
    srv = ctx.server(args=["--min-token", str(2 ** 62)])
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a")
    n = ctx.name("large")
    r = ctx.ok(8, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire")
    t = ctx.token(8, r, "acquire")
    server_token = http.lock(n)["holder"]["token"]
    ctx.check(8, t == server_token and t > 2 ** 62, "the client's token %s is not the server's %d" % (t, server_token))
    ctx.check(3, t != 0, "token 0")
    if "fence" in a.capabilities:
        f = ctx.ok(8, a.call("fence", resource=ctx.name("res"), token=str(t)), "fence with the token")
        ctx.check(8, f.get("accepted") is True and f.get("max_token") == str(t),
                  "fence answered %r for token %d" % (f, t))
        stale = a.call("fence", resource=ctx.name("res"), token=str(t - 1))
        ctx.check(8, not stale.get("ok") and stale.get("error") == "stale_token",
                  "token %d (one below the mark %d) was not refused: %r" % (t - 1, t, stale))
    ctx.ok(5, a.call("release", lease_ref=r["lease_ref"]), "release")


def s_reentry(ctx):
    """Reentry keeps the token; each release gives one level back."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a", needs=["reentry"])
    n = ctx.name("reentry")
    r1 = ctx.ok(2, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire")
    t1 = ctx.token(2, r1, "acquire")
    r2 = ctx.ok(2, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0, reenter=r1["lease_ref"]), "reentry")
    ctx.check(2, ctx.token(2, r2, "reentry") == t1, "reentry changed the token %d to %s" % (t1, r2.get("token")))
    ctx.check(2, http.lock(n)["holder"]["count"] == 2, "the server does not count the reentry")
    ctx.ok(5, a.call("release", lease_ref=r2["lease_ref"]), "release of the reentry")
    state = http.lock(n)
    ctx.check(5, state["held"] and state["holder"]["token"] == t1, "one level's release freed the lock: %r" % state)
    ctx.ok(5, a.call("release", lease_ref=r1["lease_ref"]), "release")
    ctx.check(5, not http.lock(n)["held"], "the lock is held after every level was released")
    _released_not_lost(ctx, a, {r1["lease_ref"], r2["lease_ref"]})


def _waiter(http, name, box, **fields):
    """The next holder: the runner's own acquire, waiting in the queue, in a thread."""
    def run():
        box["answer"] = http.acquire(name, **fields)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _wait_waiters(ctx, http, name, count):
    if not wait_until(lambda: http.lock(name).get("waiters", 0) >= count, 10):
        ctx.check(9, False, "the lock never had %d waiters" % count)
        raise Abort()


def s_loss_paused_server(ctx):
    """The server stops (SIGSTOP) while a lease is held and another client waits: the client
    signals the loss before the server, continued after the lease's latest expiry plus
    LOSS_SLACK_MS, grants the next holder."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a")
    n = ctx.name("paused-server")
    r = ctx.ok(4, a.call("acquire", name=n, ttl_ms=LOSS_TTL_MS, wait_ms=0), "acquire")
    box = {}
    waiter = _waiter(Http(srv.url, 60), n, box, wait_ms=30000, ttl_ms=LONG_TTL_MS)
    _wait_waiters(ctx, http, n, 1)
    stopped = now_ms()
    srv.pause()
    # Every renewal the server took came before the stop: the lease ends by stopped + TTL.
    time.sleep((LOSS_TTL_MS + LOSS_SLACK_MS) / 1000.0)
    srv.resume()
    waiter.join(40)
    status, grant = box.get("answer", (None, None))
    if status != 200:
        ctx.check(4, False, "the next holder was not granted: %s %r" % (status, grant))
        raise Abort()
    event = a.lost_event(r["lease_ref"], 10)
    if ctx.check(4, event, "the client never signalled the loss (the server granted the next holder at %d)"
                 % grant["acquired_at_ms"]):
        ctx.check(4, event["at_ms"] <= grant["acquired_at_ms"],
                  "the loss was signalled at %d, %d ms after the next holder's grant (the server stopped at %d, "
                  "TTL %d ms)" % (event["at_ms"], event["at_ms"] - grant["acquired_at_ms"], stopped, LOSS_TTL_MS))
    c = a.call("check", lease_ref=r["lease_ref"])
    ctx.check(4, c.get("error") == "lost", "after its loss the client still vouches for the lease: %r" % c)
    a.call("release", lease_ref=r["lease_ref"])


def s_loss_force_released(ctx):
    """An operator force-releases the lease and the lock goes to another: the client signals
    the loss no later than the expiry the lease had."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a")
    n = ctx.name("forced")
    ttl = 3000
    r = ctx.ok(4, a.call("acquire", name=n, ttl_ms=ttl, wait_ms=0), "acquire")
    forced = now_ms()
    status, body = http.call("DELETE", "/v1/locks/" + n)
    if status != 200:
        ctx.check(4, False, "force-release: %s %r" % (status, body))
        raise Abort()
    status, grant = http.acquire(n, ttl_ms=LONG_TTL_MS)
    ctx.check(4, status == 200, "the next holder was not granted: %s %r" % (status, grant))
    event = a.lost_event(r["lease_ref"], ttl / 1000.0 + 10)
    if ctx.check(4, event, "the client never signalled the loss of a force-released lease"):
        ctx.check(4, event["at_ms"] <= forced + ttl,
                  "the loss was signalled at %d, after the latest expiry the lease had (%d)"
                  % (event["at_ms"], forced + ttl))
    c = a.call("check", lease_ref=r["lease_ref"])
    ctx.check(4, c.get("error") == "lost", "the client vouches for a force-released lease: %r" % c)
    a.call("release", lease_ref=r["lease_ref"])


def s_loss_paused_client(ctx):
    """The client's whole process stops (SIGSTOP, as in a long GC pause) past its lease's
    expiry, and another client gets the lock: on waking, the client vouches for nothing."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a", needs=["check_after_pause"])
    n = ctx.name("paused-client")
    r = ctx.ok(4, a.call("acquire", name=n, ttl_ms=LOSS_TTL_MS, wait_ms=0), "acquire")
    a.pause()
    try:
        status, grant = Http(srv.url, 60).acquire(n, wait_ms=30000, ttl_ms=LONG_TTL_MS)
    finally:
        a.resume()
    if status != 200:
        ctx.check(4, False, "the next holder was not granted: %s %r" % (status, grant))
        raise Abort()
    c = a.call("check", lease_ref=r["lease_ref"])
    ctx.check(4, c.get("error") == "lost",
              "woken after its lease expired and the next holder was granted, the client vouches for it: %r" % c)
    ctx.check(4, a.lost_event(r["lease_ref"], 10), "the client never signalled the loss")
    a.call("release", lease_ref=r["lease_ref"])


def s_fifo(ctx):
    """Two clients wait behind a holder: they are granted in the order they asked."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a")
    b = ctx.driver([srv.url], "conf-b")
    c = ctx.driver([srv.url], "conf-c")
    n = ctx.name("fifo")
    ra = ctx.ok(9, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire")
    sb = b.send("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=20000)
    _wait_waiters(ctx, http, n, 1)
    sc = c.send("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=20000)
    _wait_waiters(ctx, http, n, 2)
    ctx.ok(9, a.call("release", lease_ref=ra["lease_ref"]), "release")
    rb = ctx.ok(9, b.answer(sb, 30), "the first waiter's acquire")
    state = http.lock(n)
    ctx.check(9, state["holder"]["owner"] == "conf-b" and state["waiters"] == 1,
              "after the release the lock is not the first waiter's, with the second still waiting: %r" % state)
    ctx.ok(9, b.call("release", lease_ref=rb["lease_ref"]), "release")
    rc = ctx.ok(9, c.answer(sc, 30), "the second waiter's acquire")
    ta, tb, tc = (ctx.token(1, x, "acquire") for x in (ra, rb, rc))
    ctx.check(1, ta < tb < tc, "tokens in grant order are %d, %d, %d" % (ta, tb, tc))
    ctx.ok(9, c.call("release", lease_ref=rc["lease_ref"]), "release")


def s_lost_answer(ctx):
    """The answer of a grant is lost on the way back: the client's retry (same request_id)
    gets that grant, and the server holds one lease, not two."""
    srv = ctx.server()
    http = Http(srv.url)
    proxy = DropProxy(srv.port)
    ctx.cleanups.append(proxy.close)
    a = ctx.driver([proxy.url], "conf-a")
    n = ctx.name("lost-answer")
    proxy.arm("/acquire")
    # With a wait (the lock is free: nothing is waited for), so that every client retries: the
    # CLI retries only within --wait.
    r = ctx.ok(6, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=5000), "acquire whose first answer was lost")
    t = ctx.token(6, r, "acquire")
    if not ctx.check(6, len(proxy.dropped) == 1, "the proxy lost no answer (the client sent no acquire?)"):
        raise Abort()
    lost = proxy.dropped[0]
    ctx.check(6, lost.get("token") == t and r.get("lease_header", {}).get("Fencing-Lease") == lost.get("lease"),
              "the retry returned token %d, not the lost grant's %r" % (t, lost.get("token")))
    state = http.lock(n)
    ctx.check(6, state["held"] and state["holder"]["count"] == 1 and state["last_token"] == t,
              "the server holds another grant than the client's: %r" % state)
    ctx.ok(5, a.call("release", lease_ref=r["lease_ref"]), "release")


def s_request_id(ctx):
    """The same request_id twice: the same grant, or a clear error; never a second lease."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a", needs=["request_id"])
    n = ctx.name("request-id")
    rid = "conformance-" + uuid.uuid4().hex
    r1 = ctx.ok(6, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0, request_id=rid), "acquire")
    t1 = ctx.token(6, r1, "acquire")
    r2 = a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0, request_id=rid)
    if r2.get("ok"):
        ctx.check(6, ctx.token(6, r2, "repeat") == t1 and r2.get("lease_header") == r1.get("lease_header"),
                  "the repeat got another grant: %r, first %r" % (r2, r1))
    else:
        ctx.check(6, r2.get("error") not in ("driver_error", None), "the repeat failed unclearly: %r" % r2)
    state = http.lock(n)
    ctx.check(6, state["holder"]["token"] == t1 and state["holder"]["count"] == 1 and state["last_token"] == t1,
              "a repeat of request_id %s made a second lease or level: %r" % (rid, state))
    if r2.get("ok"):
        a.call("release", lease_ref=r2["lease_ref"])
    a.call("release", lease_ref=r1["lease_ref"])
    ctx.check(5, not http.lock(n)["held"], "the lock is held after its release")


def s_restart(ctx):
    """kill -9 of the server and a start on the same port and data: an acquire sent while it
    is down is retried until it answers, a held lease renews on, and the next token is
    above every earlier one."""
    srv = ctx.server()
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a", retry_for_ms=15000)
    n, n2 = ctx.name("restart"), ctx.name("restart-2")
    r1 = ctx.ok(10, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire")
    t1 = ctx.token(1, r1, "acquire")
    srv.kill9()
    # With a wait (the lock is free): the CLI retries only within --wait.
    pending = a.send("acquire", name=n2, ttl_ms=LONG_TTL_MS, wait_ms=15000)
    time.sleep(1.0)
    srv.start()
    r2 = ctx.ok(10, a.answer(pending, 40), "an acquire sent while the server was down")
    t2 = ctx.token(1, r2, "acquire")
    rn = ctx.ok(10, a.call("renew", lease_ref=r1["lease_ref"]), "renewal after the restart")
    ctx.check(2, ctx.token(2, rn, "renew") == t1, "the renewal changed the token")
    ctx.check(10, not a.lost_events(), "a lease was reported lost across a restart shorter than its TTL: %r"
              % a.lost_events())
    ctx.check(1, t2 > t1, "the first grant after the restart got %d, not above %d" % (t2, t1))
    for r in (r1, r2):
        ctx.ok(5, a.call("release", lease_ref=r["lease_ref"]), "release")
    r3 = ctx.ok(1, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire after the restart")
    ctx.check(1, ctx.token(1, r3, "acquire") > t2, "a token repeated or went back after the restart")
    ctx.check(5, http.lock(n)["holder"]["token"] == int(r3["token"]), "the server holds another grant")
    ctx.ok(5, a.call("release", lease_ref=r3["lease_ref"]), "release")


def s_failover(ctx):
    """Two gateways on etcd; the leader is killed: an acquire sent meanwhile is retried on
    the other until it leads, a held lease renews on, tokens go on growing."""
    if not Etcd.available():
        raise Skipped("etcd-server is not installed (scripts/deps.sh --test)")
    etcd = Etcd.start()
    ctx.cleanups.append(etcd.stop)
    store = "etcd://%s/conformance-%s" % (etcd.endpoint, uuid.uuid4().hex[:8])
    # --new-lock-space: the prefix is new (a gateway refuses an empty prefix without it).
    gateways = [ctx.server(args=["--leader-ttl", "2", "--new-lock-space"], store=store, label="gateway%d" % i)
                for i in (1, 2)]
    leader = wait_until(lambda: next((g for g in gateways if g.role() == "leader"), None), 30)
    if leader is None:
        raise Abort(ctx.check(10, False, "no gateway became the leader"))
    other = next(g for g in gateways if g is not leader)
    a = ctx.driver([g.url for g in gateways], "conf-a", retry_for_ms=30000)
    n, n2 = ctx.name("failover"), ctx.name("failover-2")
    r1 = ctx.ok(10, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS * 2, wait_ms=0), "acquire")
    t1 = ctx.token(1, r1, "acquire")
    leader.kill9()
    pending = a.send("acquire", name=n2, ttl_ms=LONG_TTL_MS, wait_ms=30000)
    if not wait_until(lambda: other.role() == "leader", 30):
        raise Abort(ctx.check(10, False, "the other gateway never took over"))
    r2 = ctx.ok(10, a.answer(pending, 60), "an acquire sent during the failover")
    t2 = ctx.token(1, r2, "acquire")
    rn = ctx.ok(10, a.call("renew", lease_ref=r1["lease_ref"]), "renewal after the failover")
    ctx.check(2, ctx.token(2, rn, "renew") == t1, "the renewal changed the token")
    ctx.check(10, not a.lost_events(), "a lease was reported lost across a failover shorter than its TTL: %r"
              % a.lost_events())
    ctx.check(1, t2 > t1, "the first grant after the failover got %d, not above %d" % (t2, t1))
    for r in (r1, r2):
        ctx.ok(5, a.call("release", lease_ref=r["lease_ref"]), "release")
    r3 = ctx.ok(1, a.call("acquire", name=n, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire after the failover")
    ctx.check(1, ctx.token(1, r3, "acquire") > t2, "a token repeated or went back after the failover")
    ctx.ok(5, a.call("release", lease_ref=r3["lease_ref"]), "release")


def s_guard(ctx):
    """Writes through the guard: the client's lease header passes for a write lease; a read
    lease's, a permit's and a force-released lease's writes are refused (409 stale_token)."""
    upstream = Upstream()
    ctx.cleanups.append(upstream.close)
    srv = ctx.server(args=["--guard", "/store/=" + upstream.url + "/"])
    http = Http(srv.url)
    a = ctx.driver([srv.url], "conf-a")

    def write(r, lock):
        path = "/store/" + lock
        if "write" in a.capabilities:
            w = ctx.ok(11, a.call("write", lease_ref=r["lease_ref"], method="PUT", path=path, body="data"), "write")
            return w.get("status"), w.get("code")
        status, body = http.call("PUT", path, b"data", headers=r.get("lease_header") or {})
        return status, body.get("error") if isinstance(body, dict) else None

    nw = ctx.name("guard-w")
    rw = ctx.ok(11, a.call("acquire", name=nw, ttl_ms=LONG_TTL_MS, wait_ms=0), "acquire")
    status, code = write(rw, nw)
    ctx.check(11, 200 <= status < 300, "a write lease's write got %s %s" % (status, code))
    tokens = [t for (m, p, t) in upstream.seen if p == "/" + nw]
    ctx.check(11, tokens == [rw["token"]], "the backend saw Fencing-Token %r, not %s" % (tokens, rw["token"]))
    status, body = http.call("PUT", "/store/" + nw, b"data", headers=rw.get("lease_header") or {})
    ctx.check(11, 200 <= status < 300, "a write with the client's lease_header got %s %r" % (status, body))
    if "read" in a.capabilities:
        nr = ctx.name("guard-r")
        rr = ctx.ok(11, a.call("acquire", name=nr, ttl_ms=LONG_TTL_MS, wait_ms=0, mode="read"), "read acquire")
        status, code = write(rr, nr)
        ctx.check(11, (status, code) == (409, "stale_token"), "a read lease's write got %s %s" % (status, code))
        ctx.ok(5, a.call("release", lease_ref=rr["lease_ref"]), "release")
    if "semaphore" in a.capabilities:
        ns = ctx.name("guard-s")
        rs = ctx.ok(11, a.call("acquire", name=ns, ttl_ms=LONG_TTL_MS, wait_ms=0, semaphore={"limit": 2}),
                    "permit")
        status, code = write(rs, ns)
        ctx.check(11, (status, code) == (409, "stale_token"), "a permit's write got %s %s" % (status, code))
        ctx.ok(5, a.call("release", lease_ref=rs["lease_ref"]), "release")
    status, body = http.call("DELETE", "/v1/locks/" + nw)
    ctx.check(11, status == 200, "force-release: %s %r" % (status, body))
    status, code = write(rw, nw)
    ctx.check(11, (status, code) == (409, "stale_token"), "a force-released lease's write got %s %s" % (status, code))
    a.call("release", lease_ref=rw["lease_ref"])


VALID_DURATIONS = [("250ms", 250), ("15s", 15000), ("1.5s", 1500), ("2m", 120000), ("1h", 3600000),
                   ("0.25s", 250), ("1.25m", 75000)]
INVALID_DURATIONS = ["15", "1.5", "1.5ms", "-1s", "+1s", "1 s", " 15s", "15s ", "1e3ms", "", "s", "15S", "1d",
                     "1.s", ".5s", "1h30m", "0x10s", "\u0661\u0665s", "9007199254740992ms"]


def s_durations(ctx):
    """The duration grammar: digits, an optional fraction, a unit; whole milliseconds."""
    srv = ctx.server()
    a = ctx.driver([srv.url], "conf-a", needs=["duration"])
    for text, ms in VALID_DURATIONS:
        d = a.call("duration", text=text)
        ctx.check(7, d.get("ok") and d.get("ms") == ms, "%r should be %d ms, got %r" % (text, ms, d))
    for text in INVALID_DURATIONS:
        d = a.call("duration", text=text)
        ctx.check(7, not d.get("ok") and d.get("error") == "bad_duration", "%r should be refused, got %r" % (text, d))


# name, function, the invariants it checks (for n/a and skip in the table)
SCENARIOS = [
    ("tokens", s_tokens, (1, 2, 3, 5, 8, 11)),
    ("large_tokens", s_large_tokens, (3, 8)),
    ("reentry", s_reentry, (2, 5)),
    ("loss_paused_server", s_loss_paused_server, (4,)),
    ("loss_force_released", s_loss_force_released, (4,)),
    ("loss_paused_client", s_loss_paused_client, (4,)),
    ("fifo", s_fifo, (1, 9)),
    ("lost_answer", s_lost_answer, (6,)),
    ("request_id", s_request_id, (6,)),
    ("restart", s_restart, (1, 2, 10)),
    ("failover", s_failover, (1, 2, 10)),
    ("guard", s_guard, (11,)),
    ("durations", s_durations, (7,)),
]
