"""leasegate: a client for the leasegate lock gateway, standard library only.

    import leasegate
    client = leasegate.Client("http://127.0.0.1:7400")
    with client.lock("orders/42", ttl="15s", wait="1m") as lease:
        lease.request("PUT", "/store/orders/42", data).raise_for_status()
    with client.lock("orders/42", mode="read") as lease:            # shared with other readers
        ...
    with client.semaphore("crawl/slots", limit=10, wait="1m") as permit:   # one of 10 permits
        ...
    with client.semaphore("gpu", limit=8, permits=4) as permits:   # 4 of 8, in one lease
        ...
    with client.lock("etl/orders") as lease:       # a checkpoint only the holder can write
        lease.set_value({"offset": (lease.value or {}).get("offset", 0) + 100})
    with client.leadership("scheduler", {"url": "http://10.0.0.7:8080"}, wait="1m") as leader:
        ...                                        # leader.term fences; leader.proclaim(value)
    for event in client.observe("scheduler"):     # {"event": "leader" | "vacant", ...}
        ...

    client = leasegate.AsyncClient("http://127.0.0.1:7400")       # asyncio
    async with client.lock("orders/42", ttl="15s", wait="1m") as lease:
        (await lease.request("PUT", "/store/orders/42", data)).raise_for_status()

Durations are strings with a unit ("250ms", "15s", "2m", "1h") or timedeltas; a bare
number is refused. See README.md beside this package for the whole story.
"""

from .aio import AsyncClient, AsyncLease
from .client import Client
from .errors import (BadGateway, BadRequest, Forbidden, GatewayTimeout, HeadersTooLarge, LeasegateError,
                     LeaseLost, LimitMismatch, LockHeld, MethodNotAllowed, ModeConflict, NotFound, NotHolder,
                     NotLeader, Overloaded, PayloadTooLarge, SemaphoreFull, StaleToken, TLSVerificationError,
                     TokenRequired, TooOld, Unauthorized, Unavailable, UriTooLong, VersionMismatch)
from .lease import Lease
from .transport import Response

__version__ = "0.1.0"

__all__ = ["Client", "AsyncClient", "Lease", "AsyncLease", "Response", "LeasegateError", "BadRequest",
           "Unauthorized", "Forbidden", "NotFound", "MethodNotAllowed", "LockHeld", "NotHolder", "StaleToken",
           "PayloadTooLarge", "UriTooLong", "TokenRequired", "HeadersTooLarge", "Overloaded", "BadGateway",
           "GatewayTimeout", "Unavailable", "TLSVerificationError", "LeaseLost", "SemaphoreFull", "LimitMismatch",
           "ModeConflict", "NotLeader", "VersionMismatch", "TooOld"]
