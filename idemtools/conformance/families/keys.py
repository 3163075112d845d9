"""Long keys that differ only at their end are two keys.

A store that cuts keys to a column width (64, 128, 200 characters) merges keys the client made
distinct; the kit's keys are 255 characters (the width of a common key column, and a limit some
servers document), alike but for the last.
"""

from __future__ import annotations

from ..scenario import Context, Outcomes
from ..sentences import _KEY, _c
from ..sep.keys import _distinct_keys

__all__ = ["CHECKS", "SCENARIOS"]

LENGTH = 255

CHECKS = [
    _c(
        "key-long-distinct",
        "MUST",
        "Request format",
        _KEY,
        "An opaque string is the same key only as the same string: two long keys that differ "
        "in their last character are other keys, other operations.",
    ),
]


async def key_long(ctx: Context) -> Outcomes:
    base = ctx.fresh("long")
    base += "x" * (LENGTH - 1 - len(base))
    return await _distinct_keys(
        ctx,
        "sep-3182-key-long-distinct",
        f"their last character of {LENGTH}",
        base + "a",
        base + "b",
    )


SCENARIOS = [(key_long, ("key-long-distinct",), "keys", None)]
