"""A lock client as a separate process, for the guard-proxy tests (test_guard.py).

  guard_client.py stall PORT LOCK PATH
      acquire LOCK, PUT "A1" to PATH through the guard with the lease (Fencing-Lease),
      renew the lease to ttl_ms=300, print {"event":"ready", ...}, then block on stdin
      (the test SIGSTOPs us here); on the line "go" PUT "A-late" with the same, by now
      ended, lease and print {"event":"late", "status":..., "body":...}.

  guard_client.py counter PORT LOCK PATH ITERATIONS OWNER
      ITERATIONS times: acquire LOCK (long-poll), GET PATH through the guard, PUT the
      value + 1 with the lease, release. Prints {"event":"done", ...}; exits 1 on the
      first unexpected answer (printing {"event":"error", ...}).

PATH must be bound to LOCK: with the guard's default binding, PATH is the prefix
followed by the lock's name (lock "a/b" -> /store/a/b).

One JSON object per line on stdout, flushed. Talks only to 127.0.0.1.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def put(client, path, data, lease):
    return client.request("PUT", path, raw=data, headers={
        "Content-Type": "text/plain", "Fencing-Lease": lease})


def stall(port, lock, path):
    c = harness.Client(port, timeout=30.0)
    st, _, g = c.acquire(lock, "client-A", ttl_ms=60000)
    if st != 200:
        emit({"event": "error", "step": "acquire", "status": st, "body": g})
        return 1
    pst, _, pbody = put(c, path, b"A1", g["lease"])
    # The 300 ms lease starts once the write is done, however slow the commits.
    st, _, r = c.renew(lock, g["lease"], ttl_ms=300)
    if st != 200:
        emit({"event": "error", "step": "renew", "status": st, "body": r})
        return 1
    emit({"event": "ready", "token": g["token"], "lease": g["lease"], "put_status": pst,
          "put_body": pbody if isinstance(pbody, (dict, str)) else None})
    line = sys.stdin.readline()
    if line.strip() != "go":
        emit({"event": "error", "step": "stdin", "line": line})
        return 1
    st, hdrs, body = put(c, path, b"A-late", g["lease"])
    emit({"event": "late", "status": st, "body": body, "content_type": hdrs.get("content-type", "")})
    return 0


def counter(port, lock, path, iterations, owner):
    c = harness.Client(port, timeout=60.0)
    tokens = []
    for i in range(iterations):
        st, _, g = c.acquire(lock, owner, ttl_ms=30000, wait_ms=60000)
        if st != 200:
            emit({"event": "error", "step": "acquire", "i": i, "status": st, "body": g})
            return 1
        token = g["token"]
        tokens.append(token)
        st, _, body = c.request("GET", path)
        if st != 200:
            emit({"event": "error", "step": "get", "i": i, "status": st, "body": body})
            return 1
        try:
            value = int(c.last_raw.decode("ascii").strip())
        except ValueError:
            emit({"event": "error", "step": "parse", "i": i, "raw": c.last_text[:200]})
            return 1
        st, _, body = put(c, path, str(value + 1).encode("ascii"), g["lease"])
        if st not in (201, 204):
            emit({"event": "error", "step": "put", "i": i, "status": st, "body": body})
            return 1
        st, _, body = c.release(lock, g["lease"])
        if st != 200:
            emit({"event": "error", "step": "release", "i": i, "status": st, "body": body})
            return 1
    emit({"event": "done", "owner": owner, "iterations": iterations, "tokens": tokens})
    return 0


def main(argv):
    if len(argv) >= 4 and argv[0] == "stall":
        return stall(int(argv[1]), argv[2], argv[3])
    if len(argv) >= 6 and argv[0] == "counter":
        return counter(int(argv[1]), argv[2], argv[3], int(argv[4]), argv[5])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
