"""An admin's force-release (DELETE /v1/locks/{name}): the lock goes to the next waiter,
the old lease is refused everywhere (renew, release, the guard) with reason `revoked`,
and its token is refused at /v1/fence even where no newer token was seen yet, also after
a kill -9 and restart. Only an admin key may do it. The same for a semaphore
(DELETE /v1/semaphores/{name}): one permit by its token, or all of them, each with an
audit row (issue 39: it answered 405)."""

import threading
import time
import unittest

from test_auth import KeyedTestCase, new_key


class ForceReleaseTest(KeyedTestCase):
    def setUp(self):
        self.admin_key, admin = new_key("root", "admin")
        self.client_key, client = new_key("app", "client", "jobs/")
        self.start_keyed([admin, client])

    def test_force_release_hands_the_lock_on_and_the_old_token_is_stale_everywhere(self):
        app, admin = self.as_(self.client_key), self.as_(self.admin_key)
        st, _, old = app.acquire("jobs/nightly", ttl_ms=600000)
        self.assertEqual(st, 200, old)
        self.assertEqual(app.acquire("jobs/nightly", lease=old["lease"])[0], 200)  # reentered: count 2
        if self.nginx:
            st, _, body = app.request("PUT", "/store/jobs/nightly", raw=b"old holder",
                                      headers={"Fencing-Lease": old["lease"]})
            self.assertIn(st, (200, 201, 204), body)
        box = {}
        waiter = self.as_(self.client_key, timeout=60)
        t = threading.Thread(target=lambda: box.update(r=waiter.acquire("jobs/nightly", owner="next",
                                                                        wait_ms=30000, ttl_ms=60000)))
        t.start()
        for _ in range(200):
            if admin.get_lock("jobs/nightly")[2].get("waiters") == 1:
                break
            time.sleep(0.05)
        # Only an admin may.
        st, _, body = app.request("DELETE", "/v1/locks/jobs/nightly")
        self.assertEqual((st, body["error"]), (403, "forbidden"), body)
        st, _, body = admin.request("DELETE", "/v1/locks/jobs/nightly")
        self.assertEqual(st, 200, body)
        self.assertEqual(body["revoked"], {"owner": "tester", "token": old["token"]})
        self.assertEqual((body["held"], body["holder"]["owner"]), (True, "next"), body)
        t.join(30)
        st, _, nxt = box["r"]
        self.assertEqual((st, nxt["owner"]), (200, "next"), nxt)
        self.assertGreater(nxt["token"], old["token"])
        for st, _, body in (app.renew("jobs/nightly", old["lease"]), app.release("jobs/nightly", old["lease"])):
            self.assertEqual((st, body.get("reason")), (409, "revoked"), body)
        if self.nginx:
            st, _, body = app.request("PUT", "/store/jobs/nightly", raw=b"late write",
                                      headers={"Fencing-Lease": old["lease"]})
            self.assertEqual(st, 409, body)
            self.assertEqual(self.nginx.read_file("jobs/nightly"), b"old holder")
        # The fence refuses the revoked token on a resource that never saw a newer one.
        st, _, body = admin.fence("jobs/output", old["token"])
        self.assertEqual((st, body.get("revoked")), (409, True), body)
        self.assertEqual(admin.fence("jobs/output", nxt["token"])[0], 200)
        # Nothing held: answered with revoked null, nothing changes.
        self.assertEqual(waiter.release("jobs/nightly", nxt["lease"])[0], 200)
        st, _, body = admin.request("DELETE", "/v1/locks/jobs/nightly")
        self.assertEqual((st, body["revoked"], body["held"]), (200, None, False), body)
        self.assertEqual(self.srv.metric("leasegate_force_releases_total"), 1)
        # After kill -9 and a restart the token is still revoked, the reason still known.
        self.srv.kill9()
        self.srv.start()
        admin, app = self.as_(self.admin_key), self.as_(self.client_key)
        st, _, body = admin.fence("jobs/other-output", old["token"])
        self.assertEqual((st, body.get("revoked")), (409, True), body)
        st, _, body = app.renew("jobs/nightly", old["lease"])
        self.assertEqual((st, body.get("reason")), (409, "revoked"), body)

    def test_bad_paths_and_methods(self):
        admin = self.as_(self.admin_key)
        st, hdrs, body = admin.request("PUT", "/v1/locks/jobs/x")
        self.assertEqual(st, 405, body)
        self.assertIn("DELETE", hdrs.get("allow", ""))
        st, _, body = admin.request("DELETE", "/v1/locks/bad%20name")
        self.assertEqual(st, 400, body)
        st, _, body = self.as_(None).request("DELETE", "/v1/locks/jobs/x")
        self.assertEqual(st, 401, body)


class SemaphoreForceReleaseTest(KeyedTestCase):
    def setUp(self):
        self.admin_key, admin = new_key("root", "admin")
        self.client_key, client = new_key("app", "client", "jobs/")
        self.start_keyed([admin, client])

    def permit(self, c, owner, **fields):
        st, _, g = c.request("POST", "/v1/semaphores/jobs/pool/acquire",
                             body=dict({"owner": owner, "limit": 2, "ttl_ms": 600000}, **fields),
                             timeout=60)
        return st, g

    def test_one_permit_by_token_then_all_with_audit_rows(self):
        app, admin = self.as_(self.client_key), self.as_(self.admin_key)
        (st_a, a), (st_b, b) = self.permit(app, "a"), self.permit(app, "b")
        self.assertEqual((st_a, st_b), (200, 200), (a, b))
        box = {}
        waiter = self.as_(self.client_key, timeout=60)
        t = threading.Thread(target=lambda: box.update(r=self.permit(waiter, "next", wait_ms=30000)))
        t.start()
        self.addCleanup(t.join, 30)
        for _ in range(200):
            if admin.request("GET", "/v1/semaphores/jobs/pool")[2].get("waiters") == 1:
                break
            time.sleep(0.05)
        # Only an admin may; the token must be a number.
        st, _, body = app.request("DELETE", "/v1/semaphores/jobs/pool?token=%d" % a["token"])
        self.assertEqual((st, body["error"]), (403, "forbidden"), body)
        st, _, body = admin.request("DELETE", "/v1/semaphores/jobs/pool?token=x")
        self.assertEqual((st, body.get("field")), (400, "token"), body)
        # One permit, by its token: the waiter gets it, the other permit stays.
        st, _, body = admin.request("DELETE", "/v1/semaphores/jobs/pool?token=%d" % a["token"])
        self.assertEqual(st, 200, body)
        self.assertEqual(body["revoked"], {"owner": "a", "token": a["token"]})
        self.assertEqual(body["revoked_all"], [{"owner": "a", "token": a["token"]}])
        t.join(30)
        st, nxt = box["r"]
        self.assertEqual((st, nxt["owner"]), (200, "next"), nxt)
        st, _, view = admin.request("GET", "/v1/semaphores/jobs/pool")
        self.assertEqual(sorted(h["owner"] for h in view["holders"]), ["b", "next"], view)
        st, _, body = app.request("POST", "/v1/semaphores/jobs/pool/renew", body={"lease": a["lease"]})
        self.assertEqual((st, body.get("reason")), (409, "revoked"), body)
        self.assertEqual(app.request("POST", "/v1/semaphores/jobs/pool/renew", body={"lease": b["lease"]})[0], 200)
        st, _, body = admin.fence("jobs/output", a["token"])
        self.assertEqual((st, body.get("revoked")), (409, True), body)
        # A token that holds no permit (any more): 409, nothing changes.
        st, _, body = admin.request("DELETE", "/v1/semaphores/jobs/pool?token=%d" % a["token"])
        self.assertEqual((st, body["error"], body["reason"]), (409, "not_holder", "unknown"), body)
        self.assertIn("token %d" % a["token"], body["message"])
        # Without a token: every permit.
        st, _, body = admin.request("DELETE", "/v1/semaphores/jobs/pool")
        self.assertEqual(st, 200, body)
        self.assertEqual(sorted((r["owner"], r["token"]) for r in body["revoked_all"]),
                         sorted([("b", b["token"]), ("next", nxt["token"])]))
        self.assertEqual((body["holders_total"], body["available"]), (0, 2), body)
        st, _, body = admin.request("DELETE", "/v1/semaphores/jobs/pool")
        self.assertEqual((st, body["revoked"], body["revoked_all"]), (200, None, []), body)
        self.assertEqual(self.srv.metric("leasegate_force_releases_total"), 3)
        # Each permit revoked has its audit row, by the admin's key, as a semaphore's.
        st, _, audit = admin.request("GET", "/v1/audit?lock=jobs/pool")
        rows = [(r["kind"], r["owner"], r["token"], r["key"], r["type"]) for r in audit["rows"]
                if r["kind"] == "revoked"]
        self.assertEqual(sorted(rows), sorted([("revoked", "a", a["token"], "root", "semaphore"),
                                               ("revoked", "b", b["token"], "root", "semaphore"),
                                               ("revoked", "next", nxt["token"], "root", "semaphore")]))

    def test_methods(self):
        admin = self.as_(self.admin_key)
        st, hdrs, body = admin.request("PUT", "/v1/semaphores/jobs/x")
        self.assertEqual(st, 405, body)
        self.assertIn("DELETE", hdrs.get("allow", ""))
        st, _, body = admin.request("DELETE", "/v1/semaphores/bad%20name")
        self.assertEqual(st, 400, body)


if __name__ == "__main__":
    unittest.main()
