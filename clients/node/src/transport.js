// Requests to a list of servers that serve one lock space, with Node's built-in fetch.
//
// A connection failure, a timeout or a 503 moves on to the next server, and a whole
// round of failures backs off before the next one, until the call's time is up. Any
// other answer is final.

import https from "node:https";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { LeasegateError, OverloadedError, UnavailableError, errorFromAnswer } from "./errors.js";
import { parseAnswer, stringifyBody } from "./json.js";

const MIN_ATTEMPT_MS = 50; // no request gets a shorter timeout, even at its call's end
const COURTESY_MS = 1000; // per server, for the release of a lease already lost
const BACKOFF_FIRST_MS = 50;
const BACKOFF_MAX_MS = 1000;

/** Milliseconds on a clock that never jumps. */
export const now = () => performance.now();

/** A lock or resource name as a path: its own characters stay, anything else is encoded. */
export function quoteName(name) {
  return encodeURIComponent(name).replace(/%2F/gi, "/").replace(/%3A/gi, ":");
}

export const lockPath = (name, action) => `/v1/locks/${quoteName(name)}/${action}`;

/** Why a fetch failed, in a few words: ECONNREFUSED, TimeoutError... */
function describe(error) {
  return error.cause?.code ?? error.cause?.message ?? error.name ?? String(error);
}

/** No answer from a server: refused, reset, timed out, cut short. */
class UnreachableError extends Error {}

export class Transport {
  #urls;
  #current = 0; // the server that answered last; calls start there
  #httpsAgent;
  #auth;

  /**
   * @param {string[]} urls base URLs (a path prefix is kept)
   * @param {{timeoutMs: number, retryForMs: number, ca?: string|Buffer, key?: string}} limits;
   *   for https servers, the CAs (PEM) their certificates must be signed by (default: Node's);
   *   the API key sent with every request (Authorization: Bearer) to a server with --auth-file
   */
  constructor(urls, { timeoutMs, retryForMs, ca, key }) {
    this.#urls = urls.map((url) => {
      const parsed = new URL(url.trim());
      if (!/^https?:$/.test(parsed.protocol)) throw new TypeError(`not an http(s) server URL: ${url}`);
      return parsed.origin + parsed.pathname.replace(/\/+$/, "");
    });
    if (this.#urls.length === 0) throw new TypeError("no server URL given");
    this.timeoutMs = timeoutMs;
    this.retryForMs = retryForMs;
    // https goes through node:https, whose agent takes the CAs (fetch has no such
    // option); it verifies certificates and host names, always.
    this.#httpsAgent = new https.Agent({ keepAlive: true, ca });
    this.#auth = key ? { Authorization: `Bearer ${key}` } : {};
  }

  get urls() {
    return [...this.#urls];
  }

  /**
   * Sends until some server answers other than 503. Resolves to {server, answer,
   * sent}: the server, the parsed answer, and when (on performance.now()) the
   * successful attempt was sent. Rejects with the error of the answer.
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
    const failures = [];
    const count = this.#urls.length;
    for (let tried = 1; ; tried++) {
      const index = this.#current % count;
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
      let failure;
      try {
        const { status, text } = await this.send(server, method, path, {
          body: payload === undefined ? undefined : stringifyBody(payload),
          headers: payload === undefined ? {} : { "Content-Type": "application/json" },
          timeoutMs: Math.max(timeoutMs, MIN_ATTEMPT_MS),
        });
        const answer = parse(status, text);
        if (status < 300) {
          this.#current = index;
          return { server, answer, sent };
        }
        failure = errorFromAnswer(status, answer);
      } catch (error) {
        if (!(error instanceof UnreachableError)) throw error;
        failure = `${server}: ${error.message}`;
      }
      if (failure instanceof LeasegateError && !(failure instanceof OverloadedError)) throw failure;
      failures.push(failure);
      this.#current = index + 1;
      const left = until - now();
      if (tried >= count && left <= 0) {
        throw failure instanceof LeasegateError ? failure : this.#unavailable(failures.slice(-count));
      }
      if (tried % count === 0) {
        const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** (tried / count - 1));
        await sleep(Math.min(left, backoff * (0.5 + Math.random() / 2)));
      }
    }
  }

  /**
   * One request to one server; resolves to {status, text} for every status and
   * rejects with UnreachableError when no whole answer came within timeoutMs.
   */
  async send(server, method, path, { body, headers, timeoutMs }) {
    headers = { ...headers, ...this.#auth };
    const signal = AbortSignal.timeout(Math.ceil(timeoutMs));
    if (server.startsWith("https:")) {
      try {
        const res = await httpsRequest(server + path, { method, body, headers, signal, agent: this.#httpsAgent });
        return { status: res.status, text: res.body.toString("utf8") };
      } catch (error) {
        throw new UnreachableError(error.code ?? error.message ?? String(error), { cause: error });
      }
    }
    try {
      const res = await fetch(server + path, { method, body, headers, signal });
      return { status: res.status, text: await res.text() };
    } catch (error) {
      throw new UnreachableError(describe(error), { cause: error });
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
        throw new UnreachableError(describe(error), { cause: error });
      }
    }
    const { body } = init;
    if (body != null && typeof body !== "string" && !(body instanceof Uint8Array)) {
      throw new TypeError("lease.fetch over https takes a string or bytes body");
    }
    const method = init.method ?? "GET";
    let res;
    try {
      res = await httpsRequest(url, {
        method, body: body ?? undefined, headers: Object.fromEntries(init.headers), signal: init.signal,
        agent: this.#httpsAgent,
      });
    } catch (error) {
      throw new UnreachableError(error.code ?? error.message ?? String(error), { cause: error });
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
   * already be gone, where the server frees the lock at its TTL anyway.
   */
  async courtesyRelease(name, lease) {
    for (const server of this.#urls) {
      try {
        const { status } = await this.send(server, "POST", lockPath(name, "release"), {
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

  #unavailable(failures) {
    return new UnavailableError(`no leasegate server answered: ${failures.map(String).join("; ")}`);
  }
}

/**
 * One request with node:https (body: a string, bytes or undefined); resolves to
 * {status, headers, body} (node's header object, a Buffer) once the whole answer is in.
 */
function httpsRequest(url, { method, body, headers, signal, agent }) {
  return new Promise((resolve, reject) => {
    const sized = body === undefined ? headers : { ...headers, "Content-Length": Buffer.byteLength(body) };
    const req = https.request(url, { method, headers: sized, signal, agent }, (res) => {
      const chunks = [];
      res.on("data", (chunk) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
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
