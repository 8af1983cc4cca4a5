"use strict";
// Requests to a list of servers that serve one lock space, with node:http and node:https.
//
// Not fetch: fetch (undici) gives up on an answer whose headers take 300 s, which would
// cut a long-polling acquire short and send it to the back of the queue; node:http has
// no such limit, so one long-poll may wait as long as the server allows (wait_ms up to
// an hour). Each request's own time limit is an AbortSignal.
//
// A connection failure, a timeout or a 503 moves on to the next server, and a whole
// round of failures backs off before the next one, until the call's time is up. A
// certificate that fails verification is not tried again: when no other server is
// left, the call throws TLSVerificationError at once. Any other answer is final.
//
// The first-byte watch (firstByteTimeout): a server whose answer has not begun this long
// after the request was sent (or that has not even accepted the connection) is asked GET
// /readyz, with the same bound. Ready, it is working on the request (a long-poll waits
// for its grant, a commit is slow): the wait goes on, to be asked again a firstByteTimeout
// later. Not ready (503) or silent (paused, stopped, cut off), the attempt is given up as
// one that timed out, and the call moves on to the next server (an acquire with its
// request_id). A server without /readyz (404) counts as ready.

const http = require("node:http");
const https = require("node:https");
const { performance } = require("node:perf_hooks");
const { setTimeout: sleep } = require("node:timers/promises");
const {
  LeasegateError, OverloadedError, TLSVerificationError, UnavailableError, errorFromAnswer,
} = require("./errors.js");
const { parseAnswer, stringifyBody } = require("./json.js");

const MIN_ATTEMPT_MS = 50; // no request gets a shorter timeout, even at its call's end
const COURTESY_MS = 1000; // per server, for the release of a lease already lost
const BACKOFF_FIRST_MS = 50;
const BACKOFF_MAX_MS = 1000;
const MAX_ANSWER_BYTES = 64 * 1024 * 1024; // an answer larger than this is refused, not buffered

// What the CLI says after a failed verification (src/cli/cli_http.c), with our option.
const TLS_HINT = "a server whose certificate a private CA signed needs the ca option or $LEASEGATE_CACERT";
// OpenSSL's verification failures as Node names them (error.code), and Node's own for a
// certificate that is not for the host name.
const TLS_CODES = new Set([
  "UNABLE_TO_GET_ISSUER_CERT", "UNABLE_TO_GET_CRL", "UNABLE_TO_DECRYPT_CERT_SIGNATURE",
  "UNABLE_TO_DECRYPT_CRL_SIGNATURE", "UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY", "CERT_SIGNATURE_FAILURE",
  "CRL_SIGNATURE_FAILURE", "CERT_NOT_YET_VALID", "CERT_HAS_EXPIRED", "CRL_NOT_YET_VALID", "CRL_HAS_EXPIRED",
  "ERROR_IN_CERT_NOT_BEFORE_FIELD", "ERROR_IN_CERT_NOT_AFTER_FIELD", "ERROR_IN_CRL_LAST_UPDATE_FIELD",
  "ERROR_IN_CRL_NEXT_UPDATE_FIELD", "DEPTH_ZERO_SELF_SIGNED_CERT", "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "UNABLE_TO_VERIFY_LEAF_SIGNATURE", "CERT_CHAIN_TOO_LONG", "CERT_REVOKED",
  "INVALID_CA", "PATH_LENGTH_EXCEEDED", "INVALID_PURPOSE", "CERT_UNTRUSTED", "CERT_REJECTED", "HOSTNAME_MISMATCH",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/** Milliseconds on a clock that never jumps. */
const now = () => performance.now();

/** A lock or resource name as a path: its own characters stay, anything else is encoded. */
function quoteName(name) {
  return encodeURIComponent(name).replace(/%2F/gi, "/").replace(/%3A/gi, ":");
}

// What each kind of name is called in the API's paths, and an election's own words
// for an acquire and a release.
const COLLECTIONS = { lock: "locks", semaphore: "semaphores", election: "elections" };
const ELECTION_ACTIONS = { acquire: "campaign", release: "resign" };

/** The path of an action ("acquire", "renew", "release"...) on a lock, a semaphore or an election (kind). */
const lockPath = (name, action, kind = "lock") =>
  `/v1/${COLLECTIONS[kind]}/${quoteName(name)}/${kind === "election" ? ELECTION_ACTIONS[action] ?? action : action}`;

/** No answer from a server: refused, reset, timed out, cut short, or not verified (tls). */
class UnreachableError extends Error {
  constructor(message, { cause, tls = false } = {}) {
    super(message, { cause });
    this.tls = tls;
  }
}

/** The UnreachableError for a request to `server` that failed with `error`. */
function unreachable(server, error, signal) {
  const tls = TLS_CODES.has(error?.code);
  let text;
  if (signal?.aborted && signal.reason?.name === "TimeoutError") text = "no answer in time (TimeoutError)";
  else if (error?.code && !String(error.message).includes(error.code)) text = `${error.code}: ${error.message}`;
  else text = error?.message ?? String(error);
  return new UnreachableError(`${server}: ${text}${tls ? ` (${TLS_HINT})` : ""}`, { cause: error, tls });
}

class Transport {
  #urls;
  #current = 0; // the server that answered last; calls start there
  #httpAgent = new http.Agent({ keepAlive: true });
  #httpsAgent;
  #auth;

  /**
   * @param {string[]} urls base URLs (a path prefix is kept)
   * @param {{timeoutMs: number, retryForMs: number, ca?: string|Buffer, key?: string}} limits;
   *   for https servers, the CAs (PEM) their certificates must be signed by (default: Node's);
   *   the API key sent with every request (Authorization: Bearer) to a server with --auth-file
   */
  constructor(urls, { timeoutMs, retryForMs, ca, key, firstByteMs }) {
    this.#urls = urls.map((url) => {
      const parsed = new URL(url.trim());
      if (!/^https?:$/.test(parsed.protocol)) throw new TypeError(`not an http(s) server URL: ${url}`);
      return parsed.origin + parsed.pathname.replace(/\/+$/, "");
    });
    if (this.#urls.length === 0) throw new TypeError("no server URL given");
    this.timeoutMs = timeoutMs;
    this.retryForMs = retryForMs;
    this.firstByteMs = firstByteMs;
    // Certificates and host names are verified, always; ca only says which CAs to trust.
    this.#httpsAgent = new https.Agent({ keepAlive: true, ca });
    this.#auth = key ? { Authorization: `Bearer ${key}` } : {};
  }

  get urls() {
    return [...this.#urls];
  }

  /** The server calls start at: the one that answered last. */
  get currentServer() {
    return this.#urls[this.#current % this.#urls.length];
  }

  /** The current server failed: calls start at the next one. */
  passOver() {
    this.#current = (this.#current + 1) % this.#urls.length;
  }

  /**
   * GET path from server as a stream (an election's observers' events): resolves to
   * {req, res} once the answer's head came within timeoutMs (the body is the caller's to
   * read, and req to destroy); rejects with UnreachableError when none came.
   */
  openStream(server, path, { headers, timeoutMs, signal }) {
    return new Promise((resolve, reject) => {
      const request = server.startsWith("https:") ? https.request : http.request;
      const req = request(server + path, {
        method: "GET", headers: { ...headers, ...this.#auth }, agent: this.#agent(server), signal,
      }, (res) => {
        clearTimeout(timer);
        resolve({ req, res });
      });
      const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs}ms`)), timeoutMs);
      req.on("error", (error) => {
        clearTimeout(timer);
        reject(unreachable(server, error, signal));
      });
      req.end();
    });
  }

  /**
   * Sends until some server answers other than 503. Resolves to {server, answer,
   * sent}: the server, the parsed answer, and when (on performance.now()) the
   * successful attempt was sent. Rejects with the error of the answer,
   * UnavailableError, or TLSVerificationError.
   *
   * @param {string} method
   * @param {string} path
   * @param {object} [options]
   * @param {object} [options.body] JSON body
   * @param {number} options.until no new attempt starts after it, once every server was tried
   * @param {number} [options.waitUntil] a long-polling acquire: each attempt waits what is left
   * @param {boolean} [options.hard] no answer is awaited past `until` either
   */
  async call(method, path, { body, until, waitUntil, hard = false }) {
    const failures = []; // of attempts without a final answer, latest last
    const untrusted = new Map(); // index -> why its certificate failed: never tried again in this call
    const count = this.#urls.length;
    for (let tried = 0; ;) {
      const index = this.#current % count;
      if (untrusted.has(index)) {
        this.#current = index + 1;
        continue;
      }
      const server = this.#urls[index];
      const sent = now();
      let timeoutMs = this.timeoutMs;
      let payload = body;
      if (waitUntil !== undefined) {
        const waitMs = Math.max(0, Math.floor(waitUntil - sent));
        payload = { ...body, wait_ms: waitMs };
        timeoutMs += waitMs;
      }
      if (hard) timeoutMs = Math.min(timeoutMs, until - sent);
      let outcome;
      try {
        outcome = await this.send(server, method, path, {
          body: payload === undefined ? undefined : stringifyBody(payload),
          headers: payload === undefined ? {} : { "Content-Type": "application/json" },
          timeoutMs: Math.max(timeoutMs, MIN_ATTEMPT_MS),
        });
      } catch (error) {
        if (!(error instanceof UnreachableError)) throw error;
        outcome = error;
      }
      let failure;
      if (outcome instanceof UnreachableError) {
        if (outcome.tls) {
          untrusted.set(index, outcome.message);
          if (untrusted.size === count) throw tlsError([...untrusted.values()], outcome.cause);
          this.#current = index + 1;
          continue; // to the next server at once: not a round's failure to back off from
        }
        failure = outcome.message;
      } else {
        const answer = parse(outcome.status, outcome.text);
        if (outcome.status < 300) {
          this.#current = index;
          return { server, answer, sent };
        }
        failure = errorFromAnswer(outcome.status, answer);
        if (!(failure instanceof OverloadedError)) throw failure;
      }
      failures.push(failure);
      this.#current = index + 1;
      tried++;
      const live = count - untrusted.size;
      const left = until - now();
      if (tried >= live && left <= 0) {
        throw failure instanceof LeasegateError ? failure : unavailable([...untrusted.values(), ...failures.slice(-live)]);
      }
      if (tried % live === 0) {
        const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** (tried / live - 1));
        await sleep(Math.min(left, backoff * (0.5 + Math.random() / 2)));
      }
    }
  }

  /**
   * One request to one server with node:http(s); resolves to {status, text} for every
   * status and rejects with UnreachableError when no whole answer came within timeoutMs.
   */
  async send(server, method, path, { body, headers, timeoutMs, watch = true }) {
    const signal = AbortSignal.timeout(Math.ceil(timeoutMs));
    const firstByteMs = watch ? this.firstByteMs : undefined;
    const ready = () => this.#ready(server);
    try {
      const res = await nodeRequest(server + path, {
        method, body, headers: { ...headers, ...this.#auth }, signal, agent: this.#agent(server), firstByteMs, ready,
      });
      return { status: res.status, text: res.body.toString("utf8") };
    } catch (error) {
      throw unreachable(server, error, signal);
    }
  }

  /**
   * fetch(url, init) for lease.fetch: an https URL goes through node:https with this
   * transport's CAs (the body must then be a string or bytes), anything else to fetch.
   * Resolves to a Response; rejects with UnreachableError when no answer came.
   */
  async fetch(url, init) {
    const sent = new Headers(init.headers);
    for (const [name, value] of Object.entries(this.#auth)) sent.set(name, value);
    init = { ...init, headers: sent };
    if (!url.startsWith("https:")) {
      try {
        return await fetch(url, init);
      } catch (error) {
        throw unreachable(new URL(url).origin, error.cause ?? error, init.signal);
      }
    }
    const { body } = init;
    if (body != null && typeof body !== "string" && !(body instanceof Uint8Array)) {
      throw new TypeError("lease.fetch over https takes a string or bytes body");
    }
    const method = init.method ?? "GET";
    let res;
    try {
      res = await nodeRequest(url, {
        method, body: body ?? undefined, headers: Object.fromEntries(init.headers), signal: init.signal,
        agent: this.#httpsAgent,
      });
    } catch (error) {
      throw unreachable(new URL(url).origin, error, init.signal);
    }
    const headers = new Headers();
    for (const [name, value] of Object.entries(res.headers)) {
      for (const v of [].concat(value)) headers.append(name, v);
    }
    const empty = method === "HEAD" || [101, 204, 205, 304].includes(res.status);
    return new Response(empty ? null : res.body, { status: res.status, headers });
  }

  /**
   * One short release attempt per server, errors ignored: for a lease that may
   * already be gone, where the server frees the lock (or permit) at its TTL anyway.
   */
  async courtesyRelease(name, lease, kind = "lock") {
    for (const server of this.#urls) {
      try {
        const { status } = await this.send(server, "POST", lockPath(name, "release", kind), {
          body: JSON.stringify({ lease }),
          headers: { "Content-Type": "application/json" },
          timeoutMs: Math.min(this.timeoutMs, COURTESY_MS),
        });
        if (status !== 503) return;
      } catch (error) {
        if (!(error instanceof UnreachableError)) throw error;
      }
    }
  }

  /** Whether the server's GET /readyz answers within the first-byte timeout, other than 503. */
  async #ready(server) {
    try {
      const { status } = await this.send(server, "GET", "/readyz", { headers: {}, timeoutMs: this.firstByteMs, watch: false });
      return status !== 503;
    } catch (error) {
      if (!(error instanceof UnreachableError)) throw error;
      return false;
    }
  }

  #agent(server) {
    return server.startsWith("https:") ? this.#httpsAgent : this.#httpAgent;
  }
}

/**
 * One request with node:http or node:https (body: a string, bytes or undefined);
 * resolves to {status, headers, body} (node's header object, a Buffer) once the whole
 * answer is in. No limit on how long the headers take but `signal`, and with
 * firstByteMs the first-byte watch (above): `ready()` is asked each firstByteMs
 * without an answer, and a false ends the request.
 */
function nodeRequest(url, { method, body, headers, signal, agent, firstByteMs, ready }) {
  return new Promise((resolve, reject) => {
    const sized = body === undefined ? headers : { ...headers, "Content-Length": Buffer.byteLength(body) };
    const request = url.startsWith("https:") ? https.request : http.request;
    let timer;
    let answered = false;
    const watch = () => {
      timer = setTimeout(async () => {
        const ok = await ready();
        if (answered || req.destroyed) return;
        if (ok) watch();
        else req.destroy(new Error(`no answer within ${firstByteMs}ms, and /readyz did not say it is ready`));
      }, firstByteMs);
    };
    const req = request(url, { method, headers: sized, signal, agent }, (res) => {
      answered = true;
      clearTimeout(timer);
      const chunks = [];
      let size = 0;
      res.on("data", (chunk) => {
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) req.destroy(new Error(`an answer of more than ${MAX_ANSWER_BYTES} bytes`));
        else chunks.push(chunk);
      });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
      res.on("close", () => {
        if (!res.complete) reject(new Error("the answer was cut short"));
      });
    });
    req.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    req.on("close", () => clearTimeout(timer));
    if (firstByteMs) watch();
    req.end(body);
  });
}

function unavailable(failures) {
  return new UnavailableError(`no leasegate server answered: ${failures.map(String).join("; ")}`);
}

function tlsError(failures, cause) {
  return new TLSVerificationError(`certificate verification failed: ${failures.join("; ")}`, { cause });
}

/** The JSON of an answer, or for an error answer that is not JSON, its text. */
function parse(status, text) {
  try {
    return parseAnswer(text);
  } catch {
    if (status < 300) {
      throw new LeasegateError(`HTTP ${status} with a body that is not JSON: ${text.slice(0, 200)}`, { status });
    }
    return text;
  }
}

module.exports = {
  BACKOFF_FIRST_MS, BACKOFF_MAX_MS, Transport, UnreachableError, lockPath, now, parse, quoteName, tlsError, unavailable,
};
