"""Reading JSON fast without losing an integer.

orjson reads an integer outside 64 bits as a float (`12345678901234567890123` becomes
`1.2345678901234568e+22`), so two different integers could fingerprint alike and a recorded
answer could replay altered. Integers stay exact at any size: text holding a run of 19 or more
digits (every integer outside 64 bits has one) is read by the standard library instead.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["loads", "needs_exact"]

_LONG_DIGITS = re.compile(rb"\d{19}")


def needs_exact(data: bytes) -> bool:
    """Whether `data` may hold an integer orjson would not read exactly."""
    return _LONG_DIGITS.search(data) is not None


def loads(data: bytes) -> Any:
    """The JSON value of `data`, integers exact; raises ValueError (orjson's or json's).

    The standard library is lenient where orjson is strict (NaN, Infinity, lone surrogate
    escapes); callers that must refuse those check them on top."""
    if not needs_exact(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)
