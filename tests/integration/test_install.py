"""What `cmake --install` puts on a machine, and leasegate(1) kept in sync with --help.

The man page (man/leasegate.1.in) must name every flag that `leasegate --help`,
`leasegate serve --help`, `leasegate help run`, `leasegate help campaign` and `leasegate keygen`'s usage show, each under
its command's section, and no flag that none of them shows. `cmake --install` into a
temporary prefix must give the binary, the man page, a unit whose ExecStart is that binary and
that `systemd-analyze verify` accepts, the sysusers.d entry and the commented options file.
(.ci/deb-check.sh installs the .deb on a fresh Debian 12 and runs the unit's ExecStart.)
No server is started here.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("LEASEGATE_BIN", os.path.join(ROOT, "build", "leasegate"))
MAN = os.path.join(ROOT, "man", "leasegate.1.in")
FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")
CLIENT_COMMANDS = ("run", "campaign", "leader", "acquire", "renew", "release", "status", "list")
COMMANDS = ("serve",) + CLIENT_COMMANDS + ("backup", "healthcheck", "keygen", "help")


def run(*args):
    p = subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def flags(text):
    """Long flags (--x) and -h; not dashes in prose, durations or negative numbers."""
    return {f for f in FLAG.findall(text) if f.startswith("--") or f == "-h"}


def help_flags():
    """{command: flags its help shows}, from the main help's lines and the commands' own helps."""
    main = run("--help")
    out = {c: set() for c in COMMANDS}
    current = None
    common = set()
    for line in main.splitlines():
        if line.startswith("client commands ("):
            current = "common"
        m = re.match(r"^  (serve|run|campaign|leader|acquire|backup|healthcheck|keygen|renew|release|status|list|help)\b",
                     line)
        m2 = re.match(r"^  (acquire, renew, release, status, list)\b", line)
        if m2:
            current = None
        elif m:
            current = m.group(1)
        elif re.match(r"^  --version", line):
            out["help"] |= flags(line)
            current = None
        elif re.match(r"^\S", line) and current != "common":
            current = None
        if current == "common":
            common |= flags(line)
        elif current:
            out[current] |= flags(line)
    out["help"] |= {"--help", "-h"}
    out["serve"] = flags(run("serve", "--help"))
    out["run"] |= flags(run("help", "run"))
    out["campaign"] |= flags(run("help", "campaign"))
    out["keygen"] |= flags(run("keygen"))
    # The paragraph also says that "a server with --auth-file" needs a key: serve's flag.
    common.discard("--auth-file")
    for c in CLIENT_COMMANDS:
        out[c] |= common
    return out


def man_sections():
    """{section name: flags in it} for every .SS of the man page, and all its flags but
    those of EXAMPLES (which also shows other programs' flags, such as curl's)."""
    with open(MAN) as f:
        text = f.read().replace("\\-", "-").replace("\\(aq", "'")
    sections, name, every, chapter = {}, None, set(), None
    for line in text.splitlines():
        if line.startswith('.\\"'):
            continue
        if line.startswith(".SH"):
            name, chapter = None, line[3:].strip()
        elif line.startswith(".SS"):
            name = line[3:].strip()
            sections[name] = set()
        elif name:
            sections[name] |= flags(line)
        if chapter != "EXAMPLES":
            every |= flags(line)
    return sections, every


class ManPageTests(unittest.TestCase):
    def test_every_command_has_its_section_with_exactly_its_flags(self):
        helps = help_flags()
        sections, _ = man_sections()
        self.assertGreater(len(helps["serve"]), 25, "serve --help parsed to too few flags")
        self.assertIn("--exit-codes", helps["run"])
        self.assertIn("--lease", helps["acquire"])
        for cmd in COMMANDS:
            self.assertIn(cmd, sections, "leasegate(1) has no section for %s" % cmd)
            # A section may point to another command's flag (backup: start serve with
            # --min-token), never to one that no command has.
            others = set().union(*(helps[c] for c in COMMANDS if c != cmd))
            self.assertEqual(sorted(sections[cmd] - helps[cmd] - others), [],
                             "leasegate(1) names flags under %s that no help shows" % cmd)
            self.assertEqual(sorted(helps[cmd] - sections[cmd]), [],
                             "flags of %s missing from its section of leasegate(1)" % cmd)

    def test_no_flag_anywhere_in_the_man_page_that_help_does_not_know(self):
        helps = help_flags()
        _, every = man_sections()
        known = set().union(*helps.values())
        self.assertEqual(sorted(every - known), [], "flags in leasegate(1) that no --help shows")
        self.assertEqual(sorted(known - every), [], "flags that --help shows and leasegate(1) does not")

    def test_the_page_renders_without_warnings(self):
        if not shutil.which("groff"):
            self.skipTest("groff is missing (Debian's groff-base, which man-db needs)")
        with open(MAN) as f:
            page = f.read().replace("@PROJECT_VERSION@", "0")
        p = subprocess.run(["groff", "-t", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual((p.returncode, p.stderr), (0, ""))


class InstallTests(unittest.TestCase):
    def test_cmake_install_into_a_prefix(self):
        build = os.path.dirname(os.path.abspath(BIN))
        self.assertTrue(os.path.exists(os.path.join(build, "cmake_install.cmake")), "not a CMake build folder: " + build)
        with tempfile.TemporaryDirectory() as prefix:
            p = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            binary = os.path.join(prefix, "bin", "leasegate")
            unit = os.path.join(prefix, "lib", "systemd", "system", "leasegate.service")
            sysusers = os.path.join(prefix, "lib", "sysusers.d", "leasegate.conf")
            default = os.path.join(prefix, "etc", "default", "leasegate")
            for path in (binary, unit, sysusers, default, os.path.join(prefix, "share", "man", "man1", "leasegate.1")):
                self.assertTrue(os.path.isfile(path), "not installed: " + path)
            self.assertRegex(subprocess.run([binary, "--version"], capture_output=True, text=True).stdout,
                             r"^leasegate \d+\.\d+\.\d+")
            with open(unit) as f:
                text = f.read()
            keys = {}
            for line in text.splitlines():
                if "=" in line and not line.startswith("#"):
                    k, v = line.split("=", 1)
                    keys.setdefault(k, []).append(v)
            self.assertEqual(keys["ExecStart"][0].split()[:2], [binary, "serve"])
            self.assertIn("--auth-file %s/etc/leasegate/keys.txt" % prefix, keys["ExecStart"][0])
            self.assertEqual(keys["EnvironmentFile"], ["-%s" % default])
            for k, v in (("User", "leasegate"), ("StateDirectory", "leasegate"), ("ProtectSystem", "strict"),
                         ("NoNewPrivileges", "yes"), ("Restart", "on-failure"), ("KillSignal", "SIGTERM"),
                         ("CapabilityBoundingSet", ""), ("PrivateTmp", "yes"), ("ProtectHome", "yes")):
                self.assertEqual(keys.get(k), [v], k)
            self.assertIn("HUP", keys["ExecReload"][0])
            with open(sysusers) as f:
                self.assertRegex(f.read(), r"(?m)^u leasegate - ")
            with open(default) as f:
                for line in f:
                    self.assertTrue(not line.strip() or line.startswith("#"),
                                    "the options file sets something by default: %r" % line)
            # The options file is the administrator's: a second install keeps it.
            with open(default, "a") as f:
                f.write('LEASEGATE_OPTS="--listen 127.0.0.1:7999"\n')
            p = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(default) as f:
                self.assertIn("7999", f.read())
            if shutil.which("systemd-analyze"):
                p = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], capture_output=True, text=True,
                                   timeout=120)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
