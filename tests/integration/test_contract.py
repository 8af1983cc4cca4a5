"""Contract conformance: the real server checked against openapi.yaml.

A scenario on three real servers (a plain one, one with --auth-file and --auth-metrics,
one with the audit trail and the events off and small limits) reaches every path and
method of openapi.yaml and as many of each operation's declared statuses as can be
provoked deterministically: grants, reentry, retries, long-polls, watches, the event
long-poll and the SSE stream, paging, history, audit, fencing, force-release, health,
metrics, the dashboard; 400, 401, 403, 404, 405, 409, 410, 413, 414, 415, 421, 429, 431,
503 (limits, shares, and waiters while the server stops). A fourth server guards a path in front of a
port where nothing listens: the guard proxy's refusals (428, 409, 400, 502) are checked
against the component schemas the contract names for them (GuardError,
GuardStaleTokenError), since its paths depend on configuration and no operation lists them.

Every answer is checked against the contract: its status is declared for the operation
(or by `default`); a method a path does not declare gets a 405 that the path declares,
whose Allow lists exactly the path's methods (HEAD with GET); the Content-Type is one
of the declared media types; a JSON body validates against the declared schema
(OpenAPI 3.1 schemas are JSON Schema 2020-12; $refs resolve within openapi.yaml) and
carries no field that the schema does not declare (unless it allows more); the
declared headers are there when required and match their schemas when sent. Each SSE
message's data validates against the Event schema. In reverse, every operation in the
contract must have been exercised, so an endpoint added to the contract without a
scenario here fails.

The other direction too: a body or parameter the server accepted must validate against
the operation's request schema and parameters, and a 400 naming a field must be for a
value the contract refuses as well (limits only its prose states aside).

Not provoked: 429 max_half_sent (a peer's requests begun and not complete: any operation),
503 on operations other than acquire and fence (it comes to a request that
arrives after SIGTERM, which cannot be timed without a race, on a gateway over etcd that
does not lead, and when out of memory), and 413 on operations without a body.

Mismatches are collected, not stopped at, and listed all at once.

Needs python3-yaml and python3-jsonschema (scripts/deps.sh --test); without them the
test is skipped and says so. Real binary on 127.0.0.1 only; every wait is bounded.
"""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import traceback
import unittest
import urllib.parse
import uuid

import harness
from harness import Client, EventStream, Server, binary_path, parse_metrics, raw_http
import upstream

try:
    import yaml
    import jsonschema
except ImportError as e:  # reported by setUpModule
    yaml = jsonschema = None
    MISSING = str(e)

HERE = os.path.dirname(os.path.abspath(__file__))
OPENAPI = os.path.normpath(os.path.join(HERE, "..", "..", "openapi.yaml"))
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def setUpModule():
    if jsonschema is None or yaml is None:
        raise unittest.SkipTest("test_contract needs python3-yaml and python3-jsonschema (%s): "
                                "apt-get install python3-yaml python3-jsonschema, or scripts/deps.sh --test"
                                % MISSING)


# ---- the contract ---------------------------------------------------------------------

class Contract:
    """openapi.yaml, its schemas as JSON Schema validators, and what was seen against it."""

    def __init__(self, path):
        with open(path) as f:
            self.doc = yaml.safe_load(f)
        self.findings = []                      # every mismatch, as text
        self.seen = {}                          # (path, method) -> set of statuses answered
        self.undeclared_method_paths = set()    # paths probed with a method they do not declare
        self._validators = {}

    # -- lookups
    def resolve(self, obj):
        """Follows a local $ref (#/components/...) to what it names."""
        seen = 0
        while isinstance(obj, dict) and "$ref" in obj and seen < 20:
            ref = obj["$ref"]
            if not ref.startswith("#/"):
                raise AssertionError("only local $refs are supported: %r" % ref)
            obj = self.doc
            for part in ref[2:].split("/"):
                obj = obj[part.replace("~1", "/").replace("~0", "~")]
            seen += 1
        return obj

    def operations(self):
        """Every (path, METHOD) the contract declares."""
        return sorted((p, m.upper()) for p, item in self.doc["paths"].items() for m in item if m in METHODS)

    def validator(self, schema):
        key = id(schema)
        v = self._validators.get(key)
        if v is None:
            # The schema is wrapped in a root that carries the document's components, so
            # that '#/components/schemas/X' refs resolve as they do in openapi.yaml.
            root = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                    "components": self.doc["components"], "allOf": [schema]}
            v = jsonschema.Draft202012Validator(root, format_checker=jsonschema.FormatChecker())
            self._validators[key] = (v, schema)  # keep schema alive: its id is the key
            return v
        return v[0]

    def schema_errors(self, schema, instance):
        errs = sorted(self.validator(schema).iter_errors(instance), key=lambda e: list(e.absolute_path))
        return ["%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(body)", e.message[:300])
                for e in errs]

    def undeclared_fields(self, schema, instance, path=""):
        """Fields of instance that no (sub)schema declares: a body may carry more than its
        schema lists only where the contract says so (additionalProperties). Branches of
        allOf/oneOf/anyOf are merged, which is lenient for oneOf, never strict."""
        branches, todo = [], [schema]
        while todo:
            sch = self.resolve(todo.pop())
            if not isinstance(sch, dict):
                continue
            branches.append(sch)
            for k in ("allOf", "oneOf", "anyOf"):
                todo.extend(sch.get(k, []))
        out = []
        if isinstance(instance, dict):
            if any(b.get("additionalProperties", False) is not False for b in branches):
                return out
            for key, value in instance.items():
                subs = [b["properties"][key] for b in branches if key in b.get("properties", {})]
                if not subs:
                    out.append("%s%s" % (path, key))
                for sub in subs:
                    out += self.undeclared_fields(sub, value, "%s%s." % (path, key))
        elif isinstance(instance, list):
            for b in branches:
                if "items" in b:
                    for v in instance:
                        out += self.undeclared_fields(b["items"], v, path + "[].")
        return sorted(set(out))

    # What JSON Schema cannot say (the description does): metadata's size in bytes as
    # sent, its depth, integers beyond 64 bits in it; a value's depth; a semaphore's
    # permits above the limit given beside them.
    SCHEMA_CANNOT_SAY = ("metadata", "value", "permits")

    def check_request(self, template, method, params, query, body, status, answer, where):
        """The other direction: what the server accepted, the contract's request schemas
        and parameters must accept; a 400 that names a field must be for a value they
        refuse too (a token never issued, which only the server can know, aside)."""
        op = (self.doc["paths"].get(template) or {}).get(method.lower())
        if op is None or status in (401, 403, 404, 405, 413, 414, 415, 431):
            return
        problems = {}
        given = dict(query or {})
        given.update({k: urllib.parse.unquote(v) for k, v in (params or {}).items()})
        for prm in op.get("parameters", []) + self.doc["paths"][template].get("parameters", []):
            prm = self.resolve(prm)
            if prm.get("in") not in ("query", "path") or prm["name"] not in given:
                continue
            value = given[prm["name"]]
            sch = prm.get("schema", {})
            if self.resolve(sch).get("type") == "integer":
                try:
                    value = int(value)
                except ValueError:
                    pass
            errs = self.schema_errors(sch, value)
            if errs:
                problems[prm["name"]] = errs
        rb = (op.get("requestBody") or {}).get("content", {}).get("application/json")
        body_errs = []
        if rb is not None and body is not None:
            body_errs = self.schema_errors(rb["schema"], body)
        field = answer.get("field") if isinstance(answer, dict) else None
        if status == 400:
            if isinstance(answer, dict) and "last_token" in answer:
                return
            if field in problems or (field is None and (problems or body_errs)):
                return
            if field is not None and any(e.startswith(field + ":") or e.startswith(field + "/") or
                                         ("'%s'" % field) in e for e in body_errs):
                return
            if field is None or field in self.SCHEMA_CANNOT_SAY or (field not in given and body is None):
                return  # no field named, a limit only the description states, or a header
            self.fail(where, "answered 400 for field %r, but the contract accepts %.200r"
                      % (field, given[field] if field in given else body))
        elif 200 <= status < 300 or status == 409:
            for name, errs in problems.items():
                self.fail(where, "the server accepted query parameter %s=%r that the contract refuses: %s"
                          % (name, query[name], errs))
            if body_errs:
                self.fail(where, "the server accepted a body that the contract's request schema refuses: %s"
                          % body_errs)

    def component_schema(self, name):
        return self.doc["components"]["schemas"][name]

    def check_component(self, schema_name, status, headers, raw, where):
        """An answer no operation lists (the guard proxy's, whose paths depend on
        configuration) against the component schema its description names."""
        resp = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/" + schema_name}}}}
        self.check_response(resp, status, headers, raw, False, where)

    # -- the check of one answer
    def fail(self, where, text):
        self.findings.append("%s: %s" % (where, text))

    def check(self, template, method, status, headers, raw, head=False, where=None, stream=False):
        """Checks one answer against the contract. `raw` is the body's bytes (None: not
        read, as for a stream or HEAD). template None: a path no operation has."""
        where = where or "%s %s -> %d" % (method, template, status)
        if template is None:
            if status != 404:
                self.fail(where, "a path the contract does not have was answered %d, not 404" % status)
            else:
                self.check_response(self.resolve({"$ref": "#/components/responses/NotFound"}), status, headers,
                                    raw, head, where)
            return
        item = self.doc["paths"].get(template)
        if item is None:
            self.fail(where, "the scenario names a path the contract does not have")
            return
        op = item.get(method.lower())
        if op is None and method == "HEAD":
            op = item.get("get")
        if op is None:
            self.undeclared_method_paths.add(template)
            declared = [self.resolve(o["responses"]["405"]) for m, o in item.items()
                        if m in METHODS and "405" in o.get("responses", {})]
            if status != 405:
                self.fail(where, "%s is not declared on this path, yet it was answered %d" % (method, status))
                return
            if not declared:
                self.fail(where, "405 (method %s not allowed) is not declared by any operation of this path"
                          % method)
                return
            allowed = {m.upper() for m in item if m in METHODS}
            if "GET" in allowed:
                allowed.add("HEAD")
            got = {m.strip().upper() for m in headers.get("allow", "").split(",") if m.strip()}
            if got != allowed:
                self.fail(where, "Allow: %r, but the path declares %s" % (headers.get("allow"), sorted(allowed)))
            self.check_response(declared[0], status, headers, raw, head, where)
            return
        key = (template, method if method != "HEAD" else "GET")
        self.seen.setdefault(key, set()).add(status)
        responses = op.get("responses", {})
        resp = responses.get(str(status)) or responses.get("%dXX" % (status // 100)) or responses.get("default")
        if resp is None:
            self.fail(where, "status %d is not declared for %s (declared: %s)"
                      % (status, op.get("operationId"), ", ".join(sorted(responses))))
            return
        self.check_response(self.resolve(resp), status, headers, raw, head, where, stream)

    def check_response(self, resp, status, headers, raw, head, where, stream=False):
        for name, h in (resp.get("headers") or {}).items():
            h = self.resolve(h)
            value = headers.get(name.lower())
            if value is None:
                if h.get("required"):
                    self.fail(where, "required header %s is missing" % name)
                continue
            schema = h.get("schema", {})
            inst = value
            if self.resolve(schema).get("type") == "integer":
                try:
                    inst = int(value)
                except ValueError:
                    self.fail(where, "header %s: %r is not an integer" % (name, value))
                    continue
            for e in self.schema_errors(schema, inst):
                self.fail(where, "header %s: %s" % (name, e))
        content = resp.get("content") or {}
        ctype = headers.get("content-type")
        if not content:
            if raw:
                self.fail(where, "the contract declares no body, but one came (%s)" % ctype)
            return
        if not ctype:
            self.fail(where, "no Content-Type (declared: %s)" % ", ".join(content))
            return
        media = ctype.split(";")[0].strip().lower()
        declared = {k.lower(): v for k, v in content.items()}
        if media not in declared:
            self.fail(where, "Content-Type %r is not declared (declared: %s)" % (ctype, ", ".join(content)))
            return
        if head or stream or raw is None:
            return
        schema = declared[media].get("schema")
        if schema is None:
            return
        if media == "application/json" or media.endswith("+json"):
            try:
                inst = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                self.fail(where, "the body is not JSON (%s): %r" % (e, raw[:200]))
                return
        else:
            try:
                inst = raw.decode("utf-8")
            except UnicodeDecodeError:
                self.fail(where, "the %s body is not UTF-8" % media)
                return
        for e in self.schema_errors(schema, inst):
            self.fail(where, "body does not match the schema: %s (body: %s)" % (e, raw[:300]))
        extra = self.undeclared_fields(schema, inst)
        if extra:
            self.fail(where, "fields the schema does not declare: %s (body: %s)" % (", ".join(extra), raw[:300]))


# ---- talking to the servers -----------------------------------------------------------

def new_key(name, role, *args):
    p = subprocess.run([binary_path(), "keygen", name, role] + list(args), capture_output=True, text=True,
                       timeout=10)
    if p.returncode != 0:
        raise RuntimeError("leasegate keygen failed: %s" % p.stderr)
    key, line = p.stdout.splitlines()
    return key, line


def url_of(template, params=None, query=None):
    url = template
    for k, v in (params or {}).items():
        url = url.replace("{%s}" % k, v)
    if query:
        url += "?" + urllib.parse.urlencode(query)
    return url


class Caller:
    """Requests labelled with the contract's path and method; every answer is checked."""

    def __init__(self, contract, port, key=None, timeout=30.0):
        self.contract = contract
        self.port = port
        self.key = key
        self.client = Client(port, timeout=timeout)

    def close(self):
        self.client.close()

    def call(self, template, method, params=None, query=None, body=None, raw=None, headers=None,
             expect=None, timeout=None, key=None, path=None):
        """One request to the operation (template, method); checked against the contract.
        `expect`, when given, is the status the scenario means to provoke: another one is
        a finding too (the scenario's idea of the server and the server disagree)."""
        url = path or url_of(template, params, query)
        hdrs = dict(headers or {})
        k = key if key is not None else self.key
        if k:
            hdrs["Authorization"] = "Bearer " + k
        st, rh, parsed = self.client.request(method, url, body=body, raw=raw, headers=hdrs, timeout=timeout)
        where = "%s %s -> %d" % (method, url if len(url) < 120 else url[:117] + "...", st)
        self.contract.check(template, method, st, rh, None if method == "HEAD" else self.client.last_raw,
                            head=(method == "HEAD"), where=where)
        sent = body
        if raw is not None and sent is None:
            try:
                sent = json.loads(raw)
            except ValueError:
                sent = None
        self.contract.check_request(template, method, params, query, sent, st, parsed, where)
        if expect is not None and st != expect:
            self.contract.fail(where, "the scenario expected %d (body %s)" % (expect, self.client.last_text[:300]))
        return st, rh, parsed

    def raw(self, template, method, request_bytes, expect=None, label=None):
        """A hand-made request on a fresh connection (limits the HTTP client would not send)."""
        st, rh, body = raw_http(self.port, request_bytes, timeout=10)
        where = "%s %s -> %d" % (method, label or template, st)
        self.contract.check(template, method, st, rh, body, where=where)
        if expect is not None and st != expect:
            self.contract.fail(where, "the scenario expected %d (body %r)" % (expect, body[:300]))
        return st, rh, body


LOCK = "/v1/locks/{name}"
ACQUIRE = "/v1/locks/{name}/acquire"
RENEW = "/v1/locks/{name}/renew"
RELEASE = "/v1/locks/{name}/release"
HISTORY = "/v1/locks/{name}/history"
VALUE = "/v1/locks/{name}/value"
ELECTION = "/v1/elections/{name}"
ELECTIONS = "/v1/elections"
CAMPAIGN = "/v1/elections/{name}/campaign"
PROCLAIM = "/v1/elections/{name}/proclaim"
RESIGN = "/v1/elections/{name}/resign"
ELECTION_RENEW = "/v1/elections/{name}/renew"
OBSERVE = "/v1/elections/{name}/observe"
LOCKS = "/v1/locks"
EVENTS = "/v1/events"
STREAM = "/v1/events/stream"
AUDIT = "/v1/audit"
BACKUP = "/v1/backup"
FENCE = "/v1/fence/{resource}"
HEALTH = "/healthz"
READY = "/readyz"
METRICS = "/metrics"
DASHBOARD = "/"
SEMAPHORE = "/v1/semaphores/{name}"
SEM_ACQUIRE = "/v1/semaphores/{name}/acquire"
SEM_RENEW = "/v1/semaphores/{name}/renew"
SEM_RELEASE = "/v1/semaphores/{name}/release"
SEM_HISTORY = "/v1/semaphores/{name}/history"
SEMAPHORES = "/v1/semaphores"


def in_thread(fn, *args, **kwargs):
    """Runs fn in a thread; returns (thread, box) where box gets the result or the exception."""
    box = {}

    def run():
        try:
            box["result"] = fn(*args, **kwargs)
        except Exception as e:  # reported by the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def joined(t, box, what, contract):
    t.join(30)
    if t.is_alive():
        contract.fail(what, "did not finish within 30 s")
        return None
    if "error" in box:
        contract.fail(what, "raised %r" % (box["error"],))
        return None
    return box["result"]


def waiters(srv, name):
    """The lock's waiter count, on a connection of its own."""
    cl = Client(srv.port)
    try:
        return srv.waiters(name, cl)
    finally:
        cl.close()


def wait_for(predicate, what, contract, tries=1000, interval=0.01):
    """Polls predicate() (bounded); a finding when it never holds."""
    for _ in range(tries):
        if predicate():
            return True
        time.sleep(interval)
    contract.fail(what, "never happened")
    return False


# ---- the scenario -----------------------------------------------------------------------

class ContractTest(unittest.TestCase):
    """Runs the whole scenario once (setUpClass), then reports what it found."""

    @classmethod
    def setUpClass(cls):
        cls.c = Contract(OPENAPI)
        cls.servers = []
        cls.dirs = []
        try:
            for part in (cls.plain_server, cls.auth_server, cls.small_server, cls.shares_server, cls.guard_server):
                try:
                    part()
                except Exception:  # the scenario itself broke: report it with the rest
                    cls.c.fail(part.__name__, "scenario raised:\n" + traceback.format_exc())
        finally:
            for s in cls.servers:
                s.cleanup()
            for d in cls.dirs:
                shutil.rmtree(d, ignore_errors=True)

    @classmethod
    def server(cls, args=()):
        s = Server(extra_args=list(args))
        cls.servers.append(s)
        return s

    # -- one plain server: every operation, the ordinary statuses, and 503 while stopping
    @classmethod
    def plain_server(cls):
        c = cls.c
        srv = cls.server()
        a = Caller(c, srv.port)
        b = Caller(c, srv.port)
        try:
            cls._plain(c, srv, a, b)
        finally:
            a.close()
            b.close()

    @classmethod
    def _plain(cls, c, srv, a, b):
        # dashboard, health, metrics (and HEAD, which GET paths accept)
        a.call(DASHBOARD, "GET", expect=200)
        a.call(DASHBOARD, "HEAD", expect=200)
        a.call(DASHBOARD, "POST", body={}, expect=405)
        a.call(HEALTH, "GET", expect=200)
        a.call(HEALTH, "DELETE", expect=405)
        a.call(READY, "GET", expect=200)
        a.call(READY, "DELETE", expect=405)
        for path in ("/v1/nothing", "/v1", "/healthz/x", "/v1/fence", "/v1/lock/x/acquire", "/v1/locks//acquire"):
            a.call(None, "GET", path=path, expect=404)
            a.call(None, "POST", path=path, body={}, expect=404)
        st, _, text = a.call(METRICS, "GET", expect=200)
        a.call(METRICS, "POST", body={}, expect=405)
        if st == 200:
            names = {k.split("{")[0] for k in parse_metrics(text)}
            desc = c.doc["paths"][METRICS]["get"]["description"].split("With `--store etcd")[0]
            for name in re.findall(r"`(leasegate_[a-z_]+)`", desc):
                if name not in names:
                    c.fail("GET /metrics", "the contract names metric %s, the server has none" % name)

        # acquire: grant, reentry, retry with request_id, %2F, 409s, 400s, 404, 405, 415
        st, _, g = a.call(ACQUIRE, "POST", {"name": "orders/42"},
                          body={"owner": "billing-1", "ttl_ms": 15000, "metadata": {"host": "web-3", "pid": 4121},
                                "request_id": "rq-1"}, expect=200)
        lease = g["lease"] if st == 200 else str(uuid.uuid4())
        a.call(ACQUIRE, "POST", {"name": "orders/42"},
               body={"owner": "billing-1", "ttl_ms": 15000, "request_id": "rq-1"}, expect=200)  # replay
        a.call(ACQUIRE, "POST", {"name": "orders%2F42"}, body={"owner": "billing-1", "lease": lease},
               expect=200)  # reentry, count 2
        a.call(ACQUIRE, "POST", {"name": "orders/42"}, body={"owner": "billing-2"}, expect=409)  # lock_held
        a.call(ACQUIRE, "POST", {"name": "orders/42"}, body={"owner": "billing-2", "wait_ms": 100},
               expect=409)  # lock_held after waiting
        a.call(ACQUIRE, "POST", {"name": "orders/42"}, body={"owner": "billing-1", "lease": str(uuid.uuid4())},
               expect=409)  # not_holder (unknown)
        for body in ({"owner": "x", "ttl_ms": 5}, {"owner": "x", "ttl": 5}, {"owner": 7}, {},
                     {"owner": "x", "lease": "not-a-lease"}, {"owner": "x", "wait_ms": -1},
                     {"owner": "x", "ttl_ms": 86400001}, {"owner": "x", "wait_ms": 3600001}, {"owner": ""},
                     {"owner": "o" * 129}, {"owner": "a\u0001b"}, {"owner": "x", "request_id": ""},
                     {"owner": "x", "request_id": "r" * 65}, {"owner": "x", "metadata": [1]},
                     {"owner": "x", "metadata": None}, {"owner": "x", "metadata": {"m": "m" * 4100}},
                     {"owner": "x", "lease": None}, {"owner": "x", "ttl_ms": 1.5}):
            a.call(ACQUIRE, "POST", {"name": "bad/1"}, body=body, expect=400)
        a.call(ACQUIRE, "POST", {"name": "bad/1"}, raw=b'{"owner": "x",', expect=400)
        a.call(ACQUIRE, "POST", {"name": "bad/1"}, raw=b'[1]', expect=400)
        a.call(ACQUIRE, "POST", {"name": "bad%20name"}, body={"owner": "x"}, expect=400)
        a.call(ACQUIRE, "POST", {"name": ""}, body={"owner": "x"}, expect=404)
        a.call(ACQUIRE, "GET", {"name": "orders/42"}, expect=405)
        a.call(ACQUIRE, "POST", {"name": "bad/1"}, raw=b'{"owner":"x"}', headers={"Content-Type": "text/plain"},
               expect=415)
        cls.oversize(a, ACQUIRE, "/v1/locks/bad/1/acquire")

        # long-poll: a waiter queued behind the holder, granted by the release
        t, box = in_thread(b.call, ACQUIRE, "POST", {"name": "orders/42"},
                           body={"owner": "billing-2", "wait_ms": 20000, "metadata": {"why": "waiting"}},
                           expect=200)
        wait_for(lambda: waiters(srv, "orders/42") == 1, "a waiter queued on orders/42", c)
        st, _, one = a.call(LOCK, "GET", {"name": "orders%2F42"}, expect=200)  # held, with a queue of one
        if st == 200 and (one.get("name"), one.get("waiters"), len(one.get("queue", []))) != ("orders/42", 1, 1):
            c.fail("GET /v1/locks/orders%2F42", "not orders/42 with one waiter queued: %r" % (one,))
        st, _, idx = a.call(LOCK, "GET", {"name": "orders/42"}, expect=200)
        index = idx.get("index", 0) if st == 200 else 0
        # a watch that wakes on the next change (a renew)
        w = Caller(c, srv.port)
        wt, wbox = in_thread(w.call, LOCK, "GET", {"name": "orders/42"},
                             query={"index": index, "wait_ms": 20000}, expect=200)
        wait_for(lambda: srv.metric("leasegate_watches") == 1, "a watch waiting on orders/42", c)
        a.call(RENEW, "POST", {"name": "orders/42"}, body={"lease": lease}, expect=200)
        joined(wt, wbox, "the watch on orders/42", c)
        w.close()
        a.call(LOCK, "GET", {"name": "orders/42"}, query={"index": index + 10 ** 12, "wait_ms": 50}, expect=200)
        st, _, cur = a.call(LOCK, "GET", {"name": "orders/42"}, expect=200)
        if st == 200:  # a watch whose wait_ms passes: the same index
            a.call(LOCK, "GET", {"name": "orders/42"}, query={"index": cur["index"], "wait_ms": 50}, expect=200)
        a.call(RENEW, "POST", {"name": "orders/42"}, body={"lease": lease, "ttl_ms": 60000}, expect=200)
        a.call(RELEASE, "POST", {"name": "orders/42"}, body={"lease": lease}, expect=200)  # count 2 -> 1
        a.call(RELEASE, "POST", {"name": "orders/42"}, body={"lease": lease}, expect=200)  # released
        waited = joined(t, box, "the waiter on orders/42", c)
        a.call(RELEASE, "POST", {"name": "orders/42"}, body={"lease": lease}, expect=409)
        a.call(RENEW, "POST", {"name": "orders/42"}, body={"lease": lease}, expect=409)

        # a lease that runs out: a watch wakes, renew answers not_holder (expired), history says so
        st, _, short = a.call(ACQUIRE, "POST", {"name": "short"}, body={"owner": "brief", "ttl_ms": 100}, expect=200)
        if st == 200:
            st, _, s0 = a.call(LOCK, "GET", {"name": "short"}, expect=200)
            for _ in range(20):  # bounded: each watch waits at most 20 s, normally 0.1 s once
                if st != 200 or not s0.get("held"):
                    break
                st, _, s0 = a.call(LOCK, "GET", {"name": "short"}, query={"index": s0["index"], "wait_ms": 20000},
                                   expect=200)
            if st == 200 and s0.get("held"):
                c.fail("GET /v1/locks/short", "a 100 ms lease still held after the watches: %r" % (s0,))
            st, _, nh = a.call(RENEW, "POST", {"name": "short"}, body={"lease": short["lease"]}, expect=409)
            if st == 409 and nh.get("reason") != "expired":
                c.fail("POST /v1/locks/short/renew", "reason %r, not expired" % nh.get("reason"))
            st, _, hist = a.call(HISTORY, "GET", {"name": "short"}, expect=200)
            if st == 200 and [g.get("how") for g in hist.get("grants", [])] != ["expired"]:
                c.fail("GET /v1/locks/short/history", "not one expired grant: %r" % (hist,))

        # renew / release: the remaining statuses
        for tpl in (RENEW, RELEASE):
            a.call(tpl, "POST", {"name": "orders/42"}, body={"lease": "nope"}, expect=400)
            a.call(tpl, "POST", {"name": "orders/42"}, body={"lease": lease, "extra": 1}, expect=400)
            a.call(tpl, "POST", {"name": ""}, body={"lease": lease}, expect=404)
            a.call(tpl, "GET", {"name": "orders/42"}, expect=405)
            a.call(tpl, "POST", {"name": "orders/42"}, raw=b'{}', headers={"Content-Type": "text/plain"},
                   expect=415)
            cls.oversize(a, tpl, url_of(tpl, {"name": "orders/42"}))

        # getLock: free and unknown names, 400s, 404, 405
        a.call(LOCK, "GET", {"name": "never/granted"}, expect=200)
        a.call(LOCK, "HEAD", {"name": "never/granted"}, expect=200)
        a.call(LOCK, "GET", {"name": "orders/42"}, query={"index": -1}, expect=400)
        a.call(LOCK, "GET", {"name": "orders/42"}, query={"index": 1, "wait_ms": 10 ** 9}, expect=400)
        a.call(LOCK, "GET", {"name": "bad%20name"}, expect=400)
        a.call(LOCK, "GET", {"name": ""}, expect=404)
        a.call(LOCK, "POST", {"name": "orders/42"}, body={}, expect=405)

        # force-release: the waiter that got orders/42 is revoked; then nothing to revoke
        a.call(LOCK, "DELETE", {"name": "orders/42"}, expect=200)
        a.call(LOCK, "DELETE", {"name": "orders/42"}, expect=200)
        a.call(LOCK, "DELETE", {"name": "bad%20name"}, expect=400)
        a.call(LOCK, "DELETE", {"name": ""}, expect=404)
        if waited and waited[0] == 200:
            a.call(RENEW, "POST", {"name": "orders/42"}, body={"lease": waited[2]["lease"]}, expect=409)  # revoked
            a.call(FENCE, "POST", {"resource": "db/invoices"}, body={"token": waited[2]["token"]},
                   expect=409)  # revoked token

        cls._modes_and_semaphores(c, srv, a, b)
        cls._values(c, srv, a, b)
        cls._elections(c, srv, a, b)

        # history
        a.call(HISTORY, "GET", {"name": "orders/42"}, expect=200)
        a.call(HISTORY, "GET", {"name": "orders/42"}, query={"limit": 1}, expect=200)
        a.call(HISTORY, "GET", {"name": "orders/42"}, query={"limit": 0}, expect=400)
        a.call(HISTORY, "GET", {"name": "bad%20name"}, expect=400)
        a.call(HISTORY, "GET", {"name": ""}, expect=404)
        a.call(HISTORY, "POST", {"name": "orders/42"}, body={}, expect=405)

        # listing with paging
        for i in range(5):
            st, _, g2 = a.call(ACQUIRE, "POST", {"name": "page/%d" % i}, body={"owner": "pager", "ttl_ms": 60000},
                               expect=200)
        st, _, page = a.call(LOCKS, "GET", query={"prefix": "page/", "limit": 2}, expect=200)
        pages = 0
        while st == 200 and page.get("next") and pages < 10:
            st, _, page = a.call(LOCKS, "GET", query={"prefix": "page/", "limit": 2, "after": page["next"]},
                                 expect=200)
            pages += 1
        if pages != 2:
            c.fail("GET /v1/locks paging", "5 locks in pages of 2 took %d more pages, not 2" % pages)
        a.call(LOCKS, "GET", expect=200)
        a.call(LOCKS, "GET", query={"limit": 0}, expect=400)
        a.call(LOCKS, "GET", query={"prefix": "bad prefix"}, expect=400)
        a.call(LOCKS, "GET", query={"after": "bad after"}, expect=400)
        a.call(LOCKS, "POST", body={}, expect=405)

        # fence
        st, _, g3 = a.call(ACQUIRE, "POST", {"name": "fenced"}, body={"owner": "writer"}, expect=200)
        tok = g3["token"] if st == 200 else 1
        a.call(FENCE, "POST", {"resource": "db/invoices"}, body={"token": tok}, expect=200)
        a.call(FENCE, "POST", {"resource": "db%2Finvoices"}, body={"token": tok}, expect=200)
        a.call(FENCE, "POST", {"resource": "db/invoices"}, body={"token": 1}, expect=409)
        for res in ("db/acquire", "db/history", "release"):  # no action segment: any last segment
            a.call(FENCE, "POST", {"resource": res}, body={"token": tok}, expect=200)
        a.call(FENCE, "POST", {"resource": "db/invoices"}, body={"token": tok + 10 ** 9}, expect=400)
        a.call(FENCE, "POST", {"resource": "db/invoices"}, body={"token": "7"}, expect=400)
        a.call(FENCE, "POST", {"resource": ""}, body={"token": tok}, expect=404)
        a.call(FENCE, "GET", {"resource": "db/invoices"}, expect=405)
        a.call(FENCE, "POST", {"resource": "db/invoices"}, raw=b'{"token":1}',
               headers={"Content-Type": "application/x-www-form-urlencoded"}, expect=415)
        cls.oversize(a, FENCE, "/v1/fence/db/invoices")

        # audit
        st, _, rows = a.call(AUDIT, "GET", query={"limit": 7}, expect=200)
        pages = 0
        while st == 200 and rows.get("next") is not None and pages < 100:
            st, _, rows = a.call(AUDIT, "GET", query={"limit": 7, "after": rows["next"]}, expect=200)
            pages += 1
        if pages == 0 or pages == 100:
            c.fail("GET /v1/audit paging", "%d pages of 7 rows (expected a few, ending with next: null)" % pages)
        a.call(AUDIT, "GET", query={"lock": "orders/42"}, expect=200)
        a.call(AUDIT, "GET", query={"lock": "db/acquire"}, expect=200)  # a fence resource's rows
        a.call(AUDIT, "GET", query={"limit": 0}, expect=400)
        a.call(AUDIT, "GET", query={"lock": "bad name"}, expect=400)
        a.call(AUDIT, "GET", query={"key": ""}, expect=200)  # rows without a key
        a.call(AUDIT, "GET", query={"key": "nobody", "lock": "orders/42"}, expect=200)
        a.call(AUDIT, "GET", query={"key": "bad name"}, expect=400)
        a.call(AUDIT, "POST", body={}, expect=405)

        # backup: the database as one SQLite file (over etcd there is none here: 404)
        st, _, _ = a.call(BACKUP, "GET", expect=404 if harness.on_etcd() else 200)
        if st == 200 and not a.client.last_raw.startswith(b"SQLite format 3\0"):
            c.fail("GET /v1/backup", "not a SQLite database: %r" % a.client.last_raw[:32])
        a.call(BACKUP, "POST", body={}, expect=405)

        # events: a page, paging, a long-poll woken by a grant, one whose wait_ms passes, 400, 410
        st, _, ev = a.call(EVENTS, "GET", query={"after": 0, "limit": 3}, expect=200)
        if st == 200 and len(ev.get("events", [])) == 3:
            a.call(EVENTS, "GET", query={"after": ev["next"], "limit": 3}, expect=200)
        else:
            c.fail("GET /v1/events", "expected a full first page of 3 events: %r" % (ev,))
        st, _, now = a.call(EVENTS, "GET", query={"after": 0, "limit": 1000}, expect=200)
        latest = now.get("latest", 0) if st == 200 else 0
        a.call(EVENTS, "GET", query={"after": latest, "wait_ms": 50}, expect=200)  # empty at wait_ms
        lp = Caller(c, srv.port)
        lt, lbox = in_thread(lp.call, EVENTS, "GET", query={"after": latest, "wait_ms": 20000, "prefix": "poll/"},
                             expect=200)
        a.call(ACQUIRE, "POST", {"name": "other/x"}, body={"owner": "noise"}, expect=200)  # not its prefix
        a.call(ACQUIRE, "POST", {"name": "poll/x"}, body={"owner": "poller"}, expect=200)
        got = joined(lt, lbox, "the events long-poll", c)
        if got and got[0] == 200 and not [e for e in got[2]["events"] if e["lock"] == "poll/x"]:
            c.fail("GET /v1/events long-poll", "woke without the poll/x grant: %r" % (got[2],))
        lp.close()
        a.call(EVENTS, "GET", query={"limit": 0}, expect=400)
        a.call(EVENTS, "GET", query={"wait_ms": 10 ** 9}, expect=400)
        a.call(EVENTS, "GET", query={"prefix": "bad prefix"}, expect=400)
        a.call(EVENTS, "GET", query={"after": 1}, expect=410)  # from before this run
        a.call(EVENTS, "GET", query={"after": latest + 10 ** 9}, expect=410)  # never given
        a.call(EVENTS, "POST", body={}, expect=405)

        # the event stream: a few messages, then a resume with Last-Event-ID
        seqs = cls.read_stream(c, srv.port, "?after=0", count=4)
        if len(seqs) >= 2:
            again = cls.read_stream(c, srv.port, "", count=1, headers={"Last-Event-ID": str(seqs[1])})
            if again and again[0] <= seqs[1]:
                c.fail("GET /v1/events/stream (Last-Event-ID)", "resumed at %d, not after %d" % (again[0], seqs[1]))
        if len(seqs) >= 3:
            again = cls.read_stream(c, srv.port, "?after=%d" % seqs[2], count=1,
                                    headers={"Last-Event-ID": str(seqs[0])})
            if again and again[0] <= seqs[2]:
                c.fail("GET /v1/events/stream (after and Last-Event-ID)", "`after` did not win: %r" % again)
        cls.read_stream(c, srv.port, "?prefix=poll/", count=1)
        a.call(STREAM, "GET", headers={"Last-Event-ID": "abc"}, expect=400)
        a.call(STREAM, "GET", query={"after": -1}, expect=400)
        a.call(STREAM, "GET", query={"after": 1}, expect=410)
        a.call(STREAM, "POST", body={}, expect=405)

        # HEAD on every GET operation (Allow names it with GET)
        for tpl, params in ((DASHBOARD, None), (HEALTH, None), (READY, None), (METRICS, None), (LOCKS, None),
                            (LOCK, {"name": "orders/42"}), (HISTORY, {"name": "orders/42"}), (EVENTS, None),
                            (STREAM, None), (AUDIT, None), (SEMAPHORES, None), (SEMAPHORE, {"name": "crawl/slots"}),
                            (SEM_HISTORY, {"name": "crawl/slots"}), (BACKUP, None)):
            a.call(tpl, "HEAD", params, expect=404 if tpl == BACKUP and harness.on_etcd() else 200)

        # 414 (a target over 8 KiB) and 431 (a head over 12 KiB) on every operation
        for tpl, method in c.operations():
            path = url_of(tpl, {"name": "x/1", "resource": "x/1"}).encode()
            body = b"" if method != "POST" else b"Content-Type: application/json\r\nContent-Length: 2\r\n"
            end = b"\r\n" + (b"{}" if method == "POST" else b"")
            a.raw(tpl, method, b"%s %s?pad=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s" % (method.encode(), path, b"a" * 9000,
                                                                                body, end),
                  expect=414, label=path.decode() + "?pad=(9000 bytes)")
            a.raw(tpl, method, b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: %s\r\n%s%s" % (method.encode(), path,
                                                                                    b"p" * 13000, body, end),
                  expect=431, label=path.decode() + " with a 13 KB header")

        # 421 (a Host this server does not answer for) on every operation, before anything
        # else; 403 for a write from another origin
        for tpl, method in c.operations():
            path = url_of(tpl, {"name": "x/1", "resource": "x/1"}).encode()
            body = b"" if method != "POST" else b"Content-Type: application/json\r\nContent-Length: 2\r\n"
            end = b"\r\n" + (b"{}" if method == "POST" else b"")
            a.raw(tpl, method, b"%s %s HTTP/1.1\r\nHost: rebind.test:80\r\n%s%s" % (method.encode(), path, body, end),
                  expect=421, label=path.decode() + " for Host rebind.test")
        origin = {"Origin": "http://rebind.test"}
        a.call(ACQUIRE, "POST", {"name": "o/1"}, body={"owner": "page"}, headers=origin, expect=403)
        a.call(RENEW, "POST", {"name": "o/1"}, body={"lease": str(uuid.uuid4())}, headers=origin, expect=403)
        a.call(RELEASE, "POST", {"name": "o/1"}, body={"lease": str(uuid.uuid4())}, headers=origin, expect=403)
        a.call(LOCK, "DELETE", {"name": "o/1"}, headers=origin, expect=403)
        a.call(FENCE, "POST", {"resource": "o/1"}, body={"token": 1}, headers={"Origin": "null"}, expect=403)

        # stopping: a waiter gets 503 (with Retry-After); a watch and an events long-poll are
        # answered (200); an open event stream ends
        a.call(ACQUIRE, "POST", {"name": "stop/1"}, body={"owner": "holder"}, expect=200)
        sw = Caller(c, srv.port)
        st_t, st_box = in_thread(sw.call, ACQUIRE, "POST", {"name": "stop/1"},
                                 body={"owner": "late", "wait_ms": 30000}, expect=503)
        wait_for(lambda: waiters(srv, "stop/1") == 1, "a waiter queued on stop/1", c)
        sv = Caller(c, srv.port)
        sv_t, sv_box = in_thread(sv.call, LOCK, "GET", {"name": "stop/1"},
                                 query={"index": 2 ** 62, "wait_ms": 60000}, expect=200, timeout=20)
        joined(sv_t, sv_box, "a watch with an index from the future", c)
        st, _, idx = a.call(LOCK, "GET", {"name": "stop/1"}, expect=200)
        wv = Caller(c, srv.port)
        wv_t, wv_box = in_thread(wv.call, LOCK, "GET", {"name": "stop/1"},
                                 query={"index": idx.get("index", 0), "wait_ms": 30000})
        wait_for(lambda: srv.metric("leasegate_watches") == 1, "a watch waiting on stop/1", c)
        st, _, ev = a.call(EVENTS, "GET", query={"after": 0, "limit": 1}, expect=200)
        ep = Caller(c, srv.port)
        ep_t, ep_box = in_thread(ep.call, EVENTS, "GET",
                                 query={"after": ev.get("latest", 0), "wait_ms": 30000, "prefix": "none/"},
                                 expect=200)
        # the waiter, the watch and the long-poll are each held outside libmicrohttpd
        wait_for(lambda: srv.metric("leasegate_connections_parked") == 3, "an events long-poll waiting", c)
        sse = EventStream(srv.port, "?prefix=none/")
        c.check(STREAM, "GET", sse.status, sse.headers, None, where="GET /v1/events/stream at stop", stream=True)
        first = sse.message()  # the retry hint
        a.close()
        b.close()
        rc = srv.stop()
        joined(st_t, st_box, "the waiter at stop", c)
        joined(wv_t, wv_box, "the watch at stop", c)
        joined(ep_t, ep_box, "the events long-poll at stop", c)
        try:
            rest = sse.message()
            if first is None or "retry" not in first or rest is not None:
                c.fail("GET /v1/events/stream at stop", "did not end after its hint: %r, %r" % (first, rest))
        except (socket.timeout, http.client.HTTPException, OSError) as e:
            c.fail("GET /v1/events/stream at stop", "did not end cleanly: %r" % (e,))
        for x in (sw, sv, wv, ep):
            x.close()
        sse.close()
        if rc != 0:
            c.fail("SIGTERM", "the server exited with %r" % rc)

    @classmethod
    def _modes_and_semaphores(cls, c, srv, a, b):
        """Readers and writers, lock-delay, and every semaphore operation."""
        # readers share; a writer behind them is held; a reader behind the writer waits (no barging)
        st, _, r1 = a.call(ACQUIRE, "POST", {"name": "rw/1"}, body={"owner": "reader-1", "mode": "read"}, expect=200)
        a.call(ACQUIRE, "POST", {"name": "rw/1"}, body={"owner": "reader-2", "mode": "read", "lock_delay_ms": 0},
               expect=200)
        a.call(ACQUIRE, "POST", {"name": "rw/1"}, body={"owner": "writer"}, expect=409)  # lock_held, two holders
        a.call(LOCK, "GET", {"name": "rw/1"}, expect=200)
        t, box = in_thread(b.call, ACQUIRE, "POST", {"name": "rw/1"}, body={"owner": "writer", "wait_ms": 3000},
                           expect=409)
        wait_for(lambda: waiters(srv, "rw/1") == 1, "a writer queued on rw/1", c)
        a.call(ACQUIRE, "POST", {"name": "rw/1"}, body={"owner": "reader-3", "mode": "read"}, expect=409)
        a.call(LOCK, "GET", {"name": "rw/1"}, expect=200)  # a queue with a mode
        joined(t, box, "the writer behind the readers", c)
        if st == 200:
            a.call(ACQUIRE, "POST", {"name": "rw/1"}, body={"owner": "reader-1", "lease": r1["lease"]},
                   expect=200)  # reentry keeps read
            a.call(ACQUIRE, "POST", {"name": "rw/1"}, body={"owner": "reader-1", "lease": r1["lease"],
                                                            "mode": "write"}, expect=409)  # mode_conflict
        for body in ({"owner": "x", "mode": "exclusive"}, {"owner": "x", "mode": 1},
                     {"owner": "x", "lock_delay_ms": -1}, {"owner": "x", "lock_delay_ms": 60001}):
            a.call(ACQUIRE, "POST", {"name": "bad/1"}, body=body, expect=400)
        a.call(LOCK, "DELETE", {"name": "rw/1"}, expect=200)  # revokes both readers
        # lock-delay: the lease expires, acquires get lock_held with delay_until_ms and holder null
        st, _, d = a.call(ACQUIRE, "POST", {"name": "delayed"},
                          body={"owner": "gone", "ttl_ms": 100, "lock_delay_ms": 60000}, expect=200)
        if st == 200:
            st, _, s0 = a.call(LOCK, "GET", {"name": "delayed"}, expect=200)
            for _ in range(20):  # bounded watches, as for "short" above
                if st != 200 or not s0.get("held"):
                    break
                st, _, s0 = a.call(LOCK, "GET", {"name": "delayed"},
                                   query={"index": s0["index"], "wait_ms": 20000}, expect=200)
            st, _, held = a.call(ACQUIRE, "POST", {"name": "delayed"}, body={"owner": "next"}, expect=409)
            if st == 409 and (held.get("holder") is not None or not held.get("delay_until_ms")):
                c.fail("POST /v1/locks/delayed/acquire", "no delay in the 409: %r" % (held,))

        # semaphores: permits, full, limit mismatch, a waiter granted by a release, renew, history, listing
        grants = []
        for i in range(2):
            st, _, g = a.call(SEM_ACQUIRE, "POST", {"name": "crawl/slots"},
                              body={"owner": "crawler-%d" % i, "limit": 2, "ttl_ms": 15000, "request_id": "sr-%d" % i,
                                    "metadata": {"n": i}}, expect=200)
            if st == 200:
                grants.append(g)
        a.call(SEM_ACQUIRE, "POST", {"name": "crawl/slots"}, body={"owner": "crawler-0", "limit": 2,
                                                                   "request_id": "sr-0"}, expect=200)  # replay
        a.call(SEM_ACQUIRE, "POST", {"name": "crawl/slots"}, body={"owner": "crawler-9", "limit": 2},
               expect=409)  # semaphore_full
        a.call(SEM_ACQUIRE, "POST", {"name": "crawl/slots"}, body={"owner": "crawler-9", "limit": 3},
               expect=409)  # limit_mismatch
        a.call(SEM_ACQUIRE, "POST", {"name": "wide/slots"}, body={"owner": "bulk", "limit": 3, "permits": 2},
               expect=200)  # a lease of two permits
        a.call(SEM_ACQUIRE, "POST", {"name": "wide/slots"}, body={"owner": "bulk", "limit": 3, "permits": 2},
               expect=409)  # one is free
        a.call(SEM_ACQUIRE, "POST", {"name": "wide/slots"}, body={"owner": "bulk", "limit": 3, "permits": 4},
               expect=400)  # more than the limit
        a.call(SEMAPHORE, "GET", {"name": "wide/slots"}, expect=200)
        for body in ({"owner": "x"}, {"owner": "x", "limit": 0}, {"owner": "x", "limit": 10001},
                     {"owner": "x", "limit": 2, "lease": str(uuid.uuid4())}, {"owner": "x", "limit": 2, "mode": "read"},
                     {"owner": "x", "limit": 2, "lock_delay_ms": 5}, {"limit": 2}, {"owner": "x", "limit": "2"}):
            a.call(SEM_ACQUIRE, "POST", {"name": "bad/1"}, body=body, expect=400)
        a.call(SEM_ACQUIRE, "POST", {"name": "bad%20name"}, body={"owner": "x", "limit": 1}, expect=400)
        a.call(SEM_ACQUIRE, "POST", {"name": ""}, body={"owner": "x", "limit": 1}, expect=404)
        a.call(SEM_ACQUIRE, "GET", {"name": "crawl/slots"}, expect=405)
        a.call(SEM_ACQUIRE, "POST", {"name": "bad/1"}, raw=b'{"owner":"x","limit":1}',
               headers={"Content-Type": "text/plain"}, expect=415)
        cls.oversize(a, SEM_ACQUIRE, "/v1/semaphores/bad/1/acquire")
        t, box = in_thread(b.call, SEM_ACQUIRE, "POST", {"name": "crawl/slots"},
                           body={"owner": "crawler-2", "limit": 2, "wait_ms": 20000}, expect=200)
        wait_for(lambda: a.call(SEMAPHORE, "GET", {"name": "crawl/slots"}, expect=200)[2].get("waiters") == 1,
                 "a waiter queued on crawl/slots", c)
        a.call(SEMAPHORE, "GET", {"name": "crawl/slots"}, expect=200)
        if grants:
            a.call(SEM_RENEW, "POST", {"name": "crawl/slots"}, body={"lease": grants[0]["lease"], "ttl_ms": 20000},
                   expect=200)
            a.call(SEM_RELEASE, "POST", {"name": "crawl/slots"}, body={"lease": grants[0]["lease"]}, expect=200)
            a.call(SEM_RELEASE, "POST", {"name": "crawl/slots"}, body={"lease": grants[0]["lease"]}, expect=409)
            a.call(SEM_RENEW, "POST", {"name": "crawl/slots"}, body={"lease": grants[0]["lease"]}, expect=409)
            if len(grants) > 1:
                a.call(RENEW, "POST", {"name": "crawl/slots"}, body={"lease": grants[1]["lease"]},
                       expect=409)  # a permit holds no lock
        joined(t, box, "the waiter on crawl/slots", c)
        for tpl in (SEM_RENEW, SEM_RELEASE):
            a.call(tpl, "POST", {"name": "crawl/slots"}, body={"lease": "nope"}, expect=400)
            a.call(tpl, "POST", {"name": "crawl/slots"}, body={"lease": str(uuid.uuid4()), "extra": 1}, expect=400)
            a.call(tpl, "POST", {"name": ""}, body={"lease": str(uuid.uuid4())}, expect=404)
            a.call(tpl, "GET", {"name": "crawl/slots"}, expect=405)
            a.call(tpl, "POST", {"name": "crawl/slots"}, raw=b'{}', headers={"Content-Type": "text/plain"},
                   expect=415)
            cls.oversize(a, tpl, url_of(tpl, {"name": "crawl/slots"}))
        a.call(SEMAPHORE, "GET", {"name": "never/taken"}, expect=200)
        a.call(SEMAPHORE, "GET", {"name": "bad%20name"}, expect=400)
        a.call(SEMAPHORE, "GET", {"name": ""}, expect=404)
        # forceReleaseSemaphore: one permit by token, a token that holds none, a bad one, all
        held = a.call(SEMAPHORE, "GET", {"name": "crawl/slots"}, expect=200)[2].get("holders") or []
        if held:
            a.call(SEMAPHORE, "DELETE", {"name": "crawl/slots"}, query={"token": held[0]["token"]}, expect=200)
            a.call(SEMAPHORE, "DELETE", {"name": "crawl/slots"}, query={"token": held[0]["token"]}, expect=409)
        a.call(SEMAPHORE, "DELETE", {"name": "crawl/slots"}, query={"token": "x"}, expect=400)
        a.call(SEMAPHORE, "DELETE", {"name": "crawl/slots"}, expect=200)
        a.call(SEMAPHORE, "DELETE", {"name": "bad%20name"}, expect=400)
        a.call(SEMAPHORE, "PUT", {"name": "crawl/slots"}, body={}, expect=405)
        a.call(SEM_HISTORY, "GET", {"name": "crawl/slots"}, expect=200)
        a.call(SEM_HISTORY, "GET", {"name": "crawl/slots"}, query={"limit": 0}, expect=400)
        a.call(SEM_HISTORY, "GET", {"name": ""}, expect=404)
        a.call(SEM_HISTORY, "POST", {"name": "crawl/slots"}, body={}, expect=405)
        a.call(SEMAPHORES, "GET", expect=200)
        a.call(SEMAPHORES, "GET", query={"prefix": "crawl/", "limit": 1}, expect=200)
        a.call(SEMAPHORES, "GET", query={"limit": 0}, expect=400)
        a.call(SEMAPHORES, "GET", query={"prefix": "bad prefix"}, expect=400)
        a.call(SEMAPHORES, "POST", body={}, expect=405)

    @classmethod
    def _values(cls, c, srv, a, b):
        """A lock's value: written by its writer (with and without if_version), read, refused to a
        released lease (stale_token), on a stale version (version_mismatch), too large (413)."""
        a.call(VALUE, "GET", {"name": "cfg/1"}, expect=200)  # never written
        st, _, w = a.call(ACQUIRE, "POST", {"name": "cfg/1"}, body={"owner": "writer", "ttl_ms": 60000}, expect=200)
        if st == 200:
            a.call(VALUE, "PUT", {"name": "cfg/1"}, body={"lease": w["lease"], "value": {"step": 1}}, expect=200)
            a.call(VALUE, "PUT", {"name": "cfg/1"}, body={"lease": w["lease"], "value": [1, "two"], "if_version": 1},
                   expect=200)
            a.call(VALUE, "PUT", {"name": "cfg/1"}, body={"lease": w["lease"], "value": 3, "if_version": 1},
                   expect=409)  # version_mismatch
            a.call(VALUE, "PUT", {"name": "cfg/1"}, body={"lease": w["lease"], "value": "x" * 5000}, expect=413)
            a.call(VALUE, "GET", {"name": "cfg/1"}, expect=200)
            a.call(VALUE, "HEAD", {"name": "cfg/1"}, expect=200)
            a.call(LOCK, "GET", {"name": "cfg/1"}, expect=200)
            a.call(HISTORY, "GET", {"name": "cfg/1"}, expect=200)
            a.call(RELEASE, "POST", {"name": "cfg/1"}, body={"lease": w["lease"]}, expect=200)
            a.call(VALUE, "PUT", {"name": "cfg/1"}, body={"lease": w["lease"], "value": None}, expect=409)
        for body in ({"value": 1}, {"lease": str(uuid.uuid4())}, {"lease": "nope", "value": 1},
                     {"lease": str(uuid.uuid4()), "value": 1, "if_version": -1},
                     {"lease": str(uuid.uuid4()), "value": 1, "extra": 1}):
            a.call(VALUE, "PUT", {"name": "cfg/1"}, body=body, expect=400)
        a.call(VALUE, "PUT", {"name": "bad%20name"}, body={"lease": str(uuid.uuid4()), "value": 1}, expect=400)
        a.call(VALUE, "PUT", {"name": ""}, body={"lease": str(uuid.uuid4()), "value": 1}, expect=404)
        a.call(VALUE, "PUT", {"name": "cfg/1"}, raw=b'{}', headers={"Content-Type": "text/plain"}, expect=415)
        a.call(VALUE, "POST", {"name": "cfg/1"}, body={}, expect=405)
        a.call(VALUE, "GET", {"name": "bad%20name"}, expect=400)
        a.call(VALUE, "GET", {"name": ""}, expect=404)
        a.call(ACQUIRE, "POST", {"name": "cfg/value"}, body={"owner": "x"}, expect=400)  # a reserved last segment

    @classmethod
    def _elections(cls, c, srv, a, b):
        """Every election operation: a campaign that leads, one that waits and leads after a
        resignation, one refused (not_leader); proclaim, renew, resign (and their refusals),
        the state with a watch, the listing, the observers' stream, an admin's revocation."""
        a.call(ELECTION, "GET", {"name": "svc/sched"}, expect=200)  # never campaigned for
        st, _, l1 = a.call(CAMPAIGN, "POST", {"name": "svc/sched"},
                           body={"owner": "s-1", "value": {"url": "http://a"}, "ttl_ms": 20000, "request_id": "c-1"},
                           expect=200)
        a.call(CAMPAIGN, "POST", {"name": "svc/sched"}, body={"owner": "s-1", "request_id": "c-1"}, expect=200)
        a.call(CAMPAIGN, "POST", {"name": "svc/sched"}, body={"owner": "s-2"}, expect=409)  # not_leader
        t, box = in_thread(b.call, CAMPAIGN, "POST", {"name": "svc/sched"},
                           body={"owner": "s-3", "value": [3], "wait_ms": 20000}, expect=200)
        wait_for(lambda: a.call(ELECTION, "GET", {"name": "svc/sched"}, expect=200)[2].get("candidates_total") == 1,
                 "a candidate queued on svc/sched", c)
        st2, _, state = a.call(ELECTION, "GET", {"name": "svc/sched"}, expect=200)
        if st2 == 200:
            a.call(ELECTION, "GET", {"name": "svc/sched"}, query={"index": state["index"], "wait_ms": 50}, expect=200)
        a.call(ELECTIONS, "GET", query={"prefix": "svc/", "limit": 10}, expect=200)
        a.call(ELECTIONS, "GET", query={"limit": 0}, expect=400)
        a.call(ELECTIONS, "POST", body={}, expect=405)
        cls.read_observe(c, srv.port, "svc/sched")
        if st == 200:
            a.call(PROCLAIM, "POST", {"name": "svc/sched"}, body={"lease": l1["lease"], "value": {"url": "http://b"}},
                   expect=200)
            a.call(PROCLAIM, "POST", {"name": "svc/sched"}, body={"lease": l1["lease"], "value": "x" * 5000},
                   expect=413)
            a.call(ELECTION_RENEW, "POST", {"name": "svc/sched"}, body={"lease": l1["lease"], "ttl_ms": 20000},
                   expect=200)
            a.call(RESIGN, "POST", {"name": "svc/sched"}, body={"lease": l1["lease"]}, expect=200)
            a.call(RESIGN, "POST", {"name": "svc/sched"}, body={"lease": l1["lease"]}, expect=409)  # not_leader
            a.call(PROCLAIM, "POST", {"name": "svc/sched"}, body={"lease": l1["lease"], "value": 1}, expect=409)
            a.call(ELECTION_RENEW, "POST", {"name": "svc/sched"}, body={"lease": l1["lease"]}, expect=409)
        joined(t, box, "the candidate on svc/sched", c)
        a.call(ELECTION, "DELETE", {"name": "svc/sched"}, expect=200)  # revokes the second leader
        for body in ({"value": 1}, {"owner": "x", "lease": str(uuid.uuid4())}, {"owner": "x", "wait_ms": -1},
                     {"owner": "x", "mode": "read"}):
            a.call(CAMPAIGN, "POST", {"name": "svc/bad"}, body=body, expect=400)
        a.call(CAMPAIGN, "POST", {"name": "svc/bad"}, body={"owner": "x", "value": "x" * 5000}, expect=413)
        a.call(CAMPAIGN, "POST", {"name": "svc/observe"}, body={"owner": "x"}, expect=400)  # an action word
        a.call(CAMPAIGN, "POST", {"name": ""}, body={"owner": "x"}, expect=404)
        a.call(CAMPAIGN, "GET", {"name": "svc/bad"}, expect=405)
        a.call(CAMPAIGN, "POST", {"name": "svc/bad"}, raw=b'{"owner":"x"}', headers={"Content-Type": "text/plain"},
               expect=415)
        for tpl in (PROCLAIM, RESIGN, ELECTION_RENEW):
            a.call(tpl, "POST", {"name": "svc/bad"}, body={"lease": "nope", "value": 1}, expect=400)
            a.call(tpl, "POST", {"name": ""}, body={"lease": str(uuid.uuid4())}, expect=404)
            a.call(tpl, "GET", {"name": "svc/bad"}, expect=405)
            a.call(tpl, "POST", {"name": "svc/bad"}, raw=b'{}', headers={"Content-Type": "text/plain"}, expect=415)
        a.call(PROCLAIM, "POST", {"name": "svc/bad"}, body={"lease": str(uuid.uuid4())}, expect=400)  # no value
        a.call(ELECTION, "GET", {"name": "bad%20name"}, expect=400)
        a.call(ELECTION, "GET", {"name": ""}, expect=404)
        a.call(ELECTION, "POST", {"name": "svc/sched"}, body={}, expect=405)
        a.call(OBSERVE, "GET", {"name": "svc/sched"}, headers={"Last-Event-ID": "abc"}, expect=400)
        a.call(OBSERVE, "GET", {"name": "svc/sched"}, headers={"Last-Event-ID": "1"}, expect=410)
        a.call(OBSERVE, "POST", {"name": "svc/sched"}, body={}, expect=405)

    @classmethod
    def read_observe(cls, c, port, name):
        """The observers' stream: its head, the retry hint, and the election's state first."""
        s = EventStream(port, path="/v1/elections/%s/observe" % name)
        where = "GET /v1/elections/%s/observe -> %d" % (name, s.status)
        try:
            c.check(OBSERVE, "GET", s.status, s.headers, None, where=where, stream=True)
            first = s.message()
            if not first or first.get("retry") != "1000":
                c.fail(where, "the stream does not start with retry: 1000: %r" % first)
            m = s.message()
            if not m or m.get("event") not in ("leader", "vacant") or not m.get("id", "").isdigit():
                c.fail(where, "the first message is not the election's state with an id: %r" % m)
            else:
                data = json.loads(m["data"])
                want = {"owner", "term", "value"} if m["event"] == "leader" else {"reason", "previous_term"}
                if set(data) != want:
                    c.fail(where, "%s has fields %r, not %r" % (m["event"], sorted(data), sorted(want)))
        except (socket.timeout, ValueError) as e:
            c.fail(where, "no state message: %r" % e)
        finally:
            s.close()

    @classmethod
    def oversize(cls, caller, template, path):
        """413: a body declared larger than 64 KiB, refused before it is read."""
        caller.raw(template, "POST",
                   b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 70000\r\n\r\n{", expect=413, label=path + " (70000-byte body)")

    @classmethod
    def read_stream(cls, c, port, query, count, headers=None, key=None):
        """Opens the stream, checks its head and `count` event messages; returns their seqs."""
        hdrs = dict(headers or {})
        if key:
            hdrs["Authorization"] = "Bearer " + key
        s = EventStream(port, query, hdrs)
        seqs = []
        where = "GET /v1/events/stream%s -> %d" % (query, s.status)
        try:
            c.check(STREAM, "GET", s.status, s.headers, None, where=where, stream=True)
            if s.status != 200:
                c.fail(where, "the scenario expected 200 (%r)" % s.resp.read(300))
                return seqs
            first = s.message()
            if not first or first.get("retry") != "1000":
                c.fail(where, "the stream does not start with the retry: 1000 hint the contract describes: %r"
                       % first)
            event_schema = c.component_schema("Event")
            while len(seqs) < count:
                m = s.message()
                if m is None:
                    c.fail(where, "the stream ended after %d events" % len(seqs))
                    break
                try:
                    data = json.loads(m.get("data", ""))
                except ValueError:
                    c.fail(where, "a message's data is not JSON: %r" % m)
                    continue
                for e in c.schema_errors(event_schema, data) + \
                        ["undeclared field " + f for f in c.undeclared_fields(event_schema, data)]:
                    c.fail(where, "event does not match Event: %s (%r)" % (e, data))
                if m.get("id") != str(data.get("seq")):
                    c.fail(where, "id %r is not the event's seq %r" % (m.get("id"), data.get("seq")))
                seqs.append(data.get("seq", 0))
        except socket.timeout:
            c.fail(where, "no event within 10 s (got %d of %d)" % (len(seqs), count))
        finally:
            s.close()
        return seqs

    # -- keys: 401, 403, 429, and what --auth-metrics closes
    @classmethod
    def auth_server(cls):
        c = cls.c
        d = tempfile.mkdtemp(prefix="leasegate-contract-")
        cls.dirs.append(d)
        client_key, l1 = new_key("alice", "client", "t/", "max_held=1")
        fence_key, l2 = new_key("storage", "fence", "t/")
        admin_key, l3 = new_key("root", "admin")
        keys = os.path.join(d, "keys")
        with open(keys, "w") as f:
            f.write("%s\n%s\n%s\n" % (l1, l2, l3))
        srv = cls.server(["--auth-file", keys, "--auth-metrics"])
        nokey = Caller(c, srv.port)
        alice = Caller(c, srv.port, client_key)
        storage = Caller(c, srv.port, fence_key)
        root = Caller(c, srv.port, admin_key)
        bad = Caller(c, srv.port, "lgk_" + "A" * 43)
        try:
            st, _, g = alice.call(ACQUIRE, "POST", {"name": "t/1"}, body={"owner": "alice"}, expect=200)
            lease = g["lease"] if st == 200 else str(uuid.uuid4())
            tok = g["token"] if st == 200 else 1
            alice.call(ACQUIRE, "POST", {"name": "t/2"}, body={"owner": "alice"}, expect=429)  # max_held=1
            alice.call(SEM_ACQUIRE, "POST", {"name": "t/s"}, body={"owner": "alice", "limit": 5},
                       expect=429)  # a permit counts as one of max_held
            requests = [
                (ACQUIRE, "POST", {"name": "t/1"}, {"owner": "x"}, "x/1"),
                (RENEW, "POST", {"name": "t/1"}, {"lease": lease}, "x/1"),
                (RELEASE, "POST", {"name": "t/1"}, {"lease": lease}, "x/1"),
                (LOCK, "GET", {"name": "t/1"}, None, "x/1"),
                (LOCK, "DELETE", {"name": "t/1"}, None, None),
                (HISTORY, "GET", {"name": "t/1"}, None, "x/1"),
                (LOCKS, "GET", None, None, None),
                (SEM_ACQUIRE, "POST", {"name": "t/s"}, {"owner": "x", "limit": 1}, "x/1"),
                (SEM_RENEW, "POST", {"name": "t/s"}, {"lease": lease}, "x/1"),
                (SEM_RELEASE, "POST", {"name": "t/s"}, {"lease": lease}, "x/1"),
                (SEMAPHORE, "GET", {"name": "t/s"}, None, "x/1"),
                (SEMAPHORE, "DELETE", {"name": "t/s"}, None, None),
                (SEM_HISTORY, "GET", {"name": "t/s"}, None, "x/1"),
                (SEMAPHORES, "GET", None, None, None),
                (EVENTS, "GET", None, None, None),
                (STREAM, "GET", None, None, None),
                (AUDIT, "GET", None, None, None),
                (BACKUP, "GET", None, None, None),
                (FENCE, "POST", {"resource": "t/1"}, {"token": tok}, None),
                (HEALTH, "GET", None, None, None),
                (METRICS, "GET", None, None, None),
            ]
            for tpl, method, params, body, other in requests:
                nokey.call(tpl, method, params, body=body, expect=401)
                bad.call(tpl, method, params, body=body, expect=401)
                if tpl == FENCE:
                    alice.call(tpl, method, params, body=body, expect=403)  # role client
                elif tpl in (HEALTH, METRICS):
                    alice.call(tpl, method, params, body=body, expect=200)  # any key
                elif tpl in (LOCK, SEMAPHORE) and method == "DELETE" or tpl in (AUDIT, BACKUP):
                    alice.call(tpl, method, params, body=body, expect=403)  # admin only
                elif other:
                    alice.call(tpl, method, {"name": other}, body=body, expect=403)  # outside its prefixes
                    storage.call(tpl, method, params, body=body, expect=403)  # role fence
                else:
                    alice.call(tpl, method, params, body=body, expect=403)  # listing without ?prefix=
            alice.call(LOCKS, "GET", query={"prefix": "t/"}, expect=200)
            alice.call(EVENTS, "GET", query={"prefix": "t/"}, expect=200)
            cls.read_stream(c, srv.port, "?prefix=t/", count=1, key=client_key)
            alice.call(HISTORY, "GET", {"name": "t/1"}, expect=200)
            storage.call(FENCE, "POST", {"resource": "t/1"}, body={"token": tok}, expect=200)
            storage.call(FENCE, "POST", {"resource": "x/1"}, body={"token": tok}, expect=403)
            root.call(AUDIT, "GET", expect=200)
            root.call(BACKUP, "GET", expect=404 if harness.on_etcd() else 200)
            root.call(LOCK, "DELETE", {"name": "t/1"}, expect=200)
            nokey.call(DASHBOARD, "GET", expect=200)  # never needs a key
            nokey.call(READY, "GET", expect=200)  # nor does readiness (a load balancer asks it)
        finally:
            for x in (nokey, alice, storage, root, bad):
                x.close()

    # -- the trail and the events off, small limits: 404s and 503s
    @classmethod
    def small_server(cls):
        c = cls.c
        srv = cls.server(["--audit-keep", "0", "--events-keep", "0", "--max-fences", "1",
                          "--max-waiters-per-lock", "1"])
        a = Caller(c, srv.port)
        b = Caller(c, srv.port)
        try:
            a.call(HISTORY, "GET", {"name": "x"}, expect=404)
            a.call(AUDIT, "GET", expect=404)
            a.call(EVENTS, "GET", expect=404)
            a.call(STREAM, "GET", expect=404)
            st, _, g = a.call(ACQUIRE, "POST", {"name": "busy"}, body={"owner": "h"}, expect=200)
            t, box = in_thread(b.call, ACQUIRE, "POST", {"name": "busy"}, body={"owner": "w", "wait_ms": 20000},
                               expect=200)
            wait_for(lambda: waiters(srv, "busy") == 1, "a waiter queued on busy", c)
            a.call(ACQUIRE, "POST", {"name": "busy"}, body={"owner": "w2", "wait_ms": 20000}, expect=503)
            if st == 200:
                a.call(RELEASE, "POST", {"name": "busy"}, body={"lease": g["lease"]}, expect=200)
            joined(t, box, "the waiter on busy", c)
            tok = g["token"] if st == 200 else 1
            a.call(FENCE, "POST", {"resource": "r1"}, body={"token": tok}, expect=200)
            a.call(FENCE, "POST", {"resource": "r2"}, body={"token": tok}, expect=503)  # --max-fences 1
            st, _, p = a.call(SEM_ACQUIRE, "POST", {"name": "s"}, body={"owner": "h", "limit": 1}, expect=200)
            t, box = in_thread(b.call, SEM_ACQUIRE, "POST", {"name": "s"},
                               body={"owner": "w", "limit": 1, "wait_ms": 20000}, expect=200)
            wait_for(lambda: a.call(SEMAPHORE, "GET", {"name": "s"}, expect=200)[2].get("waiters") == 1,
                     "a waiter queued on semaphore s", c)
            a.call(SEM_ACQUIRE, "POST", {"name": "s"}, body={"owner": "w2", "limit": 1, "wait_ms": 20000},
                   expect=503)  # --max-waiters-per-lock 1
            if st == 200:
                a.call(SEM_RELEASE, "POST", {"name": "s"}, body={"lease": p["lease"]}, expect=200)
            joined(t, box, "the waiter on semaphore s", c)
            a.call(SEM_HISTORY, "GET", {"name": "s"}, expect=404)
        finally:
            a.close()
            b.close()

    # -- small shares per peer: 429 peer_limit for new names, new fence resources, and
    #    requests held open (long-polls, watches, streams)
    @classmethod
    def shares_server(cls):
        c = cls.c
        srv = cls.server(["--peer-max-names", "2", "--peer-max-fences", "1", "--peer-max-polls", "1"])
        a = Caller(c, srv.port)
        p = Caller(c, srv.port)
        try:
            st, _, g = a.call(ACQUIRE, "POST", {"name": "s/1"}, body={"owner": "o"}, expect=200)
            st2, _, g2 = a.call(ACQUIRE, "POST", {"name": "s/2"}, body={"owner": "o"}, expect=200)
            a.call(ACQUIRE, "POST", {"name": "s/3"}, body={"owner": "o"}, expect=429)
            tok = g["token"] if st == 200 else 1
            a.call(FENCE, "POST", {"resource": "f/1"}, body={"token": tok}, expect=200)
            a.call(FENCE, "POST", {"resource": "f/2"}, body={"token": tok}, expect=429)
            st, _, ev = a.call(EVENTS, "GET", expect=200)
            t, box = in_thread(p.call, EVENTS, "GET", query={"after": ev.get("latest", 0), "wait_ms": 20000,
                                                             "prefix": "s/2"}, expect=200)
            wait_for(lambda: srv.metric("leasegate_event_polls") == 1, "a long-poll held", c)
            a.call(EVENTS, "GET", query={"after": ev.get("latest", 0), "wait_ms": 20000}, expect=429)
            a.call(STREAM, "GET", expect=429)
            st, _, lk = a.call(LOCK, "GET", {"name": "s/1"}, expect=200)
            a.call(LOCK, "GET", {"name": "s/1"}, query={"index": lk.get("index", 0), "wait_ms": 20000}, expect=429)
            a.call(ACQUIRE, "POST", {"name": "s/9"}, body={"owner": "o"}, expect=429)  # a third name
            a.call(ACQUIRE, "POST", {"name": "s/1"}, body={"owner": "o2", "wait_ms": 1}, expect=409)
            a.call(RELEASE, "POST", {"name": "s/1"}, body={"lease": g.get("lease", str(uuid.uuid4()))}, expect=200)
            a.call(ACQUIRE, "POST", {"name": "s/1"}, body={"owner": "o3"}, expect=200)
            a.call(RELEASE, "POST", {"name": "s/2"}, body={"lease": g2.get("lease", str(uuid.uuid4()))}, expect=200)
            joined(t, box, "the long-poll on s/2", c)  # woken by that release
        finally:
            a.close()
            p.close()

    # -- the guard proxy's refusals, in front of a port where nothing listens
    @classmethod
    def guard_server(cls):
        c = cls.c
        closed = upstream.closed_port()
        srv = cls.server(["--guard", "/g/=" + closed.url])
        a = Caller(c, srv.port)
        try:
            _, _, ga = a.call(ACQUIRE, "POST", {"name": "a"}, body={"owner": "w"}, expect=200)
            lease_a, token_a = ga.get("lease", str(uuid.uuid4())), ga.get("token", 1)

            def put(path, expect, schema, headers=None, **fields):
                st, rh, got = a.client.request("PUT", path, raw=b"data", headers=headers or {})
                where = "PUT %s (guard) -> %d" % (path, st)
                c.check_component(schema, st, rh, a.client.last_raw, where)
                if st != expect:
                    c.fail(where, "the scenario expected %d (body %s)" % (expect, a.client.last_text[:300]))
                for k, v in fields.items():
                    if not isinstance(got, dict) or got.get(k) != v:
                        c.fail(where, "%s: %r, the scenario expected %r" % (k, (got or {}).get(k), v))

            put("/g/a", 428, "GuardError", error="token_required")
            put("/g/b", 409, "GuardStaleTokenError", {"Fencing-Lease": lease_a}, lock="b", token=None,
                max_token=0, holder_token=None)
            _, _, gb = a.call(ACQUIRE, "POST", {"name": "b"}, body={"owner": "w"}, expect=200)
            put("/g/b", 409, "GuardStaleTokenError", {"Fencing-Lease": lease_a}, lock="b", token=None,
                max_token=0, holder_token=gb.get("token"))
            put("/g/a", 400, "GuardError", {"Fencing-Lease": lease_a, "Fencing-Token": str(token_a + 5)},
                error="bad_request")
            put("/g/a", 502, "GuardError", {"Fencing-Lease": lease_a}, error="bad_gateway")
            put("/g/b", 409, "GuardStaleTokenError", {"Fencing-Lease": lease_a}, lock="b", token=None,
                max_token=0, holder_token=gb.get("token"))
            _, _, gr = a.call(ACQUIRE, "POST", {"name": "r"}, body={"owner": "reader", "mode": "read"}, expect=200)
            put("/g/r", 409, "GuardStaleTokenError", {"Fencing-Lease": gr.get("lease", str(uuid.uuid4()))}, lock="r",
                token=gr.get("token"), reason="read_lease", holder_token=gr.get("token"))
            _, _, gs = a.call(SEM_ACQUIRE, "POST", {"name": "a"}, body={"owner": "permit", "limit": 1}, expect=200)
            put("/g/a", 409, "GuardStaleTokenError", {"Fencing-Lease": gs.get("lease", str(uuid.uuid4()))}, lock="a",
                token=None, holder_token=token_a)
        finally:
            a.close()
            closed.close()

    # -- the report
    def test_every_answer_matches_the_contract(self):
        if self.c.findings:
            self.fail("%d mismatches between the server and openapi.yaml:\n  - %s"
                      % (len(self.c.findings), "\n  - ".join(self.c.findings)))

    def test_every_operation_was_exercised(self):
        missing = ["%s %s" % (m, p) for p, m in self.c.operations() if (p, m) not in self.c.seen]
        self.assertEqual(missing, [], "operations in openapi.yaml that this scenario never reached "
                                      "(add them to test_contract.py)")

    def test_every_path_was_probed_with_a_method_it_does_not_take(self):
        missing = sorted(set(self.c.doc["paths"]) - self.c.undeclared_method_paths)
        self.assertEqual(missing, [], "paths never sent a method they do not declare (405)")


if __name__ == "__main__":
    unittest.main(verbosity=2)
