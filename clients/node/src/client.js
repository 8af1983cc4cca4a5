"use strict";
// The client: acquire (long-poll), withLock (with a watchdog), semaphore permits
// (acquirePermit, semaphore), elections (campaign, withLeadership, election, observe),
// a lock's value (value; lease.setValue), status, list, fence.

const { randomUUID } = require("node:crypto");
const fs = require("node:fs");
const os = require("node:os");
const process = require("node:process");
const { toMillis } = require("./duration.js");
const { LeaseLostError, LeasegateError, LockHeldError } = require("./errors.js");
const { toToken } = require("./json.js");
const { Lease } = require("./lease.js");
const { observe } = require("./observe.js");
const { Transport, lockPath, now, quoteName } = require("./transport.js");

const DEFAULT_SERVER = "http://127.0.0.1:7400";

/** The first-byte timeout in ms: a duration of at least 100ms. */
function firstByteMsOf(value) {
  const ms = toMillis(value, "firstByteTimeout");
  if (ms < 100) throw new RangeError(`firstByteTimeout: at least 100ms, not ${JSON.stringify(value)}`);
  return ms;
}
// The server's largest wait_ms: a longer wait polls again (node:http, unlike fetch,
// never cuts a long-poll short, see transport.js).
const MAX_POLL_MS = 3_600_000;

class Client {
  #transport;

  /**
   * @param {object} [options]
   * @param {string|string[]} [options.servers] URLs (or one "URL,URL" string) of servers
   *   serving one lock space; default $LEASEGATE_SERVER, else http://127.0.0.1:7400
   * @param {string} [options.owner] the label others see on locks taken here (default host-pid)
   * @param {string} [options.timeout] how long one request may take beyond its long-poll wait
   * @param {string} [options.retryFor] how long a call retries failed requests; an
   *   acquire keeps retrying for its wait when that is longer
   * @param {string|Buffer} [options.ca] the CAs (PEM) that https servers' certificates must
   *   be signed by; default the file $LEASEGATE_CACERT names, else Node's CAs
   * @param {string} [options.key] the API key for a server run with --auth-file (sent as
   *   Authorization: Bearer KEY); default $LEASEGATE_KEY, else none
   * @param {string} [options.firstByteTimeout] a server that has not accepted the
   *   connection, or not begun its answer, within this (default 2s) is asked GET /readyz;
   *   unless it says it is ready (a long-poll waits there), the request moves on to the
   *   next server: a paused or unready gateway costs about twice this, not the timeout
   */
  constructor({ servers, owner, timeout = "5s", retryFor = "5s", ca, key, firstByteTimeout = "2s" } = {}) {
    servers ??= process.env.LEASEGATE_SERVER || DEFAULT_SERVER;
    const urls = (typeof servers === "string" ? servers.split(",") : servers).filter((url) => url.trim());
    ca ??= process.env.LEASEGATE_CACERT ? fs.readFileSync(process.env.LEASEGATE_CACERT) : undefined;
    this.#transport = new Transport(urls, {
      timeoutMs: toMillis(timeout, "timeout"),
      retryForMs: toMillis(retryFor, "retryFor"),
      ca,
      key: key ?? (process.env.LEASEGATE_KEY || undefined),
      firstByteMs: firstByteMsOf(firstByteTimeout),
    });
    this.owner = owner || `${os.hostname()}-${process.pid}`.slice(0, 128);
  }

  get servers() {
    return this.#transport.urls;
  }

  /**
   * Takes the lock `name`, waiting up to `wait` in its FIFO queue.
   * One request_id goes with every attempt of this acquire, so a retry whose
   * predecessor's answer was lost gets that grant back instead of lock_held.
   * mode: "write" (exclusive, the default) or "read" (shared with the other readers;
   * the guard refuses a read lease's writes). lockDelay: a duration (at most 60s):
   * when this lease ends uncleanly (expires, force-released), nobody is granted the
   * lock until that long after.
   * Rejects with LockHeldError when not granted within `wait`, UnavailableError when
   * no server answered in time.
   * @param {string} name
   * @param {object} [options] ttl, wait, owner, metadata, onLost, keepAlive, mode, lockDelay (see index.d.ts)
   * @returns {Promise<Lease>}
   */
  async acquire(name, { mode = "write", lockDelay, ...options } = {}) {
    if (mode !== "write" && mode !== "read") {
      throw new TypeError(`mode: "write" (exclusive) or "read" (shared), not ${JSON.stringify(mode)}`);
    }
    const extra = mode === "read" ? { mode } : {};
    if (lockDelay !== undefined) extra.lock_delay_ms = toMillis(lockDelay, "lockDelay");
    return this.#take(name, "lock", extra, options);
  }

  /**
   * Takes `permits` (1 by default, at most `limit`) of the `limit` permits of the
   * semaphore `name` in one lease, waiting up to `wait` in its FIFO queue (a request at
   * the head is not passed by later ones, even smaller). The lease (lease.semaphore is
   * true, lease.permits how many it holds) has its own token, is renewed and released as
   * a lock's, all its permits at once; permits whose holder stops renewing come back at
   * its TTL. Rejects with SemaphoreFullError (a LockHeldError) when not granted within
   * `wait`, LimitMismatchError when the semaphore has holders or waiters under another
   * limit.
   * @param {string} name
   * @param {object} options limit (1..10000, required), permits, ttl, wait, owner, metadata, onLost, keepAlive
   * @returns {Promise<Lease>}
   */
  async acquirePermit(name, { limit, permits = 1, ...options } = {}) {
    if (!Number.isInteger(limit)) throw new TypeError(`limit: expected an integer, got ${JSON.stringify(limit)}`);
    if (limit < 1 || limit > 10000) throw new RangeError(`limit: the number of permits is 1..10000, not ${limit}`);
    if (!Number.isInteger(permits)) throw new TypeError(`permits: expected an integer, got ${JSON.stringify(permits)}`);
    if (permits < 1 || permits > limit) throw new RangeError(`permits: 1..limit (${limit}), not ${permits}`);
    // 1 is the default: a server older than permits takes this acquire too.
    return this.#take(name, "semaphore", permits === 1 ? { limit } : { limit, permits }, options);
  }

  /**
   * Campaigns to lead the election `name` with `value` (any JSON value: what GET and
   * observers show of the leader, such as its address), waiting up to `wait` behind the
   * candidates before it. The leader's Lease (lease.term = lease.token, its fencing token;
   * lease.value) is renewed as a lock's, with proclaim(value) and resign(). Rejects with
   * NotLeaderError (a LockHeldError) when not elected within `wait`. A campaign is never
   * answered a leadership it did not get: one whose connection ends leaves the queue.
   * @param {string} name
   * @param {object} [options] value, ttl, wait, owner, metadata, onLost, keepAlive
   * @returns {Promise<Lease>}
   */
  async campaign(name, { value = null, ...options } = {}) {
    return this.#take(name, "election", { value }, options);
  }

  /**
   * withLock for the leadership of an election (campaign): fn runs as its leader, the
   * watchdog renewing, and the leader resigns when fn is done; rejects with
   * LeaseLostError when leadership was lost meanwhile (check leader.valid before steps
   * that need it, or fence writes with leader.term).
   * @template T
   * @param {string} name
   * @param {object} options as for campaign
   * @param {(leader: Lease) => Promise<T>|T} fn
   * @returns {Promise<T>}
   */
  async withLeadership(name, options, fn) {
    if (typeof options === "function") [options, fn] = [{}, options];
    return this.#hold(await this.campaign(name, { ...options, keepAlive: true }), fn);
  }

  /** The election's state: {name, leader: {owner, term, value, since_ms} or null, vacant_since_ms, candidates, last_token, index}. */
  async election(name) {
    return (await this.#call("GET", `/v1/elections/${quoteName(name)}`)).answer;
  }

  /**
   * The election's new leaders, proclaimed values and vacancies, as an async iterator:
   * `for await (const event of client.observe("scheduler"))` gives {event: "leader", id,
   * owner, term, value} and {event: "vacant", id, reason, previous_term}, the first being
   * the state now (or, with lastEventId, the events after it). Across cut connections and
   * failovers none is given twice or missed (observe.js). Rejects with UnavailableError
   * when no server answered for retryFor (the client's by default), NotFoundError when
   * the server keeps no events (--events-keep 0). Leaving the loop, or aborting `signal`,
   * closes the stream.
   * @param {string} name
   * @param {{lastEventId?: string|number, retryFor?: string, signal?: AbortSignal}} [options]
   */
  observe(name, { lastEventId, retryFor, signal } = {}) {
    const retryForMs = retryFor === undefined ? this.#transport.retryForMs : toMillis(retryFor, "retryFor");
    return observe(this.#transport, name, { lastEventId, retryForMs, signal });
  }

  /** The lock's value: {name, value, value_version, value_token} (null and 0 when never written). */
  async value(name) {
    return (await this.#call("GET", lockPath(name, "value"))).answer;
  }

  /**
   * Acquires, runs `fn(lease)` while the watchdog keeps the lease alive, releases,
   * and resolves to what fn returned. If the lease was lost meanwhile (lease.valid
   * turned false and "lost" was emitted), rejects with LeaseLostError once fn is done
   * (fn is not interrupted: check lease.valid or call lease.check() before steps
   * that need the lock); what fn threw then is in the error's callbackError.
   * @template T
   * @param {string} name
   * @param {object} options as for acquire
   * @param {(lease: Lease) => Promise<T>|T} fn
   * @returns {Promise<T>}
   */
  async withLock(name, options, fn) {
    if (typeof options === "function") [options, fn] = [{}, options];
    return this.#hold(await this.acquire(name, { ...options, keepAlive: true }), fn);
  }

  /**
   * withLock for one of the `limit` permits of a semaphore:
   * `await client.semaphore("crawl/slots", { limit: 10, wait: "1m" }, async (permit) => ...)`.
   * @template T
   * @param {string} name
   * @param {object} options as for acquirePermit (limit required)
   * @param {(permit: Lease) => Promise<T>|T} fn
   * @returns {Promise<T>}
   */
  async semaphore(name, options, fn) {
    return this.#hold(await this.acquirePermit(name, { ...options, keepAlive: true }), fn);
  }

  /**
   * The lock's state: {name, held, mode, holder, holders, waiters, last_token,
   * delay_until_ms...} (never a lease id).
   */
  async status(name) {
    return (await this.#call("GET", `/v1/locks/${quoteName(name)}`)).answer;
  }

  /** The semaphore's state: {name, limit, holders, holders_total, available, waiters, last_token...}. */
  async semaphoreStatus(name) {
    return (await this.#call("GET", `/v1/semaphores/${quoteName(name)}`)).answer;
  }

  /**
   * The state of every lock (with semaphores: true, every semaphore) the server
   * knows whose name starts with `prefix`, in name order, fetched `pageSize` at a
   * time: `for await (const lock of client.list())`.
   */
  async *list({ prefix = "", after, pageSize = 100, semaphores = false } = {}) {
    const kind = semaphores ? "semaphores" : "locks";
    for (;;) {
      const query = new URLSearchParams({ prefix, limit: String(pageSize) });
      if (after !== undefined && after !== null) query.set("after", after);
      const { answer: page } = await this.#call("GET", `/v1/${kind}?${query}`);
      yield* page[kind];
      after = page.next;
      if (after === null) return;
    }
  }

  /**
   * Checks `token` (a decimal string, a bigint or a safe integer) against the
   * resource's high-water mark; rejects with StaleTokenError. Throws TypeError or
   * RangeError, before any request, for a value that is not a token.
   */
  async fence(resource, token) {
    const body = { token: toToken(token) };
    return (await this.#call("POST", `/v1/fence/${quoteName(resource)}`, body)).answer;
  }

  /**
   * The acquire of a lock, of a semaphore's permits or of an election's leadership
   * (kind), with `extra` in its body. One request_id goes with every attempt, so a
   * retry whose predecessor's answer was lost gets that grant back instead of lock_held.
   */
  async #take(name, kind, extra, { ttl = "30s", wait = "0s", owner, metadata, onLost, keepAlive = false }) {
    const ttlMs = toMillis(ttl, "ttl");
    const waitMs = toMillis(wait, "wait");
    const body = { owner: owner || this.owner, ttl_ms: ttlMs, request_id: randomUUID(), ...extra };
    if (metadata !== undefined) body.metadata = metadata;
    const path = lockPath(name, "acquire", kind);
    const start = now();
    const waitUntil = start + waitMs;
    const until = start + Math.max(waitMs, this.#transport.retryForMs);
    let granted;
    for (;;) {
      const pollUntil = Math.min(waitUntil, now() + MAX_POLL_MS);
      try {
        granted = await this.#transport.call("POST", path, { body, until, waitUntil: pollUntil });
        break;
      } catch (error) {
        if (!(error instanceof LockHeldError) || pollUntil >= waitUntil) throw error;
      }
    }
    const { server, answer: grant } = granted;
    let sent = start; // any attempt may have made the grant: the first was sent first
    if (now() - sent > grant.ttl_ms / 3) sent = await this.#confirm(name, grant, kind);
    const lease = new Lease(this.#transport, server, grant, sent, onLost, kind);
    return keepAlive ? lease.keepAlive() : lease;
  }

  /** Runs fn(lease) on a kept-alive lease, then releases it (see withLock). */
  async #hold(lease, fn) {
    let outcome;
    try {
      outcome = { value: await fn(lease) };
    } catch (error) {
      outcome = { error };
    }
    const lost = await this.#finish(lease);
    if (lost) {
      const error = new LeaseLostError(lost.message, { lease, cause: lost.cause });
      if ("error" in outcome) error.callbackError = outcome.error;
      throw error;
    }
    if ("error" in outcome) throw outcome.error;
    return outcome.value;
  }

  #call(method, path, body) {
    return this.#transport.call(method, path, { body, until: now() + this.#transport.retryForMs });
  }

  /**
   * Renews a grant that came long after its acquire was sent (a wait in the queue,
   * or retries): it was made at an unknown moment since, so only the send time of a
   * renewal bounds it. On failure releases the grant as a courtesy and rethrows.
   */
  async #confirm(name, grant, kind) {
    try {
      return (await this.#call("POST", lockPath(name, "renew", kind), { lease: grant.lease })).sent;
    } catch (error) {
      await this.#transport.courtesyRelease(name, grant.lease, kind);
      throw error;
    }
  }

  /**
   * The end of withLock: release, and resolve to the loss (null if none). A failed
   * release of a valid lease is only a warning: the work is done and the server frees
   * the lock at its TTL.
   */
  async #finish(lease) {
    try {
      lease.check(); // records a loss the watchdog has not noticed yet
    } catch (error) {
      if (!(error instanceof LeaseLostError)) throw error;
    }
    try {
      await lease.release();
    } catch (error) {
      if (!(error instanceof LeasegateError)) throw error;
      if (!(error instanceof LeaseLostError)) {
        process.emitWarning(`release of the lease on '${lease.name}' failed: ${error.message}`, "LeasegateWarning");
      }
    }
    return lease.lost;
  }
}

module.exports = { Client };
