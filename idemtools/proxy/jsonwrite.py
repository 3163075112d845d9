"""JSON out, for every value `jsonread` reads: orjson where it can, the standard encoder else.

orjson refuses integers beyond 64 bits and lone surrogates (which JSON may spell as an
escape, and Python reads into a str that UTF-8 cannot encode); the standard encoder writes
both, the surrogate as the escape it came as.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps"]


def dumps(message: Any) -> bytes:
    """`message` as compact JSON bytes (UTF-8; escapes only where UTF-8 cannot spell a str)."""
    try:
        return orjson.dumps(message)
    except TypeError:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        try:
            return text.encode()
        except UnicodeEncodeError:  # a lone surrogate: ASCII, every non-ASCII one escaped
            return json.dumps(message, separators=(",", ":")).encode()
