"""The guard against a real WebDAV backend: no write reaches a resource whose lease it
does not carry (issue 26), attacked from outside.

nginx (`dav_methods PUT DELETE MKCOL COPY MOVE`, create_full_put_path on) is the backend
behind five routes of one leasegate, each route over a subtree of its own (routes whose
upstream paths overlap under different bindings do not start: one file would be
protected by two locks):

  /plain/       -> nginx /plain/   the default method list (no methods=)
  /store/vault/ -> nginx /vault/   lock=vault-lock; listed before /store/, inside it
  /store/       -> nginx /store/   methods=DAV below: each path bound to the lock it names
  /shared/      -> nginx /shared/  the same methods, lock=shared-tree: one lock for the subtree
  /app/         -> ApplyingUpstream, the same methods: shows every header that crossed

Covers: 405 with Allow for what a route does not list; COPY and MOVE from a scratch lock
onto a resource held by someone else, with every form of Destination (relative,
absolute, the upstream's path or authority, outside the prefix, with a query, not
canonical, a collection) and every wrong Fencing-Destination-Lease (none, the scratch
lease, a stale lease of the victim); the classic fencing story told through MOVE;
legitimate COPY and MOVE (the Destination rewritten to the upstream's URL, the
Fencing-Destination-* headers the guard's own, both marks raised); a COPY or MOVE onto
its own resource (also spelt with other percent-encodings); a Destination (or a "//"
target) under a nested route, which that route's lock protects, and the nested route
sets that do not start (the inner route listed last, or over the outer one's upstream
objects); API keys scoped to one tenant; lock=NAME routes (one lease, the Destination kept inside the route,
collection operations allowed); collection writes, Depth, Slug and a tagged If (in any
If line) refused where each path has its own lock; method and target override headers
refused on writes and stripped from reads, and in a query (?_method=DELETE) or a form body
(_method=DELETE, urlencoded or multipart, however the body is cut into pieces) refused on
a route that forwards POST but not DELETE (issue 39: they passed); header names with '_' that a CGI or WSGI
backend reads as a header the guard checks refused on every request; and the refusals
counted in /metrics.

Needs nginx with the DAV module at /usr/sbin/nginx (or $LEASEGATE_NGINX); the tests are
skipped, saying so, without it. Only 127.0.0.1.
"""

import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

import harness
import upstream
from applying_upstream import ApplyingUpstream

DAV = "GET+HEAD+OPTIONS+PUT+DELETE+COPY+MOVE+MKCOL+POST"
DAV_ALLOW = DAV.replace("+", ", ")
DEFAULT_ALLOW = "GET, HEAD, OPTIONS, PUT, POST, PATCH, DELETE"
SHARED_LOCK = "shared-tree"
VAULT_LOCK = "vault-lock"
OVERRIDES = ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X-Original-URL", "X-Rewrite-URL")
REASONS = ("stale", "lease_missing", "method", "bad_request", "calls", "lock_calls", "key_calls", "peer_calls",
           "queue_timeout", "settling")


def uid():
    return uuid.uuid4().hex[:10]


def route(prefix, url, lock=None, methods=DAV):
    """One --guard value."""
    spec = prefix + "=" + url
    if lock:
        spec += ",lock=" + lock
    if methods:
        spec += ",methods=" + methods
    return spec


def need_nginx():
    if not upstream.nginx_available():
        raise unittest.SkipTest("nginx with the DAV module is missing at %s (scripts/deps.sh --test installs it)"
                                % upstream.NGINX_BIN)


def send_lines(port, method, path, lines, body=b""):
    """One request on a fresh connection whose header lines are exactly `lines` (a list of
    (name, value), names may repeat) plus Host and Content-Length: (status, headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in lines:
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


class Base(unittest.TestCase):
    """One nginx, one ApplyingUpstream and one leasegate for the class."""

    server_args = []

    @classmethod
    def setUpClass(cls):
        need_nginx()
        cls.ng = upstream.Nginx()
        cls.app = ApplyingUpstream()
        for folder in ("plain", "store", "shared", "vault"):
            os.makedirs(cls.ng.file_path(folder))
        try:
            cls.srv = harness.Server(extra_args=[
                "--guard", route("/plain/", cls.ng.url + "plain/", methods=None),
                "--guard", route("/store/vault/", cls.ng.url + "vault/", lock=VAULT_LOCK),
                "--guard", route("/store/", cls.ng.url + "store/"),
                "--guard", route("/shared/", cls.ng.url + "shared/", lock=SHARED_LOCK),
                "--guard", route("/app/", cls.app.url)] + cls.server_args)
        except Exception:
            cls.app.close()
            cls.ng.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.cleanup()
        finally:
            cls.app.close()
            cls.ng.cleanup()

    def tearDown(self):
        leaked = [e for e in self.ng.access_entries() if e["lease"] != "-"]
        self.assertEqual(leaked, [], "nginx received a Fencing-Lease header")

    # Requests -------------------------------------------------------------------
    def send(self, method, path, data=None, lease=None, dest=None, dest_lease=None, headers=None, client=None):
        h = {}
        if lease is not None:
            h["Fencing-Lease"] = lease
        if dest is not None:
            h["Destination"] = dest
        if dest_lease is not None:
            h["Fencing-Destination-Lease"] = dest_lease
        h.update(headers or {})
        if data is not None:
            h.setdefault("Content-Type", "application/octet-stream")
        return (client or self.srv.client).request(method, path, raw=data, headers=h)

    def grant(self, name, owner="t", client=None, **kw):
        kw.setdefault("ttl_ms", 60000)
        st, _, g = (client or self.srv.client).acquire(name, owner, **kw)
        self.assertEqual(st, 200, g)
        return g

    def write(self, path, data, lease, client=None):
        st, hdrs, body = self.send("PUT", path, data, lease, client=client)
        self.assertIn(st, (201, 204), body)
        self.assertEqual(hdrs.get("x-upstream"), "nginx", hdrs)

    def gateway(self, path):
        """An absolute URI of path on leasegate, as a client names it."""
        return "http://127.0.0.1:%d%s" % (self.srv.port, path)

    # Assertions -----------------------------------------------------------------
    def refused(self, resp, status, error, field=None):
        st, hdrs, body = resp
        self.assertEqual(st, status, body)
        self.assertIsInstance(body, dict, body)
        self.assertEqual(body.get("error"), error, body)
        self.assertNotEqual(hdrs.get("x-upstream"), "nginx", "the refusal must come from leasegate")
        if field is not None:
            self.assertEqual(body.get("field"), field, body)
        return body

    def bad(self, resp, field):
        return self.refused(resp, 400, "bad_request", field)

    def complete_log(self):
        """nginx's access log, complete up to now: a sentinel GET through the guard is
        logged after everything sent before it."""
        sentinel = "/__sentinel__/" + uid()
        st, _, _ = self.send("GET", "/store" + sentinel)
        self.assertEqual(st, 404)
        return self.ng.wait_logged(lambda e: e["request_uri"] == "/store" + sentinel, what="sentinel " + sentinel)

    def upstream_saw(self, marker):
        """Every request nginx received whose URI or Destination contains marker."""
        return [e for e in self.complete_log() if marker in e["request_uri"] or marker in e["destination"]]


# ----------------------------------------------------------------------------------
class MethodTests(Base):
    def test_default_route_forwards_only_its_list(self):
        """The default route lists GET, HEAD, OPTIONS, PUT, POST, PATCH, DELETE: WebDAV's
        COPY, MOVE, PROPFIND, LOCK... get 405 with Allow, with or without leases."""
        u = uid()
        name = "m%s/doc.txt" % u
        g = self.grant(name)
        self.write("/plain/" + name, b"doc", g["lease"])
        other = self.grant("m%s/other.txt" % u)
        for method in ("COPY", "MOVE", "PROPFIND", "PROPPATCH", "LOCK", "UNLOCK", "MKCOL", "SEARCH", "put", "Get"):
            for lease, dest_lease in ((None, None), (g["lease"], other["lease"])):
                with self.subTest(method=method, lease=bool(lease)):
                    st, hdrs, body = self.send(method, "/plain/" + name, lease=lease,
                                               dest="/plain/m%s/other.txt" % u, dest_lease=dest_lease,
                                               headers={"Depth": "0"})
                    self.refused((st, hdrs, body), 405, "method_not_allowed")
                    self.assertEqual(hdrs.get("allow"), DEFAULT_ALLOW, hdrs)
                    self.assertEqual(body.get("allow"), DEFAULT_ALLOW, body)
        # A route with methods= lists exactly those.
        st, hdrs, body = self.send("PROPFIND", "/store/" + name, lease=g["lease"], headers={"Depth": "0"})
        self.refused((st, hdrs, body), 405, "method_not_allowed")
        self.assertEqual((hdrs.get("allow"), body.get("allow")), (DAV_ALLOW, DAV_ALLOW))
        st, hdrs, body = self.send("PATCH", "/store/" + name, b"x", g["lease"])
        self.refused((st, hdrs, body), 405, "method_not_allowed")
        self.assertEqual(self.ng.read_file("plain/" + name), b"doc")
        self.assertIsNone(self.ng.read_file("plain/m%s/other.txt" % u))
        self.assertEqual([e["method"] for e in self.upstream_saw("m" + u)], ["PUT"])


# ----------------------------------------------------------------------------------
class DestinationTests(Base):
    """Defect 1: a COPY or MOVE writes its Destination, which is bound to its own lock."""

    def victim_and_scratch(self, u):
        """The victim: held by its owner, who wrote it, after a first holder whose lease is
        now stale. The scratch lock: free, taken by the attacker, who wrote it."""
        victim = "d%s/victim.txt" % u
        old = self.grant(victim, "first-owner")
        st, _, r = self.srv.release(victim, old["lease"])
        self.assertEqual(st, 200, r)
        owner = self.grant(victim, "owner")
        self.write("/store/" + victim, b"the owner's data", owner["lease"])
        scratch = "d%s/scratch.txt" % u
        attacker = self.grant(scratch, "attacker")
        self.write("/store/" + scratch, b"the attacker's data", attacker["lease"])
        return victim, scratch, old, owner, attacker

    def test_scratch_copy_or_move_onto_a_held_victim(self):
        u = uid()
        victim, scratch, old, owner, attacker = self.victim_and_scratch(u)
        d = "d" + u
        held = [  # Destinations that name the victim as this route binds it: its lease is asked for
            "/store/" + victim,
            self.gateway("/store/" + victim),
            "HTTP://127.0.0.1:%d/store/%s" % (self.srv.port, victim),
            "https://127.0.0.1:%d/store/%s" % (self.srv.port, victim),
        ]
        refused = [  # Destinations the guard does not take at all
            "/" + victim,
            "http://127.0.0.1:%d/%s" % (self.ng.port, victim),  # the upstream's authority
            "http://127.0.0.1:%d/store/%s" % (self.ng.port, victim),  # ... with the upstream's own path
            "//127.0.0.1:%d/%s" % (self.ng.port, victim),  # a network-path reference
            "http://127.0.0.1:%d@127.0.0.1:%d/store/%s" % (self.srv.port, self.ng.port, victim),
            "http://127.0.0.1/store/" + victim,  # not the request's Host
            "http:/store/" + victim,
            "store/" + victim,
            "/plain/" + victim,  # another route (another subtree of the same nginx)
            "/shared/" + victim,
            "/app/" + victim,
            "/store/%s?x=1" % victim,
            "/store/%s?" % victim,
            "/store/%s#frag" % victim,
            "/store/%s/a/../victim.txt" % d,
            "/store/%s/a/%%2e%%2e/victim.txt" % d,
            "/store/%s/a/%%2E%%2E/victim.txt" % d,
            "/store/%s/./victim.txt" % d,
            "/store/%s//victim.txt" % d,
            "/store//" + victim,
            "/store/%s%%2fvictim.txt" % d,
            "/store/%s/victim%%2etxt" % d,
            "/store/%s\\victim.txt" % d,
            "/store/%s/victim.txt;x" % d,
            "/store/%s/" % d,  # a collection holding the victim
            "/store/" + victim + "/",
            "/store/",
            "/store",
            "/st%6fre/" + victim,
            "",
            "*",
        ]
        leases = (("none", None), ("scratch", attacker["lease"]), ("stale", old["lease"]))
        for method in ("COPY", "MOVE"):
            for dest in held + refused:
                for which, dest_lease in leases:
                    with self.subTest(method=method, dest=dest, dest_lease=which):
                        resp = self.send(method, "/store/" + scratch, lease=attacker["lease"], dest=dest,
                                         dest_lease=dest_lease)
                        if dest in refused:
                            self.bad(resp, "Destination")
                        elif dest_lease is None:
                            body = self.refused(resp, 428, "token_required", "Fencing-Destination-Lease")
                            self.assertEqual(body.get("lock"), victim, body)
                        else:
                            body = self.refused(resp, 409, "stale_token")
                            # The stale lease's own token, named (issue 39), not the holder's.
                            self.assertEqual((body.get("lock"), body.get("token"), body.get("reason")),
                                             (victim, old["token"] if which == "stale" else None,
                                              "released" if which == "stale" else "unknown"), body)
                            self.assertEqual(body.get("holder_token"), owner["token"], body)
        self.assertEqual(self.ng.read_file("store/" + victim), b"the owner's data")
        self.assertEqual(self.ng.read_file("store/" + scratch), b"the attacker's data")
        for stray in (victim, "store/store/" + victim, "plain/" + victim, "shared/" + victim, "vault/" + victim):
            self.assertFalse(os.path.exists(self.ng.file_path(stray)), stray)
        seen = self.upstream_saw(d)
        self.assertEqual([e for e in seen if e["method"] in ("COPY", "MOVE")], [],
                         "nginx received a COPY or MOVE")
        self.assertEqual(sorted(e["method"] for e in seen), ["PUT", "PUT"])

    def test_move_of_stale_data_onto_a_newer_write(self):
        """The classic story: A's lease ends, B (a larger token) writes doc, A's direct
        stale PUT gets 409; A's MOVE of stale data onto doc through a scratch lock gets
        409 too, and doc keeps B's data."""
        u = uid()
        doc = "f%s/doc" % u
        a = self.grant(doc, "A")
        self.write("/store/" + doc, b"A1", a["lease"])
        st, _, r = self.srv.renew(doc, a["lease"], ttl_ms=300)
        self.assertEqual(st, 200, r)
        b = self.grant(doc, "B", wait_ms=10000)  # once A's lease has run out
        self.assertGreater(b["token"], a["token"])
        self.write("/store/" + doc, b"B", b["lease"])
        body = self.refused(self.send("PUT", "/store/" + doc, b"A-stale", a["lease"]), 409, "stale_token")
        self.assertEqual((body["lock"], body["token"], body["max_token"], body["reason"]),
                         (doc, a["token"], b["token"], "superseded"))
        scratch = "f%s/a-scratch" % u
        s = self.grant(scratch, "A")
        self.assertGreater(s["token"], b["token"])
        self.write("/store/" + scratch, b"A-stale", s["lease"])
        for method in ("MOVE", "COPY"):
            for dest in ("/store/" + doc, self.gateway("/store/" + doc)):
                with self.subTest(method=method, dest=dest):
                    body = self.refused(self.send(method, "/store/" + scratch, lease=s["lease"], dest=dest,
                                                  dest_lease=a["lease"]), 409, "stale_token")
                    self.assertEqual((body["lock"], body["token"], body["holder_token"]),
                                     (doc, a["token"], b["token"]))
                    self.refused(self.send(method, "/store/" + scratch, lease=s["lease"], dest=dest), 428,
                                 "token_required", "Fencing-Destination-Lease")
                    self.refused(self.send(method, "/store/" + scratch, lease=s["lease"], dest=dest,
                                           dest_lease=s["lease"]), 409, "stale_token")
        self.assertEqual(self.ng.read_file("store/" + doc), b"B")
        self.assertEqual(self.ng.read_file("store/" + scratch), b"A-stale")
        seen = self.upstream_saw("f" + u)
        self.assertEqual([(e["method"], e["request_uri"], e["token"]) for e in seen],
                         [("PUT", "/store/" + doc, str(a["token"])), ("PUT", "/store/" + doc, str(b["token"])),
                          ("PUT", "/store/" + scratch, str(s["token"]))])

    def test_copy_and_move_with_both_leases(self):
        u = uid()
        src, dst, dst2 = ("c%s/src.txt" % u, "c%s/dst.txt" % u, "c%s/sub/dst2.txt" % u)
        gs, gd, gd2 = self.grant(src), self.grant(dst), self.grant(dst2)
        self.write("/store/" + src, b"payload", gs["lease"])
        # The client's own Fencing-Destination-Token and -Lock are not what nginx gets.
        forged = {"Fencing-Destination-Token": "1", "Fencing-Destination-Lock": "forged",
                  "Fencing-Token": str(gs["token"]), "Fencing-Lock": src}
        st, hdrs, body = self.send("COPY", "/store/" + src, lease=gs["lease"], dest="/store/" + dst,
                                   dest_lease=gd["lease"], headers=forged)
        self.assertEqual((st, hdrs.get("x-upstream")), (204, "nginx"), body)  # nginx's answer to a file's COPY
        self.assertEqual((self.ng.read_file("store/" + src), self.ng.read_file("store/" + dst)),
                         (b"payload", b"payload"))
        # MOVE with an absolute Destination (the request's Host in another case).
        st, hdrs, body = self.send("MOVE", "/store/" + src, lease=gs["lease"],
                                   dest="http://LocalHost:%d/store/%s" % (self.srv.port, dst2), dest_lease=gd2["lease"],
                                   headers={"Host": "localHOST:%d" % self.srv.port})
        self.assertEqual((st, hdrs.get("x-upstream")), (204, "nginx"), body)
        self.assertIsNone(self.ng.read_file("store/" + src))
        self.assertEqual(self.ng.read_file("store/" + dst2), b"payload")
        seen = [e for e in self.upstream_saw("c" + u) if e["method"] in ("COPY", "MOVE")]
        self.assertEqual([(e["method"], e["request_uri"], e["destination"], e["token"], e["lock"], e["dest_token"],
                           e["dest_lock"], e["lease"]) for e in seen],
                         [("COPY", "/store/" + src, self.ng.url + "store/" + dst, str(gs["token"]), src,
                           str(gd["token"]), dst, "-"),
                          ("MOVE", "/store/" + src, self.ng.url + "store/" + dst2, str(gs["token"]), src,
                           str(gd2["token"]), dst2, "-")])
        # Both marks were raised: the COPY was the only write of dst, and its token is
        # now the one below which dst takes no write.
        st, _, r = self.srv.release(dst, gd["lease"])
        self.assertEqual(st, 200, r)
        body = self.refused(self.send("PUT", "/store/" + dst, b"late", gd["lease"]), 409, "stale_token")
        self.assertEqual(body["max_token"], gd["token"], body)
        # A plain PUT's Fencing-Destination-* never reach the upstream either.
        st, _, _ = self.send("PUT", "/store/" + dst2, b"again", gd2["lease"],
                             headers={"Fencing-Destination-Token": "9", "Fencing-Destination-Lock": "forged"})
        self.assertEqual(st, 204)
        put = [e for e in self.upstream_saw(dst2) if e["method"] == "PUT"]
        self.assertEqual([(e["dest_token"], e["dest_lock"], e["destination"]) for e in put], [("-", "-", "-")])

    def test_destination_under_a_nested_route(self):
        """/store/vault/ is its own route, bound to one lock: a Destination there is not
        this route's to bind, however the path would name a lock under /store/. (Its
        upstream objects are not /store/'s either, which test_nested_routes_that_do_not_start
        requires; the guard refuses such a Destination, or a "//" that would take a path
        past the vault's route, whatever the upstream.)"""
        u = uid()
        doc = "vault/%s.txt" % u
        keeper = self.grant(VAULT_LOCK, "keeper", wait_ms=10000)
        try:
            self.write("/store/" + doc, b"the vault's", keeper["lease"])
            # The lock the path would name under /store/ proves nothing there.
            stray = self.grant(doc, "attacker")
            self.refused(self.send("PUT", "/store/" + doc, b"x", stray["lease"]), 409, "stale_token")
            # "//" does not take the path past the vault's route either.
            self.bad(self.send("PUT", "/store//" + doc, b"x", stray["lease"]), "path")
            self.bad(self.send("PUT", "/store/vault//%s.txt" % u, b"x", keeper["lease"]), "path")
            scratch = "n%s/scratch.txt" % u
            s = self.grant(scratch, "attacker")
            self.write("/store/" + scratch, b"the attacker's", s["lease"])
            for method in ("COPY", "MOVE"):
                for dest in ("/store/" + doc, self.gateway("/store/" + doc), "/store//" + doc,
                             self.gateway("/store//" + doc)):
                    for dest_lease in (stray["lease"], s["lease"], None):
                        with self.subTest(method=method, dest=dest, dest_lease=dest_lease):
                            self.bad(self.send(method, "/store/" + scratch, lease=s["lease"], dest=dest,
                                               dest_lease=dest_lease), "Destination")
        finally:
            self.srv.release(VAULT_LOCK, keeper["lease"])
        self.assertEqual(self.ng.read_file(doc), b"the vault's")
        self.assertEqual([e for e in self.upstream_saw("n" + u) if e["method"] in ("COPY", "MOVE")], [])

    def test_crossed_copies_do_not_deadlock(self):
        """COPY a->b and COPY b->a at once, many times: each enters both locks' queues in
        one step, so none waits for another that waits for it: every one is answered."""
        u = uid()
        a, b = "x%s/a.txt" % u, "x%s/b.txt" % u
        ga, gb = self.grant(a), self.grant(b)
        self.write("/store/" + a, b"same", ga["lease"])
        self.write("/store/" + b, b"same", gb["lease"])
        results = []

        def copier(src, dst, lsrc, ldst):
            c = self.srv.new_client(timeout=60)
            try:
                for _ in range(6):
                    st, hdrs, _ = self.send("COPY", "/store/" + src, lease=lsrc, dest="/store/" + dst,
                                            dest_lease=ldst, client=c)
                    results.append((st, hdrs.get("x-upstream")))
            finally:
                c.close()

        threads = [threading.Thread(target=copier, args=(a, b, ga["lease"], gb["lease"]) if i % 2 else
                                    (b, a, gb["lease"], ga["lease"]), daemon=True) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        self.assertFalse(any(t.is_alive() for t in threads), "a COPY was never answered")
        self.assertEqual(results, [(204, "nginx")] * 36)
        self.assertEqual((self.ng.read_file("store/" + a), self.ng.read_file("store/" + b)), (b"same", b"same"))

    def test_nested_routes_that_do_not_start(self):
        """The nested routes of this class stand together because their upstream objects
        are apart. Listed the other way round, the inner route would never be reached.
        Over the outer route's objects (/store/ -> nginx /, /store/vault/ -> nginx
        /vault/), nginx's vault/x would be bound to lock vault-lock through the one
        route and to lock vault/x through the other: one file, two locks. Neither
        starts: exit 2, one line that names both routes."""
        store = route("/store/", self.ng.url + "store/")
        vault = route("/store/vault/", self.ng.url + "vault/", lock=VAULT_LOCK)
        cases = (
            ([store, vault], "--guard /store/vault/ is never reached: --guard /store/,"),
            ([vault, route("/store/", self.ng.url)],
             "--guard /store/vault/ and --guard /store/ reach the same objects"),
            ([route("/store/vault/", self.ng.url + "store/vault/", lock=VAULT_LOCK), store],
             "--guard /store/vault/ and --guard /store/ reach the same objects"),
            ([route("/plain/", self.ng.url, methods=None), vault, store],
             "--guard /plain/ and --guard /store/vault/ reach the same objects"),
        )
        for specs, why in cases:
            with self.subTest(specs=specs):
                p = harness.serve_to_exit([a for spec in specs for a in ("--guard", spec)])
                self.assertEqual((p.returncode, p.stdout), (2, ""), p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(why, p.stderr)

    def test_copy_or_move_onto_itself_refused(self):
        """A COPY or MOVE whose Destination is its own resource (nginx truncates a file
        copied onto itself): 400, whatever the form of the Destination, and with the
        one lease that would cover both."""
        u = uid()
        name = "o%s/self.txt" % u
        g = self.grant(name)
        self.write("/store/" + name, b"self", g["lease"])
        for method in ("COPY", "MOVE"):
            for source in ("/store/" + name, "/store/%s?v=1" % name):
                for dest in ("/store/" + name, self.gateway("/store/" + name)):
                    for dest_lease in (None, g["lease"]):
                        with self.subTest(method=method, source=source, dest=dest, dest_lease=bool(dest_lease)):
                            body = self.bad(self.send(method, source, lease=g["lease"], dest=dest,
                                                      dest_lease=dest_lease), "Destination")
                            self.assertIn("own path", body["message"])
        self.assertEqual(self.ng.read_file("store/" + name), b"self")
        self.assertEqual([e["method"] for e in self.upstream_saw("o" + u)], ["PUT"])


# ----------------------------------------------------------------------------------
class SharedRouteTests(Base):
    """A lock=NAME route: one lease covers the whole subtree, Destination included, and the
    Destination stays inside the route."""

    def setUp(self):
        self.g = self.grant(SHARED_LOCK, wait_ms=10000)
        self.addCleanup(self.srv.release, SHARED_LOCK, self.g["lease"])

    def test_copy_and_move_within_the_route(self):
        u = uid()
        base = "/shared/" + u
        lease = self.g["lease"]
        self.write(base + "/a.txt", b"A", lease)
        st, hdrs, body = self.send("COPY", base + "/a.txt", lease=lease, dest=base + "/b.txt")
        self.assertEqual((st, hdrs.get("x-upstream")), (204, "nginx"), body)
        st, hdrs, body = self.send("MOVE", base + "/b.txt", lease=lease, dest=self.gateway(base + "/c.txt"))
        self.assertEqual((st, hdrs.get("x-upstream")), (204, "nginx"), body)
        self.assertEqual([self.ng.read_file("shared/%s/%s" % (u, f)) for f in ("a.txt", "b.txt", "c.txt")],
                         [b"A", None, b"A"])
        seen = [e for e in self.upstream_saw(u) if e["method"] in ("COPY", "MOVE")]
        tok = str(self.g["token"])
        self.assertEqual([(e["destination"], e["lock"], e["token"], e["dest_lock"], e["dest_token"]) for e in seen],
                         [(self.ng.url + "shared/%s/b.txt" % u, SHARED_LOCK, tok, SHARED_LOCK, tok),
                          (self.ng.url + "shared/%s/c.txt" % u, SHARED_LOCK, tok, SHARED_LOCK, tok)])
        # Outside the route: another route's path, the upstream's path or authority.
        for dest in ("/store/shared/%s/x.txt" % u, "/store/%s-x.txt" % u, "/plain/shared/%s/x.txt" % u,
                     "/app/%s/x.txt" % u, "/%s/x.txt" % u, "http://127.0.0.1:%d/shared/%s/x.txt" % (self.ng.port, u),
                     "/shared", "/sharedx/%s.txt" % u, "/shared/%s/../../%s-x.txt" % (u, u),
                     "/shared/%s/%%2e%%2e/%%2e%%2e/%s-x.txt" % (u, u)):
            for method in ("COPY", "MOVE"):
                with self.subTest(dest=dest, method=method):
                    self.bad(self.send(method, base + "/a.txt", lease=lease, dest=dest, dest_lease=lease),
                             "Destination")
        for folder in ("", "store", "plain", "vault"):
            listed = os.listdir(self.ng.file_path(folder))
            self.assertFalse(any(u in f for f in listed), (folder, listed))
        self.assertIsNone(self.ng.read_file("store/shared/%s/x.txt" % u))
        self.assertEqual(len([e for e in self.upstream_saw(u) if e["method"] in ("COPY", "MOVE")]), 2)

    def test_copy_or_move_onto_itself_refused(self):
        """On a lock=NAME route any path may be percent-encoded: a Destination that
        decodes to the source's own path is its own resource too."""
        u = uid()
        base = "/shared/" + u
        lease = self.g["lease"]
        self.write(base + "/a*b.txt", b"A", lease)
        for method in ("COPY", "MOVE"):
            for source, dest in (("/a*b.txt", "/a*b.txt"), ("/a*b.txt", "/a%2Ab.txt"), ("/a%2ab.txt", "/a%2Ab.txt"),
                                 ("/a%2Ab.txt?x=1", "/a*b.txt")):
                with self.subTest(method=method, source=source, dest=dest):
                    body = self.bad(self.send(method, base + source, lease=lease, dest=base + dest), "Destination")
                    self.assertIn("own path", body["message"])
        self.assertEqual(self.ng.read_file("shared/%s/a*b.txt" % u), b"A")
        self.assertEqual([e["method"] for e in self.upstream_saw(u)], ["PUT"])

    def test_collection_operations_allowed(self):
        u = uid()
        base = "/shared/" + u
        lease = self.g["lease"]
        for collection in (base + "/", base + "/dir/"):
            st, hdrs, body = self.send("MKCOL", collection, lease=lease)
            self.assertEqual((st, hdrs.get("x-upstream")), (201, "nginx"), body)
        self.write(base + "/dir/f.txt", b"F", lease)
        st, hdrs, body = self.send("COPY", base + "/dir/", lease=lease, dest=base + "/dir2/",
                                   headers={"Depth": "infinity"})
        self.assertEqual((st, hdrs.get("x-upstream")), (201, "nginx"), body)
        st, hdrs, body = self.send("MOVE", base + "/dir2/", lease=lease, dest=base + "/dir3/")
        self.assertEqual((st, hdrs.get("x-upstream")), (201, "nginx"), body)
        self.assertEqual(self.ng.read_file("shared/%s/dir3/f.txt" % u), b"F")
        st, hdrs, body = self.send("PUT", base + "/dir/g.txt", b"G", lease,
                                   headers={"If": "<http://x/other> (<urn:uuid:1>)"})
        self.assertEqual((st, hdrs.get("x-upstream")), (201, "nginx"), body)
        st, hdrs, body = self.send("DELETE", base + "/dir3/", lease=lease, headers={"Depth": "infinity"})
        self.assertEqual((st, hdrs.get("x-upstream")), (204, "nginx"), body)
        self.assertFalse(os.path.exists(self.ng.file_path("shared/%s/dir3" % u)))
        st, hdrs, body = self.send("POST", base + "/dir/", b"x", lease, headers={"Slug": "new.txt"})
        self.assertEqual(hdrs.get("x-upstream"), "nginx", body)  # forwarded (nginx has no POST: 403)


# ----------------------------------------------------------------------------------
class CollectionTests(Base):
    """Defect 2: where each path has its own lock, no write reaches the members of a
    collection or a resource named in a header."""

    def test_collection_writes_refused(self):
        u = uid()
        top = "k%s" % u
        owner = self.grant("%s/dir/a.txt" % top, "owner")
        self.write("/store/%s/dir/a.txt" % top, b"a", owner["lease"])
        owner2 = self.grant("%s/dir2/b.txt" % top, "owner")
        self.write("/store/%s/dir2/b.txt" % top, b"b", owner2["lease"])
        d1, d2, d3 = (self.grant("%s/%s/" % (top, n), "attacker") for n in ("dir", "dir2", "dir3"))
        self.bad(self.send("DELETE", "/store/%s/dir/" % top, lease=d1["lease"]), "path")
        self.bad(self.send("DELETE", "/store/%s/dir/" % top, lease=d1["lease"], headers={"Depth": "infinity"}),
                 "path")
        for method in ("MOVE", "COPY"):
            self.bad(self.send(method, "/store/%s/dir2/" % top, lease=d2["lease"], dest="/store/%s/dir3/" % top,
                               dest_lease=d3["lease"]), "path")
        self.bad(self.send("MKCOL", "/store/%s/dir3/" % top, lease=d3["lease"]), "path")
        self.bad(self.send("PUT", "/store/%s/dir3/" % top, b"x", d3["lease"]), "path")
        self.assertEqual(self.ng.read_file("store/%s/dir/a.txt" % top), b"a")
        self.assertEqual(self.ng.read_file("store/%s/dir2/b.txt" % top), b"b")
        self.assertFalse(os.path.exists(self.ng.file_path("store/%s/dir3" % top)))
        # Depth, Slug and a tagged If on a plain resource.
        f, f2 = self.grant("%s/f.txt" % top), self.grant("%s/f2.txt" % top)
        self.write("/store/%s/f.txt" % top, b"f", f["lease"])
        for depth in ("infinity", "0", "1"):
            self.bad(self.send("COPY", "/store/%s/f.txt" % top, lease=f["lease"], dest="/store/%s/f2.txt" % top,
                               dest_lease=f2["lease"], headers={"Depth": depth}), "Depth")
        self.bad(self.send("POST", "/store/%s/f.txt" % top, b"x", f["lease"], headers={"Slug": "a.txt"}), "Slug")
        self.bad(self.send("PUT", "/store/%s/f.txt" % top, b"x", f["lease"], headers={"Depth": "0"}), "Depth")
        for tagged in ("<http://x/other> (<urn:uuid:1>)", "<http://127.0.0.1:%d/store/%s/dir/a.txt> ([\"e\"])"
                       % (self.ng.port, top), "(<urn:uuid:1>) <http://x/other> (<urn:uuid:2>)",
                       "((<urn:uuid:1>))", "(<urn:uuid:1>", "junk", "(<urn:uuid:1>))"):
            with self.subTest(tagged=tagged):
                self.bad(self.send("PUT", "/store/%s/f.txt" % top, b"x", f["lease"], headers={"If": tagged}), "If")
        for untagged in ("(<urn:uuid:1>)", "(Not <urn:uuid:1> [\"etag\"]) (<urn:uuid:2>)", "([\"a)b\"])"):
            with self.subTest(untagged=untagged):
                st, hdrs, body = self.send("PUT", "/store/%s/f.txt" % top, b"ok", f["lease"],
                                           headers={"If": untagged})
                self.assertEqual((st, hdrs.get("x-upstream")), (204, "nginx"), body)
        self.assertEqual(self.ng.read_file("store/%s/f.txt" % top), b"ok")
        self.assertIsNone(self.ng.read_file("store/%s/f2.txt" % top))
        self.assertEqual(sorted((e["method"], e["request_uri"]) for e in self.upstream_saw(top)),
                         sorted([("PUT", "/store/%s/dir/a.txt" % top), ("PUT", "/store/%s/dir2/b.txt" % top),
                                 ("PUT", "/store/%s/f.txt" % top)] + [("PUT", "/store/%s/f.txt" % top)] * 3))

    def test_destination_on_other_writes_refused(self):
        u = uid()
        name = "q%s/doc.txt" % u
        g = self.grant(name)
        for method, data in (("PUT", b"x"), ("DELETE", None), ("MKCOL", None), ("POST", b"x")):
            with self.subTest(method=method):
                self.bad(self.send(method, "/store/" + name, data, g["lease"], dest="/store/q%s/other.txt" % u),
                         "Destination")
        self.assertEqual(self.upstream_saw("q" + u), [])


# ----------------------------------------------------------------------------------
class OverrideTests(Base):
    """Defect 5: method and target override headers."""

    def test_writes_with_overrides_refused_on_both_routes(self):
        u = uid()
        name = "w%s/doc.txt" % u
        g = self.grant(name)
        self.write("/store/" + name, b"doc", g["lease"])
        shared = self.grant(SHARED_LOCK, wait_ms=10000)
        try:
            for prefix, lease in (("/store/" + name, g["lease"]), ("/shared/%s.txt" % u, shared["lease"])):
                for header in OVERRIDES:
                    for value in ("DELETE", "/other", ""):
                        for method, data in (("PUT", b"x"), ("DELETE", None), ("POST", b"x")):
                            with self.subTest(path=prefix, header=header, value=value, method=method):
                                self.bad(self.send(method, prefix, data, lease, headers={header: value}), header)
                        with self.subTest(path=prefix, header=header.lower(), method="MOVE"):
                            self.bad(self.send("MOVE", prefix, lease=lease, dest=prefix + "2",
                                               headers={header.lower(): value}), header)
        finally:
            self.srv.release(SHARED_LOCK, shared["lease"])
        self.assertEqual(self.ng.read_file("store/" + name), b"doc")
        self.assertIsNone(self.ng.read_file("shared/%s.txt" % u))
        self.assertEqual([e["method"] for e in self.upstream_saw(u)], ["PUT"])

    def test_reads_lose_what_could_make_them_writes(self):
        u = uid()
        strip = OVERRIDES + ("Destination", "Depth", "If", "Slug", "Fencing-Lease", "Fencing-Destination-Lease",
                             "Fencing-Destination-Token", "Fencing-Destination-Lock")
        headers = {h: "/other" if "URL" in h else "DELETE" for h in strip}
        headers.update({"If": "<http://x/y> (<urn:uuid:1>)", "Depth": "infinity", "Destination": "/app/x",
                        "Fencing-Lease": harness.random_lease(), "Fencing-Destination-Lease": harness.random_lease(),
                        "X-Kept": "yes"})
        for method in ("GET", "HEAD", "OPTIONS"):
            path = "/app/r%s/%s" % (u, method)
            with self.subTest(method=method):
                st, hdrs, _ = self.send(method, path, headers=headers)
                self.assertEqual((st, hdrs.get("x-upstream")), (404, "applying"))
                seen = self.app.seen_for(path[len("/app"):])
                self.assertEqual(len(seen), 1, seen)
                self.assertEqual(seen[0]["method"], method)
                got = seen[0]["headers"]
                self.assertEqual(got.get("x-kept"), "yes", got)
                self.assertEqual([h for h in strip if h.lower() in got], [], got)
        self.assertEqual([a for a in self.app.applied if u in a["path"]], [])

    def test_a_second_if_line_is_checked_too(self):
        """Two If lines are one list (RFC 9110 5.3): a tagged list in the second line names
        another resource as much as one in the first."""
        u = uid()
        name = "i%s/doc" % u
        g = self.grant(name)
        for lines in ([("If", "(<urn:uuid:1>)"), ("If", "<http://x/other> (<urn:uuid:2>)")],
                      [("If", "<http://x/other> (<urn:uuid:2>)"), ("If", "(<urn:uuid:1>)")]):
            with self.subTest(lines=lines):
                st, hdrs, body = send_lines(self.srv.port, "PUT", "/app/" + name,
                                            [("Fencing-Lease", g["lease"])] + lines, b"x")
                self.assertEqual(st, 400, body)
                self.assertIn(b'"field":"If"', body)
        st, _, body = send_lines(self.srv.port, "PUT", "/app/" + name,
                                 [("Fencing-Lease", g["lease"]), ("If", "(<urn:uuid:1>)"), ("If", "(<urn:uuid:2>)")],
                                 b"y")
        self.assertEqual(st, 201, body)
        self.assertEqual([a["body"] for a in self.app.applied_to("/" + name)], [b"y"])


    def test_underscore_spellings_of_checked_headers_refused(self):
        """CGI and WSGI backends read '-' and '_' in a header name alike (HTTP_FENCING_TOKEN):
        a name that such a backend would take for a header the guard checks, sets or drops
        gets 400 with field naming it, on reads as on writes; other names with '_' pass."""
        u = uid()
        name = "h%s/doc" % u
        g = self.grant(name)
        aliases = ("Fencing_Token", "fencing_lease", "Fencing_Lock", "Fencing_Destination_Lease",
                   "Fencing_Destination-Token", "FENCING_DESTINATION_LOCK", "Content_Length", "Transfer_Encoding",
                   "X_HTTP_Method_Override", "x_http_method", "X_Method_Override", "X_Original_URL", "X_Rewrite-URL")
        values = {"Fencing_Token": str(g["token"] + 1000), "Fencing_Lock": "other", "Content_Length": "5"}
        for alias in aliases:
            for method, data in (("PUT", b"x"), ("GET", b""), ("HEAD", b"")):
                with self.subTest(header=alias, method=method):
                    st, hdrs, body = send_lines(self.srv.port, method, "/app/" + name,
                                                [("Fencing-Lease", g["lease"]),
                                                 (alias, values.get(alias, "DELETE"))], data)
                    self.assertEqual((st, hdrs.get("x-upstream")), (400, None), body)
                    if method != "HEAD":
                        self.assertIn(b'"field":"%s"' % alias.encode(), body)
        self.assertEqual(self.app.seen_for("/" + name), [])
        # Names with '_' that alias no checked header reach the backend as they were sent.
        st, hdrs, body = send_lines(self.srv.port, "PUT", "/app/" + name,
                                    [("Fencing-Lease", g["lease"]), ("X_Request_Id", "r1"), ("Fencing_Tokens", "1")],
                                    b"y")
        self.assertEqual((st, hdrs.get("x-upstream")), (201, "applying"), body)
        seen = self.app.seen_for("/" + name)[0]["headers"]
        self.assertEqual((seen.get("x_request_id"), seen.get("fencing_tokens")), ("r1", "1"), seen)


# ----------------------------------------------------------------------------------
class RefusalMetricsTests(Base):
    def refusals(self):
        st, _, text = self.srv.request("GET", "/metrics")
        self.assertEqual(st, 200, text)
        values = harness.parse_metrics(text)
        return {r: values['leasegate_guard_refused_total{reason="%s"}' % r] for r in REASONS}

    def test_each_refusal_counted_by_reason(self):
        u = uid()
        name = "x%s/doc" % u
        g = self.grant(name)
        other = self.grant("x%s/other" % u)
        cases = (
            ("method", lambda: self.send("COPY", "/plain/" + name, lease=g["lease"]), 405),
            ("method", lambda: self.send("PROPFIND", "/store/" + name, lease=g["lease"]), 405),
            ("bad_request", lambda: self.send("DELETE", "/store/x%s/" % u, lease=g["lease"]), 400),
            ("bad_request", lambda: self.send("MOVE", "/store/" + name, lease=g["lease"], dest="/elsewhere"), 400),
            ("bad_request", lambda: self.send("PUT", "/store/" + name, b"x", g["lease"],
                                              headers={"X-HTTP-Method": "DELETE"}), 400),
            ("lease_missing", lambda: self.send("PUT", "/store/" + name, b"x"), 428),
            ("lease_missing", lambda: self.send("MOVE", "/store/" + name, lease=g["lease"],
                                                dest="/store/x%s/other" % u), 428),
            ("stale", lambda: self.send("PUT", "/store/" + name, b"x", other["lease"]), 409),
            ("stale", lambda: self.send("COPY", "/store/" + name, lease=g["lease"], dest="/store/x%s/other" % u,
                                        dest_lease=g["lease"]), 409),
        )
        for reason, call, status in cases:
            with self.subTest(reason=reason, status=status):
                before = self.refusals()
                self.assertEqual(call()[0], status)
                after = self.refusals()
                self.assertEqual({r: after[r] - before[r] for r in REASONS if after[r] != before[r]}, {reason: 1})
        self.assertEqual(self.upstream_saw("x" + u), [])


# ----------------------------------------------------------------------------------
def keygen(name, role, *prefixes):
    p = subprocess.run([harness.binary_path(), "keygen", name, role] + list(prefixes), capture_output=True,
                       text=True, timeout=10)
    if p.returncode != 0:
        raise AssertionError("leasegate keygen: " + p.stderr)
    key, line = p.stdout.splitlines()
    return key, line


class Keyed(harness.Client):
    def __init__(self, port, key):
        super().__init__(port)
        self.key = key

    def request(self, method, path, body=None, raw=None, headers=None, timeout=None):
        hdrs = dict(headers or {})
        hdrs["Authorization"] = "Bearer " + self.key
        return super().request(method, path, body=body, raw=raw, headers=hdrs, timeout=timeout)


class TenantTests(Base):
    """With --auth-file, a key must cover every lock a write is bound to, the Destination's
    too; a lease of another tenant's lock does not stand in for the key."""

    @classmethod
    def setUpClass(cls):
        need_nginx()
        cls.ng = upstream.Nginx()
        cls.app = ApplyingUpstream()
        cls.dir = tempfile.mkdtemp(prefix="leasegate-tenants-")
        cls.ta, cls.tb = "tenantA-%s/" % uid(), "tenantB-%s/" % uid()
        cls.key_a, line_a = keygen("a", "client", cls.ta)
        cls.key_b, line_b = keygen("b", "client", cls.tb)
        keys = os.path.join(cls.dir, "keys")
        with open(keys, "w") as f:
            f.write(line_a + "\n" + line_b + "\n")
        try:
            cls.srv = harness.Server(extra_args=["--auth-file", keys, "--guard", route("/store/", cls.ng.url)])
        except Exception:
            cls.app.close()
            cls.ng.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.dir, ignore_errors=True)

    def test_move_across_tenants_is_403(self):
        a, b = Keyed(self.srv.port, self.key_a), Keyed(self.srv.port, self.key_b)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        ledger, x = self.tb + "ledger", self.ta + "x"
        gb = self.grant(ledger, "b", client=b)
        self.write("/store/" + ledger, b"B's ledger", gb["lease"], client=b)
        ga = self.grant(x, "a", client=a)
        self.write("/store/" + x, b"A's data", ga["lease"], client=a)
        st, _, body = self.send("PUT", "/store/" + ledger, b"A", gb["lease"], client=a)
        self.assertEqual((st, body.get("error")), (403, "forbidden"), body)
        for method in ("MOVE", "COPY"):
            for dest in ("/store/" + ledger, self.gateway("/store/" + ledger)):
                for dest_lease in (gb["lease"], ga["lease"], None):
                    with self.subTest(method=method, dest=dest, dest_lease=dest_lease):
                        st, hdrs, body = self.send(method, "/store/" + x, lease=ga["lease"], dest=dest,
                                                   dest_lease=dest_lease, client=a)
                        self.assertEqual((st, body.get("error")), (403, "forbidden"), body)
                        self.assertNotEqual(hdrs.get("x-upstream"), "nginx")
        # The same MOVE within A's tenant goes through.
        gy = self.grant(self.ta + "y", "a", client=a)
        st, hdrs, body = self.send("MOVE", "/store/" + x, lease=ga["lease"], dest="/store/" + self.ta + "y",
                                   dest_lease=gy["lease"], client=a)
        self.assertEqual((st, hdrs.get("x-upstream")), (204, "nginx"), body)
        self.assertEqual(self.ng.read_file(ledger), b"B's ledger")
        self.assertEqual(self.ng.read_file(self.ta + "y"), b"A's data")
        sentinel = "/%s__sentinel__" % self.ta
        self.assertEqual(a.request("GET", "/store" + sentinel)[0], 404)
        entries = self.ng.wait_logged(lambda e: e["request_uri"] == sentinel, what="the sentinel")
        moves = [e for e in entries if e["method"] in ("COPY", "MOVE")]
        self.assertEqual([(e["request_uri"], e["destination"]) for e in moves],
                         [("/" + x, self.ng.url + self.ta + "y")])


# ----------------------------------------------------------------------------------
class OverrideParameterTests(unittest.TestCase):
    """Issue 39, item 5: `?_method=DELETE` and a form body `_method=DELETE` passed the guard
    on a route that forwards POST but not DELETE, where the header forms are refused. A
    backend that honours them (Rails, Laravel, Symfony, method-override) applies a DELETE
    the route never allowed. ApplyingUpstream only; no nginx needed."""

    @classmethod
    def setUpClass(cls):
        cls.app = ApplyingUpstream()
        try:
            cls.srv = harness.Server(extra_args=["--guard", route("/forms/", cls.app.url, methods="GET+HEAD+POST")])
        except Exception:
            cls.app.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.cleanup()
        finally:
            cls.app.close()

    def grant(self, name):
        st, _, g = self.srv.acquire(name, "t", ttl_ms=60000)
        self.assertEqual(st, 200, g)
        return g

    def refused(self, resp):
        st, hdrs, body = resp
        self.assertEqual((st, hdrs.get("x-upstream")), (400, None), body)
        if body:
            self.assertIn(b'"field":"_method"', body)

    def test_query_overrides_refused_on_writes_and_reads(self):
        u = uid()
        g = self.grant("q%s" % u)
        path = "/forms/q%s" % u
        for query in ("_method=DELETE", "a=1&_method=DELETE", "%5Fmethod=DELETE", "_%6Dethod=DELETE",
                      "_METHOD=delete", "_method", "x=1&X-HTTP-Method-Override=DELETE", "x-http-method=DELETE",
                      "X-Method-Override=PUT&b=2"):
            with self.subTest(query=query):
                self.refused(send_lines(self.srv.port, "POST", path + "?" + query,
                                        [("Fencing-Lease", g["lease"])], b"x"))
                self.refused(send_lines(self.srv.port, "GET", path + "?" + query, []))
        self.assertEqual(self.app.seen_for(path[len("/forms"):]), [])
        # Names that only look alike pass.
        st, hdrs, body = send_lines(self.srv.port, "POST", path + "?method=DELETE&my_method=1&_methods=2&a=_method",
                                    [("Fencing-Lease", g["lease"])], b"ok")
        self.assertEqual((st, hdrs.get("x-upstream")), (201, "applying"), body)

    def test_form_bodies_with_an_override_refused(self):
        u = uid()
        g = self.grant("f%s" % u)
        path = "/forms/f%s" % u
        urlencoded = ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=UTF-8")
        bodies = [(t, b) for t in urlencoded for b in (b"_method=DELETE", b"a=1&_method=DELETE&b=2",
                                                       b"a=1&%5fmethod=DELETE", b"x=" + b"y" * 200000 + b"&_method=DELETE",
                                                       b"a=1&_method")]
        boundary = "b0undary"
        multipart = ("--%s\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n"
                     "--%s\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--%s--\r\n"
                     % (boundary, boundary, boundary)).encode()
        bodies.append(("multipart/form-data; boundary=" + boundary, multipart))
        for ctype, body in bodies:
            with self.subTest(ctype=ctype, body=body[:40]):
                self.refused(send_lines(self.srv.port, "POST", path, [("Fencing-Lease", g["lease"]),
                                                                     ("Content-Type", ctype)], body))
        # The same, in pieces with the name cut in two: the scan carries over.
        for pieces in ([b"a=1&_me", b"thod=DELETE"], [b"a=1&%5", b"Fmethod=DELETE"],
                       [b"a=" + b"z" * 70000, b"&_meth", b"od=DELETE"]):
            with self.subTest(pieces=[p[:20] for p in pieces]):
                self.refused(self.send_in_pieces(path, g["lease"], pieces))
        self.assertEqual(self.app.applied_to(path[len("/forms"):]), [])
        # Forms without one, and other bodies that mention it, pass.
        fine = [("application/x-www-form-urlencoded", b"a=1&method=DELETE&my_method=2&c=_method"),
                ("application/json", b'{"_method": "DELETE"}'),
                ("multipart/form-data; boundary=" + boundary,
                 multipart.replace(b'name="_method"', b'name="file"; filename="_method"'))]
        for ctype, body in fine:
            with self.subTest(ctype=ctype):
                st, hdrs, got = send_lines(self.srv.port, "POST", path,
                                           [("Fencing-Lease", g["lease"]), ("Content-Type", ctype)], body)
                self.assertEqual((st, hdrs.get("x-upstream")), (201 if ctype == fine[0][0] else 204, "applying"), got)
        self.assertEqual([a["body"] for a in self.app.applied_to(path[len("/forms"):])], [b for _, b in fine])

    def send_in_pieces(self, path, lease, pieces):
        """A form POST whose body is sent piece by piece, each after the guard has had the one
        before: (status, headers, body)."""
        body = b"".join(pieces)
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=15)
        try:
            s.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nFencing-Lease: %s\r\n"
                       "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n"
                       % (path, lease, len(body))).encode())
            for p in pieces:
                time.sleep(0.2)
                try:
                    s.sendall(p)
                except OSError:
                    break  # refused and closed once the rest of the body is not wanted
            st, hdrs, got = harness.read_response(s, 15)
            return st, {k.lower(): v for k, v in hdrs.items()}, got
        finally:
            s.close()


if __name__ == "__main__":
    harness.run_tests()
