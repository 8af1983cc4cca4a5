"use strict";
// A granted lease: its renewal (by hand or by the watchdog), its loss, its release.
//
// The client cannot see the server's clock, so it bounds the lease with its own
// monotonic clock: a lease is trusted until `ttl` after the moment the last
// successful renewal (or the acquire) was *sent*. The server started counting
// later than that, so the client always gives up first, never after the server.

const { EventEmitter } = require("node:events");
const { randomUUID } = require("node:crypto");
const { inspect } = require("node:util");
const { setTimeout: sleep } = require("node:timers/promises");
const { toMillis } = require("./duration.js");
const { LeaseLostError, LeasegateError, NotHolderError, NotLeaderError, errorFromAnswer } = require("./errors.js");
const { parseAnswer } = require("./json.js");
const { UnreachableError, lockPath, now, tlsError, unavailable } = require("./transport.js");

/**
 * One grant of a lock, permits of a semaphore, or the leadership of an election.
 * Emits "lost" (with a LeaseLostError) once, when the lease is lost.
 */
class Lease extends EventEmitter {
  #lease; // the lease id: never in JSON.stringify(), console.log() or util.inspect()
  #transport;
  #deadline; // performance.now() after which the lease is not trusted
  #lost = null;
  #ending = false; // release() began: a renewal failing now is no loss
  #stop = new AbortController(); // ends the watchdog
  #watching = false;

  /**
   * @param {import("./transport.js").Transport} transport
   * @param {string} server the URL of the server that granted it
   * @param {object} grant the acquire answer
   * @param {number} sent when the acquire (or its confirming renewal) was sent
   * @param {(error: LeaseLostError) => void} [onLost]
   * @param {"lock"|"semaphore"|"election"} [kind] what grant.name names
   */
  constructor(transport, server, grant, sent, onLost, kind = "lock") {
    super();
    this.#transport = transport;
    /** "lock", "semaphore" or "election". */
    this.kind = kind;
    /** True for permits of a semaphore (renewed and released under /v1/semaphores). */
    this.semaphore = kind === "semaphore";
    /** "write" (exclusive) or "read" (shared) for a lock; null otherwise. */
    this.mode = kind === "lock" ? grant.mode ?? "write" : null;
    /** The semaphore's number of permits; null otherwise. */
    this.limit = this.semaphore ? grant.limit : null;
    /** How many of the semaphore's permits this lease holds; null otherwise. */
    this.permits = this.semaphore ? grant.permits ?? 1 : null;
    /**
     * A lock's value when it was granted (what the last writer left; null when none), then
     * as setValue() wrote it; an election's: the leader's value, as campaigned or
     * proclaimed; null for a semaphore.
     */
    this.value = kind === "semaphore" ? null : grant.value ?? null;
    /** A lock's value's version (0: never written): the ifVersion of a read-modify-write; null otherwise. */
    this.valueVersion = kind === "lock" ? grant.value_version ?? 0 : null;
    /** An election's term (a decimal string, = token: the leader's fencing token); null otherwise. */
    this.term = kind === "election" ? grant.term ?? grant.token : null;
    /** Base URL of the server that granted the lease; lease.fetch() goes there. */
    this.server = server;
    this.name = grant.name;
    this.owner = grant.owner;
    this.#lease = grant.lease;
    /** The fencing token, a decimal string (exact at any size) that only grows across grants. */
    this.token = grant.token;
    this.metadata = grant.metadata ?? {};
    /** Time-to-live in milliseconds, as the server last confirmed it. */
    this.ttl = grant.ttl_ms;
    this.#deadline = sent + this.ttl;
    if (onLost) this.once("lost", onLost);
  }

  /**
   * The lease id: the secret that renews, releases and writes through the guard. A
   * getter, not an own property: spreading, JSON.stringify() and console.log() of a
   * lease leave it out (toJSON, [util.inspect.custom]); only reading it names it.
   */
  get lease() {
    return this.#lease;
  }

  /**
   * What JSON.stringify() writes of a lease: every field but the lease id, which shows
   * as "[redacted]", so that a lease can be logged as it is without its secret.
   */
  toJSON() {
    return {
      name: this.name, kind: this.kind, owner: this.owner, token: this.token, mode: this.mode,
      semaphore: this.semaphore, limit: this.limit, permits: this.permits, term: this.term, value: this.value,
      valueVersion: this.valueVersion, ttl: this.ttl, server: this.server, metadata: this.metadata,
      valid: this.valid, lease: "[redacted]",
    };
  }

  /** What console.log() and util.inspect() show: the same as toJSON(), never the lease id. */
  [inspect.custom](depth, options, inspectFn = inspect) {
    if (depth < 0) return `Lease ${this.name} token=${this.token}`;
    return `Lease ${inspectFn(this.toJSON(), { ...options, depth: options.depth === null ? null : options.depth - 1 })}`;
  }

  /**
   * True while the client can vouch that the server still holds this lease: not
   * released, not lost, and within the TTL since the last successful renewal was sent.
   */
  get valid() {
    return !this.#ending && this.#lost === null && now() < this.#deadline;
  }

  /** null, or the LeaseLostError once the lease was lost. */
  get lost() {
    return this.#lost;
  }

  /** Headers that prove this lease to the guard (which drops them before forwarding). */
  get headers() {
    return { "Fencing-Lease": this.lease };
  }

  /** Throws LeaseLostError unless the lease is valid: call it before work that must not run unprotected. */
  check() {
    if (this.valid) return;
    this.#loseByDeadline();
    throw this.#lostError();
  }

  /**
   * Extends the lease by its TTL (or by `ttl`, which then becomes its TTL).
   * Connection failures and 503 are retried on the next server until the lease would
   * expire. Rejects with LeaseLostError (after emitting "lost") when the server answers
   * not_holder or no renewal succeeds in time; other errors (a bad ttl) as they are.
   * @param {{ttl?: string}} [options]
   */
  async renew({ ttl } = {}) {
    const body = { lease: this.lease };
    if (ttl !== undefined) body.ttl_ms = toMillis(ttl, "ttl");
    try {
      const { answer, sent } = await this.#transport.call("POST", lockPath(this.name, "renew", this.kind), {
        body, until: this.#deadline, hard: true,
      });
      if (this.#lost === null && now() < this.#deadline) {
        this.ttl = answer.ttl_ms;
        this.#deadline = sent + this.ttl;
        return;
      }
      this.#loseByDeadline();
    } catch (error) {
      if (error instanceof NotHolderError) {
        this.#lose(`the server says the lease on '${this.name}' no longer holds it (${error.body.reason})`, error);
      } else if (error instanceof LeasegateError && (error.status === null || error.status === 503)) {
        this.#lose(`no renewal of the lease on '${this.name}' succeeded within its TTL (${error.message})`, error);
      } else {
        throw error;
      }
    }
    throw this.#lostError();
  }

  /**
   * Gives the lock back and stops the watchdog; a second call does nothing.
   * A lease already lost gets one short try per server, errors ignored: the server
   * frees the lock at its TTL anyway, and an exit must not hang on a dead server.
   * Rejects with LeaseLostError when the server says the lease had already ended,
   * and UnavailableError when no server answered in time.
   */
  async release() {
    if (this.#ending) return;
    this.#ending = true;
    const trusted = this.#lost === null && now() < this.#deadline;
    this.#stop.abort();
    if (!trusted) {
      await this.#transport.courtesyRelease(this.name, this.lease, this.kind);
      return;
    }
    try {
      await this.#transport.call("POST", lockPath(this.name, "release", this.kind), {
        body: { lease: this.lease }, until: now() + this.#transport.retryForMs,
      });
    } catch (error) {
      // An election's resign answers not_leader where a lock's release answers not_holder.
      if (!(error instanceof NotHolderError || error instanceof NotLeaderError)) throw error;
      if (error.body.reason === "released") return; // a retry after a release whose answer was lost
      this.#lose(`the lease on '${this.name}' had ended before its release (${error.body.reason})`, error, true);
      throw this.#lostError();
    }
  }

  /** An election's leader steps down (release() for it): the next candidate leads at once. */
  async resign() {
    if (this.kind !== "election") throw new TypeError(`resign: an election's leader resigns; this is a ${this.kind}'s lease`);
    return this.release();
  }

  /**
   * Writes the lock's value (any JSON value; null clears it), which only the lock's writer
   * can, now; resolves to {name, value_version, token} and updates lease.value and
   * lease.valueVersion. ifVersion: write only if the value is at that version now (a
   * read-modify-write: lease.valueVersion after the grant). Rejects with StaleTokenError
   * when this lease does not hold the lock as its writer now (nothing changed),
   * VersionMismatchError for another version, PayloadTooLargeError past the server's
   * --max-value-bytes. A write whose answer was lost is sent again with the same
   * request_id (one per call): the server answers it with the first write's version and
   * writes nothing again.
   * @param {unknown} value
   * @param {{ifVersion?: number}} [options]
   */
  async setValue(value, { ifVersion } = {}) {
    if (this.kind !== "lock") throw new TypeError(`setValue: a lock's value; this is a ${this.kind}'s lease`);
    // One request_id for every attempt: a retry whose first answer was lost is answered
    // with that write's version, not written again.
    const body = { lease: this.lease, value: value === undefined ? null : value, request_id: randomUUID() };
    if (ifVersion !== undefined) {
      if (!Number.isSafeInteger(ifVersion) || ifVersion < 0) {
        throw new TypeError(`ifVersion: expected an integer >= 0, got ${JSON.stringify(ifVersion)}`);
      }
      body.if_version = ifVersion;
    }
    const { answer } = await this.#transport.call("PUT", lockPath(this.name, "value"), {
      body, until: now() + this.#transport.retryForMs,
    });
    this.value = body.value;
    this.valueVersion = answer.value_version;
    return answer;
  }

  /**
   * An election's leader replaces its value (what GET and observers show); resolves to
   * {name, term, value}. Rejects with NotLeaderError when this lease does not lead now.
   * @param {unknown} value
   */
  async proclaim(value) {
    if (this.kind !== "election") throw new TypeError(`proclaim: an election's leader proclaims; this is a ${this.kind}'s lease`);
    const v = value === undefined ? null : value;
    const { answer } = await this.#transport.call("POST", lockPath(this.name, "proclaim", "election"), {
      body: { lease: this.lease, value: v }, until: now() + this.#transport.retryForMs,
    });
    this.value = v;
    return answer;
  }

  /**
   * fetch() with this lease in Fencing-Lease, to the server that granted it: a write
   * through the guard, e.g. `lease.fetch("/store/orders/42", {method: "PUT", body})`.
   * Resolves to fetch's Response for every status (409 stale_token once the lease is
   * gone); rejects with UnavailableError when no answer came (TLSVerificationError for a
   * certificate that failed verification). Not retried.
   * @param {string} path
   * @param {RequestInit} [init]
   */
  async fetch(path, init = {}) {
    const headers = new Headers(init.headers);
    headers.set("Fencing-Lease", this.lease);
    const signal = init.signal ?? AbortSignal.timeout(Math.ceil(this.#transport.timeoutMs));
    try {
      return await this.#transport.fetch(this.server + path, { ...init, headers, signal });
    } catch (error) {
      if (!(error instanceof UnreachableError)) throw error;
      throw error.tls ? tlsError([error.message], error.cause) : unavailable([error.message]);
    }
  }

  /**
   * Starts the watchdog, which renews at a third of the TTL until release() or loss
   * (acquire's keepAlive option calls it); returns the lease. A second call does nothing.
   */
  keepAlive() {
    if (!this.#watching) {
      this.#watching = true;
      this.#watch();
    }
    return this;
  }

  async #watch() {
    const { signal } = this.#stop;
    while (!signal.aborted) {
      const due = Math.max(0, this.#deadline - (this.ttl * 2) / 3 - now());
      try {
        // unref'd: a lease being kept alive is no reason for the process to stay.
        await sleep(due, undefined, { signal, ref: false });
      } catch {
        return; // stopped
      }
      try {
        await this.renew();
      } catch (error) {
        if (!(error instanceof LeaseLostError)) {
          this.#lose(`the lease on '${this.name}' cannot be renewed: ${error.message}`, error);
        }
        return;
      }
    }
  }

  #loseByDeadline() {
    this.#lose(`no renewal of the lease on '${this.name}' succeeded within its TTL`);
  }

  /**
   * Records the loss and emits "lost", once. Ignored once release() began (unless
   * release itself found it): a renewal racing a release is no loss.
   */
  #lose(message, cause, ending = false) {
    if (this.#lost !== null || (this.#ending && !ending)) return;
    this.#lost = new LeaseLostError(message, { lease: this, cause });
    this.#stop.abort();
    try {
      this.emit("lost", this.#lost);
    } catch (error) {
      queueMicrotask(() => { throw error; }); // a listener's bug surfaces as any uncaught error
    }
  }

  /** A fresh LeaseLostError to throw, or for a lease released by its holder, one that says so. */
  #lostError() {
    if (this.#lost === null) return new LeaseLostError(`the lease on '${this.name}' was released`, { lease: this });
    return new LeaseLostError(this.#lost.message, { lease: this, cause: this.#lost.cause });
  }
}

/**
 * Resolves to `response` when its status is 2xx; otherwise reads its body and rejects
 * with the error its code names (StaleTokenError, TokenRequiredError...), or a plain
 * LeasegateError for an answer that is not leasegate's (an upstream's own error).
 * @param {Response} response
 */
async function ensureOk(response) {
  if (response.ok) return response;
  const text = await response.text();
  let body;
  try {
    body = parseAnswer(text);
  } catch {
    body = text;
  }
  throw errorFromAnswer(response.status, body);
}

module.exports = { Lease, ensureOk };
