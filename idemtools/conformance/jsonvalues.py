"""JSON values compared as JSON, not as Python: type-strict equality, and raw member spans.

Python's `==` makes `True == 1 == 1.0`, so a replay that turned `true` into `1` would compare
equal; JSON has distinct types for them, and a client that checks `isError is true` sees the
difference. `raw_members` finds each member of a JSON object *as written*, so the kit can compare
the raw text of a result outside its `_meta` without re-serializing anything.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["raw_members", "raw_without", "strict_equal"]

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


def strict_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values: same JSON type all the way down (bool, integer, real, string, null,
    array, object), equal numbers and strings, objects with the same members in any order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def raw_members(text: str, start: int = 0) -> list[tuple[str, int, int, int]] | None:
    """The members of the JSON object at `start` of `text`: (name, member start, value start,
    value end) with offsets into `text`; None when no object starts there."""
    i = _skip(text, start)
    if i >= len(text) or text[i] != "{":
        return None
    i = _skip(text, i + 1)
    out: list[tuple[str, int, int, int]] = []
    if i < len(text) and text[i] == "}":
        return out
    while True:
        begin = i
        try:
            name, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        except (ValueError, IndexError):
            return None
        i = _skip(text, i)
        if i >= len(text) or text[i] != ":":
            return None
        i = _skip(text, i + 1)
        try:
            _value, end = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        out.append((str(name), begin, i, end))
        i = _skip(text, end)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
            continue
        return out if i < len(text) and text[i] == "}" else None


def raw_without(text: str, member: str, drop: str) -> str | None:
    """The raw text of object member `member` of the JSON object `text`, with its own member
    `drop` (and the comma beside it) cut out; None when `text` has no such object member."""
    top = raw_members(text)
    found = [m for m in top or [] if m[0] == member]
    if not found:
        return None
    _name, _begin, value_start, value_end = found[0]
    inner = raw_members(text, value_start)
    if inner is None:
        return None
    cut = [m for m in inner if m[0] == drop]
    if not cut:
        return text[value_start:value_end]
    _n, begin, _vs, end = cut[0]
    rest = text[end:value_end]
    stripped = rest.lstrip(_WS)
    if stripped.startswith(","):  # `"_meta": ..., next` -> drop through the comma
        end += len(rest) - len(stripped) + 1
    else:  # the last member: drop the comma before it
        head = text[value_start:begin].rstrip(_WS)
        if head.endswith(","):
            begin = value_start + len(head) - 1
    return text[value_start:begin] + text[end:value_end]
