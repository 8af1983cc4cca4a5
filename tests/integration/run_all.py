"""Run every tests/integration/test_*.py file, each in its own process, and summarize.

Usage: LEASEGATE_BIN=build/leasegate python3 tests/integration/run_all.py [area ...]
Exit status is non-zero when any file fails. The last line reads 'N passed, N failed'
(counted in test cases).

With LEASEGATE_TEST_STORE=etcd every server keeps its state in etcd (harness.py); when
etcd is not installed, the run is skipped: exit status 77, which ctest reports as skipped.
"""

import glob
import os
import re
import subprocess
import sys
import time

PER_FILE_TIMEOUT_S = 300
SKIPPED = 77


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.environ.get("LEASEGATE_BIN"):
        sys.stderr.write("LEASEGATE_BIN is not set\n")
        return 2
    if os.environ.get("LEASEGATE_TEST_STORE") == "etcd":
        import etcd_fixture
        if not etcd_fixture.available():
            print("integration on etcd skipped: " + etcd_fixture.missing_reason())
            return SKIPPED
    files = sorted(glob.glob(os.path.join(here, "test_*.py")))
    if len(sys.argv) > 1:
        wanted = set(sys.argv[1:])
        files = [f for f in files if os.path.basename(f)[5:-3] in wanted]
    passed = failed = 0
    bad_files = []
    for f in files:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, f], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, rc = p.communicate(timeout=PER_FILE_TIMEOUT_S)[0], p.returncode
        except subprocess.TimeoutExpired:
            # SIGTERM first: the harness then stops its servers (and etcd) by PID.
            p.terminate()
            try:
                out = p.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:
                p.kill()
                out = p.communicate()[0]
            out, rc = "%s\nTIMEOUT after %d s" % (out or "", PER_FILE_TIMEOUT_S), -1
        ran = re.search(r"^Ran (\d+) tests?", out, re.M)
        n = int(ran.group(1)) if ran else 0
        m = re.search(r"^FAILED \((.*)\)", out, re.M)
        nfail = 0
        if m:
            nfail = sum(int(x) for x in re.findall(r"(?:failures|errors)=(\d+)", m.group(1)))
        if rc != 0 and nfail == 0:
            nfail = max(1, n)
        passed += max(0, n - nfail)
        failed += nfail
        status = "ok" if rc == 0 else "FAIL"
        print("%-24s %-4s %3d tests  %5.1f s" % (os.path.basename(f), status, n, time.monotonic() - t0), flush=True)
        if rc != 0:
            bad_files.append(os.path.basename(f))
            sys.stdout.write(out[-6000:] + "\n")
    print("integration: %d passed, %d failed" % (passed, failed))
    return 1 if bad_files or failed else 0


if __name__ == "__main__":
    sys.exit(main())
