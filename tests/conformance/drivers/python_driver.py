#!/usr/bin/env python3
"""The contract driver of the Python client (tests/conformance/PROTOCOL.md): the blocking
leasegate.Client, or with --async the asyncio leasegate.AsyncClient.

It maps each step onto the client's public API as an application would and reports what the
client said; it has no retries, clocks or checks of its own."""

import asyncio
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "clients", "python"))

import leasegate  # noqa: E402
from leasegate.durations import millis  # noqa: E402

CAPABILITIES = ["read", "semaphore", "write", "fence", "duration", "check_after_pause"]
_out = threading.Lock()


def emit(message):
    line = json.dumps(message) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def failure(step_id, error):
    """The answer for an exception of the client."""
    if isinstance(error, leasegate.LeaseLost):
        code = "lost"
    elif isinstance(error, leasegate.Unavailable):
        code = "unavailable"
    elif isinstance(error, leasegate.LeasegateError) and error.code:
        code = error.code
    else:
        code = "driver_error"
    answer = {"id": step_id, "ok": False, "error": code, "message": "%s: %s" % (type(error).__name__, error)}
    if isinstance(error, leasegate.LeasegateError) and isinstance(error.body, dict) and "max_token" in error.body:
        answer["max_token"] = str(error.body["max_token"])
    return answer


def granted(ref, lease):
    return {"ok": True, "lease_ref": ref, "token": str(lease.token), "name": lease.name, "mode": lease.mode,
            "ttl_ms": int(round(lease.ttl * 1000)), "lease_header": dict(lease.headers)}


def write_answer(response):
    code = None
    try:
        body = response.json()
        if isinstance(body, dict):
            code = body.get("error")
    except ValueError:
        pass
    return {"ok": True, "status": response.status, "code": code}


def duration_answer(text):
    try:
        return {"ok": True, "ms": millis(text, "text")}
    except (ValueError, TypeError) as e:
        return {"ok": False, "error": "bad_duration", "message": str(e)}


class Driver:
    """The state of one driver: the client and its leases by ref."""

    def __init__(self):
        self.client = None
        self.leases = {}

    def new_ref(self):
        return "L%d" % (len(self.leases) + 1)

    def lost_callback(self, ref):
        def on_lost(error):
            emit({"event": "lost", "lease_ref": ref, "at_ms": int(time.time() * 1000), "reason": str(error)})
        return on_lost

    @staticmethod
    def acquire_args(step):
        unsupported = [k for k in ("reenter", "request_id") if step.get(k) is not None]
        kwargs = {"ttl": "%dms" % step["ttl_ms"], "wait": "%dms" % (step.get("wait_ms") or 0)}
        return unsupported, kwargs


class SyncDriver(Driver):
    def run(self):
        for line in sys.stdin:
            if not line.strip():
                continue
            step = json.loads(line)
            try:
                answer = self.step(step)
            except Exception as e:  # every error of the client is an answer
                answer = failure(step["id"], e)
            answer["id"] = step["id"]
            emit(answer)

    def step(self, step):
        op = step["op"]
        if op == "hello":
            self.client = leasegate.Client(step["servers"], owner=step["owner"], timeout="%dms" % step["timeout_ms"],
                                           retry_for="%dms" % step["retry_for_ms"])
            return {"ok": True, "client": "python", "capabilities": CAPABILITIES}
        if op == "acquire":
            unsupported, kwargs = self.acquire_args(step)
            if unsupported:
                return {"ok": False, "error": "unsupported", "message": "no " + ", ".join(unsupported)}
            ref = self.new_ref()
            on_lost = self.lost_callback(ref)
            if step.get("semaphore"):
                lease = self.client.acquire_permit(step["name"], limit=step["semaphore"]["limit"], on_lost=on_lost,
                                                   keep_alive=True, **kwargs)
            else:
                lease = self.client.acquire(step["name"], mode=step.get("mode") or "write", on_lost=on_lost,
                                            keep_alive=True, **kwargs)
            self.leases[ref] = lease
            return granted(ref, lease)
        if op == "renew":
            lease = self.leases[step["lease_ref"]]
            lease.renew(None if step.get("ttl_ms") is None else "%dms" % step["ttl_ms"])
            return {"ok": True, "token": str(lease.token), "ttl_ms": int(round(lease.ttl * 1000))}
        if op == "release":
            self.leases[step["lease_ref"]].release()
            return {"ok": True}
        if op == "check":
            self.leases[step["lease_ref"]].check()
            return {"ok": True}
        if op == "write":
            lease = self.leases[step["lease_ref"]]
            return write_answer(lease.request(step["method"], step["path"], step.get("body")))
        if op == "fence":
            answer = self.client.fence(step["resource"], step["token"])
            return {"ok": True, "accepted": answer["accepted"], "max_token": str(answer["max_token"])}
        if op == "duration":
            return duration_answer(step["text"])
        return {"ok": False, "error": "unsupported", "message": "no op %r" % op}


class AsyncDriver(Driver):
    async def run(self):
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            if not line.strip():
                continue
            step = json.loads(line)
            try:
                answer = await self.step(step)
            except Exception as e:  # every error of the client is an answer
                answer = failure(step["id"], e)
            answer["id"] = step["id"]
            emit(answer)

    async def step(self, step):
        op = step["op"]
        if op == "hello":
            self.client = leasegate.AsyncClient(step["servers"], owner=step["owner"],
                                                timeout="%dms" % step["timeout_ms"],
                                                retry_for="%dms" % step["retry_for_ms"])
            return {"ok": True, "client": "python-async", "capabilities": CAPABILITIES}
        if op == "acquire":
            unsupported, kwargs = self.acquire_args(step)
            if unsupported:
                return {"ok": False, "error": "unsupported", "message": "no " + ", ".join(unsupported)}
            ref = self.new_ref()
            on_lost = self.lost_callback(ref)
            if step.get("semaphore"):
                lease = await self.client.acquire_permit(step["name"], limit=step["semaphore"]["limit"],
                                                         on_lost=on_lost, keep_alive=True, **kwargs)
            else:
                lease = await self.client.acquire(step["name"], mode=step.get("mode") or "write", on_lost=on_lost,
                                                  keep_alive=True, **kwargs)
            self.leases[ref] = lease
            return granted(ref, lease)
        if op == "renew":
            lease = self.leases[step["lease_ref"]]
            await lease.renew(None if step.get("ttl_ms") is None else "%dms" % step["ttl_ms"])
            return {"ok": True, "token": str(lease.token), "ttl_ms": int(round(lease.ttl * 1000))}
        if op == "release":
            await self.leases[step["lease_ref"]].release()
            return {"ok": True}
        if op == "check":
            self.leases[step["lease_ref"]].check()
            return {"ok": True}
        if op == "write":
            lease = self.leases[step["lease_ref"]]
            return write_answer(await lease.request(step["method"], step["path"], step.get("body")))
        if op == "fence":
            answer = await self.client.fence(step["resource"], step["token"])
            return {"ok": True, "accepted": answer["accepted"], "max_token": str(answer["max_token"])}
        if op == "duration":
            return duration_answer(step["text"])
        return {"ok": False, "error": "unsupported", "message": "no op %r" % op}


def main():
    if "--async" in sys.argv[1:]:
        asyncio.run(AsyncDriver().run())
    else:
        SyncDriver().run()


if __name__ == "__main__":
    main()
