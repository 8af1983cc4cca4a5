"""A lease is a secret: only the acquire that was granted it (and that request's own
replay) may show it. A full run — grants, waiters, renewals, releases, expiries, every
kind of refusal, listings, metrics, the guard (accepted, stale and refused writes), fences,
a kill -9 and restart — then every answer and every line the server wrote (stdout,
stderr, the access log) is searched for every lease that was ever issued."""

import os
import threading
import time
import unittest

from harness import Server
import upstream


class LeaseNeverShownTest(unittest.TestCase):
    def test_no_lease_in_any_answer_or_log(self):
        ng = upstream.Nginx() if upstream.nginx_available() else None
        if ng:
            self.addCleanup(ng.cleanup)
        guard = ["--guard", "/store/=" + ng.url] if ng else []
        srv = Server(extra_args=guard + ["--access-log", "access.log"])
        self.addCleanup(srv.cleanup)
        c = srv.client
        leases, seen = [], []

        def ask(method, path, body=None, raw=None, headers=None, allowed_lease=None):
            st, hdrs, got = c.request(method, path, body=body, raw=raw, headers=headers)
            text = c.last_text + " " + " ".join("%s: %s" % kv for kv in hdrs.items())
            if allowed_lease:
                text = text.replace(allowed_lease, "")
            seen.append((method, path, st, text))
            return st, got

        def acquire(name, **fields):
            body = {"owner": "o"}
            body.update(fields)
            st, hdrs, got = c.request("POST", "/v1/locks/%s/acquire" % name, body=body)
            if st == 200:
                leases.append(got["lease"])
                text = c.last_text.replace(got["lease"], "")
                seen.append(("POST", name, st, text + " ".join("%s: %s" % kv for kv in hdrs.items())))
            else:
                seen.append(("POST", name, st, c.last_text))
            return st, got

        st, a = acquire("s/a", ttl_ms=60000, request_id="r1", metadata={"k": "v"})
        self.assertEqual(st, 200, a)
        st, _, replay = c.request("POST", "/v1/locks/s/a/acquire", body={"owner": "o", "ttl_ms": 60000,
                                                                        "request_id": "r1", "metadata": {"k": "v"}})
        self.assertEqual((st, replay["lease"]), (200, a["lease"]))
        seen.append(("replay", "s/a", st, c.last_text.replace(a["lease"], "")))
        acquire("s/a", owner="other")                               # 409 lock_held
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"], "ttl_ms": 60000})
        ask("POST", "/v1/locks/s/b/renew", {"lease": a["lease"]})   # not_holder: wrong lock
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"], "ttl_ms": 1})  # bad request
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"] + "x"})         # not a lease
        ask("GET", "/v1/locks/s/a")
        ask("GET", "/v1/locks?prefix=s/")
        # A waiter, granted at the release.
        box = {}
        w = srv.new_client(timeout=30)
        self.addCleanup(w.close)
        t = threading.Thread(target=lambda: box.update(r=w.acquire("s/a", owner="w", wait_ms=20000, ttl_ms=60000)))
        t.start()
        for _ in range(100):
            if c.get_lock("s/a")[2].get("waiters") == 1:
                break
            time.sleep(0.05)
        ask("POST", "/v1/locks/s/a/release", {"lease": a["lease"]})
        t.join(30)
        st, _, wg = box["r"]
        self.assertEqual(st, 200, wg)
        leases.append(wg["lease"])
        ask("POST", "/v1/locks/s/a/release", {"lease": a["lease"]})  # not_holder: released
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"]})
        # An expiry, and the expired lease used again.
        st, e = acquire("s/e", ttl_ms=100)
        time.sleep(0.3)
        ask("POST", "/v1/locks/s/e/renew", {"lease": e["lease"]})    # not_holder: expired
        ask("GET", "/v1/locks/s/e")
        st, f = acquire("s/f", ttl_ms=60000)
        ask("POST", "/v1/fence/s/f", {"token": f["token"]})
        ask("POST", "/v1/fence/s/f", {"token": f["token"] - 1})      # stale
        if ng:
            ask("PUT", "/store/s/f", raw=b"x", headers={"Fencing-Lease": f["lease"]})
            ask("PUT", "/store/s/f", raw=b"x", headers={"Fencing-Lease": a["lease"]})   # ended lease
            ask("PUT", "/store/s/g", raw=b"x", headers={"Fencing-Lease": f["lease"]})   # not its lock
            ask("PUT", "/store/s/f", raw=b"x", headers={"Fencing-Lease": f["lease"] + "0"})
            ask("GET", "/store/s/f", headers={"Fencing-Lease": f["lease"]})
        ask("GET", "/metrics")
        ask("GET", "/healthz")
        srv.kill9()
        srv.start()
        c = srv.client
        ask("GET", "/v1/locks?prefix=s/")
        ask("POST", "/v1/locks/s/f/renew", {"lease": f["lease"]})
        ask("POST", "/v1/locks/s/a/renew", {"lease": a["lease"]})   # not_holder reason after restart
        ask("POST", "/v1/locks/s/f/release", {"lease": f["lease"]})
        srv.stop_clean()
        self.assertGreaterEqual(len(leases), 4)
        for method, path, st, text in seen:
            for lease in leases:
                self.assertNotIn(lease, text, "%s %s (%d) shows a lease" % (method, path, st))
        logs = "\n".join(srv.stdout_lines) + srv.stderr_text()
        with open(os.path.join(srv.dir, "access.log")) as f:
            logs += f.read()
        self.assertIn("/v1/locks/s/a/renew", logs)  # the access log was written
        for lease in leases:
            self.assertNotIn(lease, logs, "the server's output shows a lease")
        if ng:
            upstream_seen = ng.access_entries()
            for lease in leases:
                self.assertNotIn(lease, repr(upstream_seen), "a lease reached the upstream")


if __name__ == "__main__":
    unittest.main()
