"""Calls that are not retries: without a key, and an MRTR continuation carrying one.

A call without a key is the behaviour before the SEP (every call executes); a continuation is
outside the SEP's terms and must leave the key's record untouched.
"""

from __future__ import annotations

from ..contract import RECORD
from ..scenario import Context, Outcomes, _first, _verdict

__all__ = ["mrtr", "unkeyed"]


async def unkeyed(ctx: Context) -> Outcomes:
    check = "sep-3182-unkeyed-unaffected"
    label = ctx.fresh("plain")
    first = await ctx.call(RECORD, {"label": label})
    second = await ctx.call(RECORD, {"label": label})
    return {
        check: _verdict(
            (first.executions, second.executions) == (1, 2),
            "two unkeyed calls, two executions",
            f"unkeyed calls answered {first.show()} then {second.show()}",
        )
    }


async def mrtr(ctx: Context) -> Outcomes:
    check = "sep-3182-mrtr-continuation-excluded"
    key, label = ctx.fresh("k"), ctx.fresh("mrtr")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    # `inputResponses` alone: a forged `requestState` would be refused by SDKs that sign it.
    continuation = {"inputResponses": {"sep3182": {"action": "accept", "content": {}}}}
    cont = await ctx.call(RECORD, {"label": label}, key, extra=continuation)
    retry = await ctx.call(RECORD, {"label": label}, key)
    count = await ctx.count(label)
    idempotency_error = (cont.error_type() or "").startswith("idempotency_key")
    if cont.same_result(first) or idempotency_error:
        return {
            check: (
                "fail",
                f"a continuation carrying the key was treated as a retry: {cont.show()}",
            )
        }
    how = "ran normally" if count == 2 else f"was answered by the server itself ({cont.show()})"
    return {
        check: _verdict(
            retry.same_result(first),
            f"the continuation {how}; the key's record is untouched",
            f"after the continuation, a retry got {retry.show()}",
        )
    }
