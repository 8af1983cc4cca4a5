#!/usr/bin/env python3
"""bench/etcd_floor.py — what one etcd write costs, for bench/scaleout.sh's notes.

Sends --n transactions one after the other (one client, one kept-alive connection) to
etcd's JSON gateway at --url, each putting --keys keys of --value-bytes bytes under
--prefix, and prints one line: keys=K value_bytes=B n=N p50_ms=.. mean_ms=.. keys_per_s=..
With --keys 1 that is the latency of one Raft write (WAL fsync on a quorum); with the keys
of a leasegate batch it is the floor under leasegate's commit time. 127.0.0.1 only."""
import argparse
import base64
import http.client
import json
import statistics
import sys
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--keys", type=int, default=1)
    ap.add_argument("--value-bytes", type=int, default=200)
    ap.add_argument("--prefix", default="etcdfloor/")
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    if u.hostname != "127.0.0.1":
        sys.exit("etcd_floor: 127.0.0.1 only")
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    value = base64.b64encode(b"v" * a.value_bytes).decode()
    times = []
    for i in range(a.n):
        ops = [{"request_put": {"key": base64.b64encode(("%s%d/%d" % (a.prefix, a.keys, k)).encode()).decode(),
                                "value": value}} for k in range(a.keys)]
        body = json.dumps({"success": ops})
        t0 = time.monotonic()
        conn.request("POST", "/v3/kv/txn", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        times.append(time.monotonic() - t0)
        if r.status != 200:
            sys.exit("etcd_floor: HTTP %d" % r.status)
    # clean up after ourselves
    end = a.prefix[:-1] + chr(ord(a.prefix[-1]) + 1)
    conn.request("POST", "/v3/kv/deleterange", body=json.dumps({
        "key": base64.b64encode(a.prefix.encode()).decode(), "range_end": base64.b64encode(end.encode()).decode()}))
    conn.getresponse().read()
    mean = statistics.mean(times)
    print("keys=%d value_bytes=%d n=%d p50_ms=%.2f mean_ms=%.2f keys_per_s=%.0f" % (
        a.keys, a.value_bytes, a.n, 1000 * statistics.median(times), 1000 * mean, a.keys / mean))


if __name__ == "__main__":
    main()
