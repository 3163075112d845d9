"""Every kind of recorded outcome is kept, whatever its size, its kind and what came after it.

Implementations take shortcuts with what they record: errors kept for a shorter time than
results, a cache that evicts by count (the least recently used of N records), outcomes over a
size not recorded or cut short. The kit records each kind of outcome (a result, an `isError`
result, a JSON-RPC error, a 64 KiB result), and replays them after at least 100 other keys were
recorded (every run), and after half of the documented window (`--retention`). A 1 MiB outcome
run again is a failure, whatever its first answer was (a result, or an error after the tool
ran); refused explicitly without running (a per-record size limit) it passes with a note naming
the size: what the count says decides, not the shape of the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..contract import FAIL, RECORD, THROW, throw_count
from ..scenario import Context, Outcome, Outcomes, Reply
from ..sentences import _EQUIVALENT_DONE, _REPEAT, _RETURN, _c
from ..sep import scope

__all__ = ["CHECKS", "SCENARIOS"]

LARGE = 64 * 1024
HUGE = 1024 * 1024
OTHER_KEYS = 128  # recorded between an outcome and its retry: "at least 100"
BATCH = 16  # the other keys go out this many at a time
_RETAIN = "A server MUST retain enough state to answer a repeated key within a bounded window"
_EVERY_KIND = _RETURN + " — whether that result was a successful response or an error response"

CHECKS = [
    _c(
        "retention-after-other-keys",
        "MUST",
        "Retention",
        _RETAIN + " / " + _EVERY_KIND,
        "The window is a time, not a number of records: outcomes of every kind are still "
        f"replayed after {OTHER_KEYS} other keys were recorded.",
    ),
    _c(
        "retention-window-every-outcome",
        "MUST",
        "Retention",
        _RETAIN + " / " + _EVERY_KIND,
        "The documented window holds for every kind of outcome: an error is kept as long as a "
        "result, a large result as long as a small one.",
    ),
    _c(
        "replay-large-outcome",
        "MUST",
        _REPEAT,
        _EQUIVALENT_DONE + " " + _RETURN,
        "A 64 KiB outcome is replayed whole. At 1 MiB a server may refuse the call or its "
        "retry under a per-record limit it documents, as long as the refusal runs nothing (a "
        "note naming the size); once the tool ran, whatever the first answer was, its retry may "
        "not run it again.",
    ),
]


@dataclass
class Recorded:
    """One outcome recorded under a key, and how to ask for it again."""

    kind: str
    tool: str
    arguments: dict[str, Any]
    key: str
    label: str
    first: Reply


async def _record_every_kind(ctx: Context) -> tuple[list[Recorded], str | None]:
    """One keyed call per kind of outcome; the reason the first call of a kind failed, if one."""
    kinds: list[tuple[str, str, dict[str, Any]]] = [
        ("a result", RECORD, {}),
        ("an isError result", FAIL, {}),
    ]
    if await ctx.has_tool(THROW):
        kinds.append(("a JSON-RPC error", THROW, {}))
    kinds.append((f"a {LARGE // 1024} KiB result", RECORD, {"pad": LARGE}))
    recorded: list[Recorded] = []
    for kind, tool, extra in kinds:
        key, label = ctx.fresh("k"), ctx.fresh("kept")
        arguments = {"label": label, **extra}
        first = await ctx.call(tool, arguments, key)
        if tool == RECORD and "pad" in extra and not _padded(first, LARGE):
            continue  # the fixture does not pad: the large outcome is checked nowhere here
        if _count_of(first) != 1:
            return recorded, f"the first call for {kind} did not answer: {first.show()}"
        recorded.append(Recorded(kind, tool, arguments, key, label, first))
    return recorded, None


def _count_of(reply: Reply) -> int | None:
    return throw_count(reply.error) if reply.error is not None else reply.executions


def _padded(reply: Reply, size: int) -> bool:
    text = reply.show() if reply.result is None else str(reply.result)
    return reply.executions is not None and len(text) >= size


async def _replayed(ctx: Context, done: Recorded) -> str | None:
    """None when the retry replayed the outcome without running it; else what happened."""
    again = await ctx.call(done.tool, done.arguments, done.key)
    count = await ctx.count(done.label)
    if count != 1:
        return f"{done.kind} was run again ({count} executions)"
    same = (
        again.same_error(done.first)
        if done.first.error is not None
        else again.same_result(done.first)
    )
    if not same:
        return (
            f"{done.kind} was not replayed: got {again.show()}, the original was "
            f"{done.first.show()}"
        )
    return None


async def after_other_keys(ctx: Context) -> Outcomes:
    check = "sep-3182-retention-after-other-keys"
    recorded, bad = await _record_every_kind(ctx)
    if bad is not None:
        return {check: ("fail", bad)}
    filler = ctx.fresh("filler")
    for start in range(0, OTHER_KEYS, BATCH):
        many = [
            {
                "name": RECORD,
                "arguments": {"label": filler, "payload": i},
                "idempotencyKey": ctx.fresh("o"),
            }
            for i in range(start, min(start + BATCH, OTHER_KEYS))
        ]
        await ctx.wire.requests_together("tools/call", many)
    missed = [m for done in recorded if (m := await _replayed(ctx, done)) is not None]
    kinds = ", ".join(done.kind for done in recorded)
    if missed:
        return {
            check: (
                "fail",
                f"after {OTHER_KEYS} other keys were recorded: "
                + "; ".join(missed)
                + " (records evicted by count, not kept for a window)",
            )
        }
    return {check: ("pass", f"{kinds}: each replayed after {OTHER_KEYS} other keys were recorded")}


async def _every_outcome_after_wait(ctx: Context) -> Outcomes:
    check = "sep-3182-retention-window-every-outcome"
    if ctx.retention is None:
        why = "give --retention SECONDS, the window the server documents"
        return {check: ("skip", why, {"enable": "--retention SECONDS"})}
    recorded, bad = await _record_every_kind(ctx)
    if bad is not None:
        return {check: ("fail", bad)}
    wait = max(0.0, min(ctx.retention * 0.5, ctx.retention - 1.0))
    await asyncio.sleep(wait)
    missed = [m for done in recorded if (m := await _replayed(ctx, done)) is not None]
    window = f"after {wait:g} s of a documented {ctx.retention:g} s window"
    if missed:
        return {check: ("fail", f"{window}: " + "; ".join(missed))}
    kinds = ", ".join(done.kind for done in recorded)
    return {check: ("pass", f"{kinds}: each replayed {window}")}


async def retention(ctx: Context) -> Outcomes:
    """The documented window, for the result (the original check) and every kind at once:
    one wait of half the window serves both."""
    mine, theirs = await asyncio.gather(scope.retention(ctx), _every_outcome_after_wait(ctx))
    return {**mine, **theirs}


async def large_outcome(ctx: Context) -> Outcomes:
    check = "sep-3182-replay-large-outcome"
    key, label = ctx.fresh("k"), ctx.fresh("large")
    arguments = {"label": label, "pad": LARGE}
    first = await ctx.call(RECORD, arguments, key)
    if first.executions is None:
        return {check: ("fail", f"the first keyed call did not answer: {first.show()}")}
    if not _padded(first, LARGE):
        why = f"{RECORD} does not honour `pad` (the fixture contract's large outcome)"
        return {check: ("skip", why, {"enable": f"`pad` in the {RECORD} fixture"})}
    done = Recorded(f"a {LARGE // 1024} KiB result", RECORD, arguments, key, label, first)
    if (miss := await _replayed(ctx, done)) is not None:
        return {check: ("fail", miss)}
    return {check: await _huge_outcome(ctx)}


async def _huge_outcome(ctx: Context) -> Outcome:
    """The 1 MiB outcome. What decides is whether the tool ran, never what the first answer
    looked like: an error that ran nothing is a documented per-record limit (a note naming the
    size); an outcome that ran, error or result, is the previously produced result, and its
    retry must not run again."""
    small = f"a {LARGE // 1024} KiB result was replayed whole"
    key, label = ctx.fresh("k"), ctx.fresh("huge")
    arguments = {"label": label, "pad": HUGE}
    first = await ctx.call(RECORD, arguments, key)
    size = f"{HUGE // (1024 * 1024)} MiB ({HUGE} characters)"
    if first.executions is None:
        ran = await ctx.count(label)
        if ran == 0:
            return (
                "note",
                f"{small}; the call with a {size} outcome was refused without running: "
                f"{first.show()} (a per-record size limit: accepted)",
            )
        if ran != 1:
            return (
                "fail",
                f"the call with a {size} outcome was answered {first.show()} and the count of "
                f"its label is {ran}, not 1 (ran) nor 0 (refused before running)",
            )
    again = await ctx.call(RECORD, arguments, key)
    count = await ctx.count(label)
    outcome = "outcome" if first.executions is not None else f"outcome (answered {first.show()})"
    if count != 1:
        return ("fail", f"the retry of a {size} {outcome} was run again ({count} executions)")
    if first.executions is None:
        if again.same_error(first):
            return ("pass", f"{small}; the {size} call ran and its error was replayed")
        if again.rejected:
            return (
                "note",
                f"{small}; the {size} call ran and was answered with an error, and its retry "
                f"was refused without running: {again.show()} (a per-record size limit: "
                "accepted)",
            )
        return (
            "fail",
            f"the {size} call ran and was answered {first.show()}; its retry got another "
            f"answer, not that error: {again.show()}",
        )
    if again.same_result(first):
        return ("pass", f"a {LARGE // 1024} KiB and a {size} result were replayed whole")
    if again.rejected:
        return (
            "note",
            f"{small}; the retry of a {size} outcome was refused without running: "
            f"{again.show()} (a per-record size limit: accepted)",
        )
    return (
        "fail",
        f"the retry of a {size} outcome got another result, not the original: {again.show()} "
        "(cut short?)",
    )


SCENARIOS: list[tuple[Callable[[Context], Awaitable[Outcomes]], tuple[str, ...], str, None]] = [
    (large_outcome, ("replay-large-outcome",), "replay", None),
    (after_other_keys, ("retention-after-other-keys",), "retention", None),
    (retention, ("retention-window", "retention-window-every-outcome"), "retention", None),
]
