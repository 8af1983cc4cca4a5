// leasegate: a client for the leasegate lock gateway, no dependencies (Node 18+).
//
//   import { Client } from "leasegate";
//   const client = new Client({ servers: ["http://127.0.0.1:7400"] });
//   await client.withLock("orders/42", { ttl: "15s", wait: "1m" }, async (lease) => {
//     await ensureOk(await lease.fetch("/store/orders/42", { method: "PUT", body: data }));
//   });
//
// README.md beside this file tells the whole story; index.d.ts has the types.

export { Client } from "./src/client.js";
export { Lease, ensureOk } from "./src/lease.js";
export {
  LeasegateError, BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError, MethodNotAllowedError,
  LockHeldError, NotHolderError, StaleTokenError, PayloadTooLargeError, UriTooLongError, TokenRequiredError,
  HeadersTooLargeError, OverloadedError, BadGatewayError, GatewayTimeoutError, UnavailableError, LeaseLostError,
} from "./src/errors.js";
