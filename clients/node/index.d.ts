// Types of the leasegate client (hand-written; the code is plain JavaScript). The package is
// CommonJS (require) with an ES module entry (import) that re-exports these (index.d.mts).

import { EventEmitter } from "node:events";

/** A duration with its unit: "250ms", "15s", "2m", "1h", "1.5s" (whole milliseconds). A bare
 *  number is refused with a TypeError: write "15s" or "15000ms". */
export type Duration = string;

/** A fencing token as methods take it: a decimal string (as the client hands tokens out),
 *  a bigint, or a safe integer number. */
export type TokenLike = string | bigint | number;

export interface ClientOptions {
  /** URLs (or one "URL,URL" string) of servers serving one lock space.
   *  Default: $LEASEGATE_SERVER, else http://127.0.0.1:7400. */
  servers?: string | string[];
  /** The label other clients see on locks taken here. Default: host-pid. */
  owner?: string;
  /** How long one request may take beyond its long-poll wait. Default "5s". */
  timeout?: Duration;
  /** How long a call retries failed requests (connection errors, timeouts, 503) on
   *  the next server; an acquire keeps retrying for its wait when that is longer. Default "5s". */
  retryFor?: Duration;
  /** The CAs (PEM) that https servers' certificates must be signed by, for a private CA.
   *  Default: the file $LEASEGATE_CACERT names, else Node's CAs. Always verified. */
  ca?: string | Buffer;
  /** The API key for a server run with --auth-file, sent as Authorization: Bearer KEY
   *  with every request (lease.fetch included). Default: $LEASEGATE_KEY, else none. */
  key?: string;
  /** A server that has not accepted the connection, or not begun its answer, within this
   *  is asked GET /readyz; unless it says it is ready (a long-poll is waiting there), the
   *  request moves on to the next server. At least "100ms". Default "2s". */
  firstByteTimeout?: Duration;
}

export interface AcquireOptions {
  /** How long the lease lasts unless renewed. Default "30s". */
  ttl?: Duration;
  /** How long to wait in the lock's FIFO queue. Default "0s": try once. */
  wait?: Duration;
  /** Overrides the client's owner label for this lock. */
  owner?: string;
  /** A small JSON object every reader of the lock sees (who, why, host, pid). */
  metadata?: Record<string, unknown>;
  /** Called once when the lease is lost (same as lease.once("lost", ...)). */
  onLost?: (error: LeaseLostError) => void;
  /** Start the watchdog (renewal at a third of the TTL). Default false; withLock always does. */
  keepAlive?: boolean;
}

export interface LockAcquireOptions extends AcquireOptions {
  /** "write" (exclusive, the default) or "read" (shared with the other readers; the guard
   *  refuses a read lease's writes with 409 stale_token, reason "read_lease"). */
  mode?: LockMode;
  /** When this lease ends uncleanly (expires, force-released), nobody is granted the lock
   *  until this long after (at most "60s"). Default: none. */
  lockDelay?: Duration;
}

export interface PermitOptions extends AcquireOptions {
  /** The semaphore's number of permits, 1..10000: set by the first acquire of an idle
   *  semaphore; another limit while it has holders or waiters is LimitMismatchError. */
  limit: number;
  /** How many of them this lease holds, 1..limit. Default 1. Granted first come, first
   *  served: a request at the head of the queue is not passed by later, smaller ones. */
  permits?: number;
}

export interface CampaignOptions extends AcquireOptions {
  /** The leader's value (any JSON): what GET and observers show, such as its address. Default null. */
  value?: unknown;
}

/** An election's leader as GET shows it. */
export interface Leader {
  owner: string;
  /** The term: the leader's fencing token, a decimal string. */
  term: string;
  value: unknown;
  since_ms: number;
}

export interface ElectionState {
  name: string;
  /** null while nobody leads. */
  leader: Leader | null;
  /** Since when nobody leads (server's clock, ms); null while led. */
  vacant_since_ms: number | null;
  /** The candidates waiting, the next first (the first 100). */
  candidates: { owner: string; since_ms: number }[];
  candidates_total: number;
  last_token: string;
  index: number;
}

/** What observe() gives: a new leader or proclaimed value, or a vacancy. */
export type ElectionEvent =
  | { event: "leader"; id: string | null; owner: string; term: string; value: unknown }
  | { event: "vacant"; id: string | null; reason: "resigned" | "expired" | "revoked" | null; previous_term: string | null };

export interface LockValue {
  name: string;
  /** As its writer sent it; null when none. */
  value: unknown;
  /** 0 when never written. */
  value_version: number;
  /** The token of the lease that wrote it; null when never written. */
  value_token: string | null;
}

export type LockMode = "write" | "read";

/** A holder as others see it: never its lease id. */
export interface Holder {
  owner: string;
  /** A decimal string: tokens are 64-bit and exact at any size. */
  token: string;
  ttl_ms: number;
  acquired_at_ms: number;
  expires_at_ms: number;
  count: number;
  metadata: Record<string, unknown>;
  /** A lock holder's mode (absent for a semaphore's permit). */
  mode?: LockMode;
  /** A semaphore's holder: how many permits its lease holds. */
  permits?: number;
}

export interface LockState {
  name: string;
  held: boolean;
  /** The holders' mode, null while free. */
  mode: LockMode | null;
  /** The writer, or the oldest reader; null while free. */
  holder: Holder | null;
  /** Every holder in grant order (the first 100; holders_total counts all). */
  holders: Holder[];
  holders_total: number;
  waiters: number;
  last_token: string;
  /** While a lock-delay runs: the server's clock (ms) before which nobody is granted it; else null. */
  delay_until_ms: number | null;
  /** The lock's value (null when none), its version (0: never written) and its writer's token. */
  value: unknown;
  value_version: number;
  value_token: string | null;
}

export interface SemaphoreState {
  name: string;
  /** The number of permits; null for a semaphore with neither holders nor waiters. */
  limit: number | null;
  /** One per permit held, in grant order (the first 100; holders_total counts all). */
  holders: Holder[];
  holders_total: number;
  available: number | null;
  /** How many permits the holders hold together. */
  permits_used: number;
  waiters: number;
  last_token: string;
}

export interface FenceResult {
  resource: string;
  accepted: true;
  max_token: string;
}

export class Client {
  constructor(options?: ClientOptions);
  readonly servers: string[];
  readonly owner: string;
  /** Takes the lock; rejects with LockHeldError when not granted within `wait`. */
  acquire(name: string, options?: LockAcquireOptions): Promise<Lease>;
  /** Acquires, runs fn while the watchdog keeps the lease alive, releases. Rejects with
   *  LeaseLostError if the lease was lost while fn ran (fn's own error is in callbackError). */
  withLock<T>(name: string, options: Omit<LockAcquireOptions, "keepAlive">, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
  withLock<T>(name: string, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
  /** Takes `permits` (default 1) permits of a semaphore in one Lease with its own token; rejects
   *  with SemaphoreFullError when not granted within `wait`, LimitMismatchError for another limit. */
  acquirePermit(name: string, options: PermitOptions): Promise<Lease>;
  /** withLock for permits of a semaphore. */
  semaphore<T>(name: string, options: Omit<PermitOptions, "keepAlive">, fn: (permit: Lease) => Promise<T> | T): Promise<T>;
  /** Campaigns to lead an election; resolves to the leader's Lease (term, value, proclaim, resign);
   *  rejects with NotLeaderError when not elected within `wait`. */
  campaign(name: string, options?: CampaignOptions): Promise<Lease>;
  /** withLock for the leadership of an election: fn runs as its leader; resigns at its end. */
  withLeadership<T>(name: string, options: Omit<CampaignOptions, "keepAlive">, fn: (leader: Lease) => Promise<T> | T): Promise<T>;
  withLeadership<T>(name: string, fn: (leader: Lease) => Promise<T> | T): Promise<T>;
  election(name: string): Promise<ElectionState>;
  /** The election's new leaders, proclaimed values and vacancies, none twice or missed across
   *  reconnects and failovers; the first is the state now (or what came after lastEventId). */
  observe(name: string, options?: { lastEventId?: string | number; retryFor?: Duration; signal?: AbortSignal }):
    AsyncGenerator<ElectionEvent, never, undefined>;
  /** The lock's value, read without a lease. */
  value(name: string): Promise<LockValue>;
  status(name: string): Promise<LockState>;
  semaphoreStatus(name: string): Promise<SemaphoreState>;
  /** Every known lock whose name starts with prefix, in name order, a page at a time. */
  list(options?: { prefix?: string; after?: string; pageSize?: number; semaphores?: false }): AsyncGenerator<LockState, void, undefined>;
  /** Every known semaphore whose name starts with prefix, in name order, a page at a time. */
  list(options: { prefix?: string; after?: string; pageSize?: number; semaphores: true }): AsyncGenerator<SemaphoreState, void, undefined>;
  /** Checks a token against a resource's high-water mark; rejects with StaleTokenError. */
  fence(resource: string, token: TokenLike): Promise<FenceResult>;
}

/** A lease as JSON.stringify() writes it (toJSON): never its secret. */
export interface LeaseJSON {
  kind: "lock" | "semaphore" | "election";
  name: string;
  owner: string;
  token: string;
  mode: LockMode | null;
  semaphore: boolean;
  limit: number | null;
  permits: number | null;
  term: string | null;
  value: unknown;
  valueVersion: number | null;
  ttl: number;
  server: string;
  metadata: Record<string, unknown>;
  valid: boolean;
  lease: "[redacted]";
}

export class Lease extends EventEmitter {
  readonly kind: "lock" | "semaphore" | "election";
  readonly name: string;
  /** True for permits of a semaphore. */
  readonly semaphore: boolean;
  /** The lock's mode; null otherwise. */
  readonly mode: LockMode | null;
  /** The semaphore's number of permits; null otherwise. */
  readonly limit: number | null;
  /** How many of the semaphore's permits this lease holds; null otherwise. */
  readonly permits: number | null;
  /** A lock's value when granted, then as setValue wrote it; an election's leader's value; null for a semaphore. */
  readonly value: unknown;
  /** A lock's value's version (0: never written); null otherwise. */
  readonly valueVersion: number | null;
  /** An election's term (= token), a decimal string; null otherwise. */
  readonly term: string | null;
  readonly owner: string;
  /** The lease id: the secret that renews, releases and writes through the guard. A
   *  getter: JSON.stringify(), console.log() and spreading a lease leave it out. */
  readonly lease: string;
  /** The fencing token, a decimal string: tokens may pass 2^53, where a number would round
   *  them, and a string (unlike a bigint) goes through JSON.stringify. Compare with BigInt(). */
  readonly token: string;
  readonly metadata: Record<string, unknown>;
  /** Time-to-live in milliseconds, as the server last confirmed it. */
  readonly ttl: number;
  /** Base URL of the server that granted the lease. */
  readonly server: string;
  /** True while the client can vouch the server still holds the lease. */
  readonly valid: boolean;
  /** null, or the error the lease was lost with. */
  readonly lost: LeaseLostError | null;
  /** What JSON.stringify() writes: every field but the lease id, which is "[redacted]". */
  toJSON(): LeaseJSON;
  /** { "Fencing-Lease": lease } for a write under a guarded prefix. */
  readonly headers: { "Fencing-Lease": string };
  /** Throws LeaseLostError unless the lease is valid. */
  check(): void;
  /** Extends the lease; rejects with LeaseLostError when it is lost. */
  renew(options?: { ttl?: Duration }): Promise<void>;
  /** Gives the lock back (after a loss: one short try, errors ignored). */
  release(): Promise<void>;
  /** An election's leader steps down (release()). */
  resign(): Promise<void>;
  /** A lock's writer writes its value; rejects with StaleTokenError (not the writer now) or
   *  VersionMismatchError (ifVersion is not the value's version now). */
  setValue(value: unknown, options?: { ifVersion?: number }): Promise<{ name: string; value_version: number; token: string }>;
  /** An election's leader replaces its value; rejects with NotLeaderError. */
  proclaim(value: unknown): Promise<{ name: string; term: string; value: unknown }>;
  /** fetch() to the granting server with Fencing-Lease set; resolves for every status.
   *  To an https server it verifies with the client's `ca`; the body must be a string or bytes. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  /** Starts the watchdog; returns the lease. */
  keepAlive(): this;
  on(event: "lost", listener: (error: LeaseLostError) => void): this;
  once(event: "lost", listener: (error: LeaseLostError) => void): this;
}

/** Resolves to the response when 2xx, else rejects with the error its code names. */
export function ensureOk(response: Response): Promise<Response>;

/** What a fence check decided: accepted when the token is at least the resource's mark. */
export interface FenceDecision {
  accepted: boolean;
  maxToken: bigint;
}

/** A fence check: the marks in this process (LocalFence), kept by leasegate (ServerFence), or your own. */
export interface FenceCheck {
  check(resource: string, token: bigint): FenceDecision | Promise<FenceDecision>;
}

/** The highest token accepted per resource, in this process. */
export class LocalFence implements FenceCheck {
  check(resource: string, token: bigint): FenceDecision;
  /** The highest token accepted for the resource, 0n when none was. */
  mark(resource: string): bigint;
}

/** The marks kept by leasegate: POST /v1/fence/{resource} through the client. */
export class ServerFence implements FenceCheck {
  constructor(client: Client);
  check(resource: string, token: bigint): Promise<FenceDecision>;
}

export interface FenceOptions {
  /** The resource a write changes (default: the request path without its leading "/"); null refuses with 400. */
  resource?: (req: import("node:http").IncomingMessage) => string | null;
  /** Put before the default resource's name. */
  prefix?: string;
  /** false admits concurrent writes to one resource (default true: one at a time, in arrival order). */
  serialize?: boolean;
}

/** Middleware for node:http and Express-style stacks: refuses a write whose Fencing-Token is stale (409),
 *  missing (428) or not a token (400); an admitted write's token is req.fenceToken. */
export function fenceMiddleware(check: FenceCheck, options?: FenceOptions):
  (req: import("node:http").IncomingMessage & { fenceToken?: bigint }, res: import("node:http").ServerResponse,
   next: (error?: unknown) => void) => Promise<void>;

export class LeasegateError extends Error {
  /** The HTTP status, or null when no server answered. */
  readonly status: number | null;
  /** The contract's error code ("lock_held"...), or null. */
  readonly code: string | null;
  /** The parsed answer, e.g. body.holder of a LockHeldError. */
  readonly body: Record<string, any>;
}
export class BadRequestError extends LeasegateError {}
export class UnauthorizedError extends LeasegateError {}
export class ForbiddenError extends LeasegateError {}
export class NotFoundError extends LeasegateError {}
export class MethodNotAllowedError extends LeasegateError {}
export class LockHeldError extends LeasegateError {}
/** 409 semaphore_full: no permit within the wait (a LockHeldError). */
export class SemaphoreFullError extends LockHeldError {}
/** 409 limit_mismatch: the semaphore is in use under another limit (body.limit). */
export class LimitMismatchError extends LeasegateError {}
/** 409 mode_conflict: a reentry asked for another mode than the lease's own. */
export class ModeConflictError extends LeasegateError {}
export class NotHolderError extends LeasegateError {}
export class StaleTokenError extends LeasegateError {}
/** 409 version_mismatch: setValue with an ifVersion the value is not at (body.value_version). */
export class VersionMismatchError extends LeasegateError {}
/** 409 not_leader: not elected within the wait, or a proclaim/resign by a lease that does not lead (a LockHeldError). */
export class NotLeaderError extends LockHeldError {}
/** 410 too_old: the events asked for are no longer kept. */
export class TooOldError extends LeasegateError {}
export class PayloadTooLargeError extends LeasegateError {}
export class UriTooLongError extends LeasegateError {}
export class TokenRequiredError extends LeasegateError {}
export class HeadersTooLargeError extends LeasegateError {}
export class OverloadedError extends LeasegateError {}
export class BadGatewayError extends LeasegateError {}
export class GatewayTimeoutError extends LeasegateError {}
/** No server answered before the operation's time ran out. */
export class UnavailableError extends LeasegateError {}
/** An https server's certificate failed verification; thrown at once, never retried. */
export class TLSVerificationError extends UnavailableError {}
export class LeaseLostError extends LeasegateError {
  readonly lease: Lease | null;
  /** What the withLock callback threw, when it threw as well. */
  readonly callbackError: unknown;
}
