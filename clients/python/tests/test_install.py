"""`pip install --no-index ./clients/python` in a fresh virtual environment, as a user
without a reachable package index would run it, then the installed package against the
real leasegate binary ($LEASEGATE_BIN); and the same from the sdist the backend builds.

Needs the venv module with ensurepip (Debian: python3-venv, which scripts/deps.sh --test
installs); no network: pip is told --no-index, and the build backend (_build/) needs
nothing.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from support import Server, unique

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # clients/python
TIMEOUT = 240

# Run by the venv's python, outside the source tree: the blocking and the asyncio client.
SMOKE = r"""
import asyncio, sys
import leasegate
print(leasegate.__file__)
url, name = sys.argv[1], sys.argv[2]
with leasegate.Client(url).lock(name, ttl="15s") as lease:
    assert leasegate.Client(url).status(name)["holder"]["token"] == lease.token

async def main():
    async with leasegate.AsyncClient(url).lock(name, ttl="15s") as lease:
        return lease.token
print(asyncio.run(main()))
"""


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-pyclient-install-")
        # Nothing of the caller's: no PYTHONPATH (the source tree must not be what is
        # imported), no pip configuration, no user site, no bytecode in the source tree.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
        self.env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                        PIP_NO_CACHE_DIR="1", PIP_NO_INPUT="1", PIP_CONFIG_FILE=os.devnull)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_in(self, *cmd, cwd=None):
        done = subprocess.run(cmd, cwd=cwd or self.dir, env=self.env, capture_output=True, text=True,
                              timeout=TIMEOUT)
        self.assertEqual(done.returncode, 0, "%s failed:\n%s\n%s" % (" ".join(cmd), done.stdout, done.stderr))
        return done.stdout

    def fresh_venv(self):
        venv = os.path.join(self.dir, "venv")
        done = subprocess.run([sys.executable, "-m", "venv", venv], env=self.env, capture_output=True, text=True,
                              timeout=TIMEOUT)
        self.assertEqual(done.returncode, 0, "python3 -m venv failed (Debian: apt-get install python3-venv, "
                                             "or scripts/deps.sh --test):\n" + done.stderr)
        return os.path.join(venv, "bin", "python")

    def check_installed(self, python):
        out = self.run_in(python, "-c", SMOKE, self.server.url, unique("install")).splitlines()
        self.assertTrue(out[0].startswith(os.path.join(self.dir, "venv")), "imported from " + out[0])
        self.assertTrue(out[1].isdigit(), out)

    def test_pip_install_no_index_from_the_folder(self):
        python = self.fresh_venv()
        self.run_in(python, "-m", "pip", "install", "--no-index", PACKAGE)
        self.check_installed(python)

    def test_pip_install_no_index_from_the_sdist(self):
        python = self.fresh_venv()
        dist = os.path.join(self.dir, "dist")
        os.mkdir(dist)
        build = "import sys; sys.path.insert(0, sys.argv[1]); import leasegate_build; print(leasegate_build.build_sdist(sys.argv[2]))"
        sdist = self.run_in(python, "-c", build, os.path.join(PACKAGE, "_build"), dist).strip()
        self.run_in(python, "-m", "pip", "install", "--no-index", os.path.join(dist, sdist))
        self.check_installed(python)


if __name__ == "__main__":
    unittest.main()
