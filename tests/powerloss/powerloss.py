#!/usr/bin/env python3
"""Power-loss torture: the server on cutfs, its power cut at random moments, every answer checked.

    python3 tests/powerloss/powerloss.py --cuts N --seed S [--nosync]

The load, the probes after each restart and the checker are tests/integration/torture.py's;
PowerCut replaces its kill -9 by a power cut of cutfs (tests/powerloss/cutfs.c), the file
system the server's database lives on: every write and every name no fsync made durable is
lost (with --torn mounts, a random part of the unsynced sectors is kept instead), then the
server is killed (kill -9) and started again on a new mount of the same disk. Each cycle's
cut comes (drawn from the seed):
  load        at a random moment under load (SIGUSR1 to cutfs);
  commit      inside a commit under load: at the K-th write or fsync of the -wal file;
  checkpoint  inside a WAL checkpoint: at the K-th write, truncation or fsync of the
              database file itself, which in WAL mode only a checkpoint touches;
  backup      inside `leasegate backup --server URL DEST` with DEST on the mount: at the
              K-th change of the server's snapshot file or of the CLI's copy (or, for some,
              just after the backup ended);
and some restarts are cut too (start): at the K-th changing operation of the start, K below
what the last start took. After each cut the disk's database passes PRAGMA integrity_check,
a backup the CLI reported written is on the disk and passes it too, and the server starts.
The checker then finds no acknowledged grant, renewal, release or fence mark lost and no
token issued twice (torture.check). --nosync runs the server with tests/faults/nosync.c
(fsync does nothing): the checker must then find violations.

migration_cuts() cuts the start of a server on a database of an older schema
(tests/powerloss/schemas/vN.sql) inside its migration: the disk must hold the old schema or
the new one, never a mix, and the next start must keep every lease, token and fence mark.

Only 127.0.0.1; every wait is bounded; processes are stopped by PID.
"""

import argparse
import collections
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(HERE, "..", "integration")
for _p in (HERE, INTEGRATION):
    if _p not in sys.path:
        sys.path.insert(0, _p)
if not os.environ.get("LEASEGATE_BIN"):
    _default_bin = os.path.join(HERE, "..", "..", "build", "leasegate")
    if os.path.exists(_default_bin):
        os.environ["LEASEGATE_BIN"] = os.path.abspath(_default_bin)

import harness  # noqa: E402
import torture  # noqa: E402
from cutfs_mount import CutFs  # noqa: E402

DB = "leasegate.db"
KINDS = (("load", 0.25), ("commit", 0.25), ("checkpoint", 0.25), ("backup", 0.25))
START_CUT_SHARE = 0.3
BACKUP_WHOLE_SHARE = 0.3   # of the backup cycles, those cut only once the backup ended
CHECKPOINT_WAIT_S = 10.0   # the longest a cycle waits for its checkpoint cut
BACKUP_TIMEOUT_S = 30.0
DIED_OF_THE_CUT_S = 5.0    # a server that stopped must have lost its disk within this
CUT_LINE = re.compile(r"dropped (\d+) unsynced pages of (\d+) files \((-?\d+) sectors of them written\), "
                      r"took back (\d+) names")


def check_copy(db_path, scratch):
    """PRAGMA integrity_check of the database at db_path (and its -wal), on a copy so that
    the disk is not touched: "ok", or what is wrong."""
    if os.path.exists(scratch):
        shutil.rmtree(scratch)
    os.makedirs(scratch)
    for suffix in ("", "-wal"):
        if os.path.exists(db_path + suffix):
            shutil.copyfile(db_path + suffix, os.path.join(scratch, DB + suffix))
    try:
        return torture.integrity_check(os.path.join(scratch, DB))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class PowerCut(torture.KillNine):
    """torture.Torture's cycles ended by power cuts of cutfs instead of kill -9."""

    def __init__(self, workdir, seed, server_env=None, log=None, torn_share=0.5):
        self.workdir = workdir
        self.disk = os.path.join(workdir, "disk")
        self.mnt = os.path.join(workdir, "mnt")
        self.scratch = os.path.join(workdir, "scratch")
        self.rng = random.Random(seed * 7919 + 17)
        self.server_env = server_env
        self.log = log or (lambda msg: None)
        self.torn_share = torn_share
        self.fs = None
        self.kind = None
        self.counts = collections.Counter()
        # The highest K that can still fall inside the phase: raised to what was seen.
        self.kmax = {"commit": 200, "checkpoint": 64, "backup": 64}
        self.start_ops = None   # changing operations the last start took
        self.backup = None      # (process, path of DEST on the mount, path on the disk)

    # Mounts ------------------------------------------------------------------------
    def _mount(self, kind, cut_at=None, cut_only=None):
        torn = self.rng.randrange(1 << 30) if self.rng.random() < self.torn_share else None
        if kind == "backup" and self.rng.random() < BACKUP_WHOLE_SHARE:
            pass  # the backup ends, then the power goes: what it reported written must be there
        elif kind in self.kmax:
            cut_only = {"commit": "*/%s-wal" % DB, "checkpoint": "*/" + DB}.get(kind) or \
                self.rng.choice(("*/%s.snapshot-*" % DB, "*/backups/*"))
            cut_at = self.rng.randint(1, self.kmax[kind])
        self.kind = kind
        self.cut_at = cut_at
        self.torn = torn
        self.fs = CutFs(self.disk, self.mnt, cut_at=cut_at, cut_only=cut_only, torn=torn)

    def _next_kind(self):
        r = self.rng.random()
        for kind, share in KINDS:
            if r < share:
                return kind
            r -= share
        return KINDS[0][0]

    def _note_cut(self, torture_run, what):
        line = self.fs.result or ""
        m = CUT_LINE.search(line)
        if not m or "power cut" not in line:
            raise RuntimeError("cutfs did not cut the power: %s" % line)
        self.counts["cuts"] += 1
        self.counts["cut: " + what] += 1
        self.counts["cut with part of the unsynced sectors kept (--torn)"] += self.torn is not None
        self.counts["unsynced pages dropped"] += int(m.group(1))
        self.counts["unsynced sectors kept (--torn)"] += max(0, int(m.group(3)))
        self.counts["names taken back"] += int(m.group(4))
        self.counts["cuts that dropped something"] += int(m.group(1)) > 0 or int(m.group(4)) > 0
        torture_run._sys("fault", what="power cut (%s): %s" % (what, line))

    # torture.KillNine's hooks -------------------------------------------------------
    def server(self, torture_run, args):
        # The CLI's backups go to a directory of the disk that exists before the run.
        os.makedirs(os.path.join(self.disk, "root", "backups"), exist_ok=True)
        self._mount("load")  # the first start creates the database: no cut inside it
        srv = harness.Server(extra_args=args, start=False, extra_env=self.server_env)
        srv.data_path = os.path.join(self.mnt, DB)
        return srv

    def load(self, torture_run, srv, cycle, run_s):
        start = time.monotonic()
        deadline = start + (max(run_s, CHECKPOINT_WAIT_S) if self.kind == "checkpoint" else run_s)
        backup_at = start + self.rng.uniform(0, run_s) if self.kind == "backup" else None
        while time.monotonic() < deadline:
            if not self.fs.running() or not srv.running():
                break
            if backup_at is not None and time.monotonic() >= backup_at:
                backup_at = None
                self._start_backup(srv, cycle)
                deadline = max(deadline, time.monotonic() + BACKUP_TIMEOUT_S)
            if self.backup is not None and self.backup[0].poll() is not None:
                break  # the backup ended before its cut: cut now
            time.sleep(0.005)
        if srv.running():
            return True
        # A server that stopped by itself must have lost its disk first.
        return self.fs.wait_cut(DIED_OF_THE_CUT_S) and "power cut" in (self.fs.result or "")

    def crash(self, torture_run, srv, cycle):
        ops = self.fs.ops() if self.fs.running() and self.kind in self.kmax else None
        by_itself = not self.fs.running()
        matching = ops[1] if ops and not by_itself else None
        self.fs.cut()
        srv.kill9()
        if self.kind == "load":
            what = "under load"
        elif self.kind == "backup" and self.cut_at is None:
            what = "just after a backup"
        elif by_itself:
            what = "inside a " + self.kind
        else:
            # Its K did not come: what this phase took tells the next draw.
            if matching:
                self.kmax[self.kind] = max(self.kmax[self.kind], matching)
            what = "under load (%s cut not reached)" % self.kind
        self._note_cut(torture_run, what)
        self._end_backup(torture_run)
        leftovers = sorted(set(os.listdir(os.path.join(self.disk, "root"))) -
                           {DB, DB + "-wal", DB + "-shm", "backups"})
        if leftovers:
            self.counts["cuts that left other files in the data directory"] += 1
            torture_run._sys("fault", what="left in the data directory after the cut: %s" % leftovers)

    def integrity(self, srv):
        path = os.path.join(self.disk, "root", DB)
        if not os.path.exists(path):
            self.counts["restarts without a database file on the disk"] += 1
            return "ok"
        return check_copy(path, self.scratch)

    def restart(self, torture_run, srv, cycle):
        if self.start_ops and self.rng.random() < START_CUT_SHARE:
            self._cut_the_start(torture_run, srv, self.rng.randint(1, self.start_ops))
        # After the last cycle the server is stopped with SIGTERM: its disk must not go.
        kind = self._next_kind() if cycle < torture_run.cycles else "load"
        self._mount(kind)
        try:
            srv.start()
        except RuntimeError:
            # A start that failed must have lost its disk first (cutfs may still be ending).
            if not (self.fs.wait_cut(DIED_OF_THE_CUT_S) and "power cut" in (self.fs.result or "")):
                raise  # the disk is fine: the server itself did not start
            # The cycle's own cut came during the start: the start was cut, start again.
            self._note_cut(torture_run, "inside the start (%s)" % kind)
            srv.kill9()
            torture_run._sys("integrity", result=self.integrity(srv))
            self._mount("load")
            srv.start()
        ops = self.fs.ops()
        if ops is not None:  # else the cycle's own cut came already
            self.start_ops = ops[0]

    def close(self, srv):
        if self.backup is not None:
            harness.kill_process(self.backup[0])
            self.backup = None
        if self.fs is not None and self.fs.running():
            self.fs.stop()

    # Phases -------------------------------------------------------------------------
    def _cut_the_start(self, torture_run, srv, k):
        """A start whose power goes at its k-th changing operation (or just after it
        started, when it took fewer)."""
        self.kind = "start"
        self.torn = self.rng.randrange(1 << 30) if self.rng.random() < self.torn_share else None
        self.fs = CutFs(self.disk, self.mnt, cut_at=k, torn=self.torn)
        try:
            srv.start()
            listened = True
        except RuntimeError:
            listened = False
        self.fs.cut()
        srv.kill9()
        self._note_cut(torture_run, "inside the start" if not listened else "just after the start")
        torture_run._sys("integrity", result=self.integrity(srv))

    def _start_backup(self, srv, cycle):
        dest = os.path.join(self.mnt, "backups", "b%d.db" % cycle)
        proc = subprocess.Popen([harness.binary_path(), "backup", "--server", srv.url, dest],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=self.workdir)
        self.backup = (proc, dest, os.path.join(self.disk, "root", "backups", "b%d.db" % cycle))
        self.counts["backups started"] += 1

    def _end_backup(self, torture_run):
        if self.backup is None:
            return
        proc, dest, on_disk = self.backup
        self.backup = None
        try:
            out, _ = proc.communicate(timeout=BACKUP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            harness.kill_process(proc)
            out, _ = proc.communicate()
        out = out.decode("utf-8", "replace").strip()
        reported = proc.returncode == 0
        self.counts["backups reported written" if reported else "backups that failed with the power"] += 1
        if not os.path.exists(on_disk):
            result = "ok" if not reported else "the backup was reported written but is not on the disk: " + out
        else:
            self.counts["backups on the disk after the cut, checked"] += 1
            result = check_copy(on_disk, self.scratch)
        torture_run._sys("integrity", result=result, what="backup %s (%s)" % (dest, out[-300:]))


# ---------------------------------------------------------------------------------------
# Cuts inside a schema migration
# ---------------------------------------------------------------------------------------

SCHEMAS = os.path.join(HERE, "schemas")
SHIFTED = ("acquired_at_ms", "expires_at_ms", "at_ms")


def fixtures():
    """{version: path} of the databases of older schemas (schemas/vN.sql)."""
    found = {}
    for name in os.listdir(SCHEMAS):
        m = re.match(r"^v(\d+)\.sql$", name)
        if m:
            found[int(m.group(1))] = os.path.join(SCHEMAS, name)
    return found


def load_fixture(sql_path, db_path, now_ms):
    """Creates db_path (outside any mount: durable) from a fixture, its times shifted so
    that its newest grant was made at now_ms (every lease of an hour then still runs),
    and its boot id unknown to this machine (the boot-clock deadlines it holds are not
    trusted)."""
    with open(sql_path) as f:
        sql = f.read()
    db = sqlite3.connect(db_path)
    try:
        db.executescript(sql)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        cols = {t: [c[1] for c in db.execute("PRAGMA table_info(%s)" % t)] for t in tables}
        newest = max((db.execute("SELECT max(acquired_at_ms) FROM %s" % t).fetchone()[0] or 0)
                     for t in tables if "acquired_at_ms" in cols[t])
        delta = now_ms - newest
        with db:
            for t in tables:
                for c in SHIFTED:
                    if c in cols[t]:
                        db.execute("UPDATE %s SET %s = %s + ? WHERE %s IS NOT NULL" % (t, c, c, c), (delta,))
            db.execute("UPDATE meta SET value = 'fixture' WHERE key = 'boot_id'")
    finally:
        db.close()


def schema_of(db_path, scratch):
    """(schema_version, every table's and index's SQL, rows per table) of the database at
    db_path (and its -wal), read from a copy."""
    if os.path.exists(scratch):
        shutil.rmtree(scratch)
    os.makedirs(scratch)
    try:
        for suffix in ("", "-wal"):
            if os.path.exists(db_path + suffix):
                shutil.copyfile(db_path + suffix, os.path.join(scratch, DB + suffix))
        db = sqlite3.connect(os.path.join(scratch, DB))
        try:
            sqls = tuple(db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall())
            version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
            rows = {r[1]: db.execute('SELECT count(*) FROM "%s"' % r[1]).fetchone()[0] for r in sqls if r[0] == "table"}
        finally:
            db.close()
        return version, sqls, rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _pages(srv, path, key):
    out, after = [], None
    while True:
        q = "%s?limit=1000" % path + ("&after=%s" % after if after else "")
        st, _, body = srv.request("GET", q)
        if st != 200:
            raise RuntimeError("GET %s: %s %r" % (q, st, body))
        out += [x["name"] for x in body[key]]
        after = body.get("next")
        if not after:
            return out


def lease_state(srv, fence_resources):
    """What a client can see of every lock (its value too), semaphore (each lease's permits) and
    fence mark: {what: answer}."""
    state = {}
    for api, key in (("/v1/locks", "locks"), ("/v1/semaphores", "semaphores")):
        for name in _pages(srv, api, key):
            st, _, b = srv.request("GET", "%s/%s" % (api, name))
            holders = sorted((h.get("token"), h.get("owner"), h.get("count"), h.get("expires_at_ms"),
                              h.get("permits"))
                             for h in b.get("holders", []))
            state["%s %s" % (key, name)] = (st, b.get("last_token"), holders, b.get("value"),
                                            b.get("value_version"), b.get("value_token"))
            st, _, h = srv.request("GET", "%s/%s/history" % (api, name))
            state["history of %s %s" % (key, name)] = (st, h)
    for res in fence_resources:
        st, _, b = srv.fence(res, 1)
        state["fence " + res] = (st, b.get("max_token"))
    return state


def migration_cuts(version, cuts, seed, log=None):
    """cuts power cuts inside the start of a server on the fixture of schema `version`:
    -> (problems, figures). Each cut must leave the old schema with the old rows or the
    new one (as a clean migration leaves it), and the next start must show every lease,
    token, ended lease and fence mark as a clean migration shows them."""
    log = log or (lambda msg: None)
    rng = random.Random(seed * 104729 + version)
    workdir = tempfile.mkdtemp(prefix="leasegate-migration-")
    disk, mnt, scratch = (os.path.join(workdir, x) for x in ("disk", "mnt", "scratch"))
    db_on_disk = os.path.join(disk, "root", DB)
    figures = collections.Counter()
    problems = []
    srv = harness.Server(start=False)
    srv.data_path = os.path.join(mnt, DB)
    fs = None

    now_ms = int(time.time() * 1000)

    def fresh_disk():
        shutil.rmtree(disk, ignore_errors=True)
        os.makedirs(os.path.join(disk, "root"))
        load_fixture(fixtures()[version], db_on_disk, now_ms)

    try:
        fresh_disk()
        old = schema_of(db_on_disk, scratch)
        db = sqlite3.connect(db_on_disk)
        try:
            fences = [r[0] for r in db.execute("SELECT resource FROM fences")]
        finally:
            db.close()
        # The reference: a clean migration, how many changing operations its start takes,
        # and which of them were fsyncs.
        fs = CutFs(disk, mnt, trace_syncs=True)
        srv.start()
        start_ops = fs.ops()[0]
        syncs = [op for op, _ in fs.syncs() if op <= start_ops]
        reference = lease_state(srv, fences)
        srv.stop()
        fs.stop()
        new = schema_of(db_on_disk, scratch)
        if new[0] == old[0]:
            return ["schema %d is the current one: no migration to cut" % version], figures
        figures["changing operations of the start (with its migration)"] = start_ops
        figures["fsyncs of the start"] = len(syncs)
        # Where the power goes: at the start's last fsync (which then fails: the old
        # schema) and just after it (the new one), then by turns anywhere in the start and
        # at or just after one of its fsyncs.
        last = syncs[-1] if syncs else start_ops
        points = [last, last + 1]
        while len(points) < cuts:
            if len(points) % 2 or not syncs:
                points.append(rng.randint(1, start_ops))
            else:
                points.append(rng.choice(syncs) + rng.randint(0, 1))
        for i, k in enumerate(points[:cuts]):
            fresh_disk()
            torn = rng.randrange(1 << 30) if rng.random() < 0.5 else None
            fs = CutFs(disk, mnt, cut_at=k, torn=torn)
            try:
                srv.start()
            except RuntimeError:
                pass
            line = fs.cut()
            srv.kill9()
            figures["cuts"] += 1
            figures["cuts with part of the unsynced sectors kept (--torn)"] += torn is not None
            got = schema_of(db_on_disk, scratch)
            if got[:2] == old[:2] and got[2] == old[2]:
                figures["cuts that left the old schema and its rows"] += 1
            elif got[:2] == new[:2]:
                figures["cuts that left the new schema"] += 1
            else:
                problems.append("cut %d at operation %d (%s): the disk holds schema %r, neither the old (%r, rows %r) "
                                "nor the new one: %r" % (i, k, line, got, old[0], old[2], got[2]))
                continue
            fs = CutFs(disk, mnt)
            try:
                srv.start()
            except RuntimeError as exc:
                problems.append("cut %d at operation %d (%s): the server did not start again: %s" % (i, k, line, exc))
                fs.cut()
                continue
            state = lease_state(srv, fences)
            srv.stop()
            fs.stop()
            if state != reference:
                diff = sorted(x for x in set(state) | set(reference) if state.get(x) != reference.get(x))
                problems.append("cut %d at operation %d (%s): after the restart %d things differ from a clean "
                                "migration, e.g. %s: %r, not %r" % (i, k, line, len(diff), diff[0], state.get(diff[0]),
                                                                     reference.get(diff[0])))
            if schema_of(db_on_disk, scratch)[:2] != new[:2]:
                problems.append("cut %d: the restart did not finish the migration" % i)
            log("migration from schema %d, cut %d at operation %d of %d: %s" % (version, i + 1, k, start_ops, line))
        figures["leases, ended leases and fence marks compared after each restart"] = len(reference)
        return problems, figures
    finally:
        srv.cleanup()
        if fs is not None and fs.running():
            fs.cut()
        shutil.rmtree(workdir, ignore_errors=True)


class Run:
    """The outcome of run(): torture's Result and the cuts' figures."""

    def __init__(self, result, counts, workdir):
        self.result = result
        self.counts = counts
        self.workdir = workdir


def run(cuts, seed, server_env=None, log=None, clients=None, locks=None, run_ms=(150, 2200), keep=False,
        torn_share=0.5):
    """cuts power cuts under torture's load; the checker already applied (Run.result)."""
    workdir = tempfile.mkdtemp(prefix="leasegate-powerloss-")
    pc = PowerCut(workdir, seed, server_env=server_env, log=log, torn_share=torn_share)
    dc, dl = torture.default_scale()
    t = torture.Torture(cuts, seed, locks=locks or dl, clients=clients or dc, run_ms=run_ms, log=log, crash=pc)
    try:
        res = t.run()
    finally:
        pc.close(None)
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return Run(res, pc.counts, workdir)


def summarize_cuts(counts, out=sys.stdout):
    for k in sorted(counts):
        out.write("  %-58s %d\n" % (k, counts[k]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuts", type=int, default=30)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--nosync", action="store_true", help="the planted bug: fsync does nothing in the server")
    ap.add_argument("--keep", action="store_true", help="keep the disk (printed)")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    env = None
    if a.nosync:
        lib = os.environ.get("LEASEGATE_NOSYNC") or os.path.join(HERE, "..", "..", "build", "tests", "libnosync.so")
        env = {"LD_PRELOAD": os.path.abspath(lib)}
    print("powerloss: seed %d, %d cuts (repeat: %s --cuts %d --seed %d%s)"
          % (seed, a.cuts, sys.argv[0], a.cuts, seed, " --nosync" if a.nosync else ""), flush=True)
    r = run(a.cuts, seed, server_env=env, log=lambda m: print(m, flush=True), keep=a.keep)
    torture.summarize(r.result)
    summarize_cuts(r.counts)
    if a.keep:
        print("disk kept in %s" % r.workdir)
    return 1 if r.result.violations or r.result.driver_errors else 0


if __name__ == "__main__":
    sys.exit(main())
