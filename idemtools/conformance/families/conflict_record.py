"""A refused conflict leaves the record as it was.

An implementation that overwrites the record with the refused call's arguments, or deletes it,
still refuses the conflict itself; what it breaks shows on the next retry of the original
arguments, which must replay the original outcome without running anything. Checked for a
result record, an `isError` record, a JSON-RPC error record (with `sep3182_throw`) and a
conflict by tool name.
"""

from __future__ import annotations

from typing import Any

from ..contract import FAIL, RECORD, RECORD_SLOW, THROW, throw_count
from ..scenario import Context, Outcomes, Reply
from ..sentences import _CONFLICT, _REPEAT, _RETURN, _c

__all__ = ["CHECKS", "SCENARIOS"]

CHECKS = [
    _c(
        "conflict-record-unchanged",
        "MUST",
        _REPEAT,
        _CONFLICT + " / " + _RETURN,
        "The refused call is not the original call: the record stays the original's, so a "
        "retry of the original arguments is still a duplicate of a completed call.",
    ),
]


async def conflict_record(ctx: Context) -> Outcomes:
    check = "sep-3182-conflict-record-unchanged"
    cases: list[tuple[str, str, dict[str, Any], str, dict[str, Any], str]] = [
        ("a result", RECORD, {"payload": "first"}, RECORD, {"payload": "second"}, "rejected"),
        (
            "an isError result",
            FAIL,
            {"payload": "first"},
            FAIL,
            {"payload": "second"},
            "error-record",
        ),
        (
            "another tool name",
            RECORD,
            {"payload": "same"},
            RECORD_SLOW,
            {"payload": "same"},
            "tool-name",
        ),
    ]
    if await ctx.has_tool(THROW):
        cases.append(
            (
                "a JSON-RPC error",
                THROW,
                {"payload": "first"},
                THROW,
                {"payload": "second"},
                "jsonrpc-error-record",
            )
        )
    for what, tool, args, other_tool, other_args, blocker in cases:
        key, label = ctx.fresh("k"), ctx.fresh("keep")
        first = await ctx.call(tool, {"label": label, **args}, key)
        if _count(first) != 1:
            return {check: ("fail", f"the first keyed call did not answer: {first.show()}")}
        refused = await ctx.call(other_tool, {"label": label, **other_args}, key)
        if not refused.rejected or _same(refused, first):
            why = f"the conflicting call ({what}) was not refused: {refused.show()}"
            return {check: ("fail", why, {"blocked_by": f"sep-3182-conflict-{blocker}"})}
        again = await ctx.call(tool, {"label": label, **args}, key)
        count = await ctx.count(label)
        bad = _changed(what, first, again, count)
        if bad is not None:
            return {check: ("fail", bad)}
        twice = await ctx.call(other_tool, {"label": label, **other_args}, key)
        if not twice.rejected or await ctx.count(label) != 1:
            return {
                check: (
                    "fail",
                    f"after a refused conflict ({what}), the conflicting arguments again were "
                    f"not refused: {twice.show()}",
                )
            }
    kinds = ", ".join(case[0] for case in cases)
    return {
        check: (
            "pass",
            f"after a refused conflict ({kinds}) the original arguments still replay and "
            "nothing ran again",
        )
    }


def _count(reply: Reply) -> int | None:
    return throw_count(reply.error) if reply.error is not None else reply.executions


def _same(reply: Reply, original: Reply) -> bool:
    """The recorded outcome again: the same result, or the same JSON-RPC error object."""
    if original.error is not None:
        return reply.same_error(original)
    return reply.same_result(original)


def _changed(what: str, first: Reply, again: Reply, count: int | None) -> str | None:
    if count != 1:
        return (
            f"after a refused conflict ({what}), the original arguments ran again ({count} "
            "executions): the conflict deleted the record"
        )
    if not _same(again, first):
        return (
            f"after a refused conflict ({what}), the original arguments got {again.show()}, "
            f"not the original {first.show()}: the conflict overwrote the record"
        )
    return None


SCENARIOS = [(conflict_record, ("conflict-record-unchanged",), "conflict", None)]
