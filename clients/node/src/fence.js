"use strict";
// Fence checks in front of a storage backend's writes: middleware for node:http and
// Express-style stacks, `(req, res, next)`.
//
// Reads (GET, HEAD, OPTIONS) pass. A write must carry its fencing token in the
// Fencing-Token header (decimal digits: the guard proxy sets it, a client sends
// lease.token), which is checked against the highest token its resource has seen:
// 409 stale_token (with max_token) when older, so the handler never runs; 428
// token_required when there is none, 400 bad_request when it is not a token; 503
// fence_unavailable (Retry-After: 1) when the check could not be made.
//
// The marks are kept by leasegate (new ServerFence(client): POST /v1/fence/{resource},
// durable, shared by every replica of the backend, refusing a token never issued) or
// in this process (new LocalFence(): no round trip; they start from nothing at a restart).
//
// A check is only as good as the order of the writes it admits: writes with tokens 5
// and 6 may both pass (5 first) and be applied 6 first, 5 second. So by default one
// write per resource runs at a time, first come first served, from before its check
// until its response has finished (or its connection closed). Within one process,
// writes to a resource are then applied in token order; replicas need the store's own
// precondition (docs/fencing.md).

const { LeasegateError, StaleTokenError, UnavailableError } = require("./errors.js");
const { stringifyBody } = require("./json.js");

const READS = new Set(["GET", "HEAD", "OPTIONS"]);
const MAX_TOKEN = 2n ** 64n - 1n;

/** The highest token accepted per resource, in this process. */
class LocalFence {
  #marks = new Map();

  /** {accepted, maxToken}: accepted when token >= the mark, which it then becomes. */
  check(resource, token) {
    const mark = this.#marks.get(resource) ?? 0n;
    if (token >= mark) {
      this.#marks.set(resource, token);
      return { accepted: true, maxToken: token };
    }
    return { accepted: false, maxToken: mark };
  }

  /** The highest token accepted for the resource, 0n when none was. */
  mark(resource) {
    return this.#marks.get(resource) ?? 0n;
  }
}

/** The marks kept by leasegate: each check is client.fence(resource, token). */
class ServerFence {
  /** @param {import("./client.js").Client} client */
  constructor(client) {
    this.client = client;
  }

  async check(resource, token) {
    try {
      const answer = await this.client.fence(resource, token);
      return { accepted: true, maxToken: BigInt(answer.max_token) };
    } catch (error) {
      if (!(error instanceof StaleTokenError)) throw error;
      return { accepted: false, maxToken: BigInt(error.body.max_token ?? token) };
    }
  }
}

/** A token from a header's text, as a BigInt; throws RangeError for anything else. */
function parseToken(text) {
  const digits = String(text).trim();
  if (!/^[0-9]{1,20}$/.test(digits)) throw new RangeError(`Fencing-Token: "${digits.slice(0, 40)}" is not a fencing token`);
  const token = BigInt(digits);
  if (token < 1n || token > MAX_TOKEN) throw new RangeError(`Fencing-Token: ${digits} is not a token (1..2^64-1)`);
  return token;
}

/** The resource a request writes: its path without the leading "/", after prefix; null for none. */
function pathResource(req, prefix = "") {
  let path;
  try {
    path = decodeURIComponent(typeof req.path === "string" ? req.path : new URL(req.url, "http://localhost").pathname);
  } catch {
    return null; // malformed percent-encoding
  }
  path = path.replace(/^\/+/, "");
  return path ? prefix + path : null;
}

/** One write per resource at a time, first come first served: a chain of promises per resource. */
class Turns {
  #slots = new Map(); // resource -> { tail: Promise, users: number }

  /** Resolves, in arrival order, to a function that ends the turn (once). */
  async enter(resource) {
    let slot = this.#slots.get(resource);
    if (!slot) {
      slot = { tail: Promise.resolve(), users: 0 };
      this.#slots.set(resource, slot);
    }
    slot.users++;
    const before = slot.tail;
    let end;
    slot.tail = new Promise((resolve) => { end = resolve; });
    await before;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      end();
      if (--slot.users === 0) this.#slots.delete(resource);
    };
  }

  /** Resources with a write running or waiting. */
  busy() {
    return this.#slots.size;
  }

  /** Writes to the resource running or waiting. */
  users(resource) {
    return this.#slots.get(resource)?.users ?? 0;
  }
}

const error = (code, message, fields = {}) => ({ error: code, message, ...fields });

/** The refusal for a check that threw, as [status, body]. */
function failed(resource, cause) {
  if (cause instanceof UnavailableError) {
    return [503, error("fence_unavailable", `the fence check could not be made: ${cause.message}`, { resource })];
  }
  if (cause instanceof LeasegateError && cause.status >= 400 && cause.status < 500 && cause.body?.error) {
    return [cause.status, { ...cause.body, resource }];
  }
  return [502, error("fence_unavailable", `the fence check failed: ${cause?.message ?? cause}`, { resource })];
}

function refuse(res, status, body) {
  const text = stringifyBody(body); // tokens (BigInt) as JSON numbers
  const headers = { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) };
  if (status === 503) headers["Retry-After"] = "1";
  res.writeHead(status, headers);
  res.end(text);
}

/**
 * The middleware: `app.use(fenceMiddleware(new ServerFence(client)))` with Express, or
 * with node:http `const fence = fenceMiddleware(check); http.createServer((req, res) =>
 * fence(req, res, () => store(req, res)))`. An admitted write's token is req.fenceToken
 * (a BigInt).
 * @param {{check(resource: string, token: bigint): {accepted: boolean, maxToken: bigint} | Promise<{accepted: boolean, maxToken: bigint}>}} check
 * @param {{resource?: (req: import("node:http").IncomingMessage) => string | null, prefix?: string, serialize?: boolean}} [options]
 *   resource: the resource a write changes (default: the path, see pathResource);
 *   prefix: put before the default resource's name; serialize: false admits concurrent writes to one resource
 */
function fenceMiddleware(check, { resource, prefix = "", serialize = true } = {}) {
  const turns = serialize ? new Turns() : null;
  const resourceOf = resource ?? ((req) => pathResource(req, prefix));
  const middleware = async (req, res, next) => {
    if (READS.has(req.method)) return next();
    const name = resourceOf(req);
    const header = req.headers["fencing-token"];
    if (!header) {
      return refuse(res, 428, error("token_required", "a write needs its fencing token in the Fencing-Token header",
        { field: "Fencing-Token" }));
    }
    let token;
    try {
      token = parseToken(header);
    } catch (e) {
      return refuse(res, 400, error("bad_request", e.message, { field: "Fencing-Token" }));
    }
    if (!name) return refuse(res, 400, error("bad_request", "this path names no resource to fence"));
    // The turn ends when the response has finished or the connection closed, whichever
    // comes first, also when that happens while the write still waits for its turn.
    let leave = null;
    let ended = false;
    const end = () => {
      ended = true;
      if (leave) leave();
    };
    res.once("finish", end);
    res.once("close", end);
    leave = turns ? await turns.enter(name) : () => {};
    if (ended) return leave(); // the client went away while the write waited
    let outcome;
    try {
      outcome = await check.check(name, token);
    } catch (cause) {
      leave();
      return refuse(res, ...failed(name, cause));
    }
    if (!outcome.accepted) {
      leave();
      return refuse(res, 409, error("stale_token",
        `token ${token} is older than ${outcome.maxToken}, which ${name} has seen`,
        { resource: name, token, max_token: outcome.maxToken }));
    }
    if (ended) return undefined; // gone during the check: its turn is over, so its write must not run
    req.fenceToken = token;
    try {
      return next();
    } catch (e) {
      leave();
      throw e;
    }
  };
  middleware.turns = turns;
  return middleware;
}

module.exports = { fenceMiddleware, LocalFence, ServerFence, parseToken, pathResource };
