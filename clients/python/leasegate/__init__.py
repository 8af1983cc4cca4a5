"""leasegate: a client for the leasegate lock gateway, standard library only.

    import leasegate
    client = leasegate.Client("http://127.0.0.1:7400")
    with client.lock("orders/42", ttl="15s", wait="1m") as lease:
        lease.request("PUT", "/store/orders/42", data).raise_for_status()

See README.md beside this package for the whole story.
"""

from .client import Client
from .errors import (BadGateway, BadRequest, Forbidden, GatewayTimeout, HeadersTooLarge, LeasegateError,
                     LeaseLost, LockHeld, MethodNotAllowed, NotFound, NotHolder, Overloaded, PayloadTooLarge,
                     StaleToken, TokenRequired, Unauthorized, Unavailable, UriTooLong)
from .lease import Lease
from .transport import Response

__version__ = "0.1.0"

__all__ = ["Client", "Lease", "Response", "LeasegateError", "BadRequest", "Unauthorized", "Forbidden",
           "NotFound", "MethodNotAllowed", "LockHeld", "NotHolder", "StaleToken", "PayloadTooLarge", "UriTooLong",
           "TokenRequired", "HeadersTooLarge", "Overloaded", "BadGateway", "GatewayTimeout", "Unavailable",
           "LeaseLost"]
