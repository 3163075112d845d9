"""Refusals say whether the request provably had no effect: `error.data.notProcessed`.

An extension beyond SEP-3182 (the MCP transports working group's error-registry draft defines
`data.notProcessed: true` as "this request provably had no effect"), so the check is INFO and
never fails a run. A server that uses it must use it truthfully: on the refusals of a request
the tool did not run for (in progress, conflict, an invalid key), never on an answer the tool
gave (a JSON-RPC error it raised) nor on a replay of a recorded outcome. A server that never sends
it made a choice the SEP leaves open: the check is skipped.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from ..contract import RECORD, RECORD_SLOW, THROW
from ..scenario import Context, Outcomes, Reply
from ..sentences import _c

__all__ = ["CHECKS", "SCENARIOS"]

HINT = "notProcessed"
CHECK = "sep-3182-not-processed-hint"

CHECKS = [
    _c(
        "not-processed-hint",
        "INFO",
        "Error data (an extension beyond SEP-3182)",
        '`data.notProcessed: true` means "this request provably had no effect" (MCP transports '
        "working group, error-registry draft)",
        "INFO: an extension beyond SEP-3182, reported and never fatal. Where a server sends "
        "it, it is on the refusals of a request the tool did not run for (in progress, "
        "conflict, invalid key) and absent from a tool's own error and from every replay.",
    ),
]

# The refusals whose request provably had no effect, when the server names them so.
_NOT_RUN = {
    "idempotency_key_in_progress": "the in-progress refusal",
    "idempotency_key_conflict": "the conflict refusal",
    "idempotency_key_invalid": "the invalid-key refusal",
}


async def _in_progress(ctx: Context) -> Reply | None:
    """A duplicate sent while the original runs; None when the original was not seen running."""
    key, label = ctx.fresh("k"), ctx.fresh("np-slow")
    args = {"label": label, "ms": ctx.slow_ms}
    original = asyncio.ensure_future(ctx.call(RECORD_SLOW, args, key))
    try:
        deadline = time.monotonic() + ctx.slow_ms / 1000 + 10
        while time.monotonic() < deadline and not original.done():
            if await ctx.count(label) == 1:
                return await ctx.call(RECORD_SLOW, args, key)
            await asyncio.sleep(0.01)
        return None
    finally:
        await original


async def not_processed_hint(ctx: Context) -> Outcomes:
    # (what was answered, the answer, whether the hint belongs there)
    seen: list[tuple[str, Reply, bool]] = []
    key, label, not_a_string = ctx.fresh("k"), ctx.fresh("np"), cast(Any, 42)
    await ctx.call(RECORD, {"label": label}, key)
    other = await ctx.call(RECORD, {"label": ctx.fresh("np")}, key)
    seen.append(("other arguments under a used key", other, True))
    invalid = await ctx.call(RECORD, {"label": ctx.fresh("np")}, not_a_string)
    seen.append(("a key that is not a string", invalid, True))
    dup = await _in_progress(ctx)
    if dup is not None:
        seen.append(("a duplicate of a running call", dup, True))
    if await ctx.has_tool(THROW):
        key, label = ctx.fresh("k"), ctx.fresh("np-throw")
        first = await ctx.call(THROW, {"label": label, "payload": "np"}, key)
        again = await ctx.call(THROW, {"label": label, "payload": "np"}, key)
        seen.append(("the tool's own JSON-RPC error (it ran)", first, False))
        seen.append(("the replay of a recorded JSON-RPC error", again, False))
    judged: list[tuple[str, Reply, bool]] = []
    for what, reply, belongs in seen:
        if belongs:
            kind = reply.error_type()
            if kind not in _NOT_RUN:
                continue  # not refused as idemtools names it: nothing to judge
            what = f"{_NOT_RUN[kind]} ({what})"
        elif reply.error is None:
            continue
        judged.append((what, reply, belongs))
    sent = [r for _, r, _ in judged if HINT in (r.error_data() or {})]
    if not sent:
        return {
            CHECK: (
                "skip",
                f"no error answer carried data.{HINT} (an extension beyond SEP-3182, not used "
                "by this server)",
            )
        }
    wrong = []
    for what, reply, belongs in judged:
        value = (reply.error_data() or {}).get(HINT, "absent")
        if belongs and value is not True:
            wrong.append(f"{what} has data.{HINT} {value!r}, not true: {reply.show()}")
        elif not belongs and HINT in (reply.error_data() or {}):
            wrong.append(f"{what} carries data.{HINT}, though the tool ran: {reply.show()}")
    if wrong:
        return {CHECK: ("fail", "; ".join(wrong))}
    return {
        CHECK: (
            "pass",
            f"data.{HINT} is true on "
            + ", ".join(w for w, _, b in judged if b)
            + (
                "; absent from " + ", ".join(w for w, _, b in judged if not b)
                if any(not b for _, _, b in judged)
                else ""
            ),
        )
    }


SCENARIOS = [(not_processed_hint, ("not-processed-hint",), "not-processed", None)]
