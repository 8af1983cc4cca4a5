#!/usr/bin/env python3
"""The contract driver of the CLI (tests/conformance/PROTOCOL.md): each step is what a shell
script does with the `leasegate` command ($LEASEGATE_BIN).

- acquire: `leasegate run --lock NAME ... -- sh -c SCRIPT`, the CLI's way to hold a lock while
  work runs: run renews the lease and its watchdog stops the command (SIGTERM) before the
  lease can expire. SCRIPT prints the token, the lease and its own pid, then waits: SIGTERM
  (the watchdog: the lease is lost) prints "lost" and the time, SIGUSR1 (this driver's
  release) ends it with status 0, after which run releases the lock. A reentry is
  `leasegate acquire --lease-file -` with that lease.
- renew, release: `leasegate renew|release --lease-file -` (release of a run's lease: its
  command ends, run releases).
- write: `curl` with `Fencing-Lease: $LEASEGATE_LEASE`, as a command under run writes.
- duration: the CLI's --ttl (an acquire of a lock of its own, released at once).

Errors come from the exit status (3 lock_held or semaphore_full, 4 not_holder, 75 lost,
2 a usage error) and the code the CLI names on stderr ("CODE (HTTP N)")."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid

BIN = os.environ.get("LEASEGATE_BIN") or "leasegate"
CAPABILITIES = ["read", "semaphore", "reentry", "write", "duration"]
# The command run holds the lock for. $! is the background sleep, ended with it.
SCRIPT = r"""
trap 'printf "lost %s\n" "$(date +%s%3N)"; kill $! 2>/dev/null; exit 143' TERM
trap 'kill $! 2>/dev/null; exit 0' USR1
printf 'granted %s %s %s %s\n' "$$" "$LEASEGATE_TOKEN" "$LEASEGATE_LEASE" "$LEASEGATE_SERVER"
while :; do sleep 3600 & wait $!; done
"""
CODE_RE = re.compile(r": ([a-z_]+) \(HTTP \d+\)")
_out = threading.Lock()


def emit(message):
    with _out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def cli_error(status, stderr, semaphore=False, lost_on_not_holder=False):
    """The answer for a failed leasegate command."""
    m = CODE_RE.search(stderr)
    if status == 3:
        code = "semaphore_full" if semaphore else "lock_held"
    elif status == 4:
        code = "lost" if lost_on_not_holder else "not_holder"
    elif status == 75:
        code = "lost"
    elif m:
        code = m.group(1)
    elif status == 2:
        code = "bad_request"
    elif status == 1:
        code = "unavailable"
    else:
        code = "driver_error"
    return {"ok": False, "error": code, "message": "exit %d: %s" % (status, stderr.strip()[-500:])}


class Held:
    """A lease held by `leasegate run` (or, for a reentry, one level of such a lease)."""

    def __init__(self, name, semaphore, lease, token, server, run=None, pid=None):
        self.name, self.semaphore, self.lease, self.token, self.server = name, semaphore, lease, token, server
        self.run, self.pid = run, pid
        self.lost_at = None
        self.released = False


class Driver:
    def __init__(self):
        self.servers = None
        self.owner = None
        self.held = {}

    def kind(self, h):
        return ["--semaphore", h.name] if h.semaphore else ["--lock", h.name]

    def oneshot(self, args, lease=None):
        """A one-request command: (status, parsed stdout or None, stderr)."""
        r = subprocess.run([BIN] + args + ["--server", self.servers], input=(lease or "") + "\n", text=True,
                           capture_output=True, timeout=120)
        try:
            body = json.loads(r.stdout) if r.stdout.strip() else None
        except ValueError:
            body = None
        return r.returncode, body, r.stderr

    def step(self, s):
        op = s["op"]
        if op == "hello":
            self.servers, self.owner = ",".join(s["servers"]), s["owner"]
            return {"ok": True, "client": "cli", "capabilities": CAPABILITIES}
        if op == "acquire":
            if s.get("request_id") is not None:
                return {"ok": False, "error": "unsupported", "message": "no request_id option"}
            if s.get("reenter"):
                return self.reenter(s)
            return self.run(s)
        h = self.held.get(s.get("lease_ref"))
        if op in ("renew", "release", "check", "write") and h is None:
            return {"ok": False, "error": "driver_error", "message": "no lease ref %r" % s.get("lease_ref")}
        if op == "renew":
            args = ["renew"] + self.kind(h) + ["--lease-file", "-"]
            if s.get("ttl_ms") is not None:
                args += ["--ttl", "%dms" % s["ttl_ms"]]
            status, body, err = self.oneshot(args, h.lease)
            if status != 0:
                return cli_error(status, err, h.semaphore, lost_on_not_holder=True)
            return {"ok": True, "token": str(body["token"]), "ttl_ms": body["ttl_ms"]}
        if op == "release":
            return self.release(h)
        if op == "check":
            if h.lost_at is not None or (h.run is not None and h.run.poll() is not None and not h.released):
                return {"ok": False, "error": "lost", "message": "the command was stopped: the lease was lost"}
            return {"ok": True}
        if op == "write":
            return self.write(h, s)
        if op == "duration":
            return self.duration(s["text"])
        return {"ok": False, "error": "unsupported", "message": "no op %r" % op}

    def run(self, s):
        semaphore = s.get("semaphore")
        args = [BIN, "run"]
        args += ["--semaphore", s["name"], "--limit", str(semaphore["limit"])] if semaphore else ["--lock", s["name"]]
        if not semaphore and s.get("mode") == "read":
            args.append("--read")
        args += ["--ttl", "%dms" % s["ttl_ms"], "--owner", self.owner, "--server", self.servers]
        args += ["--wait", "%dms" % s["wait_ms"]] if s.get("wait_ms") else ["--no-wait"]
        proc = subprocess.Popen(args + ["--", "/bin/sh", "-c", SCRIPT], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stdout.readline().split()
        if not first or first[0] != "granted":
            proc.wait(30)
            return cli_error(proc.returncode, proc.stderr.read(), bool(semaphore))
        _, pid, token, lease, server = first
        ref = "L%d" % (len(self.held) + 1)
        h = Held(s["name"], bool(semaphore), lease, token, server, proc, int(pid))
        self.held[ref] = h
        threading.Thread(target=self.watch, args=(ref, h), daemon=True).start()
        threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()  # never let it fill
        mode = None if semaphore else (s.get("mode") or "write")
        return {"ok": True, "lease_ref": ref, "token": token, "name": s["name"], "mode": mode,
                "ttl_ms": s["ttl_ms"], "lease_header": {"Fencing-Lease": lease}}

    def watch(self, ref, h):
        """The command's lines after the grant: "lost MS" when the watchdog stopped it."""
        for line in h.run.stdout:
            parts = line.split()
            if parts and parts[0] == "lost" and not h.released:
                h.lost_at = int(parts[1])
                emit({"event": "lost", "lease_ref": ref, "at_ms": h.lost_at,
                      "reason": "leasegate run's watchdog stopped the command: the lease was lost"})

    def reenter(self, s):
        base = self.held.get(s["reenter"])
        if base is None or base.semaphore:
            return {"ok": False, "error": "driver_error", "message": "no lock lease ref %r" % s["reenter"]}
        status, body, err = self.oneshot(["acquire", "--lock", base.name, "--ttl", "%dms" % s["ttl_ms"],
                                          "--owner", self.owner, "--lease-file", "-"], base.lease)
        if status != 0:
            return cli_error(status, err)
        ref = "L%d" % (len(self.held) + 1)
        self.held[ref] = Held(base.name, False, base.lease, str(body["token"]), base.server)
        return {"ok": True, "lease_ref": ref, "token": str(body["token"]), "name": base.name, "mode": body.get("mode"),
                "ttl_ms": body["ttl_ms"], "count": body.get("count"), "lease_header": {"Fencing-Lease": base.lease}}

    def release(self, h):
        if h.run is not None and not h.released and h.run.poll() is None:
            h.released = True
            os.kill(h.pid, signal.SIGUSR1)  # the command ends; run releases the lock and exits
            status = h.run.wait(60)
            if status == 0:
                return {"ok": True}
            return cli_error(status, "")
        if h.run is not None and h.lost_at is not None:
            return {"ok": False, "error": "lost", "message": "the command was stopped: the lease was lost"}
        # A reentry level, or a lease whose run already ended: what a script does, by hand.
        h.released = True
        status, body, err = self.oneshot(["release"] + self.kind(h) + ["--lease-file", "-"], h.lease)
        if status == 0 or (status == 4 and "it was released" in err):
            return {"ok": True}
        return cli_error(status, err, h.semaphore, lost_on_not_holder=True)

    def write(self, h, s):
        env = dict(os.environ, LEASEGATE_LEASE=h.lease)
        r = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-X", s["method"],
                            "-H", "Fencing-Lease: " + h.lease, "--data-binary", s.get("body") or "",
                            h.server + s["path"]], env=env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return {"ok": False, "error": "unavailable", "message": r.stderr.strip()}
        body, _, status = r.stdout.rpartition("\n")
        try:
            code = json.loads(body).get("error")
        except (ValueError, AttributeError):
            code = None
        return {"ok": True, "status": int(status), "code": code}

    def duration(self, text):
        name = "conformance/duration/%s" % uuid.uuid4().hex
        status, body, err = self.oneshot(["acquire", "--lock", name, "--ttl", text, "--owner", self.owner])
        if status == 2:
            return {"ok": False, "error": "bad_duration", "message": err.strip()}
        if status != 0:
            return {"ok": True, "ms": None, "message": "accepted by the CLI, refused by the server: " + err.strip()}
        self.oneshot(["release", "--lock", name, "--lease-file", "-"], body["lease"])
        return {"ok": True, "ms": body["ttl_ms"]}

    def close(self):
        for h in self.held.values():
            if h.run is not None and h.run.poll() is None:
                h.released = True
                try:
                    os.kill(h.pid, signal.SIGUSR1)
                    h.run.wait(5)
                except (OSError, subprocess.TimeoutExpired):
                    pass


def main():
    d = Driver()
    for line in sys.stdin:
        if not line.strip():
            continue
        s = json.loads(line)
        try:
            answer = d.step(s)
        except Exception as e:  # a bug here, not the CLI's: say so
            answer = {"ok": False, "error": "driver_error", "message": "%s: %s" % (type(e).__name__, e)}
        answer["id"] = s["id"]
        emit(answer)
    d.close()


if __name__ == "__main__":
    main()
