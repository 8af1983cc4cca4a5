#!/usr/bin/env python3
"""The conformance runner: drives every leasegate client, through its contract driver
(tests/conformance/PROTOCOL.md), through the same scenarios (scenarios.py) against the real
binary, and checks the invariants of docs/TOKEN.md. Prints the client x invariant table;
exits 1 when a client breaks an invariant (each failure names it: "FAIL TOKEN-4 go ...").

  LEASEGATE_BIN=build/leasegate python3 tests/conformance/run.py              # every client here
  ... run.py --clients go,python --scenarios loss_paused_server -v             # a part
  ... run.py --update-doc           # writes the table into docs/TOKEN.md
  ... run.py --check-doc            # fails when docs/TOKEN.md's table is not this run's
  ... run.py --require all          # a client that cannot run here is a failure (CI)
  ... run.py --plant late-loss --expect-fail TOKEN-4
        # the runner's own test: the Go client built with a planted bug (its loss signal
        # one TTL late, build tag leasegate_plant_late_loss) must fail exactly TOKEN-4

A client whose toolchain is missing here is shown as "skip"; the failover scenario needs
etcd-server and is skipped, with a line, without it."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from driver import Driver, DriverFailed, DriverSkipped  # noqa: E402
import scenarios  # noqa: E402
from scenarios import Abort, Context, NotApplicable, Skipped  # noqa: E402

INVARIANTS = [
    (1, "a token grows with every grant, never repeats (restart, failover)"),
    (2, "reentry and renewal keep the token"),
    (3, "0 is never issued"),
    (4, "loss signalled by the expiry, before the next grant"),
    (5, "release is idempotent; a released lease is never lost"),
    (6, "a retried acquire (same request_id): same grant or clear error"),
    (7, "durations: one grammar, whole ms, no bare numbers"),
    (8, "tokens are exact unsigned 64-bit (decimal strings)"),
    (9, "waiters are granted first come, first served"),
    (10, "calls and leases ride out a restart and a failover"),
    (11, "the guard header: write lease passes; read, permit, lost refused"),
]
PLANTS = {"late-loss": ("go", "leasegate_plant_late_loss")}
DOC = os.path.join(REPO, "docs", "TOKEN.md")
BEGIN = ("<!-- conformance table: begin (tests/conformance/run.py --update-doc writes it;"
         " ctest conformance checks it) -->")
END = "<!-- conformance table: end -->"


def which(tool):
    return shutil.which(tool)


class Clients:
    """The drivers: how to start each one (building the Go one first)."""

    def __init__(self, workdir, plant_tag=None):
        self.workdir = workdir
        self.plant_tag = plant_tag
        self.go_driver = None
        self.go_error = None

    def names(self):
        names = ["cli", "python", "python-async", "node", "go"]
        if os.path.exists(os.path.join(REPO, "clients", "java", "conformance-driver")):
            names.append("java")
        return names

    def argv(self, name):
        """The driver's command, or raise DriverSkipped saying why it cannot run here."""
        py = sys.executable
        drivers = os.path.join(HERE, "drivers")
        if name == "cli":
            return [py, os.path.join(drivers, "cli_driver.py")]
        if name == "python":
            return [py, os.path.join(drivers, "python_driver.py")]
        if name == "python-async":
            return [py, os.path.join(drivers, "python_driver.py"), "--async"]
        if name == "node":
            if not which("node"):
                raise DriverSkipped("node is not installed (scripts/deps.sh --test)")
            return [which("node"), os.path.join(drivers, "node_driver.mjs")]
        if name == "go":
            return [self.build_go()]
        if name == "java":
            return [os.path.join(REPO, "clients", "java", "conformance-driver")]
        raise DriverSkipped("no driver named %r" % name)

    def build_go(self):
        """clients/go/internal/driver, built once, offline (GOPROXY=off, no module download)."""
        if self.go_driver is None and self.go_error is None:
            go = which("go")
            if not go:
                self.go_error = "go is not installed (Debian's golang-go: scripts/deps.sh --test)"
            else:
                out = os.path.join(self.workdir, "go-driver")
                env = dict(os.environ, GOPROXY="off", GOTOOLCHAIN="local", GOFLAGS="-mod=readonly", CGO_ENABLED="0")
                env.setdefault("GOCACHE", os.path.join(self.workdir, "gocache"))
                cmd = [go, "build", "-o", out]
                if self.plant_tag:
                    cmd += ["-tags", self.plant_tag]
                r = subprocess.run(cmd + ["./internal/driver"], cwd=os.path.join(REPO, "clients", "go"), env=env,
                                   capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    self.go_error = "building the Go driver failed:\n" + r.stdout + r.stderr
                else:
                    self.go_driver = out
        if self.go_error:
            raise DriverSkipped(self.go_error)
        return self.go_driver


class Runner:
    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.clients = Clients(workdir, PLANTS[args.plant][1] if args.plant else None)
        self.results = {}  # (client, invariant) -> list of (scenario, status, what)
        self.client_status = {}  # client -> None (ran) or why it was skipped
        self.not_applicable = {}  # client -> [scenario]
        self.skipped = {}  # client -> [(scenario, why)]
        self.failures = []
        self.mu = threading.Lock()
        self.env = dict(os.environ, LEASEGATE_BIN=args.bin, LEASEGATE_REPO=REPO, PYTHONDONTWRITEBYTECODE="1")

    def start_driver(self, client, label):
        argv = self.clients.argv(client)
        log = os.path.join(self.workdir, "%s.%s.%d.log" % (client, label, time.monotonic_ns()))
        return Driver("%s driver (%s)" % (client, label), argv, self.env, log)

    def say(self, line):
        with self.mu:
            print(line, flush=True)

    def run_client(self, client):
        for name, fn, invariants in scenarios.SCENARIOS:
            if self.args.scenarios and name not in self.args.scenarios:
                continue
            work = tempfile.mkdtemp(prefix="%s-%s-" % (client, name), dir=self.workdir)
            ctx = Context(self.args.bin, client, work, self.start_driver)
            t0 = time.monotonic()
            outcome = "pass"
            try:
                fn(ctx)
            except DriverSkipped as e:
                self.client_status[client] = str(e).strip().splitlines()[0] if str(e).strip() else "skipped"
                self.say("conformance: %s: SKIPPED: %s" % (client, e))
                ctx.close()
                return
            except NotApplicable as e:
                outcome = "n/a"
                self.not_applicable.setdefault(client, []).append(name)
                ctx.checks = []
                self.say("conformance: %s %s: n/a (%s)" % (client, name, e))
            except Skipped as e:
                outcome = "skip"
                self.skipped.setdefault(client, []).append((name, str(e)))
                self.say("conformance: %s %s: SKIPPED: %s" % (client, name, e))
                for inv in invariants:
                    self.record(client, inv, name, "skip", str(e))
            except Abort:
                pass
            except DriverFailed as e:
                ctx.check(invariants[0], False, "the driver failed: %s" % e)
            except Exception:  # a bug of the runner or an unexpected answer: fail loudly
                ctx.check(invariants[0], False, "the scenario raised:\n" + traceback.format_exc())
            finally:
                ctx.close()
            self.client_status.setdefault(client, None)
            failed = [(inv, what) for inv, passed, what in ctx.checks if not passed]
            for inv, passed, what in ctx.checks:
                self.record(client, inv, name, "pass" if passed else "FAIL", what)
            if failed:
                outcome = "FAIL"
                for inv, what in failed:
                    line = "FAIL TOKEN-%d [%s] %s: %s" % (inv, client, name, what)
                    self.failures.append(line)
                    self.say(line)
                if self.args.verbose:
                    self.say(ctx.logs())
            elif outcome == "pass" and not ctx.checks:
                outcome = "n/a"
            self.say("conformance: %s %s: %s (%.1f s)" % (client, name, outcome, time.monotonic() - t0))
            if outcome != "skip":
                shutil.rmtree(work, ignore_errors=True)

    def record(self, client, invariant, scenario, status, what):
        with self.mu:
            self.results.setdefault((client, invariant), []).append((scenario, status, what))

    def cell(self, client, invariant):
        if self.client_status.get(client):
            return "skip"
        statuses = {s for _, s, _ in self.results.get((client, invariant), [])}
        for s in ("FAIL", "skip", "pass"):
            if s in statuses:
                return s
        return "n/a"

    def table(self, clients):
        lines = ["| invariant | " + " | ".join(clients) + " |", "|---|" + "---|" * len(clients)]
        for number, title in INVARIANTS:
            lines.append("| TOKEN-%d %s | " % (number, title)
                         + " | ".join(self.cell(c, number) for c in clients) + " |")
        notes = []
        for c in clients:
            if self.client_status.get(c):
                notes.append("- %s: skipped: %s" % (c, self.client_status[c]))
            if self.not_applicable.get(c):
                notes.append("- %s: n/a (the client lacks the feature): %s" % (c, ", ".join(self.not_applicable[c])))
            for name, why in self.skipped.get(c, []):
                notes.append("- %s: %s skipped: %s" % (c, name, why))
        return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "") + "\n"


def doc_table(text):
    m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return m.group(1) if m else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.environ.get("LEASEGATE_BIN"), help="the leasegate binary ($LEASEGATE_BIN)")
    p.add_argument("--clients", help="comma-separated (default: every client with a driver here)")
    p.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    p.add_argument("--require", default="", help="comma-separated clients (or 'all') that must not be skipped")
    p.add_argument("--plant", choices=sorted(PLANTS), help="build a client with a planted bug (a test of the runner)")
    p.add_argument("--expect-fail", help="with --plant: the invariants (TOKEN-N,...) that must fail, and only them")
    p.add_argument("--update-doc", action="store_true", help="write the table into docs/TOKEN.md")
    p.add_argument("--check-doc", action="store_true", help="fail when docs/TOKEN.md's table differs from this run's")
    p.add_argument("--jobs", type=int, default=1, help="clients run at once (default 1)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("-v", "--verbose", action="store_true", help="print the drivers' stderr of failed scenarios")
    args = p.parse_args()
    if not args.bin or not os.access(args.bin, os.X_OK):
        p.error("set --bin or LEASEGATE_BIN to the leasegate binary")
    args.bin = os.path.abspath(args.bin)
    args.scenarios = set(args.scenarios.split(",")) if args.scenarios else None
    known = {name for name, _, _ in scenarios.SCENARIOS}
    if args.scenarios and args.scenarios - known:
        p.error("unknown scenarios: %s (known: %s)"
                % (", ".join(sorted(args.scenarios - known)), ", ".join(sorted(known))))
    workdir = tempfile.mkdtemp(prefix="leasegate-conformance-")
    runner = Runner(args, workdir)
    clients = runner.clients.names()
    if args.plant:
        clients = [PLANTS[args.plant][0]]
    elif args.clients:
        wanted = args.clients.split(",")
        unknown = [c for c in wanted if c not in clients]
        if unknown:
            p.error("no driver for: %s (here: %s)" % (", ".join(unknown), ", ".join(clients)))
        clients = wanted
    required = set(clients) if args.require == "all" else set(filter(None, args.require.split(",")))

    t0 = time.monotonic()
    pending = list(clients)
    threads = []
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                client = pending.pop(0)
            runner.run_client(client)

    for _ in range(max(1, args.jobs)):
        t = threading.Thread(target=worker)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()

    table = runner.table(clients)
    print("\n" + table)
    status = 0
    for c in sorted(required):
        if runner.client_status.get(c):
            print("conformance: FAILED: %s was required but skipped: %s" % (c, runner.client_status[c]))
            status = 1
        for name, why in runner.skipped.get(c, []):
            print("conformance: FAILED: %s %s was required but skipped: %s" % (c, name, why))
            status = 1
    failed = sorted({int(m.group(1)) for m in (re.match(r"FAIL TOKEN-(\d+)", f) for f in runner.failures)})
    if args.expect_fail:
        expected = sorted(int(x.strip().replace("TOKEN-", "")) for x in args.expect_fail.split(","))
        if failed == expected:
            print("conformance: the planted bug (%s) failed exactly %s, as expected"
                  % (args.plant, ", ".join("TOKEN-%d" % i for i in expected)))
        else:
            print("conformance: FAILED: the planted bug (%s) should fail exactly %s; failed: %s"
                  % (args.plant, ", ".join("TOKEN-%d" % i for i in expected),
                     ", ".join("TOKEN-%d" % i for i in failed) or "nothing"))
            status = 1
    elif runner.failures:
        print("conformance: FAILED: " + "; ".join(sorted(set(
            "%s TOKEN-%s" % (m.group(2), m.group(1))
            for m in (re.match(r"FAIL TOKEN-(\d+) \[([^\]]+)\]", f) for f in runner.failures)))))
        status = 1
    if args.update_doc or args.check_doc:
        with open(DOC) as f:
            text = f.read()
        current = doc_table(text)
        if current is None:
            print("conformance: FAILED: %s has no table between its markers" % DOC)
            status = 1
        elif args.update_doc:
            with open(DOC, "w") as f:
                f.write(text.replace(BEGIN + "\n" + current + END, BEGIN + "\n" + table + END))
            print("conformance: wrote the table into %s" % DOC)
        elif current != table:
            print("conformance: FAILED: the table in %s is not this run's; run tests/conformance/run.py "
                  "--update-doc (or fix what fails). In the doc:\n%s" % (DOC, current))
            status = 1
    print("conformance: %s in %.0f s" % ("passed" if status == 0 else "FAILED", time.monotonic() - t0))
    if args.keep or status:
        print("conformance: logs in %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
