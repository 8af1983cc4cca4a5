#!/usr/bin/env node
// leasegate example: fenced writes to PostgreSQL from Node.js 18+ (the `pg` package, pinned
// in package.json beside this file: run `npm ci` here first; and the client library in
// clients/node).
//
// It takes the lock LOCK, and writes WRITES times under that one lease, each write its own
// transaction carrying the lease's fencing token, so that the database itself refuses a
// write from a holder that stalled past its lease once a newer holder has written:
//
//   FENCE=row    pattern 1, the fence in the row:
//                  UPDATE counters SET value = value + 1, fence = $1
//                  WHERE id = $2 AND fence <= $1 RETURNING value
//                no row: a newer token has written the row; nothing changed
//   FENCE=table  pattern 2, a fence table, in the same transaction as the writes:
//                  INSERT INTO fences ... ON CONFLICT (resource) DO UPDATE SET fence = ...
//                  WHERE fences.fence <= EXCLUDED.fence RETURNING fence
//                no row: stale, roll back; otherwise append a row to counter_entries
//
// `<=`, not `<`: the holder writes several times with one token. The tables are in
// schema.sql beside this file (apply it once). docs/fencing-sql.md explains both patterns.
//
// There is deliberately no lease.check() before a write: a check narrows the window in
// which a paused process can write late, but cannot close it (the pause can come right
// after the check); the condition in the database closes it.
//
// Configuration (environment variables, all optional):
//   PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE
//                     the database, as for psql (pg reads libpq's variables)
//   LEASEGATE_SERVER  base URL of leasegate, or several, comma-separated
//                                                    (default http://127.0.0.1:7400)
//   KEY               the counter to write           (default counter)
//   LOCK              the lock, and the fence table's resource (default: KEY)
//   FENCE             row or table                   (default row)
//   WRITES            how many writes under the lease (default 2)
//   OWNER             owner label shown to others    (default node-<host>-<pid>)
//   TTL_MS            lease time-to-live             (default 15000)
//   WAIT_MS           how long acquire may wait      (default 60000)
//   WORK_MS           pretend to work this long before the first write (default 0)
//
// Prints `OWNER: holding LOCK with token T` once the lock is granted, then one line per
// write: `OWNER: write I/N token T: KEY OLD -> NEW`.
//
// Exit status: 0 when every write was applied; 1 with a message on stderr when the
// database refused a write as stale (nothing of that write is applied), on a database
// error, a lost lease, or a failure to reach leasegate; 2 on a bad configuration value or
// when `pg` is not installed.

import os from "node:os";
import process from "node:process";
import { setTimeout as sleep } from "node:timers/promises";
import {
  Client, LeaseLostError, LeasegateError, LockHeldError, UnavailableError,
} from "../../clients/node/index.mjs"; // or: from "leasegate", after npm install ./clients/node

let pg;
try {
  pg = (await import("pg")).default;
} catch {
  process.stderr.write("fenced_write.mjs: the pg package is missing: run `npm ci` in examples/sql\n");
  process.exit(2);
}

class ExampleError extends Error {}

class Stale extends Error {
  constructor(fence) {
    super(`fence ${fence}`);
    this.fence = fence;
  }
}

function envInt(name, dflt) {
  const raw = process.env[name] ?? "";
  if (raw === "") return dflt;
  if (!/^[0-9]+$/.test(raw)) {
    process.stderr.write(`fenced_write.mjs: ${name} must be a whole number, got '${raw}'\n`);
    process.exit(2);
  }
  return Number(raw);
}

const SERVER = process.env.LEASEGATE_SERVER || "http://127.0.0.1:7400";
const KEY = process.env.KEY || "counter";
const LOCK = process.env.LOCK || KEY;
const FENCE = process.env.FENCE || "row";
const WRITES = envInt("WRITES", 2);
const OWNER = process.env.OWNER || `node-${os.hostname()}-${process.pid}`;
const TTL_MS = envInt("TTL_MS", 15000);
const WAIT_MS = envInt("WAIT_MS", 60000);
const WORK_MS = envInt("WORK_MS", 0);
if (FENCE !== "row" && FENCE !== "table") {
  process.stderr.write(`fenced_write.mjs: FENCE must be row or table, got '${FENCE}'\n`);
  process.exit(2);
}

// Tokens are 64-bit, and the client hands them out as decimal strings; pg sends a string
// parameter as is and returns bigint columns as strings, so nothing loses precision.
async function writeRow(db, token) {
  // The row must exist for the UPDATE to find it; a new row starts at fence 0.
  await db.query("INSERT INTO counters (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", [KEY]);
  const res = await db.query(
    "UPDATE counters SET value = value + 1, fence = $1 WHERE id = $2 AND fence <= $1 RETURNING value",
    [token, KEY]);
  if (res.rowCount === 0) { // 0 rows: the row's fence is above our token
    const now = await db.query("SELECT fence FROM counters WHERE id = $1", [KEY]);
    throw new Stale(now.rows[0].fence);
  }
  const value = BigInt(res.rows[0].value);
  return [value - 1n, value];
}

async function writeTable(db, token) {
  const claim = await db.query(
    "INSERT INTO fences AS f (resource, fence) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE"
    + " SET fence = EXCLUDED.fence WHERE f.fence <= EXCLUDED.fence RETURNING fence",
    [LOCK, token]);
  if (claim.rowCount === 0) { // no row: the fence is above our token
    const now = await db.query("SELECT fence FROM fences WHERE resource = $1", [LOCK]);
    throw new Stale(now.rows[0].fence);
  }
  // The fence row is now locked until COMMIT: another writer under LOCK waits at its own
  // claim, so this read stays true until we commit.
  const got = await db.query("SELECT coalesce(max(n), 0) AS last FROM counter_entries WHERE counter = $1", [KEY]);
  const last = BigInt(got.rows[0].last);
  await db.query("INSERT INTO counter_entries (counter, n, token, owner) VALUES ($1, $2, $3, $4)",
    [KEY, String(last + 1n), token, OWNER]);
  return [last, last + 1n];
}

// One transaction: COMMIT when write() returns, ROLLBACK when it throws.
async function inTransaction(db, write, token) {
  await db.query("BEGIN");
  try {
    const result = await write(db, token);
    await db.query("COMMIT");
    return result;
  } catch (e) {
    await db.query("ROLLBACK");
    throw e;
  }
}

async function main() {
  const db = new pg.Client(); // everything from PGHOST, PGPORT, PGUSER, ... as for psql
  try {
    await db.connect();
  } catch (e) {
    throw new ExampleError(`database: ${e.message}`);
  }
  const write = FENCE === "row" ? writeRow : writeTable;
  const client = new Client({ servers: SERVER, owner: OWNER });
  let stale = null;
  try {
    // Durations carry their unit: the client refuses a bare number.
    const options = { ttl: `${TTL_MS}ms`, wait: `${WAIT_MS}ms`, metadata: { example: "sql-node", pid: process.pid } };
    await client.withLock(LOCK, options,
      async (lease) => {
        console.log(`${OWNER}: holding ${LOCK} with token ${lease.token}`);
        if (WORK_MS) await sleep(WORK_MS); // a long pause here is what fencing is for
        for (let i = 1; i <= WRITES; i++) {
          let old, now;
          try {
            [old, now] = await inTransaction(db, write, lease.token);
          } catch (e) {
            if (!(e instanceof Stale)) throw e;
            stale = `write ${i}/${WRITES}: the database refused token ${lease.token}: the fence of `
              + `'${FENCE === "row" ? KEY : LOCK}' is ${e.fence} (a newer holder has written); nothing written`;
            return;
          }
          console.log(`${OWNER}: write ${i}/${WRITES} token ${lease.token}: ${KEY} ${old} -> ${now}`);
        }
      });
  } catch (e) {
    if (e instanceof LeaseLostError) {
      if (stale === null) throw new ExampleError(`lease lost: ${e.message}`); // else the refusal says more
    } else if (e instanceof LockHeldError) {
      throw new ExampleError(`acquire: lock '${LOCK}' still held after waiting ${WAIT_MS} ms`);
    } else if (e instanceof UnavailableError) {
      throw new ExampleError(`request failed (${e.message}); is leasegate running at ${SERVER}?`);
    } else if (e instanceof LeasegateError) {
      throw new ExampleError(`unexpected HTTP ${e.status}: ${e.message}`);
    } else if (e instanceof pg.DatabaseError) {
      throw new ExampleError(`database: ${e.message}`);
    } else {
      throw e;
    }
  } finally {
    await db.end();
  }
  if (stale !== null) throw new ExampleError(stale);
}

try {
  await main();
} catch (e) {
  if (!(e instanceof ExampleError)) throw e;
  process.stderr.write(`fenced_write.mjs [${OWNER}]: ${e.message}\n`);
  process.exitCode = 1;
}
