"""Every PromQL query the docs give answers with data on a real Prometheus (issue 39).

docs/operations.md gave the share of leases that expired as
`rate(x{end="expired"}[5m]) / sum(rate(x[5m]))`: the two sides have different labels, so
Prometheus matches nothing and the query returns an empty vector, whatever the server did.
This test takes every line of every ```promql block of the README and the docs, starts
Debian's `prometheus` (scripts/deps.sh --test installs it) on a free loopback port with a
temporary database, scraping one leasegate every second, makes the server do what the
queries are about (grants with and without a wait, leases released and expired), and
evaluates each query through Prometheus's HTTP API: each must succeed and return data. It
also checks that no PromQL is left outside such blocks, where it would go untested. Takes
about ten seconds; Prometheus is stopped by its PID."""

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import harness
from test_auth import Keyed, new_key

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BLOCK = re.compile(r"^```promql\n(.*?)^```", re.S | re.M)
# PromQL written inline: a function of PromQL applied to a series of ours.
INLINE = re.compile(r"`[^`\n]*\b(?:rate|irate|increase|histogram_quantile|sum|avg|max|min)\s*\([^`\n]*leasegate_")


def doc_pages():
    pages = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    pages += sorted(glob.glob(os.path.join(ROOT, "clients", "*", "README.md")))
    return pages


def doc_queries():
    """[(page, query)] for every line of every promql block."""
    found = []
    for page in doc_pages():
        with open(page, encoding="utf-8") as f:
            text = f.read()
        for block in BLOCK.findall(text):
            for line in block.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    found.append((os.path.relpath(page, ROOT), line.strip()))
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Debian's prometheus on 127.0.0.1, scraping one target every second."""

    def __init__(self, target_port):
        self.dir = tempfile.mkdtemp(prefix="leasegate-prom-")
        self.port = free_port()
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: leasegate\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % target_port)
        self.log = open(os.path.join(self.dir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen([shutil.which("prometheus"), "--config.file=" + config,
                                      "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                                      "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, cwd=self.dir)

    def query(self, q):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.port, urllib.parse.urlencode({"query": q}))
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def wait(self, pred, what, timeout_s=40):
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                last = pred()
                if last:
                    return last
            except OSError as e:
                last = e
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        with open(os.path.join(self.dir, "prometheus.log"), "rb") as f:
            log = f.read().decode(errors="replace")[-2000:]
        raise AssertionError("prometheus: timed out waiting for %s (last %r)\n%s" % (what, last, log))

    def stop(self):
        harness.stop_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class PromqlDocsTest(unittest.TestCase):
    def test_no_promql_outside_promql_blocks(self):
        for page in doc_pages():
            with open(page, encoding="utf-8") as f:
                text = BLOCK.sub("", f.read())
            self.assertEqual(INLINE.findall(text), [], "PromQL outside a promql block in %s: it goes untested"
                             % os.path.relpath(page, ROOT))

    def test_every_query_of_the_docs_returns_data(self):
        queries = doc_queries()
        self.assertGreaterEqual(len(queries), 2, "the promql blocks of docs/operations.md are gone?")
        if not shutil.which("prometheus"):
            self.fail("prometheus is missing: scripts/deps.sh --test installs it (Debian package prometheus)")
        # With keys, as a server is run (the key file's own series is queried too).
        key, line = new_key("ops", "admin")
        keys_dir = tempfile.mkdtemp(prefix="leasegate-promql-keys-")
        self.addCleanup(shutil.rmtree, keys_dir, True)
        keys = os.path.join(keys_dir, "keys")
        with open(keys, "w") as f:
            f.write(line + "\n")
        os.chmod(keys, 0o600)
        srv = harness.Server(extra_args=["--auth-file", keys])
        self.addCleanup(srv.cleanup)
        prom = Prometheus(srv.port)
        self.addCleanup(prom.stop)
        prom.wait(lambda: [r for r in prom.query("up")["data"]["result"] if r["value"][1] == "1"], "a first scrape")
        # What the queries are about, after that first scrape, so that every rate has two
        # samples to tell apart: grants (one after a wait), releases and an expiry.
        c = Keyed(srv.port, key)
        self.addCleanup(c.close)
        for i in range(5):
            st, _, g = c.acquire("prom/%d" % i, ttl_ms=60000)
            self.assertEqual(st, 200, g)
            self.assertEqual(c.release("prom/%d" % i, g["lease"])[0], 200)
        st, _, held = c.acquire("prom/wait", ttl_ms=60000)
        waiter = Keyed(srv.port, key, timeout=30)
        self.addCleanup(waiter.close)
        box = {}
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("prom/wait", wait_ms=10000)))
        t.start()
        srv.wait_until(lambda: srv.waiters("prom/wait", client=c) == 1, what="the waiter")
        time.sleep(0.2)
        self.assertEqual(c.release("prom/wait", held["lease"])[0], 200)
        t.join(20)
        self.assertEqual(box["r"][0], 200, box)
        st, _, short = c.acquire("prom/short", ttl_ms=200)
        self.assertEqual(st, 200, short)
        srv.wait_until(lambda: srv.metric('leasegate_hold_seconds_count{end="expired"}') >= 1, timeout=10,
                       what="the expiry")
        # Seen by Prometheus too (a scrape after the activity).
        prom.wait(lambda: prom.query('leasegate_hold_seconds_count{end="expired"}')["data"]["result"],
                  "a scrape with the expiry")
        for page, q in queries:
            with self.subTest(page=page, query=q):
                answer = prom.wait(lambda: (lambda a: a if a["data"]["result"] else None)(prom.query(q)),
                                   "data from %s" % q, timeout_s=15)
                self.assertEqual(answer["status"], "success", answer)


if __name__ == "__main__":
    unittest.main()
