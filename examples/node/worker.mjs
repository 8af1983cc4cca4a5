#!/usr/bin/env node
// leasegate example worker: Node.js 18+, with the client library in clients/node.
//
// ITERATIONS times, it does the classic fenced read-modify-write:
//   1. acquire LOCK, long-polling up to WAIT_MS for it      POST /v1/locks/LOCK/acquire
//   2. keep the lease alive: the library's watchdog renews every TTL_MS/3 for as
//      long as the withLock callback runs                   POST /v1/locks/LOCK/renew
//   3. read the counter through the guard (404 means 0)     GET  /store/KEY
//   4. write counter+1 through the guard, with the lease    PUT  /store/KEY
//        Fencing-Lease: <lease from acquire>
//   5. release the lock when the callback is done           POST /v1/locks/LOCK/release
//
// The guard (`leasegate serve --guard /store/=http://storage/`) binds /store/KEY to the
// lock named KEY, so LOCK defaults to KEY. It forwards the PUT only while our lease
// holds that lock, so a worker that stalled past its lease gets 409 stale_token instead
// of overwriting a newer value. (A LOCK other than KEY needs a guard with one lock for
// the whole prefix: --guard /store/=http://storage/,lock=LOCK.)
//
// Configuration (environment variables, all optional):
//   LEASEGATE_SERVER  base URL of leasegate, or several, comma-separated
//                                                    (default http://127.0.0.1:7400)
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
// status, a lost lease or a connection failure (retried on every server for up to
// WAIT_MS, or 5 s when that is shorter); 2 on a bad configuration value.

import os from "node:os";
import process from "node:process";
import { setTimeout as sleep } from "node:timers/promises";
import {
  Client, LeaseLostError, LeasegateError, LockHeldError, UnavailableError,
} from "../../clients/node/index.mjs"; // or: from "leasegate", after npm install ./clients/node

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

const SERVER = process.env.LEASEGATE_SERVER || "http://127.0.0.1:7400";
const KEY = process.env.KEY || "counter";
const LOCK = process.env.LOCK || KEY; // the guard binds /store/KEY to lock KEY
const ITERATIONS = envInt("ITERATIONS", 1);
const OWNER = process.env.OWNER || `node-${os.hostname()}-${process.pid}`;
const STORE_PREFIX = "/" + (process.env.STORE_PREFIX || "/store/").replace(/^\/+|\/+$/g, "") + "/";
const TTL_MS = envInt("TTL_MS", 15000);
const WAIT_MS = envInt("WAIT_MS", 60000);
const WORK_MS = envInt("WORK_MS", 0);

const STORE_PATH = STORE_PREFIX + KEY;

const unexpected = (step, status, text) => new WorkerError(`${step}: unexpected HTTP ${status}: ${text.slice(0, 500)}`);

async function oneIteration(client, i) {
  let token, value;
  try {
    // 1. Acquire. The request stays open until we are granted the lock (waiters are
    //    served in arrival order) or WAIT_MS passes (LockHeldError). 2. From here on
    //    the watchdog renews the lease every TTL/3 until the callback is done.
    // Durations carry their unit: the client refuses a bare number.
    const options = { ttl: `${TTL_MS}ms`, wait: `${WAIT_MS}ms`, metadata: { example: "node", pid: process.pid } };
    await client.withLock(LOCK, options,
      async (lease) => {
        token = lease.token;
        // 3. Read the counter through the guard. Reads need no lease (the guard drops
        //    it); a missing object is 0.
        const got = await lease.fetch(STORE_PATH);
        const text = await got.text();
        if (got.status === 404) {
          value = 0;
        } else if (got.status === 200) {
          if (!/^\s*[0-9]+\s*$/.test(text)) {
            throw new WorkerError(`read: '${KEY}' does not hold a number: ${JSON.stringify(text.slice(0, 100))}`);
          }
          value = Number(text.trim());
        } else {
          throw unexpected("read", got.status, text);
        }

        if (WORK_MS) await sleep(WORK_MS); // the "work"; the watchdog keeps the lease alive
        lease.check(); // LeaseLostError if the watchdog could not keep it

        // 4. Write value+1 through the guard with our lease: it proves that we hold the
        //    lock /store/KEY is bound to. 409 stale_token: our lease no longer holds it
        //    (someone newer does); 428: no lease sent.
        const put = await lease.fetch(STORE_PATH, {
          method: "PUT", body: String(value + 1), headers: { "Content-Type": "text/plain" },
        });
        if (![200, 201, 204].includes(put.status)) throw unexpected("write", put.status, await put.text());
      });
    // 5. withLock released the lock, also when a step above failed, so the next
    //    waiter is woken at once (not when our TTL runs out).
  } catch (e) {
    if (e instanceof LockHeldError) {
      throw new WorkerError(`acquire: lock '${LOCK}' still held after waiting ${WAIT_MS} ms by ${JSON.stringify(e.body.holder)}`);
    }
    if (e instanceof LeaseLostError) throw new WorkerError(`lease lost: ${e.message}`);
    if (e instanceof UnavailableError) {
      throw new WorkerError(`request failed (${e.message}); is leasegate running at ${SERVER}?`);
    }
    if (e instanceof LeasegateError) throw new WorkerError(`unexpected HTTP ${e.status}: ${e.message}`);
    throw e;
  }
  console.log(`${OWNER}: iteration ${i}/${ITERATIONS} token ${token}: ${KEY} ${value} -> ${value + 1}`);
}

const client = new Client({ servers: SERVER, owner: OWNER });
try {
  for (let i = 1; i <= ITERATIONS; i++) await oneIteration(client, i);
} catch (e) {
  if (!(e instanceof WorkerError)) throw e;
  process.stderr.write(`worker.mjs [${OWNER}]: ${e.message}\n`);
  process.exitCode = 1;
}
