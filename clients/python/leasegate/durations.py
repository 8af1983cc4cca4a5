"""Durations as people write them: "250ms", "15s", "2m", "1h", "1.5s".

The grammar is the leasegate CLI's and the Node client's, so one spelling means the
same everywhere: digits, an optional fraction, and a unit (ms, s, m, h), nothing else
(no sign, no space, no exponent). The result is a whole number of milliseconds, at
most 2**53 - 1: "1.5s" is 1500 ms, "1.5ms" is refused. A datetime.timedelta is taken
too (also in whole milliseconds).

A bare number is refused (ValueError): 15 would be seconds to one reader and
milliseconds to another, and it was both once. The HTTP API's own *_ms fields are
the place for numbers of milliseconds.
"""

import datetime
import re

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000}
_DURATION = re.compile(r"([0-9]+)(?:\.([0-9]+))?(ms|s|m|h)", re.ASCII)
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]*)?", re.ASCII)
MAX_MS = 2 ** 53 - 1  # the same bound in every client: JavaScript's largest exact integer

_EXAMPLES = "such as '250ms', '15s', '2m', '1h' or '1.5s'"


def millis(value, what="duration"):
    """value ("15s", "250ms", a timedelta) as a whole number of milliseconds, >= 0.

    Raises ValueError naming `what` for a bare number (15, 1.5, "15"), a malformed
    string, a fraction of a millisecond or a duration beyond MAX_MS; TypeError for
    anything else (None, True, a list).
    """
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86400 + value.seconds) * 1000000 + value.microseconds
        if micros < 0 or micros % 1000:
            raise ValueError("%s: %r is not a whole number of milliseconds >= 0" % (what, value))
        ms = micros // 1000
    elif isinstance(value, bool):
        raise TypeError("%s: expected a duration %s, got %r" % (what, _EXAMPLES, value))
    elif isinstance(value, (int, float)) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("%s: %r has no unit: write %s (leasegate reads no bare number as a duration)"
                         % (what, value, _with_units(value)))
    elif isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if not m:
            raise ValueError("%s: %r is not a duration %s" % (what, value, _EXAMPLES))
        whole, fraction, unit = m.group(1), m.group(2) or "", m.group(3)
        scaled = int(whole + fraction) * _UNIT_MS[unit]
        divisor = 10 ** len(fraction)
        if scaled % divisor:
            raise ValueError("%s: %r is not a whole number of milliseconds" % (what, value))
        ms = scaled // divisor
    else:
        raise TypeError("%s: expected a duration %s, got %r" % (what, _EXAMPLES, value))
    if ms > MAX_MS:
        raise ValueError("%s: %r is longer than %d ms" % (what, value, MAX_MS))
    return ms


def seconds(value, what="duration"):
    """value as a float number of seconds (see millis for what is accepted)."""
    return millis(value, what) / 1000.0


def _with_units(value):
    text = str(value).lstrip("+")
    return ", ".join("'%s%s'" % (text, unit) for unit in ("ms", "s", "m")) + " or '%sh'" % text
