// The Node client against the real leasegate binary ($LEASEGATE_BIN).
//
// Each server runs on a 127.0.0.1 port with a temporary database and is stopped by
// its PID; a guarded prefix /store/ forwards to a small node:http storage upstream.
// Only loopback traffic; every wait is bounded; nothing asserts how long a step took.
//
// Run: LEASEGATE_BIN=build/leasegate node --test clients/node/test/client.test.mjs

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import util from "node:util";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createRequire } from "node:module";
import {
  BadRequestError, Client, ForbiddenError, LeaseLostError, LeasegateError, LimitMismatchError, LockHeldError,
  ModeConflictError, NotHolderError, OverloadedError, SemaphoreFullError, StaleTokenError, TLSVerificationError,
  UnauthorizedError, UnavailableError, ensureOk,
} from "leasegate"; // the package itself, through its exports map (import condition)
import { BOUND_MS, Server, unique, waitFor } from "./support.mjs";

const require = createRequire(import.meta.url);
const { toMillis } = require("../src/duration.js");

/** A node:http server on a free loopback port; resolves to {url, close}. */
async function listen(handler) {
  const server = http.createServer(handler);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); }),
  };
}

const readBody = async (req) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
};

/** The guard's upstream: keeps each PUT (path -> {body, token}). */
async function startStore() {
  const objects = new Map();
  const server = await listen(async (req, res) => {
    objects.set(req.url, { body: (await readBody(req)).toString(), token: req.headers["fencing-token"] });
    res.writeHead(201, { "Content-Length": 0 }).end();
  });
  return { ...server, objects };
}

/**
 * A server that keeps each request body (and in methods its method) and answers 503; with
 * `forward`, it instead forwards each request there, and hangs up without an answer on the
 * first one (the first of method `drop`, when given) once the server has delivered it (an
 * answer lost on the way back).
 */
async function startRecorder(forward, drop) {
  const bodies = [];
  const methods = [];
  const server = await listen(async (req, res) => {
    const body = await readBody(req);
    bodies.push(JSON.parse(body));
    methods.push(req.method);
    if (!forward) {
      res.writeHead(503, { "Content-Type": "application/json" }).end('{"error":"overloaded","message":"test"}');
      return;
    }
    const answer = await fetch(forward + req.url, { method: req.method, body, headers: { "Content-Type": "application/json" } });
    const text = await answer.text();
    const mine = methods.filter((m) => !drop || m === drop);
    if ((!drop || req.method === drop) && mine.length === 1) req.socket.destroy();
    else res.writeHead(answer.status, { "Content-Type": "application/json" }).end(text);
  });
  return { ...server, bodies, methods };
}

/** A TCP proxy on a free loopback port to `port`, counting the connections it was asked for. */
async function countingProxy(port) {
  let count = 0;
  const sockets = new Set();
  const proxy = net.createServer((client) => {
    count++;
    const upstream = net.connect(port, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => { sockets.delete(s); client.destroy(); upstream.destroy(); });
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  return {
    port: proxy.address().port,
    connections: () => count,
    close: () => new Promise((resolve) => { for (const s of sockets) s.destroy(); proxy.close(resolve); }),
  };
}

/** A loopback URL where nothing listens. */
async function closedPortUrl() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

let store;
let server;
let client;

before(async () => {
  store = await startStore();
  server = await new Server(["--guard", `/store/=${store.url}/`]).start();
  client = new Client({ servers: server.url, owner: "node-test" });
});

after(async () => {
  await server?.stop();
  await store?.close();
});

test("acquire, renew, release", async () => {
  const name = unique("acquire");
  const lease = await client.acquire(name, { ttl: "30s", metadata: { why: "test" } });
  assert.ok(lease.valid);
  assert.match(lease.token, /^[0-9]+$/);
  assert.deepEqual([lease.name, lease.owner, lease.server], [name, "node-test", server.url]);
  const state = await client.status(name);
  assert.equal(state.holder.token, lease.token);
  assert.deepEqual(state.holder.metadata, { why: "test" });
  await lease.renew({ ttl: "10s" });
  assert.equal(lease.ttl, 10_000);
  await lease.release();
  assert.equal(lease.valid, false);
  assert.equal((await client.status(name)).held, false);
  await lease.release(); // a second release does nothing
});

test("a lease never shows its secret when logged, stringified or spread (issue 39)", async () => {
  const name = unique("redact");
  const lease = await client.acquire(name, { ttl: "30s", metadata: { why: "logging" } });
  const id = lease.lease;
  assert.match(id, /^[0-9a-f-]{36}$/); // still there for whoever reads it
  const json = JSON.parse(JSON.stringify(lease));
  assert.deepEqual(json, {
    name, kind: "lock", owner: "node-test", token: lease.token, mode: "write", semaphore: false, limit: null,
    permits: null, term: null, value: null, valueVersion: 0, ttl: 30_000, server: server.url,
    metadata: { why: "logging" }, valid: true, lease: "[redacted]",
  });
  const shown = [util.inspect(lease), util.inspect(lease, { depth: 0 }), util.inspect({ nested: [lease] }),
    util.format("%o %O %j %s", lease, lease, lease, lease), JSON.stringify({ ...lease }),
    JSON.stringify(Object.entries(lease))];
  for (const text of shown) assert.ok(!text.includes(id), `the lease id shows in: ${text}`);
  assert.match(shown[0], /^Lease \{\s+name: /);
  assert.ok(shown[0].includes("[redacted]") && shown[0].includes(lease.token), shown[0]);
  // console.log goes through util.inspect.
  const lines = [];
  const log = console.log;
  console.log = (...args) => lines.push(util.format(...args));
  try {
    console.log("held:", lease);
  } finally {
    console.log = log;
  }
  assert.ok(!lines[0].includes(id) && lines[0].includes("[redacted]"), lines[0]);
  // A loss carries its lease: logging the error does not show the secret either.
  await lease.release();
  const lost = new LeaseLostError("lost", { lease });
  assert.ok(!JSON.stringify(lost).includes(id) && !util.inspect(lost).includes(id));
  // What renews and writes through the guard still has it.
  assert.deepEqual(lease.headers, { "Fencing-Lease": id });
});

test("withLock holds the lock while the callback runs, then releases it", async () => {
  const name = unique("block");
  const result = await client.withLock(name, { ttl: "15s" }, async (lease) => {
    assert.deepEqual(lease.headers, { "Fencing-Lease": lease.lease });
    assert.equal((await client.status(name)).holder.token, lease.token);
    return "done";
  });
  assert.equal(result, "done");
  assert.equal((await client.status(name)).held, false);
});

test("waiters are handed the lock in arrival order", async () => {
  const name = unique("fifo");
  const holder = await client.acquire(name, { ttl: "30s" });
  const order = [];
  const waiters = [];
  for (const [n, label] of ["first", "second"].entries()) {
    // A short TTL and a long wait: the grant must be confirmed by a renewal.
    waiters.push(new Client({ servers: server.url, owner: label }).withLock(name, { ttl: "600ms", wait: "20s" },
      async (lease) => {
        order.push([label, lease.token]);
        await sleep(300);
      }));
    await waitFor(async () => (await client.status(name)).waiters === n + 1, `${label} waiter`);
  }
  await sleep(300); // both wait past a third of their TTL
  await holder.release();
  await Promise.all(waiters);
  assert.deepEqual(order.map(([label]) => label), ["first", "second"]);
  const tokens = [holder.token, ...order.map(([, token]) => token)].map(BigInt);
  assert.ok(tokens[0] < tokens[1] && tokens[1] < tokens[2], String(tokens));
});

test("the watchdog keeps a short lease alive", async () => {
  const name = unique("watchdog");
  let lost = 0;
  await client.withLock(name, { ttl: "600ms", onLost: () => lost++ }, async (lease) => {
    await sleep(2000); // more than three TTLs
    assert.ok(lease.valid);
    const intruder = new Client({ servers: server.url, owner: "intruder" });
    const held = await intruder.acquire(name).then(() => assert.fail("granted"), (e) => e);
    assert.ok(held instanceof LockHeldError);
    assert.equal(held.body.holder.token, lease.token);
  });
  assert.equal(lost, 0);
  assert.equal((await client.status(name)).held, false);
});

test("a renewal answered not_holder is a loss", async () => {
  const name = unique("superseded");
  const lost = [];
  const lease = await client.acquire(name, { ttl: "300ms", onLost: (e) => lost.push(e) }); // no watchdog
  await waitFor(() => !lease.valid, "the lease to run out");
  const newer = await new Client({ servers: server.url }).acquire(name, { wait: "10s" });
  const error = await lease.renew().then(() => assert.fail("renewed"), (e) => e);
  assert.ok(error instanceof LeaseLostError);
  assert.ok(error.cause instanceof NotHolderError);
  assert.equal(error.cause.body.reason, "superseded");
  await assert.rejects(lease.renew(), LeaseLostError);
  assert.throws(() => lease.check(), LeaseLostError);
  assert.equal(lost.length, 1);
  assert.equal(lost[0].lease, lease);
  await newer.release();
});

test("errors are named after the contract's codes", async () => {
  const name = unique("errors");
  const held = await client.withLock(name, () => client.acquire(name, { wait: "0s" }).catch((e) => e));
  assert.ok(held instanceof LockHeldError && held instanceof LeasegateError);
  assert.deepEqual([held.status, held.code, held.body.waiters], [409, "lock_held", 0]);
  const bad = await client.acquire("no spaces allowed").catch((e) => e);
  assert.ok(bad instanceof BadRequestError);
  assert.deepEqual([bad.status, bad.body.field], [400, "name"]);
  await assert.rejects(client.acquire(name, { ttl: "10ms" }), BadRequestError); // below the server's minimum
  const resource = unique("fence");
  assert.equal((await client.fence(resource, held.body.holder.token)).accepted, true);
  await assert.rejects(client.fence(resource, BigInt(held.body.holder.token) - 1n), StaleTokenError);
});

test("a guarded write carries the lease, and is refused once it ended", async () => {
  const name = unique("guarded");
  let lease;
  await client.withLock(name, async (l) => {
    lease = l;
    const res = await ensureOk(await l.fetch(`/store/${name}`, { method: "PUT", body: "v1" }));
    assert.equal(res.status, 201);
  });
  assert.deepEqual(store.objects.get(`/${name}`), { body: "v1", token: String(lease.token) });
  const late = await lease.fetch(`/store/${name}`, { method: "PUT", body: "late" });
  assert.equal(late.status, 409);
  await assert.rejects(ensureOk(late), StaleTokenError);
  assert.equal(store.objects.get(`/${name}`).body, "v1");
});

test("readers share a lock, a writer waits for them and is refused by the guard as a reader", async () => {
  const name = unique("rw");
  const first = await client.acquire(name, { mode: "read", ttl: "30s" });
  const second = await client.acquire(name, { mode: "read" });
  assert.deepEqual([first.mode, second.mode, first.semaphore, first.limit], ["read", "read", false, null]);
  assert.notEqual(first.token, second.token);
  const state = await client.status(name);
  assert.equal(state.mode, "read");
  assert.deepEqual(state.holders.map((h) => h.token), [first.token, second.token]);
  assert.equal(state.holder.token, first.token); // the oldest reader
  const writer = client.acquire(name, { wait: "20s" });
  await waitFor(async () => (await client.status(name)).waiters === 1, "the writer waiting");
  // No barging: a reader arriving behind a waiting writer waits too.
  const late = await client.acquire(name, { mode: "read" }).catch((e) => e);
  assert.ok(late instanceof LockHeldError);
  assert.equal(late.body.mode, "read");
  assert.equal(late.body.holders.length, 2);
  const refused = await first.fetch(`/store/${name}`, { method: "PUT", body: "by a reader" });
  assert.equal(refused.status, 409);
  assert.equal((await refused.json()).reason, "read_lease");
  await first.release();
  await second.release();
  const lease = await writer;
  assert.equal(lease.mode, "write");
  assert.ok(BigInt(lease.token) > BigInt(second.token));
  await lease.release();
  await assert.rejects(client.acquire(name, { mode: "exclusive" }), TypeError);
});

test("a reentry in another mode is ModeConflictError", async () => {
  const name = unique("reentry");
  const body = await client.withLock(name, { mode: "read" }, async (lease) => {
    const answer = await fetch(`${server.url}/v1/locks/${name}/acquire`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ owner: "x", lease: lease.lease, mode: "write" }),
    });
    return answer.json();
  });
  assert.equal(body.error, "mode_conflict");
  // The error class the client maps the code to.
  const { errorFromAnswer } = require("../src/errors.js");
  assert.ok(errorFromAnswer(409, body) instanceof ModeConflictError);
});

test("a semaphore hands out limit permits, each its own lease and token", async () => {
  const name = unique("sem");
  const a = await client.acquirePermit(name, { limit: 2, ttl: "30s" });
  const b = await client.acquirePermit(name, { limit: 2 });
  assert.deepEqual([a.semaphore, a.mode, a.limit], [true, null, 2]);
  assert.notEqual(a.token, b.token);
  const full = await client.acquirePermit(name, { limit: 2 }).catch((e) => e);
  assert.ok(full instanceof SemaphoreFullError && full instanceof LockHeldError);
  assert.deepEqual([full.code, full.body.holders.length, full.body.waiters], ["semaphore_full", 2, 0]);
  await assert.rejects(client.acquirePermit(name, { limit: 3 }), LimitMismatchError);
  await assert.rejects(client.acquirePermit(name, {}), TypeError);
  await assert.rejects(client.acquirePermit(name, { limit: 0 }), RangeError);
  const state = await client.semaphoreStatus(name);
  assert.deepEqual([state.limit, state.holders_total, state.available], [2, 2, 0]);
  assert.equal((await client.status(name)).held, false); // locks are another namespace
  await a.renew({ ttl: "10s" });
  assert.equal(a.ttl, 10_000);
  // A waiter gets the permit b frees, through the semaphore's own watchdog and release.
  const waiting = client.semaphore(name, { limit: 2, wait: "20s" }, async (permit) => {
    assert.equal((await client.semaphoreStatus(name)).holders_total, 2);
    return permit.token;
  });
  await waitFor(async () => (await client.semaphoreStatus(name)).waiters === 1, "a waiter");
  await b.release();
  assert.ok(BigInt(await waiting) > BigInt(b.token));
  await a.release();
  await assert.rejects(a.renew(), LeaseLostError);
  const listed = [];
  for await (const sem of client.list({ prefix: name, semaphores: true })) listed.push([sem.name, sem.holders_total]);
  assert.deepEqual(listed, [[name, 0]]);
  const refused = await (await client.acquirePermit(name, { limit: 1 })).fetch(`/store/${name}`, { method: "PUT" });
  assert.equal(refused.status, 409);
});

test("a lock-delay keeps a lock after its lease expired", async () => {
  const name = unique("delay");
  const lease = await client.acquire(name, { ttl: "300ms", lockDelay: "20s" }); // no watchdog
  await waitFor(async () => {
    const state = await client.status(name);
    return !state.held && state.delay_until_ms !== null;
  }, "the lease to expire into its lock-delay");
  const held = await client.acquire(name).catch((e) => e);
  assert.ok(held instanceof LockHeldError);
  assert.equal(held.body.holder, null);
  assert.equal(typeof held.body.delay_until_ms, "number");
  await assert.rejects(lease.renew(), LeaseLostError);
  await assert.rejects(client.acquire(name, { lockDelay: 5 }), TypeError);
});

test("fails over past a closed port", async () => {
  const failover = new Client({ servers: `${await closedPortUrl()},${server.url}` });
  await failover.withLock(unique("failover"), (lease) => assert.equal(lease.server, server.url));
});

/** A loopback server that accepts connections and never answers: a paused gateway, as a client sees it. */
async function startSilent() {
  const sockets = new Set();
  const silent = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
  });
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${silent.address().port}`,
    close: () => new Promise((resolve) => { for (const s of sockets) s.destroy(); silent.close(resolve); }),
  };
}

/** One sample of the server's /metrics. */
async function metric(name) {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.split(" ")[0] === name);
  assert.ok(line, `no ${name} in /metrics`);
  return Number(line.split(" ")[1]);
}

test("a silent server is left after the first-byte timeout (issue 37)", async () => {
  const silent = await startSilent();
  try {
    const c = new Client({ servers: [silent.url, server.url], timeout: "60s", firstByteTimeout: "300ms" });
    let timer;
    const tooLong = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("the client waited on the silent server")), BOUND_MS);
    });
    const lease = await Promise.race([c.acquire(unique("silent")), tooLong]).finally(() => clearTimeout(timer));
    assert.equal(lease.server, server.url);
    await lease.release();
  } finally {
    await silent.close();
  }
});

test("a long-poll outlasts the first-byte timeout: the server says it is ready", async () => {
  const name = unique("long-poll");
  const holder = await client.acquire(name, { ttl: "30s" });
  const before = await metric("leasegate_waiter_disconnects_total");
  const c = new Client({ servers: server.url, firstByteTimeout: "200ms" });
  const pending = c.acquire(name, { wait: "30s" });
  await waitFor(async () => (await client.status(name)).waiters === 1, "the waiter");
  await sleep(1000); // several first-byte timeouts pass while it waits
  await holder.release();
  const lease = await pending;
  assert.equal(await metric("leasegate_waiter_disconnects_total"), before, "the long-poll was given up and sent again");
  await lease.release();
  assert.throws(() => new Client({ servers: server.url, firstByteTimeout: "50ms" }), RangeError);
});

test("no server answering is UnavailableError", async () => {
  const nobody = new Client({ servers: [await closedPortUrl(), await closedPortUrl()], retryFor: "200ms" });
  const error = await nobody.acquire(unique("nobody")).catch((e) => e);
  assert.ok(error instanceof UnavailableError, String(error));
  assert.equal(error.status, null);
});

test("an overloaded server is skipped, and retries keep the request_id", async () => {
  const busy = await startRecorder();
  try {
    const lease = await new Client({ servers: [busy.url, server.url] }).acquire(unique("busy"));
    assert.equal(lease.server, server.url);
    await lease.release();
    assert.equal(busy.bodies.length, 1);
    await assert.rejects(new Client({ servers: busy.url, retryFor: "300ms" }).acquire("busy/only"), OverloadedError);
  } finally {
    await busy.close();
  }
  const ids = new Set(busy.bodies.slice(1).map((body) => body.request_id));
  assert.ok(busy.bodies.length > 2);
  assert.equal(ids.size, 1, "every retry of one acquire sends the same request_id");
  assert.match([...ids][0], /^[\x21-\x7e]{1,64}$/);
});

test("a retry after a lost answer gets the same grant", async () => {
  const proxy = await startRecorder(server.url);
  const name = unique("lost-answer");
  try {
    const lease = await new Client({ servers: proxy.url }).acquire(name, { ttl: "30s" });
    const [first, retry] = proxy.bodies;
    assert.equal(first.request_id, retry.request_id);
    const { holder } = await client.status(name);
    assert.deepEqual([holder.token, holder.count], [lease.token, 1]);
    await lease.release();
  } finally {
    await proxy.close();
  }
  assert.equal((await client.status(name)).held, false);
});

test("a value write whose answer was lost is written once", async () => {
  const proxy = await startRecorder(server.url, "PUT");
  const name = unique("lost-value");
  try {
    const lease = await new Client({ servers: proxy.url }).acquire(name, { ttl: "30s" });
    const answer = await lease.setValue({ n: 1 }, { ifVersion: 0 });
    assert.deepEqual(answer, { name, value_version: 1, token: lease.token });
    await lease.setValue(2);
    const puts = proxy.bodies.filter((_, i) => proxy.methods[i] === "PUT");
    assert.equal(puts.length, 3, "the write whose answer was lost is sent again");
    assert.equal(puts[0].request_id, puts[1].request_id);
    assert.notEqual(puts[2].request_id, puts[0].request_id, "a request_id per write");
    assert.equal((await client.value(name)).value_version, 2);
    await lease.release();
  } finally {
    await proxy.close();
  }
});

test("list follows pages", async () => {
  const prefix = `${unique("list")}/`;
  const names = ["a", "b", "c"].map((n) => prefix + n);
  for (const name of names) await (await client.acquire(name)).release();
  const listed = [];
  for await (const lock of client.list({ prefix, pageSize: 2 })) listed.push(lock.name);
  assert.deepEqual(listed, names);
});

test("tokens beyond 2^53 stay exact", async () => {
  const big = await new Server(["--min-token", "9007199254740993"]).start();
  try {
    const bigClient = new Client({ servers: big.url });
    const lease = await bigClient.acquire("big", { metadata: { note: "mine", n: 7 } });
    assert.equal(lease.token, "9007199254740994");
    const state = await bigClient.status("big");
    assert.equal(state.last_token, "9007199254740994");
    assert.equal(state.holder.token, "9007199254740994");
    assert.deepEqual(state.holder.metadata, { note: "mine", n: 7 }); // the caller's JSON, as sent
    assert.equal((await bigClient.fence("big", lease.token)).max_token, "9007199254740994");
    assert.equal((await bigClient.fence("big", 9007199254740994n)).max_token, "9007199254740994");
    await assert.rejects(bigClient.fence("big", "9007199254740993"), StaleTokenError);
    const held = await new Client({ servers: big.url }).acquire("big").catch((e) => e);
    assert.ok(held instanceof LockHeldError);
    // Everything the client hands out goes through JSON.stringify, tokens exact.
    assert.match(JSON.stringify({ lease, state, held: held.body }), /"token":"9007199254740994"/);
    assert.equal(JSON.parse(JSON.stringify(held.body)).holder.token, "9007199254740994");
  } finally {
    await big.stop();
  }
});

test("a server killed -9 loses the lease, and withLock rejects", async () => {
  const own = await new Server(["--guard", `/store/=${store.url}/`]).start();
  const name = unique("killed");
  const lost = [];
  const ownClient = new Client({ servers: own.url });
  try {
    const error = await ownClient.withLock(name, { ttl: "600ms", onLost: (e) => lost.push(e) }, async (lease) => {
      await ensureOk(await lease.fetch(`/store/${name}`, { method: "PUT", body: "v1" }));
      await own.kill(); // renewals are now refused
      await waitFor(() => lost.length > 0, "the lost event");
      assert.equal(lease.valid, false);
      await own.start(); // same port and database
      const newer = await ownClient.acquire(name, { wait: "10s" });
      const late = await lease.fetch(`/store/${name}`, { method: "PUT", body: "v2" });
      assert.equal(late.status, 409);
      await assert.rejects(ensureOk(late), StaleTokenError);
      await newer.release();
    }).then(() => assert.fail("withLock resolved"), (e) => e);
    assert.ok(error instanceof LeaseLostError, String(error));
    assert.equal(error.callbackError, undefined, String(error.callbackError?.stack));
    assert.equal(lost.length, 1);
    assert.equal(error.lease, lost[0].lease);
    assert.equal(store.objects.get(`/${name}`).body, "v1");
  } finally {
    await own.stop();
  }
});

/** A CA and a certificate for 127.0.0.1 that it signs (the openssl command): their paths. */
function makePki(dir) {
  const p = (name) => path.join(dir, name);
  fs.writeFileSync(p("cert.ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
    + "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n");
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  for (const args of [
    ["req", "-x509", ...ec, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-days", "2", "-subj", "/CN=test CA",
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"],
    ["req", "-new", ...ec, "-keyout", p("cert.key"), "-out", p("cert.csr"), "-subj", "/CN=127.0.0.1"],
    ["x509", "-req", "-in", p("cert.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
      "-out", p("cert.pem"), "-days", "2", "-extfile", p("cert.ext")],
  ]) execFileSync("openssl", args, { stdio: "ignore", timeout: 60_000 });
  return { ca: p("ca.pem"), cert: p("cert.pem"), key: p("cert.key") };
}

test("https with a private CA: verified with the ca option, refused without it", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasegate-nodeclient-tls-"));
  const pki = makePki(dir);
  const tls = await new Server(["--tls-cert", pki.cert, "--tls-key", pki.key]).start();
  try {
    assert.match(tls.url, /^https:/);
    const trusting = new Client({ servers: tls.url, ca: fs.readFileSync(pki.ca) });
    const name = unique("tls");
    await trusting.withLock(name, { ttl: "2s" }, async (lease) => {
      await sleep(1000); // the watchdog renews over TLS too
      assert.equal(lease.valid, true);
      assert.equal((await trusting.status(name)).holder.token, lease.token);
      const res = await lease.fetch("/healthz"); // lease.fetch goes through the same verified transport
      assert.equal(res.status, 200);
      assert.equal((await res.json()).status, "ok");
    });
    assert.equal((await trusting.status(name)).held, false);
    // Without the CA: thrown at once, not retried for retryFor (a proxy counts the
    // connections: retries would make many), with the CLI's explanation.
    const proxy = await countingProxy(tls.port);
    try {
      const doubting = new Client({ servers: `https://127.0.0.1:${proxy.port}`, retryFor: "30s" });
      const error = await doubting.acquire(unique("tls"), { wait: "30s" }).then(() => assert.fail("acquired"), (e) => e);
      assert.ok(error instanceof TLSVerificationError && error instanceof UnavailableError, String(error));
      assert.equal(error.status, null);
      assert.match(error.message, /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|CERT/);
      assert.match(error.message, /a server whose certificate a private CA signed needs the ca option or \$LEASEGATE_CACERT/);
      assert.equal(proxy.connections(), 1);
    } finally {
      await proxy.close();
    }
    // A server that fails verification is passed over for the next one.
    const mixed = new Client({ servers: [tls.url, server.url] });
    await mixed.withLock(unique("tls-next"), (lease) => assert.equal(lease.server, server.url));
  } finally {
    await tls.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("an API key goes with every request to a server with --auth-file", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasegate-nodeclient-keys-"));
  const [key, line] = execFileSync(process.env.LEASEGATE_BIN, ["keygen", "app", "client", "js/"], { encoding: "utf8" })
    .trim().split("\n");
  fs.writeFileSync(path.join(dir, "keys"), line + "\n");
  const keyed = await new Server(["--auth-file", path.join(dir, "keys")]).start();
  try {
    const client = new Client({ servers: keyed.url, key });
    const name = unique("js/key");
    await client.withLock(name, { ttl: "2s" }, async (lease) => {
      await sleep(1000); // renewals carry it too
      assert.equal(lease.valid, true);
      assert.equal((await lease.fetch("/healthz")).status, 200);
    });
    assert.equal((await client.status(name)).held, false);
    await assert.rejects(client.acquire(unique("other")), ForbiddenError);
    await assert.rejects(new Client({ servers: keyed.url }).acquire(unique("js/none")), UnauthorizedError);
  } finally {
    await keyed.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("durations: a unit is required, a bare number is a TypeError", async () => {
  assert.equal(toMillis("250ms"), 250);
  assert.equal(toMillis("15s"), 15_000);
  assert.equal(toMillis("2m"), 120_000);
  assert.equal(toMillis("1h"), 3_600_000);
  assert.equal(toMillis("1.5s"), 1500);
  assert.equal(toMillis("0.25m"), 15_000);
  assert.equal(toMillis("0s"), 0);
  assert.equal(toMillis(`${Number.MAX_SAFE_INTEGER}ms`), Number.MAX_SAFE_INTEGER);
  for (const bare of [0, 15, 1500, 1.5, 15n, "15", "0", "1.5", "-3"]) {
    assert.throws(() => toMillis(bare, "ttl"), (e) => e instanceof TypeError && /^ttl: .*has no unit/.test(e.message),
      String(bare));
  }
  assert.throws(() => toMillis(15, "ttl"), { message: /"15ms", "15s", "15m" or "15h"/ });
  for (const bad of ["1d", "-1s", "+1s", "", "s", " 15s", "15s ", "15 s", "1e3ms", ".5s", "5.s", "1.5ms", "15S",
    "\u0661\u0665s", "15s\n", `${Number.MAX_SAFE_INTEGER + 2}ms`, null, undefined, {}, true]) {
    assert.throws(() => toMillis(bad), TypeError, String(bad));
  }
  // Refused before any request: the server never sees them.
  await assert.rejects(client.acquire(unique("bare"), { ttl: 15000 }), TypeError);
  await assert.rejects(client.acquire(unique("bare"), { wait: 0 }), TypeError);
  await assert.rejects(client.withLock(unique("bare"), { ttl: "15" }, () => assert.fail("ran")), TypeError);
  assert.throws(() => new Client({ servers: server.url, timeout: 5000 }), TypeError);
  assert.throws(() => new Client({ servers: server.url, retryFor: 5 }), TypeError);
  const lease = await client.acquire(unique("bare"), { ttl: "1.5s" });
  assert.equal(lease.ttl, 1500);
  await assert.rejects(lease.renew({ ttl: 10 }), TypeError);
  await lease.renew({ ttl: "2m" });
  assert.equal((await client.status(lease.name)).holder.ttl_ms, 120_000);
  await lease.release();
});

test("tokens: fence takes a decimal string, a bigint or a safe number; refuses anything else", async () => {
  const resource = unique("fence-types");
  await client.withLock(unique("fence-types"), async (lease) => {
    assert.equal((await client.fence(resource, lease.token)).max_token, lease.token);
    assert.equal((await client.fence(resource, BigInt(lease.token))).max_token, lease.token);
    assert.equal((await client.fence(resource, Number(lease.token))).max_token, lease.token);
  });
  for (const bad of ["12a", "-1", "", "1.0", 1.5, -1, 2 ** 53, -1n, 2n ** 64n]) {
    await assert.rejects(client.fence(resource, bad), RangeError, String(bad));
  }
  for (const bad of [null, undefined, {}, true]) await assert.rejects(client.fence(resource, bad), TypeError);
});

test("a long wait is one long-poll through node:http, not fetch, and not cut at 280 s", async (t) => {
  const bodies = [];
  const held = await listen(async (req, res) => {
    bodies.push(JSON.parse(await readBody(req)));
    res.writeHead(409, { "Content-Type": "application/json" })
      .end('{"error":"lock_held","message":"held","holder":{"owner":"x","token":5},"waiters":0}');
  });
  t.mock.method(globalThis, "fetch", () => { throw new Error("fetch must not carry API calls"); });
  try {
    const error = await new Client({ servers: held.url }).acquire(unique("long"), { wait: "10m" }).catch((e) => e);
    assert.ok(error instanceof LockHeldError, String(error));
    assert.equal(error.body.holder.token, "5");
  } finally {
    await held.close();
  }
  // One request carries the whole wait: a wait split into polls of at most 280 s would
  // have sent a second request after this answer.
  assert.equal(bodies.length, 1);
  assert.ok(bodies[0].wait_ms > 280_000 && bodies[0].wait_ms <= 600_000, String(bodies[0].wait_ms));
  // And a real long-poll, granted while it waits, with fetch still unusable.
  const name = unique("long");
  const holder = await client.acquire(name, { ttl: "30s" });
  const waiting = client.acquire(name, { wait: "20s" });
  await waitFor(async () => (await client.status(name)).waiters === 1, "the waiter");
  await holder.release();
  await (await waiting).release();
});
