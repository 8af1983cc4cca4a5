// leasegate for ES modules: the objects of the CommonJS entry (index.js), re-exported,
// so that `import` and `require` share one copy of every class.

import leasegate from "./index.js";

export const {
  Client, Lease, ensureOk, fenceMiddleware, LocalFence, ServerFence,
  LeasegateError, BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError, MethodNotAllowedError,
  LockHeldError, SemaphoreFullError, LimitMismatchError, ModeConflictError, NotHolderError, StaleTokenError,
  PayloadTooLargeError, UriTooLongError, TokenRequiredError, HeadersTooLargeError, OverloadedError, BadGatewayError,
  GatewayTimeoutError, UnavailableError, TLSVerificationError, LeaseLostError, NotLeaderError,
  VersionMismatchError, TooOldError,
} = leasegate;
