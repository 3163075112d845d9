"""Arguments that differ only where a shortcut does not look must still conflict.

The existing equivalence checks prove that equal values match however they are written; these
prove the converse for the comparisons implementers take shortcuts with: a difference below the
top level (a nested value or member name, a list's order or length), and a difference of JSON
type or of a string's exact characters (`"1"` is not `1`, `true` is not `1`, `null` is not an
absent member, `"a"` is not `"A"`). Each variant is its own key: the first call runs, the call
with the other arguments must be refused and run nothing.
"""

from __future__ import annotations

from typing import Any

from ..contract import RECORD
from ..scenario import Context, Outcomes, _first
from ..sentences import _CONFLICT, _EQ, _c
from ..wire import encode

__all__ = ["CHECKS", "SCENARIOS"]

_EQUIVALENT = (
    "Two requests bearing the same `idempotencyKey` are equivalent if they specify the same tool "
    "name and equivalent arguments as parsed JSON values."
)
_ABSENT = object()  # the payload member left out

# (what differs, the first payload, the other payload)
NESTED: tuple[tuple[str, Any, Any], ...] = (
    ("a nested value", {"a": {"b": 1}}, {"a": {"b": 2}}),
    ("a nested member name", {"a": {"b": 1}}, {"a": {"c": 1}}),
    ("a nested extra member", {"a": {"b": 1}}, {"a": {"b": 1, "c": None}}),
    ("a list's order", {"a": [1, 2]}, {"a": [2, 1]}),
    ("a repeated list item", {"a": [1, 2]}, {"a": [1, 2, 2]}),
    ("a value three levels down", [{"x": [1, {"y": "p"}]}], [{"x": [1, {"y": "q"}]}]),
)
TYPES: tuple[tuple[str, Any, Any], ...] = (
    ("a string and a number", {"n": "1"}, {"n": 1}),
    ("a boolean and a number", {"n": True}, {"n": 1}),
    ("false and 0", {"n": False}, {"n": 0}),
    ("null and an absent member", None, _ABSENT),
    ("an empty string and null", {"s": ""}, {"s": None}),
    ("an empty object and an empty list", {"s": {}}, {"s": []}),
    ("a string's case", {"s": "Alpha"}, {"s": "alpha"}),
    ("a string's trailing space", {"s": "alpha"}, {"s": "alpha "}),
)

CHECKS = [
    _c(
        "conflict-nested-arguments",
        "MUST",
        _EQ,
        _EQUIVALENT + " / " + _CONFLICT,
        "Parsed JSON values are equal only when they are equal at every depth: arguments that "
        "differ below the top level are different arguments.",
    ),
    _c(
        "conflict-value-types",
        "MUST",
        _EQ,
        _EQUIVALENT + " / " + _CONFLICT,
        "A string, a number, a boolean, null and an absent member are different JSON values, "
        "and so are strings that differ in case or whitespace (only numbers compare by value).",
    ),
]


def _arguments(label: str, payload: Any) -> dict[str, Any]:
    return {"label": label} if payload is _ABSENT else {"label": label, "payload": payload}


def _shown(payload: Any) -> str:
    return "no payload" if payload is _ABSENT else f"payload {encode(payload)}"


async def _must_conflict(
    ctx: Context, check: str, variants: tuple[tuple[str, Any, Any], ...]
) -> Outcomes:
    """Each variant under a fresh key: the first call runs, the other arguments are refused."""
    missed: list[str] = []
    for what, one, two in variants:
        key, label = ctx.fresh("k"), ctx.fresh("args")
        first = await ctx.call(RECORD, _arguments(label, one), key)
        if (bad := await _first(ctx, (check,), first)) is not None:
            return bad
        other = await ctx.call(RECORD, _arguments(label, two), key)
        count = await ctx.count(label)
        sent = f"{_shown(one)} then {_shown(two)} ({what})"
        if other.same_result(first):
            missed.append(f"{sent}: the original result was replayed ({other.show()})")
        elif count != 1:
            missed.append(f"{sent}: the tool ran again ({count} executions)")
        elif not other.rejected:
            missed.append(f"{sent}: not refused: {other.show()}")
    if missed:
        return {
            check: (
                "fail",
                "one key, different arguments, treated as equivalent: "
                + missed[0]
                + (f"; and {len(missed) - 1} more" if len(missed) > 1 else ""),
            )
        }
    return {
        check: (
            "pass",
            f"{len(variants)} argument pairs differing only in "
            + ", ".join(what for what, _one, _two in variants)
            + ": each refused as a conflict, nothing run",
        )
    }


async def conflict_nested(ctx: Context) -> Outcomes:
    return await _must_conflict(ctx, "sep-3182-conflict-nested-arguments", NESTED)


async def conflict_types(ctx: Context) -> Outcomes:
    return await _must_conflict(ctx, "sep-3182-conflict-value-types", TYPES)


SCENARIOS = [
    (conflict_nested, ("conflict-nested-arguments",), "arguments", None),
    (conflict_types, ("conflict-value-types",), "arguments", None),
]
