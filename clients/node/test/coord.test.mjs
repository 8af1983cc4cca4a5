// Coordination on top of the lock (issue 40), in the Node client, against the real binary
// ($LEASEGATE_BIN): several permits in one lease (permits), a lock's value only its writer
// can change (lease.value, lease.setValue, client.value) and elections (campaign,
// withLeadership, proclaim, resign, election, observe as an async iterator). Only
// loopback traffic; every wait is bounded; nothing asserts how long a step took.
//
// Run: LEASEGATE_BIN=build/leasegate node --test clients/node/test/coord.test.mjs

import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import {
  Client, NotLeaderError, SemaphoreFullError, StaleTokenError, VersionMismatchError,
} from "leasegate";
import { BOUND_MS, Server, unique, waitFor } from "./support.mjs";

let server;
let client;

before(async () => {
  server = await new Server().start();
  client = new Client({ servers: server.url, owner: "node-coord" });
});

after(async () => {
  await server.stop();
});

/** A TCP proxy to the server whose connections can be cut, and whose new ones can be held. */
async function startProxy(port) {
  const open = new Set();
  const counts = { connections: 0 };
  let gate = null; // a promise new connections wait for, or null
  let release = () => {};
  const proxy = net.createServer(async (socket) => {
    counts.connections++;
    open.add(socket);
    socket.on("close", () => open.delete(socket));
    socket.on("error", () => {});
    if (gate) await gate;
    const upstream = net.connect(port, "127.0.0.1");
    open.add(upstream);
    upstream.on("close", () => { open.delete(upstream); socket.destroy(); });
    upstream.on("error", () => {});
    socket.on("close", () => upstream.destroy());
    socket.pipe(upstream).pipe(socket);
  });
  await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  return {
    counts,
    url: `http://127.0.0.1:${proxy.address().port}`,
    cut: () => { for (const s of open) s.destroy(); },
    pause: () => { gate = new Promise((resolve) => { release = resolve; }); },
    resume: () => { gate = null; release(); },
    close: () => new Promise((resolve) => { for (const s of open) s.destroy(); proxy.close(resolve); }),
  };
}

/** The next `count` events of an async iterator, within BOUND_MS. */
async function take(iterator, count) {
  const got = [];
  let timer;
  const tooLate = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`only ${got.length} of ${count} events in time`)), BOUND_MS);
  });
  try {
    while (got.length < count) {
      const { value, done } = await Promise.race([iterator.next(), tooLate]);
      if (done) throw new Error("the observation ended");
      const { id, ...event } = value;
      assert.ok(id === null || /^\d+$/.test(id), id);
      got.push(event);
    }
  } finally {
    clearTimeout(timer);
  }
  return got;
}

test("permits: limit 5, A takes 3, B asks 3 and waits, C asks 1 and waits behind B", async () => {
  const name = unique("permits");
  const a = await client.acquirePermit(name, { limit: 5, permits: 3, owner: "a" });
  assert.equal(a.permits, 3);
  const b = client.acquirePermit(name, { limit: 5, permits: 3, owner: "b", wait: "20s" });
  await waitFor(async () => (await client.semaphoreStatus(name)).waiters === 1, "b waiting");
  const c = client.acquirePermit(name, { limit: 5, permits: 1, owner: "c", wait: "20s" });
  await waitFor(async () => (await client.semaphoreStatus(name)).waiters === 2, "c waiting");
  const state = await client.semaphoreStatus(name);
  assert.equal(state.available, 2); // c would fit, and still waits behind b
  await a.release();
  // Both are granted by that release, b first: their tokens say the order (their answers
  // may come back in either, after the same commit).
  const [bl, cl] = await Promise.all([b, c]);
  assert.deepEqual([bl.permits, cl.permits], [3, 1]);
  assert.ok(BigInt(cl.token) > BigInt(bl.token));
  await assert.rejects(client.acquirePermit(name, { limit: 5, permits: 2 }), SemaphoreFullError);
  await bl.release();
  await cl.release();
  await assert.rejects(client.acquirePermit(name, { limit: 5, permits: 6 }), RangeError);
  await assert.rejects(client.acquirePermit(name, { limit: 5, permits: "2" }), TypeError);
});

test("a lock's value: only its writer changes it, and the next holder reads it with its grant", async () => {
  const name = unique("value");
  const first = await client.withLock(name, async (lease) => {
    assert.deepEqual([lease.value, lease.valueVersion], [null, 0]);
    const answer = await lease.setValue({ offset: 41 });
    assert.deepEqual(answer, { name, value_version: 1, token: lease.token });
    await assert.rejects(lease.setValue({ offset: 0 }, { ifVersion: 0 }), VersionMismatchError);
    return lease;
  });
  await assert.rejects(first.setValue({ offset: 999 }), (e) => e instanceof StaleTokenError && e.body.reason === "released");
  const second = await client.withLock(name, async (lease) => {
    assert.deepEqual([lease.value, lease.valueVersion], [{ offset: 41 }, 1]);
    await lease.setValue({ offset: lease.value.offset + 16 }, { ifVersion: lease.valueVersion });
    return lease;
  });
  assert.deepEqual(await client.value(name), { name, value: { offset: 57 }, value_version: 2, value_token: second.token });
  const reader = await client.acquire(name, { mode: "read" });
  await assert.rejects(reader.setValue(1), (e) => e instanceof StaleTokenError && e.body.reason === "read_lease");
  await reader.release();
});

test("elections: a queue hands over in order, and an observer sees every change once across a cut", async () => {
  const name = unique("election");
  const proxy = await startProxy(server.port);
  // The first server of the observer's list is never there: it fails over to the proxy.
  const observer = new Client({ servers: ["http://127.0.0.1:1", proxy.url], retryFor: "20s" });
  const events = observer.observe(name);
  try {
    assert.deepEqual(await take(events, 1), [{ event: "vacant", reason: null, previous_term: null }]);
    const a = await client.campaign(name, { value: { url: "http://a" }, owner: "a" });
    assert.equal(a.term, a.token);
    await assert.rejects(client.campaign(name, { value: "b", owner: "b" }),
      (e) => e instanceof NotLeaderError && e.body.leader.owner === "a");
    await a.proclaim({ url: "http://a2" });
    assert.deepEqual(await take(events, 2), [
      { event: "leader", owner: "a", term: a.term, value: { url: "http://a" } },
      { event: "leader", owner: "a", term: a.term, value: { url: "http://a2" } },
    ]);
    const b = client.campaign(name, { value: "b", owner: "b", wait: "20s" });
    await waitFor(async () => (await client.election(name)).candidates.length === 1, "b a candidate");
    // The observer's connection is cut and held while a resigns and b leads.
    proxy.pause();
    proxy.cut();
    await a.resign();
    const bl = await b;
    proxy.resume();
    assert.deepEqual(await take(events, 2), [
      { event: "vacant", reason: "resigned", previous_term: a.term },
      { event: "leader", owner: "b", term: bl.term, value: "b" },
    ]);
    assert.ok(proxy.counts.connections > 1, "the observer reconnected");
    await assert.rejects(a.proclaim("again"), NotLeaderError);
    await bl.resign();
    const term = await client.withLeadership(name, { value: "c", owner: "c" }, async (c) => {
      assert.equal((await client.election(name)).leader.owner, "c");
      return c.term;
    });
    assert.deepEqual(await take(events, 3), [
      { event: "vacant", reason: "resigned", previous_term: bl.term },
      { event: "leader", owner: "c", term, value: "c" },
      { event: "vacant", reason: "resigned", previous_term: term },
    ]);
  } finally {
    await events.return();
    await proxy.close();
  }
});
