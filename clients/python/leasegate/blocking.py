"""The blocking driver of plans (plan.py): what Client and Lease run their calls with."""

import time

from .plan import Pause
from .transport import NETWORK_ERRORS


def run(plan):
    """Drives a plan with blocking I/O: each Attempt is sent with Endpoint.request,
    each Pause slept; returns what the plan returns, raises what it raises."""
    outcome = None
    try:
        step = next(plan)
        while True:
            if isinstance(step, Pause):
                time.sleep(step.seconds)
                outcome = None
            else:
                try:
                    outcome = step.endpoint.request(step.method, step.path, step.payload, step.headers,
                                                    timeout=step.timeout, first_byte=step.first_byte)
                except NETWORK_ERRORS as e:
                    outcome = e
            step = plan.send(outcome)
    except StopIteration as stop:
        return stop.value
