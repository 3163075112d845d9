"""A key stays in progress for as long as its call runs, whatever arrives meanwhile.

The SEP's in-progress rule holds until the original call "has produced a result to record", not
for a while after it started. Implementations take shortcuts here: a claim that is a lease of a
fixed time nobody renews (a duplicate after it runs the tool again), a single-flight lock keyed
by the key *and* the arguments (a call with other arguments under the key of a running call is
not seen, and runs). One slow call (`sep3182_record_slow`, three times `--slow-ms`: 4.5 s by
default) carries duplicates sent at eight evenly spaced points of its run and, halfway, a call
under the same key with other arguments; then a retry of each after it completed. Exactly one
execution of the original, none of the other arguments, and the record is the original's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..contract import RECORD_SLOW
from ..scenario import Context, Outcome, Outcomes, Reply, _all
from ..sentences import _CONFLICT, _REPEAT, _c

__all__ = ["CHECKS", "SCENARIOS"]

SPAN = 3  # the slow call runs this many times --slow-ms
POINTS = 8  # duplicates, evenly spaced over the run
GRACE = 2.0  # seconds the kit waits for the calls sent meanwhile, once the original answered
_STILL = (
    "If a request bearing the same key is still executing — the original call has not yet "
    "produced a result to record — the server MUST NOT begin a second execution of the tool "
    "for the duplicate request"
)

CHECKS = [
    _c(
        "in-progress-late-duplicates",
        "MUST",
        _REPEAT,
        _STILL,
        "A call is still executing until it has produced its result, however long it runs: a "
        "duplicate late in the run is refused like one sent at its start (a claim that expires "
        "while the tool still runs is not in progress any more).",
    ),
    _c(
        "in-progress-conflict-not-executed",
        "MUST",
        _REPEAT,
        _CONFLICT + " / The server MUST NOT execute the tool with the new arguments",
        "The conflict rule does not wait for the original to complete: other arguments under "
        "the key of a running call are refused (as a conflict, or as in progress) and run "
        "nothing, and the record stays the original's.",
    ),
]


async def _settle(calls: list[asyncio.Future[Reply]], patience: float) -> list[Reply | None]:
    """Each call's answer; None for one that failed or was not answered within `patience`
    (then it is cancelled: a duplicate that runs again answers only after the whole run)."""
    if not calls:
        return []
    _, pending = await asyncio.wait(calls, timeout=patience)
    for call in pending:
        call.cancel()
    if pending:
        await asyncio.wait(pending)
    return [
        None if call.cancelled() or call.exception() is not None else call.result()
        for call in calls
    ]


async def in_progress_throughout(ctx: Context) -> Outcomes:
    late = "sep-3182-in-progress-late-duplicates"
    other = "sep-3182-in-progress-conflict-not-executed"
    # Three times --slow-ms, but never near the per-answer --timeout (the original must answer).
    ms = max(ctx.slow_ms, min(SPAN * ctx.slow_ms, int(ctx.wire.timeout * 750)))
    key, label, label_other = ctx.fresh("k"), ctx.fresh("long"), ctx.fresh("other")
    args: dict[str, Any] = {"label": label, "ms": ms}
    other_args: dict[str, Any] = {"label": label_other, "ms": 0, "payload": "other"}
    original = asyncio.ensure_future(ctx.call(RECORD_SLOW, args, key))
    duplicates: list[asyncio.Future[Reply]] = []
    conflicting: list[asyncio.Future[Reply]] = []
    try:
        started = time.monotonic()
        seen = False
        while time.monotonic() < started + ms / 1000 + 10 and not original.done():
            if await ctx.count(label) == 1:
                seen = True
                break
            await asyncio.sleep(0.01)
        if not seen or original.done():
            original.cancel()
            why = f"the original slow call ({ms} ms) was not seen executing; raise --slow-ms"
            return _all((late, other), ("fail", why))
        began = time.monotonic()
        step = ms / 1000 / (POINTS + 1)
        for point in range(1, POINTS + 1):
            await asyncio.sleep(max(0.0, began + point * step - time.monotonic()))
            if original.done():
                break
            duplicates.append(asyncio.ensure_future(ctx.call(RECORD_SLOW, args, key)))
            if point == POINTS // 2:
                conflicting.append(asyncio.ensure_future(ctx.call(RECORD_SLOW, other_args, key)))
        sent = len(duplicates)
        first = await original
        if not conflicting:
            await _settle(duplicates, GRACE)
            why = (
                f"the original slow call ({ms} ms) answered after {sent} of {POINTS} duplicates, "
                "before halfway: does sep3182_record_slow sleep `ms`? (raise --slow-ms if the "
                "target is loaded)"
            )
            return _all((late, other), ("fail", why))
    except BaseException:  # the run is stopping (a dead target, the deadline)
        for call in (original, *duplicates, *conflicting):
            call.cancel()
        raise
    dup_answers, [meanwhile] = await asyncio.gather(
        _settle(duplicates, GRACE), _settle(conflicting, GRACE)
    )
    count = await ctx.count(label)
    count_other = await ctx.count(label_other)
    retry = await ctx.call(RECORD_SLOW, args, key)
    again = await ctx.call(RECORD_SLOW, other_args, key)
    count_final = await ctx.count(label)
    other_final = await ctx.count(label_other)
    when = (
        f"{sent} duplicates sent {step * 1000:.0f} to {sent * step * 1000:.0f} ms after the "
        f"{ms} ms original was seen running"
    )
    out: Outcomes = {}
    out[late] = _late(first, retry, count, count_final, when, dup_answers)
    out[other] = _other(meanwhile, again, count_other, other_final, ms, GRACE)
    return out


def _late(
    first: Reply,
    retry: Reply,
    count: int | None,
    count_final: int | None,
    when: str,
    answers: list[Reply | None],
) -> Outcome:
    if first.executions is None:
        return ("fail", f"the original slow call failed: {first.show()}")
    if count != 1:
        ran = next((a for a in answers if a is not None and not a.rejected), None)
        seen = f"; a duplicate got {ran.show()}" if ran is not None else ""
        return (
            "fail",
            f"{when}: {count} executions once the original completed (the key was not held "
            f"in progress for the whole run){seen}",
        )
    if count_final != 1 or not retry.same_result(first):
        return (
            "fail",
            f"{when}: the retry after completion got {retry.show()} ({count_final} executions), "
            f"not the original {first.show()}",
        )
    refused = sum(1 for a in answers if a is not None and a.rejected)
    replayed = sum(1 for a in answers if a is not None and not a.rejected)
    seen = f"{refused} refused"
    if replayed:
        seen += f", {replayed} answered with the original result once it completed"
    if refused + replayed < len(answers):
        seen += f", {len(answers) - refused - replayed} not answered within {GRACE:g} s after it"
    return (
        "pass",
        f"{when}: one execution ({seen}); the retry after completion got the original result",
    )


def _other(
    meanwhile: Reply | None,
    again: Reply,
    count: int | None,
    count_final: int | None,
    ms: int,
    grace: float,
) -> Outcome:
    sent = f"the key of a running {ms} ms call with other arguments, halfway"
    if count != 0:
        got = meanwhile.show() if meanwhile is not None else "no answer"
        return (
            "fail",
            f"{sent}: the tool ran with the new arguments (their label's count is {count}; "
            f"the call got {got})",
        )
    if meanwhile is None:
        return (
            "fail",
            f"{sent}: no answer within {grace:g} s after the original completed (not refused)",
        )
    if not meanwhile.rejected:
        return ("fail", f"{sent}: not refused: {meanwhile.show()}")
    if count_final != 0 or not again.rejected:
        return (
            "fail",
            f"the same other arguments after the original completed: {again.show()} "
            f"({count_final} executions), not refused",
        )
    kind = meanwhile.error_type() or "no data.type"
    return (
        "pass",
        f"{sent}: refused ({kind}), nothing ran; refused again after the original completed",
    )


SCENARIOS = [
    (
        in_progress_throughout,
        ("in-progress-late-duplicates", "in-progress-conflict-not-executed"),
        "in-progress",
        None,
    )
]
