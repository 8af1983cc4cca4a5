#!/usr/bin/env python3
"""bench/scaleout_failover.py — one failover measurement for bench/scaleout.sh.

A client loops acquire + release (a fresh lock name per pair, so a grant whose answer was
lost to the failure blocks nothing) through a gateway; after --warm seconds this helper
sends SIGKILL to --kill-pid (a leasegate gateway or an etcd member that bench/scaleout.sh
started) and measures the time from the kill to the first grant of an acquire that was
*sent* after the kill (so the old leader cannot have made it). Every wait is bounded.

    scaleout_failover.py --urls http://127.0.0.1:P1[,http://127.0.0.1:P2,...] --kill-pid PID
                         [--rotate] [--warm 1.0] [--jitter 0] [--max-wait 30] [--after 1.0] [--name PREFIX]
                         [--logs F1,F2,F3] [--etcd URL,URL,URL --election PREFIX/leader] [--trace]

--urls: the gateways, first one used first. Without --rotate the client stays on the first
(reconnecting after errors); with --rotate it moves to the next URL after a connection error
or a 503, as leasegate's own clients do with --server A,B,C.

Prints one line of key=value pairs on stdout:
  kill_to_grant_ms   kill sent -> first grant (answer received) of an acquire sent after it
  last_grant_before_ms  the last grant received before the kill, ms before the kill
  failed             acquires/releases that failed between the kill and that grant, by kind
  grants_before / grants_after  grants in the warm-up / in --after seconds after the first new grant
  max_gap_ms         the longest time between two grants received one after the other (the whole run)
  tokens_increasing  1 when every token is larger than every earlier one (across the failover)
  leader_after       the leader URL the gateway that granted reports in /healthz afterwards
  via                the gateway URL that answered the first grant after the kill
  elected_ms / loaded_ms  with --logs (the gateways' stderr files): kill -> the first
                     "elected leader" / "loaded N locks" line written after the kill
  key_gone_ms        with --etcd URL --election PREFIX/leader: kill -> the leader's election key
                     (the oldest under PREFIX/leader/ at the kill) is gone from etcd
Exit status 0 when a grant came within --max-wait, 1 otherwise (the line is printed anyway).
"""
import argparse
import base64
import http.client
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.parse

REQ_TIMEOUT_S = 3.0  # one request; a forwarded acquire without wait_ms answers at once
PAUSE_S = 0.005  # after a failed request: bounds the request rate while nothing answers


class Client:
    def __init__(self, urls, rotate):
        self.urls = urls
        self.rotate = rotate
        self.i = 0
        self.conn = None

    @property
    def url(self):
        return self.urls[self.i]

    def _next(self):
        self.close()
        if self.rotate:
            self.i = (self.i + 1) % len(self.urls)

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None

    def post(self, path, body):
        """(status, decoded body or None); status 0 for a connection error or timeout."""
        if self.conn is None:
            u = urllib.parse.urlsplit(self.url)
            self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=REQ_TIMEOUT_S)
        try:
            self.conn.request("POST", path, body=json.dumps(body),
                              headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            data = resp.read()
            status = resp.status
            if resp.getheader("Connection", "").lower() == "close":
                self.close()
        except (OSError, http.client.HTTPException):
            self._next()
            return 0, None
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = None
        if status == 503:
            self._next()
        return status, doc


class LogWatch(threading.Thread):
    """Times, after the kill, of the first 'elected leader' and 'loaded ' lines that any of
    the gateways' stderr files gets (polled every 5 ms; only text appended after start())."""

    def __init__(self, paths):
        super().__init__(daemon=True)
        self.paths = paths
        self.offsets = {p: (os.path.getsize(p) if os.path.exists(p) else 0) for p in paths}
        self.t0 = time.monotonic()
        self.elected = self.loaded = None
        self.stop = False

    def run(self):
        while not self.stop and (self.elected is None or self.loaded is None):
            for p in self.paths:
                try:
                    with open(p, "rb") as f:
                        f.seek(self.offsets[p])
                        text = f.read().decode(errors="replace")
                except OSError:
                    continue
                now = time.monotonic() - self.t0
                if self.elected is None and "elected leader" in text:
                    self.elected = now
                if self.loaded is None and "leasegate: loaded " in text:
                    self.loaded = now
            time.sleep(0.005)


def etcd_post(url, path, body):
    c = http.client.HTTPConnection(urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port,
                                   timeout=1)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        return json.loads(c.getresponse().read())
    finally:
        c.close()


class KeyWatch(threading.Thread):
    """When the oldest key under the election prefix (the leader's) goes (polled every 10 ms)."""

    def __init__(self, urls, election):
        super().__init__(daemon=True)
        self.urls = urls
        pfx = election.rstrip("/") + "/"
        self.range = {"key": base64.b64encode(pfx.encode()).decode(),
                      "range_end": base64.b64encode((pfx[:-1] + "0").encode()).decode()}
        self.key = None
        for u in self.urls:
            try:
                kvs = etcd_post(u, "/v3/kv/range", dict(self.range, keys_only=True)).get("kvs", [])
                if kvs:
                    self.key = min(kvs, key=lambda kv: int(kv["create_revision"]))["key"]
                break
            except (OSError, ValueError, http.client.HTTPException):
                continue
        self.t0 = time.monotonic()
        self.gone = None
        self.stop = False

    def run(self):
        while self.key and not self.stop and self.gone is None:
            for u in self.urls:  # a member may be the one killed
                try:
                    r = etcd_post(u, "/v3/kv/range", {"key": self.key, "count_only": True})
                except (OSError, ValueError, http.client.HTTPException):
                    continue
                if int(r.get("count", 0)) == 0:
                    self.gone = time.monotonic() - self.t0
                break
            time.sleep(0.01)


def healthz(url):
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=2)
    try:
        c.request("GET", "/healthz")
        r = c.getresponse()
        return json.loads(r.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", required=True)
    ap.add_argument("--kill-pid", type=int, required=True)
    ap.add_argument("--rotate", action="store_true")
    ap.add_argument("--warm", type=float, default=1.0)
    ap.add_argument("--jitter", type=float, default=0.0,
                    help="kill at a random time in [warm, warm + jitter] (e.g. the keepalive interval)")
    ap.add_argument("--max-wait", type=float, default=30.0)
    ap.add_argument("--after", type=float, default=1.0)
    ap.add_argument("--name", default="failover-%d" % os.getpid())
    ap.add_argument("--trace", action="store_true", help="every failed request on stderr")
    ap.add_argument("--logs", default="", help="the gateways' stderr files, comma-separated")
    ap.add_argument("--etcd", default="", help="etcd member URLs, comma-separated (with --election)")
    ap.add_argument("--election", default="", help="the election prefix, PREFIX/leader")
    a = ap.parse_args()
    a.warm += random.uniform(0, a.jitter)
    client = Client(a.urls.split(","), a.rotate)

    t_start = time.monotonic()
    t_kill = None
    t_grant = None
    via = ""
    last_grant_before = None
    grants_before = grants_after = 0
    failed = {}
    max_token = 0
    tokens_ok = 1
    n = 0
    prev_grant = None
    max_gap = 0.0
    while True:
        now = time.monotonic()
        if t_kill is None and now - t_start >= a.warm:
            watch = LogWatch(a.logs.split(",")) if a.logs else None
            keys = KeyWatch(a.etcd.split(","), a.election) if a.etcd and a.election else None
            os.kill(a.kill_pid, signal.SIGKILL)
            t_kill = time.monotonic()
            for w in (watch, keys):
                if w:
                    w.t0 = t_kill
                    w.start()
        if t_kill is not None and t_grant is None and now - t_kill > a.max_wait:
            break
        if t_grant is not None and now - t_grant > a.after:
            break
        if now - t_start > a.warm + a.max_wait + a.after + 10:  # belt and braces
            break
        n += 1
        name = "%s-%d" % (a.name, n)
        sent = time.monotonic()
        url = client.url
        st, doc = client.post("/v1/locks/%s/acquire" % name,
                              {"owner": "scaleout-failover", "ttl_ms": 10000, "request_id": "r%d" % n})
        got = time.monotonic()
        if st == 200 and doc and "lease" in doc:
            if prev_grant is not None:
                max_gap = max(max_gap, got - prev_grant)
            prev_grant = got
            tok = int(doc.get("token", 0))
            if tok <= max_token:
                tokens_ok = 0
            max_token = max(max_token, tok)
            if t_kill is None:
                grants_before += 1
                last_grant_before = got
            elif sent > t_kill:
                if t_grant is None:
                    t_grant = got
                    via = url
                else:
                    grants_after += 1
            rs, _ = client.post("/v1/locks/%s/release" % name, {"lease": doc["lease"]})
            if rs != 200 and t_kill is not None and t_grant is None:
                failed["release_%s" % (rs or "conn")] = failed.get("release_%s" % (rs or "conn"), 0) + 1
            continue
        if a.trace and t_kill is not None:
            print("scaleout_failover: +%.3f s acquire sent, +%.3f s answered %s via %s: %s" % (
                sent - t_kill, got - t_kill, st or "conn error", url, json.dumps(doc)[:160]), file=sys.stderr)
        if t_kill is not None and t_grant is None:
            k = "acquire_%s" % (st or "conn")
            failed[k] = failed.get(k, 0) + 1
        time.sleep(PAUSE_S)
    client.close()
    h = healthz(via) if via else None
    ms = lambda v: "%.0f" % (v * 1000) if v is not None else "-"
    if t_kill is not None and a.logs:
        watch.stop = True
        watch.join(1)
    if t_kill is not None and keys:
        keys.stop = True
        keys.join(2)
    out = {
        "kill_to_grant_ms": "%.0f" % ((t_grant - t_kill) * 1000) if t_grant and t_kill else "-",
        "last_grant_before_ms": "%.0f" % ((t_kill - last_grant_before) * 1000) if t_kill and last_grant_before else "-",
        "failed": ",".join("%s:%d" % kv for kv in sorted(failed.items())) or "none",
        "grants_before": grants_before,
        "grants_after": grants_after,
        "max_gap_ms": "%.0f" % (max_gap * 1000),
        "tokens_increasing": tokens_ok,
        "max_token": max_token,
        "via": via or "-",
        "leader_after": (h or {}).get("leader", "-"),
        "elected_ms": ms(watch.elected) if t_kill is not None and a.logs else "-",
        "loaded_ms": ms(watch.loaded) if t_kill is not None and a.logs else "-",
        "key_gone_ms": ms(keys.gone) if t_kill is not None and keys else "-",
    }
    print(" ".join("%s=%s" % kv for kv in out.items()))
    sys.stdout.flush()
    return 0 if t_grant else 1


if __name__ == "__main__":
    sys.exit(main())
