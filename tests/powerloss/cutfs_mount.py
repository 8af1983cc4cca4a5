"""One cutfs mount (tests/powerloss/cutfs.c): a file system whose power a test can cut.

    m = CutFs(disk, mountpoint)          # mounts; DISK/root is what survives a cut
    ... run something on m.mountpoint ...
    m.ops()                              # changing operations so far (SIGUSR2)
    line = m.cut()                       # power cut: unsynced writes and names dropped
    m = CutFs(disk, mountpoint)          # powered on again

CutFs(..., cut_at=N, cut_only=GLOB) cuts by itself at the N-th changing operation on a
path matching GLOB (m.wait_cut() waits for it); torn=SEED lets part of what was not synced
reach the disk at the cut (sectors drawn from SEED). m.stop() unmounts cleanly (syncs all).
The binary is $LEASEGATE_CUTFS, else build/tests/cutfs beside this checkout. Every wait is
bounded; the process is stopped by its PID.
"""

import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MOUNT_TIMEOUT_S = 10.0
EXIT_TIMEOUT_S = 15.0
OPS_RE = re.compile(r"^cutfs: ops (\d+) matching (\d+)$")
SYNC_RE = re.compile(r"^cutfs: sync at op (\d+) (.*)$", re.M)


def binary():
    path = os.environ.get("LEASEGATE_CUTFS")
    if not path:
        path = os.path.join(HERE, "..", "..", "build", "tests", "cutfs")
    return os.path.abspath(path)


def unavailable():
    """Why cutfs cannot run here (one line saying what to do), or None."""
    if not os.path.exists(binary()):
        return ("cutfs is not built (%s): install fuse3 and libfuse3-dev (scripts/deps.sh --test), "
                "then cmake -B build again" % binary())
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: the power-loss tests need FUSE (a container needs --device /dev/fuse)"
    if os.geteuid() != 0:
        return "the power-loss tests mount cutfs, which needs root here (run them as root)"
    return None


def skip_unless_available():
    """Exits 77 (ctest's skip) saying why when cutfs cannot run here; 1 instead when
    LEASEGATE_POWERLOSS_REQUIRED=1 (CI as root, where a skip would hide the test)."""
    why = unavailable()
    if why:
        print("SKIPPED: " + why, flush=True)
        sys.exit(1 if os.environ.get("LEASEGATE_POWERLOSS_REQUIRED") == "1" else 77)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 1 and fields[1].replace("\\040", " ") == path:
                return True
    return False


class CutFs:
    def __init__(self, disk, mountpoint, cut_at=None, cut_only=None, torn=None, trace_syncs=False):
        self.disk = disk
        self.mountpoint = mountpoint
        os.makedirs(disk, exist_ok=True)
        os.makedirs(mountpoint, exist_ok=True)
        if is_mounted(mountpoint):
            raise RuntimeError("%s is still mounted" % mountpoint)
        self.root = os.path.join(disk, "root")
        args = [binary()]
        if cut_at is not None:
            args += ["--cut-at", str(cut_at)]
        if cut_only is not None:
            args += ["--cut-only", cut_only]
        if torn is not None:
            args += ["--torn", str(torn)]
        if trace_syncs:
            args.append("--trace-syncs")
        args += [disk, mountpoint]
        self._err_path = os.path.join(disk, "cutfs.%d.log" % time.monotonic_ns())
        self._err = open(self._err_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._err)
        line = self.proc.stdout.readline().decode("utf-8", "replace")
        if not line.startswith("cutfs: mounted"):
            self.proc.wait(EXIT_TIMEOUT_S)
            self._err.close()
            raise RuntimeError("cutfs did not mount (exit %r): %s" % (self.proc.returncode, self.log()))
        self.result = None

    def log(self):
        try:
            with open(self._err_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def syncs(self):
        """[(op, path)] of every fsync so far (with trace_syncs): op is the number of the
        changing operation the fsync was."""
        return [(int(m.group(1)), m.group(2)) for m in SYNC_RE.finditer(self.log())]

    def running(self):
        return self.proc.poll() is None

    def ops(self):
        """(changing operations so far, of those matching --cut-only), asked with SIGUSR2;
        None when cutfs ended (its own cut came) before it answered."""
        before = self.log().count("cutfs: ops ")
        self.proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while time.monotonic() < deadline:
            lines = [ln for ln in self.log().splitlines() if OPS_RE.match(ln)]
            if len(lines) > before:
                m = OPS_RE.match(lines[-1])
                return int(m.group(1)), int(m.group(2))
            if not self.running():
                return None
            time.sleep(0.005)
        raise RuntimeError("cutfs did not say its count: %s" % self.log())

    def _finish(self, sig):
        if self.running() and sig is not None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(EXIT_TIMEOUT_S)
        self._err.close()
        self.proc.stdout.close()
        lines = [ln for ln in self.log().splitlines() if ln.startswith(("cutfs: power cut", "cutfs: unmounted"))]
        self.result = lines[-1] if lines else self.log()
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while is_mounted(self.mountpoint) and time.monotonic() < deadline:
            time.sleep(0.01)
        if is_mounted(self.mountpoint):
            subprocess.run(["umount", "-l", self.mountpoint], check=False)
        return self.result

    def cut(self):
        """The power cut, now (if it did not come by itself): the line cutfs said."""
        return self._finish(signal.SIGUSR1)

    def wait_cut(self, timeout):
        """True when cutfs ended (its own --cut-at came) within timeout seconds."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        self._finish(None)
        return True

    def stop(self):
        """A clean unmount: every unsynced write is synced first."""
        if self.result is not None:
            return self.result
        return self._finish(signal.SIGTERM)
