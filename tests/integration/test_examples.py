"""The client examples in examples/ run for real against leasegate and a storage backend.

Starts a real storage upstream (nginx WebDAV from upstream.py; a tiny in-process
PUT/GET server only when nginx is not installed) and the real leasegate with
`--guard /store/=<upstream>/store/` (/store/KEY bound to lock KEY, the workers' default)
and `--guard /bucket/=<upstream>/bucket/,lock=examples/bucket` (one lock for the prefix;
each route over a folder of its own, as two bindings of one object would not start),
then runs each example worker as a subprocess:

  examples/shell/worker.sh     bash + curl
  examples/python/worker.py    Python, with the library in clients/python
  examples/node/worker.mjs     Node.js, with the library in clients/node (skipped only when
                               `node` is not on PATH)

and checks the counter object each one increments through the guard (with the lease in
Fencing-Lease), that the lock is left free, that the three languages running at once
on one lock never lose an update (mutual exclusion + fencing), that LOCK set to a
prefix's own lock works as examples/README.md says, that the background renewer keeps
a lease alive through work longer than its TTL, and that unexpected answers (a lock
held too long, a LOCK that is not the one the object is bound to, a wrong prefix, no
server, a bad setting) end a worker with a non-zero status and a clear message.

Run: LEASEGATE_BIN=build/leasegate python3 tests/integration/test_examples.py
Only loopback traffic; every subprocess has a time limit and is stopped by PID.
"""

import http.client
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

import harness
import upstream

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples")
RUN_TIMEOUT_S = 120
NODE = shutil.which("node")
BASH = shutil.which("bash") or "/bin/bash"

WORKERS = {
    "shell": [BASH, os.path.join(EXAMPLES, "shell", "worker.sh")],
    "python": [sys.executable, os.path.join(EXAMPLES, "python", "worker.py")],
    "node": [NODE or "node", os.path.join(EXAMPLES, "node", "worker.mjs")],
}
# Environment variables the workers read; cleared from the inherited environment so
# a developer's shell settings cannot change what the tests run.
WORKER_VARS = ("LEASEGATE_SERVER", "LOCK", "KEY", "ITERATIONS", "OWNER", "STORE_PREFIX",
               "TTL_MS", "WAIT_MS", "WORK_MS")
BUCKET_LOCK = "examples/bucket"  # the one lock of the /bucket/ guard
LINE_RE = re.compile(r"^(\S+): iteration (\d+)/(\d+) token (\d+): (\S+) (\d+) -> (\d+)$")


def uid():
    return uuid.uuid4().hex[:10]


class MiniStore:
    """Fallback storage upstream when nginx is not installed: GET/PUT of whole objects
    kept in memory (404 for a missing one), on a free loopback port."""

    def __init__(self):
        objects = {}
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, body=b""):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self):
                with lock:
                    data = objects.get(self.path)
                self._send(404, b"not found\n") if data is None else self._send(200, data)

            do_HEAD = do_GET

            def do_PUT(self):
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n)
                with lock:
                    existed = self.path in objects
                    objects[self.path] = data
                self._send(204 if existed else 201)

        self._objects = objects
        self._lock = lock
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d/" % self.port
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)
        self._thread.start()

    def get(self, path):
        with self._lock:
            return self._objects.get(path)

    def put(self, path, data):
        with self._lock:
            self._objects[path] = data

    def cleanup(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5.0)


class ExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if upstream.nginx_available():
            cls.store = upstream.Nginx()
        else:
            sys.stderr.write("test_examples: nginx not found at %s; using an in-process "
                             "PUT/GET store as the upstream\n" % upstream.NGINX_BIN)
            cls.store = MiniStore()
        try:
            cls.server = harness.Server(extra_args=[
                "--guard", "/store/=%sstore/" % cls.store.url,
                "--guard", "/bucket/=%sbucket/,lock=%s" % (cls.store.url, BUCKET_LOCK)])
        except Exception:
            cls.store.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.cleanup()
        finally:
            cls.store.cleanup()

    # Helpers -----------------------------------------------------------------
    def need(self, lang):
        if lang == "node" and NODE is None:
            self.skipTest("node is not on PATH: the Node.js example (examples/node/worker.mjs) "
                          "was not run; install nodejs >= 18 to run it")

    def env(self, **values):
        env = {k: v for k, v in os.environ.items()
               if k not in WORKER_VARS and not k.lower().endswith("_proxy")}
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        env["LEASEGATE_SERVER"] = self.server.url
        env.update({k: str(v) for k, v in values.items()})
        return env

    def start(self, lang, **values):
        return subprocess.Popen(WORKERS[lang], env=self.env(**values), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=EXAMPLES)

    def finish(self, proc, timeout=RUN_TIMEOUT_S):
        """Wait for a worker (bounded); kill it by PID when it overstays. (rc, out, err)."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=10)
            self.fail("worker %r did not finish within %d s\nstdout: %s\nstderr: %s"
                      % (proc.args, timeout, out[-2000:], err[-2000:]))
        return proc.returncode, out, err

    def run_ok(self, lang, **values):
        rc, out, err = self.finish(self.start(lang, **values))
        self.assertEqual(rc, 0, "%s worker failed (exit %d)\nstdout: %s\nstderr: %s"
                         % (lang, rc, out[-2000:], err[-2000:]))
        return out

    def counter(self, key, folder="store/"):
        """The stored object, read straight from the upstream (not through the guard)."""
        data = self.store.get("/" + folder + key)
        return None if data is None else int(data.decode("ascii").strip())

    def lock_state(self, name):
        st, _, body = self.server.get_lock(name)
        self.assertEqual(st, 200, body)
        return body

    def parse_lines(self, out):
        rows = []
        for line in out.splitlines():
            m = LINE_RE.match(line.strip())
            self.assertIsNotNone(m, "unexpected worker output line: %r" % line)
            owner, i, n, token, key, old, new = m.groups()
            rows.append({"owner": owner, "i": int(i), "n": int(n), "token": int(token),
                         "key": key, "old": int(old), "new": int(new)})
        return rows

    # Tests -------------------------------------------------------------------
    def check_sequential(self, lang):
        self.need(lang)
        # LOCK is left unset: the worker takes lock KEY, the one /store/KEY is bound to.
        key = "examples/seq-%s-%s" % (lang, uid())
        lock = key
        out = self.run_ok(lang, KEY=key, ITERATIONS=5, OWNER="it-%s" % lang)
        self.assertEqual(self.counter(key), 5)
        rows = self.parse_lines(out)
        self.assertEqual([(r["old"], r["new"]) for r in rows], [(i, i + 1) for i in range(5)])
        self.assertEqual({r["owner"] for r in rows}, {"it-%s" % lang})
        tokens = [r["token"] for r in rows]
        self.assertEqual(tokens, sorted(set(tokens)), "fencing tokens must only grow")
        state = self.lock_state(lock)
        self.assertFalse(state["held"], "the worker must release the lock: %r" % state)
        # Tokens are global (other tests take some too), so compare with our last one.
        self.assertEqual(state["last_token"], tokens[-1], state)

        # A second run continues from the stored value (200 path, not only 404 -> 0),
        # with LOCK set to what it defaults to.
        self.run_ok(lang, LOCK=lock, KEY=key, ITERATIONS=2)
        self.assertEqual(self.counter(key), 7)
        self.assertFalse(self.lock_state(lock)["held"])

    def test_shell_worker(self):
        self.check_sequential("shell")

    def test_python_worker(self):
        self.check_sequential("python")

    def test_node_worker(self):
        self.check_sequential("node")

    def test_concurrent_workers_one_of_each_language(self):
        langs = ["shell", "python", "node"]
        if NODE is None:
            sys.stderr.write("test_examples: node is not on PATH; the concurrent run uses a "
                             "second Python worker in place of the Node.js one\n")
            langs[2] = "python"
        key = "examples/concurrent-%s" % uid()
        lock = key
        iterations = 5
        total = iterations * len(langs)
        procs = []
        try:
            for n, lang in enumerate(langs):
                # WORK_MS widens the read-to-write window of the Python and Node
                # workers (the shell one has none), so an excluded writer would show.
                procs.append(self.start(lang, KEY=key, ITERATIONS=iterations,
                                        OWNER="it-conc-%d-%s" % (n, lang), WORK_MS=50))
            results = [self.finish(p) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
        rows = []
        for lang, (rc, out, err) in zip(langs, results):
            self.assertEqual(rc, 0, "%s worker failed (exit %d)\nstdout: %s\nstderr: %s"
                             % (lang, rc, out[-2000:], err[-2000:]))
            mine = self.parse_lines(out)
            self.assertEqual(len(mine), iterations, out)
            rows += mine
        self.assertEqual(self.counter(key), total, "lost updates: the lock did not exclude")
        # Every increment read the value the previous one wrote: 0->1, 1->2, ... exactly
        # once each, and in token order (the token order is the order of the grants).
        rows.sort(key=lambda r: r["token"])
        self.assertEqual([(r["old"], r["new"]) for r in rows], [(i, i + 1) for i in range(total)])
        self.assertEqual(len({r["token"] for r in rows}), total)
        state = self.lock_state(lock)
        self.assertFalse(state["held"], state)
        self.assertEqual(state["waiters"], 0, state)
        self.assertEqual(state["last_token"], rows[-1]["token"], state)

    def test_defaults(self):
        """With only LEASEGATE_SERVER set: key counter, lock counter, 1 iteration."""
        base = self.counter("counter") or 0
        ran = 0
        for lang in ("shell", "python", "node"):
            if lang == "node" and NODE is None:
                continue
            out = self.run_ok(lang)
            rows = self.parse_lines(out)
            self.assertEqual(len(rows), 1, out)
            self.assertEqual(rows[0]["key"], "counter")
            self.assertTrue(rows[0]["owner"].startswith(lang + "-"), rows[0])
            ran += 1
        self.assertEqual(self.counter("counter"), base + ran)
        state = self.lock_state("counter")
        self.assertFalse(state["held"], state)
        self.assertGreaterEqual(state["last_token"], ran)

    def test_lock_of_a_whole_prefix(self):
        """README: with --guard PREFIX=...,lock=LOCK, set STORE_PREFIX and LOCK; any KEY
        under the prefix is written under that one lock."""
        ran = []
        for lang in ("shell", "python", "node"):
            if lang == "node" and NODE is None:
                continue
            key = "counter-%s" % uid()
            rows = self.parse_lines(self.run_ok(lang, STORE_PREFIX="/bucket/", LOCK=BUCKET_LOCK, KEY=key,
                                                ITERATIONS=2))
            self.assertEqual([(r["old"], r["new"]) for r in rows], [(0, 1), (1, 2)])
            self.assertEqual(self.counter(key, folder="bucket/"), 2)
            ran += [r["token"] for r in rows]
        state = self.lock_state(BUCKET_LOCK)
        self.assertFalse(state["held"], state)
        self.assertEqual(state["last_token"], ran[-1], state)
        # The default LOCK (= KEY) is not the prefix's lock: the write is refused.
        key = "counter-%s" % uid()
        rc, out, err = self.finish(self.start("python", STORE_PREFIX="/bucket/", KEY=key), timeout=60)
        self.assertEqual(rc, 1, "exit %d\nstdout: %s\nstderr: %s" % (rc, out, err))
        self.assertIn("write: unexpected HTTP 409", err)
        self.assertIsNone(self.counter(key, folder="bucket/"))

    def test_background_renewal_outlives_ttl(self):
        """python and node renew every TTL/3: work 4x longer than the TTL still writes."""
        for lang in ("python", "node"):
            with self.subTest(lang=lang):
                self.need(lang)
                key = "examples/renew-%s-%s" % (lang, uid())
                lock = key
                self.run_ok(lang, KEY=key, ITERATIONS=1, TTL_MS=1200, WORK_MS=4800)
                self.assertEqual(self.counter(key), 1)
                self.assertFalse(self.lock_state(lock)["held"])

    def test_unexpected_answers_exit_nonzero(self):
        for lang in ("shell", "python", "node"):
            with self.subTest(lang=lang):
                self.need(lang)
                script = os.path.basename(WORKERS[lang][1])
                key = "examples/busy-%s-%s" % (lang, uid())
                lock = key

                # The lock is held by someone else for longer than WAIT_MS: 409 lock_held.
                st, _, grant = self.server.acquire(lock, "someone-else", ttl_ms=30000)
                self.assertEqual(st, 200, grant)
                t0 = time.monotonic()
                rc, out, err = self.finish(self.start(lang, KEY=key, WAIT_MS=300), timeout=60)
                self.assertEqual(rc, 1, "exit %d\nstdout: %s\nstderr: %s" % (rc, out, err))
                self.assertIn(script, err)
                self.assertIn("acquire", err)
                self.assertIn("still held", err)
                self.assertLess(time.monotonic() - t0, 30)
                self.assertIsNone(self.counter(key))
                st, _, body = self.server.release(lock, grant["lease"])
                self.assertEqual(st, 200, body)

                # LOCK other than KEY, with the default binding (/store/KEY -> lock KEY):
                # the worker holds the wrong lock, its write is refused with 409
                # stale_token (as examples/README.md warns), and it gives LOCK back.
                other = "examples/other-%s-%s" % (lang, uid())
                rc, out, err = self.finish(self.start(lang, LOCK=other, KEY=key), timeout=60)
                self.assertEqual(rc, 1, "exit %d\nstdout: %s\nstderr: %s" % (rc, out, err))
                self.assertIn("write: unexpected HTTP 409", err)
                self.assertIn("stale_token", err)
                self.assertIsNone(self.counter(key))
                self.assertFalse(self.lock_state(other)["held"], "lock left held after a failure")

                # A write the storage answers with 404 (wrong guard prefix): leasegate
                # says no such endpoint; the worker names the step and the status, and
                # gives the lock back instead of leaving it to expire.
                rc, out, err = self.finish(self.start(lang, KEY=key, STORE_PREFIX="/nope/"), timeout=60)
                self.assertEqual(rc, 1, "exit %d\nstdout: %s\nstderr: %s" % (rc, out, err))
                self.assertIn("write: unexpected HTTP 404", err)
                self.assertFalse(self.lock_state(lock)["held"], "lock left held after a failure")

                # Nothing listens: a connection failure is reported, exit 1. (Python and
                # Node retry it for WAIT_MS, at least 5 s: kept short here.)
                with upstream.ClosedPort() as cp:
                    rc, out, err = self.finish(self.start(
                        lang, LEASEGATE_SERVER="http://127.0.0.1:%d" % cp.port, KEY=key, WAIT_MS=300),
                        timeout=60)
                self.assertEqual(rc, 1, "exit %d\nstdout: %s\nstderr: %s" % (rc, out, err))
                self.assertIn("request failed", err)

                # A bad configuration value: exit 2 with the variable's name.
                rc, out, err = self.finish(self.start(lang, ITERATIONS="many"), timeout=60)
                self.assertEqual(rc, 2, "exit %d\nstdout: %s\nstderr: %s" % (rc, out, err))
                self.assertIn("ITERATIONS", err)


class ReadmeNginxTest(unittest.TestCase):
    """The nginx configuration that examples/README.md tells users to run, run as written
    (paths and port moved to a temporary directory): large PUTs through the guard reach it."""

    def setUp(self):
        if not upstream.nginx_available():
            self.skipTest("nginx not found at %s" % upstream.NGINX_BIN)
        self.dir = tempfile.mkdtemp(prefix="leasegate-readme-nginx-")
        self.nginx = None
        self.server = None

    def tearDown(self):
        if self.server:
            self.server.cleanup()
        if self.nginx:
            harness.stop_process(self.nginx)
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_readme_config_accepts_a_large_put_through_the_guard(self):
        with open(os.path.join(EXAMPLES, "README.md")) as f:
            readme = f.read()
        conf = re.search(r"```nginx\n(.*?)```", readme, re.S).group(1)
        port = upstream.free_port()
        conf = conf.replace("/tmp/", self.dir + "/").replace("127.0.0.1:9000", "127.0.0.1:%d" % port)
        os.makedirs(os.path.join(self.dir, "lg-store"))
        conf_path = os.path.join(self.dir, "lg-nginx.conf")
        with open(conf_path, "w") as f:
            f.write(conf)
        self.nginx = subprocess.Popen([upstream.NGINX_BIN, "-p", self.dir + "/", "-c", conf_path, "-e",
                                       os.path.join(self.dir, "lg-nginx-error.log")],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                self.assertLess(time.monotonic(), deadline, "nginx from the README did not start")
                time.sleep(0.05)
        self.server = harness.Server(extra_args=["--guard", "/store/=http://127.0.0.1:%d/" % port])
        st, _, g = self.server.acquire("big.bin", "readme", ttl_ms=60000)  # /store/big.bin's lock
        self.assertEqual(st, 200, g)
        body = os.urandom(5 * 1024 * 1024)  # nginx's default client_max_body_size is 1 MiB
        st, _, answer = self.server.request("PUT", "/store/big.bin", raw=body, headers={
            "Fencing-Lease": g["lease"], "Content-Type": "application/octet-stream"})
        self.assertIn(st, (201, 204), answer)
        with open(os.path.join(self.dir, "lg-store", "big.bin"), "rb") as f:
            self.assertEqual(f.read(), body)


if __name__ == "__main__":
    harness.run_tests()
