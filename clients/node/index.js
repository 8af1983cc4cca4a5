"use strict";
// leasegate: a client for the leasegate lock gateway, no dependencies (Node 18+).
// CommonJS here; index.mjs gives ES modules the same objects (one copy of each class,
// so instanceof holds whichever way a module loaded it).
//
//   const { Client, ensureOk } = require("leasegate");    // or: import { Client } from "leasegate"
//   const client = new Client({ servers: ["http://127.0.0.1:7400"] });
//   await client.withLock("orders/42", { ttl: "15s", wait: "1m" }, async (lease) => {
//     await ensureOk(await lease.fetch("/store/orders/42", { method: "PUT", body: data }));
//   });
//
// README.md beside this file tells the whole story; index.d.ts has the types.

const { Client } = require("./src/client.js");
const { Lease, ensureOk } = require("./src/lease.js");
const { fenceMiddleware, LocalFence, ServerFence } = require("./src/fence.js");
const {
  LeasegateError, BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError, MethodNotAllowedError,
  LockHeldError, SemaphoreFullError, LimitMismatchError, ModeConflictError, NotHolderError, StaleTokenError,
  PayloadTooLargeError, UriTooLongError, TokenRequiredError, HeadersTooLargeError, OverloadedError, BadGatewayError,
  GatewayTimeoutError, UnavailableError, TLSVerificationError, LeaseLostError, NotLeaderError,
  VersionMismatchError, TooOldError,
} = require("./src/errors.js");

module.exports = {
  Client, Lease, ensureOk, fenceMiddleware, LocalFence, ServerFence,
  LeasegateError, BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError, MethodNotAllowedError,
  LockHeldError, SemaphoreFullError, LimitMismatchError, ModeConflictError, NotHolderError, StaleTokenError,
  PayloadTooLargeError, UriTooLongError, TokenRequiredError, HeadersTooLargeError, OverloadedError, BadGatewayError,
  GatewayTimeoutError, UnavailableError, TLSVerificationError, LeaseLostError, NotLeaderError,
  VersionMismatchError, TooOldError,
};
