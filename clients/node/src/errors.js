"use strict";
// Errors, one class per error code of the HTTP contract (openapi.yaml).
//
// Every error answer of leasegate is {"error": "<code>", "message": "...", ...}. The
// code, not the status, says what happened (a 409 may be lock_held, not_holder or
// stale_token), so the class is chosen by the code: `catch (e) { if (e instanceof
// LockHeldError) ... }`.

/** Base of every error this library throws. */
class LeasegateError extends Error {
  /**
   * @param {string} message the server's human text (or ours)
   * @param {{status?: number|null, body?: object, cause?: unknown}} [details]
   *   status: the HTTP status, null when no server answered; body: the parsed answer
   */
  constructor(message, { status = null, body = {}, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.status = status;
    /** The contract's error code ("lock_held"...), or null. */
    this.code = new.target.code ?? null;
    this.body = body;
  }
}

const define = (name, code) => {
  const cls = { [name]: class extends LeasegateError {} }[name];
  cls.code = code;
  return cls;
};

/** 400: a malformed request; body.field names the field at fault. */
const BadRequestError = define("BadRequestError", "bad_request");
const UnauthorizedError = define("UnauthorizedError", "unauthorized");
const ForbiddenError = define("ForbiddenError", "forbidden");
const NotFoundError = define("NotFoundError", "not_found");
const MethodNotAllowedError = define("MethodNotAllowedError", "method_not_allowed");
/** 409: not granted within the wait; body.holder and body.waiters say by whom. */
const LockHeldError = define("LockHeldError", "lock_held");
/**
 * 409 from a semaphore: no permit within the wait; body.holders and body.waiters say
 * by whom. A LockHeldError, so code that catches "not granted" catches both.
 */
class SemaphoreFullError extends LockHeldError {}
SemaphoreFullError.code = "semaphore_full";
/**
 * 409 from an election: a campaign not elected within its wait (a LockHeldError, so a
 * long wait polls on), or a proclaim or resign by a lease that does not lead now;
 * body.leader ({owner, term, since_ms} or null) says who does.
 */
class NotLeaderError extends LockHeldError {}
NotLeaderError.code = "not_leader";
/** 409: the semaphore has holders or waiters under another limit (body.limit). */
const LimitMismatchError = define("LimitMismatchError", "limit_mismatch");
/** 409: a reentry asked for another mode than the lease's own (body.mode). */
const ModeConflictError = define("ModeConflictError", "mode_conflict");
/** 409: the lease does not hold the lock; body.reason is expired, superseded, released or unknown. */
const NotHolderError = define("NotHolderError", "not_holder");
/**
 * 409 from the guard or /v1/fence: a write or token older than one already let through;
 * from setValue: the lease does not hold the lock as its writer now (body.reason:
 * released, expired, superseded, revoked, unknown or read_lease), and nothing changed.
 */
const StaleTokenError = define("StaleTokenError", "stale_token");
/** 409 from setValue with ifVersion: the value is at another version now (body.value_version). */
const VersionMismatchError = define("VersionMismatchError", "version_mismatch");
/** 410: the events after the id asked for are no longer kept. */
const TooOldError = define("TooOldError", "too_old");
const PayloadTooLargeError = define("PayloadTooLargeError", "payload_too_large");
const UriTooLongError = define("UriTooLongError", "uri_too_long");
/** 428 from the guard: a write without the Fencing-Lease header. */
const TokenRequiredError = define("TokenRequiredError", "token_required");
const HeadersTooLargeError = define("HeadersTooLargeError", "headers_too_large");
/** 503: limits reached or the server is stopping. Retried on the next server. */
const OverloadedError = define("OverloadedError", "overloaded");
const BadGatewayError = define("BadGatewayError", "bad_gateway");
const GatewayTimeoutError = define("GatewayTimeoutError", "gateway_timeout");

/** No server answered (refused, reset, timed out) before the operation's time ran out. */
class UnavailableError extends LeasegateError {}

/**
 * An https server's certificate failed verification (unknown CA, wrong name, expired).
 * Thrown at once, not retried: waiting does not fix a certificate. Other servers of the
 * list are still tried; this is thrown when none was left. The message says what
 * failed and how to trust a private CA (the ca option or $LEASEGATE_CACERT), as the
 * CLI does.
 */
class TLSVerificationError extends UnavailableError {}

/**
 * The lease can no longer be trusted to hold its lock: a renewal was answered
 * not_holder, or no renewal succeeded within the TTL (counted from when it was sent).
 * Work done under it since may have been done by someone else too; writes through
 * the guard carrying it are refused with 409 stale_token.
 */
class LeaseLostError extends LeasegateError {
  constructor(message, { lease = null, ...details } = {}) {
    super(message, details);
    /** The Lease that was lost. */
    this.lease = lease;
    /** What the withLock callback threw, when it threw as well. */
    this.callbackError = undefined;
  }
}

const BY_CODE = new Map(
  [BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError, MethodNotAllowedError, LockHeldError,
    NotHolderError, StaleTokenError, PayloadTooLargeError, UriTooLongError, TokenRequiredError,
    HeadersTooLargeError, OverloadedError, BadGatewayError, GatewayTimeoutError, SemaphoreFullError,
    LimitMismatchError, ModeConflictError, NotLeaderError, VersionMismatchError, TooOldError].map((cls) => [cls.code, cls]),
);

/**
 * The error for an answer: by its code, else a plain LeasegateError.
 * @param {number} status
 * @param {object|string} body the parsed JSON, or the text of an answer that is not JSON
 */
function errorFromAnswer(status, body) {
  if (body === null || typeof body !== "object") {
    const text = String(body).slice(0, 300);
    return new LeasegateError(`HTTP ${status}: ${text}`, { status, body: { text } });
  }
  const Cls = BY_CODE.get(body.error) ?? LeasegateError;
  return new Cls(body.message || body.error || `HTTP ${status}`, { status, body });
}

module.exports = {
  LeasegateError, BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError, MethodNotAllowedError,
  LockHeldError, SemaphoreFullError, LimitMismatchError, ModeConflictError, NotHolderError, StaleTokenError,
  PayloadTooLargeError, UriTooLongError, TokenRequiredError, HeadersTooLargeError, OverloadedError, BadGatewayError,
  GatewayTimeoutError, UnavailableError, TLSVerificationError, LeaseLostError, NotLeaderError, VersionMismatchError,
  TooOldError, errorFromAnswer,
};
