"""Lock-space identity on etcd (issue 37): PREFIX/meta/lockspace is written once, when a
lock space is created on an empty prefix with --new-lock-space; a gateway refuses a prefix
that lies inside or around another lock space, an empty prefix without the flag (a typo),
and a lock space of another schema, each with one line naming both sides. A one-member
etcd per test on free 127.0.0.1 ports (etcd_fixture.py), stopped by PID; every wait is
bounded and nothing asserts how long anything took."""

import base64
import json
import subprocess
import tempfile
import unittest

from harness import binary_path, kill_process, resume_process
import etcd_fixture
from etcd_fixture import EtcdTestCase, Gateway, b64, wait_for, wait_leader

LAYOUT = 3  # src/store/lockspace.h's ETCD_LAYOUT: the layout of the records this leasegate writes


def setUpModule():
    if not etcd_fixture.available():
        raise unittest.SkipTest(etcd_fixture.missing_reason())


class LockSpaceTest(EtcdTestCase):
    def serve_refused(self, prefix, *flags):
        """A gateway started on prefix that must refuse: its exit status and stderr."""
        r = subprocess.run([binary_path(), "serve", "--listen", "127.0.0.1:0", "--leader-ttl", "2",
                            "--store", "etcd://%s/%s" % (self.etcd.endpoint, prefix)] + list(flags),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        return r.returncode, r.stderr.decode(errors="replace")

    def identity(self, prefix):
        r = self.etcd.call("/v3/kv/range", {"key": b64(prefix + "/meta/lockspace")})
        kvs = r.get("kvs", [])
        return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None

    def put(self, key, value):
        self.etcd.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def test_a_nested_prefix_is_refused_and_the_outer_lock_space_keeps_its_counter(self):
        # The collision: a gateway on lg/leader campaigned inside lg/leader/, became the
        # oldest candidate, and lg's gateways followed it (an acquire got token 2 from the
        # wrong counter). Now it refuses to start, naming both prefixes.
        outer = Gateway(self.etcd, "lg")
        self.gateways.append(outer)
        self.assertIs(wait_leader([outer]), outer, outer.stderr_text())
        tokens = [self.acquire_ok(outer, "t%d" % i)["token"] for i in range(3)]
        rc, err = self.serve_refused("lg/leader", "--new-lock-space")
        self.assertEqual(rc, 1, err)
        self.assertIn("the prefix lg/leader lies inside the lock space at lg", err)
        self.assertIn(self.identity("lg")["id"], err)
        self.assertEqual([k for k in self.etcd.keys("lg/leader/") if k.count("/") > 2], [],
                         "the refused gateway wrote under lg/leader/")
        self.assertIsNone(self.identity("lg/leader"))
        # The outer lock space's next leader is one of its own, on its own counter.
        outer.kill9()
        outer.start()
        self.assertIs(wait_leader([outer]), outer, outer.stderr_text())
        self.assertGreater(self.acquire_ok(outer, "after")["token"], max(tokens))

    def test_a_mistyped_prefix_is_refused_and_nothing_is_written(self):
        g = Gateway(self.etcd, "lg")
        self.gateways.append(g)
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        self.acquire_ok(g, "x")
        rc, err = self.serve_refused("gl")
        self.assertEqual(rc, 1, err)
        self.assertIn("there is no lock space at gl", err)
        self.assertIn("--new-lock-space", err)
        self.assertEqual(self.etcd.keys("gl/"), [])

    def test_a_prefix_around_a_lock_space_is_refused(self):
        inner = Gateway(self.etcd, "teams/billing")
        self.gateways.append(inner)
        self.assertIs(wait_leader([inner]), inner, inner.stderr_text())
        rc, err = self.serve_refused("teams", "--new-lock-space")
        self.assertEqual(rc, 1, err)
        self.assertIn("the prefix teams lies around the lock space at teams/billing", err)
        self.assertIn(self.identity("teams/billing")["id"], err)
        self.assertIsNone(self.identity("teams"))
        # A prefix beside it is another lock space, free to be created.
        beside = Gateway(self.etcd, "teams/ops")
        self.gateways.append(beside)
        self.assertIs(wait_leader([beside]), beside, beside.stderr_text())
        self.assertNotEqual(self.identity("teams/ops")["id"], self.identity("teams/billing")["id"])

    def test_a_prefix_around_a_lock_space_named_like_a_folder_of_records_is_refused(self):
        # The hostile review of issue 37: a lock space at teams/locks (or .../meta, .../holders,
        # .../auth, ...) has keys teams/locks/... that read as lock records of a lock space at
        # teams. A gateway started on teams, without --new-lock-space, took them for a lock space
        # older than identities, gave teams an identity, and the gateways of teams/locks then
        # refused to start ("inside the lock space at teams"); on .../meta it even served, at
        # token 1, around the other. Adopting needs what an older gateway leaves (its commit
        # mark or token counter); the lock space inside is named.
        for inner_prefix in ("teams/locks", "ops/meta"):
            outer_prefix = inner_prefix.split("/")[0]
            inner = Gateway(self.etcd, inner_prefix)
            self.gateways.append(inner)
            self.assertIs(wait_leader([inner]), inner, inner.stderr_text())
            tokens = [self.acquire_ok(inner, "t%d" % i)["token"] for i in range(2)]
            inner.kill9()
            for flags in ((), ("--new-lock-space",)):
                rc, err = self.serve_refused(outer_prefix, *flags)
                self.assertEqual(rc, 1, (inner_prefix, flags, err))
                self.assertIn("the prefix %s lies around the lock space at %s" % (outer_prefix, inner_prefix), err)
                self.assertIn(self.identity(inner_prefix)["id"], err)
                self.assertIsNone(self.identity(outer_prefix), inner_prefix)
            inner.start()  # its own lock space, as it was
            self.assertIs(wait_leader([inner]), inner, inner.stderr_text())
            self.assertGreater(self.acquire_ok(inner, "after")["token"], max(tokens))

    def test_keys_of_a_lock_space_without_its_marks_are_not_adopted(self):
        # Keys that look like a lock space's records but no commit mark or token counter (what
        # every gateway older than identities wrote at its first commit): another program's,
        # or what is left of a lock space someone deleted in part. Never adopted silently.
        self.put("lg/locks/orders", '{"last_token":3}')
        rc, err = self.serve_refused("lg")
        self.assertEqual(rc, 1, err)
        self.assertIn("the prefix lg holds keys that are not a lock space's", err)
        self.assertIsNone(self.identity("lg"))

    def test_nested_lock_spaces_created_at_the_same_moment_cannot_both_be(self):
        # The hostile review of issue 37: gateways on r and r/x started together, each with
        # --new-lock-space, each saw nothing in the other's place and created its lock space
        # (11 times in 15 tries); r/x's gateways then refused every later start, inside r. The
        # creation's transaction now requires what the check saw (the ancestors without a lock
        # space, the prefix empty): whichever commits second checks again and is refused.
        procs = []
        try:
            for i in range(4):
                pair = []
                for prefix in ("r%d" % i, "r%d/x" % i):
                    err = tempfile.TemporaryFile()
                    pair.append((subprocess.Popen(
                        [binary_path(), "serve", "--listen", "127.0.0.1:0", "--leader-ttl", "2", "--new-lock-space",
                         "--store", "etcd://%s/%s" % (self.etcd.endpoint, prefix)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err), err))
                procs.extend(pair)

                def text(e):
                    e.seek(0)
                    return e.read().decode(errors="replace")
                # Each either created its lock space or stopped.
                self.assertTrue(wait_for(lambda: all(p.poll() is not None or "created the lock space" in text(e)
                                                     for p, e in pair)), [text(e) for _, e in pair])
                created = [text(e) for p, e in pair if "created the lock space" in text(e)]
                refused = [(p.wait(30), text(e)) for p, e in pair if "created the lock space" not in text(e)]
                self.assertEqual((len(created), len(refused)), (1, 1), [text(e) for _, e in pair])
                self.assertEqual(refused[0][0], 1, refused)
                self.assertRegex(refused[0][1], "the prefix r%d(/x)? lies (inside|around) the lock space at r%d" % (i, i))
                self.assertEqual(sum(1 for p in ("r%d" % i, "r%d/x" % i) if self.identity(p)), 1)
        finally:
            for p, e in procs:
                resume_process(p)
                kill_process(p)
                e.close()

    def test_other_keys_on_the_prefix_are_refused(self):
        self.put("app/config", "1")
        rc, err = self.serve_refused("app", "--new-lock-space")
        self.assertEqual(rc, 1, err)
        self.assertIn("the prefix app holds keys that are not a lock space's (app/config", err)
        self.assertIsNone(self.identity("app"))

    def test_the_identity_is_written_once_and_the_flag_is_harmless_later(self):
        gateways = [Gateway(self.etcd, "lg") for _ in range(3)]  # all at once, all with the flag
        self.gateways.extend(gateways)
        leader = wait_leader(gateways)
        self.assertIsNotNone(leader)
        ident = self.identity("lg")
        self.assertEqual((ident["schema"], ident["prefix"]), (LAYOUT, "lg"), ident)  # the layout it writes
        def logs():
            return "".join(g.stderr_text() for g in gateways)
        # Each says which, once it checked (after its listening line).
        wait_for(lambda: logs().count("joining the lock space %s" % ident["id"]) == 2)
        self.assertEqual(logs().count("created the lock space"), 1, logs())
        self.assertEqual(logs().count("joining the lock space %s" % ident["id"]), 2, logs())
        grant = self.acquire_ok(leader, "kept", ttl_ms=120000)
        for g in gateways:
            g.kill9()
        gateways[0].start()  # --new-lock-space again: the lock space exists, so it joins it
        self.assertIs(wait_leader(gateways[:1]), gateways[0])
        self.assertEqual(self.identity("lg"), ident)
        status, _, body = gateways[0].client.get_lock("kept")
        self.assertEqual((status, body["holder"]["token"]), (200, grant["token"]), body)
        # Without the flag too.
        plain = Gateway(self.etcd, "lg", new_lock_space=False)
        self.gateways.append(plain)
        self.assertTrue(wait_for(lambda: "joining the lock space %s" % ident["id"] in plain.stderr_text()),
                        plain.stderr_text())

    def test_a_newer_schema_is_refused_naming_both_before_the_campaign(self):
        # Created by a newer leasegate...
        self.put("lg/meta/lockspace", json.dumps({"id": "0b6c5f4e-1d2a-4e0b-9a57-3f1c2d4e5f60", "schema": LAYOUT + 1,
                                                  "created_at_ms": 1, "prefix": "lg"}))
        rc, err = self.serve_refused("lg")
        self.assertEqual(rc, 1, err)
        self.assertIn("the lock space at lg (id 0b6c5f4e-1d2a-4e0b-9a57-3f1c2d4e5f60) was written by a newer leasegate "
                      "(layout %d" % (LAYOUT + 1), err)
        self.assertIn("reads layouts 1 to %d" % LAYOUT, err)
        self.assertIn("upgrade this gateway", err)
        self.assertEqual(self.etcd.keys("lg/leader/"), [])
        # ...or moved to a newer layout by a newer leader since.
        self.put("ls/meta/lockspace", json.dumps({"id": "1b6c5f4e-1d2a-4e0b-9a57-3f1c2d4e5f60", "schema": LAYOUT,
                                                  "created_at_ms": 1, "prefix": "ls"}))
        self.put("ls/meta/layout", str(LAYOUT + 1))
        rc, err = self.serve_refused("ls")
        self.assertEqual(rc, 1, err)
        self.assertIn("written by a newer leasegate (layout %d" % (LAYOUT + 1), err)
        self.assertEqual(self.etcd.keys("ls/leader/"), [])

    def test_a_lock_space_older_than_identities_is_adopted(self):
        # What a gateway before identities left: a commit mark and a token counter.
        self.put("lg/meta/commit", "%020d.%020d" % (7, 3))
        self.put("lg/meta/last_token", "41")
        g = Gateway(self.etcd, "lg", new_lock_space=False)
        self.gateways.append(g)
        self.assertIs(wait_leader([g]), g, g.stderr_text())
        ident = self.identity("lg")
        self.assertEqual(ident["schema"], 1)  # created with layout 1; its first leader here moves it to LAYOUT
        self.assertIn("gave an identity to the older lock space %s" % ident["id"], g.stderr_text())
        self.assertEqual(self.acquire_ok(g, "next")["token"], 42)


class FlagsTest(unittest.TestCase):
    def test_usage_errors(self):
        store = ["--store", "etcd://127.0.0.1:2379/lg"]
        cases = [(["--new-lock-space"], "need --store"),
                 (["--etcd-auth-file", "/x"], "need --store"),
                 (["--etcd-compact-interval", "60"], "need --store"),
                 (store + ["--etcd-cert", "/x"], "go together"),
                 (store + ["--etcd-cert", "/x", "--etcd-key", "/y"], "needs TLS: --store etcds://"),
                 (store + ["--etcd-compact-bytes", "1000"], "below 65536"),
                 (store + ["--etcd-compact-interval", "-1"], "--etcd-compact-interval"),
                 # etcd's keys are taken as written: "/lg" and "lg//x" would be lock spaces of their
                 # own beside "lg" and "lg/x" (a doubled slash is a typo, not another prefix).
                 (["--store", "etcd://127.0.0.1:2379//lg"], "an empty segment"),
                 (["--store", "etcd://127.0.0.1:2379/lg//x"], "an empty segment")]
        for args, says in cases:
            r = subprocess.run([binary_path(), "serve"] + args, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(says, r.stderr.decode(), args)


if __name__ == "__main__":
    unittest.main()
