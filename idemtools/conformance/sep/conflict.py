"""Other arguments, or another tool, under a used key are refused and leave the record as it was.

The conflict after a result, and after an `isError` result (the conflict after a JSON-RPC error
is decided with its replay, in `replay`).
"""

from __future__ import annotations

from ..contract import FAIL, RECORD, RECORD_SLOW
from ..scenario import Context, Outcomes, Reply, _first, _verdict
from ..wire import encode

__all__ = ["conflict_error_record", "conflicts"]


def _conflict_data(reply: Reply, key: str) -> bool:
    data = reply.error_data()
    return (
        data is not None
        and data.get("type") == "idempotency_key_conflict"
        and data.get("idempotencyKey") == key
    )


async def conflicts(ctx: Context) -> Outcomes:
    """The key again with other arguments, and again with another tool name."""
    checks = (
        "sep-3182-conflict-rejected",
        "sep-3182-conflict-not-executed",
        "sep-3182-conflict-no-cached-result",
        "sep-3182-conflict-error-data",
        "sep-3182-conflict-tool-name",
    )
    key, label = ctx.fresh("k"), ctx.fresh("conflict")
    first = await ctx.call(RECORD, {"label": label, "payload": "first"}, key)
    if (bad := await _first(ctx, checks, first)) is not None:
        return bad
    other = await ctx.call(RECORD, {"label": label, "payload": "second"}, key)
    count = await ctx.count(label)
    out: Outcomes = {
        checks[0]: _verdict(
            other.rejected, "refused: " + other.show(), f"not refused: {other.show()}"
        ),
        checks[1]: _verdict(
            count == 1,
            "the tool did not run with the new arguments",
            f"the tool ran with the new arguments ({count} executions)",
        ),
        checks[2]: _verdict(
            not other.same_result(first),
            "the original result was not returned",
            "the original result was returned for different arguments",
        ),
    }
    # Same arguments, another tool name.
    tool_key, tool_label = ctx.fresh("k"), ctx.fresh("tool")
    args = {"label": tool_label, "payload": "same"}
    mine = await ctx.call(RECORD, args, tool_key)
    theirs = await ctx.call(RECORD_SLOW, args, tool_key)
    tool_count = await ctx.count(tool_label)
    if mine.executions is None:
        out[checks[4]] = ("fail", f"the first keyed call did not answer: {mine.show()}")
    elif theirs.same_result(mine):
        out[checks[4]] = ("fail", f"{RECORD_SLOW} got {RECORD}'s recorded result for the same key")
    elif tool_count != 1:
        out[checks[4]] = ("fail", f"{RECORD_SLOW} was executed under {RECORD}'s key")
    else:
        out[checks[4]] = _verdict(
            theirs.rejected, "refused: " + theirs.show(), f"not refused: {theirs.show()}"
        )
    both = _conflict_data(other, key) and _conflict_data(theirs, tool_key)
    out[checks[3]] = _verdict(
        both,
        f"error.data = {encode(other.error_data())} (other arguments and another tool)",
        "error.data does not name the conflict and key: "
        f"{other.show() if not _conflict_data(other, key) else theirs.show()}",
    )
    return out


async def conflict_error_record(ctx: Context) -> Outcomes:
    check = "sep-3182-conflict-error-record"
    key, label = ctx.fresh("k"), ctx.fresh("errconflict")
    first = await ctx.call(FAIL, {"label": label, "payload": "first"}, key)
    if not first.is_error_result or first.executions is None:
        return {check: ("fail", f"{FAIL} did not answer an isError result: {first.show()}")}
    other = await ctx.call(FAIL, {"label": label, "payload": "second"}, key)
    count = await ctx.count(label)
    if count != 1:
        why = f"other arguments under an isError record were executed ({count} executions)"
        return {check: ("fail", why)}
    if other.same_result(first):
        return {
            check: (
                "fail",
                f"the recorded isError result was replayed for other arguments: {other.show()}",
            )
        }
    return {
        check: _verdict(
            other.rejected,
            f"other arguments were refused: {other.show()}",
            f"other arguments were not refused: {other.show()}",
        )
    }
