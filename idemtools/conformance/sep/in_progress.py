"""A duplicate of a call still running is refused at once, and nothing runs twice.

The original is a slow fixture call (`--slow-ms`); the duplicate goes out once the original is
seen executing, and a retry after it completed must get the original's result.
"""

from __future__ import annotations

import asyncio
import time

from ..contract import RECORD_SLOW
from ..scenario import Context, Outcomes, _all, _verdict
from ..wire import encode

__all__ = ["in_progress"]


async def in_progress(ctx: Context) -> Outcomes:
    checks = (
        "sep-3182-in-progress-no-second-execution",
        "sep-3182-in-progress-not-blocked",
        "sep-3182-in-progress-rejected-immediately",
        "sep-3182-in-progress-error-data",
        "sep-3182-in-progress-original-replayed",
    )
    key, label, ms = ctx.fresh("k"), ctx.fresh("slow"), ctx.slow_ms
    args = {"label": label, "ms": ms}
    original = asyncio.ensure_future(ctx.call(RECORD_SLOW, args, key))
    try:
        # Wait until the original is executing (its count is 1), however loaded the target is.
        deadline = time.monotonic() + ms / 1000 + 10
        started = False
        while time.monotonic() < deadline and not original.done():
            if await ctx.count(label) == 1:
                started = True
                break
            await asyncio.sleep(0.01)
        if not started or original.done():
            why = f"the original slow call ({ms} ms) was not seen executing; raise --slow-ms"
            return _all(checks, ("fail", why))
        patience = ms / 1000 + 10
        try:
            dup = await asyncio.wait_for(ctx.call(RECORD_SLOW, args, key), patience)
        except asyncio.TimeoutError:
            dup = None
        original_running = not original.done()
        first = await original
    finally:
        if not original.done():
            original.cancel()
    count_after = await ctx.count(label)
    retry = await ctx.call(RECORD_SLOW, args, key)  # after completion: a replay, not a run
    count_final = await ctx.count(label)
    out: Outcomes = {}
    out[checks[0]] = _verdict(
        count_after == 1 and count_final == 1,
        "one execution for the original, the in-progress duplicate and a later retry",
        f"{count_after} executions while in progress, {count_final} after a later retry",
    )
    if first.executions is None:
        out[checks[4]] = ("fail", f"the original slow call failed: {first.show()}")
    elif retry.same_result(first):
        out[checks[4]] = ("pass", "the retry after completion got the original result")
    elif retry.rejected:
        out[checks[4]] = (
            "fail",
            "the retry after the original completed was refused (the refused duplicate left the "
            f"record in progress or corrupt): {retry.show()}; the original was {first.show()}",
        )
    else:
        out[checks[4]] = (
            "fail",
            f"the retry after completion got {retry.show()}, not the original result "
            f"{first.show()}",
        )
    if dup is None:
        out[checks[1]] = ("fail", f"no answer to the duplicate within {patience:g} s")
        why = "the duplicate was blocked"
        out[checks[2]] = out[checks[3]] = ("fail", why, {"blocked_by": checks[1]})
        return out
    out[checks[1]] = ("pass", f"the duplicate was answered after {dup.elapsed * 1000:.0f} ms")
    if not dup.rejected:
        out[checks[2]] = ("fail", f"the duplicate was not refused: {dup.show()}")
    elif not original_running:
        out[checks[2]] = (
            "fail",
            f"the duplicate was answered only after the original finished ({ms} ms; a loaded "
            "target may need a larger --slow-ms)",
        )
    else:
        out[checks[2]] = ("pass", f"refused while the original ran ({dup.elapsed * 1000:.0f} ms)")
    data = dup.error_data()
    ok = data is not None and data.get("type") == "idempotency_key_in_progress"
    ok = ok and data is not None and data.get("idempotencyKey") == key
    out[checks[3]] = _verdict(
        ok,
        f"error.data = {encode(data)}",
        f"error.data does not name the case and key: {dup.show()}",
    )
    if first.executions is None:
        out[checks[0]] = ("fail", f"the original slow call failed: {first.show()}")
    return out
