"""The server under power loss (tests/powerloss/powerloss.py, docs/RELIABILITY.md).

* PowerLossRun: torture's load with the server's database on cutfs, the power cut
  LEASEGATE_POWERLOSS_CUTS times (30 by default, about a minute) under load, inside commits,
  WAL checkpoints, backups and starts; torture's checker must find nothing, and every kind of
  cut must have happened.
* PlantedBug: the same with fsync made a no-op in the server (tests/faults/nosync.c): the
  checker must report lost grants and repeated tokens, or the test proves nothing.
* MigrationCuts: servers started on a database of every older schema (schemas/vN.sql), the
  power cut inside the start and its migration: the old schema or the new one, never a mix,
  and every lease, token, ended lease and fence mark after the next start.
* CheckpointFailure: SQLite copies the WAL into the database file between commits (the
  checkpoint), after the transaction is durable; the database file refuses every sync
  (tests/faults/failsync.c): every grant, renewal, release and fence mark is still answered
  and survives a power cut, the failure is said, and not tried again at every commit.

The seed is LEASEGATE_POWERLOSS_SEED when set, else random; a failure prints the command
that repeats the run. Skipped (77) without cutfs, /dev/fuse or root, saying which (a
failure instead with LEASEGATE_POWERLOSS_REQUIRED=1).
"""

import os
import random
import shutil
import sqlite3
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cutfs_mount  # noqa: E402
import powerloss  # noqa: E402  (puts tests/integration on the path)
import harness  # noqa: E402
from cutfs_mount import CutFs  # noqa: E402

CUTS = int(os.environ.get("LEASEGATE_POWERLOSS_CUTS", "30"))
PLANTED_CUTS = 4
MIGRATION_CUTS = 8


def seed():
    s = os.environ.get("LEASEGATE_POWERLOSS_SEED")
    return int(s) if s else random.randrange(1 << 30)


def preload(env, name, **more):
    """Server environment with the fault library `name` preloaded (built beside cutfs)."""
    path = os.environ.get(env) or os.path.join(HERE, "..", "..", "build", "tests", name)
    if not os.path.exists(path):
        raise AssertionError("%s is not built (%s)" % (name, path))
    out = dict(more, LD_PRELOAD=os.path.abspath(path))
    if os.environ.get("LEASEGATE_SANITIZED") == "1":
        out["ASAN_OPTIONS"] = "verify_asan_link_order=0"  # the library comes before ASan
    return out


class PowerLossRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.seed = seed()
        cls.repeat = "LEASEGATE_BIN=%s python3 tests/powerloss/powerloss.py --cuts %d --seed %d" % (
            harness.binary_path(), CUTS, cls.seed)
        sys.stderr.write("powerloss: seed %d (repeat: %s)\n" % (cls.seed, cls.repeat))
        cls.run_ = powerloss.run(CUTS, cls.seed)
        r = cls.run_.result
        sys.stderr.write("powerloss: %d cycles, %d events, %.1f s\n" % (r.cycles, len(r.history.events), r.elapsed_s))
        powerloss.summarize_cuts(cls.run_.counts, sys.stderr)

    def test_history_is_clean(self):
        r = self.run_.result
        self.assertEqual(r.driver_errors, [], "driver errors (seed %d)" % self.seed)
        if r.violations:
            self.fail("%d violations; repeat with: %s\n%s" % (
                len(r.violations), self.repeat, "\n".join(str(v) for v in r.violations[:20])))

    def test_every_kind_of_cut_happened(self):
        c, st = self.run_.counts, self.run_.result.stats
        self.assertEqual(st["driver:kill"], CUTS)
        for kind in ("under load", "inside a commit", "inside a checkpoint", "inside the start"):
            self.assertGreater(c["cut: " + kind], 0, "no cut %s (seed %d): %r" % (kind, self.seed, dict(c)))
        self.assertGreater(c["cut: inside a backup"] + c["cut: just after a backup"], 0)
        self.assertGreater(c["cuts that dropped something"], 0, "no cut lost anything: they test nothing")
        self.assertGreater(c["unsynced sectors kept (--torn)"], 0)
        for key in ("checked: reads inside a promise, across a restart",
                    "checked: fence answers after an acknowledged mark, across a restart",
                    "checked: requests with a released lease",
                    "checked: grants checked against earlier revealed tokens"):
            self.assertGreater(st[key], 0, key)


class PlantedBug(unittest.TestCase):
    def test_fsync_made_a_no_op_is_caught(self):
        env = preload("LEASEGATE_NOSYNC", "libnosync.so")
        s = seed()
        r = powerloss.run(PLANTED_CUTS, s, server_env=env, torn_share=0.0).result
        props = {v.prop for v in r.violations}
        self.assertTrue(props & {"held-after-restart", "token-after-restart", "token-unique", "fence-mark",
                                 "release-sticks", "lease-lost"},
                        "a server whose fsync does nothing passed %d power cuts (seed %d): %s"
                        % (PLANTED_CUTS, s, sorted(props)))


class MigrationCuts(unittest.TestCase):
    def test_cut_inside_every_migration(self):
        current = None
        tried = 0
        for version, path in sorted(powerloss.fixtures().items()):
            problems, figures = powerloss.migration_cuts(version, MIGRATION_CUTS, seed(),
                                                         log=lambda m: sys.stderr.write(m + "\n"))
            if problems and problems[0].endswith("no migration to cut"):
                current = version
                continue
            tried += 1
            sys.stderr.write("migration from schema %d: %r\n" % (version, dict(figures)))
            self.assertEqual(problems, [], "migration from schema %d" % version)
            self.assertEqual(figures["cuts"], MIGRATION_CUTS)
            self.assertGreater(figures["cuts that left the old schema and its rows"], 0)
            self.assertGreater(figures["cuts that left the new schema"], 0)
        self.assertGreater(tried, 0, "no fixture of an older schema than %r in %s" % (current, powerloss.SCHEMAS))


class CheckpointFailure(unittest.TestCase):
    """The store runs a checkpoint between commits once the WAL holds 1,000 pages;
    an error there comes after the transaction is durable. The database file (written
    only by checkpoints in WAL mode) refuses every sync while the file ARM exists."""

    GRANTS = 1500

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-ckpt-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.disk, self.mnt = os.path.join(self.dir, "disk"), os.path.join(self.dir, "mnt")
        self.arm = os.path.join(self.dir, "arm")
        self.log = os.path.join(self.dir, "failsync.log")
        self.fs = CutFs(self.disk, self.mnt)
        self.addCleanup(lambda: self.fs.running() and self.fs.cut())
        env = preload("LEASEGATE_FAILSYNC", "libfailsync.so", FAILSYNC_GLOB="*/" + powerloss.DB,
                      FAILSYNC_IF=self.arm, FAILSYNC_LOG=self.log)
        self.srv = harness.Server(start=False, extra_env=env)
        self.addCleanup(self.srv.cleanup)
        self.srv.data_path = os.path.join(self.mnt, powerloss.DB)
        self.srv.start()

    def failed_syncs(self):
        if not os.path.exists(self.log):
            return 0
        with open(self.log) as f:
            return sum(1 for _ in f)

    def test_a_failing_checkpoint_fails_nothing_acknowledged(self):
        srv = self.srv
        open(self.arm, "w").close()
        grants = []
        for i in range(self.GRANTS):
            st, _, g = srv.acquire("ck/%04d" % i, "ck", ttl_ms=3600000)
            self.assertEqual(st, 200, "grant %d while checkpoints fail: %r (%s)" % (i, g, srv.stderr_text()[-500:]))
            grants.append(g)
        self.assertGreater(self.failed_syncs(), 0, "no checkpoint ran: nothing was tested")
        renewed, released, marks = grants[:50], grants[50:100], grants[100:150]
        for g in renewed:
            st, _, r = srv.renew(g["name"], g["lease"], ttl_ms=3600000)
            self.assertEqual(st, 200, r)
        for g in released:
            st, _, r = srv.release(g["name"], g["lease"])
            self.assertEqual(st, 200, r)
        for g in marks:
            st, _, r = srv.fence("ckf/" + g["name"], g["token"])
            self.assertEqual(st, 200, r)
        self.assertTrue(srv.running(), "the server stopped: %s" % srv.stderr_text()[-1000:])
        # Said once, and tried again only as the WAL grows (each try copies the whole WAL),
        # not after every one of the ~1,700 commits since the first failure.
        err = srv.stderr_text()
        self.assertIn("checkpoint", err, "a failing checkpoint is not said")
        self.assertLess(self.failed_syncs(), 20, "the checkpoint is tried again at every commit")
        # The power goes; the next server on the disk has a database file that syncs.
        self.fs.cut()
        srv.kill9()
        os.unlink(self.arm)
        self.fs = CutFs(self.disk, self.mnt)
        srv.start()
        for g in grants[:50] + grants[100:]:
            st, _, b = srv.get_lock(g["name"])
            self.assertEqual((st, b["holder"] and b["holder"]["token"]), (200, g["token"]), b)
        for g in released:
            st, _, r = srv.renew(g["name"], g["lease"])
            self.assertEqual((st, r.get("reason")), (409, "released"), r)
        for g in marks:
            st, _, r = srv.fence("ckf/" + g["name"], g["token"] - 1)
            self.assertEqual((st, r.get("max_token")), (409, g["token"]), r)
        st, _, g = srv.acquire("ck/next", "ck")
        self.assertGreater(g["token"], grants[-1]["token"])
        # Checkpoints work on this disk: the WAL was copied into the database file.
        srv.stop()
        self.fs.stop()
        db = sqlite3.connect(os.path.join(self.disk, "root", powerloss.DB))
        try:
            self.assertGreaterEqual(db.execute("SELECT count(*) FROM lockspace WHERE token = 0").fetchone()[0],
                                    self.GRANTS)
        finally:
            db.close()

    def test_checkpoints_resume_once_the_file_syncs(self):
        srv = self.srv
        open(self.arm, "w").close()
        for i in range(1000):
            st, _, g = srv.acquire("cr/%04d" % i, "cr", ttl_ms=3600000)
            self.assertEqual(st, 200, g)
        self.assertGreater(self.failed_syncs(), 0, "no checkpoint ran: nothing was tested")
        os.unlink(self.arm)
        # The next try comes once the WAL grew by 1,000 pages: a few hundred grants.
        i = 1000
        while "checkpoints work again" not in srv.stderr_text() and i < 6000:
            st, _, g = srv.acquire("cr/%04d" % i, "cr", ttl_ms=3600000)
            self.assertEqual(st, 200, g)
            i += 1
        self.assertIn("checkpoints work again", srv.stderr_text())


if __name__ == "__main__":
    cutfs_mount.skip_unless_available()
    unittest.main()
