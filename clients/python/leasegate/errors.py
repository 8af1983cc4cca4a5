"""Exceptions, one class per error code of the HTTP contract (openapi.yaml).

Every error answer of leasegate is ``{"error": "<code>", "message": "...", ...}``. The
code, not the status, says what happened (409 alone may be ``lock_held``,
``not_holder`` or ``stale_token``), so the class is chosen by the code and callers can
write ``except leasegate.LockHeld``.
"""


class LeasegateError(Exception):
    """Base of every error this library raises.

    status: the HTTP status, or None when no server answered.
    code: the contract's error code (``lock_held``...), or None.
    message: the server's human text (or ours).
    body: the whole parsed JSON answer (a dict), e.g. ``body["holder"]`` of LockHeld.
    """

    code = None

    def __init__(self, message, status=None, body=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body if body is not None else {}


class BadRequest(LeasegateError):
    """400: a malformed request; ``body.get("field")`` names the field at fault."""
    code = "bad_request"


class Unauthorized(LeasegateError):
    code = "unauthorized"


class Forbidden(LeasegateError):
    code = "forbidden"


class NotFound(LeasegateError):
    code = "not_found"


class MethodNotAllowed(LeasegateError):
    code = "method_not_allowed"


class LockHeld(LeasegateError):
    """409: not granted within the wait; ``body["holder"]``, ``body["holders"]`` and
    ``body["waiters"]`` say by whom (``body.get("delay_until_ms")``: a lock-delay runs)."""
    code = "lock_held"


class SemaphoreFull(LockHeld):
    """409: no permit of the semaphore within the wait; ``body["holders"]`` (at most
    100) and ``body["waiters"]``. A LockHeld, so ``except LockHeld`` catches both."""
    code = "semaphore_full"


class NotLeader(LockHeld):
    """409: a campaign not elected within its wait (a LockHeld, so a long wait polls on),
    or a proclaim or resign by a lease that does not lead the election now;
    ``body["leader"]`` ({owner, term, since_ms}, or None) says who does."""
    code = "not_leader"


class LimitMismatch(LeasegateError):
    """409: the semaphore has holders or waiters and another limit (``body["limit"]``)."""
    code = "limit_mismatch"


class ModeConflict(LeasegateError):
    """409: a reentry asked for another mode than the lease's (``body["mode"]``):
    release, then acquire in the other mode."""
    code = "mode_conflict"


class NotHolder(LeasegateError):
    """409: the lease does not hold the lock; ``body["reason"]`` is expired, superseded,
    released or unknown."""
    code = "not_holder"


class StaleToken(LeasegateError):
    """409 from the guard or /v1/fence: a write or token older than one already let through;
    from set_value: the lease does not hold the lock as its writer now (``body["reason"]``:
    released, expired, superseded, revoked, unknown or read_lease), and nothing changed."""
    code = "stale_token"


class VersionMismatch(LeasegateError):
    """409 from set_value with if_version: the value is at another version now
    (``body["value_version"]``); nothing changed."""
    code = "version_mismatch"


class TooOld(LeasegateError):
    """410: the events after the id asked for are no longer kept."""
    code = "too_old"


class PayloadTooLarge(LeasegateError):
    code = "payload_too_large"


class UriTooLong(LeasegateError):
    code = "uri_too_long"


class TokenRequired(LeasegateError):
    """428 from the guard: a write without the ``Fencing-Lease`` header."""
    code = "token_required"


class HeadersTooLarge(LeasegateError):
    code = "headers_too_large"


class Overloaded(LeasegateError):
    """503: limits reached or the server is stopping. Retried on the next server."""
    code = "overloaded"


class BadGateway(LeasegateError):
    code = "bad_gateway"


class GatewayTimeout(LeasegateError):
    code = "gateway_timeout"


class Unavailable(LeasegateError):
    """No server answered (connection refused, reset or timed out) before the
    operation's time ran out; the message names each server and its failure."""


class TLSVerificationError(Unavailable):
    """An https server's certificate failed verification (unknown CA, wrong name,
    expired). Raised at once, not retried: waiting does not fix a certificate. Other
    servers of the list are still tried; this is raised when none was left. The
    message says what failed and how to trust a private CA (cafile= or
    $LEASEGATE_CACERT), as the CLI does."""


class LeaseLost(LeasegateError):
    """The lease can no longer be trusted to hold its lock: a renewal was answered
    ``not_holder``, or no renewal succeeded within the TTL (counted from when it was
    sent). Work done under it since may have been done by someone else too; writes
    through the guard carrying it are refused with StaleToken.

    lease: the Lease that was lost.
    """

    def __init__(self, message, lease=None, status=None, body=None):
        super().__init__(message, status, body)
        self.lease = lease


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


_BY_CODE = {cls.code: cls for cls in _all_subclasses(LeasegateError) if cls.code}


def error_from_answer(status, body):
    """The exception for an error answer: by its code, else a plain LeasegateError.

    body is the parsed JSON (a dict) or, for an answer that is not JSON (a guarded
    upstream's own error page, say), its text.
    """
    if not isinstance(body, dict):
        text = str(body)[:300]
        return LeasegateError("HTTP %d: %s" % (status, text), status, {"text": text})
    cls = _BY_CODE.get(body.get("error"), LeasegateError)
    message = body.get("message") or body.get("error") or "HTTP %d" % status
    return cls(message, status, body)
