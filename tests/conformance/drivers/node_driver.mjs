// The contract driver of the Node client (tests/conformance/PROTOCOL.md): JSON steps on stdin,
// answers and lost events on stdout. It maps each step onto the client's public API as an
// application would and reports what the client said; no retries, clocks or checks of its own.

import { createRequire } from "node:module";
import readline from "node:readline";
import { Client, LeaseLostError, UnavailableError, LeasegateError } from "../../../clients/node/index.mjs";

// The client's own duration parser: what ttl: "15s" goes through (not exported by the package).
const { toMillis } = createRequire(import.meta.url)("../../../clients/node/src/duration.js");

const CAPABILITIES = ["read", "semaphore", "write", "fence", "duration", "check_after_pause"];
let client = null;
const leases = new Map();

const emit = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);

function failure(error) {
  let code = "driver_error";
  if (error instanceof LeaseLostError) code = "lost";
  else if (error instanceof UnavailableError) code = "unavailable";
  else if (error instanceof LeasegateError && error.code) code = error.code;
  const answer = { ok: false, error: code, message: `${error.name}: ${error.message}` };
  if (error?.body && typeof error.body === "object" && error.body.max_token !== undefined) {
    answer.max_token = String(error.body.max_token);
  }
  return answer;
}

const granted = (ref, lease) => ({
  ok: true, lease_ref: ref, token: String(lease.token), name: lease.name, mode: lease.mode, ttl_ms: lease.ttl,
  lease_header: { ...lease.headers },
});

function lease(ref) {
  const l = leases.get(ref);
  if (!l) throw new Error(`no lease ref ${ref}`);
  return l;
}

async function step(s) {
  switch (s.op) {
    case "hello":
      client = new Client({ servers: s.servers, owner: s.owner, timeout: `${s.timeout_ms}ms`,
        retryFor: `${s.retry_for_ms}ms` });
      return { ok: true, client: "node", capabilities: CAPABILITIES };
    case "acquire": {
      const missing = ["reenter", "request_id"].filter((k) => s[k] !== undefined && s[k] !== null);
      if (missing.length) return { ok: false, error: "unsupported", message: `no ${missing.join(", ")}` };
      const ref = `L${leases.size + 1}`;
      const onLost = (error) => emit({ event: "lost", lease_ref: ref, at_ms: Date.now(), reason: error.message });
      const options = { ttl: `${s.ttl_ms}ms`, wait: `${s.wait_ms ?? 0}ms`, keepAlive: true, onLost };
      const l = s.semaphore
        ? await client.acquirePermit(s.name, { ...options, limit: s.semaphore.limit })
        : await client.acquire(s.name, { ...options, mode: s.mode ?? "write" });
      leases.set(ref, l);
      return granted(ref, l);
    }
    case "renew": {
      const l = lease(s.lease_ref);
      await l.renew(s.ttl_ms === undefined || s.ttl_ms === null ? {} : { ttl: `${s.ttl_ms}ms` });
      return { ok: true, token: String(l.token), ttl_ms: l.ttl };
    }
    case "release":
      await lease(s.lease_ref).release();
      return { ok: true };
    case "check":
      lease(s.lease_ref).check();
      return { ok: true };
    case "write": {
      const response = await lease(s.lease_ref).fetch(s.path, { method: s.method, body: s.body });
      let code = null;
      try {
        code = JSON.parse(await response.text()).error ?? null;
      } catch {
        code = null;
      }
      return { ok: true, status: response.status, code };
    }
    case "fence": {
      const answer = await client.fence(s.resource, s.token);
      return { ok: true, accepted: answer.accepted, max_token: String(answer.max_token) };
    }
    case "duration":
      try {
        return { ok: true, ms: toMillis(s.text, "text") };
      } catch (error) {
        return { ok: false, error: "bad_duration", message: error.message };
      }
    default:
      return { ok: false, error: "unsupported", message: `no op ${s.op}` };
  }
}

// Steps one at a time, in order (the runner waits for each answer anyway).
let chain = Promise.resolve();
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  chain = chain.then(async () => {
    let s;
    let answer;
    try {
      s = JSON.parse(line);
      answer = await step(s);
    } catch (error) {
      answer = failure(error);
    }
    emit({ ...answer, id: s?.id ?? null });
  });
}).on("close", () => {
  chain.then(() => process.exit(0));
});
