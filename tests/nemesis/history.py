"""The nemesis suite's history: every call a client made, with what it was answered (or that
no answer came), and a checker of the promises leasegate makes about those answers.

An Op is one call: its kind, the lock (or fence resource) it names, when it was sent
(t_inv) and answered (t_ack; None: no answer), the status and body of the answer, and the
arguments that matter (lease, token, request_id). Times are the wall clock (time.time()),
the clock the gateways on this machine stamp acquired_at_ms and expires_at_ms with.

The checker reports violations, never guesses: each rule looks only at what must have
happened given the answers (an unanswered call may or may not have taken effect; it is
counted both ways, whichever makes a violation harder to claim).

  tokens      no token granted to two leases, and a grant acknowledged before another was
              sent has the smaller token
  overlap     no two leases hold one lock at once: a grant's acquired_at is not before the
              end the previous holder certainly had (its latest acknowledged expires_at, or
              the first release or force-release that may have ended it)
  lost        no acknowledged grant or renewal is lost: while a lease certainly holds (as
              above), a renewal or release of it is not refused, and a read shows it
  fence       no acknowledged fence mark is lost: a fence check sent after a mark m was
              acknowledged accepts no token below m, and every answer shows max_token >= m
  reads       no read older than an answer it follows: a read sent after a grant was
              acknowledged shows a last_token at least that grant's, and not a holder
              whose release or force-release was acknowledged before it was sent; no grant
              (a request_id's replay) or renewal is answered for such a lease
  backend     the backend never applies a lower token after a higher one, per path
  permits     a semaphore's leases (sem_acquire, each of `permits` permits) never hold more
              than its limit together: at a grant's acquired_at, the permits of the other
              leases that certainly held then (as above) and its own are at most the limit
  values      a lock's value (issue 40) is never written by a lease that no longer holds it: a
              write answered 200 was not sent after its lease's release or force-release was
              acknowledged, nor after a grant of the lock with a larger token was; and never
              lost once acknowledged: a read sent after a write of version v was acknowledged
              (or after a read that showed v) shows a version at least v, and the value of
              v's own write when it shows v; no value refused (409) is ever shown
"""

import bisect
import collections
import itertools
import threading
import time

SLACK_S = 0.05  # the gateway and the client read the same wall clock a few ms apart


class Op:
    _ids = itertools.count(1)

    def __init__(self, kind, lock, gw=None, **args):
        self.id = next(Op._ids)
        self.kind, self.lock, self.gw, self.args = kind, lock, gw, args
        self.t_inv = time.time()
        self.t_ack = None
        self.status = None
        self.body = None

    def done(self, status, body):
        self.t_ack = time.time()
        self.status, self.body = status, body if isinstance(body, dict) else {"text": body}
        return self

    @property
    def ok(self):
        return self.status == 200

    def __repr__(self):
        return "Op#%d(%s %s @%s inv=%.3f ack=%s %s %s %s)" % (
            self.id, self.kind, self.lock, self.gw, self.t_inv,
            "%.3f" % self.t_ack if self.t_ack else "-", self.status, self.args, self.body)


class History:
    def __init__(self):
        self.mu = threading.Lock()
        self.ops = []

    def add(self, op):
        with self.mu:
            self.ops.append(op)
        return op

    def snapshot(self):
        with self.mu:
            return list(self.ops)


def _grants(ops):
    """Acknowledged grants, one per lease (the first answer; replays repeat it), and when
    each was sent first: the earliest call with its request_id (an unanswered first try
    may be the one that was granted)."""
    by_lease, first = {}, {}
    for op in ops:
        rid = op.args.get("rid")
        if op.kind == "acquire" and rid and (rid not in first or op.t_inv < first[rid]):
            first[rid] = op.t_inv
    for op in ops:
        if op.kind == "acquire" and op.ok and "lease" in op.body:
            by_lease.setdefault(op.body["lease"], op)
    sent = {lease: first.get(g.args.get("rid"), g.t_inv) for lease, g in by_lease.items()}
    return by_lease, sent


class _PrefixMax:
    """The largest value among items acknowledged before a time (and which item)."""

    def __init__(self, items):  # (t_ack, value, item)
        self.items = sorted(items, key=lambda x: x[0])
        self.times = [x[0] for x in self.items]
        self.best, best = [], None
        for x in self.items:
            if best is None or x[1] > best[1]:
                best = x
            self.best.append(best)

    def before(self, t):
        i = bisect.bisect_left(self.times, t)
        return self.best[i - 1] if i else None


def check(ops, applied=None):
    """Every violation found, as text (empty: none). applied: {path: [token, ...]} in the
    order the backend applied them."""
    out = []
    grants, sent = _grants(ops)
    by_lock = collections.defaultdict(list)
    by_lease = collections.defaultdict(list)
    for op in ops:
        by_lock[op.lock].append(op)
        if op.args.get("lease"):
            by_lease[op.args["lease"]].append(op)

    def expiry(lease, g):
        """The latest expires_at (s) acknowledged for the lease: its grant's or a renewal's."""
        e = g.body["expires_at_ms"] / 1000.0
        for op in by_lease[lease]:
            if op.kind in ("renew", "sem_renew") and op.ok:
                e = max(e, op.body.get("expires_at_ms", 0) / 1000.0)
        return e

    def certain_end(lease, g, skip=None):
        """Until when the lease certainly held its lock: its acknowledged expiry, or the
        first call that may have ended it earlier (a release of it other than skip; a
        force-release of the lock that may have been applied after the grant)."""
        end = expiry(lease, g)
        acquired = g.body["acquired_at_ms"] / 1000.0
        for op in by_lease[lease]:
            if op.kind in ("release", "sem_release") and op is not skip:
                end = min(end, op.t_inv)
        for op in by_lock[g.lock]:
            if op.kind == "force" and (op.t_ack is None or op.t_ack >= acquired):
                end = min(end, op.t_inv)
        return end

    ends = {lease: certain_end(lease, g) for lease, g in grants.items()}
    # tokens
    by_token = {}
    for lease, g in grants.items():
        t = g.body["token"]
        if t in by_token and by_token[t] != lease:
            out.append("tokens: token %d granted to two leases: %r and %r" % (t, grants[by_token[t]], g))
        by_token.setdefault(t, lease)
    acked = _PrefixMax((g.t_ack, g.body["token"], g) for g in grants.values())
    for lease, g in grants.items():
        prior = acked.before(sent[lease])
        if prior and prior[1] >= g.body["token"]:
            out.append("tokens: %r acknowledged before %r was sent, with a token not below it" % (prior[2], g))
    # overlap, per lock in token order
    for lock in {g.lock for g in grants.values()}:
        gs = sorted((g for g in grants.values() if g.lock == lock), key=lambda g: g.body["token"])
        for g1, g2 in zip(gs, gs[1:]):
            end1, start2 = ends[g1.body["lease"]], g2.body["acquired_at_ms"] / 1000.0
            if start2 < end1 - SLACK_S:
                out.append("overlap: %s held by token %d until at least %.3f, granted to token %d at %.3f: %r, %r"
                           % (lock, g1.body["token"], end1, g2.body["token"], start2, g1, g2))
    # lost grants and renewals; reads that miss a certain holder
    for lease, g in grants.items():
        end = ends[lease]
        for op in by_lease[lease]:
            if op.kind not in ("renew", "release") or op.status != 409 or op.t_inv < g.t_ack:
                continue
            held_until = certain_end(lease, g, skip=op) if op.kind == "release" else end
            if op.t_ack < held_until - SLACK_S:
                out.append("lost: %r refused while the lease certainly held (until %.3f): %r" % (op, held_until, g))
        for op in by_lock[g.lock]:
            if op.t_ack is None or op.t_inv < g.t_ack or op.t_ack > end - SLACK_S:
                continue
            if op.kind == "read" and op.ok and (op.body.get("holder") or {}).get("token") != g.body["token"]:
                out.append("lost: %r does not show the certain holder (token %d, until %.3f)"
                           % (op, g.body["token"], end))
    # fence marks
    for resource in {op.lock for op in ops if op.kind == "fence"}:
        fs = [op for op in by_lock[resource] if op.kind == "fence" and op.t_ack is not None]
        marks = _PrefixMax((f.t_ack, f.args["token"], f) for f in fs if f.ok and f.body.get("accepted"))
        for f2 in fs:
            prior = marks.before(f2.t_inv)
            if not prior:
                continue
            if f2.ok and f2.body.get("accepted") and f2.args["token"] < prior[1]:
                out.append("fence: %r accepted a token below the mark %d acknowledged by %r" % (f2, prior[1], prior[2]))
            if "max_token" in f2.body and f2.body["max_token"] < prior[1]:
                out.append("fence: %r shows max_token below the mark %d acknowledged by %r"
                           % (f2, prior[1], prior[2]))
    # reads
    for lock, lops in by_lock.items():
        granted = _PrefixMax((g.t_ack, g.body["token"], g) for g in grants.values() if g.lock == lock)
        ended = []  # (t_ack, token): releases and force-releases acknowledged
        for op in lops:
            if op.kind == "release" and op.ok and op.args.get("token") is not None:
                ended.append((op.t_ack, op.args["token"]))
            if op.kind == "force" and op.ok and op.body.get("revoked"):
                ended.append((op.t_ack, op.body["revoked"]["token"]))
        for op in lops:
            # A grant (a request_id's replay) or renewal answered for a lease whose end
            # was acknowledged before it was sent: two holders, by the servers' answers.
            token = op.body.get("token") if op.ok and op.kind in ("acquire", "renew") else None
            for t_ack, ended_token in ended:
                if token is not None and t_ack < op.t_inv and token == ended_token:
                    out.append("reads: %r answers for token %d, whose end was acknowledged at %.3f"
                               % (op, token, t_ack))
        for r in lops:
            if r.kind != "read" or not r.ok:
                continue
            prior = granted.before(r.t_inv)
            if prior and r.body.get("last_token", 0) < prior[1]:
                out.append("reads: %r shows last_token below the token %d acknowledged by %r" % (r, prior[1], prior[2]))
            holder = (r.body.get("holder") or {}).get("token")
            for t_ack, token in ended:
                if t_ack < r.t_inv and holder == token:
                    out.append("reads: %r shows holder token %d, whose end was acknowledged at %.3f"
                               % (r, token, t_ack))
    # permits
    sems = collections.defaultdict(dict)
    for op in ops:
        if op.kind == "sem_acquire" and op.ok and "lease" in op.body:
            sems[op.lock].setdefault(op.body["lease"], op)
    for sem, leases in sems.items():
        gl = list(leases.values())
        sem_ends = {lease: certain_end(lease, g) for lease, g in leases.items()}
        for g in gl:
            t = g.body["acquired_at_ms"] / 1000.0
            others = [h for h in gl if h is not g and h.body["acquired_at_ms"] / 1000.0 < t - SLACK_S
                      and sem_ends[h.body["lease"]] > t + SLACK_S]
            held = sum(h.body.get("permits", 1) for h in others)
            if held + g.body.get("permits", 1) > g.body["limit"]:
                out.append("permits: %r granted %d permits at %.3f while %d others held %d (limit %d): %r"
                           % (g, g.body.get("permits", 1), t, len(others), held, g.body["limit"], others))
    # values
    for lock, lops in by_lock.items():
        writes = [op for op in lops if op.kind == "value"]
        if not writes:
            continue
        larger = _PrefixMax((g.t_ack, g.body["token"], g) for g in grants.values() if g.lock == lock)
        ended = {}  # token -> when its end was first acknowledged
        for op in lops:
            t = None
            if op.kind == "release" and op.ok and op.args.get("token") is not None:
                t = op.args["token"]
            elif op.kind == "force" and op.ok and op.body.get("revoked"):
                t = op.body["revoked"]["token"]
            if t is not None and (t not in ended or op.t_ack < ended[t]):
                ended[t] = op.t_ack
        acked, refused = {}, set()
        for w in writes:
            if w.status == 409:
                refused.add(w.args["value"])
            if not w.ok:
                continue
            token = w.args["token"]
            prior = larger.before(w.t_inv)
            if token in ended and ended[token] < w.t_inv:
                out.append("values: %r answered 200 after its lease's end was acknowledged at %.3f" % (w, ended[token]))
            elif prior and prior[1] > token:
                out.append("values: %r answered 200 after a grant of token %d was acknowledged: %r" % (w, prior[1], prior[2]))
            v = w.body.get("value_version")
            if v in acked and acked[v].args["value"] != w.args["value"]:
                out.append("values: version %s acknowledged for two writes: %r, %r" % (v, acked[v], w))
            acked[v] = w
        shown_before = _PrefixMax((r.t_ack, r.body["value_version"], r) for r in lops
                                  if r.kind == "read" and r.ok and isinstance(r.body.get("value_version"), int))
        written_before = _PrefixMax((w.t_ack, v, w) for v, w in acked.items())
        for r in lops:
            if r.kind != "read" or not r.ok or not isinstance(r.body.get("value_version"), int):
                continue
            v, shown = r.body["value_version"], r.body.get("value")
            if shown in refused:
                out.append("values: %r shows the value of a refused write" % r)
            if v in acked and shown != acked[v].args["value"]:
                out.append("values: %r shows version %d with another value than its write %r" % (r, v, acked[v]))
            for prior in (written_before.before(r.t_inv), shown_before.before(r.t_inv)):
                if prior and v < prior[1]:
                    out.append("values: %r shows version %d after %r showed %d" % (r, v, prior[2], prior[1]))
    # backend
    for path, tokens in (applied or {}).items():
        for a, b in zip(tokens, tokens[1:]):
            if b < a:
                out.append("backend: %s applied token %d after token %d (all: %r)" % (path, b, a, tokens))
    return out
