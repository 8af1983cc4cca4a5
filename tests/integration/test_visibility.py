"""Visibility: GET shows the holder but never the lease; listing pages through 100,000 locks."""

import asyncio
import json
import threading
import time
import unittest
import urllib.parse

import harness

HOLDER_KEYS = {"owner", "token", "ttl_ms", "acquired_at_ms", "expires_at_ms", "count", "metadata"}


class VisibilityTests(harness.ServerTestCase):
    def test_get_shows_holder_never_lease(self):
        name = "vis/one"
        meta = {"host": "web-3", "pid": 4121, "why": "nightly", "nested": {"a": [1, 2, None]}}
        st, _, b = self.srv.acquire(name, "billing-7f3", ttl_ms=60000, metadata=meta)
        self.assertEqual(st, 200, b)
        lease = b["lease"]
        out = {}

        def waiter():
            c = self.srv.new_client()
            try:
                out["resp"] = c.acquire(name, "waiting-one", wait_ms=15000)
            finally:
                c.close()

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        self.srv.wait_until(lambda: self.srv.waiters(name) == 1, what="waiter queued")

        st, hdrs, g = self.srv.get_lock(name)
        raw = self.srv.last_text
        self.assertEqual(st, 200, g)
        self.assertIn("application/json", hdrs.get("content-type", ""))
        self.assertNotIn(lease, raw)
        self.assertNotIn(lease.upper(), raw.upper())
        self.assertFalse(harness.find_key(g, "lease"), g)
        self.assertTrue(set(g) >= {"name", "held", "holder", "waiters", "last_token"}, g)
        self.assertEqual(g["name"], name)
        self.assertIs(g["held"], True)
        self.assertEqual(g["waiters"], 1)
        self.assertEqual(g["last_token"], b["token"])
        h = g["holder"]
        self.assertTrue(HOLDER_KEYS <= set(h), h)
        self.assertEqual(h["owner"], "billing-7f3")
        self.assertEqual(h["token"], b["token"])
        self.assertEqual(h["ttl_ms"], 60000)
        self.assertEqual(h["acquired_at_ms"], b["acquired_at_ms"])
        self.assertEqual(h["expires_at_ms"], b["expires_at_ms"])
        self.assertEqual(h["count"], 1)
        self.assertEqual(h["metadata"], meta)

        # %2F spelling reaches the same lock.
        st, _, g2 = self.srv.request("GET", "/v1/locks/vis%2Fone")
        self.assertEqual(st, 200, g2)
        self.assertEqual(g2["name"], name)
        self.assertEqual(g2["holder"]["token"], b["token"])

        # The listing does not show the lease either.
        st, _, lst = self.srv.request("GET", "/v1/locks?prefix=vis/one&limit=10")
        self.assertEqual(st, 200, lst)
        self.assertNotIn(lease, self.srv.last_text)
        self.assertFalse(harness.find_key(lst, "lease"))
        self.assertEqual([x["name"] for x in lst["locks"]], [name])
        # The same state, but for the queue, the holders and the value, which only GET
        # /v1/locks/NAME shows (a listing says by value_version whether the value moved).
        self.assertNotIn("value", lst["locks"][0])
        self.assertEqual(lst["locks"][0], {k: v for k, v in g.items() if k not in ("queue", "holders", "value")})
        self.assertEqual(g["holders"], [g["holder"]])
        # Neither do metrics or the dashboard.
        for path in ("/metrics", "/"):
            st, _, _ = self.srv.request("GET", path)
            self.assertNotIn(lease, self.srv.last_text, path)

        self.srv.release(name, lease)
        t.join(10)
        st, _, w = out["resp"]
        self.assertEqual(st, 200, w)
        self.srv.release(name, w["lease"])

    def test_never_granted_lock(self):
        st, _, g = self.srv.get_lock("vis/never/granted")
        self.assertEqual(st, 200, g)
        self.assertEqual({k: g.get(k) for k in ("name", "held", "holder", "waiters", "last_token")},
                         {"name": "vis/never/granted", "held": False, "holder": None, "waiters": 0,
                          "last_token": 0})
        self.assertIn("holder", g)
        # Not listed: only locks that were ever granted are listed.
        st, _, lst = self.srv.request("GET", "/v1/locks?prefix=vis/never/")
        self.assertEqual(st, 200, lst)
        self.assertEqual(lst["locks"], [])
        self.assertIsNone(lst["next"])

    def test_percent_encoded_slash_acquire(self):
        st, _, b = self.srv.request("POST", "/v1/locks/vis%2Fenc%2F42/acquire", body={"owner": "o"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["name"], "vis/enc/42")
        st, _, g = self.srv.get_lock("vis/enc/42")
        self.assertEqual(g["holder"]["token"], b["token"])
        st, _, r = self.srv.request("POST", "/v1/locks/vis/enc%2f42/release", body={"lease": b["lease"]})
        self.assertEqual(st, 200, r)
        self.assertTrue(r["released"])

    def test_list_prefix_limit_after_small(self):
        names = ["vis/small/%s" % s for s in ("b", "a", "c/1", "c/0", "A", "-", "~", "d.e", "d:e", "z")]
        for n in names:
            st, _, b = self.srv.acquire(n, "lister", ttl_ms=60000)
            self.assertEqual(st, 200, b)
        # One released lock is still listed.
        st, _, b = self.srv.acquire("vis/small/released", "lister", ttl_ms=60000)
        self.srv.release("vis/small/released", b["lease"])
        names.append("vis/small/released")
        expect = sorted(names, key=lambda s: s.encode())
        st, _, lst = self.srv.request("GET", "/v1/locks?prefix=vis/small/&limit=1000")
        self.assertEqual(st, 200, lst)
        self.assertEqual([x["name"] for x in lst["locks"]], expect)
        self.assertIsNone(lst["next"])
        rel = [x for x in lst["locks"] if x["name"] == "vis/small/released"][0]
        self.assertEqual((rel["held"], rel["holder"]), (False, None))
        # limit=3 pages
        seen, after, pages = [], None, 0
        while pages < 20:
            q = {"prefix": "vis/small/", "limit": "3"}
            if after is not None:
                q["after"] = after
            st, _, page = self.srv.request("GET", "/v1/locks?" + urllib.parse.urlencode(q))
            self.assertEqual(st, 200, page)
            self.assertLessEqual(len(page["locks"]), 3)
            seen += [x["name"] for x in page["locks"]]
            pages += 1
            if page["next"] is None:
                break
            self.assertEqual(page["next"], page["locks"][-1]["name"])
            after = page["next"]
        self.assertEqual(seen, expect)
        self.assertEqual(pages, (len(expect) + 2) // 3)
        # A page that ends exactly at the last lock has next null.
        st, _, page = self.srv.request("GET", "/v1/locks?prefix=vis/small/&limit=%d" % len(expect))
        self.assertEqual((len(page["locks"]), page["next"]), (len(expect), None))
        # Default limit is 100, prefix is optional.
        st, _, page = self.srv.request("GET", "/v1/locks")
        self.assertEqual(st, 200, page)
        self.assertLessEqual(len(page["locks"]), 100)
        # after in the middle, without a prefix match of after itself
        st, _, page = self.srv.request("GET", "/v1/locks?prefix=vis/small/&after=vis/small/c&limit=1000")
        self.assertEqual([x["name"] for x in page["locks"]], [n for n in expect if n.encode() > b"vis/small/c"])

    def test_list_100k(self):
        total = 100_000
        prefix = "vis/bulk/"
        names = ["%s%06d" % (prefix, i) for i in range(total)]
        t0 = time.monotonic()
        created = asyncio.run(asyncio.wait_for(_bulk_acquire(self.srv.port, names), 240))
        t_create = time.monotonic() - t0
        self.assertEqual(created, total)
        # Noise around the prefix that must not show up.
        for n in ("vis/bulk", "vis/bulk0", "vis/bulj/x", "vis/bulk~"):
            st, _, b = self.srv.acquire(n, "noise", ttl_ms=3600000)
            self.assertEqual(st, 200, b)
        t1 = time.monotonic()
        seen = []
        after = None
        pages = 0
        for _page in range(total // 1000 + 5):
            pages += 1
            q = {"prefix": prefix, "limit": "1000"}
            if after is not None:
                q["after"] = after
            st, _, page = self.srv.request("GET", "/v1/locks?" + urllib.parse.urlencode(q))
            self.assertEqual(st, 200, page if not isinstance(page, dict) else page.get("error"))
            self.assertLessEqual(len(page["locks"]), 1000)
            if page["locks"]:
                self.assertTrue(page["locks"][0]["held"])
            seen.extend(x["name"] for x in page["locks"])
            if page["next"] is None:
                break
            after = page["next"]
        else:
            self.fail("listing did not end (next never null)")
        t_list = time.monotonic() - t1
        print("\n  100k locks: created in %.1f s, listed in %.1f s" % (t_create, t_list))
        self.assertEqual(len(seen), len(set(seen)), "a name was listed twice")
        self.assertEqual(len(seen), total)
        self.assertEqual(seen, names, "names not all listed in byte order")
        # openapi.yaml: next is null when the page reaches the end, so no trailing empty page.
        self.assertEqual(pages, total // 1000)


async def _bulk_acquire(port, names, conns=32):
    """Acquire every name (ttl 1 h) over `conns` keep-alive raw connections."""
    it = iter(enumerate(names))
    count = 0
    failures = []

    async def worker():
        nonlocal count
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _i, name in it:
                body = json.dumps({"owner": "bulk", "ttl_ms": 3600000}).encode()
                writer.write(("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                              % (name, len(body))).encode() + body)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                clen = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        clen = int(line.split(b":", 1)[1])
                data = await reader.readexactly(clen)
                if status != 200:
                    failures.append((name, status, data[:200]))
                    return
                count += 1
        finally:
            writer.close()

    await asyncio.gather(*[worker() for _ in range(conns)])
    if failures:
        raise AssertionError("bulk acquire failed: %r" % failures[:3])
    return count


if __name__ == "__main__":
    harness.run_tests()
