"""Durations as people write them: "250ms", "15s", "2m", "1h", or a number of seconds.

Seconds, because that is what the standard library uses (time.sleep, socket timeouts);
the strings are those of the leasegate CLI, so one spelling works in both places.
"""

import datetime
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")


def seconds(value, what="duration"):
    """value ("15s", 1.5, datetime.timedelta) as a float number of seconds, >= 0.

    A bare number is seconds. A string needs a unit, so that "15" cannot be read as
    seconds by one reader and milliseconds by another. Raises ValueError or TypeError
    naming `what`.
    """
    if isinstance(value, datetime.timedelta):
        result = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError("%s: %r is not a duration such as '250ms', '15s', '2m' or '1h'" % (what, value))
        result = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise TypeError("%s: expected a duration ('15s') or a number of seconds, got %r" % (what, value))
    if not result >= 0 or result == float("inf"):
        raise ValueError("%s: must be a finite duration >= 0, got %r" % (what, value))
    return result


def millis(value, what="duration"):
    """value as a whole number of milliseconds, as the wire wants it."""
    return int(round(seconds(value, what) * 1000))
