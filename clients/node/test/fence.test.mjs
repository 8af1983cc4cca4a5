// The fence-check middleware (fenceMiddleware) in front of a node:http storage backend,
// checking the tokens of real leases with the real server ($LEASEGATE_BIN: ServerFence)
// or in the process (LocalFence). Only loopback traffic; every wait is bounded.
//
// Run: LEASEGATE_BIN=build/leasegate node --test clients/node/test/fence.test.mjs

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { Client, LocalFence, ServerFence, fenceMiddleware } from "leasegate";

const BOUND_MS = 20_000;
const unique = (prefix) => `${prefix}/${randomUUID().slice(0, 8)}`;

async function waitFor(predicate, what) {
  const deadline = Date.now() + BOUND_MS;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

let server; // the leasegate process
let serverUrl;
let serverDir;
let client;

before(async () => {
  serverDir = fs.mkdtempSync(path.join(os.tmpdir(), "leasegate-nodefence-"));
  const stderr = fs.openSync(path.join(serverDir, "stderr.log"), "a");
  server = spawn(process.env.LEASEGATE_BIN, ["serve", "--listen", "127.0.0.1:0", "--data", path.join(serverDir, "t.db")],
    { stdio: ["ignore", "pipe", stderr] });
  fs.closeSync(stderr);
  let out = "";
  serverUrl = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`leasegate did not start; see ${serverDir}/stderr.log`)), 10_000);
    server.stdout.on("data", (chunk) => {
      out += chunk;
      const m = /^leasegate: listening on (http:\/\/127\.0\.0\.1:\d+)\s*$/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
  client = new Client({ servers: serverUrl });
});

after(async () => {
  const exited = new Promise((resolve) => server.once("exit", resolve));
  server.kill("SIGTERM");
  await exited;
  fs.rmSync(serverDir, { recursive: true, force: true });
});

/** The backend: keeps each PUT's body and the token the middleware admitted it with. */
function backend(fence, handler) {
  const objects = new Map();
  const store = handler ?? ((req, res) => {
    let body = "";
    req.on("data", (c) => { body += c; });
    req.on("end", () => {
      if (req.method === "PUT") objects.set(new URL(req.url, "http://x").pathname, [body, req.fenceToken]);
      res.writeHead(req.method === "PUT" ? 201 : 200, { "Content-Length": 0 });
      res.end();
    });
  });
  const httpd = http.createServer((req, res) => fence(req, res, () => store(req, res)));
  return new Promise((resolve) => httpd.listen(0, "127.0.0.1", () => resolve({ httpd, objects, port: httpd.address().port })));
}

async function put(port, urlPath, token, body = "x", method = "PUT") {
  const headers = token === undefined ? {} : { "Fencing-Token": String(token) };
  const res = await fetch(`http://127.0.0.1:${port}${urlPath}`, { method, headers, body: method === "GET" ? undefined : body });
  const text = await res.text();
  return { status: res.status, body: res.headers.get("content-type") === "application/json" ? JSON.parse(text) : null };
}

async function twoTokens() {
  const older = await client.acquire(unique("node/fence"));
  const newer = await client.acquire(unique("node/fence"));
  await older.release();
  await newer.release();
  return [older.token, newer.token];
}

async function refusesStaleWrites(fence, prefix = "") {
  const { httpd, objects, port } = await backend(fence);
  try {
    const [old, neu] = await twoTokens();
    const p = `/${unique("files")}`;
    assert.equal((await put(port, p, old, "v1")).status, 201);
    assert.equal((await put(port, p, neu, "v2")).status, 201);
    assert.equal((await put(port, p, neu, "v3")).status, 201, "the same token again");
    const stale = await put(port, p, old, "stale");
    assert.equal(stale.status, 409);
    assert.equal(stale.body.error, "stale_token");
    assert.equal(String(stale.body.max_token), neu);
    assert.equal(stale.body.resource, prefix + p.slice(1));
    assert.deepEqual(objects.get(p), ["v3", BigInt(neu)], "the stale write never reached the store");
    assert.equal((await put(port, p, undefined)).status, 428);
    assert.equal((await put(port, p, "12ab")).status, 400);
    assert.equal((await put(port, p, undefined, undefined, "GET")).status, 200, "reads pass without a token");
  } finally {
    httpd.close();
  }
}

test("asking the server: stale, missing and forged tokens are refused", async () => {
  await refusesStaleWrites(fenceMiddleware(new ServerFence(client), { prefix: "backend-a/" }), "backend-a/");
  const { httpd, objects, port } = await backend(fenceMiddleware(new ServerFence(client)));
  try {
    const forged = await put(port, "/files/forged", "999999999");
    assert.equal(forged.status, 400, "a token never issued");
    assert.equal(objects.size, 0);
  } finally {
    httpd.close();
  }
});

test("marks kept in the process", async () => {
  await refusesStaleWrites(fenceMiddleware(new LocalFence()));
});

test("no server answering is 503", async () => {
  const probe = net.createServer();
  await new Promise((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const closed = `http://127.0.0.1:${probe.address().port}`;
  await new Promise((resolve) => probe.close(resolve));
  const gone = new Client({ servers: closed, retryFor: "100ms" });
  const { httpd, objects, port } = await backend(fenceMiddleware(new ServerFence(gone)));
  try {
    const answer = await put(port, "/files/a", 5);
    assert.equal(answer.status, 503);
    assert.equal(answer.body.error, "fence_unavailable");
    assert.equal(objects.size, 0);
  } finally {
    httpd.close();
  }
});

test("one write per resource at a time, so an older token cannot overtake", async () => {
  let proceed;
  const gate = new Promise((resolve) => { proceed = resolve; });
  const applied = [];
  const fence = fenceMiddleware(new LocalFence());
  const { httpd, port } = await backend(fence, async (req, res) => {
    req.resume();
    if (req.fenceToken === 6n) await gate; // token 6 is still being applied
    applied.push(req.fenceToken);
    res.writeHead(201, { "Content-Length": 0 });
    res.end();
  });
  try {
    const six = put(port, "/r", 6);
    await waitFor(() => fence.turns.users("r") === 1, "the write of token 6 to start");
    const five = put(port, "/r", 5);
    await waitFor(() => fence.turns.users("r") === 2, "the write of token 5 to wait for its turn");
    assert.equal((await put(port, "/other", 1)).status, 201, "another resource does not wait");
    proceed();
    assert.equal((await six).status, 201);
    assert.equal((await five).status, 409, "checked after 6 was applied: stale");
    assert.deepEqual(applied, [1n, 6n]);
    await waitFor(() => fence.turns.busy() === 0, "no turn left behind");
  } finally {
    proceed();
    httpd.close();
  }
});
