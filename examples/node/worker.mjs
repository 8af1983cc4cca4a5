#!/usr/bin/env node
// leasegate example worker: Node.js 18+, built-in fetch only (no npm packages).
//
// ITERATIONS times, it does the classic fenced read-modify-write:
//   1. acquire LOCK, long-polling up to WAIT_MS for it      POST /v1/locks/LOCK/acquire
//   2. keep the lease alive: renew every TTL_MS/3 in the background for as long as
//      the work runs                                        POST /v1/locks/LOCK/renew
//   3. read the counter through the guard (404 means 0)     GET  /store/KEY
//   4. write counter+1 through the guard, with the lease    PUT  /store/KEY
//        Fencing-Lease: <lease from acquire>
//   5. release the lock                                     POST /v1/locks/LOCK/release
//
// The guard (`leasegate serve --guard /store/=http://storage/`) binds /store/KEY to the
// lock named KEY, so LOCK defaults to KEY. It forwards the PUT only while our lease
// holds that lock, so a worker that stalled past its lease gets 409 stale_token instead
// of overwriting a newer value. (A LOCK other than KEY needs a guard with one lock for
// the whole prefix: --guard /store/=http://storage/,lock=LOCK.)
//
// Configuration (environment variables, all optional):
//   LEASEGATE_SERVER  base URL of leasegate          (default http://127.0.0.1:7400)
//   KEY               object name under the guard    (default counter)
//   LOCK              lock name                      (default: KEY)
//   ITERATIONS        how many increments            (default 1)
//   OWNER             owner label shown to others    (default node-<host>-<pid>)
//   STORE_PREFIX      the guard's path prefix        (default /store/)
//   TTL_MS            lease time-to-live             (default 15000)
//   WAIT_MS           how long acquire may wait      (default 60000)
//   WORK_MS           pretend to work this long between read and write (default 0)
//
// Exit status: 0 on success; 1 with a message on stderr on any unexpected HTTP
// status, a lost lease or a connection failure; 2 on a bad configuration value.

import os from "node:os";
import process from "node:process";
import { setTimeout as sleep } from "node:timers/promises";

class WorkerError extends Error {}

function envInt(name, dflt) {
  const raw = process.env[name] ?? "";
  if (raw === "") return dflt;
  if (!/^[0-9]+$/.test(raw)) {
    process.stderr.write(`worker.mjs: ${name} must be a whole number, got '${raw}'\n`);
    process.exit(2);
  }
  return Number(raw);
}

const SERVER = (process.env.LEASEGATE_SERVER || "http://127.0.0.1:7400").replace(/\/+$/, "");
const KEY = process.env.KEY || "counter";
const LOCK = process.env.LOCK || KEY; // the guard binds /store/KEY to lock KEY
const ITERATIONS = envInt("ITERATIONS", 1);
const OWNER = process.env.OWNER || `node-${os.hostname()}-${process.pid}`;
const STORE_PREFIX = "/" + (process.env.STORE_PREFIX || "/store/").replace(/^\/+|\/+$/g, "") + "/";
const TTL_MS = envInt("TTL_MS", 15000);
const WAIT_MS = envInt("WAIT_MS", 60000);
const WORK_MS = envInt("WORK_MS", 0);

const STORE_URL = SERVER + STORE_PREFIX + KEY;

// One HTTP request with a time limit; resolves to {status, text} for every status.
// fetch only rejects on network errors, which become a WorkerError here.
async function http(method, url, { body, headers = {}, timeoutMs = 30000 } = {}) {
  let res;
  try {
    res = await fetch(url, { method, body, headers, signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, text: await res.text() };
  } catch (e) {
    const why = e.cause?.code || e.cause?.message || e.message;
    throw new WorkerError(`${method} ${url}: request failed (${why}); is leasegate running at ${SERVER}?`);
  }
}

// POST /v1/locks/LOCK/ACTION with a JSON body; resolves to {status, json}.
async function lockApi(action, fields, timeoutMs = 30000) {
  const { status, text } = await http("POST", `${SERVER}/v1/locks/${LOCK}/${action}`, {
    body: JSON.stringify(fields),
    headers: { "Content-Type": "application/json" },
    timeoutMs,
  });
  try {
    return { status, json: JSON.parse(text) };
  } catch {
    throw new WorkerError(`${action}: HTTP ${status} with a body that is not JSON: ${text.slice(0, 300)}`);
  }
}

function unexpected(step, status, body) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return new WorkerError(`${step}: unexpected HTTP ${status}: ${text.slice(0, 500)}`);
}

// Renews the lease every TTL/3 until stop(). A failed renewal (409 not_holder: the
// lease expired, e.g. after a long pause) is kept in `lost`; the worker checks it
// before writing. Even without that check the guard would answer 409 stale_token.
function startRenewer(lease, ttlMs) {
  const state = { lost: null, renewals: 0, inFlight: null };
  const timer = setInterval(() => {
    if (state.lost || state.inFlight) return;
    state.inFlight = lockApi("renew", { lease })
      .then(({ status, json }) => {
        if (status === 200) state.renewals++;
        else state.lost = unexpected("renew", status, json).message;
      })
      .catch((e) => { state.lost = e.message; })
      .finally(() => { state.inFlight = null; });
  }, Math.max(1, Math.floor(ttlMs / 3)));
  state.stop = async () => {
    clearInterval(timer);
    if (state.inFlight) await state.inFlight; // never release while a renew is under way
  };
  return state;
}

async function oneIteration(i) {
  // 1. Acquire. The request stays open until we are granted the lock (waiters are
  //    served in arrival order) or WAIT_MS passes (409 lock_held).
  const { status, json: grant } = await lockApi("acquire", {
    owner: OWNER, ttl_ms: TTL_MS, wait_ms: WAIT_MS,
    metadata: { example: "node", pid: process.pid },
  }, WAIT_MS + 30000);
  if (status === 409 && grant.error === "lock_held") {
    throw new WorkerError(`acquire: lock '${LOCK}' still held after waiting ${WAIT_MS} ms by ${JSON.stringify(grant.holder)}`);
  }
  if (status !== 200) throw unexpected("acquire", status, grant);
  const { lease, token } = grant;

  let renewer = null;
  let released = false;
  let value;
  try {
    // 2. Renew once right away (checked here), then every TTL/3 in the background
    //    for as long as the work below runs.
    const r = await lockApi("renew", { lease });
    if (r.status !== 200) throw unexpected("renew", r.status, r.json);
    renewer = startRenewer(lease, TTL_MS);

    // 3. Read the counter through the guard. Reads need no lease; missing is 0.
    const got = await http("GET", STORE_URL);
    if (got.status === 404) {
      value = 0;
    } else if (got.status === 200) {
      if (!/^\s*[0-9]+\s*$/.test(got.text)) {
        throw new WorkerError(`read: '${KEY}' does not hold a number: ${JSON.stringify(got.text.slice(0, 100))}`);
      }
      value = Number(got.text.trim());
    } else {
      throw unexpected("read", got.status, got.text);
    }

    if (WORK_MS) await sleep(WORK_MS); // the "work"; the renewer keeps the lease alive
    if (renewer.lost) throw new WorkerError(`lease lost before writing: ${renewer.lost}`);

    // 4. Write value+1 through the guard with our lease: it proves that we hold the
    //    lock /store/KEY is bound to. 409 stale_token: our lease no longer holds it
    //    (someone newer does); 428: no lease sent.
    const put = await http("PUT", STORE_URL, {
      body: String(value + 1),
      headers: {
        "Content-Type": "text/plain",
        "Fencing-Lease": lease,
      },
    });
    if (![200, 201, 204].includes(put.status)) throw unexpected("write", put.status, put.text);

    // 5. Release, so the next waiter is woken at once (not when our TTL runs out).
    await renewer.stop();
    released = true;
    const rel = await lockApi("release", { lease });
    if (rel.status !== 200) throw unexpected("release", rel.status, rel.json);
  } finally {
    if (renewer) await renewer.stop();
    if (!released) {
      // Something failed while we held the lock: give it back on a best-effort
      // basis so waiters need not wait for the TTL (errors here are ignored).
      await lockApi("release", { lease }, 5000).catch(() => {});
    }
  }
  console.log(`${OWNER}: iteration ${i}/${ITERATIONS} token ${token}: ${KEY} ${value} -> ${value + 1}`);
}

try {
  for (let i = 1; i <= ITERATIONS; i++) await oneIteration(i);
} catch (e) {
  if (!(e instanceof WorkerError)) throw e;
  process.stderr.write(`worker.mjs [${OWNER}]: ${e.message}\n`);
  process.exitCode = 1;
}
