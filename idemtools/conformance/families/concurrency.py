"""Identical keyed calls that arrive at the same instant run once.

A server that looks the key up, then records it in a second step (check-then-set without
atomicity), runs both of two calls that arrive together. The kit sends two identical keyed
calls at once (over stdio in one write, over HTTP as two parallel requests), in several rounds
with fresh keys: each round, exactly one execution, the other call answered with the replay or
refused as in progress, and a later retry replays the one outcome.
"""

from __future__ import annotations

from typing import Any

from ..contract import RECORD
from ..scenario import Context, Outcomes, Reply
from ..sentences import _KEY, _REPEAT, _c
from ..wire import RAW_TEXT, HttpWire

__all__ = ["CHECKS", "SCENARIOS"]

ROUNDS = 6

CHECKS = [
    _c(
        "concurrent-duplicates-one-execution",
        "MUST",
        _REPEAT,
        "If a request bearing the same key is still executing [...] the server MUST NOT begin "
        "a second execution of the tool for the duplicate request / " + _KEY,
        "Two identical keyed calls that arrive at the same instant are one logical operation: "
        "whichever the server sees second is a duplicate of one already executing.",
    ),
]


async def _together(ctx: Context, params: dict[str, Any]) -> list[Reply]:
    answers = await ctx.wire.requests_together("tools/call", [params, params])
    replies = []
    for raw in answers:
        raw.pop(RAW_TEXT, None)
        replies.append(Reply(raw, 0.0))
    ctx.transcript.append(
        {"request": f"2 x {params}"[:2000], "answer": [r.show() for r in replies]}
    )
    return replies


async def concurrent_duplicates(ctx: Context) -> Outcomes:
    check = "sep-3182-concurrent-duplicates-one-execution"
    how = "as two parallel requests" if isinstance(ctx.wire, HttpWire) else "in one write"
    for n in range(1, ROUNDS + 1):
        key, label = ctx.fresh("k"), ctx.fresh("race")
        params = {"name": RECORD, "arguments": {"label": label}, "idempotencyKey": key}
        one, two = await _together(ctx, params)
        count = await ctx.count(label)
        sent = f"round {n} of {ROUNDS}: two identical keyed calls sent {how}"
        if count != 1:
            return {check: ("fail", f"{sent}: {count} executions ({one.show()}; {two.show()})")}
        ran = one if one.executions == 1 else two
        other = two if ran is one else one
        if ran.executions != 1:
            return {check: ("fail", f"{sent}: neither answered the execution ({one.show()})")}
        if not (other.same_result(ran) or other.rejected):
            return {
                check: ("fail", f"{sent}: the second got {other.show()}, the first {ran.show()}")
            }
        retry = await ctx.call(RECORD, {"label": label}, key)
        if not retry.same_result(ran) or await ctx.count(label) != 1:
            return {
                check: (
                    "fail",
                    f"{sent}: a later retry got {retry.show()}, not the one outcome {ran.show()}",
                )
            }
    return {
        check: (
            "pass",
            f"{ROUNDS} rounds of two identical keyed calls sent {how}: one execution each",
        )
    }


SCENARIOS = [(concurrent_duplicates, ("concurrent-duplicates-one-execution",), "concurrency", None)]
